//! A gateway on 127.0.0.1 in front of a real sim, over real sockets, with a real SQLite store.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use std::net::SocketAddr;
use std::time::Duration;

use laptime_proxy::config::{ChannelConfig, Config};
use laptime_proxy::server::{bind, Gateway};
use laptime_store::auth;
use laptime_store::Store;
use serde_json::Value;

pub struct Harness {
    pub addr: SocketAddr,
    pub sim_addr: SocketAddr,
    pub token: String,
    pub store: Store,
    pub http: reqwest::Client,
    /// The gateway's shared state (its recorder's counters, say).
    pub app: std::sync::Arc<laptime_proxy::App>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    join: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

pub async fn start() -> Harness {
    start_with(|_, _| {}).await
}

/// Starts a gateway whose `sim` channel points at a fresh sim; `tweak` may change the config
/// (it gets the sim's base URL).
pub async fn start_with(tweak: impl FnOnce(&mut Config, &str)) -> Harness {
    start_with_env(tweak, &[]).await
}

/// As [`start_with`], the gateway reading `vars` as its environment (besides the canary key the
/// tests' channels name), never the process's.
pub async fn start_with_env(
    tweak: impl FnOnce(&mut Config, &str),
    vars: &[(&str, &str)],
) -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let token = store
        .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
        .unwrap()
        .unwrap()
        .token;
    let (sim_addr, _sim) = laptime_sim::spawn_local(laptime_sim::Sim::new())
        .await
        .unwrap();
    let sim_base = format!("http://{sim_addr}");
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.channels[0].base_url = Some(sim_base.clone());
    cfg.server.data_dir = dir.path().to_path_buf();
    cfg.server.drain_s = 2;
    tweak(&mut cfg, &sim_base);
    let env = |k: &str| match k {
        "CANARY_KEY" => Some("sk-canary-7f3a9e".to_string()),
        _ => vars
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string()),
    };
    cfg.validate(&env).unwrap();
    let gw = Gateway::start(cfg, store.clone(), &env).await.unwrap();
    let (listener, addr) = bind("127.0.0.1:0").await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = gw.app.clone();
    let router = laptime_api::router(gw.app.clone());
    let join = tokio::spawn(gw.serve(listener, router, async move {
        let _ = rx.await;
    }));
    Harness {
        addr,
        sim_addr,
        token,
        store,
        http: reqwest::Client::new(),
        app,
        stop: Some(tx),
        join: Some(join),
        _dir: dir,
    }
}

pub fn channel(name: &str, base_url: &str, models: &[&str]) -> ChannelConfig {
    ChannelConfig {
        name: name.into(),
        provider: laptime_proxy::config::Provider::Sim,
        base_url: Some(base_url.into()),
        models: laptime_proxy::config::Models::List(models.iter().map(|m| m.to_string()).collect()),
        ..ChannelConfig::default()
    }
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn sim_url(&self, path: &str) -> String {
        format!("http://{}{}", self.sim_addr, path)
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.http
            .post(self.url(path))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .unwrap()
    }

    /// The stored row in the REST shape, waiting for the recorder (at most 3 s).
    pub async fn row(&self, request_id: &str) -> Value {
        for _ in 0..300 {
            let r = self
                .http
                .get(self.url(&format!("/api/requests/{request_id}")))
                .bearer_auth(&self.token)
                .send()
                .await
                .unwrap();
            if r.status() == 200 {
                return r.json().await.unwrap();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("no row for {request_id}");
    }

    /// A GraphQL call with `token`: the HTTP status and the answer.
    pub async fn gql(&self, token: &str, query: &str, variables: Value) -> (u16, Value) {
        let r = self
            .http
            .post(self.url("/graphql"))
            .bearer_auth(token)
            .json(&serde_json::json!({"query": query, "variables": variables}))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap())
    }

    /// A new proxy token of the default workspace: (its key id, its value).
    pub fn proxy_token(&self) -> (String, String) {
        let t = self
            .store
            .with_conn(|c| {
                auth::create_token(
                    c,
                    auth::DEFAULT_WORKSPACE,
                    auth::Scope::Proxy,
                    laptime_proxy::clock::now_unix_us(),
                )
            })
            .unwrap();
        (t.key_id, t.token)
    }

    /// `/metrics`, read with the admin token.
    pub async fn metrics(&self) -> String {
        self.http
            .get(self.url("/metrics"))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// A sim introspection endpoint's JSON (`GET /sim/…`).
    async fn sim_json<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        self.http
            .get(self.sim_url(path))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// What the sim received (`GET /sim/requests`), oldest first.
    pub async fn sim_requests(&self) -> Vec<Value> {
        self.sim_json("/sim/requests").await
    }

    /// The last request the sim received.
    pub async fn last_sim_request(&self) -> Value {
        self.sim_requests().await.pop().unwrap()
    }

    pub async fn sim_stats(&self) -> Value {
        self.sim_json("/sim/stats").await
    }

    /// Stops the gateway the way SIGTERM does and waits for it.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(j) = self.join.take() {
            j.await.unwrap().unwrap();
        }
    }
}

/// The id the gateway gave a request, from its answer's `x-laptime-request-id`.
pub fn request_id(r: &reqwest::Response) -> String {
    r.headers()["x-laptime-request-id"]
        .to_str()
        .unwrap()
        .to_string()
}

pub fn body_for(dialect: &str, model: &str, stream: bool) -> Value {
    match dialect {
        "chat" => serde_json::json!({
            "model": model, "stream": stream, "stream_options": {"include_usage": true},
            "messages": [{"role": "user", "content": "hello"}]
        }),
        "responses" => serde_json::json!({"model": model, "stream": stream, "input": "hello"}),
        _ => serde_json::json!({
            "model": model, "stream": stream, "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}]
        }),
    }
}

pub fn path_for(dialect: &str) -> &'static str {
    match dialect {
        "chat" => "/v1/chat/completions",
        "responses" => "/v1/responses",
        _ => "/v1/messages",
    }
}

/// The first line of the terminal frame the comment must precede.
pub fn terminal_for(dialect: &str) -> &'static str {
    match dialect {
        "chat" => "data: [DONE]",
        "responses" => "event: response.completed",
        _ => "event: message_stop",
    }
}

pub const DIALECTS: [&str; 3] = ["chat", "responses", "messages"];

/// Splits a client stream into (bytes without the comment block, the comment line, what
/// follows the comment).
pub fn cut_comment(text: &str) -> (String, String, String) {
    assert_eq!(
        text.matches(": x-laptime-timing").count(),
        1,
        "exactly one timing comment in:\n{text}"
    );
    let start = text.find(": x-laptime-timing").unwrap();
    let end = start + text[start..].find("\n\n").unwrap() + 2;
    let without = format!("{}{}", &text[..start], &text[end..]);
    (
        without,
        text[start..end - 2].to_string(),
        text[end..].to_string(),
    )
}

/// Numeric equality of a comment value and a JSON number.
pub fn same_number(comment_value: Option<&String>, json: &Value) -> bool {
    match (comment_value, json.as_f64()) {
        (None, None) => json.is_null(),
        (Some(c), Some(j)) => c.parse::<f64>().is_ok_and(|c| (c - j).abs() < 1e-9),
        _ => false,
    }
}

/// `text` with the sim's stored-response numbers blanked (`resp_laptimesim0002` →
/// `resp_laptimesimNNNN`): each Responses answer gets the next id, so two answers to the same
/// request differ only there.
pub fn unnumbered(text: &str) -> String {
    const ID: &str = "resp_laptimesim";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(ID) {
        let end = i + ID.len();
        out.push_str(&rest[..end]);
        let digits = rest[end..].bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&"N".repeat(digits));
        rest = &rest[end + digits..];
    }
    out.push_str(rest);
    out
}
