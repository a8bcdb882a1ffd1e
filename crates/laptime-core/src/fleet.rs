//! What the members of a fleet tell each other: each instance's heartbeat (its requests in
//! flight, in total and per channel), when a heartbeat is too old to believe, and the p95 of
//! times to first output pooled from several instances' recent samples.

use serde::{Deserialize, Serialize};

/// How often an instance publishes its heartbeat.
pub const HEARTBEAT_INTERVAL_US: i64 = 1_000_000;

/// A heartbeat older than this is an instance that is gone (stopped, killed, cut off): several
/// missed beats, so one slow write does not make a live instance blink out.
pub const STALE_AFTER_US: i64 = 5 * HEARTBEAT_INTERVAL_US;

/// One instance's requests in flight at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Heartbeat {
    /// The instance's name, as in the records it writes (`[server] instance`).
    pub instance: String,
    /// Requests running on it (from ingress until their answer ended).
    pub in_flight: u32,
    /// Attempts in flight on each of its channels, in configuration order.
    pub channels: Vec<ChannelInFlight>,
    /// Unix microseconds when it was taken.
    pub at_us: i64,
}

/// Attempts in flight on one channel of one instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelInFlight {
    pub channel: String,
    pub in_flight: u32,
}

impl Heartbeat {
    /// Whether it still speaks for a running instance at `now_us`.
    pub fn is_live(&self, now_us: i64) -> bool {
        now_us.saturating_sub(self.at_us) <= STALE_AFTER_US
    }

    /// The per-channel counts as stored and published (a JSON array).
    pub fn channels_text(&self) -> String {
        serde_json::to_string(&self.channels).unwrap_or_else(|_| "[]".into())
    }

    /// Reads back [`Heartbeat::channels_text`]; `None` for text that is not one.
    pub fn parse_channels(text: &str) -> Option<Vec<ChannelInFlight>> {
        serde_json::from_str(text).ok()
    }
}

/// The fleet as one instance sees it: the live heartbeats, its own (the freshest there is)
/// in place of whatever was published for it, ordered by instance name.
pub fn merge(own: Heartbeat, others: &[Heartbeat], now_us: i64) -> Vec<Heartbeat> {
    let mut out: Vec<Heartbeat> = others
        .iter()
        .filter(|h| h.instance != own.instance && h.is_live(now_us))
        .cloned()
        .collect();
    out.push(own);
    out.sort_by(|a, b| a.instance.cmp(&b.instance));
    out
}

/// The nearest-rank p95 of the samples of two sorted lists taken together, without merging
/// them into one; `None` with fewer than `min_samples`.
pub fn p95_of_sorted(a: &[u64], b: &[u64], min_samples: usize) -> Option<u64> {
    let n = a.len() + b.len();
    if n < min_samples.max(1) {
        return None;
    }
    let rank = (n * 95).div_ceil(100).max(1);
    let (mut i, mut j) = (0, 0);
    let mut last = None;
    for _ in 0..rank {
        let take_a = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x <= y,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if take_a {
            last = a.get(i).copied();
            i += 1;
        } else {
            last = b.get(j).copied();
            j += 1;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(instance: &str, in_flight: u32, at_us: i64) -> Heartbeat {
        Heartbeat {
            instance: instance.into(),
            in_flight,
            channels: vec![ChannelInFlight {
                channel: "sim".into(),
                in_flight,
            }],
            at_us,
        }
    }

    #[test]
    fn a_heartbeat_goes_stale_after_several_missed_beats() {
        let h = beat("a", 1, 10_000_000);
        assert!(h.is_live(10_000_000 + STALE_AFTER_US));
        assert!(!h.is_live(10_000_001 + STALE_AFTER_US));
        assert_eq!(
            Heartbeat::parse_channels(&h.channels_text()),
            Some(h.channels.clone())
        );
        assert_eq!(Heartbeat::parse_channels("not json"), None);
    }

    #[test]
    fn the_fleet_is_the_live_others_and_this_instance_as_it_is_now() {
        let now = 100_000_000;
        let others = [
            beat("b", 3, now - 1_000_000),
            beat("a", 9, now - 1_000_000),
            beat("gone", 4, now - STALE_AFTER_US - 1),
        ];
        let fleet = merge(beat("a", 2, now), &others, now);
        let seen: Vec<_> = fleet
            .iter()
            .map(|h| (h.instance.as_str(), h.in_flight))
            .collect();
        assert_eq!(seen, [("a", 2), ("b", 3)]);
    }

    #[test]
    fn the_p95_of_two_lists_is_the_p95_of_their_union() {
        let a: Vec<u64> = (0..50).map(|i| i * 7 % 101).collect();
        let b: Vec<u64> = (0..37).map(|i| 300 - i * 3).collect();
        let (mut sa, mut sb) = (a.clone(), b.clone());
        sa.sort_unstable();
        sb.sort_unstable();
        let mut all = [a, b].concat();
        all.sort_unstable();
        let rank = (all.len() * 95).div_ceil(100);
        assert_eq!(p95_of_sorted(&sa, &sb, 20), Some(all[rank - 1]));
        assert_eq!(p95_of_sorted(&sb, &sa, 20), Some(all[rank - 1]));
        assert_eq!(
            p95_of_sorted(&sa, &[], 20),
            Some(sa[(50 * 95usize).div_ceil(100) - 1])
        );
        assert_eq!(p95_of_sorted(&sa[..10], &sb[..9], 20), None);
    }
}
