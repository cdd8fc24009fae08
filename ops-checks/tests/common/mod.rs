//! What both test files share: the real `helm` (built by `scripts/go-tools`), rendering
//! the chart, and the normalization under which a chart rendering and a kustomize
//! rendering of the same settings must be equal.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap()
}

pub fn chart() -> PathBuf {
    repo().join("deploy/helm/gpu-telemetry")
}

/// The `helm` the tests run: `$HELM`, else the one `scripts/go-tools` builds from
/// `cluster/helm/go.mod` (built on first use, a few minutes; `scripts/test` builds it
/// before the tests).
pub fn helm() -> &'static Path {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(h) = std::env::var_os("HELM") {
            return PathBuf::from(h);
        }
        let out = Command::new(repo().join("scripts/go-tools"))
            .args(["dir", "helm"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("scripts/go-tools: {e}"));
        assert!(
            out.status.success(),
            "these tests need Helm v4: `scripts/go-tools build helm` (Go 1.26 and the Go module proxy) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("helm")
    })
}

/// Runs helm with an empty home of its own (no repositories, no plugins, no cache of
/// the user's), with `KUBECONFIG` when given.
pub fn run_helm(args: &[&str], kubeconfig: Option<&Path>) -> Output {
    static HOME: OnceLock<tempfile::TempDir> = OnceLock::new();
    let home = HOME.get_or_init(|| tempfile::tempdir().unwrap()).path();
    let mut cmd = Command::new(helm());
    cmd.args(args)
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .env_remove("HELM_NAMESPACE")
        .stdin(Stdio::null());
    match kubeconfig {
        Some(k) => cmd.env("KUBECONFIG", k),
        None => cmd.env("KUBECONFIG", "/nonexistent"),
    };
    cmd.output().unwrap_or_else(|e| panic!("{}: {e}", helm().display()))
}

pub fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// `helm template` of the chart in `namespace` with a values file (YAML text).
pub fn template(values: &str, namespace: &str) -> Result<(String, Vec<Value>), String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).unwrap();
    let chart = chart();
    let out = run_helm(
        &["template", "gpu-telemetry", chart.to_str().unwrap(), "-n", namespace, "-f", file.to_str().unwrap()],
        None,
    );
    if !out.status.success() {
        return Err(text(&out));
    }
    let rendered = String::from_utf8(out.stdout).unwrap();
    let docs = test_support::deploy::parse_docs(&rendered);
    Ok((rendered, docs))
}

/// The values file under the chart's `ci/` (the chart-testing convention).
pub fn ci_values(name: &str) -> String {
    let path = chart().join("ci").join(format!("{name}-values.yaml"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn is_hook(doc: &Value) -> bool {
    doc["metadata"]["annotations"].get("helm.sh/hook").is_some()
}

/// The labels Helm's release adds to every object besides those of `deploy/`.
pub const RELEASE_LABELS: [&str; 3] = ["helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance"];

/// Lists Kubernetes keys by name (merge key `name`, `listType: map`): their order means
/// nothing, and kustomize's strategic merge puts a patch's entries first.
const KEYED_BY_NAME: [&str; 5] = ["env", "volumes", "volumeMounts", "containers", "ports"];

fn normalize_value(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                // An empty list or map is the field left out (kustomize leaves `env: []`
                // where a patch deleted every variable).
                .filter(|(_, v)| {
                    !(v.as_array().is_some_and(Vec::is_empty) || v.as_object().is_some_and(|m| m.is_empty()))
                })
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        // kustomize re-folds `>-` blocks with a blank line after the first; CEL
                        // reads both alike.
                        ("expression" | "messageExpression", Value::String(s)) => {
                            Value::String(s.replace("\n\n", "\n"))
                        }
                        (k, Value::Array(items)) if KEYED_BY_NAME.contains(&k) => {
                            let mut items: Vec<Value> = items.iter().map(normalize_value).collect();
                            items.sort_by_key(|i| i.to_string());
                            Value::Array(items)
                        }
                        _ => normalize_value(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalize_value).collect()),
        other => other.clone(),
    }
}

/// An object as compared between the chart and kustomize: the release labels left out,
/// lists keyed by name as sets, empty fields absent, and the adapter's rules file (which
/// the chart writes with `toYaml`) parsed.
pub fn normalize(doc: &Value) -> Value {
    let mut doc = doc.clone();
    if let Some(labels) = doc.pointer_mut("/metadata/labels").and_then(Value::as_object_mut) {
        for l in RELEASE_LABELS {
            labels.remove(l);
        }
    }
    if doc["kind"] == "ConfigMap" && doc["metadata"]["name"] == "gpu-metrics-adapter-rules" {
        if let Some(data) = doc.pointer_mut("/data").and_then(Value::as_object_mut) {
            for v in data.values_mut() {
                let parsed: serde_yaml_ng::Value = serde_yaml_ng::from_str(v.as_str().unwrap()).unwrap();
                *v = serde_json::to_value(parsed).unwrap();
            }
        }
    }
    normalize_value(&doc)
}

/// `kind namespace/name`, how objects are matched and named in messages.
pub fn key(doc: &Value) -> String {
    format!(
        "{} {}/{}",
        doc["kind"].as_str().unwrap_or("?"),
        doc["metadata"]["namespace"].as_str().unwrap_or(""),
        doc["metadata"]["name"].as_str().unwrap_or("?")
    )
}

pub fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

pub fn get<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    find(docs, kind, name).unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The first line of a JSON difference between two values, for failure messages.
pub fn first_difference(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                first_difference(
                    &format!("{path}.{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                )
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            x.iter().zip(y).enumerate().find_map(|(i, (a, b))| first_difference(&format!("{path}[{i}]"), a, b))
        }
        _ if a == b => None,
        _ => Some(format!("{path}: kustomize {a}, chart {b}")),
    }
}
