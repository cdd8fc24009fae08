//! Every way the `deploy/` manifests are meant to be installed, rendered with
//! `kubectl kustomize` (kustomize v5): the top-level kustomization, the base, each
//! overlay, and the base with every component at once (they must combine).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

/// One rendering.
#[derive(Debug)]
pub struct Render {
    /// `deploy`, `deploy/base`, `deploy/overlays/<name>`, or `components: a+b+c`.
    pub name: String,
    pub text: String,
    pub docs: Vec<Value>,
}

/// The kubectl the tests run: `$KUBECTL`, else `kubectl` on the PATH.
pub fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// The YAML documents of a rendering, as JSON values; empty documents are dropped.
pub fn parse_docs(text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| serde_json::to_value(serde_yaml_ng::Value::deserialize(doc).unwrap()).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize dir`; a missing kubectl fails the test with how to install it.
pub fn kustomize(dir: &Path) -> (String, Vec<Value>) {
    let kubectl = kubectl();
    let out = Command::new(&kubectl).args(["kustomize", dir.to_str().unwrap()]).stdin(Stdio::null()).output();
    let out = out.unwrap_or_else(|e| {
        panic!(
            "this test needs kubectl ({kubectl}: {e}); install kubectl 1.27 or newer (kustomize v5), or set \
             KUBECTL=/path/to/kubectl (scripts/check-deploy checks for every tool)"
        )
    });
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = parse_docs(&text);
    (text, docs)
}

/// The path from directory `from` to `to`, both absolute (kustomize refuses absolute ones).
pub fn relative(from: &Path, to: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut path: PathBuf = (common..from.len()).map(|_| "..").collect();
    path.extend(&to[common..]);
    path
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    out.sort();
    out
}

/// Every rendering of `<repo>/deploy`, each overlay the documentation names included.
pub fn renders(repo: &Path) -> Vec<Render> {
    let deploy = repo.join("deploy");
    let mut dirs = vec![deploy.clone(), deploy.join("base")];
    dirs.extend(subdirs(&deploy.join("overlays")));
    let mut out: Vec<Render> = dirs
        .iter()
        .map(|dir| {
            let (text, docs) = kustomize(dir);
            Render { name: dir.strip_prefix(repo).unwrap().display().to_string(), text, docs }
        })
        .collect();
    out.push(all_components(&deploy));
    for wanted in ["deploy/overlays/prometheus", "deploy/overlays/prometheus-operator", "deploy/overlays/cert-manager"]
    {
        assert!(out.iter().any(|r| r.name == wanted), "{wanted} is missing");
    }
    out
}

/// The base with every component at once, from a kustomization written in a temporary
/// directory (components must combine, e.g. prometheus-operator + cert-manager).
fn all_components(deploy: &Path) -> Render {
    let tmp = tempfile::tempdir().unwrap();
    let at = tmp.path().canonicalize().unwrap();
    let components = subdirs(&deploy.join("components"));
    let list = |paths: &[PathBuf]| -> String {
        paths.iter().map(|p| format!("  - {}\n", relative(&at, p).display())).collect()
    };
    let kustomization = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n{}components:\n{}",
        list(&[deploy.join("base")]),
        list(&components)
    );
    std::fs::write(at.join("kustomization.yaml"), kustomization).unwrap();
    let (text, docs) = kustomize(&at);
    let names: Vec<String> = components.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
    Render { name: format!("components: {}", names.join("+")), text, docs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_to_the_common_parent() {
        assert_eq!(relative(Path::new("/a/b/c"), Path::new("/a/d")), PathBuf::from("../../d"));
        assert_eq!(relative(Path::new("/a"), Path::new("/a/b")), PathBuf::from("b"));
    }

    #[test]
    fn empty_documents_are_dropped() {
        let docs = parse_docs("a: 1\n---\n---\nb: 2\n");
        assert_eq!(docs, [serde_json::json!({"a": 1}), serde_json::json!({"b": 2})]);
    }
}

/// Where a container runs, to resolve its environment as the kubelet would.
#[derive(Debug, Clone, Copy)]
pub struct PodContext<'a> {
    /// The rendering's name, for messages.
    pub render: &'a str,
    /// The workload (DaemonSet, Deployment) whose namespace the pod gets.
    pub workload: &'a Value,
    /// `metadata.name` of the pod.
    pub pod: &'a str,
    /// `spec.nodeName` of the pod.
    pub node: &'a str,
}

impl PodContext<'_> {
    /// The value a container's environment variable has at run time.
    pub fn env_value(&self, var: &Value) -> String {
        if let Some(v) = var.get("value") {
            return v.as_str().unwrap().to_owned();
        }
        match var["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            Some("metadata.namespace") => self.workload["metadata"]["namespace"].as_str().unwrap().to_owned(),
            Some("spec.nodeName") => self.node.to_owned(),
            Some("metadata.name") => self.pod.to_owned(),
            _ => panic!("{}: cannot resolve {var} (teach PodContext::env_value how)", self.render),
        }
    }

    /// The container's command line as `program` sees it: its `args`, after the flags its
    /// environment sets as clap takes them (a variable counts only where its flag is not
    /// given). Variables in `not_for_the_binary` are skipped; any other variable that is
    /// the env of none of the program's flags fails the test.
    pub fn argv(
        &self,
        container: &Value,
        command: &clap::Command,
        program: &str,
        not_for_the_binary: &[&str],
    ) -> Vec<String> {
        let strings = |v: &Value| -> Vec<String> {
            v.as_array().map(|a| a.iter().map(|s| s.as_str().unwrap().to_owned()).collect()).unwrap_or_default()
        };
        let args = strings(&container["args"]);
        let by_env: std::collections::BTreeMap<String, &clap::Arg> =
            command.get_arguments().filter_map(|a| Some((a.get_env()?.to_str()?.to_owned(), a))).collect();
        let mut argv = vec![program.to_owned()];
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap();
            if not_for_the_binary.contains(&name) {
                continue;
            }
            let arg = by_env.get(name).unwrap_or_else(|| {
                panic!(
                    "{}: {program} reads no environment variable {name} (it is the env of none of its flags)",
                    self.render
                )
            });
            let long = arg.get_long().unwrap();
            if args.iter().any(|a| a == &format!("--{long}") || a.starts_with(&format!("--{long}="))) {
                continue;
            }
            let value = self.env_value(var);
            match arg.get_action() {
                clap::ArgAction::SetTrue => {
                    if !["", "0", "false", "no", "off", "n", "f"].contains(&value.to_lowercase().as_str()) {
                        argv.push(format!("--{long}"));
                    }
                }
                _ => argv.push(format!("--{long}={value}")),
            }
        }
        argv.extend(args);
        argv
    }
}
