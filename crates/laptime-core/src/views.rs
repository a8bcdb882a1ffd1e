//! The two vocabularies a record is read in — `other.timing` (snake_case, REST) and the usage
//! API's figures (`latencyMs`, `ttftMs`, `upstreamMs`) — and the in-band timing line clients get.
//! All three derive from the same marks, so they cannot disagree.

use std::time::Duration;

use serde::Serialize;

use crate::slow::{judge, visible_output_tps, Flag, Judgement, Thresholds};
use crate::timeline::{
    between, Attempt, ErrorClass, Hedge, InBandCarrier, Marks, Outcome, RequestRecord, RequestShape,
};
use crate::usage::Tokens;
use crate::Dialect;

/// Milliseconds with microsecond precision (the store keeps microseconds).
pub fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// Appends `d` as [`ms`] displays it (`{}` of the `f64`): whole milliseconds, then up to three
/// decimals without trailing zeros. On every answer's `Server-Timing`, where formatting the
/// float was about a hundredth of a non-streamed call's CPU. The text is the same: for any
/// duration a request lasts (the test checks to eleven days) the float's shortest decimal is
/// the duration's own figure to the microsecond.
pub fn push_ms(out: &mut String, d: Duration) {
    use std::fmt::Write;
    let us = d.as_micros();
    let _ = write!(out, "{}", us / 1000);
    let frac = us % 1000;
    if frac != 0 {
        let digits = [
            b'.',
            b'0' + (frac / 100) as u8,
            b'0' + (frac / 10 % 10) as u8,
            b'0' + (frac % 10) as u8,
        ];
        let keep = 4 - usize::from(frac.is_multiple_of(10)) - usize::from(frac.is_multiple_of(100));
        out.extend(digits[..keep].iter().map(|&b| char::from(b)));
    }
}

fn opt_ms(d: Option<Duration>) -> Option<f64> {
    d.map(ms)
}

/// A figure derived from stored marks (a percentile, a mean, a rate), read back at the
/// precision the marks are stored at: three decimals, a microsecond for milliseconds. More
/// digits (`10201.169837304391`) would claim a precision nothing measured.
pub fn stored_precision(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// `other.timing`: phase durations, and milestones as offsets from t0 (upstream headers from t1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimingView {
    pub auth_ms: Option<f64>,
    /// The rate-limit and budget checks; absent when no limit applies.
    pub admission_ms: Option<f64>,
    pub distribution_ms: Option<f64>,
    pub body_read_ms: Option<f64>,
    /// t2 − t1: the origin is the upstream start, not t0.
    pub upstream_headers_ms: Option<f64>,
    pub first_sse_event_ms: Option<f64>,
    pub first_response_ms: Option<f64>,
    pub first_text_delta_ms: Option<f64>,
    pub upstream_done_ms: Option<f64>,
    /// The last effective output, from t0: after it, up to upstream done, nothing was
    /// generated (a stall shows as the gap).
    pub last_effective_ms: Option<f64>,
    pub total_handler_ms: Option<f64>,
    /// Output tokens ÷ (t6 − t5) seconds, over a window long enough to mean something (see
    /// [`crate::slow::visible_output_tps`]).
    pub visible_output_tps: Option<f64>,
    /// `visible_output_tps` counts the gateway's estimate of the output tokens (the provider
    /// reported none).
    pub visible_output_tps_estimated: bool,
}

impl TimingView {
    pub fn new(marks: &Marks, tokens: &Tokens) -> Self {
        let tps = visible_output_tps(marks, tokens.output_for_speed());
        TimingView {
            auth_ms: opt_ms(marks.auth),
            admission_ms: opt_ms(marks.admission),
            distribution_ms: opt_ms(marks.distribution),
            body_read_ms: opt_ms(marks.body_read),
            upstream_headers_ms: opt_ms(between(marks.upstream_start, marks.upstream_headers)),
            first_sse_event_ms: opt_ms(marks.first_event),
            first_response_ms: opt_ms(marks.first_effective),
            first_text_delta_ms: opt_ms(marks.first_visible),
            upstream_done_ms: opt_ms(marks.upstream_done),
            last_effective_ms: opt_ms(marks.last_effective),
            total_handler_ms: opt_ms(marks.handler_done),
            visible_output_tps: tps.map(stored_precision),
            visible_output_tps_estimated: tps.is_some() && tokens.output_estimated(),
        }
    }
}

/// t7 − t0. Always present on a finished record (the handler end is always stamped).
/// t7 − t0: present for every request the gateway saw to its end; absent (never 0) only for one
/// recorded `gateway_crashed`, which never got a t7.
pub fn latency_ms(marks: &Marks) -> Option<f64> {
    opt_ms(marks.handler_done)
}

/// First response byte of the winning attempt, from its dispatch (hedged: the primary's).
pub fn ttft_ms(marks: &Marks) -> Option<f64> {
    opt_ms(between(marks.upstream_start, marks.first_byte))
}

/// Upstream done, from the winning attempt's dispatch.
pub fn upstream_ms(marks: &Marks) -> Option<f64> {
    opt_ms(between(marks.upstream_start, marks.upstream_done))
}

/// The values a client gets in-band: the SSE comment before the terminal frame and the trailers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InBand {
    pub upstream_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub cached_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    pub hedge: Hedge,
}

/// Trailer names, in the order the comment lists the same values.
pub const TRAILER_NAMES: [&str; 5] = [
    "x-laptime-upstream-ms",
    "x-laptime-ttft-ms",
    "x-laptime-cached-tokens",
    "x-laptime-cache-write-tokens",
    "x-laptime-hedge",
];

impl InBand {
    pub fn new(marks: &Marks, tokens: &Tokens, hedge: Hedge) -> Self {
        InBand {
            upstream_ms: upstream_ms(marks),
            ttft_ms: ttft_ms(marks),
            cached_tokens: tokens.cache_read,
            cache_write_tokens: tokens.cache_write,
            hedge,
        }
    }

    pub fn of_record(r: &RequestRecord) -> Self {
        InBand::new(&r.marks, &r.tokens, r.hedge)
    }

    /// Calls `f` with each `(name, value)` pair, absent values left out (never written as 0).
    fn each_pair(&self, mut f: impl FnMut(&'static str, &dyn std::fmt::Display)) {
        if let Some(v) = self.upstream_ms {
            f("upstream_ms", &v);
        }
        if let Some(v) = self.ttft_ms {
            f("ttft_ms", &v);
        }
        if let Some(v) = self.cached_tokens {
            f("cached_tokens", &v);
        }
        if let Some(v) = self.cache_write_tokens {
            f("cache_write_tokens", &v);
        }
        f("hedge", &self.hedge.as_str());
    }

    /// `(name, value)` pairs, absent values left out (never written as 0).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::with_capacity(5);
        self.each_pair(|k, v| out.push((k, v.to_string())));
        out
    }

    /// The SSE comment block, blank line included: `: x-laptime-timing k=v …\n\n`. Written
    /// into one buffer: it goes once per stream, and a string per value was most of its cost.
    pub fn comment(&self) -> String {
        use std::fmt::Write as _;
        let mut line = String::with_capacity(128);
        line.push_str(": x-laptime-timing");
        self.each_pair(|k, v| {
            // Writing into a `String` cannot fail.
            let _ = write!(line, " {k}={v}");
        });
        line.push_str("\n\n");
        line
    }

    /// The same values as HTTP trailers.
    pub fn trailers(&self) -> Vec<(&'static str, String)> {
        self.pairs()
            .into_iter()
            .map(|(k, v)| {
                let name = match k {
                    "upstream_ms" => TRAILER_NAMES[0],
                    "ttft_ms" => TRAILER_NAMES[1],
                    "cached_tokens" => TRAILER_NAMES[2],
                    "cache_write_tokens" => TRAILER_NAMES[3],
                    _ => TRAILER_NAMES[4],
                };
                (name, v)
            })
            .collect()
    }
}

/// What reading a record back needs from the running config.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    /// The classifier's thresholds, to say how far each stage was from its own.
    pub thresholds: Thresholds,
    /// `[server] gemini_timing_comment`: a Gemini client gets the comment only when set.
    pub gemini_timing_comment: bool,
}

/// How the client got the timing in-band, as the API names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// The SSE comment before the terminal frame (trailers may have gone too: see
    /// [`InBandSent::trailers`]).
    SseComment,
    /// HTTP trailers only (`TE: trailers`), no comment.
    Trailers,
    /// The `Server-Timing` header of a whole or relayed answer.
    ServerTiming,
    /// Nothing: the note says why.
    NotSent,
    /// A record from before the carrier was noted, which cannot tell whether the comment was
    /// sent: the note says on what it depended.
    Unknown,
}

impl Carrier {
    pub fn as_str(self) -> &'static str {
        match self {
            Carrier::SseComment => "sse_comment",
            Carrier::Trailers => "trailers",
            Carrier::ServerTiming => "server_timing",
            Carrier::NotSent => "none",
            Carrier::Unknown => "unknown",
        }
    }
}

/// What the client actually received in-band. A record notes what the respond path sent, as it
/// sent it ([`RequestRecord::in_band`]); a record written before that was noted is read by the
/// rules the relay follows (the comment goes before the upstream's terminal frame, so a stream
/// cut, stalled or broken before it carried no timing line), and says it was derived.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InBandSent {
    /// `sse_comment`, `trailers`, `server_timing`, `none` or `unknown`.
    pub carrier: &'static str,
    /// Whether the values also went as HTTP trailers; null when derived (the record of an
    /// older gateway does not say).
    pub trailers: Option<bool>,
    /// The exact line the client got (the comment without its blank line, the header, or the
    /// trailer fields one a line); null when none was sent or the record cannot tell.
    pub line: Option<String>,
    /// Why no line was sent, or why the record cannot tell; null when one was sent.
    pub note: Option<&'static str>,
    /// Read from the record's other fields (it was written before the gateway noted what it
    /// sent), not the stored fact.
    pub derived: bool,
}

impl InBandSent {
    pub fn of_record(r: &RequestRecord, reading: &Reading) -> Self {
        let Some(sent) = r.in_band else {
            let (carrier, note) = in_band_carrier(r, reading);
            let line = match carrier {
                Carrier::SseComment => Some(comment_line(r)),
                Carrier::ServerTiming => server_timing_line(r, true),
                _ => None,
            };
            return InBandSent {
                carrier: carrier.as_str(),
                trailers: None,
                line,
                note,
                derived: true,
            };
        };
        let (carrier, line) = match sent {
            InBandCarrier::SseComment | InBandCarrier::SseCommentAndTrailers => {
                (Carrier::SseComment, Some(comment_line(r)))
            }
            InBandCarrier::Trailers => (Carrier::Trailers, Some(trailer_lines(r))),
            InBandCarrier::ServerTiming => (Carrier::ServerTiming, server_timing_line(r, true)),
            InBandCarrier::ServerTimingHead => {
                (Carrier::ServerTiming, server_timing_line(r, false))
            }
            InBandCarrier::NotSent => (Carrier::NotSent, None),
        };
        let note = (sent == InBandCarrier::NotSent).then(|| match in_band_carrier(r, reading) {
            (Carrier::NotSent, Some(why)) => why,
            _ => "the gateway sent no timing line, no trailers and no Server-Timing",
        });
        InBandSent {
            carrier: carrier.as_str(),
            trailers: Some(sent.trailers()),
            line,
            note,
            derived: false,
        }
    }
}

/// The SSE comment as the client got it, without its blank line.
fn comment_line(r: &RequestRecord) -> String {
    InBand::of_record(r).comment().trim_end().to_string()
}

/// The trailer fields, one `name: value` a line.
fn trailer_lines(r: &RequestRecord) -> String {
    InBand::of_record(r)
        .trailers()
        .into_iter()
        .map(|(name, value)| format!("{name}: {value}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `Server-Timing` header: the upstream's duration (`with_upstream`: a whole answer, whose
/// end was known) and its time to the head.
fn server_timing_line(r: &RequestRecord, with_upstream: bool) -> Option<String> {
    let head = between(r.marks.upstream_start, r.marks.upstream_headers)
        .map(|h| format!("upstream-headers;dur={}", ms(h)));
    if !with_upstream {
        return head.map(|h| format!("Server-Timing: {h}"));
    }
    upstream_ms(&r.marks).map(|up| {
        let mut line = format!("Server-Timing: upstream;dur={up}");
        if let Some(h) = head {
            line.push_str(", ");
            line.push_str(&h);
        }
        line
    })
}

fn in_band_carrier(r: &RequestRecord, reading: &Reading) -> (Carrier, Option<&'static str>) {
    if r.cached {
        let note = "a cache hit replays the stored answer without in-band timing";
        return (Carrier::NotSent, Some(note));
    }
    let answered = r
        .attempts
        .iter()
        .any(|a| a.won && a.status.is_some_and(|s| (200..300).contains(&s)));
    if !r.stream {
        // Server-Timing goes on every whole answer relayed from an upstream, whatever its status.
        let relayed = r.attempts.iter().any(|a| a.won);
        return match (relayed, upstream_ms(&r.marks)) {
            (true, Some(_)) => (Carrier::ServerTiming, None),
            _ => (
                Carrier::NotSent,
                Some("no upstream answer: no Server-Timing upstream value"),
            ),
        };
    }
    if !answered {
        let note = "no upstream stream was relayed: the client got an error answer, no timing line";
        return (Carrier::NotSent, Some(note));
    }
    if r.dialect == Dialect::Gemini && !reading.gemini_timing_comment {
        let note = "a Gemini client gets no comment unless [server] gemini_timing_comment is set";
        return (Carrier::NotSent, Some(note));
    }
    match r.outcome {
        Outcome::Completed if r.flags.contains(&Flag::NoTerminalSentinel) => (
            Carrier::NotSent,
            Some("the stream had no terminal frame ([DONE] never came), where the comment goes"),
        ),
        Outcome::Completed | Outcome::Incomplete => (Carrier::SseComment, None),
        Outcome::UpstreamError if r.error_class == Some(ErrorClass::StreamError) => {
            if r.upstream_dialect == Some(Dialect::Chat) {
                (
                    Carrier::Unknown,
                    Some("a Chat error event is followed by the comment only when [DONE] came after it, which the record does not keep"),
                )
            } else {
                (Carrier::SseComment, None)
            }
        }
        Outcome::ClientCancelled => (
            Carrier::NotSent,
            Some("the client left before the terminal frame, where the comment goes"),
        ),
        _ => (
            Carrier::NotSent,
            Some("the stream was cut before its terminal frame (closed, stalled past a deadline, broken or drained): the client got an in-band error event, no timing line"),
        ),
    }
}

/// A stage as the classifier judged it, in the REST shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgementView {
    pub stage: &'static str,
    /// `ms`, or `tok/s` for output speed.
    pub unit: &'static str,
    pub measured: f64,
    pub threshold: f64,
    /// How far past the threshold (positive when slow; for output speed, how far under it).
    pub past_threshold: f64,
    pub slow: bool,
    /// The config key that sets the threshold.
    pub config_key: &'static str,
}

impl JudgementView {
    pub fn new(j: &Judgement) -> Self {
        JudgementView {
            stage: j.stage.as_str(),
            unit: j.stage.unit().as_str(),
            measured: j.measured,
            threshold: j.threshold,
            past_threshold: j.past_threshold(),
            slow: j.slow,
            config_key: j.stage.config_key(),
        }
    }

    /// Every judged stage of a record, against the thresholds in force now.
    pub fn of_record(r: &RequestRecord, t: &Thresholds) -> Vec<Self> {
        judge(&r.marks, r.tokens.output, t)
            .iter()
            .map(JudgementView::new)
            .collect()
    }
}

/// Parses a timing comment line back into its pairs (for clients, tests and `laptime bench`).
pub fn parse_comment(line: &str) -> Option<Vec<(String, String)>> {
    let rest = line
        .trim_end()
        .strip_prefix(':')?
        .trim_start()
        .strip_prefix("x-laptime-timing")?;
    Some(
        rest.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// One attempt in the REST shape (offsets from t0 in ms).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub channel: String,
    pub role: &'static str,
    pub won: bool,
    pub status: Option<u16>,
    pub error_class: Option<&'static str>,
    /// Whose fault the attempt's error was (`upstream`, `client`, `gateway`).
    pub fault: Option<&'static str>,
    pub start_ms: Option<f64>,
    pub headers_ms: Option<f64>,
    pub first_byte_ms: Option<f64>,
    pub end_ms: Option<f64>,
    /// The steps of the new connection the attempt opened (offsets from t0, like the other
    /// marks); null when it reused a pooled one, or for a step not taken or not reached.
    pub connected_ms: Option<f64>,
    pub tunnel_ms: Option<f64>,
    pub tls_ms: Option<f64>,
}

impl AttemptView {
    pub fn new(a: &Attempt) -> Self {
        AttemptView {
            channel: a.channel.clone(),
            role: a.role.as_str(),
            won: a.won,
            status: a.status,
            error_class: a.error_class.map(|c| c.as_str()),
            fault: a.error_class.map(|c| c.fault().as_str()),
            start_ms: opt_ms(a.start),
            headers_ms: opt_ms(a.headers),
            first_byte_ms: opt_ms(a.first_byte),
            end_ms: opt_ms(a.end),
            connected_ms: opt_ms(a.connection.connected),
            tunnel_ms: opt_ms(a.connection.tunnel),
            tls_ms: opt_ms(a.connection.tls),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Other {
    pub timing: TimingView,
}

/// The REST request-log entry (DESIGN §4), snake_case.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestLogView {
    pub request_id: String,
    pub workspace_id: Option<String>,
    pub created_at: String,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    /// The client's dialect (kept under its first name; `client_dialect` says the same).
    pub dialect: &'static str,
    pub client_dialect: &'static str,
    pub upstream_dialect: Option<&'static str>,
    pub translated: bool,
    pub stream: bool,
    pub status: u16,
    pub outcome: &'static str,
    pub timeout_kind: Option<&'static str>,
    pub error_class: Option<&'static str>,
    /// Whose fault the failure was (`upstream`, `client`, `gateway`); null for a success.
    pub fault: Option<&'static str>,
    pub classification: &'static str,
    pub flags: Vec<&'static str>,
    pub latency_ms: Option<f64>,
    pub ttft_ms: Option<f64>,
    pub upstream_ms: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Output tokens the gateway counted with its tokenizer because the provider reported
    /// none (null when it did): the count behind the output speed and an estimated cost.
    pub estimated_output_tokens: Option<u64>,
    pub reasoning_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// The part of `cache_write_tokens` written for one hour.
    pub cache_write_1h_tokens: Option<u64>,
    /// What the request cost, in USD; null when it was billed but no price covers it.
    pub cost_usd: Option<f64>,
    /// Some tokens in `cost_usd` were estimated (the provider reported no usage for them).
    pub cost_estimated: Option<bool>,
    /// The limit or budget that refused the request (outcome `rate_limited`).
    pub refused_by: Option<&'static str>,
    pub failover_count: u32,
    pub cached: bool,
    pub hedge: &'static str,
    pub event_count: u32,
    pub text_delta_count: u32,
    pub channel_inflight: Option<u32>,
    pub trace_id: Option<String>,
    pub region: Option<String>,
    /// The gateway instance that served it.
    pub instance: Option<String>,
    /// `generation` for a model call, else the endpoint (`embeddings`, `files`, …).
    pub endpoint: &'static str,
    /// Bytes of the request body, and of the answer's body relayed to the client.
    pub bytes_in: Option<u64>,
    pub bytes_out: Option<u64>,
    /// Which of the channel's keys served it (`api_key_envs`, from 0).
    pub key_index: Option<u32>,
    /// The request's shape, as the client asked (null fields: not in the request).
    pub shape: RequestShape,
    /// Each stage the classifier could judge: its figure, the threshold in force now, and by
    /// how much it crossed it.
    pub judgements: Vec<JudgementView>,
    /// What the client got in-band.
    pub in_band: InBandSent,
    pub attempts: Vec<AttemptView>,
    pub other: Other,
}

/// RFC 3339 UTC with microseconds, from unix microseconds.
pub fn rfc3339(unix_us: i64) -> String {
    let nanos = i128::from(unix_us) * 1000;
    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

impl RequestLogView {
    pub fn new(r: &RequestRecord, reading: &Reading) -> Self {
        RequestLogView {
            request_id: r.request_id.clone(),
            workspace_id: r.workspace_id.clone(),
            created_at: rfc3339(r.created_at_us),
            model: r.model.clone(),
            provider: r.provider.clone(),
            channel: r.channel.clone(),
            group: r.group.clone(),
            dialect: r.dialect.as_str(),
            client_dialect: r.dialect.as_str(),
            upstream_dialect: r.upstream_dialect.map(Dialect::as_str),
            translated: r.translated(),
            stream: r.stream,
            status: r.status,
            outcome: r.outcome.as_str(),
            timeout_kind: r.timeout_kind.map(|k| k.as_str()),
            error_class: r.error_class.map(|c| c.as_str()),
            fault: r.fault().map(|f| f.as_str()),
            classification: r.classification.as_str(),
            flags: r.flags.iter().map(|f| f.as_str()).collect(),
            latency_ms: latency_ms(&r.marks),
            ttft_ms: ttft_ms(&r.marks),
            upstream_ms: upstream_ms(&r.marks),
            input_tokens: r.tokens.input,
            output_tokens: r.tokens.output,
            estimated_output_tokens: r.tokens.estimated_output,
            reasoning_tokens: r.tokens.reasoning,
            cache_read_tokens: r.tokens.cache_read,
            cache_write_tokens: r.tokens.cache_write,
            cache_write_1h_tokens: r.tokens.cache_write_1h,
            cost_usd: r.cost.map(|c| c.usd()),
            cost_estimated: r.cost.map(|c| c.estimated),
            refused_by: r.refused_by.map(|l| l.as_str()),
            failover_count: r.failover_count,
            cached: r.cached,
            hedge: r.hedge.as_str(),
            event_count: r.event_count,
            text_delta_count: r.text_delta_count,
            channel_inflight: r.channel_inflight,
            trace_id: r.trace_id.clone(),
            region: r.region.clone(),
            instance: r.instance.clone(),
            endpoint: r.exchange.endpoint.as_str(),
            bytes_in: r.exchange.bytes_in,
            bytes_out: r.exchange.bytes_out,
            key_index: r.exchange.key_index,
            shape: r.shape.clone(),
            judgements: JudgementView::of_record(r, &reading.thresholds),
            in_band: InBandSent::of_record(r, reading),
            attempts: r.attempts.iter().map(AttemptView::new).collect(),
            other: Other {
                timing: TimingView::new(&r.marks, &r.tokens),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::ErrorClass;

    fn ms_d(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn push_ms_writes_what_displaying_ms_writes() {
        let check = |us: u64| {
            let d = Duration::from_micros(us);
            let mut out = String::from("dur=");
            push_ms(&mut out, d);
            assert_eq!(out, format!("dur={}", ms(d)), "{us} µs");
        };
        // Every value up to 200 ms, then a spread up to about 11 days, nanoseconds aside.
        (0..200_000).for_each(check);
        let mut us: u64 = 200_000;
        while us < 1_000_000_000_000 {
            check(us);
            check(us + 7);
            check(us + 30);
            check(us + 999);
            us = us * 17 / 16 + 1;
        }
        let mut out = String::new();
        push_ms(&mut out, Duration::from_nanos(1_500_999));
        assert_eq!(out, "1.5");
    }

    #[test]
    fn comment_leaves_absent_values_out_instead_of_writing_zero() {
        let marks = Marks {
            upstream_start: ms_d(2),
            upstream_done: ms_d(1002),
            ..Marks::default()
        };
        let line = InBand::new(&marks, &Tokens::default(), Hedge::None).comment();
        assert_eq!(line, ": x-laptime-timing upstream_ms=1000 hedge=none\n\n");
    }

    #[test]
    fn a_requests_output_rate_is_read_back_to_three_decimals() {
        // 83 tokens over 1.501234 s: 55.2876… tok/s.
        let marks = Marks {
            first_visible: Some(Duration::from_micros(8_700_000)),
            last_effective: Some(Duration::from_micros(10_100_000)),
            upstream_done: Some(Duration::from_micros(10_201_234)),
            ..Marks::default()
        };
        let tokens = Tokens {
            output: Some(83),
            ..Tokens::default()
        };
        let view = TimingView::new(&marks, &tokens);
        assert_eq!(view.visible_output_tps, Some(55.288));
        assert_eq!(view.upstream_done_ms, Some(10_201.234));
        assert_eq!(stored_precision(10201.169837304391), 10201.17);
        assert_eq!(stored_precision(0.000_4), 0.0);
    }

    #[test]
    fn comment_round_trips_through_the_parser() {
        let marks = Marks {
            upstream_start: Some(Duration::from_micros(1500)),
            first_byte: Some(Duration::from_micros(241_750)),
            upstream_done: Some(Duration::from_micros(9_201_500)),
            ..Marks::default()
        };
        let tokens = Tokens {
            cache_read: Some(512),
            cache_write: Some(0),
            ..Tokens::default()
        };
        let inband = InBand::new(&marks, &tokens, Hedge::Primary);
        let parsed = parse_comment(inband.comment().lines().next().unwrap()).unwrap();
        let get = |k: &str| parsed.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("upstream_ms").as_deref(), Some("9200"));
        assert_eq!(get("ttft_ms").as_deref(), Some("240.25"));
        assert_eq!(get("cached_tokens").as_deref(), Some("512"));
        assert_eq!(get("cache_write_tokens").as_deref(), Some("0"));
        assert_eq!(get("hedge").as_deref(), Some("primary"));
        assert_eq!(inband.trailers().len(), 5);
    }

    #[test]
    fn upstream_headers_are_measured_from_upstream_start_and_others_from_t0() {
        let marks = Marks {
            upstream_start: ms_d(10),
            upstream_headers: ms_d(250),
            first_event: ms_d(320),
            ..Marks::default()
        };
        let v = TimingView::new(&marks, &Tokens::default());
        assert_eq!(v.upstream_headers_ms, Some(240.0));
        assert_eq!(v.first_sse_event_ms, Some(320.0));
        assert_eq!(v.first_text_delta_ms, None);
    }

    fn sample_record() -> RequestRecord {
        let marks = Marks {
            auth: Some(Duration::from_micros(40)),
            body_read: Some(Duration::from_micros(10)),
            admission: None,
            distribution: Some(Duration::from_micros(5)),
            upstream_start: ms_d(1),
            upstream_headers: ms_d(241),
            first_byte: ms_d(300),
            first_event: ms_d(311),
            first_effective: ms_d(2901),
            first_visible: ms_d(8701),
            last_effective: ms_d(10_000),
            upstream_done: ms_d(10_201),
            handler_done: ms_d(10_202),
        };
        RequestRecord {
            request_id: "req_1".into(),
            workspace_id: Some("ws_1".into()),
            key_id: Some("key_1".into()),
            created_at_us: 1_700_000_000_000_000,
            model: Some("sim-trace-b".into()),
            provider: Some("sim".into()),
            channel: Some("sim".into()),
            group: Some("default".into()),
            dialect: Dialect::Chat,
            upstream_dialect: Some(Dialect::Chat),
            stream: true,
            status: 200,
            outcome: Outcome::Completed,
            timeout_kind: None,
            error_class: None,
            classification: crate::slow::Classification::Slow(
                crate::slow::SlowStage::VisibleTextLate,
            ),
            flags: vec![crate::slow::Flag::Slow(
                crate::slow::SlowStage::VisibleTextLate,
            )],
            marks,
            tokens: Tokens {
                input: Some(800),
                output: Some(75),
                cache_read: Some(512),
                cache_write: None,
                cache_write_1h: None,
                reasoning: None,
                estimated_output: None,
            },
            event_count: 90,
            text_delta_count: 75,
            channel_inflight: Some(1),
            attempts: vec![Attempt {
                channel: "sim".into(),
                role: crate::timeline::AttemptRole::Primary,
                won: true,
                status: Some(200),
                error_class: None,
                start: ms_d(1),
                headers: ms_d(241),
                first_byte: ms_d(300),
                end: ms_d(10_201),
                connection: crate::timeline::ConnectionMarks {
                    connected: Some(Duration::from_micros(20_500)),
                    tunnel: None,
                    tls: ms_d(60),
                },
                span_id: None,
            }],
            hedge: Hedge::None,
            failover_count: 0,
            cached: false,
            shape: RequestShape::default(),
            region: None,
            instance: Some("gw-a:8080".into()),
            trace_id: Some("t".into()),
            cost: Some(crate::cost::Cost {
                nano_usd: 1_250_000,
                estimated: false,
            }),
            refused_by: None,
            exchange: Default::default(),
            in_band: Some(InBandCarrier::SseCommentAndTrailers),
        }
    }

    /// The REST row's wire shape: a change here is a change users see.
    #[test]
    fn request_log_view_shape_is_stable() {
        let record = sample_record();
        let reading = Reading::default();
        let mut got = serde_json::to_value(RequestLogView::new(&record, &reading)).unwrap();
        let judgements = got.as_object_mut().unwrap().remove("judgements").unwrap();
        let judged: Vec<(&str, bool)> = judgements
            .as_array()
            .unwrap()
            .iter()
            .map(|j| (j["stage"].as_str().unwrap(), j["slow"].as_bool().unwrap()))
            .collect();
        assert_eq!(
            judged,
            vec![
                ("upstream_headers_slow", false),
                ("first_event_slow", false),
                ("effective_output_slow", false),
                ("visible_text_late", true),
                ("generation_slow_tps", false),
                ("local_overhead_slow", false)
            ]
        );
        assert_eq!(
            judgements[3],
            serde_json::json!({"stage": "visible_text_late", "unit": "ms", "measured": 5800.0,
                "threshold": 3000.0, "past_threshold": 2800.0, "slow": true,
                "config_key": "thresholds.visible_text_ms"})
        );
        let expected: serde_json::Value = serde_json::from_str(
            r#"{
            "request_id": "req_1", "workspace_id": "ws_1", "created_at": "2023-11-14T22:13:20Z",
            "model": "sim-trace-b", "provider": "sim", "channel": "sim", "group": "default",
            "dialect": "chat", "client_dialect": "chat", "upstream_dialect": "chat",
            "translated": false, "stream": true, "status": 200, "outcome": "completed",
            "timeout_kind": null, "error_class": null, "fault": null, "classification": "visible_text_late",
            "flags": ["visible_text_late"], "latency_ms": 10202.0, "ttft_ms": 299.0,
            "upstream_ms": 10200.0, "input_tokens": 800, "output_tokens": 75, "estimated_output_tokens": null,
            "reasoning_tokens": null, "cache_read_tokens": 512, "cache_write_tokens": null,
            "cache_write_1h_tokens": null, "cost_usd": 0.00125, "cost_estimated": false,
            "refused_by": null, "failover_count": 0, "cached": false, "hedge": "none", "event_count": 90,
            "text_delta_count": 75, "channel_inflight": 1, "trace_id": "t", "region": null,
            "instance": "gw-a:8080", "endpoint": "generation", "bytes_in": null,
            "bytes_out": null, "key_index": null,
            "shape": {"max_output_tokens": null, "reasoning_effort": null, "tool_count": null,
                "tool_choice": null, "response_format": null, "temperature": null, "top_p": null},
            "in_band": {"carrier": "sse_comment", "note": null, "trailers": true, "derived": false,
                "line": ": x-laptime-timing upstream_ms=10200 ttft_ms=299 cached_tokens=512 hedge=none"},
            "attempts": [{"channel": "sim", "role": "primary", "won": true, "status": 200,
                "error_class": null, "fault": null, "start_ms": 1.0, "headers_ms": 241.0,
                "first_byte_ms": 300.0, "end_ms": 10201.0, "connected_ms": 20.5,
                "tunnel_ms": null, "tls_ms": 60.0}],
            "other": {"timing": {"auth_ms": 0.04, "admission_ms": null, "distribution_ms": 0.005, "body_read_ms": 0.01,
                "upstream_headers_ms": 240.0, "first_sse_event_ms": 311.0,
                "first_response_ms": 2901.0, "first_text_delta_ms": 8701.0,
                "upstream_done_ms": 10201.0, "last_effective_ms": 10000.0, "total_handler_ms": 10202.0,
                "visible_output_tps": 50.0, "visible_output_tps_estimated": false}}
        }"#,
        )
        .unwrap();
        assert_eq!(got, expected);

        // A Chat client answered by a Messages channel was translated.
        let mut translated = record.clone();
        translated.upstream_dialect = Some(Dialect::Messages);
        let v = serde_json::to_value(RequestLogView::new(&translated, &reading)).unwrap();
        assert_eq!(
            (
                &v["client_dialect"],
                &v["upstream_dialect"],
                &v["translated"]
            ),
            (&"chat".into(), &"messages".into(), &true.into())
        );

        // A failure says whose fault it was, per request and per attempt.
        let mut failed = record.clone();
        failed.outcome = Outcome::UpstreamError;
        failed.error_class = Some(ErrorClass::UpstreamStatus5xx);
        failed.attempts[0].error_class = Some(ErrorClass::ConnectFailed);
        let v = serde_json::to_value(RequestLogView::new(&failed, &reading)).unwrap();
        assert_eq!(v["fault"], "upstream");
        assert_eq!(v["attempts"][0]["fault"], "upstream");
        failed.outcome = Outcome::ClientCancelled;
        failed.error_class = None;
        let v = serde_json::to_value(RequestLogView::new(&failed, &reading)).unwrap();
        assert_eq!(
            v["fault"], "client",
            "from the outcome when there is no class"
        );
        failed.outcome = Outcome::Rejected;
        failed.error_class = Some(ErrorClass::Internal);
        let v = serde_json::to_value(RequestLogView::new(&failed, &reading)).unwrap();
        assert_eq!(v["fault"], "gateway");
    }

    #[test]
    fn rfc3339_formats_unix_microseconds() {
        assert_eq!(
            rfc3339(1_700_000_000_123_456),
            "2023-11-14T22:13:20.123456Z"
        );
    }

    #[test]
    fn the_stored_carrier_is_what_the_api_reports_whatever_the_record_would_suggest() {
        let mut r = sample_record();
        let reading = Reading::default();
        // A Chat stream that ended with an error event: derivation cannot tell, the stored
        // fact can.
        r.outcome = Outcome::UpstreamError;
        r.error_class = Some(ErrorClass::StreamError);
        r.in_band = None;
        let derived = InBandSent::of_record(&r, &reading);
        assert_eq!((derived.carrier, derived.derived), ("unknown", true));
        assert_eq!(derived.trailers, None);
        r.in_band = Some(InBandCarrier::SseComment);
        let sent = InBandSent::of_record(&r, &reading);
        assert_eq!(
            (sent.carrier, sent.derived, sent.trailers),
            ("sse_comment", false, Some(false))
        );
        assert_eq!(
            sent.line.as_deref(),
            Some(": x-laptime-timing upstream_ms=10200 ttft_ms=299 cached_tokens=512 hedge=none")
        );
        assert_eq!(sent.note, None);
        r.in_band = Some(InBandCarrier::NotSent);
        let none = InBandSent::of_record(&r, &reading);
        assert_eq!(
            (none.carrier, none.line, none.derived),
            ("none", None, false)
        );
        assert!(none.note.is_some());
        // A completed stream whose client got only trailers (a Gemini client, say).
        r.outcome = Outcome::Completed;
        r.error_class = None;
        r.in_band = Some(InBandCarrier::Trailers);
        let t = InBandSent::of_record(&r, &reading);
        assert_eq!((t.carrier, t.trailers), ("trailers", Some(true)));
        assert_eq!(
            t.line.as_deref(),
            Some("x-laptime-upstream-ms: 10200\nx-laptime-ttft-ms: 299\nx-laptime-cached-tokens: 512\nx-laptime-hedge: none")
        );
        // An answer relayed as it came: its head's time only.
        r.stream = false;
        r.in_band = Some(InBandCarrier::ServerTimingHead);
        let head = InBandSent::of_record(&r, &reading);
        assert_eq!(head.carrier, "server_timing");
        assert_eq!(
            head.line.as_deref(),
            Some("Server-Timing: upstream-headers;dur=240")
        );
    }

    #[test]
    fn the_carrier_is_stored_by_name_and_gains_trailers_and_comment_in_either_order() {
        for c in InBandCarrier::ALL {
            assert_eq!(InBandCarrier::parse(c.as_str()), Some(c));
        }
        let both = InBandCarrier::SseCommentAndTrailers;
        assert_eq!(InBandCarrier::NotSent.and_comment().and_trailers(), both);
        assert_eq!(InBandCarrier::NotSent.and_trailers().and_comment(), both);
        assert_eq!(
            InBandCarrier::NotSent.and_trailers(),
            InBandCarrier::Trailers
        );
    }

    #[test]
    fn a_stream_cut_before_its_terminal_frame_carried_no_timing_line() {
        use crate::timeline::DeadlineKind;
        let mut r = sample_record();
        r.in_band = None;
        r.marks = Marks {
            upstream_start: ms_d(1),
            first_byte: ms_d(100),
            upstream_done: ms_d(900),
            ..Marks::default()
        };
        r.tokens = Tokens::default();
        let reading = Reading::default();
        r.outcome = Outcome::Completed;
        let sent = InBandSent::of_record(&r, &reading);
        assert_eq!(sent.carrier, "sse_comment");
        assert_eq!(
            sent.line.as_deref(),
            Some(": x-laptime-timing upstream_ms=899 ttft_ms=99 hedge=none")
        );
        for (outcome, class) in [
            (Outcome::UpstreamClosedEarly, Some(ErrorClass::ClosedEarly)),
            (Outcome::Timeout, Some(ErrorClass::Timeout)),
            (Outcome::UpstreamError, Some(ErrorClass::BodyError)),
            (Outcome::GatewayShutdown, None),
            (Outcome::ClientCancelled, None),
        ] {
            r.outcome = outcome;
            r.error_class = class;
            r.timeout_kind = (outcome == Outcome::Timeout).then_some(DeadlineKind::Idle);
            let sent = InBandSent::of_record(&r, &reading);
            assert_eq!((sent.carrier, sent.line), ("none", None), "{outcome:?}");
            assert!(sent.note.is_some());
        }
        // Completed without [DONE]: nowhere to put the comment.
        r.outcome = Outcome::Completed;
        r.error_class = None;
        r.flags = vec![Flag::NoTerminalSentinel];
        assert_eq!(InBandSent::of_record(&r, &reading).carrier, "none");
        // A whole answer carries Server-Timing.
        r.flags.clear();
        r.stream = false;
        r.marks.upstream_headers = ms_d(51);
        let sent = InBandSent::of_record(&r, &reading);
        assert_eq!(
            sent.line.as_deref(),
            Some("Server-Timing: upstream;dur=899, upstream-headers;dur=50")
        );
    }
}
