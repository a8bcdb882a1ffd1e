//! A serving thread's HTTP/1.1 connections to its upstreams, and each call made on one.
//!
//! hyper-util's pooled client (the lanes' client, [`crate::lanes`]) is made for connections
//! shared across threads: per call it locks its pool and clones the pool key, races a checkout
//! against a connect in a boxed future, and spawns a task that puts the connection back once
//! hyper's dispatcher is idle again; the answer's head is read by the connection's own task and
//! reaches the caller one task switch later. A serving thread's calls never share a connection
//! with another thread's (see `App::upstream_for`), so this pool is simpler: a call takes the
//! newest idle connection to its upstream or opens one, polls the connection itself while it
//! waits for the head (`Conn::send`), so that the request is written and the head read in the
//! caller's own task, and holds a [`Lease`] that the answer's body
//! ([`crate::drive::UpstreamBody`]) gives back when it ends. hyper speaks HTTP/1.1 on each
//! connection.

use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Waker};
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use tokio::time::Instant;
use tower_service::Service;

use crate::connect::Connector;
use crate::drive::Driver;
use crate::egress::open::Opened;
use crate::outbody::OutBody;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Which upstream a connection goes to: TLS or not, and the host and port.
type Key = (bool, Authority);

/// One serving thread's pool along one way out (a handle: clones share it).
#[derive(Clone)]
pub struct Http1Pool {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Http1Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Pool")
            .field("connector", &self.shared.connector)
            .finish_non_exhaustive()
    }
}

struct Shared {
    connector: Connector,
    /// Idle connections kept per upstream (`server.upstream_idle_per_thread`).
    idle_cap: usize,
    /// How long an idle connection is kept; `None`: until it closes or is used (in-process
    /// pipes under paused time, where a sweep would only add wake-ups).
    idle_timeout: Option<Duration>,
    idle: Mutex<Idle>,
}

#[derive(Default)]
struct Idle {
    /// Oldest first: a call takes the newest (its socket and buffers the most likely in
    /// cache), the sweep drops from the front.
    by_upstream: HashMap<Key, VecDeque<(Conn, Instant)>>,
    /// A sweep task is running (it ends once nothing is idle).
    sweeping: bool,
}

/// One connection: its requests' sender, who polls it, and how it was opened.
struct Conn {
    sender: SendRequest<OutBody>,
    driver: Arc<Driver>,
    opened: Option<Opened>,
    /// Plain HTTP through a proxy: requests go in absolute form.
    proxied: bool,
}

/// Why a call got no head.
#[derive(Debug)]
pub enum CallError {
    /// The request's URI names no scheme and host.
    NoUpstream,
    /// The connection could not be opened (the connector's error: see [`crate::egress`]).
    Connect(BoxError),
    /// hyper's handshake on a new connection, or the exchange itself, failed.
    Http(hyper::Error),
    /// hyper-util's pooled client failed (a lane's call).
    Pooled(hyper_util::client::legacy::Error),
}

impl CallError {
    /// Whether the call failed before a connection was there to send on.
    pub fn is_connect(&self) -> bool {
        match self {
            CallError::NoUpstream | CallError::Connect(_) => true,
            CallError::Http(_) => false,
            CallError::Pooled(e) => e.is_connect(),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::NoUpstream => f.write_str("the upstream URL names no scheme and host"),
            CallError::Connect(_) => f.write_str("client error (Connect)"),
            CallError::Http(_) => f.write_str("client error (SendRequest)"),
            CallError::Pooled(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for CallError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::NoUpstream => None,
            CallError::Connect(e) => Some(&**e),
            CallError::Http(e) => Some(e),
            // Its own message is this error's: what is under it comes next.
            CallError::Pooled(e) => e.source(),
        }
    }
}

impl Http1Pool {
    pub fn new(connector: Connector, idle_cap: usize, idle_timeout: Option<Duration>) -> Self {
        Http1Pool {
            shared: Arc::new(Shared {
                connector,
                idle_cap,
                idle_timeout,
                idle: Mutex::new(Idle::default()),
            }),
        }
    }

    /// Sends `req` (its URI absolute) and waits for the head. A request that a kept connection
    /// refused before taking it (the upstream had closed it) goes again on another; once
    /// written, it is never sent again here.
    pub async fn request(
        &self,
        mut req: Request<OutBody>,
    ) -> Result<(Response<Incoming>, Lease), CallError> {
        let uri = req.uri().clone();
        let key = key_of(&uri).ok_or(CallError::NoUpstream)?;
        loop {
            let (mut conn, reused) = match self.shared.checkout(&key) {
                Some(conn) => (conn, true),
                None => (self.connect(&uri).await?, false),
            };
            prepare(&mut req, &uri, conn.proxied);
            match conn.send(req).await {
                Ok(response) => {
                    let lease = Lease {
                        conn: Some(conn),
                        key,
                        pool: Arc::downgrade(&self.shared),
                    };
                    return Ok((response, lease));
                }
                Err(mut e) => match e.take_message() {
                    Some(back) if reused => {
                        tracing::trace!(
                            "a kept upstream connection had closed; sending on another"
                        );
                        req = back;
                        *req.uri_mut() = uri.clone();
                    }
                    _ => return Err(CallError::Http(e.into_error())),
                },
            }
        }
    }

    async fn connect(&self, uri: &Uri) -> Result<Conn, CallError> {
        let mut connector = self.shared.connector.clone();
        let io = connector
            .call(uri.clone())
            .await
            .map_err(CallError::Connect)?;
        let (opened, proxied) = io.opened();
        let (sender, conn) = http1::handshake(io).await.map_err(CallError::Http)?;
        let driver = Driver::keeping(Box::pin(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        }));
        Ok(Conn {
            sender,
            driver,
            opened,
            proxied,
        })
    }

    /// Idle connections kept now, over every upstream.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.shared
            .lock()
            .by_upstream
            .values()
            .map(VecDeque::len)
            .sum()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Idle> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expired(&self, since: Instant, now: Instant) -> bool {
        self.idle_timeout
            .is_some_and(|t| now.saturating_duration_since(since) >= t)
    }

    /// The newest idle connection to `key` that can take a request; the closed and the
    /// expired ones met on the way are dropped (which closes them).
    fn checkout(&self, key: &Key) -> Option<Conn> {
        let now = Instant::now();
        let mut idle = self.lock();
        let kept = idle.by_upstream.get_mut(key)?;
        while let Some((conn, since)) = kept.pop_back() {
            if conn.sender.is_ready() && !self.expired(since, now) {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next call to `key`, unless the cap is reached.
    fn put(self: &Arc<Self>, key: Key, conn: Conn) {
        let now = Instant::now();
        let mut guard = self.lock();
        let idle = &mut *guard;
        let kept = idle.by_upstream.entry(key).or_default();
        while kept
            .front()
            .is_some_and(|(_, since)| self.expired(*since, now))
        {
            kept.pop_front();
        }
        if kept.len() >= self.idle_cap {
            return;
        }
        if let (Some(timeout), false) = (self.idle_timeout, idle.sweeping) {
            // Outside a runtime (a body dropped as its runtime shuts down) nothing could close
            // the connection later: it closes now.
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            idle.sweeping = true;
            runtime.spawn(sweep(Arc::downgrade(self), timeout));
        }
        kept.push_back((conn, now));
    }
}

/// Drops the connections idle for longer than `timeout` (so that a burst's connections and
/// their descriptors go even when no call comes after it), until none is idle or the pool is
/// gone.
async fn sweep(pool: Weak<Shared>, timeout: Duration) {
    let mut next = Instant::now() + timeout;
    loop {
        tokio::time::sleep_until(next).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        let now = Instant::now();
        let mut idle = pool.lock();
        let mut oldest: Option<Instant> = None;
        idle.by_upstream.retain(|_, kept| {
            while kept
                .front()
                .is_some_and(|(_, since)| pool.expired(*since, now))
            {
                kept.pop_front();
            }
            if let Some((_, since)) = kept.front() {
                oldest = Some(oldest.map_or(*since, |o| o.min(*since)));
            }
            !kept.is_empty()
        });
        let Some(oldest) = oldest else {
            idle.sweeping = false;
            return;
        };
        next = oldest + timeout;
    }
}

impl Conn {
    /// Sends `req` and polls the connection in this task until the head is here: the request
    /// is written in this poll and the head read in the poll its bytes wake.
    async fn send(
        &mut self,
        req: Request<OutBody>,
    ) -> Result<Response<Incoming>, hyper::client::conn::TrySendError<Request<OutBody>>> {
        let claim = Claim::on(&self.driver);
        let mut sending = pin!(self.sender.try_send_request(req));
        let sent = poll_fn(|cx| {
            claim.0.poll_inline(cx);
            sending.as_mut().poll(cx)
        })
        .await;
        if sent.is_ok() {
            // The lease holds the claim on: the body goes on polling the connection.
            std::mem::forget(claim);
        }
        sent
    }
}

/// A connection claimed by the task that polls it; given back to its keeper when dropped.
struct Claim<'d>(&'d Driver);

impl<'d> Claim<'d> {
    fn on(driver: &'d Driver) -> Self {
        driver.claim();
        Claim(driver)
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.release();
    }
}

/// The connection an answer came over, held by the answer's body. Dropped when the body ends
/// (or is dropped): the connection goes back to its pool when it can take another request
/// (else it closes), and its keeper polls it again.
pub struct Lease {
    conn: Option<Conn>,
    key: Key,
    pool: Weak<Shared>,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").field("key", &self.key).finish()
    }
}

impl Lease {
    /// How the connection was opened (none for a pipe).
    pub fn opened(&self) -> Option<Opened> {
        self.conn.as_ref().and_then(|c| c.opened)
    }

    /// Polls the leased connection in the caller's task (what the body read from the socket
    /// is decoded into the body's channel).
    pub fn poll_inline(&self, cx: &mut Context<'_>) {
        if let Some(conn) = &self.conn {
            conn.driver.poll_inline(cx);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(conn) = self.conn.take() else {
            return;
        };
        let driver = conn.driver.clone();
        if !conn.sender.is_ready() && !conn.sender.is_closed() {
            // The body's end was read in the last poll: one more lets hyper's dispatcher go
            // idle. The keeper's poll (below) registers its own waker again.
            driver.poll_inline(&mut Context::from_waker(Waker::noop()));
        }
        driver.release();
        if conn.sender.is_ready() {
            if let Some(pool) = self.pool.upgrade() {
                pool.put(self.key.clone(), conn);
            }
        }
    }
}

/// The pool key of an absolute URI.
fn key_of(uri: &Uri) -> Option<Key> {
    let https = uri.scheme() == Some(&Scheme::HTTPS);
    Some((https, uri.authority()?.clone()))
}

/// The request as it goes on the wire: a `Host` header when the request has none (a plain
/// `http://` channel's is set once, see `Channel::http1_host`), and the request line's target
/// in origin form, or absolute to a proxy.
fn prepare(req: &mut Request<OutBody>, uri: &Uri, proxied: bool) {
    if !req.headers().contains_key(http::header::HOST) {
        if let Some(host) = host_value(uri) {
            req.headers_mut().insert(http::header::HOST, host);
        }
    }
    *req.uri_mut() = if proxied {
        uri.clone()
    } else {
        let path = uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        Uri::from(path)
    };
}

/// The `Host` value of an absolute URI, as hyper-util's client writes it: `host`, or
/// `host:port` when the port is not the scheme's default.
pub(crate) fn host_value(uri: &Uri) -> Option<HeaderValue> {
    let authority = uri.authority()?;
    let default = if uri.scheme() == Some(&Scheme::HTTPS) {
        443
    } else {
        80
    };
    let host = match authority.port_u16() {
        Some(port) if port != default => format!("{}:{port}", authority.host()),
        _ => authority.host().to_owned(),
    };
    HeaderValue::from_str(&host).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str) -> Request<OutBody> {
        Request::builder()
            .uri(uri)
            .body(OutBody::Full(
                http_body_util::Full::new(bytes::Bytes::new()),
            ))
            .unwrap()
    }

    #[test]
    fn a_request_goes_in_origin_form_with_its_host_or_absolute_to_a_proxy() {
        for (uri, host, target) in [
            ("http://a.example/v1/x?y=1", "a.example", "/v1/x?y=1"),
            ("http://a.example:80/v1", "a.example", "/v1"),
            ("https://a.example:8443/v1", "a.example:8443", "/v1"),
            ("http://127.0.0.1:9000", "127.0.0.1:9000", "/"),
        ] {
            let u: Uri = uri.parse().unwrap();
            let mut req = request(uri);
            prepare(&mut req, &u, false);
            assert_eq!(req.headers()[http::header::HOST], host, "{uri}");
            assert_eq!(req.uri().to_string(), target, "{uri}");
            let mut to_proxy = request(uri);
            prepare(&mut to_proxy, &u, true);
            assert_eq!(to_proxy.uri(), &u, "{uri}");
        }
        let mut named = request("http://a.example/v1");
        named
            .headers_mut()
            .insert(http::header::HOST, HeaderValue::from_static("b.example"));
        prepare(&mut named, &"http://a.example/v1".parse().unwrap(), false);
        assert_eq!(named.headers()[http::header::HOST], "b.example");
    }

    #[test]
    fn a_uri_without_a_host_has_no_pool_key() {
        assert!(key_of(&"/v1".parse().unwrap()).is_none());
        let (https, authority) = key_of(&"https://a.example:8443/v1".parse().unwrap()).unwrap();
        assert!(https);
        assert_eq!(authority.as_str(), "a.example:8443");
    }

    /// An in-process upstream that answers every request on a connection with `200` and a
    /// short body (but `/partial`, and `/once` closes); `accepted` counts its connections.
    fn upstream(accepted: Arc<std::sync::atomic::AtomicUsize>) -> crate::connect::MemoryConnect {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        Arc::new(move |_: &Uri| {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut seen = Vec::new();
                loop {
                    let n = match theirs.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = seen.drain(..end + 4).collect();
                        // `/partial`: the head, and a body that never comes.
                        let answer: &[u8] = if head.starts_with(b"GET /partial ") {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n"
                        } else {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
                        };
                        if theirs.write_all(answer).await.is_err() {
                            return;
                        }
                        // `/once`: the connection closes after the answer, unannounced.
                        if head.starts_with(b"GET /once ") {
                            return;
                        }
                    }
                }
            });
            Ok(ours)
        })
    }

    /// A pool keeping `idle_cap` idle connections to the upstream above, and the count of the
    /// connections it opened.
    fn pool(idle_cap: usize) -> (Http1Pool, Arc<std::sync::atomic::AtomicUsize>) {
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let connector = Connector::Memory(upstream(accepted.clone()));
        let pool = Http1Pool::new(connector, idle_cap, Some(Duration::from_secs(90)));
        (pool, accepted)
    }

    fn opened(accepted: &std::sync::atomic::AtomicUsize) -> usize {
        accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    async fn call(pool: &Http1Pool, path: &str) -> (Response<Incoming>, Lease) {
        let uri = format!("http://upstream.test{path}");
        pool.request(request(&uri)).await.unwrap()
    }

    async fn read_whole(response: Response<Incoming>, lease: Lease) -> bytes::Bytes {
        use http_body_util::BodyExt;
        let body = crate::drive::UpstreamBody::leased(response.into_body(), lease);
        body.collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn a_connection_whose_answer_was_read_carries_the_next_call() {
        let (pool, accepted) = pool(4);
        for _ in 0..3 {
            let (response, lease) = call(&pool, "/v1").await;
            assert_eq!(response.status(), 200);
            assert_eq!(read_whole(response, lease).await, "ok");
            assert_eq!(pool.idle(), 1);
        }
        assert_eq!(opened(&accepted), 1);
    }

    #[tokio::test]
    async fn an_answer_dropped_before_its_body_closes_its_connection_and_the_cap_bounds_the_kept() {
        let (pool, accepted) = pool(2);
        drop(call(&pool, "/partial").await);
        assert_eq!(pool.idle(), 0, "a connection amid an answer is not kept");
        let open: Vec<_> = futures_util::future::join_all((0..3).map(|_| call(&pool, "/v1"))).await;
        assert_eq!(opened(&accepted), 4);
        for (response, lease) in open {
            read_whole(response, lease).await;
        }
        assert_eq!(pool.idle(), 2, "the third is over the cap");
    }

    #[tokio::test]
    async fn a_kept_connection_the_upstream_closed_does_not_lose_the_next_call() {
        let (pool, accepted) = pool(4);
        let (response, lease) = call(&pool, "/once").await;
        assert_eq!(read_whole(response, lease).await, "ok");
        // Whether or not its keeper has seen the close yet, the next call is answered.
        for _ in 0..2 {
            let (response, lease) = call(&pool, "/v1").await;
            assert_eq!(read_whole(response, lease).await, "ok");
        }
        assert_eq!(opened(&accepted), 2);
        assert_eq!(pool.idle(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connections_go_once_the_idle_timeout_is_over() {
        let (pool, _) = pool(4);
        let (response, lease) = call(&pool, "/v1").await;
        read_whole(response, lease).await;
        assert_eq!(pool.idle(), 1);
        tokio::time::sleep(Duration::from_secs(89)).await;
        assert_eq!(pool.idle(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(pool.idle(), 0);
    }
}
