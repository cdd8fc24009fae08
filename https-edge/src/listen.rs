//! The listening socket, with a listen queue deep enough for a flood.
//!
//! `tokio::net::TcpListener::bind` asks for a queue of 1024. Under an idle-connection
//! flood whose sockets reconnect as fast as the edge sheds them, that queue overflows,
//! the kernel drops the SYNs it cannot queue, and a legitimate client's connect waits for
//! its first SYN retransmission, one second later: the ~1 s worst cases of the lockout
//! benchmark (docs/benchmarks.md, "Connection limits under attack"). [`LISTEN_BACKLOG`]
//! is the kernel's default cap (`net.core.somaxconn`, 4096 since Linux 5.4); the kernel
//! silently lowers a larger request to its cap.

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpSocket};

/// Connections the kernel may queue before `accept`.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (address reuse on, as `TcpListener::bind` does) and listens with
/// [`LISTEN_BACKLOG`]. An IPv6 wildcard address is dual-stack where the host's
/// `net.ipv6.bindv6only` is 0, the Linux default, as with `TcpListener::bind`.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binds_and_accepts_on_both_families() {
        for addr in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = bind(addr.parse().unwrap()) else {
                assert!(addr.starts_with('['), "IPv4 loopback must bind");
                continue; // no IPv6 on this host
            };
            let local = listener.local_addr().unwrap();
            let (client, accepted) = tokio::join!(tokio::net::TcpStream::connect(local), listener.accept());
            assert!(client.is_ok() && accepted.is_ok(), "{addr}");
        }
    }

    #[tokio::test]
    async fn a_taken_port_is_an_error() {
        let first = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let err = bind(first.local_addr().unwrap()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
    }
}
