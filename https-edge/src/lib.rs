//! The HTTPS serving edge both binaries share: rustls (ring provider only) with the
//! serving certificate reloaded when its files change, client certificates requested
//! but never required in the handshake, an accept loop with a bounded graceful drain,
//! and one certificate reader (`x509-parser`) for SANs, subject and validity.
//!
//! What stays with each binary: the exporter layers its exporter-toolkit web config
//! (basic auth, response headers, rate limit, the toolkit's TLS names and client-auth
//! policies, open probe paths) on top; the adapter its flags, the serving certificate it
//! provisions itself, and Kubernetes' delegated authentication.
//!
//! # Why client certificates are verified per request (deferred), not demanded
//!
//! A handshake that requires a client certificate cannot be passed by the kubelet's
//! HTTPS probes (they never present one) nor by a client that authenticates otherwise
//! (a bearer token at the adapter). Kubernetes' API servers do the same as this crate:
//! the handshake requests a certificate and lets a client without one finish, and each
//! request is authenticated on its own. So [`ClientCerts::Request`] never makes a
//! certificate mandatory; the handler sees what was presented ([`PeerCertificates`], a
//! request extension) and enforces its own rule per path (the exporter leaves
//! `/healthz` and `/readyz` open and answers `403` elsewhere; the adapter answers `401`).
//!
//! Where the presented chain is verified depends on where the trust lives:
//! - trust fixed in configuration (the exporter's `client_ca_file`):
//!   [`ClientCertRequest::verify_chain`] verifies in the handshake, so a certificate from
//!   another CA, expired, or without the client-auth usage fails with the standard TLS
//!   alert, as Go's servers do ([`HandshakeCheck::ChainVerified`]);
//! - trust that changes while serving (the adapter's CAs from the
//!   `extension-apiserver-authentication` ConfigMap, two of them, one per purpose): the
//!   handshake only proves the client holds the key ([`HandshakeCheck::KeyProven`]) and
//!   the handler verifies with [`ClientCa`] under the CA in force at that request, so a
//!   CA rotation applies to open connections too, without rebuilding TLS state.
//!   [`PeerCertificates::memo`] keeps the outcome per connection and CA generation, so a
//!   keep-alive connection's chain is verified once, not per request.
//!
//! # How reload detects change
//!
//! [`ServerTls`] stats the certificate, key and client CA files (size, mtime, inode) when
//! a handshake starts, at most once per check interval (zero: every handshake), and
//! rebuilds the rustls configuration only when a stamp changed; a rebuild that fails keeps
//! the previous configuration and is retried at the next change (details and the limits
//! of mtime in [`reload`](mod@reload)). A certificate the process replaces itself (the
//! adapter's self-provisioned Secret) goes through a [`CertSlot`] instead, read by each
//! handshake.
//!
//! # Drain bound
//!
//! On shutdown the listener closes at once, pending handshakes and idle keep-alive
//! connections close, requests in flight may finish, and everything still open after
//! [`Options::drain`] is aborted: [`serve`] returns within the drain however clients
//! behave (defaults: 10 s here, chosen per binary by its `--shutdown-*` flag, below
//! Kubernetes' 30 s termination grace period).
//!
//! # Connections under attack
//!
//! Slow or silent clients are bounded: a TLS client must finish its handshake within
//! `handshake_timeout` of being accepted (5 s), and an HTTP/1 client must send each
//! complete request head within `header_read_timeout` (5 s; counted from accept on
//! plain HTTP, from the handshake's end on TLS, and from the previous response on a
//! keep-alive connection), a third of the usual 15 s scrape interval. At most
//! `max_connections` (1024) connections are open, `max_connections_per_peer` (256) from
//! one address; at a limit the oldest *idle* connection is closed to make room, so a
//! new client (a scrape, the kubelet's probe) is always accepted while any connection
//! is idle, and accepting pauses only while all are serving requests. Before, a full
//! server stopped accepting, and about 600 idle sockets locked every client out
//! (`admit` explains the choice).
//!
//! Framing: a request head hyper refuses (`414`, `431`, `400`) is answered and the
//! connection lingers, reading up to 4 MiB for up to 2 s, so that the answer is not lost
//! to a reset (`linger`); an HTTP/1.1 request without exactly one valid `Host` gets
//! `400`, as RFC 9112 section 3.2 requires (`host`).
//!
//! Modules, one job each: [`pem`] (reading PEM material), [`cert`] (what a certificate
//! says), [`ca`](mod@ca) (client CA bundles), `client_auth` (the handshake's client
//! certificate verifier), [`tls`](mod@tls) (settings to rustls), [`reload`](mod@reload)
//! (rebuild on file change), `slot` (a replaceable certificate), [`peer`](mod@peer)
//! (what a request sees), `options` (transport and limits), [`serve`](mod@serve) (accept
//! loop, drain), `admit` (connection limits, shedding idle connections), `conn` (one
//! connection: TLS, HTTP/1.1 and HTTP/2), `host` (the `Host` rule) and `linger`
//! (delivering a refusal).

#![forbid(unsafe_code)]

mod admit;
pub mod ca;
pub mod cert;
mod client_auth;
mod conn;
mod host;
mod linger;
pub mod listen;
mod options;
pub mod peer;
pub mod pem;
pub mod reload;
pub mod serve;
mod slot;
pub mod tls;

pub use ca::ClientCa;
pub use cert::{CertError, CertInfo, Subject};
pub use client_auth::{ClientCertRequest, ClientCerts};
pub use peer::{HandshakeCheck, PeerCertificates};
pub use pem::{Material, PemError, PemSource};
pub use reload::ServerTls;
pub use serve::{
    DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_PEER,
    Options, ServeError, Transport, serve,
};
pub use slot::CertSlot;
pub use tls::{Identity, TlsError, TlsSettings};
