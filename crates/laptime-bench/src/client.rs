//! One request, measured where its bytes arrive: every mark is stamped right after the HTTP
//! body yields a frame, and the frame is fed to the gateway's own stream observer (SSE scanner
//! and dialect classifiers), so the client's timeline means exactly what the gateway's means.
//! Everything that is not a mark (output text for the tokenizer, the timing comment) is read
//! from the kept body after the request ended, off the clock.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use http::{HeaderMap, Method, Request, Uri};
use http_body_util::BodyExt;
use laptime_core::observe::{whole_answer, BodyEnd, StreamObserver};
use laptime_core::sse::{SseItem, SseScanner};
use laptime_core::timeline::{ErrorClass, Outcome};
use laptime_core::usage::Tokens;
use laptime_core::views::{ms, parse_comment};
use laptime_core::Dialect;
use serde_json::Value;
use tokio::time::Instant;

use super::prompt::Tokenizer;
use super::record::{GatewayTiming, RequestRecord};

/// The body bytes kept per request for the post-hoc reads (output text, timing comment).
const KEEP_BODY: usize = 8 * 1024 * 1024;
/// Error messages are cut to this many characters.
const ERROR_CHARS: usize = 300;

pub type HttpClient = laptime_proxy::attempt::HttpClient;

/// The gateway's own upstream client (pooled HTTP/1.1 and HTTP/2, `TCP_NODELAY`, rustls), so the
/// bench connects the way the gateway does.
pub fn client(connect_timeout: Duration) -> Result<HttpClient, String> {
    laptime_proxy::attempt::client(connect_timeout).map_err(|e| e.message)
}

/// Where one request goes and how it authenticates.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub label: String,
    pub uri: Uri,
    pub headers: HeaderMap,
}

impl Endpoint {
    pub fn new(
        label: &str,
        url: &str,
        dialect: Dialect,
        stream: bool,
        token: Option<&str>,
    ) -> Result<Endpoint, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("target {url:?} is not a URL: {e}"))?;
        match uri.scheme_str() {
            Some("http" | "https") => {}
            _ => return Err(format!("target {url:?} must be an http:// or https:// URL")),
        }
        let mut h = HeaderMap::new();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        h.insert(
            ACCEPT,
            HeaderValue::from_static(if stream {
                "text/event-stream"
            } else {
                "application/json"
            }),
        );
        // The scanner reads the stream as sent; compressed SSE would hide it.
        h.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        h.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("laptime-bench/", env!("CARGO_PKG_VERSION"))),
        );
        if dialect == Dialect::Messages {
            h.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
        }
        if let Some(t) = token {
            let (name, value) = match dialect {
                Dialect::Messages => ("x-api-key", t.to_string()),
                Dialect::Gemini => ("x-goog-api-key", t.to_string()),
                Dialect::Chat | Dialect::Responses => ("authorization", format!("Bearer {t}")),
            };
            let mut v = HeaderValue::from_str(&value)
                .map_err(|_| "--token holds characters a header cannot carry".to_string())?;
            v.set_sensitive(true);
            if name == "authorization" {
                h.insert(AUTHORIZATION, v);
            } else {
                h.insert(name, v);
            }
        }
        Ok(Endpoint {
            label: label.to_string(),
            uri,
            headers: h,
        })
    }
}

/// Sends one request and measures it. `start_ms` is t0 from `origin`; the other scheduling
/// fields are left to the caller.
pub async fn measure(
    origin: Instant,
    http: &HttpClient,
    ep: &Endpoint,
    dialect: Dialect,
    body: Bytes,
    timeout: Duration,
    tokenizer: &Tokenizer,
) -> RequestRecord {
    let mut req = Request::new(laptime_proxy::outbody::OutBody::full(body));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = ep.uri.clone();
    *req.headers_mut() = ep.headers.clone();

    let mut rec = RequestRecord {
        target: ep.label.clone(),
        ..RequestRecord::default()
    };
    let t0 = Instant::now();
    rec.start_ms = ms(t0.saturating_duration_since(origin));
    let deadline = t0 + timeout;

    let resp = match tokio::time::timeout_at(deadline, http.request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            let kind = if e.is_connect() { "connect" } else { "request" };
            fail(&mut rec, kind, &error_chain(&e));
            return rec;
        }
        Err(_) => {
            fail(
                &mut rec,
                "timeout",
                &format!("no response head within {} s", timeout.as_secs_f64()),
            );
            return rec;
        }
    };
    let headers_at = t0.elapsed();
    rec.headers_ms = Some(ms(headers_at));
    let status = resp.status().as_u16();
    rec.status = Some(status);
    let head = resp.headers().clone();
    let sse = head
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
    rec.streamed = sse && (200..300).contains(&status);

    let mut body = resp.into_body();
    let mut kept = BytesMut::new();
    let mut observer = rec.streamed.then(|| {
        let mut o = StreamObserver::new(dialect, Some(Duration::ZERO));
        o.set_headers(headers_at);
        o
    });
    let mut end_how: Option<BodyEnd> = None;
    let mut body_error: Option<String> = None;
    let mut timed_out = false;
    let mut last_output_at: Option<Duration> = None;
    loop {
        match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => {
                let at = t0.elapsed();
                let Ok(data) = frame.into_data() else {
                    continue; // trailers
                };
                if data.is_empty() {
                    continue;
                }
                if rec.first_byte_ms.is_none() {
                    rec.first_byte_ms = Some(ms(at));
                }
                if let Some(o) = observer.as_mut() {
                    o.on_chunk(at, &data);
                    // This chunk carried output if it moved the last-effective mark to now.
                    if o.summary().marks.last_effective == Some(at) {
                        if let Some(prev) = last_output_at {
                            rec.output_gaps_ms.push(ms(at.saturating_sub(prev)));
                        }
                        last_output_at = Some(at);
                    }
                }
                rec.body_bytes += data.len() as u64;
                if kept.len() < KEEP_BODY {
                    let room = KEEP_BODY - kept.len();
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                    rec.body_truncated |= data.len() > room;
                } else {
                    rec.body_truncated = true;
                }
            }
            Ok(Some(Err(e))) => {
                end_how = Some(BodyEnd::Error);
                body_error = Some(error_chain(&e));
                break;
            }
            Ok(None) => {
                end_how = Some(BodyEnd::Eof);
                break;
            }
            Err(_) => {
                timed_out = true;
                break;
            }
        }
    }
    let end_at = t0.elapsed();
    drop(body);
    if end_how.is_some() {
        rec.body_end_ms = Some(ms(end_at));
    }

    if !(200..300).contains(&status) {
        let text = String::from_utf8_lossy(&kept);
        let kind = format!("http_{status}");
        fail(&mut rec, &kind, text.trim());
        read_gateway(&mut rec, &head, &kept);
        return rec;
    }

    let mut tokens = Tokens::default();
    if let Some(mut o) = observer {
        if let Some(how) = end_how {
            o.on_end(end_at, how);
        }
        let s = o.summary();
        rec.first_event_ms = s.marks.first_event.map(ms);
        rec.first_effective_ms = s.marks.first_effective.map(ms);
        rec.first_visible_ms = s.marks.first_visible.map(ms);
        rec.last_effective_ms = s.marks.last_effective.map(ms);
        rec.end_ms = s.marks.upstream_done.map(ms);
        rec.event_count = s.event_count;
        rec.text_delta_count = s.text_delta_count;
        tokens = s.tokens;
        if timed_out {
            fail(
                &mut rec,
                "timeout",
                &format!("the stream did not end within {} s", timeout.as_secs_f64()),
            );
        } else {
            match (s.outcome, s.error_class) {
                (Some(Outcome::Completed), _) => rec.outcome = "completed".into(),
                (Some(Outcome::Incomplete), _) => rec.outcome = "incomplete".into(),
                (Some(Outcome::UpstreamError), _) => {
                    fail(&mut rec, "stream_error", &stream_error_text(dialect, &kept))
                }
                (_, Some(ErrorClass::BodyError)) => fail(
                    &mut rec,
                    "reset",
                    body_error
                        .as_deref()
                        .unwrap_or("the stream broke before its terminal event"),
                ),
                _ => fail(
                    &mut rec,
                    "closed_early",
                    "the stream ended without a terminal event",
                ),
            }
        }
    } else {
        rec.end_ms = rec.body_end_ms;
        if timed_out {
            fail(
                &mut rec,
                "timeout",
                &format!("the body did not end within {} s", timeout.as_secs_f64()),
            );
        } else if let Some(e) = body_error {
            fail(&mut rec, "reset", &e);
        } else {
            // The gateway's own rule for a whole answer, so both judge a body alike.
            let judged = whole_answer(dialect, status, BodyEnd::Eof, &kept);
            tokens = judged.tokens;
            match judged.error_class {
                None if judged.outcome == Outcome::Incomplete => rec.outcome = "incomplete".into(),
                None => rec.outcome = "completed".into(),
                Some(ErrorClass::InvalidBody) => fail(
                    &mut rec,
                    "invalid_body",
                    "the body is not complete JSON (closed early?)",
                ),
                Some(_) => {
                    let text = String::from_utf8_lossy(&kept);
                    fail(&mut rec, "error_body", text.trim());
                }
            }
        }
    }

    rec.input_tokens = tokens.input;
    rec.reasoning_tokens = tokens.reasoning;
    rec.cache_read_tokens = tokens.cache_read;
    rec.output_tokens = tokens.output;
    if rec.output_tokens.is_some() {
        rec.output_tokens_source = Some("usage".into());
    } else if rec.succeeded() {
        let text = output_text(dialect, rec.streamed, &kept);
        rec.output_tokens = Some(tokenizer.count(&text) as u64);
        rec.output_tokens_source = Some("tokenizer".into());
    }
    if rec.succeeded() {
        if let (Some(first), Some(last), Some(n)) = (
            rec.first_effective_ms,
            rec.last_effective_ms,
            rec.output_tokens,
        ) {
            if n >= 2 && last > first {
                let itl = (last - first) / (n - 1) as f64;
                rec.itl_ms = Some(itl);
                rec.output_tps_per_user = Some(1000.0 / itl);
            }
        }
    }
    read_gateway(&mut rec, &head, &kept);
    rec
}

fn fail(rec: &mut RequestRecord, kind: &str, message: &str) {
    rec.outcome = "failed".into();
    rec.failure = Some(kind.to_string());
    let mut m: String = message.chars().take(ERROR_CHARS).collect();
    if message.chars().count() > ERROR_CHARS {
        m.push('…');
    }
    rec.error = Some(m);
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// Calls `on(event, data)` for every SSE event of a whole kept body, and `comment(line)` for
/// every comment line.
fn each_event(body: &[u8], on: &mut dyn FnMut(Option<&str>, &str)) {
    let mut scanner = SseScanner::new();
    scanner.feed(body, &mut |item| {
        if let SseItem::Event { event, data, .. } = item {
            on(event, data);
        }
    });
}

/// The text of the error event that ended a stream, for the record.
fn stream_error_text(dialect: Dialect, body: &[u8]) -> String {
    let mut found = None;
    each_event(body, &mut |event, data| {
        let is_error = match dialect {
            Dialect::Chat => data.contains("\"error\""),
            Dialect::Responses => {
                event.is_some_and(|e| e == "error" || e == "response.failed")
                    || data.contains("\"type\":\"error\"")
            }
            Dialect::Messages => event == Some("error") || data.contains("\"type\":\"error\""),
            Dialect::Gemini => data.contains("\"error\""),
        };
        if is_error && found.is_none() {
            found = Some(data.to_string());
        }
    });
    found.unwrap_or_else(|| "in-stream error event".to_string())
}

/// A Gemini response's output text (a chunk's or a whole answer's): text and thought parts, and
/// each function call's arguments as JSON (Gemini sends a call whole).
fn gemini_output(v: &Value, out: &mut String) {
    for candidate in v["candidates"].as_array().into_iter().flatten() {
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if let Some(Value::String(s)) = part.get("text") {
                out.push_str(s);
            }
            if let Some(args) = part["functionCall"].get("args") {
                out.push_str(&args.to_string());
            }
        }
    }
}

/// The output text a tokenizer counts when usage is absent: visible text, reasoning, refusal
/// and tool-call arguments (AIPerf counts text and reasoning; tool arguments are output too).
fn output_text(dialect: Dialect, streamed: bool, body: &[u8]) -> String {
    let mut out = String::new();
    let push = |out: &mut String, v: Option<&Value>| {
        if let Some(Value::String(s)) = v {
            out.push_str(s);
        }
    };
    if streamed {
        each_event(body, &mut |event, data| {
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                return;
            };
            match dialect {
                Dialect::Chat => {
                    for c in v["choices"].as_array().into_iter().flatten() {
                        let d = &c["delta"];
                        for k in ["content", "reasoning_content", "reasoning", "refusal"] {
                            push(&mut out, d.get(k));
                        }
                        for t in d["tool_calls"].as_array().into_iter().flatten() {
                            push(&mut out, t["function"].get("arguments"));
                        }
                    }
                }
                Dialect::Responses => {
                    let ty = event
                        .map(str::to_string)
                        .or_else(|| v["type"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    if ty.ends_with(".delta") {
                        push(&mut out, v.get("delta"));
                    }
                }
                Dialect::Messages => {
                    if v["type"] == "content_block_delta" {
                        let d = &v["delta"];
                        for k in ["text", "thinking", "partial_json"] {
                            push(&mut out, d.get(k));
                        }
                    }
                }
                Dialect::Gemini => gemini_output(&v, &mut out),
            }
        });
        return out;
    }
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return out;
    };
    match dialect {
        Dialect::Chat => {
            for c in v["choices"].as_array().into_iter().flatten() {
                let m = &c["message"];
                for k in ["content", "reasoning_content", "reasoning", "refusal"] {
                    push(&mut out, m.get(k));
                }
                for t in m["tool_calls"].as_array().into_iter().flatten() {
                    push(&mut out, t["function"].get("arguments"));
                }
            }
        }
        Dialect::Responses => {
            for item in v["output"].as_array().into_iter().flatten() {
                for part in item["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .chain(item["summary"].as_array().into_iter().flatten())
                {
                    push(&mut out, part.get("text"));
                }
                push(&mut out, item.get("arguments"));
            }
        }
        Dialect::Messages => {
            for block in v["content"].as_array().into_iter().flatten() {
                push(&mut out, block.get("text"));
                push(&mut out, block.get("thinking"));
                if let Some(input) = block.get("input") {
                    out.push_str(&input.to_string());
                }
            }
        }
        Dialect::Gemini => gemini_output(&v, &mut out),
    }
    out
}

/// laptime's own view, when the target is laptime: the `x-laptime-timing` SSE comment of a
/// stream, or `Server-Timing` of a non-streamed answer, and client minus gateway.
fn read_gateway(rec: &mut RequestRecord, head: &HeaderMap, body: &[u8]) {
    let request_id = head
        .get("x-laptime-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut g = GatewayTiming {
        request_id,
        source: "none".into(),
        ..GatewayTiming::default()
    };
    let mut found = false;
    if rec.streamed {
        if let Some(pairs) = timing_comment(body) {
            found = true;
            g.source = "sse_comment".into();
            for (k, v) in pairs {
                match k.as_str() {
                    "upstream_ms" => g.upstream_ms = v.parse().ok(),
                    "ttft_ms" => g.ttft_ms = v.parse().ok(),
                    "cached_tokens" => g.cached_tokens = v.parse().ok(),
                    "cache_write_tokens" => g.cache_write_tokens = v.parse().ok(),
                    "hedge" => g.hedge = Some(v),
                    _ => {}
                }
            }
            g.first_byte_minus_ttft_ms = diff(rec.first_byte_ms, g.ttft_ms);
            g.end_minus_upstream_ms = diff(rec.end_ms, g.upstream_ms);
        }
    } else if let Some(dur) = server_timing_upstream(head) {
        found = true;
        g.source = "server_timing".into();
        g.upstream_ms = Some(dur);
        g.end_minus_upstream_ms = diff(rec.body_end_ms, g.upstream_ms);
    }
    if found || g.request_id.is_some() {
        rec.gateway = Some(g);
    }
}

fn diff(client: Option<f64>, gateway: Option<f64>) -> Option<f64> {
    Some(client? - gateway?)
}

/// The pairs of the first `: x-laptime-timing …` comment line of an SSE body.
pub fn timing_comment(body: &[u8]) -> Option<Vec<(String, String)>> {
    let text = String::from_utf8_lossy(body);
    text.split(['\n', '\r'])
        .filter(|l| l.starts_with(':'))
        .find_map(parse_comment)
}

/// `Server-Timing: upstream;dur=12.5, …` → 12.5.
pub fn server_timing_upstream(head: &HeaderMap) -> Option<f64> {
    head.get_all("server-timing")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|metric| {
            let mut parts = metric.split(';').map(str::trim);
            if parts.next()? != "upstream" {
                return None;
            }
            parts.find_map(|p| p.strip_prefix("dur=")?.trim_matches('"').parse().ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timing_comment_and_server_timing_are_read() {
        let body = b"data: {}\n\n: x-laptime-timing upstream_ms=12.5 ttft_ms=3 hedge=none\n\ndata: [DONE]\n\n";
        let pairs = timing_comment(body).unwrap();
        assert_eq!(pairs[0], ("upstream_ms".into(), "12.5".into()));
        let mut h = HeaderMap::new();
        h.insert(
            "server-timing",
            HeaderValue::from_static("cache;desc=miss, upstream;dur=41.25"),
        );
        assert_eq!(server_timing_upstream(&h), Some(41.25));
    }

    #[test]
    fn output_text_is_read_per_dialect() {
        let chat = b"data: {\"choices\":[{\"delta\":{\"content\":\"Hello\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"reasoning_content\":\" there\"}}]}\n\ndata: [DONE]\n\n";
        assert_eq!(output_text(Dialect::Chat, true, chat), "Hello there");
        let msg = b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n";
        assert_eq!(output_text(Dialect::Messages, true, msg), "Hi");
        let resp = b"{\"output\":[{\"type\":\"message\",\"content\":[{\"type\":\"output_text\",\"text\":\"Yo\"}]}]}";
        assert_eq!(output_text(Dialect::Responses, false, resp), "Yo");
    }
}
