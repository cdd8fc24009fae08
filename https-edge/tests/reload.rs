//! Reload: rotated certificate, key and client CA files are used by the next handshake
//! (a broken pair is not taken), a check interval defers the check, and a certificate
//! slot is read by every handshake.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use https_edge::pem::key_pair;
use https_edge::{
    CertSlot, ClientCertRequest, ClientCerts, Identity, Options, PemSource, ServerTls, TlsSettings, Transport,
};
use support::{Ca, Pair, client_tls, request, router, start, within};

fn write(dir: &Path, name: &str, text: &str) {
    let staged = dir.join(format!("{name}.new"));
    std::fs::write(&staged, text).unwrap();
    // Replaced by rename, as a Kubernetes Secret volume or cert-manager does.
    std::fs::rename(staged, dir.join(name)).unwrap();
}

fn file_settings(dir: &Path, server: &Pair) -> TlsSettings {
    write(dir, "tls.crt", &server.cert_pem);
    write(dir, "tls.key", &server.key_pem);
    TlsSettings::new(Identity::Pem {
        cert: PemSource::File(dir.join("tls.crt")),
        key: PemSource::File(dir.join("tls.key")),
    })
}

#[tokio::test]
async fn rotated_files_are_served_by_the_next_handshake_and_a_broken_pair_is_not() {
    let ca = Ca::new("server CA");
    let dir = tempfile::tempdir().unwrap();
    let first = ca.server();
    let tls = Arc::new(ServerTls::new(file_settings(dir.path(), &first), Duration::ZERO).unwrap());
    let running = start(Transport::Tls(tls.clone()), router(None), Options::default()).await;
    let served =
        || async { within(10, request(running.addr, Some(client_tls(&ca, None)), "/whoami")).await.unwrap().served };
    assert_eq!(served().await, Some(first.cert_der()));

    let second = ca.server();
    write(dir.path(), "tls.key", &second.key_pem);
    assert_eq!(served().await, Some(first.cert_der()), "new key with the old certificate: kept the old pair");
    write(dir.path(), "tls.crt", &second.cert_pem);
    assert_eq!(served().await, Some(second.cert_der()));
    assert_eq!(tls.serving_chain(), vec![second.cert_der()]);

    std::fs::remove_file(dir.path().join("tls.key")).unwrap();
    assert_eq!(served().await, Some(second.cert_der()), "a missing file keeps the last good pair");
    running.stop().await;
}

#[tokio::test]
async fn a_check_interval_defers_noticing_a_change() {
    let ca = Ca::new("server CA");
    let dir = tempfile::tempdir().unwrap();
    let first = ca.server();
    let tls = Arc::new(ServerTls::new(file_settings(dir.path(), &first), Duration::from_millis(300)).unwrap());
    let second = ca.server();
    write(dir.path(), "tls.crt", &second.cert_pem);
    write(dir.path(), "tls.key", &second.key_pem);
    let _ = tls.current();
    assert_eq!(tls.serving_chain(), vec![first.cert_der()], "checked less than an interval after the last check");
    tokio::time::sleep(Duration::from_millis(400)).await;
    let _ = tls.current();
    assert_eq!(tls.serving_chain(), vec![second.cert_der()]);
}

#[tokio::test]
async fn a_rotated_client_ca_applies_to_the_next_handshake() {
    let server_ca = Ca::new("server CA");
    let (old_ca, new_ca) = (Ca::new("old client CA"), Ca::new("new client CA"));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "client-ca.crt", &old_ca.cert_pem);
    let mut settings = file_settings(dir.path(), &server_ca.server());
    settings.client_certs = ClientCerts::Request(ClientCertRequest {
        ca: Some(PemSource::File(dir.path().join("client-ca.crt"))),
        verify_chain: true,
        allowed_sans: None,
    });
    let tls = Arc::new(ServerTls::new(settings, Duration::ZERO).unwrap());
    let running = start(Transport::Tls(tls), router(None), Options::default()).await;
    let ask = |ca: &Ca| {
        let config = client_tls(&server_ca, Some(&ca.client("alice", &[])));
        async move { within(10, request(running.addr, Some(config), "/whoami")).await }
    };
    assert!(ask(&old_ca).await.is_ok());
    assert!(ask(&new_ca).await.is_err());
    write(dir.path(), "client-ca.crt", &new_ca.cert_pem);
    assert!(ask(&old_ca).await.is_err(), "the old CA's clients are refused after the rotation");
    assert_eq!(ask(&new_ca).await.unwrap().body, "alice; chain verified; not checked");
    running.stop().await;
}

#[tokio::test]
async fn a_slot_is_read_by_every_handshake() {
    let ca = Ca::new("server CA");
    let load = |pair: &Pair| key_pair(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes(), "cert", "key").unwrap();
    let (first, second) = (ca.server(), ca.server());
    let slot = CertSlot::new(load(&first));
    let tls = Arc::new(ServerTls::new(TlsSettings::new(Identity::Slot(slot.clone())), Duration::ZERO).unwrap());
    let running = start(Transport::Tls(tls.clone()), router(None), Options::default()).await;
    let served =
        || async { within(10, request(running.addr, Some(client_tls(&ca, None)), "/whoami")).await.unwrap().served };
    assert_eq!(served().await, Some(first.cert_der()));
    slot.set(load(&second));
    assert_eq!(served().await, Some(second.cert_der()));
    assert_eq!(tls.serving_chain(), vec![second.cert_der()]);
    running.stop().await;
}
