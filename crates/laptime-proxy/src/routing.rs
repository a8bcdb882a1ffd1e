//! Routing: model + dialect → the channel that serves it and the model name to send upstream.
//! Exact names win over a channel's `*`; a channel is eligible only for the dialects its
//! provider speaks. Upstream URLs come from configuration only.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use laptime_core::Dialect;

use crate::config::{ChannelConfig, Provider};

/// A configured channel, ready to call.
pub struct Channel {
    pub name: String,
    pub provider: Provider,
    /// The SDK base URL, without a trailing slash.
    pub base_url: String,
    /// The provider key, read from the environment at start. Never logged or stored.
    pub api_key: Option<Secret>,
    pub group: String,
    pub models: Vec<(String, String)>,
    /// Requests in flight on this channel.
    pub inflight: AtomicU32,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
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
        Channel {
            name: c.name.clone(),
            provider: c.provider,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key: c.api_key_env.as_deref().and_then(env).map(Secret::new),
            group: c.group.clone(),
            models: c.models.pairs(),
            inflight: AtomicU32::new(0),
        }
    }

    /// The upstream URL for a dialect: OpenAI paths hang off the SDK base URL (which includes
    /// `/v1`), Anthropic's off the bare host; a sim's base URL is its bare host for all three.
    pub fn url(&self, dialect: Dialect) -> String {
        match (self.provider, dialect) {
            (Provider::Sim, d) => format!("{}{}", self.base_url, d.path()),
            (_, Dialect::Messages) => format!("{}/v1/messages", self.base_url),
            (_, Dialect::Chat) => format!("{}/chat/completions", self.base_url),
            (_, Dialect::Responses) => format!("{}/responses", self.base_url),
        }
    }

    /// Marks a request in flight until the guard drops; returns the count including it.
    pub fn enter(self: &Arc<Self>) -> (InflightGuard, u32) {
        let n = self.inflight.fetch_add(1, Ordering::Relaxed) + 1;
        (InflightGuard(self.clone()), n)
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

    pub fn route(&self, dialect: Dialect, group: &str, model: &str) -> Option<Route> {
        let eligible = || {
            self.channels
                .iter()
                .filter(move |c| c.provider.serves(dialect) && c.group == group)
        };
        eligible()
            .find_map(|c| {
                c.models
                    .iter()
                    .find(|(public, _)| public == model)
                    .map(|(_, up)| Route {
                        channel: c.clone(),
                        upstream_model: up.clone(),
                    })
            })
            .or_else(|| {
                eligible().find_map(|c| {
                    c.models
                        .iter()
                        .any(|(public, _)| public == "*")
                        .then(|| Route {
                            channel: c.clone(),
                            upstream_model: model.to_string(),
                        })
                })
            })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Models;

    fn channel(name: &str, provider: Provider, models: Models) -> Arc<Channel> {
        let cfg = ChannelConfig {
            name: name.into(),
            provider,
            base_url: Some("http://127.0.0.1:1/v1/".into()),
            api_key_env: None,
            models,
            group: "default".into(),
        };
        Arc::new(Channel::from_config(
            &cfg,
            "http://127.0.0.1:1/v1/".into(),
            &|_| None,
        ))
    }

    #[test]
    fn exact_names_win_over_wildcards_and_dialects_must_match() {
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
        let route = r.route(Dialect::Chat, "default", "fast").unwrap();
        assert_eq!(route.channel.name, "mapped");
        assert_eq!(route.upstream_model, "gpt-4.1-mini");
        assert_eq!(
            r.route(Dialect::Responses, "default", "o4")
                .unwrap()
                .channel
                .name,
            "any"
        );
        assert_eq!(
            r.route(Dialect::Messages, "default", "claude-x")
                .unwrap()
                .channel
                .name,
            "claude"
        );
        assert!(r.route(Dialect::Messages, "default", "nope").is_none());
        assert!(r.route(Dialect::Chat, "other-group", "fast").is_none());
    }

    #[test]
    fn urls_follow_each_sdks_base_url_convention() {
        let c = channel("o", Provider::Openai, Models::List(vec!["m".into()]));
        assert_eq!(
            c.url(Dialect::Chat),
            "http://127.0.0.1:1/v1/chat/completions"
        );
        assert_eq!(c.url(Dialect::Responses), "http://127.0.0.1:1/v1/responses");
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("sk-canary".into());
        assert!(!format!("{s:?}").contains("canary"));
    }
}
