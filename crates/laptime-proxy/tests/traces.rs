//! Request spans over OTLP, against a real receiver started here (HTTP/protobuf on 127.0.0.1,
//! decoding each `ExportTraceServiceRequest`): a gateway in front of a real sim, real sockets,
//! real SQLite. Every instant is compared with the stored record's own values, to the
//! microsecond; nothing depends on how fast the machine is.

#![expect(clippy::unwrap_used, clippy::panic, reason = "tests fail loudly")]

pub mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use laptime_core::timeline::RequestRecord;
use laptime_proxy::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const PROMPT: &str = "PROMPT-marmot-9931 tell me something";
const ANSWER: &str = "zebraquokka one zebraquokka two zebraquokka three";

// === The receiver ===

/// What an OTLP/HTTP receiver got: each export's raw body, as sent.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<Bytes>>>);

impl Received {
    fn bodies(&self) -> Vec<Bytes> {
        self.0.lock().unwrap().clone()
    }

    fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.bodies()
            .iter()
            .map(|b| ExportTraceServiceRequest::decode(b.clone()).unwrap())
            .collect()
    }

    fn spans(&self) -> Vec<Span> {
        self.requests()
            .into_iter()
            .flat_map(|r| r.resource_spans)
            .flat_map(|r| r.scope_spans)
            .flat_map(|s| s.spans)
            .collect()
    }

    fn spans_of(&self, trace_id: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| hex::encode(&s.trace_id) == trace_id)
            .collect()
    }

    /// The spans of `trace_id` once `n` have arrived (at most 10 s).
    async fn wait_for(&self, trace_id: &str, n: usize) -> Vec<Span> {
        for _ in 0..1000 {
            let spans = self.spans_of(trace_id);
            if spans.len() >= n {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} spans of {trace_id} never arrived: {:?}", self.spans());
    }
}

/// An OTLP/HTTP receiver on 127.0.0.1: `POST /v1/traces` with a protobuf body, answered with an
/// `ExportTraceServiceResponse` rejecting `reject` spans. Returns its base URL.
async fn receiver(reject: i64) -> (String, Received) {
    let got = Received::default();
    let kept = got.clone();
    let handler = move |headers: http::HeaderMap, body: Bytes| {
        let kept = kept.clone();
        async move {
            assert_eq!(headers["content-type"], "application/x-protobuf");
            kept.0.lock().unwrap().push(body);
            let answer = ExportTraceServiceResponse {
                partial_success: (reject > 0).then(|| ExportTracePartialSuccess {
                    rejected_spans: reject,
                    error_message: "rejected by the test".into(),
                }),
            };
            (
                [("content-type", "application/x-protobuf")],
                answer.encode_to_vec(),
            )
        }
    };
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

/// An OTLP/gRPC receiver on 127.0.0.1: tonic's server with the proto crate's generated
/// `TraceService`. Returns its endpoint.
async fn grpc_receiver() -> (String, Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };

    struct Service(Received);

    #[tonic::async_trait]
    impl TraceService for Service {
        async fn export(
            &self,
            request: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let body = request.into_inner().encode_to_vec();
            self.0 .0.lock().unwrap().push(body.into());
            Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
        }
    }

    let got = Received::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(Service(got.clone())))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    (format!("http://{addr}"), got)
}

// === Helpers ===

/// A gateway exporting to `endpoint`, batches sent 20 ms after their first request.
async fn traced(endpoint: &str, tweak: impl FnOnce(&mut Config, &str)) -> Harness {
    let endpoint = endpoint.to_string();
    start_with(move |cfg, sim| {
        cfg.telemetry.otlp_endpoint = Some(endpoint);
        cfg.telemetry.schedule_delay_ms = 20;
        cfg.telemetry
            .resource_attributes
            .insert("deployment.environment".into(), "test".into());
        tweak(cfg, sim);
    })
    .await
}

/// A streamed Chat request whose answer has distinct milestones: the head at 10 ms, the first
/// event at 20, reasoning at 40, text from 80 (three deltas at 50/s), cache reads in the usage.
fn scripted(model: &str) -> Value {
    json!({
        "model": model, "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": PROMPT}],
        "laptime_sim": {
            "headers_ms": 10, "first_event_ms": 20,
            "first_effective": {"kind": "reasoning", "at_ms": 40}, "reasoning_deltas": 1,
            "first_text_ms": 80, "text_tokens": 3, "tokens_per_s": 50, "text": ANSWER,
            "usage": {"input_tokens": 30, "cache_read_tokens": 12}
        }
    })
}

/// Posts `body` with a client `traceparent`; returns the request id and the client's bytes.
async fn call(h: &Harness, body: &Value, traceparent: Option<&str>) -> (String, String) {
    let mut req = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.token)
        .json(body);
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let id = request_id(&resp);
    (id, resp.text().await.unwrap())
}

/// The stored record, with its marks at the microsecond the store keeps.
async fn record(h: &Harness, id: &str) -> RequestRecord {
    let row = h.row(id).await;
    let ws = row["workspace_id"].as_str().unwrap();
    h.store.record(ws, id).await.unwrap().unwrap()
}

fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a Any> {
    find(&s.attributes, key)
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attrs
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn string(s: &Span, key: &str) -> Option<String> {
    match attr(s, key)? {
        Any::StringValue(v) => Some(v.clone()),
        other => panic!("{key} is {other:?}"),
    }
}

fn int(s: &Span, key: &str) -> Option<i64> {
    match attr(s, key)? {
        Any::IntValue(v) => Some(*v),
        other => panic!("{key} is {other:?}"),
    }
}

fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// The value of one series in `/metrics` text.
fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// `/metrics` once `series` is at least `at_least` (at most 10 s): the exporter counts a batch
/// when it has read the receiver's answer, a moment after the receiver has the spans.
async fn metrics_once(h: &Harness, series: &str, at_least: f64) -> String {
    for _ in 0..1000 {
        let text = h.metrics().await;
        if metric(&text, series) >= at_least {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{series} never reached {at_least}");
}

fn request_span(spans: &[Span]) -> &Span {
    let servers: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Server as i32)
        .collect();
    assert_eq!(servers.len(), 1, "one request span: {spans:?}");
    servers[0]
}

// === Tests ===

#[tokio::test]
async fn a_streamed_request_is_one_span_under_the_client_span_with_its_milestones_at_the_record_instants(
) {
    let (endpoint, got) = receiver(0).await;
    let h = traced(&endpoint, |_, _| {}).await;
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let (id, client_bytes) = call(&h, &scripted("sim-fast"), Some(&tp)).await;
    assert!(
        client_bytes.contains("zebraquokka"),
        "the answer reached the client"
    );
    let r = record(&h, &id).await;
    let spans = got.wait_for(CLIENT_TRACE, 2).await;
    assert_eq!(spans.len(), 2, "the request and its one attempt: {spans:?}");
    let req = request_span(&spans);

    // A child of the client's span; the upstream was sent its attempt's span, the request
    // span's child.
    assert_eq!(hex::encode(&req.trace_id), CLIENT_TRACE);
    assert_eq!(hex::encode(&req.parent_span_id), CLIENT_SPAN);
    let attempt = spans
        .iter()
        .find(|s| s.kind == SpanKind::Client as i32)
        .unwrap();
    assert_eq!(attempt.parent_span_id, req.span_id);
    let upstream_tp = h.last_sim_request().await["traceparent"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        upstream_tp,
        format!("00-{CLIENT_TRACE}-{}-01", hex::encode(&attempt.span_id))
    );
    assert_eq!(req.name, "chat sim-fast");

    // t0 and t7 at the record's instants; one event per mark the record has, none for the
    // others, each at its mark's offset to the microsecond.
    let t0 = r.created_at_us as u64 * 1000;
    assert_eq!(req.start_time_unix_nano, t0);
    assert_eq!(
        req.end_time_unix_nano - t0,
        nanos(r.marks.handler_done.unwrap())
    );
    let m = &r.marks;
    let expected: Vec<(&str, u64)> = [
        ("laptime.upstream_start", m.upstream_start),
        ("laptime.upstream_headers", m.upstream_headers),
        ("laptime.first_byte", m.first_byte),
        ("laptime.first_event", m.first_event),
        ("laptime.first_effective", m.first_effective),
        ("laptime.first_visible", m.first_visible),
        ("laptime.last_effective", m.last_effective),
        ("laptime.upstream_done", m.upstream_done),
    ]
    .into_iter()
    .filter_map(|(name, mark)| Some((name, nanos(mark?))))
    .collect();
    let events: Vec<(&str, u64)> = req
        .events
        .iter()
        .map(|e| (e.name.as_str(), e.time_unix_nano - t0))
        .collect();
    assert_eq!(events, expected);
    // The milestones the issue names are all there (the script has each of them).
    for name in [
        "laptime.upstream_headers",
        "laptime.first_event",
        "laptime.first_effective",
        "laptime.first_visible",
        "laptime.upstream_done",
    ] {
        assert!(events.iter().any(|(n, _)| *n == name), "{name}: {events:?}");
    }
    // Reasoning came before text, so these are distinct instants.
    assert!(m.first_effective < m.first_visible);

    // The attempt: a child of the request span, from its own marks.
    let attempt = spans
        .iter()
        .find(|s| s.kind == SpanKind::Client as i32)
        .unwrap();
    let a = &r.attempts[0];
    assert_eq!(attempt.parent_span_id, req.span_id);
    assert_eq!(attempt.trace_id, req.trace_id);
    assert_eq!(attempt.start_time_unix_nano - t0, nanos(a.start.unwrap()));
    assert_eq!(attempt.end_time_unix_nano - t0, nanos(a.end.unwrap()));
    assert_eq!(
        string(attempt, "laptime.attempt.role").as_deref(),
        Some("primary")
    );
    assert_eq!(string(attempt, "laptime.channel").as_deref(), Some("sim"));
    assert_eq!(int(attempt, "http.response.status_code"), Some(200));

    // Attributes, from the record.
    assert_eq!(req.kind, SpanKind::Server as i32);
    assert_eq!(req.status.as_ref().unwrap().code, StatusCode::Unset as i32);
    assert_eq!(
        string(req, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(string(req, "gen_ai.provider.name").as_deref(), Some("sim"));
    assert_eq!(
        string(req, "gen_ai.request.model").as_deref(),
        Some("sim-fast")
    );
    assert_eq!(
        int(req, "gen_ai.usage.input_tokens"),
        r.tokens.input.map(|n| n as i64)
    );
    assert_eq!(
        int(req, "gen_ai.usage.output_tokens"),
        r.tokens.output.map(|n| n as i64)
    );
    assert_eq!(int(req, "gen_ai.usage.cache_read.input_tokens"), Some(12));
    assert_eq!(
        string(req, "laptime.request_id").as_deref(),
        Some(id.as_str())
    );
    assert_eq!(string(req, "laptime.outcome").as_deref(), Some("completed"));
    assert_eq!(
        string(req, "laptime.endpoint").as_deref(),
        Some("generation")
    );
    assert_eq!(string(req, "laptime.hedge").as_deref(), Some("none"));
    assert_eq!(int(req, "laptime.failover_count"), Some(0));
    assert_eq!(attr(req, "laptime.stream"), Some(&Any::BoolValue(true)));
    assert_eq!(string(req, "laptime.workspace_id"), r.workspace_id.clone());
    assert_eq!(attr(req, "gen_ai.response.finish_reasons"), None);

    // The resource: service name and the configured attributes.
    let export = got.requests().into_iter().next().unwrap();
    let resource = export.resource_spans[0].resource.clone().unwrap();
    assert_eq!(
        find(&resource.attributes, "service.name"),
        Some(&Any::StringValue("laptime".into()))
    );
    assert_eq!(
        find(&resource.attributes, "deployment.environment"),
        Some(&Any::StringValue("test".into()))
    );

    // Never a prompt, an answer or a credential.
    let bytes: Vec<u8> = got.bodies().concat();
    let text = String::from_utf8_lossy(&bytes);
    for secret in ["marmot", "zebraquokka", "tell me", h.token.as_str()] {
        assert!(!text.contains(secret), "{secret:?} was exported");
    }
    let metrics = metrics_once(&h, "laptime_otel_exported_total", 2.0).await;
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 2.0);
    assert_eq!(
        metric(
            &metrics,
            "laptime_otel_dropped_total{reason=\"queue_full\"}"
        ),
        0.0
    );
    h.stop().await;
}

#[tokio::test]
async fn grpc_export_reaches_a_grpc_receiver_with_the_same_spans() {
    let (endpoint, got) = grpc_receiver().await;
    let h = traced(&endpoint, |cfg, _| {
        cfg.telemetry.otlp_protocol = laptime_proxy::traces::OtlpProtocol::Grpc;
    })
    .await;
    let tp = format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01");
    let (id, _) = call(&h, &scripted("sim-fast"), Some(&tp)).await;
    let r = record(&h, &id).await;
    let spans = got.wait_for(CLIENT_TRACE, 2).await;
    let req = request_span(&spans);
    assert_eq!(hex::encode(&req.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        string(req, "laptime.request_id").as_deref(),
        Some(id.as_str())
    );
    let t0 = r.created_at_us as u64 * 1000;
    let first_visible = req
        .events
        .iter()
        .find(|e| e.name == "laptime.first_visible")
        .unwrap();
    assert_eq!(
        first_visible.time_unix_nano - t0,
        nanos(r.marks.first_visible.unwrap())
    );
    let metrics = metrics_once(&h, "laptime_otel_exported_total", 2.0).await;
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 2.0);
    h.stop().await;
}

#[tokio::test]
async fn a_failover_request_has_a_span_for_each_attempt_under_the_request_span() {
    let (endpoint, got) = receiver(0).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = traced(&endpoint, |cfg, sim| {
        let mut dead = channel("dead", &dead, &["m"]);
        dead.circuit.consecutive_failures = 1000;
        cfg.channels.push(dead);
        let mut backup = channel("backup", sim, &[]);
        backup.models =
            laptime_proxy::config::Models::Map([("m".to_string(), "sim-fast".to_string())].into());
        backup.priority = 1;
        cfg.channels.push(backup);
    })
    .await;
    let trace = "0af7651916cd43dd8448eb211c80319c";
    let (id, _) = call(
        &h,
        &body_for("chat", "m", true),
        Some(&format!("00-{trace}-b7ad6b7169203331-01")),
    )
    .await;
    let r = record(&h, &id).await;
    assert_eq!(r.failover_count, 1);
    let spans = got.wait_for(trace, 3).await;
    assert_eq!(spans.len(), 3, "{spans:?}");
    let req = request_span(&spans);
    assert_eq!(int(req, "laptime.failover_count"), Some(1));
    assert_eq!(string(req, "laptime.channel").as_deref(), Some("backup"));
    let t0 = r.created_at_us as u64 * 1000;
    let attempts: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect();
    assert_eq!(attempts.len(), 2);
    for (span, a) in attempts.iter().zip(&r.attempts) {
        assert_eq!(span.parent_span_id, req.span_id);
        assert_eq!(span.start_time_unix_nano - t0, nanos(a.start.unwrap()));
        assert_eq!(span.end_time_unix_nano - t0, nanos(a.end.unwrap()));
        assert_eq!(
            string(span, "laptime.channel").as_deref(),
            Some(a.channel.as_str())
        );
    }
    let (first, second) = (attempts[0], attempts[1]);
    assert_eq!(first.name, "attempt primary dead");
    assert_eq!(
        first.status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );
    assert_eq!(
        string(first, "laptime.error_class").as_deref(),
        Some("connect_failed")
    );
    assert_eq!(second.name, "attempt failover backup");
    assert_eq!(
        attr(second, "laptime.attempt.won"),
        Some(&Any::BoolValue(true))
    );
    assert_ne!(first.span_id, second.span_id);
    h.stop().await;
}

#[tokio::test]
async fn each_attempt_sends_upstream_the_span_id_it_is_exported_with() {
    let (endpoint, got) = receiver(0).await;
    let h = traced(&endpoint, |cfg, sim| {
        // Both channels are the sim: the first answers 429 (failed over), the second answers.
        let mut limited = channel("limited", sim, &[]);
        limited.models = laptime_proxy::config::Models::Map(
            [("m".to_string(), "sim-rate-limited".to_string())].into(),
        );
        cfg.channels.push(limited);
        let mut backup = channel("backup", sim, &[]);
        backup.models =
            laptime_proxy::config::Models::Map([("m".to_string(), "sim-fast".to_string())].into());
        backup.priority = 1;
        cfg.channels.push(backup);
    })
    .await;
    let trace = "5b8aa5a2d2c872e8321cf37308d69df2";
    let (id, _) = call(
        &h,
        &body_for("chat", "m", true),
        Some(&format!("00-{trace}-051581bf3cb55c13-01")),
    )
    .await;
    let r = record(&h, &id).await;
    assert_eq!(r.failover_count, 1);
    let spans = got.wait_for(trace, 3).await;
    let req = request_span(&spans);
    let exported: Vec<&Span> = spans
        .iter()
        .filter(|s| s.kind == SpanKind::Client as i32)
        .collect();
    assert_eq!(exported.len(), 2, "{spans:?}");
    // What the sim received, in order: each attempt's traceparent names its own span.
    let received: Vec<String> = h
        .sim_requests()
        .await
        .iter()
        .map(|q| q["traceparent"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(received.len(), 2, "{received:?}");
    for ((tp, span), a) in received.iter().zip(&exported).zip(&r.attempts) {
        assert_eq!(
            tp,
            &format!("00-{trace}-{}-01", hex::encode(&span.span_id)),
            "{}",
            a.channel
        );
        assert_eq!(
            span.parent_span_id, req.span_id,
            "a child of the request span"
        );
        assert_eq!(a.span_id.map(|s| s.to_vec()), Some(span.span_id.clone()));
    }
    assert_eq!(
        string(exported[0], "laptime.channel").as_deref(),
        Some("limited")
    );
    assert_ne!(exported[0].span_id, exported[1].span_id);
    assert_ne!(exported[0].span_id, req.span_id);
    h.stop().await;
}

#[tokio::test]
async fn a_failed_request_is_an_error_span() {
    let (endpoint, got) = receiver(0).await;
    let h = traced(&endpoint, |_, _| {}).await;
    let trace = "1af7651916cd43dd8448eb211c80319c";
    let mut body = body_for("chat", "sim-fast", true);
    body["laptime_sim"] = json!({"end": "close", "text_tokens": 2});
    let resp = h
        .http
        .post(h.url("/v1/chat/completions"))
        .bearer_auth(&h.token)
        .header("traceparent", format!("00-{trace}-b7ad6b7169203331-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let id = request_id(&resp);
    let _ = resp.text().await;
    let r = record(&h, &id).await;
    assert_eq!(r.outcome.as_str(), "upstream_closed_early");
    let spans = got.wait_for(trace, 2).await;
    let req = request_span(&spans);
    let status = req.status.clone().unwrap();
    assert_eq!(status.code, StatusCode::Error as i32);
    let class = r.error_class.map(|c| c.as_str().to_string());
    assert_eq!(Some(status.message), class);
    assert_eq!(string(req, "error.type"), class);
    assert_eq!(
        string(req, "laptime.outcome").as_deref(),
        Some("upstream_closed_early")
    );
    assert_eq!(string(req, "laptime.fault").as_deref(), Some("upstream"));
    h.stop().await;
}

#[tokio::test]
async fn sampling_ratio_zero_exports_nothing() {
    let (endpoint, got) = receiver(0).await;
    let h = traced(&endpoint, |cfg, _| cfg.telemetry.sampling_ratio = 0.0).await;
    for _ in 0..3 {
        call(&h, &body_for("chat", "sim-fast", true), None).await;
    }
    let metrics = h.metrics().await;
    // Shutdown exports whatever is queued: after it, nothing queued can still be on its way.
    h.stop().await;
    assert!(got.bodies().is_empty(), "{:?}", got.spans());
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 0.0);
}

#[tokio::test]
async fn a_trace_the_client_did_not_sample_is_not_exported_and_shutdown_sends_what_is_queued() {
    let (endpoint, got) = receiver(0).await;
    // Batches wait a minute: only the shutdown can send them within this test.
    let h = traced(&endpoint, |cfg, _| cfg.telemetry.schedule_delay_ms = 60_000).await;
    let unsampled = "2af7651916cd43dd8448eb211c80319c";
    let sampled = "3af7651916cd43dd8448eb211c80319c";
    call(
        &h,
        &body_for("chat", "sim-fast", true),
        Some(&format!("00-{unsampled}-b7ad6b7169203331-00")),
    )
    .await;
    call(
        &h,
        &body_for("chat", "sim-fast", true),
        Some(&format!("00-{sampled}-b7ad6b7169203331-01")),
    )
    .await;
    // The unsampled trace stays unsampled upstream.
    let seen = h.sim_requests().await;
    let flags: Vec<&str> = seen
        .iter()
        .map(|r| &r["traceparent"].as_str().unwrap()[53..])
        .collect();
    assert_eq!(flags, ["00", "01"]);
    h.stop().await;
    assert_eq!(got.spans_of(unsampled).len(), 0);
    assert_eq!(got.spans_of(sampled).len(), 2, "flushed at shutdown");
}

#[tokio::test]
async fn spans_the_receiver_rejects_are_counted_as_dropped() {
    let (endpoint, got) = receiver(1).await;
    let h = traced(&endpoint, |_, _| {}).await;
    let trace = "4af7651916cd43dd8448eb211c80319c";
    call(
        &h,
        &body_for("chat", "sim-fast", true),
        Some(&format!("00-{trace}-b7ad6b7169203331-01")),
    )
    .await;
    got.wait_for(trace, 2).await;
    let metrics = metrics_once(&h, "laptime_otel_exported_total", 1.0).await;
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 1.0);
    assert_eq!(
        metric(&metrics, "laptime_otel_dropped_total{reason=\"rejected\"}"),
        1.0
    );
    h.stop().await;
}

/// A receiver that accepts connections and never answers.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_receiver_that_never_answers_neither_slows_nor_fails_requests_and_a_full_queue_drops() {
    let endpoint = black_hole().await;
    // One request queued, one being exported (for a minute): every later one is dropped.
    let h = traced(&endpoint, |cfg, _| {
        cfg.telemetry.export_timeout_ms = 60_000;
        cfg.telemetry.max_queue_size = 1;
        cfg.telemetry.max_export_batch_size = 1;
    })
    .await;
    // A request path that waited on the exporter would take a minute per request.
    let ids = tokio::time::timeout(Duration::from_secs(30), async {
        let mut ids = Vec::new();
        for _ in 0..5 {
            let (id, text) = call(&h, &body_for("chat", "sim-fast", true), None).await;
            assert!(text.contains("data: [DONE]"), "{text}");
            ids.push(id);
        }
        ids
    })
    .await
    .expect("requests did not wait on the exporter");
    for id in &ids {
        assert_eq!(h.row(id).await["outcome"], "completed");
    }
    let metrics = h.metrics().await;
    // Five requests of two spans each; at most two requests got past the queue.
    let dropped = metric(
        &metrics,
        "laptime_otel_dropped_total{reason=\"queue_full\"}",
    );
    assert!((6.0..=8.0).contains(&dropped), "{dropped}");
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 0.0);
    h.stop().await;
}

#[tokio::test]
async fn a_receiver_that_is_down_does_not_fail_requests_and_its_spans_are_counted_as_dropped() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let h = traced(&endpoint, |_, _| {}).await;
    for _ in 0..2 {
        let (id, text) = call(&h, &body_for("chat", "sim-fast", true), None).await;
        assert!(text.contains("data: [DONE]"));
        assert_eq!(h.row(&id).await["outcome"], "completed");
    }
    // Each batch is tried three times (after 250 ms and 1 s) before it is dropped.
    let failed = "laptime_otel_dropped_total{reason=\"export_failed\"}";
    let metrics = metrics_once(&h, failed, 4.0).await;
    assert_eq!(
        metric(&metrics, failed),
        4.0,
        "two requests of two spans each"
    );
    assert_eq!(metric(&metrics, "laptime_otel_exported_total"), 0.0);
    h.stop().await;
}
