//! Fleet-wide channel health through Redis (`[shared] redis_url`): a circuit one instance
//! opens, and a `Retry-After` cool-down one instance is told, apply on every instance, so a
//! failing model is not probed by each member of the fleet in turn.
//!
//! The request path never waits on Redis: a change is handed to this module's task over a
//! bounded queue (dropped and counted when full), and what other instances published is read
//! by the same task every [`POLL`] and folded into each model's health as plain atomics. One
//! Redis hash holds the fleet's state, one field per (kind, channel, model) with the unix
//! microsecond it lasts until; the newest deadline wins, and fields long past are removed by
//! whoever reads them. Half-open probing stays each instance's own: when a shared open ends,
//! each instance's own circuit decides again.
//!
//! Hedging's recent p95 is shared the same way: every [`SAMPLES_EVERY`] the task publishes this
//! instance's recent times to first output per (channel, model) (its last 200, only when a new
//! one came, and all of them every [`REPUBLISH_EVERY`] so that live ones are never forgotten)
//! into a second hash, one field per (channel, model, instance), and reads the other instances'
//! into each model's health, so an instance that just started hedges with the fleet's p95.
//! Fields not written for [`SAMPLES_FORGET_AFTER_US`] are removed (an instance that is gone).
//!
//! Without `redis_url` all of this is per instance, as documented in the README. A Redis that
//! cannot be reached leaves every instance on its own state (and says so in the log once per
//! change of state), never failing a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use tokio::sync::mpsc;

use crate::routing::Channel;

/// How often the fleet's published health is read.
pub const POLL: Duration = Duration::from_millis(250);

/// How often this instance's recent times to first output are published and the fleet's read.
pub const SAMPLES_EVERY: Duration = Duration::from_secs(1);

/// Every this many sample rounds, every model's samples are published even when unchanged.
const REPUBLISH_EVERY: u32 = 30;

/// Samples whose field was not written for this long are an instance that is gone.
pub const SAMPLES_FORGET_AFTER_US: i64 = 300_000_000;

/// Changes queued for Redis at most; beyond it they are dropped (and counted).
const QUEUE: usize = 1024;

/// The longest a connection or a command may take; a Redis that does not answer in time is
/// treated as unreachable (and asked again on the next change or poll).
const WAIT: Duration = Duration::from_secs(1);

/// A published deadline older than this is removed from the hash.
const FORGET_AFTER_US: i64 = 60_000_000;

/// What a published field says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The circuit is open until the deadline.
    Open,
    /// The upstream asked to be left alone until the deadline.
    CoolDown,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Open => "open",
            Kind::CoolDown => "cooldown",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        [Kind::Open, Kind::CoolDown]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// One change of one model's health on one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    pub channel: String,
    pub model: String,
    pub until_us: i64,
}

/// The field a change is published under: kind, channel and model, separated by a unit
/// separator (which no channel or model name holds).
fn field(kind: Kind, channel: &str, model: &str) -> String {
    format!("{}\u{1f}{channel}\u{1f}{model}", kind.as_str())
}

fn parse_field(f: &str) -> Option<(Kind, &str, &str)> {
    let mut parts = f.splitn(3, '\u{1f}');
    let kind = Kind::parse(parts.next()?)?;
    Some((kind, parts.next()?, parts.next()?))
}

/// Where a model's health hands its changes: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Publisher {
    tx: mpsc::Sender<Change>,
    dropped: Arc<AtomicU64>,
}

impl Publisher {
    pub fn publish(&self, change: Change) {
        if self.tx.try_send(change).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Changes dropped because the queue to Redis was full.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The channels sharing their health, and where they publish: a reload hands it the new ones.
#[derive(Debug)]
pub struct Fleet {
    publisher: Publisher,
    channels: tokio::sync::watch::Sender<Vec<Arc<Channel>>>,
}

impl Fleet {
    /// From now on `channels` publish their changes and get the fleet's (the ones a reload
    /// kept publish already).
    pub fn adopt(&self, channels: &[Arc<Channel>]) {
        for c in channels {
            c.health.share(self.publisher.clone());
        }
        self.channels.send_replace(channels.to_vec());
    }
}

/// Starts sharing: every channel's models publish through the returned fleet's publisher, and a
/// task applies what the fleet published. The task ends when the fleet is dropped.
pub fn start(
    url: &str,
    key_prefix: &str,
    instance: &str,
    channels: &[Arc<Channel>],
) -> Result<(Fleet, tokio::task::JoinHandle<()>), String> {
    let client = redis::Client::open(url).map_err(|e| format!("shared.redis_url: {e}"))?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let fleet = Fleet {
        publisher: Publisher {
            tx,
            dropped: Arc::new(AtomicU64::new(0)),
        },
        channels: tokio::sync::watch::Sender::new(Vec::new()),
    };
    fleet.adopt(channels);
    let keys = Keys {
        health: format!("{key_prefix}:health"),
        samples: format!("{key_prefix}:first_output"),
        instance: instance.to_string(),
    };
    let task = tokio::spawn(run(client, keys, fleet.channels.subscribe(), rx));
    Ok((fleet, task))
}

/// Where the task writes: the health hash, the samples hash, and this instance's name.
struct Keys {
    health: String,
    samples: String,
    instance: String,
}

async fn run(
    client: redis::Client,
    keys: Keys,
    channels: tokio::sync::watch::Receiver<Vec<Arc<Channel>>>,
    mut rx: mpsc::Receiver<Change>,
) {
    let mut conn: Option<redis::aio::MultiplexedConnection> = None;
    let mut reachable = true;
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples_tick = tokio::time::interval(SAMPLES_EVERY);
    samples_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rounds: u32 = 0;
    loop {
        let step = tokio::select! {
            change = rx.recv() => match change {
                Some(c) => Step::Publish(c),
                None => return,
            },
            _ = tick.tick() => Step::Poll,
            _ = samples_tick.tick() => {
                rounds = rounds.wrapping_add(1);
                Step::Samples { all: rounds % REPUBLISH_EVERY == 1 }
            }
        };
        if conn.is_none() {
            let connecting = client.get_multiplexed_async_connection();
            conn = tokio::time::timeout(WAIT, connecting)
                .await
                .ok()
                .and_then(Result::ok);
        }
        let Some(c) = conn.as_mut() else {
            note(&mut reachable, false, "no connection");
            continue;
        };
        let done = match step {
            Step::Publish(change) => {
                tokio::time::timeout(WAIT, publish(c, &keys.health, &change)).await
            }
            Step::Poll => {
                let channels = channels.borrow().clone();
                tokio::time::timeout(WAIT, poll(c, &keys.health, &channels)).await
            }
            Step::Samples { all } => {
                let channels = channels.borrow().clone();
                tokio::time::timeout(WAIT, share_samples(c, &keys, &channels, all)).await
            }
        };
        match done {
            Ok(Ok(())) => note(&mut reachable, true, ""),
            Ok(Err(e)) => {
                note(&mut reachable, false, &e.to_string());
                conn = None;
            }
            Err(_) => {
                note(&mut reachable, false, "no answer within 1 s");
                conn = None;
            }
        }
    }
}

enum Step {
    Publish(Change),
    Poll,
    /// Publish this instance's recent times to first output (every model's when `all`) and
    /// read the fleet's.
    Samples {
        all: bool,
    },
}

/// Logs a change between reachable and not, once per change.
fn note(reachable: &mut bool, now: bool, why: &str) {
    if *reachable == now {
        return;
    }
    *reachable = now;
    if now {
        tracing::info!("shared health: Redis reachable again; channel health is fleet-wide");
    } else {
        tracing::warn!(
            error = why,
            "shared health: Redis unreachable; channel health is per instance until it is back"
        );
    }
}

/// Publishes a change unless a later deadline is published already (a script, so that the
/// comparison and the write are one step for every instance).
async fn publish(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    change: &Change,
) -> redis::RedisResult<()> {
    let script = redis::Script::new(
        "local have = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
         if tonumber(ARGV[2]) > have then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
         return 0",
    );
    let _: i64 = script
        .key(key)
        .arg(field(change.kind, &change.channel, &change.model))
        .arg(change.until_us)
        .invoke_async(c)
        .await?;
    Ok(())
}

/// Reads every published deadline and applies the live ones.
async fn poll(
    c: &mut redis::aio::MultiplexedConnection,
    key: &str,
    channels: &[Arc<Channel>],
) -> redis::RedisResult<()> {
    let all: Vec<(String, i64)> = c.hgetall(key).await?;
    let now = crate::clock::now_unix_us();
    let mut stale = Vec::new();
    for (f, until_us) in all {
        let Some((kind, channel, model)) = parse_field(&f) else {
            continue;
        };
        if until_us < now - FORGET_AFTER_US {
            stale.push(f.clone());
            continue;
        }
        if until_us <= now {
            continue;
        }
        if let Some(ch) = channels.iter().find(|ch| ch.name == channel) {
            let health = ch.health.of(model);
            match kind {
                Kind::Open => health.shared_open_until(until_us),
                Kind::CoolDown => health.shared_cool_down_until(until_us),
            }
        }
    }
    if !stale.is_empty() {
        let _: i64 = c.hdel(key, stale).await?;
    }
    Ok(())
}

/// The field one instance's samples of one (channel, model) are published under.
fn samples_field(channel: &str, model: &str, instance: &str) -> String {
    format!("{channel}\u{1f}{model}\u{1f}{instance}")
}

fn parse_samples_field(f: &str) -> Option<(&str, &str, &str)> {
    let mut parts = f.splitn(3, '\u{1f}');
    Some((parts.next()?, parts.next()?, parts.next()?))
}

/// `at_us` then the samples in microseconds, space-separated.
fn encode_samples(at_us: i64, samples: &[u64]) -> String {
    let mut s = at_us.to_string();
    for v in samples {
        s.push(' ');
        s.push_str(&v.to_string());
    }
    s
}

fn decode_samples(s: &str) -> Option<(i64, Vec<u64>)> {
    let mut parts = s.split(' ');
    let at_us = parts.next()?.parse().ok()?;
    let samples = parts.map(str::parse).collect::<Result<_, _>>().ok()?;
    Some((at_us, samples))
}

/// Publishes this instance's samples and hands every model the other instances'.
async fn share_samples(
    c: &mut redis::aio::MultiplexedConnection,
    keys: &Keys,
    channels: &[Arc<Channel>],
    all: bool,
) -> redis::RedisResult<()> {
    let now = crate::clock::now_unix_us();
    let mine: Vec<(String, String)> = channels
        .iter()
        .flat_map(|ch| {
            ch.health.models().into_iter().filter_map(|m| {
                let samples = m.first_output_to_share(all)?;
                Some((
                    samples_field(&ch.name, m.model(), &keys.instance),
                    encode_samples(now, &samples),
                ))
            })
        })
        .collect();
    if !mine.is_empty() {
        let () = c.hset_multiple(&keys.samples, &mine).await?;
    }
    let published: Vec<(String, String)> = c.hgetall(&keys.samples).await?;
    let mut fleet: std::collections::HashMap<(&str, &str), Vec<u64>> =
        std::collections::HashMap::new();
    let mut stale = Vec::new();
    for (f, v) in &published {
        let (Some((channel, model, instance)), Some((at_us, samples))) =
            (parse_samples_field(f), decode_samples(v))
        else {
            continue;
        };
        if at_us < now - SAMPLES_FORGET_AFTER_US {
            stale.push(f.clone());
        } else if instance != keys.instance {
            fleet.entry((channel, model)).or_default().extend(samples);
        }
    }
    for ch in channels {
        // Every model another instance reports, and every one this instance knows (whose
        // fleet samples may have gone with their instance).
        let mut models: Vec<String> = ch
            .health
            .models()
            .iter()
            .map(|m| m.model().to_string())
            .collect();
        models.extend(
            fleet
                .keys()
                .filter(|(c, _)| *c == ch.name)
                .map(|(_, m)| (*m).to_string()),
        );
        models.sort_unstable();
        models.dedup();
        for model in models {
            let samples = fleet
                .get(&(ch.name.as_str(), model.as_str()))
                .cloned()
                .unwrap_or_default();
            ch.health.of(&model).set_fleet_first_output(samples);
        }
    }
    if !stale.is_empty() {
        let _: i64 = c.hdel(&keys.samples, stale).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_as_what_they_were_made_of() {
        let f = field(Kind::CoolDown, "openai-east", "gpt-4.1:mini");
        assert_eq!(
            parse_field(&f),
            Some((Kind::CoolDown, "openai-east", "gpt-4.1:mini"))
        );
        assert_eq!(parse_field("half_open\u{1f}a\u{1f}b"), None);
        assert_eq!(parse_field("open\u{1f}a"), None);
        let f = samples_field("openai-east", "gpt-4.1:mini", "web-3:8080");
        assert_eq!(
            parse_samples_field(&f),
            Some(("openai-east", "gpt-4.1:mini", "web-3:8080"))
        );
        assert_eq!(
            decode_samples(&encode_samples(17, &[3, 1, 2])),
            Some((17, vec![3, 1, 2]))
        );
        assert_eq!(decode_samples("17 x"), None);
    }
}
