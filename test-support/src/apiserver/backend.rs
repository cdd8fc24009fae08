//! What stands behind a pod's `proxy` subresource or an aggregated API in the in-test
//! API server: a real process (an exporter over HTTP, the metrics adapter over HTTPS
//! with a client certificate, as the aggregator calls it), a captured page, or a fault
//! (nothing listening, a server that never answers, added latency).
//!
//! A pod that cannot be reached is answered as kube-apiserver answers it: 503 with a
//! plain-text `error trying to reach service: ...`.
//!
//! A hostile exporter is a [`Backend::Streamed`] page: made as it is sent, of any size
//! or never ending, without the test holding it; it counts what the connection took, so
//! a test can tell a client that stopped reading from one that read it all.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// A backend's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    pub body: Bytes,
}

impl Answer {
    fn unreachable(what: &str) -> Answer {
        Answer {
            status: 503,
            content_type: "text/plain; charset=utf-8".into(),
            body: Bytes::from(format!("error trying to reach service: {what}")),
        }
    }
}

/// What answers.
#[derive(Clone)]
pub enum Backend {
    /// An HTTP server: a real exporter process.
    Http(SocketAddr),
    /// An HTTPS server, called with a client certificate.
    Https { addr: SocketAddr, server_name: String, tls: Arc<rustls::ClientConfig> },
    /// A fixed page: an exporter's captured output.
    Page { body: Bytes, content_type: String },
    /// Nothing listens (the pod is gone or its process died).
    Refused,
    /// Accepts and never answers.
    Hang,
    /// Answers as the inner backend, `delay` later.
    Delayed(Duration, Arc<Backend>),
    /// A page streamed as it is made: `head`, `line` `times` times (forever when
    /// `None`), then `tail`. Only the pods proxy streams it; `sent` counts the bytes the
    /// connection took.
    Streamed { head: Bytes, line: Bytes, times: Option<u64>, tail: Bytes, sent: Arc<AtomicU64> },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Http(a) => write!(f, "Http({a})"),
            Backend::Https { addr, .. } => write!(f, "Https({addr})"),
            Backend::Page { body, .. } => write!(f, "Page({} bytes)", body.len()),
            Backend::Refused => write!(f, "Refused"),
            Backend::Hang => write!(f, "Hang"),
            Backend::Delayed(d, b) => write!(f, "Delayed({d:?}, {b:?})"),
            Backend::Streamed { line, times, .. } => write!(f, "Streamed({} bytes × {times:?})", line.len()),
        }
    }
}

impl Backend {
    /// A captured exporter page (Prometheus text format).
    pub fn page(text: impl Into<String>) -> Backend {
        Backend::Page {
            body: Bytes::from(text.into()),
            content_type: "text/plain; version=0.0.4; charset=utf-8".into(),
        }
    }

    /// A streamed page (Prometheus text format): `head`, `line` `times` times or
    /// forever, then `tail`.
    pub fn streamed(head: &str, line: &str, times: Option<u64>, tail: &str) -> Backend {
        Backend::Streamed {
            head: Bytes::from(head.to_string()),
            line: Bytes::from(line.to_string()),
            times,
            tail: Bytes::from(tail.to_string()),
            sent: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The bytes a streamed page has handed to its connections so far (0 for others).
    pub fn sent(&self) -> u64 {
        match self {
            Backend::Streamed { sent, .. } => sent.load(Ordering::Relaxed),
            _ => 0,
        }
    }

    /// A streamed page's body, in chunks of about 64 KiB; `None` for other backends.
    pub fn stream(&self) -> Option<futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>> {
        let Backend::Streamed { head, line, times, tail, sent } = self else { return None };
        let per_chunk = (64 * 1024 / line.len().max(1)).max(1) as u64;
        let chunk = Bytes::from(line.repeat(per_chunk as usize));
        let (head, line, tail, sent) = (head.clone(), line.clone(), tail.clone(), sent.clone());
        // State: lines still to send (None: forever), then the tail, then the end.
        let state = (Some(head), *times, Some(tail));
        let stream = futures::stream::unfold(state, move |(head, left, tail)| {
            let (chunk, line, sent) = (chunk.clone(), line.clone(), sent.clone());
            async move {
                let (out, next) = if let Some(h) = head {
                    (h, (None, left, tail))
                } else {
                    match left {
                        Some(0) => (tail?, (None, Some(0), None)),
                        Some(n) if n < per_chunk => (Bytes::from(line.repeat(n as usize)), (None, Some(0), tail)),
                        Some(n) => (chunk, (None, Some(n - per_chunk), tail)),
                        None => (chunk, (None, None, tail)),
                    }
                };
                sent.fetch_add(out.len() as u64, Ordering::Relaxed);
                Some((Ok(out), next))
            }
        });
        Some(Box::pin(stream))
    }

    /// An HTTPS server trusted through `ca_pem`, called with `cert_pem`/`key_pem`.
    pub fn https(addr: SocketAddr, server_name: &str, ca_pem: &[u8], cert_pem: &[u8], key_pem: &[u8]) -> Backend {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(cert_pem).map(|c| c.unwrap()).collect();
        let key = PrivateKeyDer::from_pem_slice(key_pem).unwrap();
        let config =
            rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(chain, key).unwrap();
        Backend::Https { addr, server_name: server_name.into(), tls: Arc::new(config) }
    }

    /// GETs `path` (with its query) from the backend.
    pub fn get<'a>(&'a self, path: &'a str) -> futures::future::BoxFuture<'a, Answer> {
        Box::pin(async move {
            match self {
                Backend::Page { body, content_type } => {
                    Answer { status: 200, content_type: content_type.clone(), body: body.clone() }
                }
                Backend::Refused => Answer::unreachable("dial tcp 10.0.0.1:9400: connect: connection refused"),
                Backend::Hang => std::future::pending().await,
                Backend::Delayed(delay, inner) => {
                    tokio::time::sleep(*delay).await;
                    inner.get(path).await
                }
                Backend::Streamed { head, line, times: Some(n), tail, .. } => {
                    let body = [head.to_vec(), line.repeat(*n as usize), tail.to_vec()].concat();
                    Answer { status: 200, content_type: "text/plain; version=0.0.4".into(), body: Bytes::from(body) }
                }
                Backend::Streamed { times: None, .. } => Answer {
                    status: 501,
                    content_type: "text/plain".into(),
                    body: Bytes::from("a page that never ends is served through the pods proxy only"),
                },
                Backend::Http(addr) => match tokio::net::TcpStream::connect(addr).await {
                    Ok(stream) => exchange(stream, &addr.to_string(), path).await,
                    Err(e) => Answer::unreachable(&format!("dial tcp {addr}: {e}")),
                },
                Backend::Https { addr, server_name, tls } => {
                    let Ok(tcp) = tokio::net::TcpStream::connect(addr).await else {
                        return Answer::unreachable(&format!("dial tcp {addr}: connection refused"));
                    };
                    let name = ServerName::try_from(server_name.clone()).unwrap();
                    match tokio_rustls::TlsConnector::from(tls.clone()).connect(name, tcp).await {
                        Ok(stream) => exchange(stream, server_name, path).await,
                        Err(e) => Answer::unreachable(&format!("tls: {e}")),
                    }
                }
            }
        })
    }
}

async fn exchange<S>(stream: S, host: &str, path: &str) -> Answer
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let Ok((mut sender, connection)) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await else {
        return Answer::unreachable("handshake failed");
    };
    tokio::spawn(connection);
    let request = hyper::Request::get(path).header("host", host).body(Empty::<Bytes>::new()).unwrap();
    let Ok(response) = sender.send_request(request).await else {
        return Answer::unreachable("the connection closed before an answer");
    };
    let status = response.status().as_u16();
    let content_type =
        response.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("text/plain").to_string();
    match response.into_body().collect().await {
        Ok(body) => Answer { status, content_type, body: body.to_bytes() },
        Err(e) => Answer::unreachable(&format!("reading the answer: {e}")),
    }
}
