//! The self-provisioned serving certificate against the in-test API server: replicas that
//! start at the same moment agree on one CA, the APIServices' `caBundle` verifies what
//! every replica serves, rotation (serving certificate and CA) never breaks a client that
//! trusts the published bundle, and API failures (500, 409, a missing APIService, a
//! corrupted Secret) keep the last good certificate and recover. That `deploy/base`'s
//! roles let the adapter write its Secret and the APIServices' `caBundle` is checked on
//! a real API server (`real-cluster/tests/aggregator.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use support::{Behavior, Exporter, Pki, fixture};
use test_support::apiserver::ApiServer;
use test_support::apiserver::store::{apiservice_path, secret_path};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "gpu-telemetry";
const SECRET: &str = "gpu-metrics-adapter-serving";
const HOST: &str = "gpu-metrics-adapter.gpu-telemetry.svc";
const APISERVICES: [&str; 2] = ["v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"];

fn apiservice(name: &str, insecure: bool) -> Value {
    let (version, group) = name.split_once('.').unwrap();
    let mut spec = json!({"group": group, "version": version, "groupPriorityMinimum": 100, "versionPriority": 100,
        "service": {"name": "gpu-metrics-adapter", "namespace": NS, "port": 443}});
    if insecure {
        spec["insecureSkipTLSVerify"] = json!(true);
    }
    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": name}, "spec": spec})
}

struct Cluster {
    pki: Pki,
    fake: ApiServer,
    api: SocketAddr,
    exporter: Exporter,
}

impl Cluster {
    async fn new() -> Self {
        let pki = Pki::new();
        let fake = support::apiserver();
        fake.authentication_config_map(pki.auth_configmap());
        let api = fake.serve().await;
        let exporter = Exporter::start(Behavior::Serve(fixture("node-h100-timesliced.prom"))).await;
        Self { pki, fake, api, exporter }
    }

    fn with_apiservices(self) -> Self {
        // One as the previous manifests installed it (insecureSkipTLSVerify), one without.
        self.fake.objects().put(&apiservice_path(APISERVICES[0]), apiservice(APISERVICES[0], true));
        self.fake.objects().put(&apiservice_path(APISERVICES[1]), apiservice(APISERVICES[1], false));
        self
    }

    fn flags(&self, extra: &[&str]) -> Vec<String> {
        let mut f = vec![
            format!("--kubeconfig={}", support::adapter_kubeconfig(self.api, self.pki.dir.path()).display()),
            format!("--exporter-url={}", self.exporter.url()),
            format!("--tls-secret-name={SECRET}"),
            format!("--tls-secret-namespace={NS}"),
            format!("--tls-ca-bundle-apiservices={}", APISERVICES.join(",")),
            format!("--self-signed-hosts=gpu-metrics-adapter,{HOST}"),
            "--tls-secret-check-interval=250ms".into(),
            "--kube-api-timeout=2s".into(),
        ];
        f.extend(extra.iter().map(|s| (*s).to_owned()));
        f
    }

    fn secret(&self) -> Option<Value> {
        self.fake.objects().get(&secret_path(NS, SECRET))
    }

    fn secret_key(&self, key: &str) -> Vec<u8> {
        let secret = self.secret().expect("the Secret exists");
        base64::engine::general_purpose::STANDARD.decode(secret["data"][key].as_str().unwrap()).unwrap()
    }

    /// The caBundle of an APIService, as the aggregator reads it.
    fn ca_bundle(&self, name: &str) -> Option<Vec<u8>> {
        let svc = self.fake.objects().get(&apiservice_path(name))?;
        let b64 = svc["spec"]["caBundle"].as_str()?;
        Some(base64::engine::general_purpose::STANDARD.decode(b64).unwrap())
    }
}

fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    CertificateDer::pem_slice_iter(pem).map(|c| c.unwrap().to_vec()).collect()
}

/// Connects like the aggregator: trusting only `bundle`, checking the Service's DNS name.
/// Returns the leaf served, after one HTTP request over the connection.
async fn handshake(addr: SocketAddr, bundle: &[u8]) -> Result<Vec<u8>, String> {
    let mut roots = rustls::RootCertStore::empty();
    for der in ders(bundle) {
        roots.add(CertificateDer::from(der)).map_err(|e| e.to_string())?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let mut tls = connector.connect(ServerName::try_from(HOST).unwrap(), tcp).await.map_err(|e| e.to_string())?;
    let leaf = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
    tls.write_all(b"GET /livez HTTP/1.1\r\nhost: adapter\r\nconnection: close\r\n\r\n")
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out);
    if !text.starts_with("HTTP/1.1 200") {
        return Err(format!("/livez answered {text}"));
    }
    Ok(leaf)
}

/// Accepts any server certificate, as the kubelet's HTTPS probes do.
#[derive(Debug)]
struct AnyCertificate(rustls::crypto::WebPkiSupportedAlgorithms);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(m, c, d, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        m: &[u8],
        c: &CertificateDer<'_>,
        d: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(m, c, d, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `/readyz` as the kubelet's probe reads it (no certificate verification).
async fn probe_readyz(addr: SocketAddr) -> String {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(AnyCertificate(provider.signature_verification_algorithms));
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut tls = connector.connect(ServerName::try_from("probe").unwrap(), tcp).await.unwrap();
    tls.write_all(b"GET /readyz HTTP/1.1\r\nhost: adapter\r\nconnection: close\r\n\r\n").await.unwrap();
    let mut out = Vec::new();
    tls.read_to_end(&mut out).await.unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_starting_together_agree_on_one_ca_and_the_aggregator_verifies_both() {
    let c = Cluster::new().await.with_apiservices();
    // Both replicas' first reads of the Secret are held until both have asked: both see
    // no Secret and both try to create it.
    c.fake.objects().hold_reads(&secret_path(NS, SECRET), 2);
    let flags = c.flags(&[]);
    let (a, b) = tokio::join!(support::start(&flags), support::start(&flags));

    let creates = c.fake.objects().statuses("POST", &secret_path(NS, SECRET));
    let mut sorted = creates.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![201, 409], "one create wins, the other is told AlreadyExists: {creates:?}");

    let served = ders(&c.secret_key("tls.crt")).remove(0);
    let bundle = c.secret_key("ca-bundle.crt");
    assert_eq!(ders(&bundle), ders(&c.secret_key("ca.crt")), "one CA, in the bundle");
    for name in APISERVICES {
        assert_eq!(c.ca_bundle(name).as_deref(), Some(bundle.as_slice()), "{name} caBundle");
        let svc = c.fake.objects().get(&apiservice_path(name)).unwrap();
        assert!(svc["spec"].get("insecureSkipTLSVerify").is_none_or(Value::is_null), "{name}: {svc}");
        assert_eq!(svc["spec"]["service"]["name"], "gpu-metrics-adapter", "the rest of the spec is kept");
    }
    for r in [&a, &b] {
        let leaf = handshake(r.addr, &bundle).await.unwrap();
        assert_eq!(leaf, served, "every replica serves the Secret's certificate");
    }
    let secret = c.secret().unwrap();
    assert_eq!(secret["metadata"]["labels"]["app.kubernetes.io/managed-by"], "gpu-metrics-adapter");
    // Everything was within the shipped RBAC.
    let denied: Vec<_> = c.fake.objects().answered().iter().filter(|a| a.status == 403).cloned().collect();
    assert!(denied.is_empty(), "{denied:?}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotation_of_certificate_and_ca_never_breaks_a_client_that_trusts_the_published_bundle() {
    let c = Cluster::new().await.with_apiservices();
    // A 9 s serving certificate (renewed with 3 s left) under a 27 s CA (next CA made with
    // 9 s left, signing 2 checks after every APIService trusts it).
    let flags = c.flags(&["--tls-cert-validity=9s", "--tls-ca-validity=27s"]);
    let (a, b) = tokio::join!(support::start(&flags), support::start(&flags));

    let first_ca = c.secret_key("ca.crt");
    let mut leaves = std::collections::BTreeSet::new();
    let mut cas = std::collections::BTreeSet::new();
    // The aggregator learns a new caBundle through a watch; here it acts on what was
    // published 400 ms ago (less than the 500 ms promote_after), so a replica that served a new CA before the bundle carried
    // it would fail the handshake.
    let mut published: std::collections::VecDeque<(Instant, Vec<u8>)> = Default::default();
    let mut handshakes = 0;
    let deadline = Instant::now() + Duration::from_secs(45);
    while Instant::now() < deadline {
        published.push_back((Instant::now(), c.ca_bundle(APISERVICES[1]).unwrap()));
        while published.len() > 1 && published[1].0.elapsed() >= Duration::from_millis(400) {
            published.pop_front();
        }
        let bundle = published[0].1.clone();
        for r in [&a, &b] {
            let leaf = handshake(r.addr, &bundle)
                .await
                .unwrap_or_else(|e| panic!("handshake {handshakes} failed against the published bundle: {e}"));
            leaves.insert(leaf);
            handshakes += 1;
        }
        cas.insert(c.secret_key("ca.crt"));
        if cas.len() >= 2 && leaves.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cas.len() >= 2, "the CA rotated within the deadline");
    assert!(leaves.len() >= 3, "the serving certificate was renewed at least twice: {}", leaves.len());
    let bundle = c.secret_key("ca-bundle.crt");
    assert!(ders(&bundle).contains(&ders(&first_ca)[0]), "the retired CA stays trusted until it expires");
    // Writes were few: a Secret update per change, not per check.
    let updates = c.fake.objects().statuses("PUT", &secret_path(NS, SECRET)).len();
    assert!(updates <= 12, "{updates} Secret updates");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn api_failures_keep_the_adapter_up_and_it_recovers() {
    let c = Cluster::new().await;
    // The API server fails the Secret read at start; the APIServices do not exist yet.
    c.fake.objects().inject("GET", &secret_path(NS, SECRET), &[500; 3]);
    let r = support::start(&c.flags(&[])).await;
    let ready = probe_readyz(r.addr).await;
    assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
    assert!(ready.contains("[-]serving-certificate failed"), "{ready}");
    // The Secret is made once the API answers, and served, though no APIService takes the bundle.
    support::eventually("the Secret", Duration::from_secs(10), async || c.secret().is_some()).await;
    let bundle = c.secret_key("ca-bundle.crt");
    support::eventually("serving from the Secret", Duration::from_secs(10), async || {
        handshake(r.addr, &bundle).await.is_ok()
    })
    .await;
    // The APIServices appear (installed after the adapter): they get the bundle.
    for name in APISERVICES {
        c.fake.objects().put(&apiservice_path(name), apiservice(name, false));
    }
    support::eventually("caBundle published", Duration::from_secs(10), async || {
        APISERVICES.iter().all(|n| c.ca_bundle(n).as_deref() == Some(bundle.as_slice()))
    })
    .await;
    r.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_conflicting_write_is_read_again_and_a_corrupted_secret_is_replaced() {
    let c = Cluster::new().await.with_apiservices();
    // A Secret someone broke: the serving key is gone.
    c.fake.objects().put(
        &secret_path(NS, SECRET),
        json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":SECRET,"namespace":NS},
               "data":{"tls.crt": base64::engine::general_purpose::STANDARD.encode("not a certificate")}}),
    );
    // The first replacement loses a race with another writer.
    c.fake.objects().inject("PUT", &secret_path(NS, SECRET), &[409]);
    let r = support::start(&c.flags(&[])).await;
    let path = secret_path(NS, SECRET);
    let exchange: Vec<(String, u16)> = c
        .fake
        .objects()
        .answered()
        .iter()
        .filter(|a| a.path == path)
        .map(|a| (a.method.clone(), a.status))
        .take(4)
        .collect();
    let expected = [("GET", 200), ("PUT", 409), ("GET", 200), ("PUT", 200)].map(|(m, s)| (m.to_owned(), s));
    assert_eq!(exchange, expected, "the conflict is followed by a fresh read and a write");
    let bundle = c.secret_key("ca-bundle.crt");
    assert_eq!(c.ca_bundle(APISERVICES[0]).as_deref(), Some(bundle.as_slice()));
    let leaf = handshake(r.addr, &bundle).await.unwrap();
    assert_eq!(leaf, ders(&c.secret_key("tls.crt")).remove(0));
    let ready = probe_readyz(r.addr).await;
    assert!(ready.contains("[+]serving-certificate ok"), "{ready}");
    r.stop().await;
}

#[tokio::test]
async fn settings_that_cannot_work_are_refused_at_start() {
    let c = Cluster::new().await;
    let args = support::args(&c.flags(&["--tls-cert-validity=10h", "--tls-ca-validity=20h"]));
    let e = gpu_metrics_adapter::app::App::build(&args).await.unwrap_err().to_string();
    assert!(e.contains("--tls-cert-validity") && e.contains("a third"), "{e}");
}
