//! The health of one (channel, model): its `Retry-After` cool-down and its circuit breaker. An
//! upstream limits and fails per model, so one model's 429s or outage never take the channel
//! away from its other models. With `[shared] redis_url`, an open circuit and a cool-down are
//! also published to the fleet and the fleet's are applied here (see [`crate::shared`]), and so
//! are the recent times to first output: the p95 that hedging and the adaptive first-output
//! deadline use is then the fleet's (this instance's samples and the others' together).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use laptime_core::circuit::{Circuit, CircuitConfig, CircuitState};
use tokio::time::Instant;

use crate::shared::{Change, Kind, Publisher};

/// Where a channel's models publish their changes, once sharing is on.
type Sharing = Arc<OnceLock<Publisher>>;

/// Cool-down and circuit of one model on one channel.
#[derive(Debug)]
pub struct ModelHealth {
    channel: String,
    model: String,
    /// Unix microseconds before which the model is skipped on this channel (`Retry-After`).
    cooldown_until_us: AtomicI64,
    /// The lock is held only to read or update it, never across I/O.
    circuit: Mutex<Circuit>,
    /// The origin of the circuit's time offsets.
    born: Instant,
    transitions: AtomicU64,
    /// Recent times from dispatch to first effective output, microseconds.
    recent_first_output: Mutex<VecDeque<u64>>,
    /// Set by a new sample, cleared when the samples are handed to the fleet.
    first_output_changed: AtomicBool,
    /// The other instances' recent times to first output, sorted (with `[shared] redis_url`).
    fleet_first_output: Mutex<Vec<u64>>,
    /// Unix microseconds before which another instance of the fleet holds this circuit open.
    shared_open_until_us: AtomicI64,
    sharing: Sharing,
}

/// Samples kept of the recent times to first output, and the fewest a p95 is read from.
const FIRST_OUTPUT_SAMPLES: usize = 200;
const FIRST_OUTPUT_MIN_SAMPLES: usize = 20;

/// The other instances' samples kept at most (each publishes its last 200).
pub const FLEET_FIRST_OUTPUT_SAMPLES: usize = 16 * FIRST_OUTPUT_SAMPLES;

impl ModelHealth {
    fn new(channel: &str, model: &str, config: CircuitConfig, sharing: Sharing) -> Self {
        ModelHealth {
            shared_open_until_us: AtomicI64::new(0),
            sharing,
            channel: channel.to_string(),
            model: model.to_string(),
            cooldown_until_us: AtomicI64::new(0),
            circuit: Mutex::new(Circuit::new(config)),
            born: Instant::now(),
            transitions: AtomicU64::new(0),
            recent_first_output: Mutex::new(VecDeque::new()),
            first_output_changed: AtomicBool::new(false),
            fleet_first_output: Mutex::new(Vec::new()),
        }
    }

    /// Remembers a time from dispatch to first output of this model on this channel.
    pub fn note_first_output(&self, d: std::time::Duration) {
        let mut q = self
            .recent_first_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if q.len() == FIRST_OUTPUT_SAMPLES {
            q.pop_front();
        }
        q.push_back(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        self.first_output_changed.store(true, Ordering::Relaxed);
    }

    /// The nearest-rank p95 of the recent times to first output, this instance's and (with
    /// `[shared] redis_url`) the fleet's together; `None` below 20 samples.
    pub fn first_output_p95(&self) -> Option<std::time::Duration> {
        let mut own = self.own_first_output();
        own.sort_unstable();
        let fleet = self
            .fleet_first_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        laptime_core::fleet::p95_of_sorted(&own, &fleet, FIRST_OUTPUT_MIN_SAMPLES)
            .map(std::time::Duration::from_micros)
    }

    fn own_first_output(&self) -> Vec<u64> {
        self.recent_first_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    /// This instance's recent samples, when one came since the last call (or `always`), to
    /// publish to the fleet.
    pub fn first_output_to_share(&self, always: bool) -> Option<Vec<u64>> {
        let changed = self.first_output_changed.swap(false, Ordering::Relaxed);
        let own = self.own_first_output();
        ((changed || always) && !own.is_empty()).then_some(own)
    }

    /// The other instances' recent samples, replacing the ones known before (at most
    /// [`FLEET_FIRST_OUTPUT_SAMPLES`] are kept).
    pub fn set_fleet_first_output(&self, mut samples: Vec<u64>) {
        samples.truncate(FLEET_FIRST_OUTPUT_SAMPLES);
        samples.sort_unstable();
        *self
            .fleet_first_output
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = samples;
    }

    /// The model's name, as sent upstream.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Skips this model on this channel until `until_us` (the upstream asked to be left alone).
    pub fn cool_down_until(&self, until_us: i64) {
        self.cooldown_until_us
            .fetch_max(until_us, Ordering::Relaxed);
        self.publish(Kind::CoolDown, until_us);
    }

    /// Another instance was told to leave this model alone until `until_us`.
    pub fn shared_cool_down_until(&self, until_us: i64) {
        self.cooldown_until_us
            .fetch_max(until_us, Ordering::Relaxed);
    }

    /// Another instance holds this circuit open until `until_us`.
    pub fn shared_open_until(&self, until_us: i64) {
        self.shared_open_until_us
            .fetch_max(until_us, Ordering::Relaxed);
    }

    /// How much longer the fleet holds this circuit open, if it does.
    fn shared_open_left(&self) -> Option<std::time::Duration> {
        let until = self.shared_open_until_us.load(Ordering::Relaxed);
        if until == 0 {
            // Never shared (no Redis, or the fleet never opened it): no clock read per request.
            return None;
        }
        let left = until - crate::clock::now_unix_us();
        (left > 0).then(|| std::time::Duration::from_micros(left.unsigned_abs()))
    }

    fn publish(&self, kind: Kind, until_us: i64) {
        if let Some(p) = self.sharing.get() {
            p.publish(Change {
                kind,
                channel: self.channel.clone(),
                model: self.model.clone(),
                until_us,
            });
        }
    }

    pub fn cooling_down(&self, now_us: i64) -> bool {
        self.cooldown_until_us.load(Ordering::Relaxed) > now_us
    }

    fn since_born(&self) -> std::time::Duration {
        Instant::now().saturating_duration_since(self.born)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Circuit> {
        self.circuit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The circuit's state: this instance's own, or open while the fleet holds it open.
    pub fn circuit_state(&self) -> CircuitState {
        let own = self.lock().state();
        match (own, self.shared_open_left()) {
            (CircuitState::Open { .. }, _) | (_, None) => own,
            (_, Some(left)) => CircuitState::Open {
                until: self.since_born() + left,
            },
        }
    }

    /// Whether the circuit lets a request through now (without taking the half-open probe).
    pub fn circuit_available(&self) -> bool {
        if self.shared_open_left().is_some() {
            return false;
        }
        let now = self.since_born();
        self.lock().available(now)
    }

    /// Takes the circuit's permission for one attempt (an open circuit past its back-off lets
    /// this one through as its probe). Never while the fleet holds it open.
    pub fn circuit_acquire(&self) -> bool {
        if self.shared_open_left().is_some() {
            return false;
        }
        let now = self.since_born();
        let (allowed, changed) = self.lock().acquire(now);
        if let Some(state) = changed {
            self.changed(state);
        }
        allowed
    }

    /// Records an attempt's result at its head (failed: no answer, or a retryable status).
    pub fn circuit_record(&self, failed: bool) {
        let now = self.since_born();
        let changed = self.lock().record(now, failed);
        if let Some(state) = changed {
            self.changed(state);
        }
    }

    fn changed(&self, state: CircuitState) {
        self.transitions.fetch_add(1, Ordering::Relaxed);
        if let CircuitState::Open { until } = state {
            let left = until.saturating_sub(self.since_born());
            let left_us = i64::try_from(left.as_micros()).unwrap_or(i64::MAX);
            self.publish(
                Kind::Open,
                crate::clock::now_unix_us().saturating_add(left_us),
            );
        }
        tracing::warn!(
            channel = %self.channel,
            model = %self.model,
            state = state.as_str(),
            "circuit breaker state changed"
        );
    }
}

/// The health of each model of one channel. A `*` channel passes any name, so the names it
/// tracks on their own are bounded; later names share one entry.
#[derive(Debug)]
pub struct ChannelHealth {
    channel: String,
    config: CircuitConfig,
    max_tracked: usize,
    by_model: Mutex<HashMap<String, Arc<ModelHealth>>>,
    /// For the names beyond `max_tracked`.
    others: Arc<ModelHealth>,
    sharing: Sharing,
}

/// Model names a channel tracks on its own beyond the ones it lists.
const UNLISTED_TRACKED: usize = 64;

impl ChannelHealth {
    pub fn new(channel: &str, config: CircuitConfig, listed: usize) -> Self {
        let sharing = Sharing::default();
        ChannelHealth {
            channel: channel.to_string(),
            config,
            max_tracked: listed + UNLISTED_TRACKED,
            by_model: Mutex::new(HashMap::new()),
            others: Arc::new(ModelHealth::new(channel, "*", config, sharing.clone())),
            sharing,
        }
    }

    /// The circuit settings its models were made with.
    pub fn config(&self) -> CircuitConfig {
        self.config
    }

    /// Publishes this channel's changes to the fleet from now on (once).
    pub fn share(&self, publisher: Publisher) {
        let _ = self.sharing.set(publisher);
    }

    /// Where this channel publishes, when sharing is on.
    pub fn publisher(&self) -> Option<&Publisher> {
        self.sharing.get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<ModelHealth>>> {
        self.by_model.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The health of `model` (the name sent upstream) on this channel.
    pub fn of(&self, model: &str) -> Arc<ModelHealth> {
        let mut map = self.lock();
        if let Some(h) = map.get(model) {
            return h.clone();
        }
        if map.len() >= self.max_tracked {
            return self.others.clone();
        }
        let h = Arc::new(ModelHealth::new(
            &self.channel,
            model,
            self.config,
            self.sharing.clone(),
        ));
        map.insert(model.to_string(), h.clone());
        h
    }

    /// Every model tracked on its own.
    pub fn models(&self) -> Vec<Arc<ModelHealth>> {
        self.lock().values().cloned().collect()
    }

    /// The worst circuit state over the channel's models (open, then half-open, then closed).
    pub fn worst_state(&self) -> CircuitState {
        let rank = |s: CircuitState| match s {
            CircuitState::Closed => 0,
            CircuitState::HalfOpen { .. } => 1,
            CircuitState::Open { .. } => 2,
        };
        let map = self.lock();
        map.values()
            .chain(std::iter::once(&self.others))
            .map(|h| h.circuit_state())
            .max_by_key(|s| rank(*s))
            .unwrap_or(CircuitState::Closed)
    }

    /// Circuit state changes over the channel's models.
    pub fn transitions(&self) -> u64 {
        let map = self.lock();
        map.values()
            .chain(std::iter::once(&self.others))
            .map(|h| h.transitions.load(Ordering::Relaxed))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_models_failures_open_only_its_own_circuit() {
        let config = CircuitConfig {
            consecutive_failures: 2,
            ..CircuitConfig::default()
        };
        let channel = ChannelHealth::new("c", config, 2);
        let (a, b) = (channel.of("a"), channel.of("b"));
        for _ in 0..2 {
            assert!(a.circuit_acquire());
            a.circuit_record(true);
        }
        assert!(matches!(a.circuit_state(), CircuitState::Open { .. }));
        assert!(!a.circuit_available());
        assert!(b.circuit_available() && channel.of("b").circuit_acquire());
        assert!(matches!(channel.worst_state(), CircuitState::Open { .. }));
        assert_eq!(channel.transitions(), 1);
        a.cool_down_until(100);
        assert!(a.cooling_down(50) && !b.cooling_down(50));
        assert!(Arc::ptr_eq(&a, &channel.of("a")));
    }

    #[test]
    fn names_beyond_the_bound_share_one_entry() {
        let channel = ChannelHealth::new("c", CircuitConfig::default(), 0);
        let tracked: Vec<_> = (0..UNLISTED_TRACKED)
            .map(|i| channel.of(&format!("m{i}")))
            .collect();
        let beyond = channel.of("one-more");
        assert!(Arc::ptr_eq(&beyond, &channel.of("yet-another")));
        assert!(tracked.iter().all(|t| !Arc::ptr_eq(t, &beyond)));
    }
}
