//! TLS through the web config, over real sockets on 127.0.0.1: server certificates,
//! plain HTTP on the TLS port, client-certificate policies, SAN allow-lists, protocol
//! versions, ALPN / HTTP/2, and certificate rotation without restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod web_support;

use gpu_exporter::web::{ClientAuth, ServeOptions};
use http::{StatusCode, Version};
use web_support::{Ca, ClientTls, Dir, describe, get, router, start, within};

#[tokio::test]
async fn serves_a_client_that_trusts_the_ca() {
    let ca = Ca::new("test CA");
    let server = ca.server();
    let dir = Dir::new();
    let config = dir.load(&dir.tls_config(&server, "", ""));
    assert!(config.tls_enabled());
    let running = start(config, router(), ServeOptions::default()).await;

    let reply = within(10, get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, "gpu_up 1\n");
    assert_eq!(reply.version, Version::HTTP_2, "h2 is offered by default and picked by ALPN");
    assert_eq!(reply.peer_cert, Some(server.cert_der()));

    let mut http1_only = ClientTls::trusting(&ca);
    http1_only.alpn = vec![b"http/1.1".to_vec()];
    let reply = get(running.addr, Some(&http1_only), "/peer", &[]).await.unwrap();
    assert_eq!(reply.version, Version::HTTP_11);
    assert_eq!(reply.body, reply.local.to_string(), "the router sees the client's address");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn plain_http_to_the_tls_port_gets_a_clear_400_and_the_server_goes_on() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let running = start(dir.load(&dir.tls_config(&ca.server(), "", "")), router(), ServeOptions::default()).await;

    let reply = within(10, get(running.addr, None, "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("HTTP request to an HTTPS server"), "{}", reply.body);

    let reply = get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_client_refuses_a_server_certificate_from_a_ca_it_does_not_trust() {
    let served_by = Ca::new("server CA");
    let trusted = Ca::new("another CA");
    let dir = Dir::new();
    let running =
        start(dir.load(&dir.tls_config(&served_by.server(), "", "")), router(), ServeOptions::default()).await;

    let err = within(10, get(running.addr, Some(&ClientTls::trusting(&trusted)), "/metrics", &[])).await.unwrap_err();
    assert!(err.to_string().contains("UnknownIssuer"), "{err}");
    let reply = get(running.addr, Some(&ClientTls::trusting(&served_by)), "/metrics", &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn require_and_verify_client_cert_accepts_only_certificates_from_the_client_ca() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("rogue CA");
    let dir = Dir::new();
    dir.write("client-ca.crt", &client_ca.cert_pem);
    let config = dir.load(&dir.tls_config(
        &server_ca.server(),
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: client-ca.crt\n",
        "",
    ));
    assert_eq!(config.client_auth(), ClientAuth::RequireAndVerifyClientCert);
    let running = start(config, router(), ServeOptions::default()).await;

    let good = ClientTls::trusting(&server_ca).with_identity(&client_ca.client_for(&["prometheus"]));
    let reply = within(10, get(running.addr, Some(&good), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);

    // Without a certificate the handshake finishes (so that the kubelet's probes work,
    // see web_probes.rs) and every other path is refused.
    let none = ClientTls::trusting(&server_ca);
    let reply = within(10, get(running.addr, Some(&none), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "no client certificate");
    assert!(!reply.body.contains("gpu_up"));

    let rogue = ClientTls::trusting(&server_ca).with_identity(&other_ca.client_for(&["prometheus"]));
    let err = within(10, get(running.addr, Some(&rogue), "/metrics", &[])).await.unwrap_err();
    assert!(describe(&err).contains("UnknownCA"), "certificate from another CA: {}", describe(&err));

    // A certificate made for servers (no clientAuth usage) is refused too.
    let wrong_usage = ClientTls::trusting(&server_ca).with_identity(&client_ca.server());
    let err = within(10, get(running.addr, Some(&wrong_usage), "/metrics", &[])).await.unwrap_err();
    assert!(describe(&err).contains("UnsupportedCertificate"), "server-only certificate: {}", describe(&err));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn client_allowed_sans_restricts_verified_clients() {
    let ca = Ca::new("one CA");
    let dir = Dir::new();
    dir.write("ca.crt", &ca.cert_pem);
    let config = dir.load(&dir.tls_config(
        &ca.server(),
        "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  \
         client_allowed_sans: [prometheus.monitoring.svc, 10.0.0.7]\n",
        "",
    ));
    let running = start(config, router(), ServeOptions::default()).await;

    for sans in [&["prometheus.monitoring.svc"][..], &["other.example", "10.0.0.7"][..]] {
        let client = ClientTls::trusting(&ca).with_identity(&ca.client_for(sans));
        let reply = within(10, get(running.addr, Some(&client), "/metrics", &[])).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{sans:?}");
    }
    let outsider = ClientTls::trusting(&ca).with_identity(&ca.client_for(&["grafana.monitoring.svc"]));
    let err = within(10, get(running.addr, Some(&outsider), "/metrics", &[])).await.unwrap_err();
    assert!(describe(&err).contains("AccessDenied"), "SAN not in client_allowed_sans: {}", describe(&err));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn request_and_require_any_client_cert_follow_go_semantics() {
    let ca = Ca::new("server CA");
    let stranger = Ca::new("self-made client CA");

    let dir = Dir::new();
    let require_any = start(
        dir.load(&dir.tls_config(&ca.server(), "  client_auth_type: RequireAnyClientCert\n", "")),
        router(),
        ServeOptions::default(),
    )
    .await;
    let with_any_cert = ClientTls::trusting(&ca).with_identity(&stranger.client_for(&["whoever"]));
    let reply = within(10, get(require_any.addr, Some(&with_any_cert), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK, "any certificate is taken without chain checks");
    let reply = within(10, get(require_any.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::FORBIDDEN, "RequireAnyClientCert without a certificate");
    require_any.stop().await.unwrap();

    let dir = Dir::new();
    let request = start(
        dir.load(&dir.tls_config(&ca.server(), "  client_auth_type: RequestClientCert\n", "")),
        router(),
        ServeOptions::default(),
    )
    .await;
    for client in [ClientTls::trusting(&ca), with_any_cert] {
        let reply = within(10, get(request.addr, Some(&client), "/metrics", &[])).await.unwrap();
        assert_eq!(reply.status, StatusCode::OK);
    }
    request.stop().await.unwrap();
}

#[tokio::test]
async fn min_version_and_cipher_suites_are_enforced() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let running =
        start(dir.load(&dir.tls_config(&ca.server(), "  min_version: TLS13\n", "")), router(), ServeOptions::default())
            .await;
    let mut tls12 = ClientTls::trusting(&ca);
    tls12.versions = vec![&rustls::version::TLS12];
    let err = within(10, get(running.addr, Some(&tls12), "/metrics", &[])).await.unwrap_err();
    assert!(describe(&err).contains("ProtocolVersion"), "TLS 1.2 client, min_version TLS13: {}", describe(&err));
    let reply = get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[]).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    running.stop().await.unwrap();

    // TLS 1.2 with one suite: a TLS 1.2 client must use it (the test key is ECDSA P-256).
    let dir = Dir::new();
    let running = start(
        dir.load(&dir.tls_config(
            &ca.server(),
            "  max_version: TLS12\n  cipher_suites: [TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256]\n",
            "",
        )),
        router(),
        ServeOptions::default(),
    )
    .await;
    let reply = within(10, get(running.addr, Some(&tls12), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    let mut without_that_suite = ClientTls::trusting(&ca);
    without_that_suite.versions = vec![&rustls::version::TLS12];
    let mut suites = rustls::crypto::ring::DEFAULT_CIPHER_SUITES.to_vec();
    suites.retain(|s| s.suite() != rustls::CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256);
    without_that_suite.cipher_suites = Some(suites);
    let refused = within(10, get(running.addr, Some(&without_that_suite), "/metrics", &[])).await;
    let err = refused.unwrap_err();
    assert!(describe(&err).contains("HandshakeFailure"), "a client without the configured suite: {}", describe(&err));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn http2_false_keeps_tls_clients_on_http1() {
    let ca = Ca::new("test CA");
    let dir = Dir::new();
    let config = dir.load(&dir.tls_config(&ca.server(), "", "http_server_config:\n  http2: false\n"));
    assert!(!config.http2());
    let running = start(config, router(), ServeOptions::default()).await;
    let reply = within(10, get(running.addr, Some(&ClientTls::trusting(&ca)), "/metrics", &[])).await.unwrap();
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.version, Version::HTTP_11, "h2 must not be negotiated");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn rotated_certificate_files_are_used_by_the_next_handshake() {
    let ca = Ca::new("test CA");
    let first = ca.server();
    let dir = Dir::new();
    let running = start(dir.load(&dir.tls_config(&first, "", "")), router(), ServeOptions::default()).await;
    let client = ClientTls::trusting(&ca);
    let seen = |reply: web_support::Reply| reply.peer_cert.unwrap();
    assert_eq!(seen(within(10, get(running.addr, Some(&client), "/metrics", &[])).await.unwrap()), first.cert_der());

    // Rewritten in place, certificate first: with only the certificate replaced the pair
    // does not match, so the previous pair keeps being served.
    let second = ca.server();
    // Changes are noticed by size, mtime and inode; mtime advances with the kernel's
    // clock tick, so an in-place rewrite must not land in the tick of the first write.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    dir.write("server.crt", &second.cert_pem);
    assert_eq!(seen(get(running.addr, Some(&client), "/metrics", &[]).await.unwrap()), first.cert_der());
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    dir.write("server.key", &second.key_pem);
    assert_eq!(seen(get(running.addr, Some(&client), "/metrics", &[]).await.unwrap()), second.cert_der());

    // Replaced by rename, as a Kubernetes secret volume or cert-manager does.
    let third = ca.server();
    let staged_cert = dir.write("server.crt.new", &third.cert_pem);
    let staged_key = dir.write("server.key.new", &third.key_pem);
    std::fs::rename(staged_key, dir.path("server.key")).unwrap();
    std::fs::rename(staged_cert, dir.path("server.crt")).unwrap();
    assert_eq!(seen(get(running.addr, Some(&client), "/metrics", &[]).await.unwrap()), third.cert_der());

    // A removed file does not stop serving: the last good pair stays in use.
    std::fs::remove_file(dir.path("server.key")).unwrap();
    assert_eq!(seen(get(running.addr, Some(&client), "/metrics", &[]).await.unwrap()), third.cert_der());
    running.stop().await.unwrap();
}
