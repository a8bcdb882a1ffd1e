//! The configuration in force, and reloading it without a restart. Channels (with their
//! groups), routes, prices, thresholds and limits are one snapshot ([`Live`]) that a request
//! reads once at ingress and holds to its end, so a stream in flight finishes on the config it
//! started with while new requests take the new one. [`App::reload`] reads the file again,
//! builds the next snapshot and swaps it in whole, or refuses the file whole and keeps serving
//! the running one. The sections read once at start (`[server]`, `[store]`, `[shared]`,
//! `[telemetry]`: sockets, threads, the store, Redis, the exporter) keep their running values;
//! a reload that changes one names its keys as needing a restart.
//!
//! A channel that keeps its name keeps its runtime state ([`Channel::carry_over`]): in-flight
//! count, circuits and cool-downs (while its circuit settings are the same), its keys' turn and
//! cool-downs (while its keys are the same). A route's response cache is kept while its cache
//! settings are.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use laptime_core::cost::PriceTable;
use serde::Serialize;

use crate::cache::ResponseCache;
use crate::config::Config;
use crate::routing::{Channel, Router};
use crate::App;

/// The reloadable part of the configuration, built and ready to route.
#[derive(Debug)]
pub struct Live {
    /// The effective configuration: its reloadable sections as last loaded, the restart-only
    /// ones as at start.
    pub config: Config,
    pub router: Router,
    /// Response caches by route model (only routes with `cache` have one).
    pub caches: HashMap<String, Arc<ResponseCache>>,
    /// `[[prices]]`: what each finished request cost.
    pub prices: Arc<PriceTable>,
}

impl Live {
    /// Builds the channels, caches and prices of `config`; with `previous`, the channels and
    /// caches that stay take over its runtime state. Every problem is reported.
    pub fn build(
        config: Config,
        env: &dyn Fn(&str) -> Option<String>,
        previous: Option<&Live>,
    ) -> Result<Live, Vec<String>> {
        let mut errs = Vec::new();
        let egress = crate::egress::Egress::build(&config.channels, env)
            .map_err(|e| errs.extend(e.into_iter().map(|e| format!("egress: {e}"))))
            .ok();
        let prices = config
            .price_table()
            .map_err(|e| errs.extend(e.into_iter().map(|e| format!("prices: {e}"))))
            .ok();
        let mut channels = Vec::with_capacity(config.channels.len());
        for (i, c) in config.channels.iter().enumerate() {
            let Some(base) = c.base_url.clone() else {
                errs.push(format!(
                    "channel {:?} has no base_url (the embedded sim's is filled in by `laptime serve`)",
                    c.name
                ));
                continue;
            };
            let mut channel = Channel::from_config(c, base, env);
            channel.egress = egress.as_ref().and_then(|e| e.of_channel(i));
            let before = previous.and_then(|p| p.router.channel(&c.name));
            if let Some(before) = before {
                let fresh = channel.carry_over(before);
                if !fresh.is_empty() {
                    tracing::info!(channel = %c.name, "reload: {} of this channel start afresh (their settings changed)", fresh.join(" and "));
                }
            }
            channels.push(Arc::new(channel));
        }
        let (Some(prices), Some(egress), true) = (prices, egress, errs.is_empty()) else {
            return Err(errs);
        };
        tracing::debug!(ways_out = egress.len(), "egress profiles built");
        let caches = caches(&config, previous);
        Ok(Live {
            router: Router::new(channels),
            caches,
            prices: Arc::new(prices),
            config,
        })
    }
}

/// One response cache per route that asks for one; a route whose cache settings did not change
/// keeps its cache and what it holds.
fn caches(config: &Config, previous: Option<&Live>) -> HashMap<String, Arc<ResponseCache>> {
    config
        .routes
        .iter()
        .filter_map(|r| {
            let c = r.cache.as_ref()?;
            let kept = previous.and_then(|p| {
                let before = p.config.routes.iter().find(|b| b.model == r.model)?;
                (before.cache.as_ref() == Some(c)).then(|| p.caches.get(&r.model).cloned())?
            });
            let cache = match kept {
                Some(cache) => cache,
                None => Arc::new(new_cache(config, &r.model, c)),
            };
            Some((r.model.clone(), cache))
        })
        .collect()
}

/// A route's cache as configured: in Redis with `shared = true` (validation made sure
/// `[shared] redis_url` is set; a URL the client refuses leaves the route in memory, logged).
fn new_cache(config: &Config, route: &str, c: &crate::config::CacheConfig) -> ResponseCache {
    let ttl = std::time::Duration::from_secs(c.ttl_s);
    let bounds = crate::cache::Bounds {
        entries: c.max_entries,
        bytes: c.max_bytes,
        entry_bytes: c.max_entry_bytes,
    };
    let Some(url) = config.shared.redis_url.as_deref().filter(|_| c.shared) else {
        return ResponseCache::new(ttl, bounds);
    };
    let place = crate::shared_cache::Place {
        redis_url: url,
        key_prefix: &config.shared.key_prefix,
        route,
        lookup_wait: std::time::Duration::from_millis(config.shared.cache_lookup_ms),
    };
    ResponseCache::shared(ttl, bounds, &place).unwrap_or_else(|e| {
        tracing::warn!(error = %e, route, "the shared response cache is in memory instead");
        ResponseCache::new(ttl, bounds)
    })
}

/// Where a reload reads the configuration from: the binary's file, prepared as at start (the
/// environment's overrides, the command line's flags, the embedded sim's address).
pub trait ReloadSource: Send + Sync {
    /// The configuration as the file says now, validated.
    fn read(&self) -> Result<Config, Vec<String>>;
    /// The environment, for provider keys and proxies.
    fn env(&self, name: &str) -> Option<String>;
}

/// How a reload ended (the `result` label of `laptime_config_reloads_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadResult {
    /// The new configuration is in force for new requests.
    Applied,
    /// The file says what is in force already (its channels' CA and certificate files were
    /// read again all the same).
    Unchanged,
    /// The file was refused whole; the running configuration stays.
    Refused,
}

impl ReloadResult {
    pub const ALL: [ReloadResult; 3] = [
        ReloadResult::Applied,
        ReloadResult::Unchanged,
        ReloadResult::Refused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Unchanged => "unchanged",
            ReloadResult::Refused => "refused",
        }
    }
}

/// What a reload did: its result, what changed, what needs a restart, why it was refused.
#[derive(Debug, Clone, Serialize)]
pub struct Reloaded {
    pub result: ReloadResult,
    /// What the new configuration changed (sections, and channels by name).
    pub changed: Vec<String>,
    /// Restart-only keys whose value in the file differs from the running one (kept as running).
    pub needs_restart: Vec<String>,
    /// Why the file was refused (each problem with its key).
    pub errors: Vec<String>,
}

impl Reloaded {
    fn refused(errors: Vec<String>) -> Self {
        Reloaded {
            result: ReloadResult::Refused,
            changed: Vec::new(),
            needs_restart: Vec::new(),
            errors,
        }
    }
}

/// Problems on one log line (a TOML error quotes the lines around it).
fn one_line(problems: &[String]) -> String {
    problems
        .iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The sections read once at start, which a reload keeps as running.
const RESTART_ONLY: [&str; 5] = ["server", "store", "shared", "budgets", "telemetry"];

/// The restart-only keys (`section.key`) whose values differ between `running` and `new`. Only
/// names: values may hold credentials. A section that differs only in a password (printed
/// `***`, so equal in the printed form) is named as a whole.
pub fn needs_restart(running: &Config, new: &Config) -> Vec<String> {
    let differ = [
        running.server != new.server,
        running.store != new.store,
        running.shared != new.shared,
        running.budgets != new.budgets,
        running.telemetry != new.telemetry,
    ];
    let (Ok(toml::Value::Table(a)), Ok(toml::Value::Table(b))) =
        (toml::Value::try_from(running), toml::Value::try_from(new))
    else {
        return vec!["the configuration could not be compared".into()];
    };
    let mut keys = Vec::new();
    for (section, differs) in RESTART_ONLY.into_iter().zip(differ) {
        let empty = toml::Table::new();
        let table = |t: &toml::Table| match t.get(section) {
            Some(toml::Value::Table(s)) => s.clone(),
            _ => empty.clone(),
        };
        let (a, b) = (table(&a), table(&b));
        let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
        names.sort();
        names.dedup();
        let before = keys.len();
        keys.extend(
            names
                .into_iter()
                .filter(|k| a.get(*k) != b.get(*k))
                .map(|k| format!("{section}.{k}")),
        );
        if differs && keys.len() == before {
            keys.push(format!("{section} (a password)"));
        }
    }
    keys
}

/// What `new` changes of the reloadable sections of `running`, for the log and the answer.
pub fn changes(running: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    let names = |c: &Config| {
        c.channels
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>()
    };
    let (before, after) = (names(running), names(new));
    let added: Vec<_> = after
        .iter()
        .filter(|n| !before.contains(n))
        .cloned()
        .collect();
    let removed: Vec<_> = before
        .iter()
        .filter(|n| !after.contains(n))
        .cloned()
        .collect();
    let modified: Vec<_> = new
        .channels
        .iter()
        .filter(|c| running.channels.iter().any(|r| r.name == c.name && r != *c))
        .map(|c| c.name.clone())
        .collect();
    for (what, names) in [
        ("channels added", added),
        ("channels removed", removed),
        ("channels changed", modified),
    ] {
        if !names.is_empty() {
            out.push(format!("{what}: {}", names.join(", ")));
        }
    }
    if before != after && out.is_empty() {
        out.push("channels reordered".into());
    }
    let sections = [
        ("routes", running.routes != new.routes),
        ("prices", running.prices != new.prices),
        ("thresholds", running.thresholds != new.thresholds),
        ("limits", running.limits != new.limits),
    ];
    out.extend(
        sections
            .into_iter()
            .filter(|(_, differ)| *differ)
            .map(|(s, _)| s.to_string()),
    );
    out
}

impl App {
    /// The configuration in force now: read it once per request and keep it to the end.
    pub fn live(&self) -> Arc<Live> {
        self.live
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Where reloads read the configuration from (the binary sets it once at start).
    pub fn set_reload_source(&self, source: Box<dyn ReloadSource>) {
        let _ = self.reload_source.set(source);
    }

    /// Reads the configuration again and puts it in force for new requests, or refuses it
    /// whole. Reloads run one at a time; the result is logged and counted.
    pub async fn reload(self: &Arc<Self>) -> Reloaded {
        let _one_at_a_time = self.reloading.lock().await;
        let app = self.clone();
        let built = tokio::task::spawn_blocking(move || app.build_next()).await;
        let reloaded = match built {
            Ok(r) => r,
            Err(e) => Reloaded::refused(vec![format!("the reload did not finish: {e}")]),
        };
        self.metrics.config_reloaded(reloaded.result);
        match reloaded.result {
            ReloadResult::Applied => tracing::info!(
                changed = %reloaded.changed.join("; "),
                needs_restart = %reloaded.needs_restart.join(", "),
                "config reloaded: new requests use it, requests in flight finish on the one they started with"
            ),
            ReloadResult::Unchanged => tracing::info!(
                needs_restart = %reloaded.needs_restart.join(", "),
                "config reload: nothing changed that a reload applies"
            ),
            ReloadResult::Refused => tracing::error!(
                errors = %one_line(&reloaded.errors),
                "config reload refused; the running config stays (see `laptime check-config`)"
            ),
        }
        if !reloaded.needs_restart.is_empty() {
            tracing::warn!(
                keys = %reloaded.needs_restart.join(", "),
                "config reload: these settings apply only at start and keep their running values until a restart"
            );
        }
        reloaded
    }

    /// Reads the source and builds the next snapshot; swaps it in when it differs.
    fn build_next(&self) -> Reloaded {
        let Some(source) = self.reload_source.get() else {
            return Reloaded::refused(vec![
                "this gateway has no configuration file to reload".into()
            ]);
        };
        let mut new = match source.read() {
            Ok(c) => c,
            Err(errors) => return Reloaded::refused(errors),
        };
        let running = self.live();
        // Filled in at start when the file leaves it out; not a change.
        if new.server.instance.is_none() {
            new.server.instance = running.config.server.instance.clone();
        }
        let needs_restart = needs_restart(&running.config, &new);
        new.server = running.config.server.clone();
        new.store = running.config.store.clone();
        new.shared = running.config.shared.clone();
        new.telemetry = running.config.telemetry.clone();
        let changed = changes(&running.config, &new);
        // Built even when nothing changed: a rotated CA or client certificate file is read
        // again under the same path.
        let env = |name: &str| source.env(name);
        let next = match Live::build(new, &env, Some(&running)) {
            Ok(next) => next,
            Err(errors) => return Reloaded::refused(errors),
        };
        self.metrics.name_models(next.config.named_models());
        if let Some(fleet) = &self.fleet {
            fleet.adopt(next.router.channels());
        }
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        Reloaded {
            result: if changed.is_empty() {
                ReloadResult::Unchanged
            } else {
                ReloadResult::Applied
            },
            changed,
            needs_restart,
            errors: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml(text, "test").unwrap()
    }

    #[test]
    fn restart_only_keys_are_named_without_their_values() {
        let running = config(
            "[server]\nlisten = \"127.0.0.1:8080\"\n[store]\nurl = \"postgres://u:secret@127.0.0.1/a\"\n",
        );
        let new = config(
            "[server]\nlisten = \"127.0.0.1:9090\"\n[store]\nurl = \"postgres://u:other@127.0.0.1/a\"\n",
        );
        let keys = needs_restart(&running, &new);
        assert_eq!(keys, vec!["server.listen", "store (a password)"]);
        assert!(needs_restart(&running, &running).is_empty());
    }

    fn built(text: &str, previous: Option<&Live>) -> Live {
        let env = |name: &str| (name == "KEY_A").then(|| "secret-a".to_string());
        Live::build(config(text), &env, previous).unwrap()
    }

    const CHANNEL: &str = "[[channels]]\nname = \"a\"\nprovider = \"sim\"\nbase_url = \"http://127.0.0.1:9\"\nmodels = [\"m\"]\napi_key_env = \"KEY_A\"\n";

    #[test]
    fn a_channel_that_keeps_its_name_keeps_its_runtime_state() {
        let old = built(CHANNEL, None);
        let a = old.router.channel("a").unwrap();
        let (_in_flight, _) = old.router.channels()[0].enter();
        a.health.of("m").cool_down_until(i64::MAX);
        a.keys.cool_down(0, i64::MAX);

        let new = built(&format!("{CHANNEL}weight = 7\n"), Some(&old));
        let b = new.router.channel("a").unwrap();
        assert_eq!(b.weight, 7, "the new settings apply");
        assert_eq!(b.inflight.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert!(b.health.of("m").cooling_down(0));
        assert!(!b.keys.another_ready(1, 0), "key 0 is still cooling down");

        // New circuit settings, or new keys, start those afresh; the in-flight count stays.
        let text = format!("{CHANNEL}circuit = {{ consecutive_failures = 9 }}\n");
        let c = built(&text, Some(&new));
        let c = c.router.channel("a").unwrap();
        assert!(!c.health.of("m").cooling_down(0));
        assert!(!c.keys.another_ready(1, 0));
        assert_eq!(c.inflight.load(std::sync::atomic::Ordering::Relaxed), 1);
        let other_key = CHANNEL.replace("api_key_env = \"KEY_A\"\n", "");
        let d = built(&other_key, Some(&new));
        assert!(d.router.channel("a").unwrap().keys.is_empty());
    }

    #[test]
    fn changes_name_channels_and_sections() {
        let running = config(
            "[[channels]]\nname = \"a\"\nprovider = \"sim\"\n\n[[channels]]\nname = \"b\"\nprovider = \"sim\"\n",
        );
        let new = config(
            "[[channels]]\nname = \"a\"\nprovider = \"sim\"\nweight = 5\n\n[[channels]]\nname = \"c\"\nprovider = \"sim\"\n\n[[routes]]\nmodel = \"m\"\n",
        );
        assert_eq!(
            changes(&running, &new),
            vec![
                "channels added: c",
                "channels removed: b",
                "channels changed: a",
                "routes"
            ]
        );
        assert!(changes(&running, &running).is_empty());
    }
}
