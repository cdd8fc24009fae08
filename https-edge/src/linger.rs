//! Delivering a refusal: after hyper answers a request head it could not accept (`414`
//! for a too-long request line, `431` for too-large headers, `400` for a malformed
//! head), the client is usually still sending the rest of it. Closing a socket whose
//! receive buffer holds unread data makes the kernel send a reset instead of a FIN, and
//! a reset can arrive before the client has read the answer: the client sees
//! "connection reset", not the `431` that explains why.
//!
//! So the connection lingers: its write side is shut down (FIN after the answer; TLS
//! sends close_notify first) and whatever the client still sends is read and dropped,
//! up to [`LINGER_BYTES`] or [`LINGER_TIME`], whichever comes first, or until the
//! client closes. The connection keeps its place in the connection limit meanwhile and
//! can be shed like any idle one, so lingering costs no more than an idle connection.
//!
//! hyper consumes the I/O object it serves and gives no way back after an error;
//! [`Returning`] wraps it and hands the stream back through a channel when hyper drops
//! it.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::oneshot;

/// At most this much of an over-long request is read and dropped: a 1 MiB label
/// selector, four times over.
pub(crate) const LINGER_BYTES: usize = 4 << 20;
/// At most this long is spent lingering, however slowly the client sends.
pub(crate) const LINGER_TIME: Duration = Duration::from_secs(2);

/// An I/O object that returns its stream through a channel when dropped.
#[derive(Debug)]
pub(crate) struct Returning<I> {
    io: Option<I>,
    back: Option<oneshot::Sender<I>>,
}

impl<I> Returning<I> {
    /// Wraps `io`; the receiver gets it back once the wrapper is dropped.
    pub(crate) fn new(io: I) -> (Self, oneshot::Receiver<I>) {
        let (back, receiver) = oneshot::channel();
        (Returning { io: Some(io), back: Some(back) }, receiver)
    }

    fn inner(&mut self) -> io::Result<&mut I> {
        self.io.as_mut().ok_or_else(|| io::ErrorKind::NotConnected.into())
    }
}

impl<I> Drop for Returning<I> {
    fn drop(&mut self) {
        if let (Some(io), Some(back)) = (self.io.take(), self.back.take()) {
            // Nobody waiting means the connection ended cleanly: just close.
            let _ = back.send(io);
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Returning<I> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().inner() {
            Ok(io) => Pin::new(io).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Returning<I> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut().inner() {
            Ok(io) => Pin::new(io).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().inner() {
            Ok(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.as_ref().is_some_and(AsyncWrite::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().inner() {
            Ok(io) => Pin::new(io).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().inner() {
            Ok(io) => Pin::new(io).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// Shuts the write side down and reads what the client still sends, within the bounds;
/// returns the bytes dropped.
pub(crate) async fn linger<I: AsyncRead + AsyncWrite + Unpin>(mut io: I) -> usize {
    let mut total = 0usize;
    let _ = tokio::time::timeout(LINGER_TIME, async {
        if io.flush().await.is_err() || io.shutdown().await.is_err() {
            return;
        }
        let mut sink = vec![0u8; 16 << 10];
        while total < LINGER_BYTES {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_stream_comes_back_when_the_wrapper_is_dropped() {
        let (client, server) = tokio::io::duplex(64);
        let (mut wrapped, back) = Returning::new(server);
        wrapped.write_all(b"hi").await.unwrap();
        drop(wrapped);
        let mut server = back.await.expect("returned on drop");
        let mut client = client;
        let mut got = [0u8; 2];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hi");
        client.write_all(b"rest of a long request").await.unwrap();
        drop(client);
        let mut rest = Vec::new();
        server.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"rest of a long request");
    }

    #[tokio::test]
    async fn lingering_reads_until_the_client_closes_and_stops_at_the_byte_bound() {
        let (mut client, server) = tokio::io::duplex(64 << 10);
        let sender = tokio::spawn(async move {
            let chunk = vec![b'a'; 64 << 10];
            // More than the bound: lingering must stop reading before the client stops sending.
            for _ in 0..(LINGER_BYTES / chunk.len() + 8) {
                if client.write_all(&chunk).await.is_err() {
                    break;
                }
            }
        });
        let dropped = linger(server).await;
        assert!((LINGER_BYTES..LINGER_BYTES + (64 << 10)).contains(&dropped), "{dropped}");
        sender.await.unwrap();
    }
}
