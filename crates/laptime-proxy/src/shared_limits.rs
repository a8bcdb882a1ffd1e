//! Requests- and tokens-per-minute windows shared by a fleet through Redis (`[shared]
//! redis_url`): the same GCRA as [`crate::limits`], run by one script over every window a
//! request is charged to, so that the check and the take are one step for all instances, timed
//! by Redis' own clock (instances' clocks may differ). Requests in flight stay counted per
//! instance: a place held in Redis would leak when an instance dies.
//!
//! Admission waits for Redis, bounded by [`WAIT`]: a Redis that does not answer in time, or at
//! all, leaves the instance on its own windows for that request (said once per change in the
//! log), so a Redis outage never refuses or stalls a request.
//!
//! What admission waits for is kept to one script call on a connection of the caller's own
//! thread: each serving thread runs its own single-threaded runtime, and a connection driven by
//! another thread's runtime costs two cross-thread wake-ups per call. Settlements are not sent on their own: they ride with the next take (the script
//! applies them first), or go after [`SETTLE_WAIT`] when no take came.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;
use std::time::Duration;

use laptime_core::limit::{Limit, MINUTE_US};

/// The longest admission waits for Redis before using this instance's own windows.
pub const WAIT: Duration = Duration::from_millis(50);

/// The longest a settlement waits for a take to carry it before it is sent on its own.
pub const SETTLE_WAIT: Duration = Duration::from_millis(100);

/// The longest a settlement sent on its own may take (a failure only leaves the estimate
/// charged).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(1);

/// First applies the settlements: moves each window `KEYS[j]`, `j > n` (with `n = ARGV[2]`), by
/// `ARGV[2 + n + j]` µs, never back past now. Then takes `ARGV[2i+1]` units at `ARGV[2i+2]` µs
/// each from window `KEYS[i]`, for every `i ≤ n`, or none: returns `{0, owed_us of each window
/// after the take}` when all admit, else `{i, retry_after_us or -1, owed_us}` of the first that
/// does not. `ARGV[1]` is a minute in µs. With `n = 0` it only settles.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local minute = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
for j = n + 1, #KEYS do
  local key = KEYS[j]
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new = tat + tonumber(ARGV[2 + n + j])
  if new > now then
    redis.call('SET', key, string.format('%d', new), 'PX', math.floor((new - now) / 1000) + 1000)
  else
    redis.call('DEL', key)
  end
end
local news = {}
for i = 1, n do
  local cost = tonumber(ARGV[2 * i + 1]) * tonumber(ARGV[2 * i + 2])
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  local new = tat + cost
  if new - now > minute then
    local retry = -1
    if cost <= minute then retry = new - now - minute end
    return {i, retry, tat - now}
  end
  news[i] = new
end
local owed = {0}
for i = 1, n do
  redis.call('SET', KEYS[i], string.format('%d', news[i]), 'PX', math.floor((news[i] - now) / 1000) + 1000)
  owed[i + 1] = news[i] - now
end
return owed
";

/// One window a request is charged to.
#[derive(Debug, Clone)]
pub struct Charge {
    pub limit: Limit,
    pub id: String,
    pub units: u64,
    pub per_minute: u64,
}

/// What Redis said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// Every charge was taken; what each window owes now, in the charges' order.
    All { owed_us: Vec<i64> },
    /// The charge at this index does not fit: when it would (`None`: never), and how long
    /// its window owes.
    Refused {
        index: usize,
        retry_after_us: Option<i64>,
        owed_us: i64,
    },
}

/// Which connection a caller uses: its own thread's on a single-threaded runtime (a serving
/// thread: the connection's task runs beside the request), else the one every other caller
/// shares. Bounded by the threads that run single-threaded runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Thread(ThreadId),
    Shared,
}

fn lane() -> Lane {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) if rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::CurrentThread => {
            Lane::Thread(std::thread::current().id())
        }
        _ => Lane::Shared,
    }
}

/// Settlements waiting for a take to carry them.
#[derive(Debug, Default)]
struct Unsent {
    /// µs to move each window (by its Redis key), summed.
    moves: HashMap<String, i64>,
    /// A task will send what is left after [`SETTLE_WAIT`].
    flush_scheduled: bool,
}

/// The fleet's windows in Redis.
pub struct SharedWindows {
    client: redis::Client,
    prefix: String,
    connections: Mutex<HashMap<Lane, redis::aio::MultiplexedConnection>>,
    take: redis::Script,
    unsent: Mutex<Unsent>,
    reachable: AtomicBool,
    /// How long a take waits for Redis: [`WAIT`], longer in tests that are not about it (a
    /// loaded test machine can take more than 50 ms to connect).
    wait: Duration,
}

impl std::fmt::Debug for SharedWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedWindows")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

/// Microseconds one unit costs at `per_minute` (as [`laptime_core::limit::Window`] counts).
pub fn interval_us(per_minute: u64) -> i64 {
    (MINUTE_US / i64::try_from(per_minute.max(1)).unwrap_or(i64::MAX)).max(1)
}

impl SharedWindows {
    pub fn new(url: &str, key_prefix: &str) -> Result<SharedWindows, String> {
        let client = redis::Client::open(url).map_err(|e| format!("shared.redis_url: {e}"))?;
        Ok(SharedWindows {
            client,
            prefix: key_prefix.to_string(),
            connections: Mutex::new(HashMap::new()),
            take: redis::Script::new(TAKE),
            unsent: Mutex::new(Unsent::default()),
            reachable: AtomicBool::new(true),
            wait: WAIT,
        })
    }

    fn key(&self, limit: Limit, id: &str) -> String {
        format!("{}:limit:{}:{id}", self.prefix, limit.as_str())
    }

    /// The lane's connection, opened on first use (its task runs on the caller's runtime).
    async fn connection(&self, lane: Lane) -> Option<redis::aio::MultiplexedConnection> {
        let held = self
            .connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&lane)
            .cloned();
        if held.is_some() {
            return held;
        }
        // The callers wait on their own timeouts: no timer of the connection's per command.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let opened = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(lane, opened.clone());
        Some(opened)
    }

    fn forget_connection(&self, lane: Lane) {
        self.connections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&lane);
    }

    /// Logs a change between reachable and not, once per change.
    fn note(&self, now: bool, why: &str) {
        if self.reachable.swap(now, Ordering::Relaxed) == now {
            return;
        }
        if now {
            tracing::info!("shared limits: Redis reachable again; rate limits are fleet-wide");
        } else {
            tracing::warn!(
                error = why,
                "shared limits: Redis unreachable; rate limits are counted per instance until it is back"
            );
        }
    }

    /// The settlements not sent yet, taken to be sent now.
    fn take_unsent(&self, flushing: bool) -> Vec<(String, i64)> {
        let mut unsent = self.unsent.lock().unwrap_or_else(PoisonError::into_inner);
        if flushing {
            unsent.flush_scheduled = false;
        }
        unsent.moves.drain().filter(|(_, us)| *us != 0).collect()
    }

    /// The script call: the settlements first, then the charges.
    fn invocation(
        &self,
        charges: &[Charge],
        settle: &[(String, i64)],
    ) -> redis::ScriptInvocation<'_> {
        let mut inv = self.take.prepare_invoke();
        inv.arg(MINUTE_US).arg(charges.len());
        for c in charges {
            inv.key(self.key(c.limit, &c.id))
                .arg(c.units)
                .arg(interval_us(c.per_minute));
        }
        for (key, us) in settle {
            inv.key(key).arg(*us);
        }
        inv
    }

    /// Takes every charge or none (after applying the settlements waiting to be sent); `None`
    /// when Redis did not answer within [`WAIT`].
    pub async fn take(&self, charges: &[Charge]) -> Option<Taken> {
        if charges.is_empty() {
            return Some(Taken::All {
                owed_us: Vec::new(),
            });
        }
        let lane = lane();
        let settle = self.take_unsent(false);
        let inv = self.invocation(charges, &settle);
        let asked = async {
            let mut conn = self.connection(lane).await?;
            Some(inv.invoke_async::<Vec<i64>>(&mut conn).await)
        };
        match tokio::time::timeout(self.wait, asked).await {
            Ok(Some(Ok(v))) => {
                self.note(true, "");
                match v.as_slice() {
                    [0, owed @ ..] if owed.len() == charges.len() => Some(Taken::All {
                        owed_us: owed.to_vec(),
                    }),
                    [i, retry, owed] if *i > 0 => Some(Taken::Refused {
                        index: usize::try_from(*i - 1).unwrap_or(0),
                        retry_after_us: (*retry >= 0).then_some(*retry),
                        owed_us: *owed,
                    }),
                    _ => None,
                }
            }
            Ok(Some(Err(e))) => {
                self.note(false, &e.to_string());
                self.forget_connection(lane);
                None
            }
            Ok(None) => {
                self.note(false, "no connection");
                None
            }
            Err(_) => {
                self.note(false, "no answer within 50 ms");
                self.forget_connection(lane);
                None
            }
        }
    }

    /// Settles token estimates: moves each window by its units' difference. Not sent now: the
    /// next take carries it, or a task sends it after [`SETTLE_WAIT`] (outside a runtime only
    /// the next take). A failure to send only leaves the estimate charged.
    pub fn settle(self: &Arc<Self>, moves: &[(Limit, &str, i64, u64)]) {
        if moves.is_empty() {
            return;
        }
        let schedule = {
            let mut unsent = self.unsent.lock().unwrap_or_else(PoisonError::into_inner);
            for (limit, id, delta, per_minute) in moves {
                *unsent.moves.entry(self.key(*limit, id)).or_default() +=
                    delta.saturating_mul(interval_us(*per_minute));
            }
            let schedule = !unsent.flush_scheduled;
            unsent.flush_scheduled = true;
            schedule
        };
        if !schedule {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let windows = Arc::downgrade(self);
                rt.spawn(async move {
                    tokio::time::sleep(SETTLE_WAIT).await;
                    if let Some(windows) = windows.upgrade() {
                        windows.flush().await;
                    }
                });
            }
            Err(_) => {
                self.unsent
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .flush_scheduled = false;
            }
        }
    }

    /// Sends the settlements no take has carried.
    pub async fn flush(&self) {
        let settle = self.take_unsent(true);
        if settle.is_empty() {
            return;
        }
        let lane = lane();
        let inv = self.invocation(&[], &settle);
        let asked = async {
            let mut conn = self.connection(lane).await?;
            inv.invoke_async::<Vec<i64>>(&mut conn).await.ok()
        };
        if !matches!(
            tokio::time::timeout(SETTLE_TIMEOUT, asked).await,
            Ok(Some(_))
        ) {
            self.forget_connection(lane);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unreachable_redis_answers_nothing_so_the_instance_counts_alone() {
        // Port 1 on the loopback: nothing listens, the connection is refused at once.
        let w = SharedWindows::new("redis://127.0.0.1:1", "laptime-test").unwrap();
        let charge = Charge {
            limit: Limit::ALL[5],
            id: "key".into(),
            units: 1,
            per_minute: 1,
        };
        assert_eq!(w.take(&[charge]).await, None);
        assert!(!w.reachable.load(Ordering::Relaxed));
    }

    #[tokio::test]
    async fn a_take_says_what_each_window_owes_after_it() {
        let url = std::env::var("LAPTIME_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let prefix = format!(
            "laptime-test-owed-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        let w = patient(&url, &prefix);
        let charge = |limit, units, per_minute| Charge {
            limit,
            id: "key".into(),
            units,
            per_minute,
        };
        // Token rpm and tpm: one request of 60 a minute owes a second; 600 tokens of 6,000
        // a minute owe six. (The keys expire with what they owe.)
        let charges = [
            charge(Limit::ALL[5], 1, 60),
            charge(Limit::ALL[6], 600, 6_000),
        ];
        assert_eq!(
            w.take(&charges).await,
            Some(Taken::All {
                owed_us: vec![1_000_000, 6_000_000]
            })
        );
        let Some(Taken::All { owed_us }) = w.take(&charges).await else {
            panic!("a second take fits");
        };
        assert!(
            owed_us[0] > 1_000_000 && owed_us[0] <= 2_000_000,
            "{owed_us:?}"
        );
    }

    /// Windows that wait seconds, not [`WAIT`], for Redis: these tests are about what a take
    /// answers, not about how long it may take.
    fn patient(url: &str, prefix: &str) -> SharedWindows {
        SharedWindows {
            wait: Duration::from_secs(5),
            ..SharedWindows::new(url, prefix).unwrap()
        }
    }

    fn test_windows(name: &str) -> Arc<SharedWindows> {
        let url = std::env::var("LAPTIME_TEST_REDIS_URL")
            .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
        let prefix = format!(
            "laptime-test-{name}-{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        );
        Arc::new(patient(&url, &prefix))
    }

    fn tpm_charge(units: u64) -> Charge {
        // Token tpm of 6,000 a minute: a token owes 10 ms.
        Charge {
            limit: Limit::ALL[6],
            id: "key".into(),
            units,
            per_minute: 6_000,
        }
    }

    fn owed(taken: Option<Taken>) -> i64 {
        match taken {
            Some(Taken::All { owed_us }) => owed_us[0],
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_settlement_rides_with_the_next_take() {
        let w = test_windows("settle");
        // 600 tokens owe 6 s; the request used 100, so 500 (5 s) come back.
        assert_eq!(owed(w.take(&[tpm_charge(600)]).await), 6_000_000);
        w.settle(&[(Limit::ALL[6], "key", -500, 6_000)]);
        assert!(
            !w.unsent.lock().unwrap().moves.is_empty(),
            "not sent on its own"
        );
        // The next take of 100 tokens owes 1 s + 1 s (less the moments in between, down to its
        // own 1 s after a stall of a second or more), not 7 s.
        let after = owed(w.take(&[tpm_charge(100)]).await);
        assert!((1_000_000..=2_000_000).contains(&after), "{after}");
        assert!(w.unsent.lock().unwrap().moves.is_empty());
    }

    #[tokio::test]
    async fn a_settlement_no_take_carries_is_sent_on_its_own() {
        let w = test_windows("flush");
        assert_eq!(owed(w.take(&[tpm_charge(600)]).await), 6_000_000);
        w.settle(&[(Limit::ALL[6], "key", -500, 6_000)]);
        // What the task started by `settle` does after SETTLE_WAIT.
        w.flush().await;
        assert!(w.unsent.lock().unwrap().moves.is_empty());
        // A take of nothing reads the window: 1 s left (less the moments in between).
        let left = owed(w.take(&[tpm_charge(0)]).await);
        assert!(left > 0 && left <= 1_000_000, "{left}");
    }

    #[test]
    fn an_interval_is_a_minute_over_the_limit_and_never_zero() {
        assert_eq!(interval_us(60), 1_000_000);
        assert_eq!(interval_us(u64::MAX), 1);
        assert_eq!(interval_us(0), MINUTE_US);
    }
}
