//! Spans from finished records, pure: one SERVER span per request and one CLIENT span per
//! attempt, at the instants the record says (its wall-clock t0 plus each mark's offset), with
//! the GenAI semantic-convention attributes and laptime's own under `laptime.`.
//!
//! Names follow open-telemetry/semantic-conventions at 7b0c0fe, the GenAI "latest experimental"
//! conventions (`gen_ai.provider.name`, not the deprecated `gen_ai.system`). Only what the record
//! holds is exported: never a prompt, an answer, a key or a key id, and no attribute for a value
//! the record does not have (`gen_ai.response.model` and `gen_ai.response.finish_reasons` are
//! not recorded, so they are never sent).

use std::time::Duration;

use laptime_core::endpoint::Endpoint;
use laptime_core::timeline::{Attempt, RequestRecord};
use laptime_core::Dialect;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::span::{Event, SpanKind};
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};

use crate::ingress::SpanIds;

/// What the exporter keeps of one finished request until it is sent.
#[derive(Debug, Clone)]
pub struct Finished {
    pub record: RequestRecord,
    pub ids: SpanIds,
}

impl Finished {
    /// The spans this request exports: its own and one per attempt.
    pub fn span_count(&self) -> u64 {
        1 + self.record.attempts.len() as u64
    }
}

/// W3C trace flags: sampled.
const SAMPLED: u32 = 0x01;
/// OTLP `SpanFlags`: the span's flags say whether its parent is remote ...
const HAS_IS_REMOTE: u32 = 0x100;
/// ... and it is.
const IS_REMOTE: u32 = 0x200;

/// The request span's marks that become events, in timeline order: (event name, mark).
type Milestone = (
    &'static str,
    fn(&laptime_core::timeline::Marks) -> Option<Duration>,
);
const MILESTONES: [Milestone; 8] = [
    ("laptime.upstream_start", |m| m.upstream_start),
    ("laptime.upstream_headers", |m| m.upstream_headers),
    ("laptime.first_byte", |m| m.first_byte),
    ("laptime.first_event", |m| m.first_event),
    ("laptime.first_effective", |m| m.first_effective),
    ("laptime.first_visible", |m| m.first_visible),
    ("laptime.last_effective", |m| m.last_effective),
    ("laptime.upstream_done", |m| m.upstream_done),
];

/// The resource every span is exported under: `service.name`, `service.version`, then the
/// configured attributes (which may override the first two).
pub fn resource(service_name: &str, attributes: &[(String, String)]) -> Resource {
    let mut attrs = vec![
        kv("service.name", service_name),
        kv("service.version", env!("CARGO_PKG_VERSION")),
    ];
    for (k, v) in attributes {
        attrs.retain(|a| &a.key != k);
        attrs.push(kv(k, v.as_str()));
    }
    Resource {
        attributes: attrs,
        ..Resource::default()
    }
}

/// One `ResourceSpans` with the spans of `batch`; `new_span_id` gives an id to an attempt that
/// has none of its own (every attempt the gateway dispatches draws one).
pub fn resource_spans(
    resource: &Resource,
    batch: &[Finished],
    new_span_id: &mut dyn FnMut() -> [u8; 8],
) -> ResourceSpans {
    let spans = batch.iter().flat_map(|f| spans(f, new_span_id)).collect();
    ResourceSpans {
        resource: Some(resource.clone()),
        scope_spans: vec![ScopeSpans {
            scope: Some(InstrumentationScope {
                name: "laptime".into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..InstrumentationScope::default()
            }),
            spans,
            schema_url: String::new(),
        }],
        schema_url: String::new(),
    }
}

/// The request span, then one span per attempt, in the record's order.
pub fn spans(f: &Finished, new_span_id: &mut dyn FnMut() -> [u8; 8]) -> Vec<Span> {
    let r = &f.record;
    let t0_ns = u64::try_from(r.created_at_us)
        .unwrap_or(0)
        .saturating_mul(1000);
    let at = |offset: Duration| t0_ns.saturating_add(nanos(offset));
    let end = at(r.marks.handler_done.unwrap_or_default());
    let operation = operation(r);
    let name = match &r.model {
        Some(m) => format!("{operation} {m}"),
        None => operation.to_string(),
    };
    let events = MILESTONES
        .iter()
        .filter_map(|(name, mark)| Some(event(name, at(mark(&r.marks)?))))
        .collect();
    let mut out = Vec::with_capacity(1 + r.attempts.len());
    out.push(Span {
        trace_id: f.ids.trace_id.to_vec(),
        span_id: f.ids.span_id.to_vec(),
        parent_span_id: f.ids.parent_span_id.map(|p| p.to_vec()).unwrap_or_default(),
        flags: SAMPLED
            | HAS_IS_REMOTE
            | if f.ids.parent_span_id.is_some() {
                IS_REMOTE
            } else {
                0
            },
        name,
        kind: SpanKind::Server as i32,
        start_time_unix_nano: t0_ns,
        end_time_unix_nano: end,
        attributes: request_attributes(r, operation),
        events,
        status: Some(request_status(r)),
        ..Span::default()
    });
    for a in &r.attempts {
        // The id the attempt was dispatched with: the parent id its upstream was sent.
        let id = a.span_id.unwrap_or_else(&mut *new_span_id);
        out.push(attempt_span(f, a, (t0_ns, end), id));
    }
    out
}

/// A child of the request span for one upstream attempt, from its own marks. An attempt whose
/// end the record does not have (a stream the client left) ends with the request, and says so.
fn attempt_span(f: &Finished, a: &Attempt, (t0_ns, end_ns): (u64, u64), id: [u8; 8]) -> Span {
    let at = |offset: Duration| t0_ns.saturating_add(nanos(offset));
    let start = a.start.map_or(t0_ns, at);
    let end = a.end.map_or(end_ns, at).max(start);
    let mut attributes = vec![
        kv("laptime.attempt.role", a.role.as_str()),
        kv("laptime.attempt.won", a.won),
        kv("laptime.channel", a.channel.as_str()),
    ];
    if let Some(s) = a.status {
        attributes.push(kv("http.response.status_code", i64::from(s)));
    }
    if let Some(c) = a.error_class {
        attributes.push(kv("laptime.error_class", c.as_str()));
        attributes.push(kv("laptime.fault", c.fault().as_str()));
        attributes.push(kv("error.type", c.as_str()));
    }
    if a.end.is_none() {
        attributes.push(kv("laptime.attempt.ended_with_request", true));
    }
    let events = [
        ("laptime.upstream_headers", a.headers),
        ("laptime.first_byte", a.first_byte),
    ]
    .into_iter()
    .filter_map(|(name, mark)| Some(event(name, at(mark?))))
    .collect();
    let status = match a.error_class {
        Some(c) => Status {
            message: c.as_str().into(),
            code: status::StatusCode::Error as i32,
        },
        None => Status::default(),
    };
    Span {
        trace_id: f.ids.trace_id.to_vec(),
        span_id: id.to_vec(),
        parent_span_id: f.ids.span_id.to_vec(),
        flags: SAMPLED | HAS_IS_REMOTE,
        name: format!("attempt {} {}", a.role.as_str(), a.channel),
        kind: SpanKind::Client as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        events,
        status: Some(status),
        ..Span::default()
    }
}

/// `gen_ai.operation.name`: `chat` for a model call (`generate_content` when the client spoke
/// Gemini), `embeddings`, else the endpoint's own name (no semconv value names it).
fn operation(r: &RequestRecord) -> &'static str {
    match r.exchange.endpoint {
        Endpoint::Generation if r.dialect == Dialect::Gemini => "generate_content",
        Endpoint::Generation => "chat",
        Endpoint::Embeddings => "embeddings",
        other => other.as_str(),
    }
}

/// `gen_ai.provider.name`: the semconv's name for a provider it lists, else laptime's.
fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        other => other,
    }
}

fn request_status(r: &RequestRecord) -> Status {
    if r.outcome.is_success() {
        return Status::default();
    }
    Status {
        message: error_type(r).into(),
        code: status::StatusCode::Error as i32,
    }
}

/// `error.type`: the error class, else the outcome (as `/metrics`' `error_type`).
fn error_type(r: &RequestRecord) -> &'static str {
    r.error_class.map_or(r.outcome.as_str(), |c| c.as_str())
}

fn request_attributes(r: &RequestRecord, operation: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(40);
    a.push(kv("gen_ai.operation.name", operation));
    let mut opt = |key: &'static str, v: Option<Value>| {
        if let Some(v) = v {
            a.push(kv(key, v));
        }
    };
    let s = |v: &Option<String>| v.as_deref().map(Value::from);
    let n = |v: Option<u64>| v.map(|n| Value::Int(i64::try_from(n).unwrap_or(i64::MAX)));
    let ms = |d: Option<Duration>| d.map(|d| Value::Double(d.as_secs_f64() * 1000.0));
    opt(
        "gen_ai.provider.name",
        r.provider.as_deref().map(|p| provider_name(p).into()),
    );
    opt("gen_ai.request.model", s(&r.model));
    opt(
        "gen_ai.request.stream",
        r.stream.then_some(Value::Bool(true)),
    );
    opt("gen_ai.request.max_tokens", n(r.shape.max_output_tokens));
    opt(
        "gen_ai.request.temperature",
        r.shape.temperature.map(Value::Double),
    );
    opt("gen_ai.request.top_p", r.shape.top_p.map(Value::Double));
    opt("gen_ai.usage.input_tokens", n(r.tokens.input));
    opt("gen_ai.usage.output_tokens", n(r.tokens.output));
    opt(
        "gen_ai.usage.cache_read.input_tokens",
        n(r.tokens.cache_read),
    );
    opt(
        "gen_ai.usage.cache_creation.input_tokens",
        n(r.tokens.cache_write),
    );
    opt(
        "gen_ai.usage.reasoning.output_tokens",
        n(r.tokens.reasoning),
    );
    opt(
        "http.response.status_code",
        Some(Value::Int(i64::from(r.status))),
    );
    let failed = !r.outcome.is_success();
    opt("error.type", failed.then(|| error_type(r).into()));
    opt("laptime.request_id", Some(r.request_id.as_str().into()));
    opt("laptime.workspace_id", s(&r.workspace_id));
    opt("laptime.dialect", Some(r.dialect.as_str().into()));
    opt(
        "laptime.upstream_dialect",
        r.upstream_dialect.map(|d| d.as_str().into()),
    );
    opt(
        "laptime.endpoint",
        Some(r.exchange.endpoint.as_str().into()),
    );
    opt("laptime.channel", s(&r.channel));
    opt("laptime.group", s(&r.group));
    opt("laptime.outcome", Some(r.outcome.as_str().into()));
    opt(
        "laptime.classification",
        Some(r.classification.as_str().into()),
    );
    opt(
        "laptime.flags",
        (!r.flags.is_empty()).then(|| Value::Strings(r.flags.iter().map(|f| f.as_str()).collect())),
    );
    opt("laptime.fault", r.fault().map(|f| f.as_str().into()));
    opt(
        "laptime.error_class",
        r.error_class.map(|c| c.as_str().into()),
    );
    opt(
        "laptime.timeout_kind",
        r.timeout_kind.map(|k| k.as_str().into()),
    );
    opt(
        "laptime.refused_by",
        r.refused_by.map(|l| l.as_str().into()),
    );
    opt("laptime.stream", Some(Value::Bool(r.stream)));
    opt("laptime.cached", Some(Value::Bool(r.cached)));
    opt("laptime.hedge", Some(r.hedge.as_str().into()));
    opt(
        "laptime.failover_count",
        Some(Value::Int(i64::from(r.failover_count))),
    );
    opt("laptime.cost_usd", r.cost.map(|c| Value::Double(c.usd())));
    opt(
        "laptime.cost_estimated",
        r.cost.map(|c| Value::Bool(c.estimated)),
    );
    opt(
        "laptime.event_count",
        Some(Value::Int(i64::from(r.event_count))),
    );
    opt(
        "laptime.text_delta_count",
        Some(Value::Int(i64::from(r.text_delta_count))),
    );
    opt("laptime.bytes_in", n(r.exchange.bytes_in));
    opt("laptime.bytes_out", n(r.exchange.bytes_out));
    opt("laptime.auth_ms", ms(r.marks.auth));
    opt("laptime.body_read_ms", ms(r.marks.body_read));
    opt("laptime.admission_ms", ms(r.marks.admission));
    opt("laptime.distribution_ms", ms(r.marks.distribution));
    opt("laptime.region", s(&r.region));
    opt("laptime.instance", s(&r.instance));
    a
}

/// An attribute value.
enum Value {
    Str(String),
    Strings(Vec<&'static str>),
    Bool(bool),
    Int(i64),
    Double(f64),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

fn kv(key: &str, value: impl Into<Value>) -> KeyValue {
    let value = match value.into() {
        Value::Str(s) => any_value::Value::StringValue(s),
        Value::Strings(list) => any_value::Value::ArrayValue(ArrayValue {
            values: list
                .into_iter()
                .map(|s| AnyValue {
                    value: Some(any_value::Value::StringValue(s.into())),
                })
                .collect(),
        }),
        Value::Bool(b) => any_value::Value::BoolValue(b),
        Value::Int(n) => any_value::Value::IntValue(n),
        Value::Double(x) => any_value::Value::DoubleValue(x),
    };
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

fn event(name: &str, time_unix_nano: u64) -> Event {
    Event {
        time_unix_nano,
        name: name.into(),
        ..Event::default()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use laptime_core::cost::PriceTable;
    use laptime_core::slow::Thresholds;
    use laptime_core::timeline::{AttemptRole, ErrorClass, Outcome};
    use laptime_core::usage::Tokens;
    use tokio::time::Instant;

    use super::*;
    use crate::record::{build, Ending, Pending};

    const T0_US: i64 = 1_700_000_000_123_456;

    fn us(n: u64) -> Option<Duration> {
        Some(Duration::from_micros(n))
    }

    /// A streamed request that failed over once: the first attempt refused (503), the second
    /// answered.
    fn finished(outcome: Outcome) -> Finished {
        let mut p = Pending::new(Instant::now(), T0_US, "req_1".into(), Dialect::Chat);
        p.workspace_id = Some("ws_1".into());
        p.model = Some("gpt-4.1-mini".into());
        p.provider = Some("openai".into());
        p.channel = Some("b".into());
        p.stream = true;
        p.marks.upstream_start = us(20_000);
        p.marks.upstream_headers = us(120_001);
        p.marks.first_event = us(200_002);
        p.marks.first_effective = us(1_010_003);
        p.marks.upstream_done = us(3_010_004);
        let mut first =
            Attempt::dispatched("a", AttemptRole::Primary, Duration::from_micros(5_000));
        first.status = Some(503);
        first.headers = us(15_000);
        first.end = us(15_500);
        first.error_class = Some(ErrorClass::UpstreamStatus5xx);
        first.span_id = Some([0x44; 8]);
        let mut second =
            Attempt::dispatched("b", AttemptRole::Failover, Duration::from_micros(20_000));
        second.won = true;
        second.status = Some(200);
        second.headers = us(120_001);
        p.attempts = vec![first, second];
        let mut ending = Ending::rejected(200, ErrorClass::Internal);
        ending.outcome = outcome;
        ending.error_class = None;
        let prices = PriceTable::EMPTY;
        let mut record = build(
            p,
            ending,
            Duration::from_micros(3_020_123),
            (&Thresholds::default(), &prices),
        );
        record.tokens = Tokens {
            input: Some(100),
            output: Some(5),
            cache_read: Some(40),
            ..Tokens::default()
        };
        Finished {
            record,
            ids: SpanIds {
                trace_id: [0xab; 16],
                span_id: [0x11; 8],
                parent_span_id: Some([0x22; 8]),
                sampled: true,
            },
        }
    }

    fn attr<'a>(s: &'a Span, key: &str) -> Option<&'a any_value::Value> {
        s.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
    }

    fn str_attr(s: &Span, key: &str) -> Option<String> {
        match attr(s, key)? {
            any_value::Value::StringValue(v) => Some(v.clone()),
            _ => None,
        }
    }

    #[test]
    fn the_request_span_continues_the_client_span_at_the_record_instants() {
        let f = finished(Outcome::Completed);
        let mut next = 0u8;
        let spans = spans(&f, &mut || {
            next += 1;
            [next; 8]
        });
        let req = &spans[0];
        assert_eq!(req.name, "chat gpt-4.1-mini");
        assert_eq!(req.kind, SpanKind::Server as i32);
        assert_eq!(req.trace_id, vec![0xab; 16]);
        assert_eq!(req.span_id, vec![0x11; 8]);
        assert_eq!(req.parent_span_id, vec![0x22; 8]);
        assert_eq!(req.flags, SAMPLED | HAS_IS_REMOTE | IS_REMOTE);
        let t0 = 1_700_000_000_123_456_000;
        assert_eq!(req.start_time_unix_nano, t0);
        assert_eq!(req.end_time_unix_nano, t0 + 3_020_123_000);
        let events: Vec<(&str, u64)> = req
            .events
            .iter()
            .map(|e| (e.name.as_str(), e.time_unix_nano - t0))
            .collect();
        // Absent marks (first byte, first visible, last effective) have no event.
        assert_eq!(
            events,
            [
                ("laptime.upstream_start", 20_000_000),
                ("laptime.upstream_headers", 120_001_000),
                ("laptime.first_event", 200_002_000),
                ("laptime.first_effective", 1_010_003_000),
                ("laptime.upstream_done", 3_010_004_000),
            ]
        );
        assert_eq!(req.status, Some(Status::default()));
        assert_eq!(
            str_attr(req, "gen_ai.provider.name").as_deref(),
            Some("openai")
        );
        assert_eq!(
            str_attr(req, "laptime.request_id").as_deref(),
            Some("req_1")
        );
        assert_eq!(
            str_attr(req, "laptime.outcome").as_deref(),
            Some("completed")
        );
        assert_eq!(
            attr(req, "gen_ai.usage.cache_read.input_tokens"),
            Some(&any_value::Value::IntValue(40))
        );
        assert_eq!(
            attr(req, "laptime.failover_count"),
            Some(&any_value::Value::IntValue(1))
        );
        // Not recorded, so not sent.
        for absent in [
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.response.model",
            "gen_ai.response.finish_reasons",
            "error.type",
        ] {
            assert_eq!(attr(req, absent), None, "{absent}");
        }
        // Costed before its tokens were set: not billed, so free (0, not absent).
        assert_eq!(
            attr(req, "laptime.cost_usd"),
            Some(&any_value::Value::DoubleValue(0.0))
        );
    }

    #[test]
    fn each_attempt_is_a_child_span_with_its_own_marks() {
        let f = finished(Outcome::Completed);
        let spans = spans(&f, &mut || [0x33; 8]);
        assert_eq!(spans.len(), 3);
        let t0 = 1_700_000_000_123_456_000;
        let (first, second) = (&spans[1], &spans[2]);
        for a in [first, second] {
            assert_eq!(a.parent_span_id, vec![0x11; 8]);
            assert_eq!(a.trace_id, vec![0xab; 16]);
            assert_eq!(a.kind, SpanKind::Client as i32);
        }
        assert_eq!(first.name, "attempt primary a");
        assert_eq!(first.start_time_unix_nano - t0, 5_000_000);
        assert_eq!(first.end_time_unix_nano - t0, 15_500_000);
        assert_eq!(
            first.status.as_ref().map(|s| s.code),
            Some(status::StatusCode::Error as i32)
        );
        assert_eq!(
            str_attr(first, "laptime.error_class").as_deref(),
            Some("upstream_status_5xx")
        );
        assert_eq!(first.events.len(), 1, "headers only: no first byte");
        // The winner's end is the upstream's (upstream_done), from the record.
        assert_eq!(second.name, "attempt failover b");
        assert_eq!(second.end_time_unix_nano - t0, 3_010_004_000);
        assert_eq!(attr(second, "laptime.attempt.ended_with_request"), None);
        // The id an attempt was dispatched with is its span's; one without is given one.
        assert_eq!(first.span_id, vec![0x44; 8]);
        assert_eq!(second.span_id, vec![0x33; 8]);
    }

    #[test]
    fn an_unsuccessful_request_is_an_error_span_naming_its_class() {
        let mut f = finished(Outcome::UpstreamClosedEarly);
        f.record.error_class = Some(ErrorClass::ClosedEarly);
        let spans = spans(&f, &mut || [0x33; 8]);
        let req = &spans[0];
        let status = req.status.clone().unwrap_or_default();
        assert_eq!(status.code, status::StatusCode::Error as i32);
        assert_eq!(status.message, "closed_early");
        assert_eq!(str_attr(req, "error.type").as_deref(), Some("closed_early"));
        assert_eq!(str_attr(req, "laptime.fault").as_deref(), Some("upstream"));
    }

    #[test]
    fn a_root_request_span_has_no_parent_and_gemini_is_generate_content() {
        let mut f = finished(Outcome::Completed);
        f.ids.parent_span_id = None;
        f.record.dialect = Dialect::Gemini;
        f.record.provider = Some("gemini".into());
        let spans = spans(&f, &mut || [0x33; 8]);
        assert!(spans[0].parent_span_id.is_empty());
        assert_eq!(spans[0].flags, SAMPLED | HAS_IS_REMOTE);
        assert_eq!(spans[0].name, "generate_content gpt-4.1-mini");
        assert_eq!(
            str_attr(&spans[0], "gen_ai.provider.name").as_deref(),
            Some("gcp.gemini")
        );
    }

    #[test]
    fn configured_resource_attributes_override_the_defaults() {
        let r = resource(
            "laptime",
            &[
                ("deployment.environment".into(), "prod".into()),
                ("service.name".into(), "edge".into()),
            ],
        );
        let names: Vec<(&str, String)> = r
            .attributes
            .iter()
            .map(|a| {
                let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(any_value::Value::StringValue(s)) => s.clone(),
                    _ => String::new(),
                };
                (a.key.as_str(), v)
            })
            .collect();
        assert!(names.contains(&("service.name", "edge".into())));
        assert!(names.contains(&("deployment.environment", "prod".into())));
        assert_eq!(
            names.iter().filter(|(k, _)| *k == "service.name").count(),
            1
        );
    }
}
