//! The admin listener's own budget: at most `CONNECTIONS` connections are served at once, so a
//! flood of admin connections takes a bounded number of tasks and buffers, never the traffic's.
//! Over the cap, accepting waits: new connections queue in the kernel's backlog until a served
//! one closes. Each connection also carries its client's address, which the authentication
//! throttle keys on.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Admin connections served at once: a dashboard takes a few, scripts a few more.
pub const CONNECTIONS: usize = 64;

pub struct Capped {
    inner: TcpListener,
    places: Arc<Semaphore>,
}

impl Capped {
    pub fn new(inner: TcpListener, cap: usize) -> Capped {
        Capped { inner, places: Arc::new(Semaphore::new(cap)) }
    }
}

impl Listener for Capped {
    type Io = Held;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Held, SocketAddr) {
        // Never closed, so a permit always comes; without one, nothing is accepted.
        let place = loop {
            if let Ok(p) = self.places.clone().acquire_owned().await {
                break p;
            }
        };
        // axum's accept logs and retries errors (EMFILE included) itself.
        let (io, addr) = Listener::accept(&mut self.inner).await;
        (Held { io, _place: place }, addr)
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// An accepted connection holding its place under the cap until it is dropped.
pub struct Held {
    io: TcpStream,
    _place: OwnedSemaphorePermit,
}

/// The client's address, as the admin's handlers read it (`ConnectInfo<Peer>`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, Capped>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Capped>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

impl AsyncRead for Held {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn over_the_cap_a_connection_waits_until_a_served_one_closes() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut capped = Capped::new(inner, 2);
        let c1 = TcpStream::connect(addr).await.unwrap();
        let _c2 = TcpStream::connect(addr).await.unwrap();
        let mut c3 = TcpStream::connect(addr).await.unwrap();
        let first = capped.accept().await;
        let _second = capped.accept().await;
        // The third is in the backlog: not accepted while two are held.
        assert!(tokio::time::timeout(Duration::from_millis(200), capped.accept()).await.is_err());
        drop(first);
        drop(c1);
        let (mut third, from) = tokio::time::timeout(Duration::from_secs(5), capped.accept()).await.expect("accepted once a place is free");
        assert_eq!(from, c3.local_addr().unwrap());
        c3.write_all(b"x").await.unwrap();
        let mut got = [0u8; 1];
        third.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"x");
    }
}
