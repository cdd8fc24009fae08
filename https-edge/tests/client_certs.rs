//! Client certificates over real TLS connections on 127.0.0.1: never required in the
//! handshake; verified by the handler (deferred) or in the handshake, for no
//! certificate, a valid one, one from another CA, and an expired one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use https_edge::{
    ClientCa, ClientCertRequest, ClientCerts, Identity, Options, PemSource, ServerTls, TlsSettings, Transport,
};
use support::{Ca, Pair, client_tls, request, router, start, within};

fn tls(server: &Pair, client_certs: ClientCerts) -> Transport {
    let mut settings = TlsSettings::new(Identity::Pem {
        cert: PemSource::Inline(server.cert_pem.clone()),
        key: PemSource::Inline(server.key_pem.clone()),
    });
    settings.client_certs = client_certs;
    Transport::Tls(Arc::new(ServerTls::new(settings, Duration::ZERO).unwrap()))
}

#[tokio::test]
async fn deferred_verification_lets_every_client_in_and_the_handler_decides() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("another CA");
    let deferred = ClientCa::from_pem(&client_ca.cert_pem, "client CA").unwrap();
    let transport = tls(&server_ca.server(), ClientCerts::Request(ClientCertRequest::default()));
    let running = start(transport, router(Some(deferred)), Options::default()).await;
    let ask = |identity: Option<Pair>| {
        let config = client_tls(&server_ca, identity.as_ref());
        async move { within(10, request(running.addr, Some(config), "/whoami")).await.unwrap() }
    };

    let none = ask(None).await;
    assert_eq!((none.status, none.body.as_str()), (200, "no certificate"));
    let valid = ask(Some(client_ca.client("alice", &[]))).await;
    assert_eq!(valid.body, "alice; key proven; trusted");
    let stranger = ask(Some(other_ca.client("mallory", &[]))).await;
    assert!(stranger.body.starts_with("mallory; key proven; refused: certificate not trusted"), "{}", stranger.body);
    assert!(stranger.body.contains("UnknownIssuer"), "{}", stranger.body);
    let expired = ask(Some(client_ca.expired_client("bob"))).await;
    assert!(expired.body.starts_with("bob; key proven; refused"), "{}", expired.body);
    assert!(expired.body.contains("certificate expired"), "{}", expired.body);
    running.stop().await;
}

#[tokio::test]
async fn handshake_verification_refuses_bad_chains_but_never_requires_one() {
    let server_ca = Ca::new("server CA");
    let client_ca = Ca::new("client CA");
    let other_ca = Ca::new("another CA");
    let request_certs = ClientCerts::Request(ClientCertRequest {
        ca: Some(PemSource::Inline(client_ca.cert_pem.clone())),
        verify_chain: true,
        allowed_sans: None,
    });
    let running = start(tls(&server_ca.server(), request_certs), router(None), Options::default()).await;
    let ask = |identity: Option<Pair>| {
        let config = client_tls(&server_ca, identity.as_ref());
        async move { within(10, request(running.addr, Some(config), "/whoami")).await }
    };

    assert_eq!(ask(None).await.unwrap().body, "no certificate", "the handshake does not require one");
    assert_eq!(ask(Some(client_ca.client("alice", &[]))).await.unwrap().body, "alice; chain verified; not checked");
    let err = ask(Some(other_ca.client("mallory", &[]))).await.unwrap_err();
    assert!(err.to_string().contains("UnknownCA"), "certificate from another CA: {err}");
    let err = ask(Some(client_ca.expired_client("bob"))).await.unwrap_err();
    assert!(err.to_string().contains("CertificateExpired"), "expired certificate: {err}");
    running.stop().await;
}

#[tokio::test]
async fn allowed_sans_apply_in_the_handshake() {
    let ca = Ca::new("one CA");
    let request_certs = ClientCerts::Request(ClientCertRequest {
        ca: None,
        verify_chain: false,
        allowed_sans: Some(vec!["prometheus.monitoring.svc".to_owned()]),
    });
    let running = start(tls(&ca.server(), request_certs), router(None), Options::default()).await;
    let ask = |pair: Pair| {
        let config = client_tls(&ca, Some(&pair));
        async move { within(10, request(running.addr, Some(config), "/whoami")).await }
    };
    let allowed = ask(ca.client("prometheus", &["prometheus.monitoring.svc"])).await.unwrap();
    assert_eq!(allowed.body, "prometheus; key proven; not checked");
    let err = ask(ca.client("grafana", &["grafana.monitoring.svc"])).await.unwrap_err();
    assert!(err.to_string().contains("AccessDenied"), "SAN not allowed: {err}");
    running.stop().await;
}

#[tokio::test]
async fn plain_http_on_the_tls_port_gets_a_clear_400() {
    let ca = Ca::new("server CA");
    let running = start(tls(&ca.server(), ClientCerts::Off), router(None), Options::default()).await;
    let answer = within(10, request(running.addr, None, "/whoami")).await.unwrap();
    assert_eq!(answer.status, 400);
    assert!(answer.body.contains("HTTP request to an HTTPS server"), "{}", answer.body);
    running.stop().await;
}
