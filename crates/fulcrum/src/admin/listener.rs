//! The admin listener's own budget: at most `CONNECTIONS` connections are served at once, the TCP
//! listener's and the control socket's together (`admin::socket`), so a
//! flood of admin connections takes a bounded number of tasks and buffers, never the traffic's.
//! Over the cap, accepting waits: new connections queue in the kernel's backlog until a served
//! one closes. A connection that moves no byte either way for `IDLE` is closed, so connections
//! left open and silent cannot hold every place for ever. Each connection also carries its
//! client's address, which the authentication throttle keys on.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

/// Admin connections served at once: a dashboard takes a few, scripts a few more. The
/// descriptor budget reserves as many (`live::budget`).
pub const CONNECTIONS: usize = crate::live::budget::ADMIN_CONNECTIONS;
/// How long a connection may move nothing: the dashboard polls every second, and a browser
/// opens a new connection when it finds an old one closed.
pub const IDLE: Duration = Duration::from_secs(60);

/// The places of the process's admin connections, which its TCP listener and its control socket
/// share, so the descriptors they take stay within what `live::budget` reserves.
static PLACES: LazyLock<Arc<Semaphore>> = LazyLock::new(|| Arc::new(Semaphore::new(CONNECTIONS)));

pub struct Capped<L = TcpListener> {
    inner: L,
    places: Arc<Semaphore>,
}

impl<L> Capped<L> {
    pub fn new(inner: L, cap: usize) -> Capped<L> {
        Capped { inner, places: Arc::new(Semaphore::new(cap)) }
    }

    /// `inner` under the process's shared admin cap.
    pub fn admin(inner: L) -> Capped<L> {
        Capped { inner, places: PLACES.clone() }
    }
}

impl<L: Listener> Listener for Capped<L>
where
    L::Io: Unpin,
{
    type Io = Held<L::Io>;
    type Addr = L::Addr;

    async fn accept(&mut self) -> (Held<L::Io>, L::Addr) {
        // Never closed, so a permit always comes; without one, nothing is accepted.
        let place = loop {
            if let Ok(p) = self.places.clone().acquire_owned().await {
                break p;
            }
        };
        // axum's accept logs and retries errors (EMFILE included) itself.
        let (io, addr) = Listener::accept(&mut self.inner).await;
        (Held { io, idle: Box::pin(tokio::time::sleep(IDLE)), _place: place }, addr)
    }

    fn local_addr(&self) -> std::io::Result<L::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection holding its place under the cap until it is dropped, and closed when
/// idle for `IDLE`.
pub struct Held<Io = TcpStream> {
    io: Io,
    /// Fires `IDLE` after the last byte moved.
    idle: Pin<Box<Sleep>>,
    _place: OwnedSemaphorePermit,
}

impl<Io> Held<Io> {
    /// The connection itself (the control socket reads its peer's credentials).
    pub fn inner(&self) -> &Io {
        &self.io
    }

    /// What the stream answered, with progress restarting the idle time and a wait past it
    /// turned into an error, which makes the server close the connection.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match polled {
            Poll::Pending if self.idle.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, format!("admin connection idle for {IDLE:?}"))))
            }
            Poll::Pending => Poll::Pending,
            ready => {
                self.idle.as_mut().reset(crate::clock::timer_now() + IDLE);
                ready
            }
        }
    }
}

/// The client's address, as the admin's handlers read it (`ConnectInfo<Peer>`).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

impl Connected<IncomingStream<'_, Capped>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Capped>) -> Peer {
        Peer(*stream.remote_addr())
    }
}

impl<Io: AsyncRead + Unpin> AsyncRead for Held<Io> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        this.watch(cx, polled)
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Held<Io> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.watch(cx, polled)
    }
    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[std::io::IoSlice<'_>]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
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

    #[tokio::test(start_paused = true)]
    async fn a_connection_silent_for_the_idle_time_is_closed_and_one_in_use_is_not() {
        let inner = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut capped = Capped::new(inner, 2);
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (mut held, _) = capped.accept().await;
        let started = crate::clock::timer_now();
        // Bytes arriving within the idle time keep it open.
        for _ in 0..3 {
            tokio::time::sleep(IDLE / 2).await;
            client.write_all(b"x").await.unwrap();
            let mut got = [0u8; 1];
            held.read_exact(&mut got).await.unwrap();
        }
        let mut got = [0u8; 1];
        let err = held.read(&mut got).await.expect_err("idle");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(crate::clock::since(started) >= IDLE / 2 * 3 + IDLE, "{:?}", crate::clock::since(started));
    }

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
