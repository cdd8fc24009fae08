//! The manifests under `deploy/`, as every overlay renders them (`kubectl kustomize`):
//! - each rendering validates against the Kubernetes 1.33 schemas
//!   (`kubernetes-validate --strict`), and the custom resources it has no schema for
//!   (ServiceMonitor, PrometheusRule, Certificate, Issuer) pass structural checks written
//!   from those CRDs' published schemas;
//! - generated objects are true to their sources: the PrometheusRule is
//!   `alerts/gpu-rules.yaml` (and passes `promtool check rules` of Prometheus 2.42 and 3.x), each dashboard ConfigMap
//!   holds its `dashboards/*.json` byte for byte, `scripts/gen-deploy --check` is clean;
//! - the ServiceMonitor selects the exporter Service and one of its ports; the plain
//!   Prometheus scrape job, run by a real Prometheus (2.42 and 3.x) on targets shaped like the rendered
//!   pods, scrapes exactly the exporter's annotated port and path;
//! - every image is `ghcr.io/gpu-telemetry/<Containerfile target>:<workspace version>`;
//! - the exporter's arguments and environment variables, in every overlay, are accepted by
//!   its own parser; its security context is the one the image is built for; only the
//!   seed's overlay sets constant labels (`--label`);
//! - the adapter's admission policy lets it create only its serving Secret.
//!
//! A missing tool fails the test with how to install it (`scripts/check-deploy` does).
//! The adapter's own flags and TLS wiring are checked in `deploy_adapter.rs` beside it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use gpu_exporter::config::Args;
use serde_json::{Value, json};
use test_support::deploy::{self, PodContext, Render};
use test_support::prometheus::{self, Flavour, Promtool};

// ---- rendering -----------------------------------------------------------------------

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap()
}

/// Runs a tool; a tool that is not installed fails the test with how to install it.
fn run(program: &str, args: &[&str], install: &str) -> Output {
    Command::new(program).args(args).stdin(Stdio::null()).output().unwrap_or_else(|e| {
        panic!("this test needs `{program}` ({e}); install it: {install} (scripts/check-deploy checks for every tool)")
    })
}

const VALIDATE_INSTALL: &str = "python3 -m pip install kubernetes-validate==1.37.0 (scripts/install-test-deps does)";

/// Every rendering of `deploy/` (the shared `test_support::deploy`), made once.
fn renders() -> &'static [Render] {
    static RENDERS: OnceLock<Vec<Render>> = OnceLock::new();
    RENDERS.get_or_init(|| deploy::renders(&repo()))
}

fn render(name: &str) -> &'static Render {
    renders().iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no rendering {name}"))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn all<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    docs.iter().filter(move |d| d["kind"] == kind)
}

fn daemonset(r: &Render) -> &Value {
    find(&r.docs, "DaemonSet", "gpu-exporter").unwrap_or_else(|| panic!("{}: no DaemonSet gpu-exporter", r.name))
}

fn exporter_container(r: &Render) -> &Value {
    let containers = daemonset(r)["spec"]["template"]["spec"]["containers"].as_array().unwrap();
    containers
        .iter()
        .find(|c| c["name"] == "gpu-exporter")
        .unwrap_or_else(|| panic!("{}: no gpu-exporter container", r.name))
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap()).collect()).unwrap_or_default()
}

// ---- Kubernetes schemas --------------------------------------------------------------

/// Custom resource kinds kubernetes-validate has no schema for, and our structural check.
fn crd_check(doc: &Value) -> Option<Vec<String>> {
    match (doc["apiVersion"].as_str()?, doc["kind"].as_str()?) {
        ("monitoring.coreos.com/v1", "ServiceMonitor") => Some(crd::service_monitor(doc)),
        ("monitoring.coreos.com/v1", "PrometheusRule") => Some(crd::prometheus_rule(doc)),
        ("cert-manager.io/v1", "Certificate") => Some(crd::certificate(doc)),
        ("cert-manager.io/v1", "Issuer") => Some(crd::issuer(doc)),
        _ => None,
    }
}

fn kubernetes_validate(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, text).unwrap();
    let program = std::env::var("KUBERNETES_VALIDATE").unwrap_or_else(|_| "kubernetes-validate".into());
    let out = run(&program, &["--strict", "-k", "1.33.0", file.to_str().unwrap()], VALIDATE_INSTALL);
    let report = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), report)
}

#[test]
fn every_overlay_validates_against_kubernetes_1_33_and_the_crds() {
    // The validator really is strict and really has 1.33 schemas: a stray field fails.
    let (ok, report) = kubernetes_validate(
        "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {ports: [{port: 1}], clusterIp: None}\n",
    );
    assert!(!ok && report.contains("clusterIp"), "kubernetes-validate accepted an unknown field:\n{report}");

    for r in renders() {
        let (ok, report) = kubernetes_validate(&r.text);
        assert!(ok && !report.contains("ERROR"), "{}: kubernetes-validate failed:\n{report}", r.name);
        let passed: BTreeSet<String> = report
            .lines()
            .filter_map(|l| l.split(" passed for resource ").nth(1))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_owned)
            .collect();
        let mut checked_kinds = BTreeSet::new();
        for doc in &r.docs {
            let kind = doc["kind"].as_str().unwrap();
            let name = doc["metadata"]["name"].as_str().unwrap();
            if let Some(errors) = crd_check(doc) {
                assert!(errors.is_empty(), "{}: {kind} {name} does not match its CRD:\n{}", r.name, errors.join("\n"));
                checked_kinds.insert(kind.to_owned());
            } else {
                let key = format!("{}/{name}", kind.to_lowercase());
                assert!(passed.contains(&key), "{}: {kind} {name} was not validated:\n{report}", r.name);
            }
        }
        // A kind the validator has no schema for must be one we check ourselves.
        for line in report.lines().filter(|l| l.contains("Couldn't find schema")) {
            let kind = line.split("for kind ").nth(1).and_then(|s| s.split(' ').next()).unwrap();
            assert!(checked_kinds.contains(kind), "{}: no schema and no structural check for {kind}: {line}", r.name);
        }
    }
}

/// Structural checks of the custom resources we ship, from the published CRD schemas
/// (monitoring.coreos.com/v1 of prometheus-operator, cert-manager.io/v1) and the rules
/// their admission webhooks add. Unknown fields are errors (the API server would prune
/// them, and `kubectl apply --validate=strict` refuses them).
mod crd {
    use serde_json::{Map, Value};

    type Errors = Vec<String>;

    fn object<'a>(
        e: &mut Errors,
        v: &'a Value,
        path: &str,
        required: &[&str],
        known: &[&str],
    ) -> Option<&'a Map<String, Value>> {
        let Some(map) = v.as_object() else {
            e.push(format!("{path}: expected an object, got {v}"));
            return None;
        };
        for key in required {
            if !map.contains_key(*key) {
                e.push(format!("{path}.{key}: required"));
            }
        }
        for key in map.keys() {
            if !known.contains(&key.as_str()) {
                e.push(format!("{path}.{key}: unknown field"));
            }
        }
        Some(map)
    }

    fn string<'a>(e: &mut Errors, v: Option<&'a Value>, path: &str) -> Option<&'a str> {
        let v = v?;
        let s = v.as_str();
        if s.is_none() {
            e.push(format!("{path}: expected a string, got {v}"));
        }
        s
    }

    fn boolean(e: &mut Errors, v: Option<&Value>, path: &str) {
        if let Some(v) = v.filter(|v| !v.is_boolean()) {
            e.push(format!("{path}: expected a boolean, got {v}"));
        }
    }

    fn integer(e: &mut Errors, v: Option<&Value>, path: &str) {
        if let Some(v) = v.filter(|v| !v.is_i64()) {
            e.push(format!("{path}: expected an integer, got {v}"));
        }
    }

    fn one_of(e: &mut Errors, v: Option<&Value>, path: &str, allowed: &[&str]) {
        if let Some(s) = string(e, v, path).filter(|s| !allowed.contains(s)) {
            e.push(format!("{path}: {s:?} is not one of {allowed:?}"));
        }
    }

    fn list<'a>(e: &mut Errors, v: Option<&'a Value>, path: &str) -> &'a [Value] {
        match v {
            None => &[],
            Some(Value::Array(a)) => a,
            Some(v) => {
                e.push(format!("{path}: expected a list, got {v}"));
                &[]
            }
        }
    }

    fn string_list(e: &mut Errors, v: Option<&Value>, path: &str) {
        for (i, item) in list(e, v, path).iter().enumerate() {
            string(e, Some(item), &format!("{path}[{i}]"));
        }
    }

    fn string_map(e: &mut Errors, v: Option<&Value>, path: &str) {
        let Some(v) = v else { return };
        match v.as_object() {
            Some(map) => map.iter().for_each(|(k, v)| {
                string(e, Some(v), &format!("{path}.{k}"));
            }),
            None => e.push(format!("{path}: expected a map of strings, got {v}")),
        }
    }

    fn pattern(e: &mut Errors, v: Option<&Value>, path: &str, re: &str) {
        if let Some(s) = string(e, v, path) {
            if !regex::Regex::new(re).unwrap().is_match(s) {
                e.push(format!("{path}: {s:?} does not match {re}"));
            }
        }
    }

    /// monitoring.coreos.com `Duration`.
    const PROM_DURATION: &str =
        r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$";
    /// Go's time.ParseDuration (cert-manager's metav1.Duration).
    const GO_DURATION: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
    const LABEL_NAME: &str = r"^[a-zA-Z_][a-zA-Z0-9_]*$";

    fn metadata(e: &mut Errors, doc: &Value, api_version: &str, kind: &str) {
        if doc["apiVersion"] != api_version || doc["kind"] != kind {
            e.push(format!("expected {api_version} {kind}, got {} {}", doc["apiVersion"], doc["kind"]));
        }
        object(e, doc, "", &["apiVersion", "kind", "metadata", "spec"], &["apiVersion", "kind", "metadata", "spec"]);
        // Namespaced kinds: we name the namespace ourselves (no namespace transformer).
        string(e, Some(&doc["metadata"]["name"]), "metadata.name");
        if string(e, doc["metadata"].get("namespace"), "metadata.namespace").is_none() {
            e.push("metadata.namespace: a namespaced resource should name its namespace".into());
        }
        string_map(e, doc["metadata"].get("labels"), "metadata.labels");
        string_map(e, doc["metadata"].get("annotations"), "metadata.annotations");
    }

    fn label_selector(e: &mut Errors, v: &Value, path: &str) {
        let Some(map) = object(e, v, path, &[], &["matchLabels", "matchExpressions"]) else { return };
        string_map(e, map.get("matchLabels"), &format!("{path}.matchLabels"));
        for (i, x) in list(e, map.get("matchExpressions"), &format!("{path}.matchExpressions")).iter().enumerate() {
            let p = format!("{path}.matchExpressions[{i}]");
            if let Some(x) = object(e, x, &p, &["key", "operator"], &["key", "operator", "values"]) {
                string(e, x.get("key"), &format!("{p}.key"));
                one_of(e, x.get("operator"), &format!("{p}.operator"), &["In", "NotIn", "Exists", "DoesNotExist"]);
                string_list(e, x.get("values"), &format!("{p}.values"));
            }
        }
    }

    const RELABEL_ACTIONS: &[&str] = &[
        "replace",
        "Replace",
        "keep",
        "Keep",
        "drop",
        "Drop",
        "hashmod",
        "HashMod",
        "labelmap",
        "LabelMap",
        "labeldrop",
        "LabelDrop",
        "labelkeep",
        "LabelKeep",
        "lowercase",
        "Lowercase",
        "uppercase",
        "Uppercase",
        "keepequal",
        "KeepEqual",
        "dropequal",
        "DropEqual",
    ];

    fn relabelings(e: &mut Errors, v: Option<&Value>, path: &str) {
        for (i, r) in list(e, v, path).iter().enumerate() {
            let p = format!("{path}[{i}]");
            let known = ["action", "modulus", "regex", "replacement", "separator", "sourceLabels", "targetLabel"];
            let Some(r) = object(e, r, &p, &[], &known) else { continue };
            one_of(e, r.get("action"), &format!("{p}.action"), RELABEL_ACTIONS);
            for (j, l) in list(e, r.get("sourceLabels"), &format!("{p}.sourceLabels")).iter().enumerate() {
                pattern(e, Some(l), &format!("{p}.sourceLabels[{j}]"), LABEL_NAME);
            }
            for key in ["regex", "replacement", "separator", "targetLabel"] {
                string(e, r.get(key), &format!("{p}.{key}"));
            }
            if let Some(re) = string(e, r.get("regex"), &format!("{p}.regex")) {
                if regex::Regex::new(&format!("^(?:{re})$")).is_err() {
                    e.push(format!("{p}.regex: {re:?} is not a valid RE2 expression"));
                }
            }
            integer(e, r.get("modulus"), &format!("{p}.modulus"));
        }
    }

    /// monitoring.coreos.com/v1 ServiceMonitor.
    pub fn service_monitor(doc: &Value) -> Vec<String> {
        let mut e = Vec::new();
        metadata(&mut e, doc, "monitoring.coreos.com/v1", "ServiceMonitor");
        const SPEC: &[&str] = &[
            "attachMetadata",
            "bodySizeLimit",
            "convertClassicHistogramsToNHCB",
            "endpoints",
            "fallbackScrapeProtocol",
            "jobLabel",
            "keepDroppedTargets",
            "labelLimit",
            "labelNameLengthLimit",
            "labelValueLengthLimit",
            "namespaceSelector",
            "nativeHistogramBucketLimit",
            "nativeHistogramMinBucketFactor",
            "podTargetLabels",
            "sampleLimit",
            "scrapeClass",
            "scrapeClassicHistograms",
            "scrapeProtocols",
            "selector",
            "selectorMechanism",
            "serviceDiscoveryRole",
            "targetLabels",
            "targetLimit",
        ];
        // The schema requires selector; we rely on endpoints too.
        let Some(spec) = object(&mut e, &doc["spec"], "spec", &["selector", "endpoints"], SPEC) else { return e };
        if let Some(s) = spec.get("selector") {
            label_selector(&mut e, s, "spec.selector");
        }
        if let Some(ns) = spec.get("namespaceSelector") {
            if let Some(ns) = object(&mut e, ns, "spec.namespaceSelector", &[], &["any", "matchNames"]) {
                boolean(&mut e, ns.get("any"), "spec.namespaceSelector.any");
                string_list(&mut e, ns.get("matchNames"), "spec.namespaceSelector.matchNames");
            }
        }
        string(&mut e, spec.get("jobLabel"), "spec.jobLabel");
        const ENDPOINT: &[&str] = &[
            "authorization",
            "basicAuth",
            "bearerTokenFile",
            "bearerTokenSecret",
            "enableHttp2",
            "filterRunning",
            "followRedirects",
            "honorLabels",
            "honorTimestamps",
            "interval",
            "metricRelabelings",
            "noProxy",
            "oauth2",
            "params",
            "path",
            "port",
            "proxyConnectHeader",
            "proxyFromEnvironment",
            "proxyUrl",
            "relabelings",
            "scheme",
            "scrapeTimeout",
            "targetPort",
            "tlsConfig",
            "trackTimestampsStaleness",
        ];
        let endpoints = list(&mut e, spec.get("endpoints"), "spec.endpoints");
        if endpoints.is_empty() {
            e.push("spec.endpoints: at least one endpoint".into());
        }
        for (i, ep) in endpoints.iter().enumerate() {
            let p = format!("spec.endpoints[{i}]");
            let Some(ep) = object(&mut e, ep, &p, &[], ENDPOINT) else { continue };
            if !ep.contains_key("port") && !ep.contains_key("targetPort") {
                e.push(format!("{p}: port or targetPort is needed to pick the Service port"));
            }
            string(&mut e, ep.get("port"), &format!("{p}.port"));
            if let Some(t) = ep.get("targetPort").filter(|t| !t.is_string() && !t.is_i64()) {
                e.push(format!("{p}.targetPort: expected an integer or a string, got {t}"));
            }
            string(&mut e, ep.get("path"), &format!("{p}.path"));
            one_of(&mut e, ep.get("scheme"), &format!("{p}.scheme"), &["http", "https", "HTTP", "HTTPS"]);
            pattern(&mut e, ep.get("interval"), &format!("{p}.interval"), PROM_DURATION);
            pattern(&mut e, ep.get("scrapeTimeout"), &format!("{p}.scrapeTimeout"), PROM_DURATION);
            boolean(&mut e, ep.get("honorLabels"), &format!("{p}.honorLabels"));
            boolean(&mut e, ep.get("honorTimestamps"), &format!("{p}.honorTimestamps"));
            relabelings(&mut e, ep.get("relabelings"), &format!("{p}.relabelings"));
            relabelings(&mut e, ep.get("metricRelabelings"), &format!("{p}.metricRelabelings"));
        }
        e
    }

    /// monitoring.coreos.com/v1 PrometheusRule.
    pub fn prometheus_rule(doc: &Value) -> Vec<String> {
        let mut e = Vec::new();
        metadata(&mut e, doc, "monitoring.coreos.com/v1", "PrometheusRule");
        let Some(spec) = object(&mut e, &doc["spec"], "spec", &["groups"], &["groups"]) else { return e };
        let groups = list(&mut e, spec.get("groups"), "spec.groups");
        let mut names = std::collections::BTreeSet::new();
        for (i, g) in groups.iter().enumerate() {
            let p = format!("spec.groups[{i}]");
            let known = ["interval", "labels", "limit", "name", "partial_response_strategy", "query_offset", "rules"];
            let Some(g) = object(&mut e, g, &p, &["name"], &known) else { continue };
            if let Some(name) = string(&mut e, g.get("name"), &format!("{p}.name")) {
                if name.is_empty() || !names.insert(name.to_owned()) {
                    e.push(format!("{p}.name: {name:?} is empty or not unique"));
                }
            }
            pattern(&mut e, g.get("interval"), &format!("{p}.interval"), PROM_DURATION);
            pattern(&mut e, g.get("query_offset"), &format!("{p}.query_offset"), PROM_DURATION);
            integer(&mut e, g.get("limit"), &format!("{p}.limit"));
            string_map(&mut e, g.get("labels"), &format!("{p}.labels"));
            for (j, r) in list(&mut e, g.get("rules"), &format!("{p}.rules")).iter().enumerate() {
                let p = format!("{p}.rules[{j}]");
                let known = ["alert", "annotations", "expr", "for", "keep_firing_for", "labels", "record"];
                let Some(r) = object(&mut e, r, &p, &["expr"], &known) else { continue };
                if let Some(x) = r.get("expr").filter(|x| !x.is_string() && !x.is_i64()) {
                    e.push(format!("{p}.expr: expected a string or an integer, got {x}"));
                }
                if r.contains_key("alert") == r.contains_key("record") {
                    e.push(format!("{p}: exactly one of alert and record"));
                }
                string(&mut e, r.get("alert"), &format!("{p}.alert"));
                string(&mut e, r.get("record"), &format!("{p}.record"));
                pattern(&mut e, r.get("for"), &format!("{p}.for"), PROM_DURATION);
                pattern(&mut e, r.get("keep_firing_for"), &format!("{p}.keep_firing_for"), PROM_DURATION);
                string_map(&mut e, r.get("labels"), &format!("{p}.labels"));
                string_map(&mut e, r.get("annotations"), &format!("{p}.annotations"));
            }
        }
        e
    }

    const USAGES: &[&str] = &[
        "signing",
        "digital signature",
        "content commitment",
        "key encipherment",
        "key agreement",
        "data encipherment",
        "cert sign",
        "crl sign",
        "encipher only",
        "decipher only",
        "any",
        "server auth",
        "client auth",
        "code signing",
        "email protection",
        "s/mime",
        "ipsec end system",
        "ipsec tunnel",
        "ipsec user",
        "timestamping",
        "ocsp signing",
        "microsoft sgc",
        "netscape sgc",
    ];

    fn go_seconds(s: &str) -> f64 {
        let re = regex::Regex::new(r"([0-9.]+)(ns|us|µs|ms|s|m|h)").unwrap();
        re.captures_iter(s)
            .map(|c| {
                let n: f64 = c[1].parse().unwrap();
                n * match &c[2] {
                    "ns" => 1e-9,
                    "us" | "µs" => 1e-6,
                    "ms" => 1e-3,
                    "s" => 1.0,
                    "m" => 60.0,
                    _ => 3600.0,
                }
            })
            .sum()
    }

    /// cert-manager.io/v1 Certificate.
    pub fn certificate(doc: &Value) -> Vec<String> {
        let mut e = Vec::new();
        metadata(&mut e, doc, "cert-manager.io/v1", "Certificate");
        const SPEC: &[&str] = &[
            "additionalOutputFormats",
            "commonName",
            "dnsNames",
            "duration",
            "emailAddresses",
            "encodeUsagesInRequest",
            "ipAddresses",
            "isCA",
            "issuerRef",
            "keystores",
            "literalSubject",
            "nameConstraints",
            "otherNames",
            "privateKey",
            "renewBefore",
            "renewBeforePercentage",
            "revisionHistoryLimit",
            "secretName",
            "secretTemplate",
            "subject",
            "uris",
            "usages",
        ];
        let Some(spec) = object(&mut e, &doc["spec"], "spec", &["issuerRef", "secretName"], SPEC) else { return e };
        string(&mut e, spec.get("secretName"), "spec.secretName");
        if let Some(r) = spec.get("issuerRef") {
            if let Some(r) = object(&mut e, r, "spec.issuerRef", &["name"], &["group", "kind", "name"]) {
                for key in ["group", "kind", "name"] {
                    string(&mut e, r.get(key), &format!("spec.issuerRef.{key}"));
                }
            }
        }
        if let Some(cn) = string(&mut e, spec.get("commonName"), "spec.commonName") {
            if cn.len() > 64 {
                e.push("spec.commonName: longer than 64 characters".into());
            }
        }
        string_list(&mut e, spec.get("dnsNames"), "spec.dnsNames");
        string_list(&mut e, spec.get("ipAddresses"), "spec.ipAddresses");
        boolean(&mut e, spec.get("isCA"), "spec.isCA");
        pattern(&mut e, spec.get("duration"), "spec.duration", GO_DURATION);
        pattern(&mut e, spec.get("renewBefore"), "spec.renewBefore", GO_DURATION);
        for (i, u) in list(&mut e, spec.get("usages"), "spec.usages").iter().enumerate() {
            one_of(&mut e, Some(u), &format!("spec.usages[{i}]"), USAGES);
        }
        if let Some(k) = spec.get("privateKey") {
            let known = ["algorithm", "encoding", "rotationPolicy", "size"];
            if let Some(k) = object(&mut e, k, "spec.privateKey", &[], &known) {
                one_of(&mut e, k.get("algorithm"), "spec.privateKey.algorithm", &["RSA", "ECDSA", "Ed25519"]);
                one_of(&mut e, k.get("encoding"), "spec.privateKey.encoding", &["PKCS1", "PKCS8"]);
                one_of(&mut e, k.get("rotationPolicy"), "spec.privateKey.rotationPolicy", &["Never", "Always"]);
                integer(&mut e, k.get("size"), "spec.privateKey.size");
                // The webhook: ECDSA sizes are curve sizes.
                if k.get("algorithm").and_then(Value::as_str) == Some("ECDSA") {
                    if let Some(size) = k.get("size").and_then(Value::as_i64).filter(|s| ![256, 384, 521].contains(s)) {
                        e.push(format!("spec.privateKey.size: ECDSA takes 256, 384 or 521, not {size}"));
                    }
                }
            }
        }
        // The webhook: a certificate names something, and renews before it expires.
        let names = ["commonName", "dnsNames", "uris", "emailAddresses", "ipAddresses", "literalSubject", "otherNames"];
        if !names.iter().any(|k| spec.contains_key(*k)) {
            e.push(
                "spec: at least one of commonName, dnsNames, uris, emailAddresses, ipAddresses, literalSubject".into(),
            );
        }
        let secs = |k: &str| spec.get(k).and_then(Value::as_str).map(go_seconds);
        if let (Some(d), Some(r)) = (secs("duration").or(Some(90.0 * 24.0 * 3600.0)), secs("renewBefore")) {
            if r >= d {
                e.push("spec.renewBefore: must be shorter than spec.duration".into());
            }
        }
        e
    }

    /// cert-manager.io/v1 Issuer (the kinds of issuer we use: selfSigned and ca).
    pub fn issuer(doc: &Value) -> Vec<String> {
        let mut e = Vec::new();
        metadata(&mut e, doc, "cert-manager.io/v1", "Issuer");
        let kinds = ["acme", "ca", "selfSigned", "vault", "venafi"];
        let Some(spec) = object(&mut e, &doc["spec"], "spec", &[], &kinds) else { return e };
        if spec.len() != 1 {
            e.push(format!("spec: exactly one of {kinds:?}, got {:?}", spec.keys().collect::<Vec<_>>()));
        }
        if let Some(ca) = spec.get("ca") {
            let known = ["crlDistributionPoints", "issuingCertificateURLs", "ocspServers", "secretName"];
            if let Some(ca) = object(&mut e, ca, "spec.ca", &["secretName"], &known) {
                string(&mut e, ca.get("secretName"), "spec.ca.secretName");
            }
        }
        if let Some(s) = spec.get("selfSigned") {
            if let Some(s) = object(&mut e, s, "spec.selfSigned", &[], &["crlDistributionPoints"]) {
                string_list(&mut e, s.get("crlDistributionPoints"), "spec.selfSigned.crlDistributionPoints");
            }
        }
        e
    }
}

/// The structural checks refuse what the CRDs refuse (so a green run means something).
#[test]
fn the_crd_checks_refuse_broken_objects() {
    let docs = &render("deploy/overlays/prometheus-operator").docs;
    let cm = &render("deploy/overlays/cert-manager").docs;
    let monitor = all(docs, "ServiceMonitor").next().unwrap().clone();
    let rule = all(docs, "PrometheusRule").next().unwrap().clone();
    let certificate = all(cm, "Certificate").next().unwrap().clone();
    let issuer = all(cm, "Issuer").next().unwrap().clone();
    let broken = |doc: &Value, pointer: &str, value: Option<Value>| {
        let check: fn(&Value) -> Vec<String> = match doc["kind"].as_str().unwrap() {
            "ServiceMonitor" => crd::service_monitor,
            "PrometheusRule" => crd::prometheus_rule,
            "Certificate" => crd::certificate,
            _ => crd::issuer,
        };
        assert_eq!(check(doc), Vec::<String>::new());
        let mut doc = doc.clone();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let parent = doc.pointer_mut(parent).unwrap_or_else(|| panic!("{pointer}"));
        match (value, parent) {
            (Some(v), Value::Object(m)) => {
                m.insert(key.to_owned(), v);
            }
            (Some(v), Value::Array(a)) => a[key.parse::<usize>().unwrap()] = v,
            (None, Value::Object(m)) => {
                m.remove(key);
            }
            _ => unreachable!(),
        }
        check(&doc)
    };
    for (doc, pointer, value) in [
        (&monitor, "/spec/selector", None),
        (&monitor, "/spec/selector/matchLabels", Some(json!(["a"]))),
        (&monitor, "/spec/endpoints/0/honorLabels", Some(json!("true"))),
        (&monitor, "/spec/endpoints/0/interval", Some(json!("15 seconds"))),
        (&monitor, "/spec/endpoints/0/scheme", Some(json!("tcp"))),
        (&monitor, "/spec/endpoints/0/portName", Some(json!("metrics"))),
        (&monitor, "/spec/endpoints/0/relabelings/0/action", Some(json!("delete"))),
        (&monitor, "/spec/namespaceSelector/matchNames", Some(json!("gpu-telemetry"))),
        (&monitor, "/kind", Some(json!("PodMonitor"))),
        (&rule, "/spec/groups/0/rules/0/expr", None),
        (&rule, "/spec/groups/0/rules/0/alert", Some(json!("AndARecord"))),
        (&rule, "/spec/groups/1/rules/0/for", Some(json!("five minutes"))),
        (&rule, "/spec/groups/1/name", Some(rule["spec"]["groups"][0]["name"].clone())),
        (&rule, "/spec/groups/0/rules", Some(json!({"record": "x"}))),
        (&certificate, "/spec/secretName", None),
        (&certificate, "/spec/issuerRef/name", None),
        (&certificate, "/spec/isCA", Some(json!("yes"))),
        (&certificate, "/spec/dnsNames", Some(json!("gpu-metrics-adapter"))),
        (&certificate, "/spec/privateKey/algorithm", Some(json!("DSA"))),
        (&certificate, "/spec/duration", Some(json!("90d"))),
        (&certificate, "/apiVersion", Some(json!("cert-manager.io/v1alpha2"))),
        (&issuer, "/spec/acme", Some(json!({}))),
        (&issuer, "/spec/selfsigned", Some(json!({}))),
    ] {
        assert!(!broken(doc, pointer, value.clone()).is_empty(), "{} with {pointer} = {value:?} passed", doc["kind"]);
    }
    for ca in all(cm, "Issuer").filter(|i| i["spec"]["ca"].is_object()) {
        assert!(!broken(ca, "/spec/ca/secretName", None).is_empty());
    }
}

// ---- generated objects ---------------------------------------------------------------

const REGENERATE: &str = "run scripts/gen-deploy and commit deploy/components/prometheus-operator/generated/";

fn yaml_file(path: &Path) -> Value {
    serde_json::to_value(
        serde_yaml_ng::from_str::<serde_yaml_ng::Value>(&std::fs::read_to_string(path).unwrap()).unwrap(),
    )
    .unwrap()
}

/// Renderings that carry the prometheus-operator objects.
fn with_operator() -> Vec<&'static Render> {
    let found: Vec<_> =
        renders().iter().filter(|r| find(&r.docs, "ServiceMonitor", "gpu-exporter").is_some()).collect();
    assert!(found.iter().any(|r| r.name == "deploy/overlays/prometheus-operator"));
    found
}

#[test]
fn the_prometheus_rule_is_alerts_gpu_rules_and_promtool_accepts_it() {
    let source = yaml_file(&repo().join("alerts/gpu-rules.yaml"));
    for r in with_operator() {
        let rules: Vec<_> = all(&r.docs, "PrometheusRule").collect();
        assert_eq!(rules.len(), 1, "{}: one PrometheusRule", r.name);
        let rule = rules[0];
        assert_eq!(rule["metadata"]["namespace"], "gpu-telemetry", "{}", r.name);
        assert!(
            rule["spec"] == source,
            "{}: the PrometheusRule's spec differs from alerts/gpu-rules.yaml: {REGENERATE}",
            r.name
        );

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("prometheus-rule-spec.yaml");
        std::fs::write(&file, serde_yaml_ng::to_string(&rule["spec"]).unwrap()).unwrap();
        for flavour in Flavour::ALL {
            let run = Promtool::new(flavour).args(["check", "rules"]).arg(&file).run();
            assert!(
                run.success,
                "{}: {flavour}: promtool check rules refused the PrometheusRule's spec:\n{}",
                r.name, run.report
            );
        }
    }
}

#[test]
fn each_dashboard_has_a_config_map_holding_it_byte_for_byte() {
    let dir = repo().join("dashboards");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    for r in with_operator() {
        let maps: Vec<_> =
            all(&r.docs, "ConfigMap").filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1").collect();
        assert_eq!(
            maps.len(),
            files.len(),
            "{}: one dashboard ConfigMap per file in dashboards/: {REGENERATE}",
            r.name
        );
        for file in &files {
            let key = file.file_name().unwrap().to_str().unwrap();
            let want = std::fs::read_to_string(file).unwrap();
            let holders: Vec<_> = maps.iter().filter(|c| c["data"].get(key).is_some()).collect();
            assert_eq!(
                holders.len(),
                1,
                "{}: no (or more than one) ConfigMap holds dashboards/{key}: {REGENERATE}",
                r.name
            );
            let map = holders[0];
            assert_eq!(map["data"].as_object().unwrap().len(), 1, "{}: one dashboard per ConfigMap", r.name);
            assert!(
                map["data"][key].as_str() == Some(want.as_str()),
                "{}: dashboards/{key} changed: {REGENERATE}",
                r.name
            );
            assert_eq!(map["metadata"]["namespace"], "gpu-telemetry");
            // Room for `kubectl apply`'s last-applied annotation (262144 bytes), with margin.
            assert!(want.len() < 200_000, "dashboards/{key} is too large for a client-side-applied ConfigMap");
        }
    }
}

#[test]
fn gen_deploy_check_finds_the_generated_files_current() {
    let script = repo().join("scripts/gen-deploy");
    let out = run("python3", &[script.to_str().unwrap(), "--check"], "apt-get install -y python3");
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
}

// ---- Prometheus integration ----------------------------------------------------------

fn exporter_service(r: &Render) -> &Value {
    find(&r.docs, "Service", "gpu-exporter").unwrap_or_else(|| panic!("{}: no Service gpu-exporter", r.name))
}

/// Whether a Service's `targetPort` (a name or a number) is one of `container`'s ports.
fn is_container_port(container: &Value, target: &Value) -> bool {
    container["ports"].as_array().unwrap().iter().any(|p| p["name"] == *target || p["containerPort"] == *target)
}

fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"].as_object().is_some_and(|m| !m.is_empty() && m.iter().all(|(k, v)| labels[k] == *v))
        && selector.get("matchExpressions").is_none()
}

#[test]
fn the_service_monitor_scrapes_the_exporter_service_and_keeps_its_labels() {
    for r in with_operator() {
        let monitor = find(&r.docs, "ServiceMonitor", "gpu-exporter").unwrap();
        let service = exporter_service(r);
        let namespace = service["metadata"]["namespace"].as_str().unwrap();
        assert_eq!(
            monitor["metadata"]["namespace"], namespace,
            "{}: the ServiceMonitor lives beside the Service",
            r.name
        );
        assert_eq!(strings(&monitor["spec"]["namespaceSelector"]["matchNames"]), vec![namespace], "{}", r.name);

        // The selector picks the exporter Service and no other Service of the namespace.
        let selector = &monitor["spec"]["selector"];
        let picked: Vec<_> = all(&r.docs, "Service")
            .filter(|s| s["metadata"]["namespace"] == namespace && selects(selector, &s["metadata"]["labels"]))
            .map(|s| s["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(picked, vec!["gpu-exporter"], "{}: the ServiceMonitor's selector picks {picked:?}", r.name);

        // Its port is a named port of that Service, which leads to the exporter's metrics port.
        let container = exporter_container(r);
        for ep in monitor["spec"]["endpoints"].as_array().unwrap() {
            let port = ep["port"].as_str().unwrap();
            let service_port = service["spec"]["ports"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["name"] == port)
                .unwrap_or_else(|| panic!("{}: the Service has no port named {port}", r.name));
            let target = &service_port["targetPort"];
            assert!(
                is_container_port(container, target),
                "{}: Service port {port} leads to {target}, not a port of the exporter",
                r.name
            );
            assert_eq!(ep["honorLabels"], true, "{}: the exporter's namespace/pod labels must survive", r.name);
            assert_eq!(ep["path"], "/metrics");
            // The target labels that would describe the exporter pod are dropped.
            let dropped = ep["relabelings"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|x| x["action"] == "labeldrop")
                .map(|x| regex::Regex::new(&format!("^(?:{})$", x["regex"].as_str().unwrap())).unwrap())
                .collect::<Vec<_>>();
            for label in ["namespace", "pod", "container"] {
                assert!(dropped.iter().any(|re| re.is_match(label)), "{}: target label {label} is not dropped", r.name);
            }
        }
    }
}

/// components/dcgm-exporter-names: both namings, behind a Service and a ServiceMonitor
/// shaped as the GPU operator's for dcgm-exporter (NVIDIA/gpu-operator
/// `assets/state-dcgm-exporter/0400_service.yaml`, `0500_service_monitor.yaml`), which
/// lead to the exporter's metrics port and are not scraped twice.
#[test]
fn the_dcgm_exporter_component_serves_both_namings_behind_the_gpu_operators_service() {
    let with: Vec<&Render> =
        renders().iter().filter(|r| find(&r.docs, "Service", "nvidia-dcgm-exporter").is_some()).collect();
    assert!(with.iter().any(|r| r.name == "deploy/overlays/dcgm-exporter"), "the overlay renders the component");
    let command = Args::command();
    for r in with {
        let argv = exporter_argv(r, &command);
        let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{}: {argv:?}: {e}", r.name));
        assert_eq!(args.naming, gpu_exporter::render::Naming::Both, "{}: {argv:?}", r.name);

        let service = find(&r.docs, "Service", "nvidia-dcgm-exporter").unwrap();
        assert_eq!(service["metadata"]["labels"]["app"], "nvidia-dcgm-exporter", "{}", r.name);
        assert_eq!(service["metadata"]["annotations"]["prometheus.io/scrape"], "true", "{}", r.name);
        let port = &service["spec"]["ports"][0];
        assert_eq!((port["name"].as_str(), port["port"].as_i64()), (Some("gpu-metrics"), Some(9400)), "{}", r.name);
        let pod_labels = &daemonset(r)["spec"]["template"]["metadata"]["labels"];
        assert!(
            service["spec"]["selector"].as_object().unwrap().iter().all(|(k, v)| pod_labels[k] == *v),
            "{}: the Service selects the exporter pods",
            r.name
        );
        let container = exporter_container(r);
        let target = &port["targetPort"];
        assert!(
            is_container_port(container, target),
            "{}: gpu-metrics leads to {target}, not a port of the exporter",
            r.name
        );

        let monitor = find(&r.docs, "ServiceMonitor", "nvidia-dcgm-exporter").unwrap();
        assert_eq!(monitor["spec"]["jobLabel"], "app", "{}: job=\"nvidia-dcgm-exporter\" as before", r.name);
        assert_eq!(monitor["spec"]["endpoints"][0]["port"], "gpu-metrics", "{}", r.name);
        // Every ServiceMonitor of the rendering picks a different Service: no double scrape.
        let mut picked = Vec::new();
        for m in all(&r.docs, "ServiceMonitor") {
            let namespaces = strings(&m["spec"]["namespaceSelector"]["matchNames"]);
            picked.extend(
                all(&r.docs, "Service")
                    .filter(|s| namespaces.contains(&s["metadata"]["namespace"].as_str().unwrap()))
                    .filter(|s| selects(&m["spec"]["selector"], &s["metadata"]["labels"]))
                    .map(|s| s["metadata"]["name"].as_str().unwrap()),
            );
        }
        let before = picked.len();
        picked.sort();
        picked.dedup();
        assert_eq!(picked.len(), before, "{}: a Service scraped by two ServiceMonitors: {picked:?}", r.name);
        assert!(picked.contains(&"nvidia-dcgm-exporter"), "{}", r.name);
    }
}

fn sanitize(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

#[test]
fn the_scrape_config_scrapes_the_exporter_pods_at_their_annotated_port_and_path_in_prometheus_2() {
    scrape_config_scrapes_the_exporter_pods(Flavour::V2);
}

#[test]
fn the_scrape_config_scrapes_the_exporter_pods_at_their_annotated_port_and_path_in_prometheus_3() {
    scrape_config_scrapes_the_exporter_pods(Flavour::V3);
    // The 3.x built from its module has Kubernetes discovery: the job as shipped passes.
    let snippet = repo().join("deploy/overlays/prometheus/scrape-config.yaml");
    Promtool::new(Flavour::V3).args(["check", "config"]).arg(&snippet).check();
}

fn scrape_config_scrapes_the_exporter_pods(flavour: Flavour) {
    let r = render("deploy/overlays/prometheus");
    let ds = daemonset(r);
    let template = &ds["spec"]["template"];
    let annotations = &template["metadata"]["annotations"];
    let container = exporter_container(r);
    let metrics_port = container["ports"].as_array().unwrap().iter().find(|p| p["name"] == "metrics").unwrap();
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], metrics_port["containerPort"].to_string());
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    for base in ["deploy", "deploy/base"] {
        assert!(
            daemonset(render(base))["spec"]["template"]["metadata"]["annotations"]
                .get("prometheus.io/scrape")
                .is_none()
        );
    }

    // The kubernetes_sd_configs block, against Prometheus' KubernetesSDConfig.
    let snippet_path = repo().join("deploy/overlays/prometheus/scrape-config.yaml");
    let snippet = yaml_file(&snippet_path);
    let jobs = snippet["scrape_configs"].as_array().expect("scrape-config.yaml has scrape_configs");
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job["honor_labels"], true);
    let sd = job["kubernetes_sd_configs"].as_array().expect("kubernetes_sd_configs");
    assert_eq!(sd.len(), 1);
    let known = ["api_server", "role", "kubeconfig_file", "namespaces", "selectors", "attach_metadata"];
    for key in sd[0].as_object().unwrap().keys() {
        assert!(known.contains(&key.as_str()), "kubernetes_sd_configs: unknown field {key}");
    }
    assert_eq!(sd[0]["role"], "pod");
    assert_eq!(strings(&sd[0]["namespaces"]["names"]), vec![ds["metadata"]["namespace"].as_str().unwrap()]);

    // Debian's promtool and prometheus are built without Kubernetes discovery, so the job
    // runs (in both flavours alike) on file discovery of targets shaped as Kubernetes pod discovery makes them from
    // the rendered DaemonSet: a target per container port, with the pod's labels and
    // annotations. A decoy port on the exporter pod and an annotated pod of another app
    // must be dropped.
    let pod = |ip: &str, port: i64, labels: &Value, annotations: &Value| {
        let mut l = serde_json::Map::new();
        for (k, v) in labels.as_object().unwrap() {
            l.insert(format!("__meta_kubernetes_pod_label_{}", sanitize(k)), v.clone());
        }
        for (k, v) in annotations.as_object().unwrap() {
            l.insert(format!("__meta_kubernetes_pod_annotation_{}", sanitize(k)), v.clone());
        }
        l.insert("__meta_kubernetes_namespace".into(), ds["metadata"]["namespace"].clone());
        l.insert("__meta_kubernetes_pod_name".into(), json!("gpu-exporter-x7k2p"));
        l.insert("__meta_kubernetes_pod_node_name".into(), json!("gpu-node-1"));
        l.insert("__meta_kubernetes_pod_ip".into(), json!(ip));
        l.insert("__meta_kubernetes_pod_container_port_number".into(), json!(port.to_string()));
        json!({"targets": [format!("{ip}:{port}")], "labels": l})
    };
    let exporter_port = metrics_port["containerPort"].as_i64().unwrap();
    let other_labels = json!({"app.kubernetes.io/name": "something-else"});
    let targets = json!([
        pod("10.0.0.5", exporter_port, &template["metadata"]["labels"], annotations),
        pod("10.0.0.5", 9999, &template["metadata"]["labels"], annotations),
        pod("10.0.0.6", exporter_port, &other_labels, annotations),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let targets_file = dir.path().join("targets.json");
    std::fs::write(&targets_file, targets.to_string()).unwrap();
    let mut job = job.clone();
    let job_map = job.as_object_mut().unwrap();
    job_map.remove("kubernetes_sd_configs");
    job_map.insert("file_sd_configs".into(), json!([{"files": [targets_file]}]));
    let config = json!({"global": {"scrape_interval": "1m", "evaluation_interval": "1m"}, "scrape_configs": [job]});
    let config_file = dir.path().join("prometheus.yml");
    std::fs::write(&config_file, serde_yaml_ng::to_string(&config).unwrap()).unwrap();
    let report = Promtool::new(flavour).args(["check", "config"]).arg(&config_file).run();
    assert!(report.success, "{flavour}: promtool check config refused scrape-config.yaml's job:\n{}", report.report);

    let config = std::fs::read_to_string(&config_file).unwrap();
    let prometheus = prometheus::Launch::new(flavour).config(&config).start();
    let mut answer = Value::Null;
    test_support::simulated::wait_until(
        &format!("{flavour} discovering the three targets"),
        Duration::from_secs(60),
        || {
            let (status, body) = prometheus.get("/api/v1/targets?state=any");
            answer = serde_json::from_str(&body).unwrap_or(Value::Null);
            let count = |k: &str| answer["data"][k].as_array().map_or(0, Vec::len);
            status == 200 && count("activeTargets") + count("droppedTargets") == 3
        },
    );
    let active = answer["data"]["activeTargets"].as_array().unwrap();
    assert_eq!(active.len(), 1, "exactly the exporter's metrics port is scraped: {answer}");
    let target = &active[0];
    assert_eq!(target["scrapeUrl"], format!("http://10.0.0.5:{exporter_port}/metrics"), "{target}");
    assert_eq!(target["labels"], json!({"instance": "gpu-node-1", "job": "gpu-exporter"}), "{target}");
}

// ---- images --------------------------------------------------------------------------

fn containerfile_targets() -> BTreeSet<String> {
    let path = repo().join("Containerfile");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (the images' build file, with a target per binary)", path.display()));
    let re = regex::Regex::new(r"(?im)^\s*FROM\s+(?:--\S+\s+)*\S+\s+AS\s+([A-Za-z0-9_.-]+)\s*$").unwrap();
    re.captures_iter(&text).map(|c| c[1].to_string()).collect()
}

#[test]
fn every_image_is_a_containerfile_target_at_the_workspace_version() {
    let targets = containerfile_targets();
    let version = env!("CARGO_PKG_VERSION"); // the exporter takes [workspace.package] version
    let re = regex::Regex::new(r"^ghcr\.io/gpu-telemetry/([a-z0-9-]+):(.+)$").unwrap();
    for r in renders() {
        let mut seen = BTreeSet::new();
        for doc in r.docs.iter().filter(|d| d["spec"]["template"]["spec"].is_object()) {
            let pod = &doc["spec"]["template"]["spec"];
            for c in
                ["initContainers", "containers"].iter().flat_map(|k| pod[*k].as_array().cloned().unwrap_or_default())
            {
                let image = c["image"].as_str().unwrap();
                let caps = re.captures(image).unwrap_or_else(|| {
                    panic!(
                        "{}: {} {}: image {image} is not ghcr.io/gpu-telemetry/<target>:<tag>",
                        r.name, doc["kind"], doc["metadata"]["name"]
                    )
                });
                assert!(
                    targets.contains(&caps[1]),
                    "{}: {image}: no `FROM ... AS {}` in the Containerfile ({targets:?})",
                    r.name,
                    &caps[1]
                );
                assert_eq!(&caps[2], version, "{}: {image} is not at the workspace version", r.name);
                seen.insert((doc["metadata"]["name"].as_str().unwrap().to_owned(), caps[1].to_string()));
            }
        }
        // Each workload runs its own binary's image.
        for workload in ["gpu-exporter", "gpu-metrics-adapter"] {
            assert!(
                seen.contains(&(workload.to_owned(), workload.to_owned())),
                "{}: {workload} does not run image {workload}",
                r.name
            );
        }
    }
}

#[test]
fn image_names_and_tags_live_only_in_the_base_kustomization_and_the_chart_values() {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(path);
            }
        }
    }
    let deploy = repo().join("deploy");
    let mut files = Vec::new();
    walk(&deploy, &mut files);
    let image_line = regex::Regex::new(r"(?m)^\s*(?:-\s*)?image:\s*(\S+)").unwrap();
    // The examples run other projects' images; the chart's files/ holds a copy of them.
    let examples = [deploy.join("examples"), deploy.join("helm/gpu-telemetry/files")];
    for file in files.iter().filter(|f| !examples.iter().any(|e| f.starts_with(e))) {
        let text = std::fs::read_to_string(file).unwrap();
        let rel = file.strip_prefix(repo()).unwrap().display().to_string();
        // The Helm chart's values name the repositories and leave the tag to appVersion,
        // which ops-checks/tests/helm_chart.rs holds to the workspace version.
        if rel == "deploy/base/kustomization.yaml" || rel == "deploy/helm/gpu-telemetry/values.yaml" {
            continue;
        }
        assert!(
            !text.contains("ghcr.io"),
            "{rel} names a registry; image names live in deploy/base/kustomization.yaml"
        );
        for caps in image_line.captures_iter(&text) {
            assert!(
                !caps[1].contains(':') && !caps[1].contains('/'),
                "{rel}: image {} has a registry or a tag",
                &caps[1]
            );
        }
    }
    let base = yaml_file(&deploy.join("base/kustomization.yaml"));
    let images: Vec<_> = base["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["name"].as_str().unwrap(), i["newTag"].as_str().unwrap()))
        .collect();
    assert_eq!(
        images,
        vec![("gpu-exporter", env!("CARGO_PKG_VERSION")), ("gpu-metrics-adapter", env!("CARGO_PKG_VERSION"))]
    );
    let values = yaml_file(&deploy.join("helm/gpu-telemetry/values.yaml"));
    for (part, target) in [("exporter", "gpu-exporter"), ("adapter", "gpu-metrics-adapter")] {
        let image = &values[part]["image"];
        assert_eq!(image["repository"], format!("ghcr.io/gpu-telemetry/{target}"), "chart values {part}.image");
        assert_eq!(image["tag"], "", "chart values {part}.image.tag: the tag is the chart's appVersion");
    }
}

// ---- the exporter's configuration in every overlay ----------------------------------

/// Variables the exporter's container carries that are not the exporter's: the NVIDIA
/// container runtime reads them to mount the driver's libnvidia-ml.so.1 and the devices.
const NOT_FOR_THE_BINARY: &[&str] = &["NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"];

/// The exporter's command line in `r`, its environment resolved as on node `gpu-node-1`.
fn exporter_argv(r: &Render, command: &clap::Command) -> Vec<String> {
    let pod = PodContext { render: &r.name, workload: daemonset(r), pod: "pod-0", node: "gpu-node-1" };
    pod.argv(exporter_container(r), command, "gpu-exporter", NOT_FOR_THE_BINARY)
}

#[test]
fn every_overlay_passes_flags_and_variables_the_exporter_accepts() {
    let command = Args::command();
    for r in renders() {
        let container = exporter_container(r);
        let argv = exporter_argv(r, &command);
        let args = Args::try_parse_from(&argv).unwrap_or_else(|e| panic!("{}: {argv:?}: {e}", r.name));
        args.validate().unwrap_or_else(|e| panic!("{}: {argv:?}: {e}", r.name));
        // The variables landed where the program reads them.
        assert_eq!(args.node_name.as_deref(), Some("gpu-node-1"), "{}: NODE_NAME from spec.nodeName", r.name);
        assert_eq!(args.health.namespace.as_deref(), Some("gpu-telemetry"), "{}: POD_NAMESPACE", r.name);
        assert_eq!(
            args.socket_addresses().unwrap()[0].port() as i64,
            container["ports"][0]["containerPort"].as_i64().unwrap(),
            "{}: the exporter listens on its declared port",
            r.name
        );
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    }
}

#[test]
fn the_health_loop_ships_in_dry_run_and_the_enforce_component_turns_it_on() {
    let command = Args::command();
    for r in renders() {
        let argv = exporter_argv(r, &command);
        let args = Args::try_parse_from(&argv).unwrap();
        assert!(args.health.enabled, "{}", r.name);
        // Every component together includes health-enforce; nothing else may enforce.
        let enforcing = r.name.starts_with("components:");
        assert_eq!(args.health.dry_run, !enforcing, "{}: dry run is {}", r.name, args.health.dry_run);
    }
    assert!(renders().iter().any(|r| r.name.starts_with("components:")), "the all-components render is there");
}

/// Constant labels name one cluster: the base and the overlays a cluster installs set none
/// (by flag or variable, as the exporter reads them); the seed's overlay sets the seed's.
#[test]
fn only_the_seed_overlay_sets_constant_labels() {
    let command = Args::command();
    for r in renders() {
        let argv = exporter_argv(r, &command);
        let labels = Args::try_parse_from(&argv).unwrap().extra_labels().unwrap();
        let want: &[(&str, &str)] =
            if r.name == "deploy/overlays/seed" { &[("cluster", "production"), ("region", "cn-east")] } else { &[] };
        let want: Vec<(String, String)> = want.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        assert_eq!(labels, want, "{}: {argv:?}", r.name);
    }
    assert!(renders().iter().any(|r| r.name == "deploy/overlays/seed"), "the seed's overlay renders");
}

#[test]
fn the_exporter_runs_as_root_without_capabilities() {
    for r in renders() {
        let pod = &daemonset(r)["spec"]["template"]["spec"];
        let container = exporter_container(r);
        // The container's setting wins over the pod's.
        let effective = |key: &str| {
            let c = &container["securityContext"][key];
            if c.is_null() { pod["securityContext"][key].clone() } else { c.clone() }
        };
        assert_eq!(effective("runAsUser"), 0, "{}", r.name);
        assert_eq!(effective("runAsNonRoot"), false, "{}", r.name);
        assert_eq!(effective("allowPrivilegeEscalation"), false, "{}", r.name);
        assert_eq!(effective("readOnlyRootFilesystem"), true, "{}", r.name);
        assert_eq!(effective("capabilities"), json!({"drop": ["ALL"]}), "{}", r.name);
        assert_eq!(effective("seccompProfile"), json!({"type": "RuntimeDefault"}), "{}", r.name);
        assert_ne!(effective("privileged"), true, "{}", r.name);
        assert!(pod["hostPID"].is_null() && pod["hostNetwork"].is_null(), "{}", r.name);
    }
}

#[test]
fn the_service_is_headless_for_endpoint_slice_discovery() {
    for r in renders() {
        let service = exporter_service(r);
        assert_eq!(service["spec"]["clusterIP"], "None", "{}", r.name);
        assert_eq!(service["spec"]["ports"][0]["port"], 9400, "{}", r.name);
        let selector = json!({"matchLabels": service["spec"]["selector"]});
        assert!(selects(&selector, &daemonset(r)["spec"]["template"]["metadata"]["labels"]), "{}", r.name);
    }
}

#[test]
fn the_daemonset_mounts_what_attribution_reads() {
    for r in renders() {
        let container = exporter_container(r);
        let mounts = container["volumeMounts"].as_array().unwrap();
        let args = strings(&container["args"]);
        for (flag, mount) in [
            (
                "--kubelet.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
                "/var/lib/kubelet/pod-resources",
            ),
            ("--path.procfs=/host/proc", "/host/proc"),
            ("--path.pod-logs=/var/log/pods", "/var/log/pods"),
        ] {
            assert!(args.contains(&flag), "{}: {flag} missing", r.name);
            assert!(
                mounts.iter().any(|m| m["mountPath"] == mount && m["readOnly"] == true),
                "{}: {mount} not mounted read-only",
                r.name
            );
        }
        let pods_role = find(&r.docs, "ClusterRole", "gpu-exporter-pods").unwrap();
        assert_eq!(strings(&pods_role["rules"][0]["verbs"]), vec!["list", "watch"]);
    }
}

#[test]
fn objects_land_in_the_namespaces_kubernetes_reads_them_from() {
    for r in renders() {
        let namespace_of = |kind: &str, name: &str| {
            let doc = find(&r.docs, kind, name).unwrap_or_else(|| panic!("{}: {kind} {name}", r.name));
            doc["metadata"]["namespace"].as_str().unwrap_or_default().to_string()
        };
        // Node Events are written where the kubelet writes them; the adapter reads its
        // authentication settings from kube-system.
        assert_eq!(namespace_of("Role", "gpu-exporter-health-events"), "default");
        assert_eq!(namespace_of("RoleBinding", "gpu-metrics-adapter-auth-reader"), "kube-system");
        for (kind, name) in
            [("DaemonSet", "gpu-exporter"), ("Deployment", "gpu-metrics-adapter"), ("Service", "gpu-exporter")]
        {
            assert_eq!(namespace_of(kind, name), "gpu-telemetry", "{}: {kind} {name}", r.name);
        }
        // Everything namespaced that we add lands in gpu-telemetry too.
        for doc in &r.docs {
            let kind = doc["kind"].as_str().unwrap();
            if ["ServiceMonitor", "PrometheusRule", "Certificate", "Issuer", "ConfigMap", "PodDisruptionBudget"]
                .contains(&kind)
            {
                assert_eq!(
                    doc["metadata"]["namespace"], "gpu-telemetry",
                    "{}: {kind} {}",
                    r.name, doc["metadata"]["name"]
                );
            }
        }
    }
}

// ---- the adapter's admission policy (CEL, evaluated here as the API server would) ------

const ADAPTER: &str = "system:serviceaccount:gpu-telemetry:gpu-metrics-adapter";

/// `None` when admitted (or not matched), else the failing validation's message.
fn admit_secret_create(policy: &Value, user: &str, namespace: &str, name: &str) -> Option<String> {
    use cel_interpreter::{Context, Program, Value as Cel};
    let request = json!({
        "userInfo": {"username": user},
        "namespace": namespace,
        "name": name,
        "operation": "CREATE",
        "resource": {"group": "", "version": "v1", "resource": "secrets"},
        "subResource": "",
    });
    let mut ctx = Context::default();
    ctx.add_variable("request", request).unwrap();
    ctx.add_variable("object", json!({"metadata": {"name": name, "namespace": namespace}})).unwrap();
    ctx.add_variable("oldObject", Value::Null).unwrap();
    let spec = &policy["spec"];
    for condition in spec["matchConditions"].as_array().unwrap() {
        let matched = Program::compile(condition["expression"].as_str().unwrap()).unwrap().execute(&ctx).unwrap();
        if matched != Cel::Bool(true) {
            return None;
        }
    }
    for v in spec["validations"].as_array().unwrap() {
        let expr = v["expression"].as_str().unwrap();
        let out = Program::compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}")).execute(&ctx).unwrap();
        if out != Cel::Bool(true) {
            if let Some(m) = v["messageExpression"].as_str() {
                match Program::compile(m).unwrap().execute(&ctx).unwrap() {
                    Cel::String(s) => return Some(s.to_string()),
                    other => panic!("messageExpression gave {other:?}"),
                }
            }
            return Some(v["message"].as_str().unwrap_or("denied").to_owned());
        }
    }
    None
}

#[test]
fn the_adapter_may_create_only_its_serving_secret() {
    let docs = &render("deploy/base").docs;
    let policies: Vec<_> = all(docs, "ValidatingAdmissionPolicy")
        .filter(|p| {
            p["spec"]["matchConstraints"]["resourceRules"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| strings(&r["resources"]).contains(&"secrets"))
        })
        .collect();
    assert_eq!(policies.len(), 1);
    let policy = policies[0];
    let name = policy["metadata"]["name"].as_str().unwrap();
    let binding = find(docs, "ValidatingAdmissionPolicyBinding", name).expect("the policy is bound");
    assert_eq!(binding["spec"]["policyName"], name);
    assert_eq!(strings(&binding["spec"]["validationActions"]), vec!["Deny"]);
    assert_eq!(policy["spec"]["failurePolicy"], "Fail");
    let rule = &policy["spec"]["matchConstraints"]["resourceRules"][0];
    assert!(strings(&rule["operations"]).contains(&"CREATE"));

    // The Secret the Deployment names is the one the policy allows.
    let deployment = find(docs, "Deployment", "gpu-metrics-adapter").unwrap();
    let env = deployment["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap();
    let secret =
        env.iter().find(|e| e["name"] == "GPU_METRICS_ADAPTER_TLS_SECRET_NAME").unwrap()["value"].as_str().unwrap();
    assert_eq!(admit_secret_create(policy, ADAPTER, "gpu-telemetry", secret), None);
    for (ns, other) in
        [("gpu-telemetry", "stolen-token"), ("kube-system", secret), ("gpu-telemetry", "gpu-metrics-adapter-serving2")]
    {
        let denied = admit_secret_create(policy, ADAPTER, ns, other);
        assert!(denied.as_deref().is_some_and(|m| m.contains(other)), "{ns}/{other}: {denied:?}");
    }
    // Other users are not this policy's business.
    assert_eq!(
        admit_secret_create(policy, "system:serviceaccount:gpu-telemetry:gpu-exporter", "gpu-telemetry", "x"),
        None
    );
}
