//! Upstream connections: TCP (and TLS, through the channel's proxy when it has one: see
//! [`crate::egress`]) to a channel's URL, or in-process pipes for tests that run the whole
//! request path under paused tokio time (no socket, so every deadline and mark is exact). Both
//! go through the same pool ([`crate::pool`]) and the same attempt code.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;

use crate::egress::open::{EgressConnector, Opened, Stream};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Opens an in-process connection to the upstream at a URI: the caller serves the other end.
pub type MemoryConnect = Arc<dyn Fn(&Uri) -> io::Result<DuplexStream> + Send + Sync>;

/// How the pooled client reaches upstreams.
#[derive(Clone)]
pub enum Connector {
    Net(EgressConnector),
    Memory(MemoryConnect),
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Connector::Net(_) => f.write_str("Connector::Net"),
            Connector::Memory(_) => f.write_str("Connector::Memory"),
        }
    }
}

/// One upstream connection.
#[expect(
    clippy::large_enum_variant,
    reason = "the large variant is the one production uses; boxing it would add an indirection to every read and write"
)]
pub enum UpstreamIo {
    Net(TokioIo<Stream>),
    Memory(TokioIo<DuplexStream>),
}

impl tower_service::Service<Uri> for Connector {
    type Response = UpstreamIo;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamIo, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Connector::Net(c) => tower_service::Service::poll_ready(c, cx),
            Connector::Memory(_) => Poll::Ready(Ok(())),
        }
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        match self {
            Connector::Net(c) => {
                let opening = c.open(uri);
                Box::pin(async move {
                    match opening.await {
                        Ok(s) => Ok(UpstreamIo::Net(TokioIo::new(s))),
                        Err(e) => Err(e.into()),
                    }
                })
            }
            Connector::Memory(open) => {
                let opened = open(&uri).map(|s| UpstreamIo::Memory(TokioIo::new(s)));
                Box::pin(async move { opened.map_err(Into::into) })
            }
        }
    }
}

impl UpstreamIo {
    /// How the connection was opened (none for a pipe), and whether it goes to a proxy that
    /// takes requests in absolute form.
    pub fn opened(&self) -> (Option<Opened>, bool) {
        match self {
            UpstreamIo::Net(s) => {
                let (opened, forwards) = s.inner().opened();
                (Some(opened), forwards)
            }
            UpstreamIo::Memory(_) => (None, false),
        }
    }
}

impl Connection for UpstreamIo {
    fn connected(&self) -> Connected {
        crate::drive::attach(match self {
            UpstreamIo::Net(s) => s.inner().connected(),
            UpstreamIo::Memory(_) => Connected::new(),
        })
    }
}

impl Read for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Net(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamIo::Memory(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl Write for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Net(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamIo::Memory(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Net(s) => Pin::new(s).poll_flush(cx),
            UpstreamIo::Memory(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Net(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamIo::Memory(s) => Pin::new(s).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Net(s) => s.is_write_vectored(),
            UpstreamIo::Memory(s) => s.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Net(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamIo::Memory(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}
