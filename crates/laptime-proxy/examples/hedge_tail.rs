//! Measures what adaptive hedging does to a heavy tail: two upstream channels speaking Chat
//! Completions on 127.0.0.1, the first of which (tried first) answers 5 % of requests 10× slower to its first
//! event. Runs the same load through the gateway without hedging and with `hedge = { after =
//! "p95" }`, and prints p50/p95/p99 of time to first visible text (from the stored rows), the
//! share of requests hedged and the extra upstream requests.
//!
//! `cargo run --release -p laptime-proxy --example hedge_tail -- [requests] [concurrency]`

#![expect(
    clippy::unwrap_used,
    clippy::print_stdout,
    reason = "a measurement script"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use laptime_proxy::config::{
    ChannelConfig, Config, HedgeConfig, Models, Provider, RouteConfig, TimeoutsConfig,
};
use laptime_proxy::server::{bind, Gateway};
use laptime_store::{auth, Store};
use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const FIRST_EVENT_MS: u64 = 100;
const TAIL_SHARE: f64 = 0.05;
const TAIL_FACTOR: u64 = 10;

/// A Chat Completions upstream: first event after 100 ms (or 1 s for `tail` of requests), then
/// five text deltas 10 ms apart and `[DONE]`. Counts the requests it gets.
async fn upstream(tail: f64, count: Arc<AtomicU64>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let _ = sock.set_nodelay(true);
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                if sock.read(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
                count.fetch_add(1, Ordering::Relaxed);
                let slow = rand::thread_rng().gen_bool(tail);
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
                if sock.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let wait = if slow {
                    FIRST_EVENT_MS * TAIL_FACTOR
                } else {
                    FIRST_EVENT_MS
                };
                tokio::time::sleep(Duration::from_millis(wait)).await;
                let mut events = vec!["{\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}".to_string()];
                for w in ["a", " b", " c", " d", " e"] {
                    events.push(format!("{{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{w}\"}},\"finish_reason\":null}}]}}"));
                }
                events.push("[DONE]".to_string());
                for (i, e) in events.iter().enumerate() {
                    if i > 1 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    let frame = format!("data: {e}\n\n");
                    let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
                    if sock.write_all(chunk.as_bytes()).await.is_err() {
                        return;
                    }
                }
                let _ = sock.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    format!("http://{addr}/v1")
}

fn channel(name: &str, base: &str, priority: u32) -> ChannelConfig {
    ChannelConfig {
        name: name.into(),
        provider: Provider::Openai,
        base_url: Some(base.into()),
        api_key_env: Some("HEDGE_TAIL_KEY".into()),
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

fn pct(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn run(hedge: bool, requests: usize, concurrency: usize) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let token = store
        .with_conn(|c| auth::bootstrap(c, None, laptime_proxy::clock::now_unix_us()))
        .unwrap()
        .unwrap()
        .token;
    let (a_count, b_count) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let a = upstream(TAIL_SHARE, a_count.clone()).await;
    let b = upstream(0.0, b_count.clone()).await;
    let mut cfg = Config::embedded_default(&|_| None);
    cfg.channels = vec![channel("a", &a, 0), channel("b", &b, 1)];
    cfg.server.data_dir = dir.path().to_path_buf();
    cfg.routes = vec![RouteConfig {
        model: "m".into(),
        failover: Default::default(),
        timeouts: TimeoutsConfig::default(),
        cache: None,
        hedge: hedge.then_some(HedgeConfig {
            after_ms: None,
            after: Some(laptime_proxy::config::HedgeAfter::P95),
            budget: 0.1,
        }),
        translation: Default::default(),
        context_fallback: None,
    }];
    let env = |k: &str| (k == "HEDGE_TAIL_KEY").then(|| "sk-local".to_string());
    let gw = Gateway::start(cfg, store, &env).await.unwrap();
    let (listener, addr) = bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let router = laptime_api::router(gw.app.clone());
    let serving = tokio::spawn(gw.serve(listener, router, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::new();
    let next = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (http, next, token) = (http.clone(), next.clone(), token.clone());
        workers.push(tokio::spawn(async move {
            while next.fetch_add(1, Ordering::Relaxed) < requests as u64 {
                let body = serde_json::json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
                let r = http.post(format!("http://{addr}/v1/chat/completions")).bearer_auth(&token).json(&body).send().await.unwrap();
                r.bytes().await.unwrap();
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows: serde_json::Value = http
        .get(format!("http://{addr}/api/requests?limit=500"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rows = rows["requests"].as_array().unwrap();
    let mut text: Vec<f64> = rows
        .iter()
        .filter_map(|r| r["other"]["timing"]["first_text_delta_ms"].as_f64())
        .collect();
    text.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let hedged = rows.iter().filter(|r| r["hedge"] != "none").count();
    let upstream_requests = a_count.load(Ordering::Relaxed) + b_count.load(Ordering::Relaxed);
    println!(
        "{:<22} n={:<4} first text p50 {:>7.1} ms  p95 {:>7.1} ms  p99 {:>7.1} ms  hedged {:>5.1} %  extra upstream requests {:>5.1} %",
        if hedge { "adaptive hedging (p95)" } else { "no hedging" },
        text.len(),
        pct(&text, 0.50),
        pct(&text, 0.95),
        pct(&text, 0.99),
        100.0 * hedged as f64 / rows.len() as f64,
        100.0 * (upstream_requests as f64 - rows.len() as f64) / rows.len() as f64,
    );
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let requests = args.first().copied().unwrap_or(500).min(500);
    let concurrency = args.get(1).copied().unwrap_or(8);
    println!("{requests} requests, concurrency {concurrency}; channels a (tried first) and b: first event at {FIRST_EVENT_MS} ms; on a, {}% of requests {TAIL_FACTOR}x slower", TAIL_SHARE * 100.0);
    run(false, requests, concurrency).await;
    run(true, requests, concurrency).await;
}
