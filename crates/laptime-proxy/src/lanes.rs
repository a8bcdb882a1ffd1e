//! Lanes: the HTTP/2 connections a serving thread keeps to one upstream, so that no request
//! waits for a stream where nobody sees it. hyper-util's pool puts every request to an
//! upstream on one HTTP/2 connection, and hyper queues the ones past the upstream's
//! `SETTINGS_MAX_CONCURRENT_STREAMS` inside the connection: their wait would be recorded as the
//! upstream's time to answer. So each lane is a pool of its own (one connection, whose limit
//! [`crate::egress::settings`] reads off the wire), its streams are counted from dispatch until
//! the answer's body ends, and a request goes to the first lane with room, a new lane when none
//! has. Until a connection's limit is known its lane takes what the upstream's other
//! connections announced, else [`ASSUMED_STREAMS`], the least a server should allow; a lane
//! whose connection turned out to be HTTP/1.1 has no limit (its pool opens a connection per
//! request, as before). Lanes stay once opened (an idle one's connection closes with the pool's
//! idle timeout), so their number is bounded by the peak of streams in flight.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::attempt::{self, HttpClient};
use crate::egress::Profile;

/// Streams a lane takes before its connection's limit is known: RFC 9113 section 6.5.2 asks
/// servers to allow no fewer than 100.
pub const ASSUMED_STREAMS: usize = 100;

/// Lanes per upstream and serving thread, a bound on the connections a burst can make the
/// gateway open to an upstream with a small limit. Past it, requests share the least busy
/// lane (and may wait in it).
pub const MAX_LANES: usize = 256;

/// What a lane knows of its connection's limit of concurrent streams.
#[derive(Debug, Default)]
pub struct StreamLimit(AtomicUsize);

/// Stored for a connection that is not multiplexed.
const UNLIMITED: usize = usize::MAX;

impl StreamLimit {
    /// The upstream's `SETTINGS_MAX_CONCURRENT_STREAMS`. Zero (no new streams for now) is
    /// taken as one: a lane that took none would never learn when the upstream allows more.
    pub fn announce(&self, streams: u32) {
        let n = usize::try_from(streams).unwrap_or(UNLIMITED).max(1);
        self.0.store(n, Ordering::Relaxed);
    }

    /// The connection speaks HTTP/1.1: every request gets a connection of its own.
    pub fn not_multiplexed(&self) {
        self.0.store(UNLIMITED, Ordering::Relaxed);
    }

    fn unlimited(&self) -> bool {
        self.0.load(Ordering::Relaxed) == UNLIMITED
    }

    fn streams(&self) -> usize {
        match self.0.load(Ordering::Relaxed) {
            0 => ASSUMED_STREAMS,
            n => n,
        }
    }
}

/// One stream counted on its lane until dropped.
#[derive(Debug)]
pub struct StreamSlot(Arc<AtomicUsize>);

impl Drop for StreamSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client to send one request with, and the stream it holds on its lane (none for a client
/// without lanes).
pub struct Upstream {
    pub client: HttpClient,
    pub slot: Option<StreamSlot>,
}

struct Lane {
    client: HttpClient,
    limit: Arc<StreamLimit>,
    streams: Arc<AtomicUsize>,
}

impl Lane {
    fn room(&self) -> bool {
        self.streams.load(Ordering::Relaxed) < self.limit.streams()
    }
}

/// One upstream's lanes on one serving thread.
pub struct Lanes {
    /// `host:port`, for the log.
    upstream: String,
    profile: Arc<Profile>,
    connect_timeout: Duration,
    lanes: Vec<Lane>,
    /// Every lane is full and no more may open: said once in the log until a lane has room.
    full: bool,
}

impl Lanes {
    pub fn new(upstream: String, profile: Arc<Profile>, connect_timeout: Duration) -> Self {
        Lanes {
            upstream,
            profile,
            connect_timeout,
            lanes: Vec::new(),
            full: false,
        }
    }

    /// The first lane with room (a new one when none has), its stream counted.
    pub fn pick(&mut self) -> Upstream {
        self.forget_spare_http1_lanes();
        let room = self.lanes.iter().position(Lane::room);
        self.say_when_full(room.is_none() && self.lanes.len() >= MAX_LANES);
        let lane = match room {
            Some(i) => &self.lanes[i],
            None if self.lanes.len() < MAX_LANES => {
                // A new connection to the same upstream most likely gets the same limit.
                let known = self.lanes.iter().rev();
                let known = known
                    .map(|l| l.limit.0.load(Ordering::Relaxed))
                    .find(|&n| n != 0)
                    .unwrap_or(0);
                let limit = Arc::new(StreamLimit(AtomicUsize::new(known)));
                let client =
                    attempt::lane_client(self.profile.clone(), self.connect_timeout, limit.clone());
                self.lanes.push(Lane {
                    client,
                    limit,
                    streams: Arc::new(AtomicUsize::new(0)),
                });
                &self.lanes[self.lanes.len() - 1]
            }
            None => self
                .lanes
                .iter()
                .min_by_key(|l| l.streams.load(Ordering::Relaxed))
                .unwrap_or(&self.lanes[0]),
        };
        lane.streams.fetch_add(1, Ordering::Relaxed);
        Upstream {
            client: lane.client.clone(),
            slot: Some(StreamSlot(lane.streams.clone())),
        }
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

    /// Once a connection came up HTTP/1.1 (`auto` over TLS, an upstream whose ALPN picks it),
    /// one pool serves the upstream, first in line: the lanes a burst opened before that was
    /// known are dropped once idle, and their idle connections close with them.
    fn forget_spare_http1_lanes(&mut self) {
        let Some(http1) = self.lanes.iter().position(|l| l.limit.unlimited()) else {
            return;
        };
        if self.lanes.len() == 1 {
            return;
        }
        let mut i = 0;
        self.lanes.retain(|l| {
            let keep = i == http1 || l.streams.load(Ordering::Relaxed) > 0;
            i += 1;
            keep
        });
        if let Some(first) = self.lanes.iter().position(|l| l.limit.unlimited()) {
            self.lanes.swap(0, first);
        }
    }

    /// Streams in flight on each lane.
    pub fn streams(&self) -> Vec<usize> {
        self.lanes
            .iter()
            .map(|l| l.streams.load(Ordering::Relaxed))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes() -> Lanes {
        let profile = Arc::new(Profile::direct().unwrap());
        Lanes::new("a.example:443".to_string(), profile, Duration::from_secs(1))
    }

    #[tokio::test]
    async fn a_lane_fills_to_its_limit_before_the_next_opens_and_frees_as_streams_end() {
        let mut lanes = lanes();
        let mut held: Vec<Upstream> = (0..ASSUMED_STREAMS).map(|_| lanes.pick()).collect();
        assert_eq!(lanes.streams(), [ASSUMED_STREAMS], "the limit assumed");
        held.push(lanes.pick());
        assert_eq!(lanes.streams(), [ASSUMED_STREAMS, 1]);

        // The first connection's upstream allows 2: new streams go to the second lane.
        lanes.lanes[0].limit.announce(2);
        held.truncate(3);
        assert_eq!(lanes.streams(), [3, 0]);
        held.push(lanes.pick());
        assert_eq!(lanes.streams(), [3, 1]);
        held.remove(0);
        held.remove(0);
        held.push(lanes.pick());
        assert_eq!(lanes.streams(), [2, 1], "room again on the first lane");
        drop(held);
        assert_eq!(lanes.streams(), [0, 0]);
    }

    #[tokio::test]
    async fn an_http1_lane_takes_every_request_and_lanes_stop_at_their_bound() {
        let mut lanes = lanes();
        let first = lanes.pick();
        lanes.lanes[0].limit.not_multiplexed();
        let held: Vec<Upstream> = (0..500).map(|_| lanes.pick()).collect();
        assert_eq!(lanes.streams(), [501]);
        drop((first, held));

        // A burst opened lanes before the first connection came up HTTP/1.1: from then on the
        // HTTP/1.1 lane takes everything, and the others go once idle.
        let mut lanes = self::lanes();
        let mut held: Vec<Upstream> = (0..ASSUMED_STREAMS + 50).map(|_| lanes.pick()).collect();
        assert_eq!(lanes.streams(), [ASSUMED_STREAMS, 50]);
        lanes.lanes[1].limit.not_multiplexed();
        held.truncate(ASSUMED_STREAMS - 1);
        held.push(lanes.pick());
        assert_eq!(
            lanes.streams(),
            [1, ASSUMED_STREAMS - 1],
            "the HTTP/1.1 lane first"
        );
        held.clear();
        held.push(lanes.pick());
        assert_eq!(lanes.streams(), [1], "the idle lane is gone");
        drop(held);

        // An upstream that allows one stream (it said 0): new lanes start from what it said.
        let mut lanes = self::lanes();
        let first = lanes.pick();
        lanes.lanes[0].limit.announce(0);
        let held: Vec<Upstream> = (0..MAX_LANES + 3).map(|_| lanes.pick()).collect();
        let streams = lanes.streams();
        assert_eq!(streams.len(), MAX_LANES, "no lane past the bound");
        assert_eq!(streams.iter().sum::<usize>(), MAX_LANES + 4);
        assert!(
            streams.iter().all(|&s| s <= 2),
            "past it, the least busy: {streams:?}"
        );
        assert!(lanes.full, "said in the log");
        drop((first, held));
        let again = lanes.pick();
        assert!(!lanes.full, "room again");
        drop(again);
    }
}
