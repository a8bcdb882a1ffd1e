//! The circuit breaker of one channel, as a pure state machine over time offsets: closed until
//! N failures in a row or an error rate over a window, then open (ejected) for a back-off, then
//! half-open, where a single probe decides between closed and open again.
//!
//! The back-off starts short and doubles with each failed probe, up to `open_s`: a channel that
//! recovers is found again within about one back-off of its recovery, while one that stays down
//! is asked at most once per `open_s` (with the defaults: probes 5, 15, 35 and 65 s after the
//! circuit opens, then every 30 s).

use std::collections::VecDeque;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a channel is ejected, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CircuitConfig {
    /// Failures in a row that open the circuit.
    pub consecutive_failures: u32,
    /// Error rate over `window_s` that opens it, once `min_requests` were seen in the window.
    pub error_rate: f64,
    pub window_s: u64,
    pub min_requests: u32,
    /// How long an open circuit stays open before a probe is let through, at the most.
    pub open_s: u64,
    /// The first back-off after the circuit opens; each failed probe doubles it, up to `open_s`.
    pub first_probe_s: u64,
}

impl Default for CircuitConfig {
    fn default() -> Self {
        CircuitConfig {
            consecutive_failures: 5,
            error_rate: 0.5,
            window_s: 30,
            min_requests: 20,
            open_s: 30,
            first_probe_s: 5,
        }
    }
}

/// The state a channel is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    Closed,
    /// Ejected until this offset.
    Open {
        until: Duration,
    },
    /// One probe may go; `probing` while it is in flight.
    HalfOpen {
        probing: bool,
    },
}

impl CircuitState {
    pub fn as_str(self) -> &'static str {
        match self {
            CircuitState::Closed => "closed",
            CircuitState::Open { .. } => "open",
            CircuitState::HalfOpen { .. } => "half_open",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Circuit {
    config: CircuitConfig,
    state: CircuitState,
    consecutive: u32,
    /// (when, failed) of recent results, oldest first.
    window: VecDeque<(Duration, bool)>,
    /// Probes that failed since the circuit last closed: the back-off doubles with each.
    failed_probes: u32,
}

impl Circuit {
    pub fn new(config: CircuitConfig) -> Self {
        Circuit {
            config,
            state: CircuitState::Closed,
            consecutive: 0,
            window: VecDeque::new(),
            failed_probes: 0,
        }
    }

    /// How long the circuit stays open this time: `first_probe_s` doubled per failed probe,
    /// at most `open_s`.
    fn back_off(&self) -> Duration {
        let doubled = self
            .config
            .first_probe_s
            .max(1)
            .saturating_mul(1u64 << self.failed_probes.min(32));
        Duration::from_secs(doubled.min(self.config.open_s.max(1)))
    }

    pub fn state(&self) -> CircuitState {
        self.state
    }

    /// Whether a request may be sent now, without taking the half-open probe.
    pub fn available(&self, now: Duration) -> bool {
        match self.state {
            CircuitState::Closed => true,
            CircuitState::Open { until } => now >= until,
            CircuitState::HalfOpen { probing } => !probing,
        }
    }

    /// Takes permission to send; an open circuit past its back-off becomes half-open and this
    /// request is its probe. Returns the transition, if any.
    pub fn acquire(&mut self, now: Duration) -> (bool, Option<CircuitState>) {
        match self.state {
            CircuitState::Closed => (true, None),
            CircuitState::Open { until } if now >= until => {
                self.state = CircuitState::HalfOpen { probing: true };
                (true, Some(self.state))
            }
            CircuitState::Open { .. } => (false, None),
            CircuitState::HalfOpen { probing: false } => {
                self.state = CircuitState::HalfOpen { probing: true };
                (true, None)
            }
            CircuitState::HalfOpen { probing: true } => (false, None),
        }
    }

    /// Records a result; returns the new state when it changed.
    pub fn record(&mut self, now: Duration, failed: bool) -> Option<CircuitState> {
        let before = self.state;
        let horizon = now.saturating_sub(Duration::from_secs(self.config.window_s));
        while self.window.front().is_some_and(|(t, _)| *t < horizon) {
            self.window.pop_front();
        }
        self.window.push_back((now, failed));
        self.consecutive = if failed { self.consecutive + 1 } else { 0 };
        self.state = match (self.state, failed) {
            (CircuitState::HalfOpen { .. }, true) => {
                self.failed_probes = self.failed_probes.saturating_add(1);
                CircuitState::Open {
                    until: now + self.back_off(),
                }
            }
            (CircuitState::HalfOpen { .. }, false) => {
                self.window.clear();
                self.failed_probes = 0;
                CircuitState::Closed
            }
            (CircuitState::Closed, true) if self.trips() => CircuitState::Open {
                until: now + self.back_off(),
            },
            (state, _) => state,
        };
        (self.state.as_str() != before.as_str()).then_some(self.state)
    }

    fn trips(&self) -> bool {
        if self.consecutive >= self.config.consecutive_failures {
            return true;
        }
        let n = self.window.len() as u32;
        let failures = self.window.iter().filter(|(_, f)| *f).count() as f64;
        n >= self.config.min_requests && failures / f64::from(n) > self.config.error_rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: u64) -> Duration {
        Duration::from_secs(v)
    }

    #[test]
    fn consecutive_failures_open_the_circuit_and_one_probe_closes_it() {
        let mut c = Circuit::new(CircuitConfig {
            consecutive_failures: 3,
            open_s: 10,
            first_probe_s: 10,
            ..CircuitConfig::default()
        });
        assert_eq!(c.record(s(1), true), None);
        assert_eq!(c.record(s(2), true), None);
        assert_eq!(
            c.record(s(3), true),
            Some(CircuitState::Open { until: s(13) })
        );
        assert!(!c.available(s(12)));
        assert_eq!(c.acquire(s(12)), (false, None));
        assert_eq!(
            c.acquire(s(13)),
            (true, Some(CircuitState::HalfOpen { probing: true }))
        );
        assert!(!c.available(s(13)), "only one probe at a time");
        assert_eq!(c.acquire(s(13)), (false, None));
        assert_eq!(c.record(s(14), false), Some(CircuitState::Closed));
        assert!(c.available(s(14)));
    }

    #[test]
    fn a_failed_probe_opens_it_again_for_twice_as_long_up_to_open_s() {
        let mut c = Circuit::new(CircuitConfig {
            consecutive_failures: 1,
            open_s: 12,
            first_probe_s: 5,
            ..CircuitConfig::default()
        });
        assert_eq!(
            c.record(s(0), true),
            Some(CircuitState::Open { until: s(5) })
        );
        assert!(c.acquire(s(5)).0);
        assert_eq!(
            c.record(s(6), true),
            Some(CircuitState::Open { until: s(16) })
        );
        assert!(c.acquire(s(16)).0);
        assert_eq!(
            c.record(s(16), true),
            Some(CircuitState::Open { until: s(28) }),
            "capped at open_s"
        );
        // A probe that succeeds closes it, and the next opening starts short again.
        assert!(c.acquire(s(28)).0);
        assert_eq!(c.record(s(28), false), Some(CircuitState::Closed));
        assert_eq!(
            c.record(s(29), true),
            Some(CircuitState::Open { until: s(34) })
        );
    }

    #[test]
    fn a_primary_down_for_60_s_is_back_within_30_s_of_its_recovery_with_the_defaults() {
        let mut c = Circuit::new(CircuitConfig::default());
        let down_until = s(60);
        let mut now = s(0);
        let mut back_at = None;
        // One request a second; each reaches the channel only when the circuit lets it.
        while now <= s(200) && back_at.is_none() {
            if c.acquire(now).0 {
                c.record(now, now < down_until);
                if now >= down_until && c.state() == CircuitState::Closed {
                    back_at = Some(now);
                }
            }
            now += s(1);
        }
        let back_at = back_at.unwrap();
        assert!(back_at <= down_until + s(30), "back at {back_at:?}");
        assert_eq!(
            back_at,
            s(69),
            "open at 4 s; probes at 9, 19 and 39 fail, 69 succeeds"
        );
    }

    #[test]
    fn the_error_rate_over_the_window_opens_it_once_enough_requests_were_seen() {
        let cfg = CircuitConfig {
            consecutive_failures: 100,
            error_rate: 0.5,
            window_s: 10,
            min_requests: 4,
            open_s: 1,
            first_probe_s: 1,
        };
        let mut c = Circuit::new(cfg);
        // 2 of 3 failed: under the minimum sample.
        c.record(s(0), true);
        c.record(s(0), false);
        assert_eq!(c.record(s(0), true), None);
        // 3 of 4 failed: over 50 %.
        assert!(matches!(
            c.record(s(1), true),
            Some(CircuitState::Open { .. })
        ));
        // Old results leave the window.
        let mut c = Circuit::new(cfg);
        for _ in 0..3 {
            c.record(s(0), true);
        }
        assert_eq!(c.record(s(20), false), None);
        assert_eq!(c.state(), CircuitState::Closed);
    }
}
