//! Opening one upstream connection along a [`Profile`]: TCP (to the proxy when there is one,
//! `TCP_NODELAY`), the proxy's CONNECT tunnel for an https upstream, then TLS to the upstream.
//! Each step is stamped on the one clock ([`Opened`]), handed to the attempt through the
//! response's extensions (`Connected::extra`), or with the error when a step fails
//! ([`EgressError`], whose class says which step and whose fault).
//!
//! A plain-HTTP upstream behind a proxy is not tunnelled: its requests go to the proxy in
//! absolute form (`POST http://host/path`), with `Proxy-Authorization` on each request, as
//! proxies expect for plain HTTP (many refuse CONNECT to ports other than 443).
//!
//! The whole connect, every step, is bounded by the connect timeout.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Scheme;
use http::Uri;
use hyper_util::client::legacy::connect::{Connected, HttpConnector};
use laptime_core::timeline::{self, ConnectionMarks, ErrorClass};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::settings::FrameScan;
use super::tunnel::{self, TunnelError};
use super::Profile;
use crate::config::UpstreamHttp;
use crate::lanes::LaneState;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// When each step of opening a connection was done. Every answer on the connection carries it
/// (in its lease, [`crate::pool::Lease::opened`], or a lane's client puts it in the answer's
/// extensions), so an attempt tells its own new connection from an older one by when it was
/// begun.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    pub began: Instant,
    pub connected: Option<Instant>,
    pub tunnel: Option<Instant>,
    pub tls: Option<Instant>,
}

impl Opened {
    fn began(at: Instant) -> Self {
        Opened {
            began: at,
            connected: None,
            tunnel: None,
            tls: None,
        }
    }

    /// The marks of an attempt dispatched at `dispatched` (`t0` its request's origin): this
    /// connection's steps when it was begun for the attempt (at or after its dispatch), none
    /// when it was an older, pooled one.
    pub fn marks_for(&self, t0: Instant, dispatched: Instant) -> ConnectionMarks {
        if self.began < dispatched {
            return ConnectionMarks::default();
        }
        let at = |i: Option<Instant>| i.map(|i| timeline::offset(i.saturating_duration_since(t0)));
        ConnectionMarks {
            connected: at(self.connected),
            tunnel: at(self.tunnel),
            tls: at(self.tls),
        }
    }
}

/// A connection that could not be opened: which class of failure, whether the connect
/// timeout ended it, and the steps it got through. Its message names the proxy by address
/// only (never its credentials).
#[derive(Debug)]
pub struct EgressError {
    pub class: ErrorClass,
    pub timed_out: bool,
    pub opened: Opened,
    what: String,
    source: Option<BoxError>,
}

impl std::fmt::Display for EgressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.what)?;
        if let Some(s) = &self.source {
            write!(f, ": {s}")?;
        }
        Ok(())
    }
}

impl std::error::Error for EgressError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

/// Opens connections along one profile.
#[derive(Clone)]
pub struct EgressConnector {
    tcp: HttpConnector,
    profile: Arc<Profile>,
    timeout: Duration,
    /// A lane's: told its connections' limit of concurrent streams.
    lane: Option<Arc<LaneState>>,
}

impl EgressConnector {
    pub fn new(profile: Arc<Profile>, connect_timeout: Duration) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.set_nodelay(true);
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(connect_timeout));
        EgressConnector {
            tcp,
            profile,
            timeout: connect_timeout,
            lane: None,
        }
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// A lane's connector: each connection tells `lane` how many streams its upstream
    /// allows (HTTP/2), or that it has no such limit (HTTP/1.1).
    pub fn telling(mut self, lane: Arc<LaneState>) -> Self {
        self.lane = Some(lane);
        self
    }

    /// Opens a connection to `dst` (an http or https URL).
    pub fn open(&self, dst: Uri) -> impl Future<Output = Result<Stream, EgressError>> + Send {
        let began = Instant::now();
        let steps = Steps {
            tcp: self.tcp.clone(),
            profile: self.profile.clone(),
            deadline: began + self.timeout,
            opened: Opened::began(began),
        };
        let lane = self.lane.clone();
        async move {
            let mut stream = steps.run(dst).await?;
            if let Some(lane) = lane {
                if stream.h2 {
                    stream.watch = Some((FrameScan::default(), lane));
                } else {
                    lane.not_multiplexed();
                }
            }
            Ok(stream)
        }
    }
}

/// The steps of one connect, with what they reached so far.
struct Steps {
    tcp: HttpConnector,
    profile: Arc<Profile>,
    deadline: Instant,
    opened: Opened,
}

/// Which step a failure happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Tcp,
    Tunnel,
    Tls,
}

impl Steps {
    async fn run(mut self, dst: Uri) -> Result<Stream, EgressError> {
        let https = dst.scheme() == Some(&Scheme::HTTPS);
        let host = dst.host().unwrap_or_default().to_string();
        let port = dst.port_u16().unwrap_or(if https { 443 } else { 80 });
        let proxy = self.profile.proxy.clone();
        let tcp_to = proxy
            .as_ref()
            .map_or_else(|| dst.clone(), |p| p.uri().clone());
        let connecting = tower_service::Service::call(&mut self.tcp, tcp_to);
        let mut tcp = match tokio::time::timeout_at(self.deadline, connecting).await {
            Ok(Ok(io)) => io.into_inner(),
            Ok(Err(e)) => {
                let timed_out = chain_timed_out(&e);
                return Err(self.fail(Step::Tcp, timed_out, Some(Box::new(e))));
            }
            Err(_) => return Err(self.fail(Step::Tcp, true, None)),
        };
        self.opened.connected = Some(Instant::now());
        if let (Some(p), true) = (&proxy, https) {
            let authority = format!("{host}:{port}");
            let tunnelling = tunnel::connect(&mut tcp, &authority, p.authorization());
            match tokio::time::timeout_at(self.deadline, tunnelling).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(self.tunnel_failed(e)),
                Err(_) => return Err(self.fail(Step::Tunnel, true, None)),
            }
            self.opened.tunnel = Some(Instant::now());
        }
        if !https {
            return Ok(Stream {
                io: Transport::Plain(tcp),
                opened: self.opened,
                forward_proxy: proxy.is_some(),
                // h2c is spoken with prior knowledge, and never through a proxy (refused when
                // the config is read).
                h2: self.profile.http == UpstreamHttp::Http2,
                watch: None,
            });
        }
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .map(|n| n.to_owned())
            .map_err(|e| self.fail(Step::Tls, false, Some(Box::new(e))))?;
        let tls = tokio_rustls::TlsConnector::from(self.profile.tls().clone());
        let tls = match tokio::time::timeout_at(self.deadline, tls.connect(name, tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(self.fail(Step::Tls, false, Some(Box::new(e)))),
            Err(_) => return Err(self.fail(Step::Tls, true, None)),
        };
        self.opened.tls = Some(Instant::now());
        // A server that answers no ALPN to an offer of HTTP/2 alone is spoken to as asked.
        let h2 = match tls.get_ref().1.alpn_protocol() {
            Some(p) => p == b"h2",
            None => self.profile.http == UpstreamHttp::Http2,
        };
        Ok(Stream {
            io: Transport::Tls(tls),
            opened: self.opened,
            forward_proxy: false,
            h2,
            watch: None,
        })
    }

    /// The failure of `step`: through a proxy, everything before the tunnel is open is the
    /// proxy's; a timeout elsewhere is the connect deadline's.
    fn fail(&self, step: Step, timed_out: bool, source: Option<BoxError>) -> EgressError {
        let via = self.profile.proxy.as_ref().map(|p| p.address());
        let (class, what) = match (step, &via) {
            (Step::Tcp | Step::Tunnel, Some(addr)) => {
                (ErrorClass::ProxyFailed, format!("proxy {addr} unreachable"))
            }
            (Step::Tcp | Step::Tunnel, None) if timed_out => (
                ErrorClass::ConnectTimeout,
                "TCP connect timed out".to_string(),
            ),
            (Step::Tcp | Step::Tunnel, None) => {
                (ErrorClass::ConnectFailed, "TCP connect failed".to_string())
            }
            (Step::Tls, _) if timed_out => (
                ErrorClass::ConnectTimeout,
                "TLS handshake timed out".to_string(),
            ),
            (Step::Tls, _) => (ErrorClass::Tls, "TLS handshake failed".to_string()),
        };
        let what = match (timed_out, step) {
            (true, Step::Tunnel) => {
                format!("{what}: no answer to CONNECT within the connect timeout")
            }
            (true, Step::Tcp) if via.is_some() => format!("{what}: connect timed out"),
            _ => what,
        };
        EgressError {
            class,
            timed_out,
            opened: self.opened,
            what,
            source,
        }
    }

    fn tunnel_failed(&self, e: TunnelError) -> EgressError {
        let addr = self
            .profile
            .proxy
            .as_ref()
            .map(|p| p.address())
            .unwrap_or_default();
        let class = match e {
            TunnelError::Refused(407) => ErrorClass::ProxyAuth,
            TunnelError::Refused(_) | TunnelError::Malformed(_) | TunnelError::Io(_) => {
                ErrorClass::ProxyFailed
            }
        };
        EgressError {
            class,
            timed_out: false,
            opened: self.opened,
            what: format!("proxy {addr}: {e}"),
            source: None,
        }
    }
}

/// Whether an error chain holds an I/O timeout (the TCP connector's connect timeout).
fn chain_timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(s) = source {
        if s.downcast_ref::<io::Error>()
            .is_some_and(|io| io.kind() == io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = s.source();
    }
    false
}

impl tower_service::Service<Uri> for EgressConnector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, dst: Uri) -> Self::Future {
        let opening = self.open(dst);
        Box::pin(async move { opening.await.map_err(Into::into) })
    }
}

/// An open upstream connection, with how it was opened.
pub struct Stream {
    io: Transport,
    opened: Opened,
    /// Plain HTTP to a proxy: requests go in absolute form.
    forward_proxy: bool,
    /// TLS negotiated HTTP/2 (ALPN).
    h2: bool,
    /// On a lane's HTTP/2 connection: the server's frames, read for its limit of streams.
    watch: Option<(FrameScan, Arc<LaneState>)>,
}

#[expect(
    clippy::large_enum_variant,
    reason = "the TLS variant is the one production mostly uses; boxing it would add an indirection to every read and write"
)]
enum Transport {
    Plain(TcpStream),
    Tls(tokio_rustls::client::TlsStream<TcpStream>),
}

impl Stream {
    /// How it was opened, and whether it is plain HTTP to a proxy (requests in absolute form).
    pub fn opened(&self) -> (Opened, bool) {
        (self.opened, self.forward_proxy)
    }

    /// What the pooled client is told about the connection (its steps ride along as the
    /// responses' extra).
    pub fn connected(&self) -> Connected {
        let mut c = Connected::new()
            .proxy(self.forward_proxy)
            .extra(self.opened);
        if self.h2 {
            c = c.negotiated_h2();
        }
        c
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = match &mut this.io {
            Transport::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Transport::Tls(s) => Pin::new(s).poll_read(cx, buf),
        };
        if let Some((scan, lane)) = &mut this.watch {
            if let Some(said) = scan.feed(&buf.filled()[before..]) {
                lane.said(said);
            }
        }
        polled
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Transport::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Transport::Tls(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Transport::Plain(s) => Pin::new(s).poll_flush(cx),
            Transport::Tls(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Transport::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Transport::Tls(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Transport::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Transport::Tls(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match &self.io {
            Transport::Plain(s) => s.is_write_vectored(),
            Transport::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_new_connections_steps_are_offsets_from_t0_and_a_pooled_one_has_none() {
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_millis(3)).await;
        let dispatched = Instant::now();
        let mut opened = Opened::began(dispatched);
        tokio::time::advance(Duration::from_millis(7)).await;
        opened.connected = Some(Instant::now());
        tokio::time::advance(Duration::from_millis(5)).await;
        opened.tls = Some(Instant::now());
        let ms = |v| Some(Duration::from_millis(v));
        assert_eq!(
            opened.marks_for(t0, dispatched),
            ConnectionMarks {
                connected: ms(10),
                tunnel: None,
                tls: ms(15),
            }
        );
        // A later attempt on the same connection: it was there before this dispatch.
        tokio::time::advance(Duration::from_millis(100)).await;
        let later = Instant::now();
        assert!(opened.marks_for(later, later).is_empty());
    }

    fn profile_via(proxy: Option<&str>) -> Arc<Profile> {
        let mut p = Profile::direct().unwrap();
        p.proxy = proxy.map(|u| super::super::Proxy::parse(u).unwrap());
        Arc::new(p)
    }

    /// A port nothing listens on (bound, then closed).
    async fn closed_port() -> u16 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn an_unreachable_upstream_fails_the_connect_and_an_unreachable_proxy_is_the_proxys() {
        let port = closed_port().await;
        let dst: Uri = format!("https://127.0.0.1:{port}/v1").parse().unwrap();
        let direct = EgressConnector::new(profile_via(None), Duration::from_secs(5));
        let e = direct.open(dst.clone()).await.err().unwrap();
        assert_eq!(e.class, ErrorClass::ConnectFailed);
        assert!(e.opened.connected.is_none());
        let proxy = format!("http://u:hunter2@127.0.0.1:{port}");
        let via = EgressConnector::new(profile_via(Some(&proxy)), Duration::from_secs(5));
        let e = via.open(dst).await.err().unwrap();
        assert_eq!(e.class, ErrorClass::ProxyFailed);
        let shown = format!("{e} {e:?}");
        assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[tokio::test]
    async fn a_proxy_that_never_answers_connect_times_out_as_the_proxys_failure() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let held = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
        let via = EgressConnector::new(
            profile_via(Some(&format!("http://{addr}"))),
            Duration::from_millis(200),
        );
        let e = via
            .open("https://upstream.invalid/".parse().unwrap())
            .await
            .err()
            .unwrap();
        assert_eq!(e.class, ErrorClass::ProxyFailed);
        assert!(e.timed_out);
        assert!(e.opened.connected.is_some() && e.opened.tunnel.is_none());
        drop(held);
    }

    /// A proxy that answers every CONNECT with `answer`.
    async fn refusing_proxy(answer: &'static [u8]) -> std::net::SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut b = [0u8; 1024];
                let _ = s.read(&mut b).await;
                let _ = s.write_all(answer).await;
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_407_is_the_proxys_credentials_and_another_refusal_the_proxys_failure() {
        for (answer, class) in [
            (
                &b"HTTP/1.1 407 Proxy Authentication Required\r\n\r\n"[..],
                ErrorClass::ProxyAuth,
            ),
            (b"HTTP/1.1 403 Forbidden\r\n\r\n", ErrorClass::ProxyFailed),
            (b"HTTP/1.1 502 Bad Gateway\r\n\r\n", ErrorClass::ProxyFailed),
        ] {
            let addr = refusing_proxy(answer).await;
            let via = EgressConnector::new(
                profile_via(Some(&format!("http://u:hunter2@{addr}"))),
                Duration::from_secs(5),
            );
            let e = via
                .open("https://upstream.invalid/".parse().unwrap())
                .await
                .err()
                .unwrap();
            assert_eq!(e.class, class, "{e}");
            assert!(!e.timed_out);
            assert!(e.opened.connected.is_some(), "TCP to the proxy was done");
            assert!(e.opened.tunnel.is_none() && e.opened.tls.is_none());
            let status = std::str::from_utf8(&answer[9..12]).unwrap();
            assert!(e.to_string().contains(status), "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }
}
