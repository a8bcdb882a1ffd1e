//! Upstream HTTP/1 connections driven by the task that reads their answer.
//!
//! hyper's client runs each connection as a task of its own and hands an answer's body over
//! through a one-chunk channel. A relay that gets a burst of events in one socket read (a fast
//! stream: strace showed one 4.8 KB read holding 17 events) still receives them one task switch
//! apart, and hyper's server, which writes whenever the body it relays is pending, sends each
//! in its own `writev`: 28 writes for a 20-chunk stream where nginx makes 4. So while a body is
//! read, its reader polls the connection itself ([`UpstreamBody`]): every event the connection
//! has already read comes out in the same poll, and the server joins them into one write.
//! Nothing waits for more bytes than are already here, so no event is delayed. Between answers
//! the connection's own task (the keeper) polls it, as hyper's would.
//!
//! Which connection an answer came over: the serving thread's pool ([`crate::pool`]) opens its
//! connections itself and leases each to the answer's body. A lane's client (hyper-util's) may
//! agree on HTTP/1.1 too: each such connection gets a [`Driver`], named in its answers'
//! extensions (hyper-util's `Connected::extra`). The connector announces it on this thread just
//! before hyper-util, in the same poll, hands the connection's future to the client's executor
//! ([`InlineExecutor`]), which takes the announcement. A future that comes without one (HTTP/2,
//! where one connection carries many answers, or hyper-util's own background work) is spawned
//! as it is.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::Connected;

use crate::lanes::StreamSlot;
use crate::pool::Lease;

type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One upstream connection's future, and who polls it.
#[derive(Default)]
pub struct Driver {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    conn: Option<ConnFuture>,
    /// An answer's reader polls the connection; the keeper leaves it alone.
    claimed: bool,
    keeper: Option<Waker>,
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver").finish_non_exhaustive()
    }
}

impl Driver {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Polls the connection (under the lock, so one poller at a time); ready once it is over.
    fn poll_conn(state: &mut State, cx: &mut Context<'_>) -> Poll<()> {
        let Some(conn) = state.conn.as_mut() else {
            return Poll::Ready(());
        };
        let polled = conn.as_mut().poll(cx);
        if polled.is_ready() {
            state.conn = None;
        }
        polled
    }

    /// The keeper's poll: the connection unless a reader has claimed it. Checked under the
    /// same lock the claim is taken under, so once claimed the reader is the last to poll and
    /// every wake-up of the connection reaches the reader.
    fn poll_keeper(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.lock();
        state.keeper = Some(cx.waker().clone());
        if state.claimed {
            return if state.conn.is_some() {
                Poll::Pending
            } else {
                Poll::Ready(())
            };
        }
        Driver::poll_conn(&mut state, cx)
    }

    /// A driver for a connection [`crate::pool`] opened, its keeper spawned.
    pub(crate) fn keeping(conn: ConnFuture) -> Arc<Driver> {
        let driver = Arc::new(Driver::default());
        driver.clone().keep(conn);
        driver
    }

    /// Takes `conn` and spawns the keeper that polls it between answers.
    fn keep(self: Arc<Self>, conn: ConnFuture) {
        self.lock().conn = Some(conn);
        tokio::spawn(std::future::poll_fn(move |cx| self.poll_keeper(cx)));
    }

    /// Polls the connection in the caller's task (which has claimed it).
    pub(crate) fn poll_inline(&self, cx: &mut Context<'_>) {
        let _ = Driver::poll_conn(&mut self.lock(), cx);
    }

    pub(crate) fn claim(&self) {
        self.lock().claimed = true;
    }

    /// Hands the connection back to its keeper (and wakes it to take over the wake-ups).
    pub(crate) fn release(&self) {
        let keeper = {
            let mut state = self.lock();
            state.claimed = false;
            state.keeper.take()
        };
        if let Some(k) = keeper {
            k.wake();
        }
    }
}

/// The driver of the connection an answer came over, in the answer's extensions.
#[derive(Debug, Clone)]
pub struct Inline(Arc<Driver>);

thread_local! {
    /// The driver of the connection whose future this thread's next `execute` receives.
    static ANNOUNCED: RefCell<Option<Arc<Driver>>> = const { RefCell::new(None) };
}

/// What the pooled client is told about a new connection, with a driver for an HTTP/1 one.
pub fn attach(connected: Connected) -> Connected {
    if connected.is_negotiated_h2() {
        return connected;
    }
    let driver = Arc::new(Driver::default());
    ANNOUNCED.with(|a| *a.borrow_mut() = Some(driver.clone()));
    connected.extra(Inline(driver))
}

/// The upstream client's executor: a connection's future goes to its driver, polled by a
/// keeper task between answers; anything else is spawned.
#[derive(Debug, Clone, Copy, Default)]
pub struct InlineExecutor;

impl<F> hyper::rt::Executor<F> for InlineExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, fut: F) {
        let Some(driver) = ANNOUNCED.with(|a| a.borrow_mut().take()) else {
            tokio::spawn(fut);
            return;
        };
        driver.keep(Box::pin(fut));
    }
}

/// An upstream answer's body, read by polling its connection in the reader's task.
pub struct UpstreamBody {
    inner: Incoming,
    /// The connection of a lane's HTTP/1 answer (hyper-util's pooled client).
    driver: Option<Arc<Driver>>,
    /// The connection of an answer [`crate::pool`] carried, back to the pool when the body
    /// ends.
    lease: Option<Lease>,
    /// The answer's stream on its lane, given back when the body ends.
    slot: Option<StreamSlot>,
}

impl UpstreamBody {
    /// The body of an answer whose extensions may name its connection's driver.
    pub fn new(inner: Incoming, extensions: &http::Extensions) -> Self {
        let driver = extensions.get::<Inline>().map(|i| i.0.clone());
        if let Some(d) = &driver {
            d.claim();
        }
        UpstreamBody {
            inner,
            driver,
            lease: None,
            slot: None,
        }
    }

    /// The body of an answer that came over a leased connection (already claimed by the
    /// call that got its head).
    pub fn leased(inner: Incoming, lease: Lease) -> Self {
        UpstreamBody {
            inner,
            driver: None,
            lease: Some(lease),
            slot: None,
        }
    }

    /// The body, holding its stream on a lane ([`crate::lanes`]) until it ends.
    pub fn holding(mut self, slot: Option<StreamSlot>) -> Self {
        self.slot = slot;
        self
    }

    fn release(&mut self) {
        self.slot = None;
        self.lease = None;
        if let Some(d) = self.driver.take() {
            d.release();
        }
    }
}

impl std::fmt::Debug for UpstreamBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("inline", &self.driver.is_some())
            .field("leased", &self.lease.is_some())
            .finish_non_exhaustive()
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        // Reads what the socket holds and decodes the next chunk into the body's channel;
        // pending (with this task's waker registered) when nothing more is here yet.
        if let Some(d) = &this.driver {
            d.poll_inline(cx);
        }
        if let Some(lease) = &this.lease {
            lease.poll_inline(cx);
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            // The answer is over: the keeper takes the connection back to the pool, and the
            // lane counts its stream as done.
            this.release();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A future that counts its polls and ends when told.
    struct Counted {
        polls: Arc<AtomicUsize>,
        end: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.end.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    fn driver_with(polls: &Arc<AtomicUsize>, end: &Arc<std::sync::atomic::AtomicBool>) -> Driver {
        let d = Driver::default();
        d.lock().conn = Some(Box::pin(Counted {
            polls: polls.clone(),
            end: end.clone(),
        }));
        d
    }

    #[test]
    fn the_keeper_polls_only_while_nobody_has_claimed_the_connection() {
        let polls = Arc::new(AtomicUsize::new(0));
        let end = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = driver_with(&polls, &end);
        let mut cx = Context::from_waker(Waker::noop());
        assert!(d.poll_keeper(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        d.claim();
        assert!(d.poll_keeper(&mut cx).is_pending());
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "a claimed connection is the reader's"
        );
        d.release();
        end.store(true, Ordering::SeqCst);
        assert!(d.poll_keeper(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
        assert!(d.lock().conn.is_none());
    }

    #[test]
    fn a_claimed_connection_that_ended_lets_its_keeper_finish() {
        let polls = Arc::new(AtomicUsize::new(0));
        let end = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let d = driver_with(&polls, &end);
        d.claim();
        let mut cx = Context::from_waker(Waker::noop());
        assert!(Driver::poll_conn(&mut d.lock(), &mut cx).is_ready());
        assert!(d.poll_keeper(&mut cx).is_ready());
    }

    #[test]
    fn release_wakes_the_keeper() {
        struct Flag(std::sync::atomic::AtomicBool);
        impl std::task::Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let polls = Arc::new(AtomicUsize::new(0));
        let end = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = driver_with(&polls, &end);
        d.claim();
        assert!(d.poll_keeper(&mut Context::from_waker(&waker)).is_pending());
        d.release();
        assert!(flag.0.load(Ordering::SeqCst));
    }

    #[test]
    fn an_http2_connection_gets_no_driver() {
        let c = attach(Connected::new().negotiated_h2());
        let mut ext = http::Extensions::new();
        c.get_extras(&mut ext);
        assert!(ext.get::<Inline>().is_none());
        let c = attach(Connected::new());
        c.get_extras(&mut ext);
        assert!(ext.get::<Inline>().is_some());
        assert!(ANNOUNCED.with(|a| a.borrow_mut().take()).is_some());
    }
}
