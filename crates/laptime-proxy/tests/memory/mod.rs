//! In-memory upstreams for tests under paused tokio time: real HTTP/1.1 bytes over in-process
//! pipes (no socket), each answering on a script with exact timing, and a gateway whose channels
//! are those upstreams, served through the whole router.

#![expect(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

use bytes::Bytes;
use http::{Request, Uri};
use http_body_util::channel::Channel;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use laptime_core::timeline::RequestRecord;
use laptime_core::Dialect;
use laptime_proxy::config::{ChannelConfig, Config, HedgeConfig, Models, Provider, RouteConfig};
use laptime_proxy::connect::MemoryConnect;
use laptime_proxy::server::Gateway;
use laptime_store::{auth, records, Store};
use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tower::ServiceExt;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How an in-memory upstream answers: its head after `head_after`, then each frame at its
/// offset from the head, then a close or a stall (the body stays open). `then` answers the
/// host's next request (the last of the chain answers all the later ones).
#[derive(Clone)]
pub struct Reply {
    pub head_after: Duration,
    pub status: u16,
    pub frames: Vec<(Duration, String)>,
    pub stall: bool,
    pub content_type: &'static str,
    pub headers: Vec<(&'static str, String)>,
    pub then: Option<Box<Reply>>,
    /// The connection is closed before any head (a reset before headers).
    pub reset_before_head: bool,
    /// Until this offset from the test's start the host is down: every request gets a 503 at
    /// once, whatever the reply says.
    pub down_until: Option<Duration>,
}

impl Reply {
    pub fn sse(head_after: u64, frames: &[(u64, &str)], stall: bool) -> Reply {
        Reply {
            head_after: ms(head_after),
            status: 200,
            frames: frames
                .iter()
                .map(|(t, f)| (ms(*t), f.to_string()))
                .collect(),
            stall,
            content_type: "text/event-stream",
            headers: Vec::new(),
            then: None,
            reset_before_head: false,
            down_until: None,
        }
    }

    /// This reply first, `next` for the host's later requests.
    pub fn then(mut self, next: Reply) -> Reply {
        let mut last = &mut self;
        while last.then.is_some() {
            last = last.then.as_mut().unwrap();
        }
        last.then = Some(Box::new(next));
        self
    }

    /// The reply to the host's `n`-th request (from 0).
    fn nth(&self, n: usize) -> Reply {
        let mut r = self;
        for _ in 0..n {
            match &r.then {
                Some(next) => r = next,
                None => break,
            }
        }
        r.clone()
    }

    pub fn with_header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }

    /// An error status with the provider's `body`.
    pub fn error(head_after: u64, status: u16, body: &str) -> Reply {
        Reply {
            frames: vec![(ms(0), body.to_string())],
            ..Reply::status(head_after, status)
        }
    }

    pub fn status(head_after: u64, status: u16) -> Reply {
        Reply {
            head_after: ms(head_after),
            status,
            frames: vec![(ms(0), r#"{"error":{"message":"busy"}}"#.into())],
            stall: false,
            content_type: "application/json",
            headers: Vec::new(),
            then: None,
            reset_before_head: false,
            down_until: None,
        }
    }
}

/// Each upstream (by host) and when each of its requests arrived, from the test's start.
pub type Seen = Arc<Mutex<Vec<(String, Duration)>>>;

pub async fn answer(
    reply: Reply,
) -> Result<http::Response<Channel<Bytes, Infallible>>, Infallible> {
    tokio::time::sleep(reply.head_after).await;
    let (mut tx, body) = Channel::<Bytes, Infallible>::new(16);
    let head = Instant::now();
    let content_type = reply.content_type;
    tokio::spawn(async move {
        for (at, frame) in reply.frames {
            tokio::time::sleep_until(head + at).await;
            if tx.send_data(Bytes::from(frame)).await.is_err() {
                return;
            }
        }
        if reply.stall {
            // Keeps the body open until the gateway drops the connection.
            let _open = tx;
            std::future::pending::<()>().await;
        }
    });
    let mut head = http::Response::builder()
        .status(reply.status)
        .header("content-type", content_type);
    for (name, value) in &reply.headers {
        head = head.header(*name, value);
    }
    Ok(head.body(body).unwrap())
}

/// The upstreams' logs: requests as they arrive, connections as they end, and each request's
/// body by host.
#[derive(Clone, Default)]
pub struct Logs {
    pub seen: Seen,
    pub closed: Seen,
    pub bodies: Arc<Mutex<Vec<(String, Bytes)>>>,
}

pub fn upstreams(replies: HashMap<String, Reply>, logs: Logs, origin: Instant) -> MemoryConnect {
    let served: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    Arc::new(move |uri: &Uri| {
        let host = uri.host().unwrap_or_default().to_string();
        let reply = replies
            .get(&host)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::ConnectionRefused))?;
        let (client, server) = tokio::io::duplex(1 << 16);
        let logs = logs.clone();
        let served = served.clone();
        tokio::spawn(async move {
            let seen = logs.seen.clone();
            let name = host.clone();
            let bodies = logs.bodies.clone();
            let svc =
                hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    seen.lock().unwrap().push((name.clone(), origin.elapsed()));
                    let n = {
                        let mut served = served.lock().unwrap();
                        let n = served.entry(name.clone()).or_insert(0);
                        *n += 1;
                        *n - 1
                    };
                    let mut reply = reply.nth(n);
                    if reply.down_until.is_some_and(|t| origin.elapsed() < t) {
                        reply = Reply::status(0, 503);
                    }
                    let (bodies, name) = (bodies.clone(), name.clone());
                    async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        bodies.lock().unwrap().push((name, body));
                        if reply.reset_before_head {
                            return Err(io::Error::from(io::ErrorKind::ConnectionReset));
                        }
                        answer(reply).await.map_err(|never| match never {})
                    }
                });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), svc)
                .await;
            logs.closed.lock().unwrap().push((host, origin.elapsed()));
        });
        Ok(client)
    })
}

pub struct Gw {
    pub gw: Gateway,
    pub store: Store,
    pub token: String,
    pub workspace: String,
    pub logs: Logs,
    pub origin: Instant,
    pub _dir: tempfile::TempDir,
}

pub fn channel(name: &str, priority: u32) -> ChannelConfig {
    ChannelConfig {
        name: name.into(),
        provider: Provider::Sim,
        base_url: Some(format!("http://{name}")),
        api_key_env: None,
        models: Models::List(vec!["m".into()]),
        dialect: None,
        group: "default".into(),
        priority,
        weight: 1,
        circuit: Default::default(),
        prefill: None,
        proxy_url: None,
        ca_file: None,
        client_cert_file: None,
        client_key_file: None,
    }
}

/// A gateway whose channels `a`, `b`, … (tried in that order) are the in-memory upstreams,
/// serving model `m` on one route that `route` may change.
pub async fn gateway(replies: &[(&str, Reply)], route: impl FnOnce(&mut RouteConfig)) -> Gw {
    gateway_with(replies, |cfg| route(&mut cfg.routes[0])).await
}

/// As [`gateway`], with the whole config to change.
pub async fn gateway_with(replies: &[(&str, Reply)], tweak: impl FnOnce(&mut Config)) -> Gw {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let admin = store
        .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
        .unwrap()
        .unwrap();
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.channels = replies
        .iter()
        .enumerate()
        .map(|(i, (name, _))| channel(name, i as u32))
        .collect();
    cfg.routes = vec![cfg.route_for("m").clone()];
    cfg.server.data_dir = dir.path().to_path_buf();
    tweak(&mut cfg);
    cfg.validate(&|_| None).unwrap();
    let logs = Logs::default();
    let origin = Instant::now();
    let replies = replies
        .iter()
        .map(|(n, r)| (n.to_string(), r.clone()))
        .collect();
    let open = upstreams(replies, logs.clone(), origin);
    let gw = Gateway::start_with_upstream(cfg, store.clone(), &|_| None, Some(open))
        .await
        .unwrap();
    Gw {
        gw,
        store,
        token: admin.token,
        workspace: admin.workspace.id,
        logs,
        origin,
        _dir: dir,
    }
}

impl Gw {
    /// Sends one streamed request in `dialect` and reads the whole answer.
    pub async fn call(&self, dialect: Dialect) -> (u16, String, RequestRecord) {
        let resp = self.send(dialect).await;
        self.read_answer(resp).await
    }

    /// The answer's status and body, and the request's record.
    async fn read_answer(
        &self,
        resp: http::Response<axum::body::Body>,
    ) -> (u16, String, RequestRecord) {
        let status = resp.status().as_u16();
        let id = request_id(&resp);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            String::from_utf8(bytes.to_vec()).unwrap(),
            self.record(&id),
        )
    }

    /// Sends one streamed request in `dialect` through the whole router; the answer's head.
    pub async fn send(&self, dialect: Dialect) -> http::Response<axum::body::Body> {
        self.post(
            &dialect.target("m", true),
            request_body(dialect),
            Some(&self.token),
        )
        .await
    }

    /// As [`Gw::call`], at any time (a later request of a sequence).
    pub async fn call_later(&self, dialect: Dialect) -> (u16, String, RequestRecord) {
        let path = dialect.target("m", true);
        let resp = self
            .post_later(&path, request_body(dialect), Some(&self.token))
            .await;
        self.read_answer(resp).await
    }

    /// POSTs `body` to `path` through the whole router, with `token` as the bearer if given,
    /// at the test's start (so the upstreams' logged times are offsets from t0).
    pub async fn post(
        &self,
        path: &str,
        body: impl Into<axum::body::Body>,
        token: Option<&str>,
    ) -> http::Response<axum::body::Body> {
        assert_eq!(
            self.origin.elapsed(),
            Duration::ZERO,
            "t0 is the test's start"
        );
        self.post_later(path, body, token).await
    }

    /// As [`Gw::post`], at any time (a later request of a sequence).
    pub async fn post_later(
        &self,
        path: &str,
        body: impl Into<axum::body::Body>,
        token: Option<&str>,
    ) -> http::Response<axum::body::Body> {
        let mut req = Request::post(path).header("content-type", "application/json");
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(body.into()).unwrap();
        let router = laptime_api::router(self.gw.app.clone());
        router.oneshot(req).await.unwrap()
    }

    /// The stored record, waiting (in real time: the recorder is a thread) for its batch.
    pub fn record(&self, id: &str) -> RequestRecord {
        for _ in 0..500 {
            let got = self
                .store
                .with_conn(|c| records::get(c, &self.workspace, id))
                .unwrap();
            if let Some(r) = got {
                return r;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("request {id} was not recorded");
    }

    pub fn seen(&self) -> Vec<(String, Duration)> {
        self.logs.seen.lock().unwrap().clone()
    }

    /// The request bodies `host` received, in order.
    pub fn bodies(&self, host: &str) -> Vec<serde_json::Value> {
        self.logs
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h == host)
            .map(|(_, b)| serde_json::from_slice(b).unwrap())
            .collect()
    }
}

/// A streamed request for model `m` in `dialect`.
fn request_body(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Chat => {
            r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#
        }
        Dialect::Responses => r#"{"model":"m","stream":true,"input":"hi"}"#,
        Dialect::Messages => {
            r#"{"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#
        }
        Dialect::Gemini => r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
    }
}

pub fn request_id<B>(resp: &http::Response<B>) -> String {
    resp.headers()["x-laptime-request-id"]
        .to_str()
        .unwrap()
        .to_string()
}

/// One dialect's stream: a preamble event (no output), a text delta, and the terminal frame.
pub struct Frames {
    pub preamble: &'static str,
    pub text: &'static str,
    pub terminal: &'static str,
}

pub fn frames(dialect: Dialect) -> Frames {
    match dialect {
        Dialect::Chat => Frames {
            preamble: "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            text: "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}]}\n\n",
            terminal: "data: [DONE]\n\n",
        },
        Dialect::Responses => Frames {
            preamble: "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\n",
            text: "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
            terminal: "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
        },
        Dialect::Messages => Frames {
            preamble: "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
            text: "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            terminal: "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        },
        // No envelope of its own: the preamble is a chunk whose only text is empty; the
        // terminal is the finishReason chunk (Gemini's last).
        Dialect::Gemini => Frames {
            preamble: "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n",
            text: "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"Hi\"}],\"role\": \"model\"},\"index\": 0}]}\r\n\r\n",
            terminal: "data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"\"}],\"role\": \"model\"},\"finishReason\": \"STOP\",\"index\": 0}],\"usageMetadata\": {\"promptTokenCount\": 1,\"candidatesTokenCount\": 1,\"totalTokenCount\": 2}}\r\n\r\n",
        },
    }
}

pub const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

/// A healthy answer: head after 20 ms, preamble at +5, text at +10, terminal at +15.
pub fn healthy(dialect: Dialect) -> Reply {
    let f = frames(dialect);
    Reply::sse(
        20,
        &[(5, f.preamble), (10, f.text), (15, f.terminal)],
        false,
    )
}

/// The client's bytes less the one timing comment block, which must sit right before the
/// terminal frame.
pub fn without_comment(text: &str, terminal: &str) -> String {
    let at = text.find(": x-laptime-timing ").unwrap();
    let end = at + text[at..].find("\n\n").unwrap() + 2;
    assert!(text[end..].starts_with(terminal), "{text}");
    format!("{}{}", &text[..at], &text[end..])
}

/// `frame` every `every` ms from `from` to `to` (offsets from the head).
pub fn repeat(frame: &'static str, from: u64, every: u64, to: u64) -> Vec<(u64, &'static str)> {
    (0..)
        .map(|i| from + i * every)
        .take_while(|t| *t <= to)
        .map(|t| (t, frame))
        .collect()
}

pub fn hedge_after(ms: u64) -> impl FnOnce(&mut RouteConfig) {
    move |r| {
        r.hedge = Some(HedgeConfig {
            after_ms: Some(ms),
            after: None,
            budget: 1.0,
        })
    }
}

/// The start of an answer (its envelope and `texts`), cut there.
pub fn started(dialect: Dialect, texts: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    match dialect {
        Dialect::Chat => {
            out.push("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n".to_string());
            for t in texts {
                out.push(format!("data: {{\"id\":\"c1\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}},\"finish_reason\":null}}]}}\n\n"));
            }
        }
        Dialect::Responses => {
            out.push("event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r1\",\"status\":\"in_progress\",\"output\":[]}}\n\n".to_string());
            out.push("event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"m1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n".to_string());
            out.push("event: response.content_part.added\ndata: {\"type\":\"response.content_part.added\",\"item_id\":\"m1\",\"output_index\":0,\"content_index\":0,\"part\":{\"type\":\"output_text\",\"text\":\"\"}}\n\n".to_string());
            for t in texts {
                out.push(format!("event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"m1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{t}\"}}\n\n"));
            }
        }
        Dialect::Gemini => {
            for t in texts {
                out.push(format!("data: {{\"candidates\": [{{\"content\": {{\"parts\": [{{\"text\": \"{t}\"}}],\"role\": \"model\"}},\"index\": 0}}]}}\r\n\r\n"));
            }
        }
        Dialect::Messages => {
            out.push("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n".to_string());
            out.push("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_string());
            for t in texts {
                out.push(format!("event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{t}\"}}}}\n\n"));
            }
        }
    }
    out
}

/// A whole answer of `texts`, in Messages (what a prefill-continuing provider sends).
pub fn whole_messages(texts: &[&str]) -> Vec<String> {
    let mut out = started(Dialect::Messages, texts);
    out.push(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n".into(),
    );
    out.push("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":3}}\n\n".into());
    out.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".into());
    out
}

/// The frames every 10 ms from 5 ms after a 20 ms head, then a close or a stall.
pub fn reply(frames: &[String], stall: bool) -> Reply {
    let timed: Vec<(u64, &str)> = frames
        .iter()
        .enumerate()
        .map(|(i, f)| (5 + 10 * i as u64, f.as_str()))
        .collect();
    Reply::sse(20, &timed, stall)
}
