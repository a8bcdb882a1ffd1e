//! Ingress: the request id, the trace id, and a borrowed parse of only the top-level fields the
//! gateway needs (`model`, `stream`, `stream_options` and the request's shape). The body bytes
//! themselves go upstream as the client sent them; only the model value may be spliced.

use http::HeaderName;
use laptime_core::timeline::RequestShape;
use rand::RngCore;
use serde::Deserialize;
use serde_json::value::RawValue;

/// A new request id: `req_` + 32 hex digits: the arrival time in milliseconds since the Unix
/// epoch (48 bits) then 80 random bits. Time first keeps ids roughly ordered, so the store's
/// indexes on them grow at one end instead of splitting pages all over (the 80 random bits still
/// make ids unguessable and unique).
pub fn request_id() -> String {
    let ms = (crate::clock::now_unix_us() / 1000).clamp(0, (1 << 48) - 1) as u64;
    let mut b = [0u8; 16];
    b[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    rand::thread_rng().fill_bytes(&mut b[6..]);
    let mut id = String::with_capacity(4 + 32);
    id.push_str("req_");
    push_hex(&mut id, &b);
    id
}

/// Appends `bytes` as lowercase hex. `hex::encode` builds its string a char at a time; the ids
/// of every request went through it several times (0.5 % of a non-streamed call's CPU).
fn push_hex(out: &mut String, bytes: &[u8]) {
    let mut buf = [0u8; 32];
    for piece in bytes.chunks(16) {
        let digits = &mut buf[..piece.len() * 2];
        if hex::encode_to_slice(piece, digits).is_ok() {
            out.push_str(std::str::from_utf8(digits).unwrap_or_default());
        }
    }
}

/// A `traceparent` header value: version 00, the trace, the parent span, the sampled flag.
fn traceparent(trace_id: &[u8; 16], parent: &[u8; 8], sampled: bool) -> String {
    let mut tp = String::with_capacity(55);
    tp.push_str("00-");
    push_hex(&mut tp, trace_id);
    tp.push('-');
    push_hex(&mut tp, parent);
    tp.push_str(if sampled { "-01" } else { "-00" });
    tp
}

/// The W3C trace context to propagate: the client's trace id when it sent a valid `traceparent`,
/// else a new one; always a new span id for the upstream hop. That span id is the gateway's own
/// span for the request ([`SpanIds`]), so an exported request span and the upstream's spans join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: String,
    pub traceparent: String,
    pub span: SpanIds,
}

/// The W3C ids of the gateway's span for one request, kept on the pending record for trace export
/// (`crate::traces`); never stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    pub trace_id: [u8; 16],
    /// The gateway's span: the parent id in the `traceparent` sent upstream.
    pub span_id: [u8; 8],
    /// The client's span, when its `traceparent` named a valid one.
    pub parent_span_id: Option<[u8; 8]>,
    /// The client's sampled flag (`traceparent` flags bit 0); true without a client
    /// `traceparent`. Propagated upstream as it came.
    pub sampled: bool,
}

/// The parts of a client `traceparent` laptime continues: the trace id (32 lowercase hex
/// digits, not all zero), the parent span id (16, not all zero) and the sampled flag.
fn client_context(tp: &str) -> Option<([u8; 16], Option<[u8; 8]>, bool)> {
    let parts: Vec<&str> = tp.trim().split('-').collect();
    let [ver, tid, sid, flags] = parts.as_slice() else {
        return None;
    };
    if ver.len() != 2 || sid.len() != 16 || flags.len() != 2 {
        return None;
    }
    let trace_id: [u8; 16] = lower_hex(tid)?;
    if trace_id == [0; 16] {
        return None;
    }
    let parent = lower_hex::<8>(sid).filter(|s| *s != [0; 8]);
    // A flags field that is not hex keeps the trace sampled, as before flags were read.
    let sampled = u8::from_str_radix(flags, 16).map_or(true, |f| f & 1 == 1);
    Some((trace_id, parent, sampled))
}

/// `N` bytes from exactly `2N` lowercase hex digits.
fn lower_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// A new W3C span id: random, never all zeros (invalid, W3C; 2^-64 a draw, but cheap to rule
/// out).
pub fn new_span_id() -> [u8; 8] {
    let mut span_id = [0u8; 8];
    while span_id == [0; 8] {
        rand::thread_rng().fill_bytes(&mut span_id);
    }
    span_id
}

impl SpanIds {
    /// The `traceparent` an attempt sends upstream: this trace, the attempt's own span
    /// `attempt_span` as the parent id, the client's sampled flag.
    pub fn traceparent_for(&self, attempt_span: [u8; 8]) -> String {
        traceparent(&self.trace_id, &attempt_span, self.sampled)
    }
}

/// The W3C trace context headers, by constant: a `&str` name is parsed on every use.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

pub fn trace(client_traceparent: Option<&str>) -> Trace {
    let (trace_id, parent_span_id, sampled) = client_traceparent
        .and_then(client_context)
        .unwrap_or_else(|| {
            let mut b = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut b);
            (b, None, true)
        });
    let span_id = new_span_id();
    let mut trace_hex = String::with_capacity(32);
    push_hex(&mut trace_hex, &trace_id);
    Trace {
        trace_id: trace_hex,
        traceparent: traceparent(&trace_id, &span_id, sampled),
        span: SpanIds {
            trace_id,
            span_id,
            parent_span_id,
            sampled,
        },
    }
}

/// The longest model name accepted, in bytes. Providers' names are well under 100; a name is
/// kept in the record, the logs and the route lookup, so a client cannot make it large.
pub const MAX_MODEL_BYTES: usize = 256;

/// The longest value accepted for the other recorded strings of a request's shape (reasoning
/// effort, tool choice, response format), in bytes: each is a short keyword in every dialect.
pub const MAX_SHAPE_BYTES: usize = 64;

/// Why a body was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyProblem {
    NotJson(String),
    NotAnObject,
    NoModel,
    /// A recorded string over its bound: the field's name and the bound.
    TooLong(&'static str, usize),
    /// A Gemini path whose method the gateway does not serve (`:countTokens`, …).
    GeminiMethod(String),
    /// A Gemini model name that is not a plain path segment.
    GeminiModel,
    /// `:streamGenerateContent` without `alt=sse` (Gemini would stream a JSON array).
    GeminiNotSse,
}

impl BodyProblem {
    pub fn message(&self) -> String {
        match self {
            BodyProblem::NotJson(e) => format!("request body is not valid JSON: {e}"),
            BodyProblem::NotAnObject => "request body must be a JSON object".into(),
            BodyProblem::NoModel => "request body has no \"model\" string".into(),
            BodyProblem::TooLong(field, limit) => {
                format!("request field {field:?} is over its {limit}-byte limit")
            }
            BodyProblem::GeminiMethod(path) => format!(
                "{path} is not served: call /v1beta/models/{{model}}:generateContent or \
                 :streamGenerateContent?alt=sse"
            ),
            BodyProblem::GeminiModel => {
                "the model in the path must be letters, digits, '-', '.' and '_' only".into()
            }
            BodyProblem::GeminiNotSse => "streamGenerateContent is served as server-sent \
                 events only: add ?alt=sse to the URL"
                .into(),
        }
    }

    /// Whether the problem is that nothing is served there (404) rather than a bad request.
    pub fn not_found(&self) -> bool {
        matches!(self, BodyProblem::GeminiMethod(_))
    }
}

/// What the gateway reads of a request body.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHead {
    pub model: String,
    /// Byte range of the model's JSON string (quotes included) in the body, for splicing;
    /// `None` when the model is not in the body (Gemini names it in the path).
    pub model_span: Option<(usize, usize)>,
    pub stream: bool,
    pub shape: RequestShape,
    /// A Responses request that continues a stored response: it must go to the channel that
    /// holds it.
    pub previous_response_id: Option<String>,
    /// The client asked for the usage chunk (Chat's `stream_options.include_usage`): without
    /// it a Chat upstream reports no tokens, and the gateway counts the output itself.
    pub include_usage: bool,
}

#[derive(Deserialize)]
struct StreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct Reasoning<'a> {
    #[serde(borrow)]
    effort: Option<&'a str>,
}

#[derive(Deserialize)]
struct Thinking {
    budget_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct FormatType<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a str>,
}

#[derive(Deserialize)]
struct TextOptions<'a> {
    #[serde(borrow)]
    format: Option<FormatType<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ToolChoice<'a> {
    Name(&'a str),
    Object(FormatType<'a>),
}

#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    model: Option<&'a RawValue>,
    stream: Option<bool>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
    #[serde(borrow)]
    reasoning_effort: Option<&'a str>,
    #[serde(borrow)]
    reasoning: Option<Reasoning<'a>>,
    thinking: Option<Thinking>,
    tools: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(borrow)]
    tool_choice: Option<ToolChoice<'a>>,
    #[serde(borrow)]
    response_format: Option<FormatType<'a>>,
    #[serde(borrow)]
    text: Option<TextOptions<'a>>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    #[serde(borrow)]
    previous_response_id: Option<&'a str>,
    stream_options: Option<StreamOptions>,
}

/// Parses the fields the gateway needs from a request body.
pub fn parse_head(body: &[u8]) -> Result<RequestHead, BodyProblem> {
    let trimmed = body.iter().position(|b| !b.is_ascii_whitespace());
    if trimmed.map(|i| body[i]) != Some(b'{') {
        // Distinguish "not JSON" from "JSON but not an object" for a clearer message.
        return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err(BodyProblem::NotAnObject),
            Err(e) => Err(BodyProblem::NotJson(e.to_string())),
        };
    }
    let head: Head<'_> =
        serde_json::from_slice(body).map_err(|e| BodyProblem::NotJson(e.to_string()))?;
    let raw = head.model.ok_or(BodyProblem::NoModel)?;
    let model: String = match serde_json::from_str::<String>(raw.get()) {
        Ok(m) if !m.trim().is_empty() => m,
        _ => return Err(BodyProblem::NoModel),
    };
    if model.len() > MAX_MODEL_BYTES {
        return Err(BodyProblem::TooLong("model", MAX_MODEL_BYTES));
    }
    // RawValue borrows from `body`, so its offset is a pointer difference.
    let start = (raw.get().as_ptr() as usize).saturating_sub(body.as_ptr() as usize);
    let span = (start, start + raw.get().len());
    let response_format = head
        .response_format
        .and_then(|f| f.kind)
        .or_else(|| head.text.and_then(|t| t.format).and_then(|f| f.kind))
        .map(str::to_string);
    let reasoning_effort = head
        .reasoning_effort
        .or_else(|| head.reasoning.and_then(|r| r.effort))
        .map(str::to_string)
        .or_else(|| {
            head.thinking
                .and_then(|t| t.budget_tokens)
                .map(|b| format!("{}{b}", laptime_core::compare::BUDGET_PREFIX))
        });
    let tool_choice = head.tool_choice.and_then(|c| match c {
        ToolChoice::Name(n) => Some(n.to_string()),
        ToolChoice::Object(o) => o.kind.map(str::to_string),
    });
    for (field, value) in [
        ("reasoning_effort", &reasoning_effort),
        ("tool_choice", &tool_choice),
        ("response_format", &response_format),
    ] {
        if value.as_ref().is_some_and(|v| v.len() > MAX_SHAPE_BYTES) {
            return Err(BodyProblem::TooLong(field, MAX_SHAPE_BYTES));
        }
    }
    Ok(RequestHead {
        model,
        model_span: Some(span),
        stream: head.stream.unwrap_or(false),
        shape: RequestShape {
            max_output_tokens: head
                .max_completion_tokens
                .or(head.max_output_tokens)
                .or(head.max_tokens),
            reasoning_effort,
            tool_count: head
                .tools
                .map(|t| u32::try_from(t.len()).unwrap_or(u32::MAX)),
            tool_choice,
            response_format,
            temperature: head.temperature,
            top_p: head.top_p,
        },
        previous_response_id: head.previous_response_id.map(str::to_string),
        include_usage: head
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
    })
}

/// What a Gemini call's path and query name: `/v1beta/models/{model}:{method}[?alt=sse]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeminiCall {
    pub model: String,
    pub stream: bool,
}

/// The collections a Gemini client calls models under: `v1beta`, and `v1`, which google-genai
/// 3.x uses by default. Upstream, the gateway always calls `v1beta` (a superset).
pub const GEMINI_COLLECTIONS: [&str; 2] = ["/v1beta/models/", "/v1/models/"];

/// Reads a Gemini call from its path (as decoded) and query. The model is bounded like any
/// model name and must be a plain path segment, since it may be sent upstream in a URL.
pub fn gemini_call(path: &str, query: Option<&str>) -> Result<GeminiCall, BodyProblem> {
    let segment = GEMINI_COLLECTIONS
        .iter()
        .find_map(|prefix| path.strip_prefix(prefix));
    let Some((model, method)) = segment.and_then(laptime_core::GeminiMethod::split) else {
        return Err(BodyProblem::GeminiMethod(
            path.chars().take(MAX_MODEL_BYTES).collect(),
        ));
    };
    if model.len() > MAX_MODEL_BYTES {
        return Err(BodyProblem::TooLong("model", MAX_MODEL_BYTES));
    }
    if !laptime_core::dialect::gemini_model_ok(model) {
        return Err(BodyProblem::GeminiModel);
    }
    let sse = query.is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
    if method.is_stream() && !sse {
        return Err(BodyProblem::GeminiNotSse);
    }
    Ok(GeminiCall {
        model: model.to_string(),
        stream: method.is_stream(),
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiHead<'a> {
    #[serde(borrow)]
    generation_config: Option<GenerationConfig<'a>>,
    tools: Option<Vec<GeminiTool>>,
    #[serde(borrow)]
    tool_config: Option<GeminiToolConfig<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GenerationConfig<'a> {
    max_output_tokens: Option<u64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    #[serde(borrow)]
    response_mime_type: Option<&'a str>,
    response_schema: Option<serde::de::IgnoredAny>,
    response_json_schema: Option<serde::de::IgnoredAny>,
    #[serde(borrow)]
    thinking_config: Option<ThinkingConfig<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ThinkingConfig<'a> {
    thinking_budget: Option<i64>,
    #[serde(borrow)]
    thinking_level: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiTool {
    function_declarations: Option<Vec<serde::de::IgnoredAny>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiToolConfig<'a> {
    #[serde(borrow)]
    function_calling_config: Option<FunctionCallingConfig<'a>>,
}

#[derive(Deserialize)]
struct FunctionCallingConfig<'a> {
    #[serde(borrow)]
    mode: Option<&'a str>,
}

/// The head of a Gemini request: model and stream-ness from its path, the shape from its body
/// (`generationConfig`, `tools`, `toolConfig`). The body must be a JSON object; nothing in it
/// names the model, so nothing is spliced.
pub fn parse_gemini_head(call: GeminiCall, body: &[u8]) -> Result<RequestHead, BodyProblem> {
    let trimmed = body.iter().position(|b| !b.is_ascii_whitespace());
    if trimmed.map(|i| body[i]) != Some(b'{') {
        return match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err(BodyProblem::NotAnObject),
            Err(e) => Err(BodyProblem::NotJson(e.to_string())),
        };
    }
    let head: GeminiHead<'_> =
        serde_json::from_slice(body).map_err(|e| BodyProblem::NotJson(e.to_string()))?;
    let config = head.generation_config;
    let reasoning_effort = config
        .as_ref()
        .and_then(|c| c.thinking_config.as_ref())
        .and_then(|t| {
            t.thinking_level
                .map(str::to_ascii_lowercase)
                .or_else(|| t.thinking_budget.map(|b| format!("thinking_budget:{b}")))
        });
    let response_format = config.as_ref().and_then(|c| {
        let schema = c.response_schema.is_some() || c.response_json_schema.is_some();
        match (c.response_mime_type, schema) {
            (_, true) => Some("json_schema".to_string()),
            (Some("application/json"), false) => Some("json_object".to_string()),
            (Some(other), false) => Some(other.to_string()),
            (None, false) => None,
        }
    });
    let tool_choice = head
        .tool_config
        .and_then(|t| t.function_calling_config)
        .and_then(|f| f.mode)
        .map(str::to_ascii_lowercase);
    for (field, value) in [
        ("thinkingConfig", &reasoning_effort),
        ("toolConfig", &tool_choice),
        ("responseMimeType", &response_format),
    ] {
        if value.as_ref().is_some_and(|v| v.len() > MAX_SHAPE_BYTES) {
            return Err(BodyProblem::TooLong(field, MAX_SHAPE_BYTES));
        }
    }
    // A tool is a function declaration, or a built-in tool (search, code execution) entry.
    let tool_count = head.tools.map(|tools| {
        let n: usize = tools
            .iter()
            .map(|t| t.function_declarations.as_ref().map_or(1, Vec::len))
            .sum();
        u32::try_from(n).unwrap_or(u32::MAX)
    });
    Ok(RequestHead {
        model: call.model,
        model_span: None,
        stream: call.stream,
        shape: RequestShape {
            max_output_tokens: config.as_ref().and_then(|c| c.max_output_tokens),
            reasoning_effort,
            tool_count,
            tool_choice,
            response_format,
            temperature: config.as_ref().and_then(|c| c.temperature),
            top_p: config.as_ref().and_then(|c| c.top_p),
        },
        previous_response_id: None,
        include_usage: false,
    })
}

/// The body with the model value replaced, every other byte as sent.
pub fn splice_model(
    body: &bytes::Bytes,
    span: (usize, usize),
    upstream_model: &str,
) -> bytes::Bytes {
    let quoted = serde_json::Value::String(upstream_model.to_string()).to_string();
    let mut out = Vec::with_capacity(body.len() + quoted.len());
    out.extend_from_slice(&body[..span.0]);
    out.extend_from_slice(quoted.as_bytes());
    out.extend_from_slice(&body[span.1..]);
    bytes::Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_start_with_the_time_and_stay_unique() {
        let a = request_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = request_id();
        assert!(a.starts_with("req_") && a.len() == 36, "{a}");
        assert!(a < b, "{a} then {b}");
        let ms = u64::from_str_radix(&a[4..16], 16).unwrap();
        let now = (crate::clock::now_unix_us() / 1000) as u64;
        assert!(now - ms < 1000, "{ms} vs {now}");
        let many: std::collections::HashSet<String> = (0..10_000).map(|_| request_id()).collect();
        assert_eq!(many.len(), 10_000);
    }

    #[test]
    fn recorded_strings_over_their_bound_are_refused_naming_the_field() {
        let at_limit = format!(r#"{{"model":"{}"}}"#, "m".repeat(MAX_MODEL_BYTES));
        assert!(parse_head(at_limit.as_bytes()).is_ok());
        let over = format!(r#"{{"model":"{}"}}"#, "m".repeat(1 << 20));
        assert_eq!(
            parse_head(over.as_bytes()),
            Err(BodyProblem::TooLong("model", MAX_MODEL_BYTES))
        );
        let long = "x".repeat(MAX_SHAPE_BYTES + 1);
        for (field, body) in [
            (
                "reasoning_effort",
                format!(r#"{{"model":"m","reasoning_effort":"{long}"}}"#),
            ),
            (
                "reasoning_effort",
                format!(r#"{{"model":"m","reasoning":{{"effort":"{long}"}}}}"#),
            ),
            (
                "tool_choice",
                format!(r#"{{"model":"m","tool_choice":{{"type":"{long}"}}}}"#),
            ),
            (
                "response_format",
                format!(r#"{{"model":"m","text":{{"format":{{"type":"{long}"}}}}}}"#),
            ),
        ] {
            let refused = parse_head(body.as_bytes()).unwrap_err();
            assert_eq!(refused, BodyProblem::TooLong(field, MAX_SHAPE_BYTES));
            assert!(refused.message().contains(field), "{}", refused.message());
        }
    }

    #[test]
    fn head_reads_model_stream_and_shape() {
        let body = br#"{"model":"gpt-4.1-mini","stream":true,"max_completion_tokens":64,
            "reasoning_effort":"low","tools":[{},{}],"tool_choice":"auto",
            "response_format":{"type":"json_schema"},"temperature":0.2,"top_p":0.9,
            "messages":[{"role":"user","content":"hi"}]}"#;
        let h = parse_head(body).unwrap();
        assert_eq!(h.model, "gpt-4.1-mini");
        assert!(h.stream);
        let (from, to) = h.model_span.unwrap();
        assert_eq!(&body[from..to], br#""gpt-4.1-mini""#);
        assert_eq!(h.shape.max_output_tokens, Some(64));
        assert_eq!(h.shape.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(h.shape.tool_count, Some(2));
        assert_eq!(h.shape.tool_choice.as_deref(), Some("auto"));
        assert_eq!(h.shape.response_format.as_deref(), Some("json_schema"));
        assert_eq!(h.shape.temperature, Some(0.2));
    }

    #[test]
    fn responses_and_anthropic_shapes_are_read_too() {
        let h = parse_head(br#"{"model":"o4-mini","reasoning":{"effort":"high"},"text":{"format":{"type":"json_object"}},"max_output_tokens":9,"tool_choice":{"type":"function","name":"f"}}"#).unwrap();
        assert_eq!(h.shape.reasoning_effort.as_deref(), Some("high"));
        assert_eq!(h.shape.response_format.as_deref(), Some("json_object"));
        assert_eq!(h.shape.tool_choice.as_deref(), Some("function"));
        let h = parse_head(br#"{"model":"claude","max_tokens":100,"thinking":{"type":"enabled","budget_tokens":2048}}"#).unwrap();
        assert_eq!(h.shape.max_output_tokens, Some(100));
        assert_eq!(
            h.shape.reasoning_effort.as_deref(),
            Some("budget_tokens:2048")
        );
        assert!(!h.stream);
    }

    #[test]
    fn bad_bodies_say_what_is_wrong() {
        assert!(matches!(parse_head(b"{nope"), Err(BodyProblem::NotJson(_))));
        assert_eq!(parse_head(b"[1,2]"), Err(BodyProblem::NotAnObject));
        assert_eq!(parse_head(b"{\"stream\":true}"), Err(BodyProblem::NoModel));
        assert_eq!(parse_head(b"{\"model\":\"\"}"), Err(BodyProblem::NoModel));
        assert_eq!(parse_head(b"{\"model\":7}"), Err(BodyProblem::NoModel));
    }

    #[test]
    fn splicing_the_model_keeps_every_other_byte() {
        let body = bytes::Bytes::from_static(br#"{ "x": 1, "model" : "fast" ,"y":"\u00e9"}"#);
        let h = parse_head(&body).unwrap();
        let out = splice_model(&body, h.model_span.unwrap(), "gpt-4.1-mini");
        assert_eq!(
            &out[..],
            &br#"{ "x": 1, "model" : "gpt-4.1-mini" ,"y":"\u00e9"}"#[..]
        );
    }

    #[test]
    fn a_gemini_call_is_read_from_its_path_and_query() {
        let call = |path: &str, query: Option<&str>| gemini_call(path, query);
        assert_eq!(
            call(
                "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
                Some("alt=sse")
            ),
            Ok(GeminiCall {
                model: "gemini-2.5-flash".into(),
                stream: true
            })
        );
        assert_eq!(
            call("/v1/models/gemini-2.5-flash:generateContent", None),
            Ok(GeminiCall {
                model: "gemini-2.5-flash".into(),
                stream: false
            })
        );
        assert_eq!(
            call("/v1beta/models/g:streamGenerateContent", Some("key=lt_x")),
            Err(BodyProblem::GeminiNotSse)
        );
        assert!(call("/v1beta/models/g:countTokens", None)
            .unwrap_err()
            .not_found());
        assert_eq!(
            call("/v1beta/models/a/../b:generateContent", None),
            Err(BodyProblem::GeminiModel)
        );
        assert_eq!(
            call("/v1beta/models/a?x:generateContent", None),
            Err(BodyProblem::GeminiModel)
        );
        let long = format!("/v1beta/models/{}:generateContent", "m".repeat(1 << 12));
        assert_eq!(
            call(&long, None),
            Err(BodyProblem::TooLong("model", MAX_MODEL_BYTES))
        );
    }

    #[test]
    fn a_gemini_head_takes_its_shape_from_generation_config_and_tools() {
        let call = GeminiCall {
            model: "gemini-2.5-flash".into(),
            stream: true,
        };
        let body = br#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}],
            "generationConfig":{"maxOutputTokens":256,"temperature":0.3,"topP":0.8,
              "responseMimeType":"application/json","thinkingConfig":{"thinkingBudget":1024}},
            "tools":[{"functionDeclarations":[{"name":"a"},{"name":"b"}]},{"googleSearch":{}}],
            "toolConfig":{"functionCallingConfig":{"mode":"ANY"}}}"#;
        let h = parse_gemini_head(call.clone(), body).unwrap();
        assert_eq!(
            (h.model.as_str(), h.stream, h.model_span),
            ("gemini-2.5-flash", true, None)
        );
        assert_eq!(h.shape.max_output_tokens, Some(256));
        assert_eq!(h.shape.temperature, Some(0.3));
        assert_eq!(h.shape.top_p, Some(0.8));
        assert_eq!(h.shape.response_format.as_deref(), Some("json_object"));
        assert_eq!(
            h.shape.reasoning_effort.as_deref(),
            Some("thinking_budget:1024")
        );
        assert_eq!(h.shape.tool_count, Some(3));
        assert_eq!(h.shape.tool_choice.as_deref(), Some("any"));
        let bare = parse_gemini_head(call.clone(), br#"{"contents":[]}"#).unwrap();
        assert_eq!(bare.shape, RequestShape::default());
        assert_eq!(
            parse_gemini_head(call.clone(), b"[1]"),
            Err(BodyProblem::NotAnObject)
        );
        assert!(matches!(
            parse_gemini_head(call, b"{nope"),
            Err(BodyProblem::NotJson(_))
        ));
    }

    #[test]
    fn ids_and_traceparents_are_the_bytes_in_lowercase_hex() {
        let bytes: Vec<u8> = (0..=255).collect();
        for piece in bytes.chunks(13).chain([&bytes[..0], &bytes[..40]]) {
            let mut s = "x".to_string();
            push_hex(&mut s, piece);
            assert_eq!(s, format!("x{}", hex::encode(piece)));
        }
        let (trace, span) = ([0xa5; 16], [0x0f; 8]);
        assert_eq!(
            traceparent(&trace, &span, false),
            format!("00-{}-{}-00", hex::encode(trace), hex::encode(span))
        );
        let id = request_id();
        assert!(
            id.len() == 36
                && id[4..]
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        );
    }

    #[test]
    fn escaped_model_names_are_unescaped() {
        let h = parse_head(br#"{"model":"a\/b"}"#).unwrap();
        assert_eq!(h.model, "a/b");
    }

    #[test]
    fn client_trace_id_is_kept_and_a_bad_one_replaced() {
        let t = trace(Some(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ));
        assert_eq!(t.trace_id, "0af7651916cd43dd8448eb211c80319c");
        assert!(t
            .traceparent
            .starts_with("00-0af7651916cd43dd8448eb211c80319c-"));
        assert!(!t.traceparent.contains("b7ad6b7169203331"));
        let t = trace(Some("garbage"));
        assert_eq!(t.trace_id.len(), 32);
        assert_eq!(t.span.parent_span_id, None);
    }

    #[test]
    fn the_gateway_span_is_the_one_propagated_under_the_client_span() {
        let t = trace(Some(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ));
        assert_eq!(hex::encode(t.span.trace_id), t.trace_id);
        assert_eq!(
            t.span.parent_span_id.map(hex::encode).as_deref(),
            Some("b7ad6b7169203331")
        );
        assert!(t.span.sampled);
        assert_eq!(
            t.traceparent,
            format!("00-{}-{}-01", t.trace_id, hex::encode(t.span.span_id))
        );
        // Without a client context: a new root, sampled.
        let t = trace(None);
        assert_eq!(t.span.parent_span_id, None);
        assert!(t.span.sampled && t.traceparent.ends_with("-01"));
    }

    #[test]
    fn an_unsampled_client_trace_stays_unsampled_upstream() {
        let t = trace(Some(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        ));
        assert!(!t.span.sampled);
        assert!(t.traceparent.ends_with("-00"), "{}", t.traceparent);
    }

    #[test]
    fn a_zero_or_uppercase_parent_span_is_not_a_parent() {
        for sid in ["0000000000000000", "B7AD6B7169203331", "b7ad6b71692033zz"] {
            let t = trace(Some(&format!(
                "00-0af7651916cd43dd8448eb211c80319c-{sid}-01"
            )));
            assert_eq!(t.trace_id, "0af7651916cd43dd8448eb211c80319c", "{sid}");
            assert_eq!(t.span.parent_span_id, None, "{sid}");
        }
    }
}
