//! Requests- and tokens-per-minute windows shared by a fleet through Redis (`[shared]
//! redis_url`): the same GCRA as [`crate::limits`], run by one script over every window a
//! request is charged to, so that the check and the take are one step for all instances, timed
//! by Redis' own clock (instances' clocks may differ). Requests in flight stay counted per
//! instance: a place held in Redis would leak when an instance dies.
//!
//! Admission waits for Redis, bounded by [`WAIT`]: a Redis that does not answer in time, or at
//! all, leaves the instance on its own windows for that request (said once per change in the
//! log), so a Redis outage never refuses or stalls a request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use laptime_core::limit::{Limit, MINUTE_US};
use tokio::sync::Mutex;

/// The longest admission waits for Redis before using this instance's own windows.
pub const WAIT: Duration = Duration::from_millis(50);

/// Takes `ARGV[2i-1]` units at `ARGV[2i]` µs each from window `KEYS[i]`, for every `i`, or
/// none: returns `{0, owed_us of each window after the take}` when all admit, else
/// `{i, retry_after_us or -1, owed_us}` of the first that does not.
const TAKE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local minute = tonumber(ARGV[#ARGV])
local news = {}
for i, key in ipairs(KEYS) do
  local cost = tonumber(ARGV[2 * i - 1]) * tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key) or '0')
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
for i, key in ipairs(KEYS) do
  redis.call('SET', key, string.format('%d', news[i]), 'PX', math.floor((news[i] - now) / 1000) + 1000)
  owed[i + 1] = news[i] - now
end
return owed
";

/// Moves each window `KEYS[i]` by `ARGV[i]` µs (a settled estimate), never back past now.
const ADJUST: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i, key in ipairs(KEYS) do
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new = tat + tonumber(ARGV[i])
  if new > now then
    redis.call('SET', key, string.format('%d', new), 'PX', math.floor((new - now) / 1000) + 1000)
  else
    redis.call('DEL', key)
  end
end
return 0
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

/// The fleet's windows in Redis.
pub struct SharedWindows {
    client: redis::Client,
    prefix: String,
    conn: Mutex<Option<redis::aio::MultiplexedConnection>>,
    take: redis::Script,
    adjust: redis::Script,
    reachable: AtomicBool,
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
            conn: Mutex::new(None),
            take: redis::Script::new(TAKE),
            adjust: redis::Script::new(ADJUST),
            reachable: AtomicBool::new(true),
        })
    }

    fn key(&self, limit: Limit, id: &str) -> String {
        format!("{}:limit:{}:{id}", self.prefix, limit.as_str())
    }

    async fn connection(&self) -> Option<redis::aio::MultiplexedConnection> {
        let mut held = self.conn.lock().await;
        if held.is_none() {
            *held = self.client.get_multiplexed_async_connection().await.ok();
        }
        held.clone()
    }

    async fn forget_connection(&self) {
        *self.conn.lock().await = None;
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

    /// Takes every charge or none; `None` when Redis did not answer within [`WAIT`].
    pub async fn take(&self, charges: &[Charge]) -> Option<Taken> {
        if charges.is_empty() {
            return Some(Taken::All {
                owed_us: Vec::new(),
            });
        }
        let asked = async {
            let mut conn = self.connection().await?;
            let mut inv = self.take.prepare_invoke();
            for c in charges {
                inv.key(self.key(c.limit, &c.id))
                    .arg(c.units)
                    .arg(interval_us(c.per_minute));
            }
            inv.arg(MINUTE_US);
            Some(inv.invoke_async::<Vec<i64>>(&mut conn).await)
        };
        match tokio::time::timeout(WAIT, asked).await {
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
                self.forget_connection().await;
                None
            }
            Ok(None) => {
                self.note(false, "no connection");
                None
            }
            Err(_) => {
                self.note(false, "no answer within 50 ms");
                self.forget_connection().await;
                None
            }
        }
    }

    /// Settles token estimates: moves each window by its units' difference (off the request
    /// path; a failure only leaves the estimate charged).
    pub async fn adjust(&self, moves: &[(Limit, String, i64, u64)]) {
        let asked = async {
            let mut conn = self.connection().await?;
            let mut inv = self.adjust.prepare_invoke();
            for (limit, id, delta, per_minute) in moves {
                inv.key(self.key(*limit, id))
                    .arg(delta.saturating_mul(interval_us(*per_minute)));
            }
            inv.invoke_async::<i64>(&mut conn).await.ok()
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), asked).await;
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
        let w = SharedWindows::new(&url, &prefix).unwrap();
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

    #[test]
    fn an_interval_is_a_minute_over_the_limit_and_never_zero() {
        assert_eq!(interval_us(60), 1_000_000);
        assert_eq!(interval_us(u64::MAX), 1);
        assert_eq!(interval_us(0), MINUTE_US);
    }
}
