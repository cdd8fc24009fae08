//! `kubectl kustomize` as the renderer of `deploy/`, and the rendered objects as JSON.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// kubectl: `$KUBECTL`, else /usr/bin/kubectl.
pub fn kubectl_bin() -> PathBuf {
    std::env::var_os("KUBECTL").map_or_else(|| PathBuf::from("/usr/bin/kubectl"), PathBuf::from)
}

/// `kubectl kustomize dir`: the rendered text, or kubectl's error.
pub fn try_render_text(dir: &Path) -> Result<String, String> {
    let kubectl = kubectl_bin();
    let out = std::process::Command::new(&kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("this test needs kubectl ({}): {e}", kubectl.display()));
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The documents of a multi-document YAML text, as JSON (empty documents left out), or
/// why the text is not YAML.
pub fn try_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v = serde_yaml_ng::Value::deserialize(doc).map_err(|e| e.to_string())?;
        let v = serde_json::to_value(v).map_err(|e| e.to_string())?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Like [`try_documents`]; fails the test when the text is not YAML.
pub fn documents(text: &str) -> Vec<Value> {
    try_documents(text).unwrap_or_else(|e| panic!("not YAML: {e}"))
}

/// `kubectl kustomize dir`, parsed; fails the test when it does not render.
pub fn render(dir: &Path) -> Vec<Value> {
    let text = try_render_text(dir).unwrap_or_else(|e| panic!("kubectl kustomize {}: {e}", dir.display()));
    documents(&text)
}
