//! The probe paths (`/healthz`, `/readyz`) answer without authentication while
//! `/metrics` and every other path stay protected: with basic auth, with required client
//! certificates (a real TLS client with and without a certificate, HTTP/1.1 and HTTP/2),
//! with both, and with a rate limit. Real sockets on 127.0.0.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use axum::Router;
use axum::routing;
use gpu_exporter::web::{PROBE_PATHS, ServeOptions};
use http::header::WWW_AUTHENTICATE;
use http::{StatusCode, Version};
use web_support::{Ca, ClientTls, Dir, basic, describe, get, start, within};

/// The exporter's routes, as far as authentication is concerned.
fn router() -> Router {
    Router::new()
        .route("/metrics", routing::get(|| async { "gpu_up 1\n" }))
        .route("/healthz", routing::get(|| async { "ok\n" }))
        .route("/readyz", routing::get(|| async { "ready\n" }))
        .route("/", routing::get(|| async { "landing\n" }))
}

fn users() -> String {
    let hash = bcrypt::hash("scrape-secret", 4).unwrap();
    format!("basic_auth_users:\n  prometheus: '{hash}'\n")
}

/// Paths that look like a probe path but are not one: each must need authentication.
const LOOKALIKES: &[&str] = &["/healthz/", "//healthz", "/HEALTHZ", "/healthz/../metrics", "/metrics?x=/healthz", "/"];

#[test]
fn the_probe_paths_are_the_exporters_probe_routes() {
    assert_eq!(PROBE_PATHS, ["/healthz", "/readyz"]);
    assert_eq!(ServeOptions::default().probe_paths, PROBE_PATHS);
}

#[tokio::test]
async fn basic_auth_leaves_the_probes_open_and_guards_the_rest() {
    let dir = Dir::new();
    let running = start(dir.load(&dir.write("web.yml", &users())), router(), ServeOptions::default()).await;
    let addr = running.addr;

    for (path, body) in [("/healthz", "ok\n"), ("/readyz", "ready\n")] {
        let reply = within(10, get(addr, None, path, &[])).await.unwrap();
        assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, body), "{path} without credentials");
        // Wrong credentials do not turn an open path into a refusal (a probe never sends
        // any, but a browser that remembered old ones might).
        let reply = get(addr, None, path, &[("authorization", &basic("prometheus", "wrong"))]).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{path} with wrong credentials");
    }
    let refused = get(addr, None, "/metrics", &[]).await.unwrap();
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(refused.headers.contains_key(WWW_AUTHENTICATE));
    assert!(!refused.body.contains("gpu_up"));
    for path in LOOKALIKES {
        let reply = get(addr, None, path, &[]).await.unwrap();
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path} is not a probe path");
    }
    let ok = get(addr, None, "/metrics", &[("authorization", &basic("prometheus", "scrape-secret"))]).await.unwrap();
    assert_eq!((ok.status, ok.body.as_str()), (StatusCode::OK, "gpu_up 1\n"));
    running.stop().await.unwrap();
}

/// A server with `client_auth_type` requiring a certificate from `clients`.
fn required_cert_config(dir: &Dir, server: &Ca, clients: &Ca, policy: &str, rest: &str) -> std::path::PathBuf {
    dir.write("clients.crt", &clients.cert_pem);
    let ca_line = if policy == "RequireAndVerifyClientCert" { "  client_ca_file: clients.crt\n" } else { "" };
    dir.tls_config(&server.server(), &format!("  client_auth_type: {policy}\n{ca_line}"), rest)
}

#[tokio::test]
async fn required_client_certificates_leave_the_probes_open_to_a_client_without_one() {
    for policy in ["RequireAndVerifyClientCert", "RequireAnyClientCert"] {
        let server_ca = Ca::new("server CA");
        let client_ca = Ca::new("client CA");
        let dir = Dir::new();
        let config = dir.load(&required_cert_config(&dir, &server_ca, &client_ca, policy, ""));
        let running = start(config, router(), ServeOptions::default()).await;
        let addr = running.addr;

        // What the kubelet does: HTTPS without a client certificate, over HTTP/1.1 (the
        // kubelet's probe client) and HTTP/2 (what ALPN picks for other clients).
        let mut http1 = ClientTls::trusting(&server_ca);
        http1.alpn = vec![b"http/1.1".to_vec()];
        for (client, version) in [(http1, Version::HTTP_11), (ClientTls::trusting(&server_ca), Version::HTTP_2)] {
            for path in ["/healthz", "/readyz"] {
                let reply = within(10, get(addr, Some(&client), path, &[])).await.unwrap_or_else(|e| {
                    panic!("{policy}: {path} without a client certificate: {}", describe(&e));
                });
                assert_eq!(reply.status, StatusCode::OK, "{policy}: {path}");
                assert_eq!(reply.version, version);
            }
            for path in ["/metrics", "/"].iter().chain(LOOKALIKES) {
                let reply = within(10, get(addr, Some(&client), path, &[])).await.unwrap();
                assert_eq!(reply.status, StatusCode::FORBIDDEN, "{policy}: {path} without a client certificate");
                assert!(reply.body.contains("client certificate is required"), "{}", reply.body);
                assert!(!reply.body.contains("gpu_up"));
            }
        }

        // Prometheus with its certificate reads everything.
        let scraper = ClientTls::trusting(&server_ca).with_identity(&client_ca.client_for(&["prometheus"]));
        for path in ["/metrics", "/healthz", "/readyz"] {
            let reply = within(10, get(addr, Some(&scraper), path, &[])).await.unwrap();
            assert_eq!(reply.status, StatusCode::OK, "{policy}: {path} with a certificate");
        }
        running.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_bad_certificate_still_fails_the_handshake_even_for_a_probe() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let rogue_ca = Ca::new("rogue CA");
    let dir = Dir::new();
    let config = dir.load(&required_cert_config(&dir, &server_ca, &client_ca, "RequireAndVerifyClientCert", ""));
    let running = start(config, router(), ServeOptions::default()).await;
    let rogue = ClientTls::trusting(&server_ca).with_identity(&rogue_ca.client_for(&["prometheus"]));
    for path in ["/healthz", "/metrics"] {
        let err = within(10, get(running.addr, Some(&rogue), path, &[])).await.unwrap_err();
        assert!(describe(&err).contains("UnknownCA"), "{path}: {}", describe(&err));
    }
    running.stop().await.unwrap();
}

#[tokio::test]
async fn client_certificates_and_basic_auth_together() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let dir = Dir::new();
    let config = dir.load(&required_cert_config(&dir, &server_ca, &client_ca, "RequireAndVerifyClientCert", &users()));
    let running = start(config, router(), ServeOptions::default()).await;
    let addr = running.addr;
    let kubelet = ClientTls::trusting(&server_ca);
    let scraper = ClientTls::trusting(&server_ca).with_identity(&client_ca.client_for(&["prometheus"]));
    let auth = basic("prometheus", "scrape-secret");

    assert_eq!(within(10, get(addr, Some(&kubelet), "/readyz", &[])).await.unwrap().status, StatusCode::OK);
    assert_eq!(get(addr, Some(&kubelet), "/healthz", &[]).await.unwrap().status, StatusCode::OK);
    // Without a certificate the password alone does not open /metrics ...
    let reply = get(addr, Some(&kubelet), "/metrics", &[("authorization", &auth)]).await.unwrap();
    assert_eq!(reply.status, StatusCode::FORBIDDEN);
    // ... nor the certificate alone.
    let reply = get(addr, Some(&scraper), "/metrics", &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let reply = get(addr, Some(&scraper), "/metrics", &[("authorization", &auth)]).await.unwrap();
    assert_eq!((reply.status, reply.body.as_str()), (StatusCode::OK, "gpu_up 1\n"));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn probes_are_not_rate_limited_and_do_not_use_up_the_bucket() {
    let dir = Dir::new();
    // One token per hour: after the burst nothing refills during the test.
    let config = dir.load(&dir.write("web.yml", "rate_limit:\n  burst: 2\n  interval: 1h\n"));
    let running = start(config, router(), ServeOptions::default()).await;
    for _ in 0..5 {
        assert_eq!(within(10, get(running.addr, None, "/healthz", &[])).await.unwrap().status, StatusCode::OK);
        assert_eq!(get(running.addr, None, "/readyz", &[]).await.unwrap().status, StatusCode::OK);
    }
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(get(running.addr, None, "/metrics", &[]).await.unwrap().status);
    }
    assert_eq!(statuses, [StatusCode::OK, StatusCode::OK, StatusCode::TOO_MANY_REQUESTS]);
    assert_eq!(
        get(running.addr, None, "/healthz", &[]).await.unwrap().status,
        StatusCode::OK,
        "after the bucket ran dry"
    );
    running.stop().await.unwrap();
}

#[tokio::test]
async fn an_empty_probe_list_protects_every_path() {
    let dir = Dir::new();
    let options = ServeOptions { probe_paths: Vec::new(), ..ServeOptions::default() };
    let running = start(dir.load(&dir.write("web.yml", &users())), router(), options).await;
    for path in ["/healthz", "/readyz", "/metrics"] {
        let reply = within(10, get(running.addr, None, path, &[])).await.unwrap();
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    running.stop().await.unwrap();
}
