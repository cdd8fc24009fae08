//! kubectl as a real client of the adapter: a kubeconfig for a client certificate, and
//! `kubectl get --raw`.

use std::path::{Path, PathBuf};

use gpu_metrics_adapter::certs::Pair;

use super::Pki;

pub fn kubectl_bin() -> PathBuf {
    let p = PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
    assert!(p.exists(), "this test needs kubectl at {} (or set KUBECTL)", p.display());
    p
}

pub fn kubeconfig(pki: &Pki, name: &str, port: u16, user: &Pair) -> PathBuf {
    let ca = pki.write("kubectl-ca.pem", pki.serving_ca.cert_pem());
    let cert = pki.write(&format!("{name}.pem"), &user.cert_pem);
    let key = pki.write(&format!("{name}-key.pem"), &user.key_pem);
    pki.write(
        &format!("{name}.kubeconfig"),
        &format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: adapter\n  cluster:\n    server: https://127.0.0.1:{port}\n    certificate-authority: {}\n    tls-server-name: localhost\nusers:\n- name: {name}\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: c\n  context:\n    cluster: adapter\n    user: {name}\ncurrent-context: c\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    )
}

pub struct Out {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

pub async fn kubectl(home: &Path, kubeconfig: &Path, path: &str) -> Out {
    let out = tokio::process::Command::new(kubectl_bin())
        .env("HOME", home)
        .env_remove("KUBECONFIG")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--request-timeout=10s")
        .args(["get", "--raw", path])
        .output()
        .await
        .unwrap();
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn json(o: &Out) -> serde_json::Value {
    assert!(o.ok, "kubectl failed: {}", o.stderr);
    serde_json::from_str(&o.stdout).unwrap()
}
