//! The exporter binary with `--web.config.file`: TLS, client certificates and basic
//! auth accepted and refused end to end, on the simulated node; the probe paths answer
//! a client with neither.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod web_support;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Launch, write_scenario};
use web_support::{Ca, ClientTls, Dir, basic, get};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_certificates_and_basic_auth_guard_metrics() {
    let ca = Ca::new("test ca");
    let clients = Ca::new("client ca");
    let other = Ca::new("someone else");
    let dir = Dir::new();
    dir.write("clients.crt", &clients.cert_pem);
    let hash = bcrypt::hash("scrape-secret", 4).unwrap();
    let config = dir.tls_config(
        &ca.server(),
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: clients.crt\n",
        &format!("basic_auth_users:\n  prometheus: {hash}\n"),
    );
    let scenario =
        write_scenario(dir.dir.path(), "node.yaml", "gpus: [{model: H100-SXM5-80GB, values: {utilization: 42}}]\n");
    let exporter = Launch::scenario(&scenario, Some(10.0))
        .args(&[
            "--web.config.file",
            config.to_str().unwrap(),
            "--collect-interval",
            "500ms",
            "--nvml.call-timeout",
            "200ms",
        ])
        .start();
    let addr: SocketAddr = exporter.address.parse().unwrap();
    let good_client = ClientTls::trusting(&ca).with_identity(&clients.client_for(&["prometheus"]));
    let auth = basic("prometheus", "scrape-secret");

    let mut ready = false;
    for _ in 0..200 {
        if let Ok(reply) = get(addr, Some(&good_client), "/readyz", &[("authorization", &auth)]).await
            && reply.status == 200
        {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(ready, "exporter never became ready over TLS; logs:\n{}", exporter.logs());

    let reply = get(addr, Some(&good_client), "/metrics", &[("authorization", &auth)]).await.unwrap();
    assert_eq!(reply.status, 200);
    assert!(reply.body.contains("gpu_utilization{") && reply.body.contains("} 42\n"), "{}", reply.body);

    let wrong =
        get(addr, Some(&good_client), "/metrics", &[("authorization", &basic("prometheus", "guess"))]).await.unwrap();
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.contains_key("www-authenticate"));
    let missing = get(addr, Some(&good_client), "/metrics", &[]).await.unwrap();
    assert_eq!(missing.status, 401);

    // The kubelet's probes: HTTPS, no client certificate, no password.
    let no_cert = ClientTls::trusting(&ca);
    for path in ["/healthz", "/readyz"] {
        let probe = get(addr, Some(&no_cert), path, &[]).await.unwrap();
        assert_eq!(probe.status, 200, "{path} without credentials: {}", probe.body);
    }
    let refused = get(addr, Some(&no_cert), "/metrics", &[("authorization", &auth)]).await.unwrap();
    assert_eq!(refused.status, 403, "a client without a certificate is refused");
    assert!(!refused.body.contains("gpu_utilization"));
    let foreign = ClientTls::trusting(&ca).with_identity(&other.client_for(&["prometheus"]));
    assert!(get(addr, Some(&foreign), "/metrics", &[("authorization", &auth)]).await.is_err());
    let plain = get(addr, None, "/metrics", &[]).await.unwrap();
    assert_eq!(plain.status, 400, "plain HTTP on the TLS port");
}
