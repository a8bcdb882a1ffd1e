//! Each instance's requests in flight, told to the fleet: every second a task of its own (never
//! the request path) publishes this instance's heartbeat (requests running, attempts in flight
//! per channel) and reads the others'. With `[shared] redis_url` a heartbeat is a Redis hash
//! that expires after [`STALE_AFTER_US`], listed in a sorted set by when it was written; without
//! it, a row of the store's `instances` table (so a PostgreSQL fleet without Redis still sees
//! itself). A heartbeat older than [`STALE_AFTER_US`] is an instance that is gone; a clean
//! shutdown removes its own at once.
//!
//! The API answers from what the task read last, with this instance's own counts as they are
//! now; a Redis or store that cannot be reached leaves the others as last seen until they go
//! stale (said once per change of state in the log).

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use laptime_core::fleet::{ChannelInFlight, Heartbeat, HEARTBEAT_INTERVAL_US, STALE_AFTER_US};

use crate::App;

/// The longest one Redis exchange may take before it counts as a failure.
const REDIS_WAIT: Duration = Duration::from_secs(1);

/// Instances listed longer ago than this are taken off the Redis list.
const FORGET_AFTER_US: i64 = 60_000_000;

/// This instance's name and the fleet as last read.
#[derive(Debug)]
pub struct Instances {
    name: String,
    others: Mutex<Vec<Heartbeat>>,
}

impl Instances {
    /// `name`: `[server] instance`; without one, this process's id.
    pub fn new(name: Option<&str>) -> Instances {
        Instances {
            name: name.map_or_else(|| format!("pid-{}", std::process::id()), str::to_string),
            others: Mutex::new(Vec::new()),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    fn set_others(&self, beats: Vec<Heartbeat>) {
        *self.others.lock().unwrap_or_else(PoisonError::into_inner) = beats;
    }

    /// Every live instance of the fleet, this one as it is now, by name.
    pub fn fleet(&self, app: &App) -> Vec<Heartbeat> {
        let own = own(app);
        let now = own.at_us;
        let others = self.others.lock().unwrap_or_else(PoisonError::into_inner);
        laptime_core::fleet::merge(own, &others, now)
    }
}

/// This instance's heartbeat now.
pub fn own(app: &App) -> Heartbeat {
    let live = app.live();
    let channels = live
        .router
        .channels()
        .iter()
        .map(|c| ChannelInFlight {
            channel: c.name.clone(),
            in_flight: c.inflight.load(std::sync::atomic::Ordering::Relaxed),
        })
        .collect();
    Heartbeat {
        instance: app.instances.name.clone(),
        in_flight: u32::try_from(app.inflight.running().requests).unwrap_or(u32::MAX),
        channels,
        at_us: crate::clock::now_unix_us(),
    }
}

/// Where heartbeats go: Redis (with the key prefix) or the store.
#[derive(Debug, Clone)]
pub enum Via {
    Redis {
        client: redis::Client,
        prefix: String,
    },
    Store,
}

impl Via {
    /// From `[shared]`: Redis when `redis_url` is set.
    pub fn of(shared: &crate::config::SharedConfig) -> Result<Via, String> {
        match &shared.redis_url {
            Some(url) => Ok(Via::Redis {
                client: redis::Client::open(url.as_str())
                    .map_err(|e| format!("shared.redis_url: {e}"))?,
                prefix: shared.key_prefix.clone(),
            }),
            None => Ok(Via::Store),
        }
    }
}

/// The heartbeat task, until the app is gone (or [`forget`] at shutdown aborts it).
pub async fn run(app: Weak<App>, via: Via) {
    let mut tick =
        tokio::time::interval(Duration::from_micros(HEARTBEAT_INTERVAL_US.unsigned_abs()));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn: Option<redis::aio::MultiplexedConnection> = None;
    let mut failing = false;
    loop {
        tick.tick().await;
        let Some(app) = app.upgrade() else { return };
        let beat = own(&app);
        let read = match &via {
            Via::Redis { client, prefix } => {
                let exchanged = tokio::time::timeout(
                    REDIS_WAIT,
                    through_redis(client, &mut conn, prefix, &beat),
                )
                .await
                .unwrap_or_else(|_| Err("no answer from Redis within 1 s".into()));
                if exchanged.is_err() {
                    conn = None;
                }
                exchanged
            }
            // Awaited, not timed out: a store call on the blocking pool cannot be cancelled,
            // and one at a time is all this task ever has outstanding.
            Via::Store => through_store(&app.store, &beat).await,
        };
        match read {
            Ok(others) => {
                app.instances.set_others(others);
                if failing {
                    failing = false;
                    tracing::info!("heartbeats: published and read again");
                }
            }
            Err(e) => {
                if !failing {
                    failing = true;
                    tracing::warn!(
                        error = %e,
                        "heartbeats: could not publish or read the fleet's; showing it as last seen"
                    );
                }
            }
        }
    }
}

async fn through_store(
    store: &laptime_store::Store,
    beat: &Heartbeat,
) -> Result<Vec<Heartbeat>, String> {
    store
        .put_heartbeat(beat.clone())
        .await
        .map_err(|e| e.to_string())?;
    store
        .heartbeats_since(beat.at_us - STALE_AFTER_US)
        .await
        .map_err(|e| e.to_string())
}

fn instance_key(prefix: &str, instance: &str) -> String {
    format!("{prefix}:instance:{instance}")
}

fn index_key(prefix: &str) -> String {
    format!("{prefix}:instances")
}

async fn through_redis(
    client: &redis::Client,
    conn: &mut Option<redis::aio::MultiplexedConnection>,
    prefix: &str,
    beat: &Heartbeat,
) -> Result<Vec<Heartbeat>, String> {
    if conn.is_none() {
        *conn = Some(
            client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?,
        );
    }
    let Some(c) = conn.as_mut() else {
        return Err("no connection".into());
    };
    let key = instance_key(prefix, &beat.instance);
    let index = index_key(prefix);
    let ttl_ms = STALE_AFTER_US / 1000;
    let (listed,): (Vec<String>,) = redis::pipe()
        .atomic()
        .hset_multiple(
            &key,
            &[
                ("in_flight", beat.in_flight.to_string()),
                ("channels", beat.channels_text()),
                ("at_us", beat.at_us.to_string()),
            ],
        )
        .ignore()
        .pexpire(&key, ttl_ms)
        .ignore()
        .zadd(&index, &beat.instance, beat.at_us)
        .ignore()
        .zrembyscore(&index, "-inf", beat.at_us - FORGET_AFTER_US)
        .ignore()
        .zrangebyscore(&index, beat.at_us - STALE_AFTER_US, "+inf")
        .query_async(c)
        .await
        .map_err(|e| e.to_string())?;
    let mut read = redis::pipe();
    for name in &listed {
        read.hgetall(instance_key(prefix, name));
    }
    let fields: Vec<std::collections::HashMap<String, String>> =
        read.query_async(c).await.map_err(|e| e.to_string())?;
    Ok(listed
        .into_iter()
        .zip(fields)
        .filter_map(|(instance, f)| {
            // An expired hash reads back empty: that instance is gone.
            Some(Heartbeat {
                instance,
                in_flight: f.get("in_flight")?.parse().ok()?,
                channels: Heartbeat::parse_channels(f.get("channels")?)?,
                at_us: f.get("at_us")?.parse().ok()?,
            })
        })
        .collect())
}

/// Removes this instance's heartbeat (a clean shutdown), within a second.
pub async fn forget(app: &Arc<App>, via: &Via) {
    let name = app.instances.name().to_string();
    let forgot = async {
        match via {
            Via::Redis { client, prefix } => {
                let mut c = client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| e.to_string())?;
                redis::pipe()
                    .del(instance_key(prefix, &name))
                    .ignore()
                    .zrem(index_key(prefix), &name)
                    .ignore()
                    .query_async::<()>(&mut c)
                    .await
                    .map_err(|e| e.to_string())
            }
            Via::Store => app
                .store
                .forget_heartbeat(&name)
                .await
                .map_err(|e| e.to_string()),
        }
    };
    match tokio::time::timeout(Duration::from_secs(1), forgot).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "heartbeats: could not remove this instance's"),
        Err(_) => tracing::warn!("heartbeats: removing this instance's took over 1 s"),
    }
}
