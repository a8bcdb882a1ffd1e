//! Routing: model + dialect → the ordered candidates that may serve it (channel and the model
//! name to send upstream). Channels that name the model come before `*` channels; within those,
//! lower priority tiers first, and a weighted random order within a tier. A channel that names
//! the model serves it in any client dialect: in the client's own when the channel speaks it,
//! else translated to the channel's dialect. A `*` channel serves only the dialects it speaks (a
//! catch-all never pulls in another provider's models by translation). A (channel, model)
//! cooling down after a `Retry-After` or ejected by its circuit goes last. Upstream URLs come
//! from configuration only.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use laptime_core::circuit::CircuitState;
use laptime_core::Dialect;

use crate::config::{ChannelConfig, Provider};
use crate::model_health::{ChannelHealth, ModelHealth};

/// A configured channel, ready to call.
pub struct Channel {
    pub name: String,
    pub provider: Provider,
    /// The SDK base URL, without a trailing slash.
    pub base_url: String,
    /// The provider keys, read from the environment at start or reload (one for `api_key_env`,
    /// several for `api_key_envs`, none for a keyless compatible server). Never logged or
    /// stored. Shared with the channel of the same name a reload replaced while the keys are
    /// the same, so their turn and cool-downs go on.
    pub keys: Arc<Keys>,
    /// Headers sent with every call (`headers` and `header_envs`; values from the environment
    /// are marked sensitive).
    pub extra_headers: http::HeaderMap,
    /// Azure OpenAI's `api-version`: deployment URLs when set, the `/openai/v1/` API when not.
    pub api_version: Option<String>,
    /// Takes the group's calls that name no model.
    pub objects: bool,
    pub group: String,
    pub models: Vec<(String, String)>,
    /// The one dialect this channel is called in, when configured; else see
    /// [`Channel::upstream_dialect`].
    pub dialect: Option<Dialect>,
    /// Continues an assistant prefill (see `ChannelConfig::prefill`).
    pub prefill: bool,
    /// Reports usage in Chat streams when asked (see `ChannelConfig::usage_in_stream`).
    pub usage_in_stream: bool,
    /// Requests in flight on this channel (shared with the channel of the same name a reload
    /// replaced: its streams in flight still count).
    pub inflight: Arc<AtomicU32>,
    pub priority: u32,
    pub weight: u32,
    /// Cool-down and circuit breaker of each model on this channel (kept by a reload while the
    /// channel's circuit settings are the same).
    pub health: Arc<ChannelHealth>,
    /// Recent times to first event from dispatch, microseconds (for adaptive hedging).
    recent_first_event: Arc<Mutex<std::collections::VecDeque<u64>>>,
    /// Its way out (proxy, trust, client certificate); `None`: the gateway's default.
    pub egress: Option<Arc<crate::egress::Profile>>,
    /// The `Host` of a plain `http://` base URL, made once from the base URL the channel was
    /// made with: hyper-util's client formats it from each HTTP/1 request's URI (0.67 % of the
    /// serving threads' samples under wrk fast streams, benchmarks/README.md item 21). See
    /// [`Channel::http1_host`].
    host: Option<http::HeaderValue>,
}

/// Samples kept for a channel's recent p95 time to first event.
const FIRST_EVENT_SAMPLES: usize = 200;

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

/// The `Host` value of a plain `http://` base URL (made once: see [`crate::pool::host_value`]).
fn plain_http_host(base_url: &str) -> Option<http::HeaderValue> {
    let uri: http::Uri = base_url.parse().ok()?;
    if uri.scheme() != Some(&http::uri::Scheme::HTTP) {
        return None;
    }
    crate::pool::host_value(&uri)
}

/// A secret value whose Debug and Display never show it.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Self {
        Secret(s)
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl Channel {
    pub fn from_config(
        c: &ChannelConfig,
        base_url: String,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let key_vars = c.api_key_env.iter().chain(&c.api_key_envs);
        let keys = key_vars
            .filter_map(|var| env(var))
            .map(Secret::new)
            .collect();
        Channel {
            name: c.name.clone(),
            provider: c.provider,
            base_url: base_url.trim_end_matches('/').to_string(),
            keys: Arc::new(Keys::new(keys)),
            extra_headers: extra_headers(c, env),
            api_version: c.api_version.clone(),
            objects: c.objects,
            group: c.group.clone(),
            models: c.models.pairs(),
            dialect: c.dialect,
            prefill: c.prefill.unwrap_or(match c.provider {
                Provider::Anthropic | Provider::Sim => true,
                Provider::Openai
                | Provider::AzureOpenai
                | Provider::OpenaiCompatible
                | Provider::Gemini => false,
            }),
            usage_in_stream: c.usage_in_stream,
            inflight: Arc::new(AtomicU32::new(0)),
            priority: c.priority,
            weight: c.weight.max(1),
            health: Arc::new(ChannelHealth::new(
                &c.name,
                c.circuit,
                c.models.pairs().len(),
            )),
            recent_first_event: Arc::default(),
            egress: None,
            host: plain_http_host(&base_url),
        }
    }

    /// The `Host` header for a request to this channel when its connections are known to
    /// speak HTTP/1 (plain `http://`, not h2c), else `None`: over TLS, ALPN picks the version
    /// per connection, and over HTTP/2 the authority travels as `:authority`.
    pub fn http1_host(&self) -> Option<&http::HeaderValue> {
        let h2c = self
            .egress
            .as_deref()
            .is_some_and(|p| p.http == crate::config::UpstreamHttp::Http2);
        self.host.as_ref().filter(|_| !h2c)
    }

    /// Takes over the runtime state of `previous`, the channel of the same name a reload
    /// replaces: its in-flight count and recent times always, its circuits and cool-downs
    /// while the circuit settings are the same, its keys' turn and cool-downs while the keys
    /// are. Returns what was started afresh, for the reload's log line.
    pub fn carry_over(&mut self, previous: &Channel) -> Vec<&'static str> {
        let mut fresh = Vec::new();
        self.inflight = previous.inflight.clone();
        self.recent_first_event = previous.recent_first_event.clone();
        if self.health.config() == previous.health.config() {
            self.health = previous.health.clone();
        } else {
            fresh.push("circuits and cool-downs");
        }
        if self.keys.same_secrets(&previous.keys) {
            self.keys = previous.keys.clone();
        } else {
            fresh.push("key rotation");
        }
        fresh
    }

    /// Top-level client fields carried to this channel untranslated: the simulator's script,
    /// which a real provider would refuse.
    pub fn pass_through(&self) -> &'static [&'static str] {
        match self.provider {
            Provider::Sim => &["laptime_sim"],
            Provider::Openai
            | Provider::AzureOpenai
            | Provider::OpenaiCompatible
            | Provider::Anthropic
            | Provider::Gemini => &[],
        }
    }

    /// The upstream URL of a model call (see [`Channel::endpoint_url`]).
    pub fn url(&self, dialect: Dialect, model: &str, stream: bool) -> String {
        match dialect {
            Dialect::Gemini => self.endpoint_url(&dialect.target(model, stream), model),
            _ => self.endpoint_url(dialect.path(), model),
        }
    }

    /// The upstream URL of the call a client made to `target` (a gateway path under `/v1/` or
    /// `/v1beta/`, with its query) for upstream `model`. OpenAI paths hang off the SDK base URL
    /// (which includes `/v1`); Anthropic's and Gemini's off the bare host; a sim's base URL is
    /// its bare host for every path. Azure OpenAI puts the deployment (the upstream model) in
    /// the path of the calls that run a model and adds `api-version`, or without one calls its
    /// `/openai/v1/` API. Only configuration chooses the host: `target` is a path the router
    /// matched, and ids in it were checked ([`laptime_core::endpoint::object_id_ok`]).
    pub fn endpoint_url(&self, target: &str, model: &str) -> String {
        let base = &self.base_url;
        let openai_rest = target.strip_prefix("/v1");
        match (self.provider, openai_rest) {
            (Provider::Openai | Provider::OpenaiCompatible, Some(rest))
                if !target.starts_with("/v1/messages") && !is_gemini_path(target) =>
            {
                format!("{base}{rest}")
            }
            (Provider::AzureOpenai, Some(rest)) => {
                azure_url(base, rest, model, self.api_version.as_deref())
            }
            _ => format!("{base}{target}"),
        }
    }

    /// Whether this channel serves calls of `dialect`'s endpoints other than the model calls
    /// (embeddings, files, …): never through translation.
    pub fn serves_endpoints_of(&self, dialect: Dialect) -> bool {
        match (self.provider, dialect) {
            (Provider::Sim, _) => true,
            (Provider::Openai | Provider::AzureOpenai | Provider::OpenaiCompatible, d) => {
                matches!(d, Dialect::Chat | Dialect::Responses)
            }
            (Provider::Anthropic, d) => d == Dialect::Messages,
            (Provider::Gemini, d) => d == Dialect::Gemini,
        }
    }

    /// Whether a client of `client` dialect reaches this channel without translation.
    pub fn speaks(&self, client: Dialect) -> bool {
        match self.dialect {
            Some(d) => d == client,
            None => self.provider.serves(client),
        }
    }

    /// The dialect a request from a `client` dialect is sent in: the client's own when the
    /// channel speaks it, else the channel's configured or its provider's native dialect.
    pub fn upstream_dialect(&self, client: Dialect) -> Dialect {
        if self.speaks(client) {
            return client;
        }
        self.dialect.or(self.provider.native()).unwrap_or(client)
    }

    /// The worst circuit state over the channel's models (for `/metrics` and the API).
    pub fn circuit_state(&self) -> CircuitState {
        self.health.worst_state()
    }

    /// Remembers a time to first event (from dispatch) of this channel.
    pub fn note_first_event(&self, d: std::time::Duration) {
        if let Ok(mut q) = self.recent_first_event.lock() {
            if q.len() == FIRST_EVENT_SAMPLES {
                q.pop_front();
            }
            q.push_back(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        }
    }

    /// The nearest-rank p95 of the recent times to first event; `None` below 20 samples.
    pub fn first_event_p95(&self) -> Option<std::time::Duration> {
        let mut v: Vec<u64> = self
            .recent_first_event
            .lock()
            .ok()?
            .iter()
            .copied()
            .collect();
        if v.len() < 20 {
            return None;
        }
        v.sort_unstable();
        let rank = (v.len() * 95).div_ceil(100).max(1);
        Some(std::time::Duration::from_micros(v[rank - 1]))
    }

    /// Marks a request in flight until the guard drops; returns the count including it.
    pub fn enter(self: &Arc<Self>) -> (InflightGuard, u32) {
        let n = self.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        (InflightGuard(self.clone()), n)
    }
}

/// A Gemini call's path (`/v1beta/models/…`, or `/v1/models/{model}:{method}`).
fn is_gemini_path(target: &str) -> bool {
    target.starts_with("/v1beta/") || (target.starts_with("/v1/models/") && target.contains(':'))
}

/// Azure OpenAI's URL of the OpenAI call `rest` (the path after `/v1`, with its query).
fn azure_url(base: &str, rest: &str, deployment: &str, api_version: Option<&str>) -> String {
    let Some(version) = api_version else {
        return format!("{base}/openai/v1{rest}");
    };
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    // The calls that run a model name its deployment in the path; objects (files, batches,
    // stored responses) belong to the resource.
    let per_deployment = [
        "/chat/completions",
        "/completions",
        "/embeddings",
        "/images/generations",
        "/images/edits",
        "/audio/speech",
        "/audio/transcriptions",
        "/audio/translations",
    ]
    .contains(&path);
    let mut url = if per_deployment {
        format!("{base}/openai/deployments/{deployment}{path}?api-version={version}")
    } else {
        format!("{base}/openai{path}?api-version={version}")
    };
    if !query.is_empty() {
        url.push('&');
        url.push_str(query);
    }
    url
}

/// The channel's `headers` and `header_envs`, as sent; a value from the environment is
/// sensitive (kept out of debug output). Invalid ones were refused by validation.
fn extra_headers(c: &ChannelConfig, env: &dyn Fn(&str) -> Option<String>) -> http::HeaderMap {
    let mut out = http::HeaderMap::new();
    let literal = c.headers.iter().map(|(n, v)| (n, Some(v.clone()), false));
    let from_env = c.header_envs.iter().map(|(n, var)| (n, env(var), true));
    for (name, value, secret) in literal.chain(from_env) {
        let name = http::HeaderName::from_bytes(name.as_bytes());
        let value = value.and_then(|v| http::HeaderValue::from_str(&v).ok());
        if let (Ok(name), Some(mut value)) = (name, value) {
            value.set_sensitive(secret);
            out.insert(name, value);
        }
    }
    out
}

/// A channel's keys, each with its own cool-down: requests go round the keys that are not
/// cooling down.
#[derive(Debug, Default)]
pub struct Keys {
    keys: Vec<(Secret, std::sync::atomic::AtomicI64)>,
    next: std::sync::atomic::AtomicUsize,
}

/// How long a key refused by the provider (401, 403) is left out: a revoked or wrong key stays
/// wrong until an operator acts, so it is tried again only now and then.
pub const REFUSED_KEY_COOL_DOWN_US: i64 = 300_000_000;
/// How long a rate-limited key is left out when the 429 gives no `Retry-After`.
pub const LIMITED_KEY_COOL_DOWN_US: i64 = 30_000_000;

impl Keys {
    pub fn new(keys: Vec<Secret>) -> Self {
        Keys {
            keys: keys
                .into_iter()
                .map(|k| (k, std::sync::atomic::AtomicI64::new(0)))
                .collect(),
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether `other` holds the same keys in the same order (a reload keeps the turn and
    /// cool-downs of keys that did not change).
    pub fn same_secrets(&self, other: &Keys) -> bool {
        self.keys.len() == other.keys.len()
            && self
                .keys
                .iter()
                .zip(&other.keys)
                .all(|((a, _), (b, _))| a.expose() == b.expose())
    }

    /// The key at `index`.
    pub fn get(&self, index: usize) -> Option<&Secret> {
        self.keys.get(index).map(|(k, _)| k)
    }

    /// The next key in turn that is not cooling down at `now_us`; when all are, the one whose
    /// cool-down ends first. `None` for a channel without keys.
    pub fn pick(&self, now_us: i64) -> Option<usize> {
        let n = self.keys.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let ready = (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.keys[i].1.load(Ordering::Relaxed) <= now_us);
        ready.or_else(|| (0..n).min_by_key(|&i| self.keys[i].1.load(Ordering::Relaxed)))
    }

    /// Leaves key `index` out until `until_us`.
    pub fn cool_down(&self, index: usize, until_us: i64) {
        if let Some((_, until)) = self.keys.get(index) {
            until.fetch_max(until_us, Ordering::Relaxed);
        }
    }

    /// Whether a key other than `index` is not cooling down at `now_us`.
    pub fn another_ready(&self, index: usize, now_us: i64) -> bool {
        self.keys
            .iter()
            .enumerate()
            .any(|(i, (_, until))| i != index && until.load(Ordering::Relaxed) <= now_us)
    }
}

#[derive(Debug)]
pub struct InflightGuard(Arc<Channel>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.inflight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The chosen route.
#[derive(Debug, Clone)]
pub struct Route {
    pub channel: Arc<Channel>,
    pub upstream_model: String,
    /// The dialect the channel is called in; it differs from the client's when the request is
    /// translated.
    pub upstream: Dialect,
    /// The cool-down and circuit of this model on this channel.
    pub health: Arc<ModelHealth>,
    /// A candidate of the route's `context_fallback` model: asked only after a channel
    /// answered that the input is over its model's context window.
    pub context_fallback: bool,
    /// The channel key this route must use (an object lives under the key that created it);
    /// `None`: the next key in turn at dispatch.
    pub key_index: Option<usize>,
}

impl Route {
    /// The one route to an object: its channel (and key) in `dialect`, with no model.
    pub fn pinned(channel: &Arc<Channel>, dialect: Dialect, key_index: Option<usize>) -> Self {
        Route {
            health: channel.health.of(""),
            channel: channel.clone(),
            upstream_model: String::new(),
            upstream: dialect,
            context_fallback: false,
            key_index,
        }
    }

    fn new(channel: &Arc<Channel>, upstream_model: &str, client: Dialect) -> Self {
        Route {
            health: channel.health.of(upstream_model),
            channel: channel.clone(),
            upstream_model: upstream_model.to_string(),
            upstream: channel.upstream_dialect(client),
            context_fallback: false,
            key_index: None,
        }
    }
}

#[derive(Debug, Default)]
pub struct Router {
    channels: Vec<Arc<Channel>>,
}

impl Router {
    pub fn new(channels: Vec<Arc<Channel>>) -> Self {
        Router { channels }
    }

    pub fn channels(&self) -> &[Arc<Channel>] {
        &self.channels
    }

    /// The channel named `name`.
    pub fn channel(&self, name: &str) -> Option<&Channel> {
        self.channels.iter().find(|c| c.name == name).map(|c| &**c)
    }

    /// The channels that may serve `model`, in the order to try them. Channels cooling down go
    /// last rather than nowhere, so a request still has somewhere to go when all of them are.
    pub fn candidates(
        &self,
        dialect: Dialect,
        group: &str,
        model: &str,
        now_us: i64,
    ) -> Vec<Route> {
        let in_group = || self.channels.iter().filter(move |c| c.group == group);
        let exact: Vec<Route> = in_group()
            .filter_map(|c| {
                c.models
                    .iter()
                    .find(|(public, _)| public == model)
                    .map(|(_, up)| Route::new(c, up, dialect))
            })
            .collect();
        let wildcard: Vec<Route> = in_group()
            .filter(|c| c.speaks(dialect))
            .filter(|c| c.models.iter().any(|(public, _)| public == "*"))
            .filter(|c| !exact.iter().any(|r| Arc::ptr_eq(&r.channel, c)))
            .map(|c| Route::new(c, model, dialect))
            .collect();
        let mut out = order(exact, now_us);
        out.extend(order(wildcard, now_us));
        out
    }

    /// The channels of a group that take calls naming no model (file uploads, listings) of
    /// `dialect`'s endpoints: those marked `objects`, in priority order; without one, the first
    /// by priority that serves them.
    pub fn objects_channels(&self, group: &str, dialect: Dialect) -> Vec<Route> {
        let mut serving: Vec<&Arc<Channel>> = self
            .channels
            .iter()
            .filter(|c| c.group == group && c.serves_endpoints_of(dialect))
            .collect();
        serving.sort_by_key(|c| c.priority);
        let marked: Vec<&Arc<Channel>> = serving.iter().copied().filter(|c| c.objects).collect();
        let chosen = if marked.is_empty() {
            serving.into_iter().take(1).collect()
        } else {
            marked
        };
        chosen
            .into_iter()
            .map(|c| Route::pinned(c, dialect, None))
            .collect()
    }

    /// Every (model, channel) a group can call, for `GET /v1/models`.
    pub fn models(&self, group: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .channels
            .iter()
            .filter(|c| c.group == group)
            .flat_map(|c| {
                c.models
                    .iter()
                    .filter(|(p, _)| p != "*")
                    .map(|(p, _)| (p.clone(), c.provider.as_str().to_string()))
            })
            .collect();
        out.sort();
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }
}

/// Cooling-down and ejected (open circuit) channels last, then priority tiers ascending, then a weighted random order
/// within a tier (Efraimidis–Spirakis keys u^(1/w)).
fn order(routes: Vec<Route>, now_us: i64) -> Vec<Route> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let mut keyed: Vec<(bool, u32, f64, Route)> = routes
        .into_iter()
        .map(|r| {
            let u: f64 = rng.gen_range(f64::MIN_POSITIVE..1.0);
            let key = u.powf(1.0 / f64::from(r.channel.weight.max(1)));
            let held_back = r.health.cooling_down(now_us) || !r.health.circuit_available();
            (held_back, r.channel.priority, key, r)
        })
        .collect();
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then(a.1.cmp(&b.1))
            .then(b.2.partial_cmp(&a.2).unwrap_or(std::cmp::Ordering::Equal))
    });
    keyed.into_iter().map(|(_, _, _, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Models;

    fn channel(name: &str, provider: Provider, models: Models) -> Arc<Channel> {
        tiered(name, provider, models, 0, 1)
    }

    fn tiered(
        name: &str,
        provider: Provider,
        models: Models,
        priority: u32,
        weight: u32,
    ) -> Arc<Channel> {
        let cfg = ChannelConfig {
            name: name.into(),
            provider,
            base_url: Some("http://127.0.0.1:1/v1/".into()),
            models,
            priority,
            weight,
            ..ChannelConfig::default()
        };
        Arc::new(Channel::from_config(
            &cfg,
            "http://127.0.0.1:1/v1/".into(),
            &|_| None,
        ))
    }

    #[test]
    fn exact_names_win_over_wildcards_and_only_named_models_are_translated() {
        let r = Router::new(vec![
            channel("any", Provider::Openai, Models::List(vec!["*".into()])),
            channel(
                "mapped",
                Provider::Openai,
                Models::Map([("fast".to_string(), "gpt-4.1-mini".to_string())].into()),
            ),
            channel(
                "claude",
                Provider::Anthropic,
                Models::List(vec!["claude-x".into()]),
            ),
        ]);
        let route = r.candidates(Dialect::Chat, "default", "fast", 0).remove(0);
        assert_eq!(route.channel.name, "mapped");
        assert_eq!(route.upstream_model, "gpt-4.1-mini");
        assert_eq!(
            r.candidates(Dialect::Responses, "default", "o4", 0)[0]
                .channel
                .name,
            "any"
        );
        assert_eq!(
            r.candidates(Dialect::Messages, "default", "claude-x", 0)[0]
                .channel
                .name,
            "claude"
        );
        // The `*` channel is a later candidate for a named model too.
        let names: Vec<_> = r
            .candidates(Dialect::Chat, "default", "fast", 0)
            .iter()
            .map(|c| c.channel.name.clone())
            .collect();
        assert_eq!(names, ["mapped", "any"]);
        // A named model is served to every dialect, translated where the channel does not
        // speak the client's; a `*` channel is never a translated catch-all.
        let claude = r.candidates(Dialect::Chat, "default", "claude-x", 0);
        let seen: Vec<_> = claude
            .iter()
            .map(|c| (c.channel.name.as_str(), c.upstream))
            .collect();
        assert_eq!(
            seen,
            [("claude", Dialect::Messages), ("any", Dialect::Chat)]
        );
        let fast = r.candidates(Dialect::Messages, "default", "fast", 0);
        assert_eq!(fast.len(), 1);
        assert_eq!(
            (fast[0].channel.name.as_str(), fast[0].upstream),
            ("mapped", Dialect::Chat)
        );
        assert!(r
            .candidates(Dialect::Messages, "default", "nope", 0)
            .is_empty());
        assert!(r
            .candidates(Dialect::Chat, "other-group", "fast", 0)
            .is_empty());
    }

    #[test]
    fn a_channel_pinned_to_a_dialect_is_called_in_it() {
        let mut cfg = ChannelConfig {
            name: "pinned".into(),
            provider: Provider::Sim,
            models: Models::List(vec!["m".into()]),
            dialect: Some(Dialect::Messages),
            ..ChannelConfig::default()
        };
        let pinned = Arc::new(Channel::from_config(
            &cfg,
            "http://127.0.0.1:1".into(),
            &|_| None,
        ));
        cfg.dialect = None;
        let free = Arc::new(Channel::from_config(
            &cfg,
            "http://127.0.0.1:1".into(),
            &|_| None,
        ));
        for client in Dialect::ALL {
            assert_eq!(pinned.upstream_dialect(client), Dialect::Messages);
            assert_eq!(
                free.upstream_dialect(client),
                client,
                "the sim speaks them all"
            );
        }
    }

    #[test]
    fn tiers_come_in_order_weights_share_a_tier_and_cooling_channels_go_last() {
        let m = || Models::List(vec!["m".into()]);
        let r = Router::new(vec![
            tiered("backup", Provider::Openai, m(), 1, 1),
            tiered("heavy", Provider::Openai, m(), 0, 9),
            tiered("light", Provider::Openai, m(), 0, 1),
        ]);
        let mut heavy_first = 0;
        for _ in 0..2000 {
            let names: Vec<_> = r
                .candidates(Dialect::Chat, "default", "m", 0)
                .iter()
                .map(|c| c.channel.name.clone())
                .collect();
            assert_eq!(names[2], "backup", "the lower tier is tried first");
            if names[0] == "heavy" {
                heavy_first += 1;
            }
        }
        // Weight 9 against 1: heavy leads about 90 % of the time.
        assert!((1700..=1900).contains(&heavy_first), "{heavy_first}");
        r.channels()[1].health.of("m").cool_down_until(1_000);
        let names: Vec<_> = r
            .candidates(Dialect::Chat, "default", "m", 500)
            .iter()
            .map(|c| c.channel.name.clone())
            .collect();
        assert_eq!(names, ["light", "backup", "heavy"]);
        let names: Vec<_> = r
            .candidates(Dialect::Chat, "default", "m", 1_000)
            .iter()
            .map(|c| c.channel.name.clone())
            .collect();
        assert_eq!(names[2], "backup", "the cool-down is over");
    }

    #[test]
    fn adaptive_hedging_uses_the_recent_nearest_rank_p95_once_there_are_enough_samples() {
        let c = channel("c", Provider::Openai, Models::List(vec!["m".into()]));
        for ms in 1..=19 {
            c.note_first_event(std::time::Duration::from_millis(ms));
        }
        assert_eq!(c.first_event_p95(), None, "19 samples are too few");
        for ms in 20..=100 {
            c.note_first_event(std::time::Duration::from_millis(ms));
        }
        assert_eq!(
            c.first_event_p95(),
            Some(std::time::Duration::from_millis(95))
        );
        // Only the newest 200 samples count.
        for _ in 0..200 {
            c.note_first_event(std::time::Duration::from_millis(7));
        }
        assert_eq!(
            c.first_event_p95(),
            Some(std::time::Duration::from_millis(7))
        );
    }

    #[test]
    fn urls_follow_each_sdks_base_url_convention() {
        let c = channel("o", Provider::Openai, Models::List(vec!["m".into()]));
        assert_eq!(
            c.url(Dialect::Chat, "m", true),
            "http://127.0.0.1:1/v1/chat/completions"
        );
        assert_eq!(
            c.url(Dialect::Responses, "m", true),
            "http://127.0.0.1:1/v1/responses"
        );
        let cfg = ChannelConfig {
            name: "g".into(),
            provider: Provider::Gemini,
            models: Models::List(vec!["m".into()]),
            ..ChannelConfig::default()
        };
        let g = Channel::from_config(
            &cfg,
            "https://generativelanguage.googleapis.com/".into(),
            &|_| None,
        );
        assert_eq!(
            g.url(Dialect::Gemini, "gemini-2.5-flash", true),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            g.url(Dialect::Gemini, "gemini-2.5-flash", false),
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
        );
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("sk-canary".into());
        assert!(!format!("{s:?}").contains("canary"));
    }
}
