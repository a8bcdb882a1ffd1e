//! Lanes: the HTTP/2 connections a serving thread keeps to one upstream, so that no request
//! waits for a stream where nobody sees it. hyper-util's pool puts every request to an
//! upstream on one HTTP/2 connection, and hyper queues the ones past the upstream's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` inside the connection: their wait would be recorded as the
//! upstream's time to answer. So each lane is a pool of its own (one connection, whose limit
//! [`crate::egress::settings`] reads off the wire), its streams are counted from dispatch until
//! the answer's body ends, and a request goes to the first lane with room, a new lane when none
//! has. A lane carries one request (the one opening its connection) until its connection is up
//! (the upstream said its settings); others wait for it, as many as the limit the upstream
//! announced on its other connections leaves room for (any number while none is known), so a
//! burst opens the connections it needs at once, each used as soon as it can be. An upstream
//! that sets no limit is taken to allow [`ASSUMED_STREAMS`], the least a server should. A lane
//! whose connection came up HTTP/1.1 has no limit (its pool opens a connection per request, as
//! before). Lanes stay once opened (an idle one's connection closes with the pool's idle
//! timeout), so their number is bounded by the peak of streams in flight.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::Notify;

use crate::attempt::{self, HttpClient};
use crate::egress::settings::Said;
use crate::egress::Profile;
use crate::outbody::OutBody;
use crate::pool::{CallError, Http1Pool, Lease};

/// Streams a lane takes when its upstream sets no limit: RFC 9113 section 6.5.2 asks servers
/// to allow no fewer than 100.
pub const ASSUMED_STREAMS: usize = 100;

/// Lanes per upstream and serving thread, a bound on the connections a burst can make the
/// gateway open to an upstream with a small limit. Past it, requests share the least busy
/// lane (and may wait in it).
pub const MAX_LANES: usize = 256;

/// The limit stored before the connection has said one.
const UNKNOWN: usize = 0;
/// The limit stored for a connection that is not multiplexed.
const UNLIMITED: usize = usize::MAX;

/// One lane's streams in flight and its connection's limit, shared with the connection (which
/// tells the limit) and the answers (which end their streams).
#[derive(Debug, Default)]
pub struct LaneState {
    streams: AtomicUsize,
    /// Requests waiting for the lane's connection to come up, each counted against its limit.
    waiting: AtomicUsize,
    limit: AtomicUsize,
    /// The connection has said its settings (or came up HTTP/1.1).
    up: AtomicBool,
    /// Counts every change a waiting request cares about (the connection up, a stream ended
    /// before it was), so that one that looked before a change and waits after it does not
    /// miss it.
    changes: AtomicU64,
    changed: Notify,
}

/// What a lane can do for one more request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    Go,
    /// Its connection is coming up, and it will have room for this request then.
    Wait,
    Full,
}

impl LaneState {
    fn with_limit(limit: usize) -> Self {
        LaneState {
            limit: AtomicUsize::new(limit),
            ..LaneState::default()
        }
    }

    /// What the upstream's SETTINGS said. A limit of zero (no new streams for now) is taken as
    /// one: a lane that took none would never learn when the upstream allows more.
    pub fn said(&self, said: Said) {
        match said.max_streams {
            Some(n) => {
                let n = usize::try_from(n).unwrap_or(UNLIMITED - 1).max(1);
                self.limit.store(n, Ordering::Relaxed);
            }
            None => {
                let _ = self.limit.compare_exchange(
                    UNKNOWN,
                    ASSUMED_STREAMS,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        self.up.store(true, Ordering::Relaxed);
        self.changed();
    }

    /// The connection speaks HTTP/1.1: every request gets a connection of its own.
    pub fn not_multiplexed(&self) {
        self.limit.store(UNLIMITED, Ordering::Relaxed);
        self.up.store(true, Ordering::Relaxed);
        self.changed();
    }

    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::Release);
        self.changed.notify_waiters();
    }

    fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    fn streams(&self) -> usize {
        self.streams.load(Ordering::Relaxed)
    }

    fn up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Until its connection is up a lane carries one request, the one opening it; others wait
    /// for it as long as the limit its upstream announced elsewhere leaves them room (or
    /// without bound while no limit is known at all).
    fn room(&self) -> Room {
        let (streams, limit) = (self.streams(), self.limit());
        if self.up() {
            return if streams < limit {
                Room::Go
            } else {
                Room::Full
            };
        }
        if streams == 0 {
            return Room::Go;
        }
        let waiting = self.waiting.load(Ordering::Relaxed);
        if limit == UNKNOWN || streams + waiting < limit {
            Room::Wait
        } else {
            Room::Full
        }
    }

    /// Waits until something changed since `seen` (a value of `changes`).
    async fn changed_since(&self, seen: u64) {
        let notified = self.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.changes.load(Ordering::Acquire) == seen {
            notified.await;
        }
    }
}

/// One stream counted on its lane until dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<LaneState>);

impl StreamSlot {
    fn take(lane: &Arc<LaneState>) -> Self {
        lane.streams.fetch_add(1, Ordering::Relaxed);
        StreamSlot(lane.clone())
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        if !self.0.up() {
            // The request opening the connection failed before the upstream said anything:
            // a waiting request opens it now.
            self.0.changed();
        }
    }
}

/// A client to send one request with, and the stream it holds on its lane (none for a client
/// without lanes).
pub struct Upstream {
    pub client: Client,
    pub slot: Option<StreamSlot>,
}

/// Which client a call goes over.
#[derive(Debug, Clone)]
pub enum Client {
    /// The serving thread's HTTP/1.1 connections to upstreams without lanes.
    Http1(Http1Pool),
    /// A lane's client (hyper-util's), which may speak HTTP/2; shared, since it is large.
    Lane(Arc<HttpClient>),
}

impl Upstream {
    /// Sends `req` and waits for the head; with the connection leased to the answer's body
    /// when it came over the serving thread's HTTP/1.1 pool.
    pub async fn call(
        &self,
        req: Request<OutBody>,
    ) -> Result<(Response<Incoming>, Option<Lease>), CallError> {
        match &self.client {
            Client::Http1(pool) => pool.request(req).await.map(|(r, l)| (r, Some(l))),
            Client::Lane(client) => client
                .request(req)
                .await
                .map(|r| (r, None))
                .map_err(CallError::Pooled),
        }
    }
}

/// What [`Lanes::pick`] gives: a client to send on, or a lane whose connection is opening.
pub enum Pick {
    Go(Upstream),
    /// Pick again once the lane's state moved on from `seen` ([`Wait::changed`]).
    Wait(Wait),
}

/// A lane to wait on: its connection is coming up. Counted against the lane's limit while it
/// lasts.
pub struct Wait {
    lane: Arc<LaneState>,
    seen: u64,
}

impl Wait {
    fn on(lane: &Arc<LaneState>) -> Self {
        lane.waiting.fetch_add(1, Ordering::Relaxed);
        Wait {
            lane: lane.clone(),
            seen: lane.changes.load(Ordering::Acquire),
        }
    }

    pub async fn changed(self) {
        self.lane.changed_since(self.seen).await;
    }
}

impl Drop for Wait {
    fn drop(&mut self) {
        self.lane.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Lane {
    client: Arc<HttpClient>,
    state: Arc<LaneState>,
}

/// One upstream's lanes on one serving thread.
pub struct Lanes {
    /// `host:port`, for the log.
    upstream: String,
    profile: Arc<Profile>,
    connect_timeout: Duration,
    /// Idle connections each lane's client keeps (HTTP/1.1 ones, when TLS agreed on it).
    idle: usize,
    lanes: Vec<Lane>,
    /// Every lane is full and no more may open: said once in the log until a lane has room.
    full: bool,
}

impl Lanes {
    pub fn new(
        upstream: String,
        profile: Arc<Profile>,
        (connect_timeout, idle): (Duration, usize),
    ) -> Self {
        Lanes {
            upstream,
            profile,
            connect_timeout,
            idle,
            lanes: Vec::new(),
            full: false,
        }
    }

    /// The first lane with room, its stream counted; else a lane whose connection is coming up
    /// with room for one more, to wait on; else a new lane; past the bound, the least busy.
    pub fn pick(&mut self) -> Pick {
        self.forget_spare_http1_lanes();
        let mut opening = None;
        for (i, lane) in self.lanes.iter().enumerate() {
            match lane.state.room() {
                Room::Go => {
                    self.say_when_full(false);
                    return self.go(i);
                }
                Room::Wait => opening = opening.or(Some(i)),
                Room::Full => {}
            }
        }
        if let Some(i) = opening {
            return Pick::Wait(Wait::on(&self.lanes[i].state));
        }
        if self.lanes.len() < MAX_LANES {
            // A new connection to the same upstream most likely gets the same limit.
            let mut limits = self.lanes.iter().rev().map(|l| l.state.limit());
            let known = limits.find(|&n| n != UNKNOWN).unwrap_or(UNKNOWN);
            let state = Arc::new(LaneState::with_limit(known));
            let client = attempt::lane_client(
                self.profile.clone(),
                (self.connect_timeout, self.idle),
                state.clone(),
            );
            self.lanes.push(Lane {
                client: Arc::new(client),
                state,
            });
            return self.go(self.lanes.len() - 1);
        }
        self.say_when_full(true);
        let least_busy = (0..self.lanes.len()).min_by_key(|&i| self.lanes[i].state.streams());
        self.go(least_busy.unwrap_or(0))
    }

    fn go(&self, i: usize) -> Pick {
        let lane = &self.lanes[i];
        Pick::Go(Upstream {
            client: Client::Lane(lane.client.clone()),
            slot: Some(StreamSlot::take(&lane.state)),
        })
    }

    /// Past the bound, a request waits in a lane for a stream, and that wait counts as the
    /// upstream's time to headers: the log says when that starts and ends.
    fn say_when_full(&mut self, full: bool) {
        if full == self.full {
            return;
        }
        self.full = full;
        if full {
            tracing::warn!(
                upstream = %self.upstream,
                lanes = MAX_LANES,
                "every HTTP/2 connection to an upstream is at its limit of streams: requests \
                 wait for a stream, and the wait counts as the upstream's time to headers"
            );
        } else {
            tracing::info!(upstream = %self.upstream, "an HTTP/2 connection to the upstream has room again");
        }
    }

    /// Once a connection came up HTTP/1.1 (`auto` over TLS, an upstream whose ALPN picks it,
    /// perhaps after it spoke HTTP/2 before), one pool serves the upstream, first in line: the
    /// other lanes are dropped once idle, and their idle connections close with them. (No
    /// request is left waiting on a dropped lane: requests wait only on a lane whose connection
    /// is coming up, and are woken when it is up or its opening request ends.)
    fn forget_spare_http1_lanes(&mut self) {
        let Some(http1) = self.lanes.iter().position(|l| l.state.limit() == UNLIMITED) else {
            return;
        };
        if self.lanes.len() == 1 {
            return;
        }
        let mut i = 0;
        self.lanes.retain(|l| {
            let keep = i == http1 || l.state.streams() > 0;
            i += 1;
            keep
        });
        if let Some(first) = self.lanes.iter().position(|l| l.state.limit() == UNLIMITED) {
            self.lanes.swap(0, first);
        }
    }

    /// Streams in flight on each lane.
    pub fn streams(&self) -> Vec<usize> {
        self.lanes.iter().map(|l| l.state.streams()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes() -> Lanes {
        let profile = Arc::new(Profile::direct().unwrap());
        Lanes::new(
            "a.example:443".to_string(),
            profile,
            (
                Duration::from_secs(1),
                crate::config::UPSTREAM_IDLE_PER_THREAD,
            ),
        )
    }

    fn go(lanes: &mut Lanes) -> Upstream {
        match lanes.pick() {
            Pick::Go(upstream) => upstream,
            Pick::Wait(_) => panic!("waits: {:?}", lanes.streams()),
        }
    }

    fn wait(lanes: &mut Lanes) -> Wait {
        match lanes.pick() {
            Pick::Go(_) => panic!("goes: {:?}", lanes.streams()),
            Pick::Wait(wait) => wait,
        }
    }

    fn limit(n: u32) -> Said {
        Said {
            max_streams: Some(n),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_lane_carries_one_request_until_its_connection_is_up_and_waiters_count_on_its_limit()
    {
        let mut lanes = lanes();
        let opener = go(&mut lanes);
        let waiting = tokio::spawn(wait(&mut lanes).changed());
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "waits for the connection");
        lanes.lanes[0].state.said(limit(2));
        waiting.await.unwrap();

        let mut held = vec![opener, go(&mut lanes)];
        assert_eq!(lanes.streams(), [2]);
        // Full: a new lane opens, with the limit said; one more request waits for it, the
        // next would be past its limit, so another lane opens.
        held.push(go(&mut lanes));
        assert_eq!(lanes.streams(), [2, 1]);
        let second = wait(&mut lanes);
        held.push(go(&mut lanes));
        assert_eq!(
            lanes.streams(),
            [2, 1, 1],
            "three connections for five requests"
        );
        lanes.lanes[1].state.said(limit(2));
        second.changed().await;
        held.push(go(&mut lanes));
        assert_eq!(lanes.streams(), [2, 2, 1]);
        held.remove(0);
        held.push(go(&mut lanes));
        assert_eq!(lanes.streams(), [2, 2, 1], "room again on the first lane");
        drop(held);
        assert_eq!(lanes.streams(), [0, 0, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_sees_a_change_made_between_its_look_and_its_wait() {
        let mut lanes = lanes();
        let opener = go(&mut lanes);
        let waiting = wait(&mut lanes);
        lanes.lanes[0].state.said(Said { max_streams: None });
        // Paused time: a wait that missed the change would run into the timeout at once.
        let woke = tokio::time::timeout(Duration::from_secs(60), waiting.changed()).await;
        assert!(woke.is_ok(), "the change was missed");
        let held: Vec<Upstream> = (1..ASSUMED_STREAMS).map(|_| go(&mut lanes)).collect();
        assert_eq!(
            lanes.streams(),
            [ASSUMED_STREAMS],
            "no limit said: the assumed one"
        );
        drop((opener, held));
    }

    #[tokio::test(start_paused = true)]
    async fn when_the_request_opening_a_connection_ends_unanswered_a_waiting_one_opens_it() {
        let mut lanes = lanes();
        let opener = go(&mut lanes);
        let waiting = tokio::spawn(wait(&mut lanes).changed());
        tokio::task::yield_now().await;
        drop(opener);
        waiting.await.unwrap();
        let next = go(&mut lanes);
        assert_eq!(lanes.streams(), [1]);
        drop(next);
    }

    #[tokio::test]
    async fn an_http1_lane_takes_every_request_and_lanes_stop_at_their_bound() {
        let mut lanes = lanes();
        let first = go(&mut lanes);
        lanes.lanes[0].state.not_multiplexed();
        let held: Vec<Upstream> = (0..500).map(|_| go(&mut lanes)).collect();
        assert_eq!(lanes.streams(), [501]);
        drop((first, held));

        // Lanes of an HTTP/2 upstream whose new connection came up HTTP/1.1: from then on that
        // lane takes everything, and the others go once idle.
        let mut lanes = self::lanes();
        let first = go(&mut lanes);
        lanes.lanes[0].state.said(limit(100));
        let mut held: Vec<Upstream> = (1..101).map(|_| go(&mut lanes)).collect();
        lanes.lanes[1].state.said(limit(100));
        held.extend((0..49).map(|_| go(&mut lanes)));
        held.push(first);
        assert_eq!(lanes.streams(), [100, 50]);
        lanes.lanes[1].state.not_multiplexed();
        held.truncate(99);
        held.push(go(&mut lanes));
        assert_eq!(lanes.streams(), [1, 99], "the HTTP/1.1 lane first");
        held.clear();
        held.push(go(&mut lanes));
        assert_eq!(lanes.streams(), [1], "the idle lane is gone");
        drop(held);

        // An upstream that allows one stream (it said 0): new lanes start from what it said.
        let mut lanes = self::lanes();
        let first = go(&mut lanes);
        lanes.lanes[0].state.said(limit(0));
        let held: Vec<Upstream> = (0..MAX_LANES + 3).map(|_| go(&mut lanes)).collect();
        let streams = lanes.streams();
        assert_eq!(streams.len(), MAX_LANES, "no lane past the bound");
        assert_eq!(streams.iter().sum::<usize>(), MAX_LANES + 4);
        assert!(
            streams.iter().all(|&s| s <= 2),
            "past it, the least busy: {streams:?}"
        );
        assert!(lanes.full, "said in the log");
        drop((first, held));
        let again = go(&mut lanes);
        assert!(!lanes.full, "room again");
        drop(again);
    }
}
