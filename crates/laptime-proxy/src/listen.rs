//! Client connections: accepting on a serving thread, telling HTTP/1 from h2c, the cap on open
//! connections, the head timeout, and graceful shutdown.
//!
//! A connection is held only while it is useful. Its first bytes must arrive within the head
//! timeout, and so must its head (hyper's timeout, which runs again from the end of each
//! answer, so it also closes a kept-alive connection left idle that long). At the cap, a new
//! connection closes the oldest idle one (no request in flight), so idle connections can never
//! lock real requests out; only when every open connection is busy is the new one refused.
//! The cap leaves file descriptors for the upstream connection each busy client connection may
//! need.
//!
//! Written over hyper-util's connection builder rather than `axum::serve`, which has none of
//! these bounds.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::sync::{watch, Notify};

use crate::spread::{Counted, Handed, Inbox, Place, Spread};
use crate::App;

/// What a connection's requests are answered by: the router, and the gateway whose dialects'
/// model calls skip it ([`crate::pipeline::model_call`]; the router sends the same calls to
/// the same function). The router's matching, its service clones and the boxes of a routed
/// request cost a model call about a tenth of its CPU (benchmarks/README, item 17).
#[derive(Clone)]
pub struct Front {
    pub router: axum::Router,
    pub app: Option<Arc<App>>,
}

type Answer = Pin<Box<dyn Future<Output = axum::response::Response> + Send>>;

impl Front {
    /// Everything through `router`.
    pub fn router(router: axum::Router) -> Front {
        Front { router, app: None }
    }

    fn answer(&self, req: http::Request<axum::body::Body>) -> Answer {
        let call = crate::pipeline::model_call(req.method(), req.uri().path());
        if let (Some(app), Some(dialect)) = (&self.app, call) {
            // Written into a box allocated first: `Box::pin(proxy(..))` copied the whole future
            // (7 KiB, the size of its largest state) into its box on every model call; this
            // way a call copies 7 KB less (`benchmarks/copies`, benchmarks/README.md item 24).
            // Bound before it is returned, so that the box is typed by the future itself.
            let boxed = Box::into_pin(Box::write(
                Box::new_uninit(),
                crate::pipeline::proxy(app.clone(), dialect, req),
            ));
            return boxed;
        }
        let routed = tower::ServiceExt::oneshot(self.router.clone(), req);
        Box::pin(async move { routed.await.unwrap_or_else(|never| match never {}) })
    }
}

/// File descriptors kept for everything but connections (listeners, the store, logs).
const FD_RESERVE: u64 = 256;

/// Raises the soft limit on open files to the hard limit; returns the soft limit now.
pub fn raise_fd_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!(error = %e, "could not raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// The default connection cap for a soft open-file limit: half of what the reserve leaves,
/// since each busy client connection may hold one upstream connection.
pub fn default_max_connections(fd_limit: u64) -> usize {
    let usable = fd_limit.saturating_sub(FD_RESERVE) / 2;
    usize::try_from(usable).unwrap_or(usize::MAX).max(16)
}

/// Every open client connection of the process, over all serving threads.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    open: Mutex<Open>,
    /// New connections closed at once because every open one was busy.
    pub refused: AtomicU64,
    /// Idle connections closed to make room for a new one.
    pub evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct Open {
    next_id: u64,
    /// By id: the oldest first.
    slots: BTreeMap<u64, Arc<Slot>>,
}

/// One open connection: its requests in flight, and the signal to close it.
#[derive(Debug, Default)]
struct Slot {
    in_flight: AtomicU32,
    close: Notify,
}

/// A connection's place among the open ones, given back when the connection ends.
#[derive(Debug)]
pub struct Admitted {
    connections: Arc<Connections>,
    id: u64,
    slot: Arc<Slot>,
}

impl Connections {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Connections {
            max: max.max(1),
            open: Mutex::new(Open::default()),
            refused: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().slots.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a new connection; at the cap the oldest idle connection is told to close
    /// (and no longer counts). `None` when every open connection has a request in flight.
    pub fn admit(self: &Arc<Self>) -> Option<Admitted> {
        let mut open = self.lock();
        if open.slots.len() >= self.max {
            let idle = open
                .slots
                .iter()
                .find(|(_, s)| s.in_flight.load(Ordering::Acquire) == 0)
                .map(|(id, _)| *id);
            let Some(idle) = idle else {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            if let Some(slot) = open.slots.remove(&idle) {
                slot.close.notify_one();
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let id = open.next_id;
        open.next_id += 1;
        let slot = Arc::new(Slot::default());
        open.slots.insert(id, slot.clone());
        Some(Admitted {
            connections: self.clone(),
            id,
            slot,
        })
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.connections.lock().slots.remove(&self.id);
    }
}

/// A request in flight on a connection, from its head to the end of its answer's body.
#[derive(Debug)]
struct Busy(Arc<Slot>);

impl Busy {
    fn enter(slot: &Arc<Slot>) -> Self {
        slot.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(slot.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

pin_project_lite::pin_project! {
    /// An answer's body that keeps its connection busy until it ends or is dropped.
    struct Answering {
        #[pin]
        body: axum::body::Body,
        _busy: Busy,
    }
}

impl Body for Answering {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// How client connections are served: HTTP/1.1 and h2c (prior knowledge), with the head
/// timeout. One builder per protocol: [`sniff`] tells which a connection speaks before either
/// serves it.
#[derive(Debug)]
pub struct Protocols {
    http1: auto::Builder<TokioExecutor>,
    http2: auto::Builder<TokioExecutor>,
    head_timeout: Duration,
}

/// Both protocols' builders, with `head_timeout` for HTTP/1 heads and for first bytes.
pub fn builder(head_timeout: Duration) -> Protocols {
    let configured = || {
        let mut b = auto::Builder::new(TokioExecutor::new());
        b.http1()
            .timer(TokioTimer::new())
            .header_read_timeout(head_timeout);
        b.http2().timer(TokioTimer::new());
        b
    };
    Protocols {
        http1: configured().http1_only(),
        http2: configured().http2_only(),
        head_timeout,
    }
}

/// The first bytes of an h2c connection (RFC 9113, 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol a new connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Protocol {
    Http1,
    Http2,
}

/// Reads a new connection's first bytes until they differ from h2c's preface (HTTP/1: for a
/// request, at its first or second byte) or are the whole of it; `None` when the client closes
/// first. The bytes read are given back in front of the connection ([`Replayed`]).
async fn sniff<T>(mut io: T) -> std::io::Result<Option<(Protocol, Replayed<T>)>>
where
    T: tokio::io::AsyncRead + Unpin,
{
    use tokio::io::AsyncReadExt;
    let mut seen = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    let protocol = loop {
        if len == seen.len() {
            break Protocol::Http2;
        }
        let got = io.read(&mut seen[len..]).await?;
        if got == 0 {
            return Ok(None);
        }
        len += got;
        if seen[..len] != H2_PREFACE[..len] {
            break Protocol::Http1;
        }
    };
    let replayed = Replayed {
        seen,
        len,
        at: 0,
        io,
    };
    Ok(Some((protocol, replayed)))
}

/// A connection with the bytes [`sniff`] read put back in front.
///
/// hyper-util's own detection (`auto::Builder` without a fixed protocol) puts them back with a
/// reader that returns them alone: hyper's first read of every HTTP/1 connection then held 24
/// bytes, not the head, and to read the rest hyper grew its read buffer from 8 to 16 KiB, kept
/// for the connection's life (heaptrack: 16 MB of 1,000 open streams). Here the read that
/// returns them also takes what the socket already holds, so the head arrives whole.
#[derive(Debug)]
struct Replayed<T> {
    seen: [u8; H2_PREFACE.len()],
    len: usize,
    at: usize,
    io: T,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Replayed<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.at == this.len {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        let take = (this.len - this.at).min(buf.remaining());
        buf.put_slice(&this.seen[this.at..this.at + take]);
        this.at += take;
        if this.at == this.len && buf.remaining() > 0 {
            // Pending: nothing more has come yet (the waker is registered, which costs at most
            // one early wake-up). An error is not lost: the next read meets the socket again.
            let _ = Pin::new(&mut this.io).poll_read(cx, buf);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Replayed<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
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

/// An HTTP/1 request with its URI and headers copied out of hyper's read buffer into one
/// buffer of their own.
///
/// hyper parses them as slices of the connection's read buffer, which stays shared while any
/// is alive; its next read (to notice a client that closes mid-request) then allocates a second
/// 8 KiB buffer instead of reusing the first, and a request that waits on its upstream holds
/// both (heaptrack, 1,000 open streams: 8 MB). An HTTP/2 request's head is its own already.
fn own_head<B>(req: http::Request<B>) -> http::Request<B> {
    if req.version() > http::Version::HTTP_11 {
        return req;
    }
    let (mut parts, body) = req.into_parts();
    let mut text = bytes::BytesMut::with_capacity(
        parts.uri.path().len()
            + parts.uri.query().map_or(0, |q| q.len() + 1)
            + parts.headers.values().map(|v| v.len()).sum::<usize>(),
    );
    text.extend_from_slice(parts.uri.path().as_bytes());
    if let Some(q) = parts.uri.query() {
        text.extend_from_slice(b"?");
        text.extend_from_slice(q.as_bytes());
    }
    let uri_end = text.len();
    let mut names = Vec::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        text.extend_from_slice(value.as_bytes());
        names.push((name, value, text.len()));
    }
    let text = text.freeze();
    // An absolute-form target (a proxy's request line) keeps its URI: it is rare and short.
    if parts.uri.scheme().is_none() {
        if let Ok(uri) = http::Uri::from_maybe_shared(text.slice(..uri_end)) {
            parts.uri = uri;
        }
    }
    let mut headers = http::HeaderMap::with_capacity(parts.headers.len());
    let mut start = uri_end;
    for (name, value, end) in names {
        // A name hyper knows is static; any other is copied on its own.
        let name =
            http::HeaderName::from_bytes(name.as_str().as_bytes()).unwrap_or_else(|_| name.clone());
        let mut owned = http::HeaderValue::from_maybe_shared(text.slice(start..end))
            .unwrap_or_else(|_| value.clone());
        owned.set_sensitive(value.is_sensitive());
        headers.append(name, owned);
        start = end;
    }
    parts.headers = headers;
    http::Request::from_parts(parts, body)
}

/// Where a serving thread accepts and receives its connections: the listening socket it
/// shares with the others, and its place in the [`Spread`] over them.
pub struct Accepting {
    pub listener: tokio::net::TcpListener,
    pub spread: Arc<Spread>,
    /// This thread's index in `spread`.
    pub me: usize,
    pub inbox: Inbox,
}

/// Accepts connections from the shared listener, and takes those other threads hand over,
/// serving each with `front` until `stop` (a connection accepted here may go to a thread
/// that serves fewer); then the connections finish their requests in flight (each closes when
/// it is idle) and it returns.
pub async fn accept_until_stopped(
    accepting: Accepting,
    front: Front,
    connections: Arc<Connections>,
    protocols: Arc<Protocols>,
    mut stop: watch::Receiver<bool>,
) {
    let Accepting {
        listener,
        spread,
        me,
        mut inbox,
    } = accepting;
    let mut serving = tokio::task::JoinSet::new();
    let mut accept_errors = AcceptErrors::default();
    let for_connections = stop.clone();
    let serve = |tcp: tokio::net::TcpStream, admitted: Admitted, counted: Counted| {
        let conn = serve_connection(
            tcp,
            front.clone(),
            protocols.clone(),
            admitted,
            for_connections.clone(),
        );
        async move {
            conn.await;
            drop(counted);
        }
    };
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            Some(_) = serving.join_next(), if !serving.is_empty() => {}
            Some(handed) = inbox.recv() => {
                match tokio::net::TcpStream::from_std(handed.tcp) {
                    Ok(tcp) => {
                        serving.spawn(serve(tcp, handed.admitted, handed.counted));
                    }
                    Err(e) => tracing::debug!(error = %e, "a handed connection failed"),
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let Some(admitted) = connections.admit() else {
                        // Every connection is busy: closing this one at once is kinder than
                        // leaving it in the backlog until the client gives up.
                        continue;
                    };
                    let _ = tcp.set_nodelay(true);
                    let (tcp, admitted, counted) = match spread.place(me) {
                        Place::Here(counted) => (tcp, admitted, counted),
                        Place::There(counted) => {
                            match hand_over(&spread, me, tcp, admitted, counted) {
                                Some(kept) => kept,
                                None => continue,
                            }
                        }
                    };
                    serving.spawn(serve(tcp, admitted, counted));
                }
                Err(e) => accept_errors.wait_after(e).await,
            },
        }
    }
    drop(listener);
    // Connections handed over but not yet served close with the listener's backlog.
    drop(inbox);
    while serving.join_next().await.is_some() {}
}

/// Hands a connection accepted here to the thread it was counted on. What comes back is to be
/// served here, counted here: that thread is stopping. A socket that cannot leave this
/// thread's runtime is closed (nothing was read from it yet).
fn hand_over(
    spread: &Arc<Spread>,
    me: usize,
    tcp: tokio::net::TcpStream,
    admitted: Admitted,
    counted: Counted,
) -> Option<(tokio::net::TcpStream, Admitted, Counted)> {
    let tcp = match tcp.into_std() {
        Ok(tcp) => tcp,
        Err(e) => {
            tracing::debug!(error = %e, "an accepted connection could not be handed over");
            return None;
        }
    };
    let handed = Handed {
        tcp,
        admitted,
        counted,
    };
    let back = spread.hand(handed, me).err()?;
    match tokio::net::TcpStream::from_std(back.tcp) {
        Ok(tcp) => Some((tcp, back.admitted, back.counted)),
        Err(e) => {
            tracing::debug!(error = %e, "a connection handed back could not be served");
            None
        }
    }
}

/// One connection, until it ends, is evicted or the server stops (both close it gracefully:
/// requests in flight finish first).
async fn serve_connection<T>(
    io: T,
    front: Front,
    protocols: Arc<Protocols>,
    admitted: Admitted,
    mut stop: watch::Receiver<bool>,
) where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let slot = admitted.slot.clone();
    let service = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let busy = Busy::enter(&slot);
        let answer = front.answer(own_head(req).map(axum::body::Body::new));
        async move {
            let response = answer.await;
            Ok::<_, std::convert::Infallible>(response.map(|body| Answering { body, _busy: busy }))
        }
    });
    // Nothing is in flight before the protocol is known: an eviction or a stop closes the
    // connection at once, and a client that sends nothing is closed at the head timeout.
    let sniffed = tokio::select! {
        sniffed = tokio::time::timeout(protocols.head_timeout, sniff(io)) => sniffed,
        _ = admitted.slot.close.notified() => return,
        _ = stop.wait_for(|s| *s) => return,
    };
    let (protocol, io) = match sniffed {
        Ok(Ok(Some(sniffed))) => sniffed,
        // Closed before a request, or silent past the head timeout.
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "client connection failed before its first request");
            return;
        }
    };
    let builder = match protocol {
        Protocol::Http1 => &protocols.http1,
        Protocol::Http2 => &protocols.http2,
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = pin!(conn);
    let mut closing = false;
    loop {
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "client connection ended with an error");
                }
                break;
            }
            _ = admitted.slot.close.notified(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            _ = stop.wait_for(|s| *s), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// Accept errors: out of file descriptors is logged at most once a second, and the loop waits
/// a moment instead of spinning on a backlog it cannot take.
#[derive(Debug, Default)]
struct AcceptErrors {
    last_logged: Option<tokio::time::Instant>,
    since: u64,
}

impl AcceptErrors {
    fn wait_after(&mut self, e: std::io::Error) -> impl Future<Output = ()> {
        let out_of_fds = matches!(e.raw_os_error(), Some(23 | 24));
        if out_of_fds {
            self.since += 1;
            let now = tokio::time::Instant::now();
            if self
                .last_logged
                .is_none_or(|t| now.duration_since(t) >= Duration::from_secs(1))
            {
                tracing::warn!(
                    error = %e,
                    failed_accepts = self.since,
                    "cannot accept connections: out of file descriptors"
                );
                self.last_logged = Some(now);
                self.since = 0;
            }
        } else {
            tracing::debug!(error = %e, "accept failed");
        }
        let pause = if out_of_fds {
            Duration::from_millis(20)
        } else {
            Duration::ZERO
        };
        tokio::time::sleep(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_the_cap_the_oldest_idle_connection_makes_room_and_busy_ones_never_do() {
        let c = Connections::new(2);
        let a = c.admit().unwrap();
        let b = c.admit().unwrap();
        let busy_a = Busy::enter(&a.slot);
        // At the cap: `a` is busy, so `b` (idle) is the one closed.
        let third = c.admit().unwrap();
        assert_eq!((c.open(), c.evicted.load(Ordering::Relaxed)), (2, 1));
        assert!(b.slot.close.notified().now_or_never_ready());
        let busy_third = Busy::enter(&third.slot);
        assert!(c.admit().is_none(), "every open connection is busy");
        assert_eq!(c.refused.load(Ordering::Relaxed), 1);
        drop(busy_a);
        assert!(c.admit().is_some(), "a is idle again");
        drop((b, busy_third));
        assert_eq!(c.open(), 1, "the evicted slot was already given back");
    }

    #[test]
    fn the_default_cap_leaves_descriptors_for_upstream_connections() {
        assert_eq!(default_max_connections(20_000), 9_872);
        assert_eq!(default_max_connections(1_024), 384);
        assert_eq!(default_max_connections(100), 16);
    }

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    /// A connection served under paused time over an in-process pipe, with a 2 s head timeout.
    fn served() -> (
        tokio::io::DuplexStream,
        Arc<Connections>,
        watch::Sender<bool>,
    ) {
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let connections = Connections::new(4);
        let admitted = connections.admit().unwrap();
        let (client, server) = tokio::io::duplex(1 << 16);
        let (stop_tx, stop) = watch::channel(false);
        let protocols = Arc::new(builder(Duration::from_secs(2)));
        let front = Front::router(router);
        tokio::spawn(serve_connection(server, front, protocols, admitted, stop));
        (client, connections, stop_tx)
    }

    /// Reads until the server closes the pipe; what it sent.
    async fn read_to_close(client: &mut tokio::io::DuplexStream) -> String {
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        String::from_utf8(got).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_trickled_a_byte_a_second_is_cut_at_the_head_timeout() {
        let (mut client, connections, _stop) = served();
        let start = Instant::now();
        let trickle = async {
            for b in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaa" {
                if client.write_all(&[*b]).await.is_err() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(60), trickle)
            .await
            .unwrap();
        let _ = read_to_close(&mut client).await;
        // Closed at the timeout, not when the trickle ended (after 50 s).
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{:?}",
            start.elapsed()
        );
        tokio::task::yield_now().await;
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_alive_connection_idle_for_the_head_timeout_is_closed() {
        let (mut client, connections, _stop) = served();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        client
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let answered = Instant::now();
        let got = read_to_close(&mut client).await;
        assert!(
            got.starts_with("HTTP/1.1 200") && got.ends_with("ok"),
            "{got}"
        );
        let idle = answered.elapsed();
        assert!(
            idle >= Duration::from_secs(2) && idle < Duration::from_millis(2100),
            "closed {idle:?} after the answer"
        );
        tokio::task::yield_now().await;
        assert_eq!(connections.open(), 0);
    }

    /// Runs a serving thread's accept loop on a runtime of its own, as `server::serve` does;
    /// each answer names the thread that served it.
    fn serving_thread(
        accepting: impl FnOnce() -> Accepting + Send + 'static,
        connections: Arc<Connections>,
        stop: watch::Receiver<bool>,
    ) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let accepting = accepting();
                let me = accepting.me.to_string();
                let router =
                    axum::Router::new().route("/", axum::routing::get(move || async move { me }));
                let protocols = Arc::new(builder(Duration::from_secs(10)));
                let front = Front::router(router);
                accept_until_stopped(accepting, front, connections, protocols, stop).await;
            })
        })
    }

    #[test]
    fn connections_one_thread_accepts_are_served_half_by_the_other() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        // Thread 1 listens where nobody connects: it serves only what thread 0 hands it.
        let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (spread, inboxes) = Spread::new(2);
        let connections = Connections::new(64);
        let (stop_tx, stop) = watch::channel(false);
        let threads: Vec<_> = inboxes
            .into_iter()
            .zip([listener, elsewhere])
            .enumerate()
            .map(|(me, (inbox, listener))| {
                let spread = spread.clone();
                let accepting = move || {
                    listener.set_nonblocking(true).unwrap();
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    Accepting {
                        listener,
                        spread,
                        me,
                        inbox,
                    }
                };
                serving_thread(accepting, connections.clone(), stop.clone())
            })
            .collect();
        let mut clients: Vec<_> = (0..32)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut served_by = [0_usize; 2];
        for c in &mut clients {
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut got = Vec::new();
            let mut buf = [0; 512];
            while !got.ends_with(b"\r\n\r\n0") && !got.ends_with(b"\r\n\r\n1") {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            served_by[usize::from(got.ends_with(b"1"))] += 1;
        }
        assert_eq!(served_by[0] + served_by[1], 32);
        assert!(served_by[0].abs_diff(served_by[1]) <= 2, "{served_by:?}");
        assert_eq!(spread.open(), served_by.to_vec());
        drop(clients);
        stop_tx.send(true).unwrap();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(spread.open(), vec![0, 0]);
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn stopping_closes_an_idle_connection_at_once() {
        let (mut client, connections, stop) = served();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let start = Instant::now();
        stop.send(true).unwrap();
        let _ = read_to_close(&mut client).await;
        assert!(
            start.elapsed() < Duration::from_millis(10),
            "{:?}",
            start.elapsed()
        );
        tokio::task::yield_now().await;
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_sends_nothing_is_closed_at_the_head_timeout() {
        let (mut client, connections, _stop) = served();
        let start = Instant::now();
        let got = read_to_close(&mut client).await;
        assert_eq!(got, "");
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2100),
            "{waited:?}"
        );
        tokio::task::yield_now().await;
        assert_eq!(connections.open(), 0);
    }

    #[tokio::test]
    async fn the_protocol_is_told_by_the_first_bytes_that_differ_from_the_h2_preface() {
        for (sent, protocol) in [
            (&b"GET / HTTP/1.1\r\n"[..], Some(Protocol::Http1)),
            (
                b"POST /v1/chat/completions HTTP/1.1\r\n",
                Some(Protocol::Http1),
            ),
            (
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0",
                Some(Protocol::Http2),
            ),
            (b"PRI * HTTP/2", None),
            (b"", None),
        ] {
            let (mut client, server) = tokio::io::duplex(1 << 10);
            client.write_all(sent).await.unwrap();
            drop(client);
            let sniffed = sniff(server).await.unwrap();
            assert_eq!(sniffed.map(|(p, _)| p), protocol, "{sent:?}");
        }
    }

    /// hyper's first read gets the whole head, not the bytes sniffed alone: with those alone it
    /// grew its read buffer to 16 KiB for every connection.
    #[tokio::test]
    async fn the_first_read_after_sniffing_holds_the_bytes_read_and_all_that_has_come() {
        let head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}";
        let (mut client, server) = tokio::io::duplex(1 << 10);
        client.write_all(head).await.unwrap();
        let (_, mut io) = sniff(server).await.unwrap().unwrap();
        let mut buf = vec![0u8; 8192];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], &head[..]);
        // Later reads come from the connection, and so do writes.
        client.write_all(b"next").await.unwrap();
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"next");
        io.write_all(b"answer").await.unwrap();
        let mut got = [0u8; 6];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"answer");
        // A buffer smaller than the sniffed bytes takes them over several reads.
        let (mut client, server) = tokio::io::duplex(1 << 10);
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let (_, mut io) = sniff(server).await.unwrap().unwrap();
        let mut small = [0u8; 2];
        io.read_exact(&mut small).await.unwrap();
        assert_eq!(&small, b"GE");
    }

    #[test]
    fn a_request_head_is_copied_out_of_the_read_buffer_value_by_value() {
        let read = Bytes::from(
            b"/v1/chat/completions?a=1Bearer lt_secretapplication/jsonpythonnode".to_vec(),
        );
        let value = |from: usize, to: usize| {
            http::HeaderValue::from_maybe_shared(read.slice(from..to)).unwrap()
        };
        let mut auth = value(24, 40);
        auth.set_sensitive(true);
        let req = http::Request::builder()
            .uri(http::Uri::from_maybe_shared(read.slice(..24)).unwrap())
            .header("authorization", auth)
            .header("content-type", value(40, 56))
            .header("x-stainless-lang", value(56, 62))
            .header("x-stainless-lang", value(62, 66))
            .body(())
            .unwrap();
        let before = req.headers().clone();
        let req = own_head(req);
        drop(before);
        assert!(read.is_unique(), "hyper's buffer is held by nothing else");
        assert_eq!(req.uri(), "/v1/chat/completions?a=1");
        assert_eq!(req.uri().query(), Some("a=1"));
        assert_eq!(req.headers()["authorization"], "Bearer lt_secret");
        assert!(req.headers()["authorization"].is_sensitive());
        assert!(!req.headers()["content-type"].is_sensitive());
        assert_eq!(req.headers()["content-type"], "application/json");
        let langs: Vec<_> = req.headers().get_all("x-stainless-lang").iter().collect();
        assert_eq!(langs, ["python", "node"]);
        assert_eq!(req.headers().len(), 4);
    }

    trait NowOrNever {
        fn now_or_never_ready(self) -> bool;
    }

    impl<F: Future> NowOrNever for F {
        fn now_or_never_ready(self) -> bool {
            let mut f = pin!(self);
            let waker = std::task::Waker::noop();
            f.as_mut().poll(&mut Context::from_waker(waker)).is_ready()
        }
    }
}
