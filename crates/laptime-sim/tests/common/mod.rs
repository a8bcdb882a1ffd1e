//! Shared support for the socket tests: a simulator on 127.0.0.1, a reqwest client, an SSE
//! reader and a poller for `/sim/stats`.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

use std::time::Duration;

use laptime_sim::{spawn_local, Sim};
use serde_json::Value;
use tokio::task::JoinHandle;

/// A running simulator and a client for it. Dropping it stops the server.
pub struct Harness {
    pub sim: Sim,
    pub base: String,
    pub client: reqwest::Client,
    server: JoinHandle<()>,
}

impl Harness {
    pub async fn start() -> Harness {
        let sim = Sim::new();
        let (addr, server) = spawn_local(sim.clone()).await.unwrap();
        Harness {
            sim,
            base: format!("http://{addr}"),
            client: reqwest::Client::new(),
            server,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let resp = self.client.get(self.url(path)).send().await.unwrap();
        assert_eq!(resp.status(), 200, "GET {path}");
        resp.json().await.unwrap()
    }

    /// Polls `/sim/stats` every 20 ms for up to 2 s until `done` holds; returns the last value.
    pub async fn wait_for_stats(&self, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let stats = self.get_json("/sim/stats").await;
            if done(&stats) || tokio::time::Instant::now() >= deadline {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// One dispatched SSE event (comments are skipped).
#[derive(Debug, Clone, PartialEq)]
pub struct Sse {
    pub event: Option<String>,
    pub data: String,
}

impl Sse {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Splits a complete SSE body (LF line ends, or CRLF for Gemini, as the fake writes) into its
/// events.
pub fn sse(body: &str) -> Vec<Sse> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter(|block| !block.is_empty())
        .filter_map(|block| {
            let mut event = None;
            let mut data = None;
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = Some(v.to_owned());
                }
            }
            data.map(|data| Sse { event, data })
        })
        .collect()
}

/// The body of a streamed test request for `dialect`'s path with a custom script.
/// Where a request with `body` goes in `dialect`: the dialect's path, or for Gemini the body's
/// model and stream-ness put in the path (`…:streamGenerateContent?alt=sse`).
pub fn target(dialect: laptime_core::Dialect, body: &Value) -> String {
    let model = body["model"].as_str().unwrap_or("sim-fast");
    let stream = body["stream"].as_bool().unwrap_or(false);
    dialect.target(model, stream)
}

pub fn scripted(stream: bool, script: Value) -> Value {
    serde_json::json!({
        "model": "custom-model",
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "laptime_sim": script,
    })
}

/// A `multipart/form-data` body with `boundary`: the text `fields`, then `file` (field name
/// `file`, its filename and bytes) if given.
pub fn multipart(boundary: &str, fields: &[(&str, &str)], file: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    if let Some((filename, bytes)) = file {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
                 filename=\"{filename}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
        );
        body.extend_from_slice(bytes);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

/// Sends `request` (a whole HTTP/1.1 request with `Connection: close`) on a raw socket and
/// returns the response head and the body's chunks as the sim framed them (chunked encoding
/// shows each body frame, however TCP coalesced them).
pub async fn raw_chunks(h: &Harness, request: &[u8]) -> (String, Vec<Vec<u8>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = h.base.strip_prefix("http://").unwrap();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(request).await.unwrap();
    let mut raw = Vec::new();
    socket.read_to_end(&mut raw).await.unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut rest = &raw[split + 4..];
    let mut chunks = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let size =
            usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        rest = &rest[line_end + 2..];
        if size == 0 {
            break;
        }
        chunks.push(rest[..size].to_vec());
        rest = &rest[size + 2..];
    }
    (head, chunks)
}
