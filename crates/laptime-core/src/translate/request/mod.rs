//! The request half of the hub: each dialect's request decoder (client side) and encoder
//! (upstream side), and the one entry point the proxy calls, [`translate_request`].
//!
//! A decoder reads the client's body into a [`HubRequest`], checking as it goes that the chosen
//! upstream can carry each field (the [`Cap`] table), so an error names the field as the client
//! wrote it. An encoder writes the hub as the upstream's body, and refuses only what depends on
//! several fields at once (Anthropic's max_tokens and thinking rules). What neither carries nor
//! refuses — hints the upstream would not use — is listed in [`TranslatedRequest::omitted`].
//!
//! The whole mapping, the reasoning table and what each upstream refuses: `docs/translation.md`.

mod chat;
mod error;
mod gemini;
pub mod hub;
mod json;
mod messages;
mod reasoning;
mod responses;
mod shared;

#[cfg(test)]
mod gemini_tests;
#[cfg(test)]
mod round_trip;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::Dialect;

pub use error::{Omission, RequestError};
pub use hub::HubRequest;
pub use reasoning::ReasoningTable;

use error::Omissions;
use hub::{Message, Part, ToolResult};
use json::{Obj, Path, Result};

/// What the caller knows that the client's body does not say.
#[derive(Debug, Clone, Copy)]
pub struct RequestOptions<'a> {
    /// The model name the upstream knows the model by; it replaces the client's.
    pub upstream_model: &'a str,
    /// Whether to ask the upstream for a stream (for Gemini the caller puts it in the URL).
    pub stream: bool,
    /// The cap on output tokens for this model when the client gives none (Anthropic requires
    /// one).
    pub default_max_tokens: Option<u32>,
    pub reasoning: &'a ReasoningTable,
    /// Top-level client fields copied into the upstream body as they are, untranslated (the
    /// gateway's own simulator reads its script from `laptime_sim` in every dialect).
    pub pass_through: &'a [&'a str],
    /// The start of the assistant's answer, for the upstream to continue (a continuation after
    /// a cut): sent as a last assistant turn, which Anthropic and Gemini continue, and Chat
    /// servers that support it (DeepSeek, Mistral, vLLM) continue when it says `prefix: true`.
    /// Responses has no such turn: refused.
    pub prefill: Option<&'a str>,
}

/// A body for the upstream, and what the response side needs to answer the client.
#[derive(Debug, Clone, PartialEq)]
pub struct TranslatedRequest {
    /// The upstream's request body (JSON).
    pub body: Vec<u8>,
    /// Chat clients only: the client asked (`stream_options.include_usage`) for the final
    /// usage-only chunk. The upstream is always asked for usage, so the response side can honour
    /// this either way.
    pub client_wants_usage_chunk: bool,
    /// What was deliberately left out, one entry per reason.
    pub omitted: Vec<Omission>,
    /// The request as the hub read it: tools, output format, reasoning summary and the tool
    /// names by call id are what the response side reads from it.
    pub hub: HubRequest,
}

/// Translates a client's request body into the upstream's.
pub fn translate_request(
    client: Dialect,
    upstream: Dialect,
    body: &[u8],
    opts: &RequestOptions<'_>,
) -> std::result::Result<TranslatedRequest, RequestError> {
    let mut omitted = Omissions::default();
    let mut map = json::parse_body(body)?;
    // Taken out first: a pass-through field is carried as the client spelled it.
    let carried: Vec<(String, Value)> = opts
        .pass_through
        .iter()
        .filter_map(|k| map.remove_entry(*k))
        .collect();
    if client == Dialect::Gemini {
        gemini::camel_case_keys(&mut map);
    }
    let mut hub = decode_map(client, upstream, &map, &mut omitted)?;
    if let Some(prefill) = opts.prefill {
        if upstream == Dialect::Responses {
            return Err(RequestError::unsupported(
                "(continuation prefill)",
                "the Responses API cannot continue an assistant prefill",
            ));
        }
        hub.messages
            .push(Message::Assistant(vec![Part::Text(prefill.to_owned())]));
    }
    let mut value = encode(upstream, client, &hub, opts, &mut omitted)?;
    if opts.prefill.is_some() && upstream == Dialect::Chat {
        let last = value
            .get_mut("messages")
            .and_then(Value::as_array_mut)
            .and_then(|m| m.last_mut())
            .and_then(Value::as_object_mut);
        if let Some(last) = last {
            last.insert("prefix".into(), Value::Bool(true));
        }
    }
    value.extend(carried);
    Ok(TranslatedRequest {
        body: Value::Object(value).to_string().into_bytes(),
        client_wants_usage_chunk: client == Dialect::Chat && hub.include_usage == Some(true),
        omitted: omitted.0,
        hub,
    })
}

/// Decodes a client's body into the hub, refusing what `upstream` cannot carry.
#[cfg(test)]
pub(crate) fn decode(
    client: Dialect,
    upstream: Dialect,
    body: &[u8],
    omitted: &mut Omissions,
) -> Result<HubRequest> {
    decode_map(client, upstream, &json::parse_body(body)?, omitted)
}

fn decode_map(
    client: Dialect,
    upstream: Dialect,
    map: &Map<String, Value>,
    omitted: &mut Omissions,
) -> Result<HubRequest> {
    let root = Path::Root;
    let obj = Obj { map, path: &root };
    let mut d = Decoder {
        upstream,
        omitted,
        hub: HubRequest::default(),
        names: HashMap::new(),
    };
    match client {
        Dialect::Chat => chat::decode(obj, &mut d)?,
        Dialect::Responses => responses::decode(obj, &mut d)?,
        Dialect::Messages => messages::decode(obj, &mut d)?,
        Dialect::Gemini => gemini::decode(obj, &mut d)?,
    }
    Ok(d.hub)
}

/// Encodes the hub as `upstream`'s body. `client` names fields in errors.
pub(crate) fn encode(
    upstream: Dialect,
    client: Dialect,
    hub: &HubRequest,
    opts: &RequestOptions<'_>,
    omitted: &mut Omissions,
) -> Result<Map<String, Value>> {
    let mut e = Encoder {
        opts,
        client,
        omitted,
    };
    match upstream {
        Dialect::Chat => chat::encode(hub, &mut e),
        Dialect::Responses => responses::encode(hub, &mut e),
        Dialect::Messages => messages::encode(hub, &mut e),
        Dialect::Gemini => gemini::encode(hub, &mut e),
    }
}

/// A field that only some upstreams can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cap {
    TopK,
    Stop,
    Seed,
    Penalties,
    /// More than one answer per request.
    Choices,
    Verbosity,
    JsonObject,
    /// An image given by URL rather than its bytes.
    ImageUrl,
    /// A document given by URL rather than its bytes.
    DocumentUrl,
    /// Images or documents inside a tool result.
    ToolResultMedia,
    /// Turning parallel tool calls off.
    ParallelOff,
}

impl Cap {
    /// Whether `upstream` can carry it.
    pub(crate) fn carried_by(self, upstream: Dialect) -> bool {
        use Dialect::{Chat, Gemini, Messages, Responses};
        match self {
            Cap::TopK => matches!(upstream, Messages | Gemini),
            Cap::Stop => matches!(upstream, Chat | Messages | Gemini),
            Cap::Seed | Cap::Penalties => matches!(upstream, Chat | Gemini),
            // Gemini's candidateCount exists, but laptime answers one candidate.
            Cap::Choices => matches!(upstream, Chat),
            Cap::Verbosity => matches!(upstream, Chat | Responses),
            Cap::JsonObject => matches!(upstream, Chat | Responses | Gemini),
            // Gemini's fileData wants a MIME type that a bare URL lacks.
            Cap::ImageUrl => matches!(upstream, Chat | Responses | Messages),
            Cap::DocumentUrl | Cap::ToolResultMedia => matches!(upstream, Responses | Messages),
            Cap::ParallelOff => matches!(upstream, Chat | Responses | Messages),
        }
    }

    pub(crate) fn reason(self) -> &'static str {
        match self {
            Cap::TopK => "the upstream has no top_k sampling",
            Cap::Stop => "the upstream has no stop sequences",
            Cap::Seed => "the upstream has no sampling seed",
            Cap::Penalties => "the upstream has no presence or frequency penalty",
            Cap::Choices => "the upstream generates one answer per request",
            Cap::Verbosity => "the upstream has no verbosity setting",
            Cap::JsonObject => {
                "the upstream has no schemaless JSON mode; give a JSON schema instead"
            }
            Cap::ImageUrl => "the upstream takes images only as base64 data",
            Cap::DocumentUrl => "the upstream takes documents only as base64 data",
            Cap::ToolResultMedia => "the upstream takes only text in tool results",
            Cap::ParallelOff => "the upstream cannot turn parallel tool calls off",
        }
    }
}

/// The state of one decoding: the hub so far, and what the upstream can carry.
pub(crate) struct Decoder<'o> {
    pub(crate) upstream: Dialect,
    pub(crate) omitted: &'o mut Omissions,
    pub(crate) hub: HubRequest,
    /// Tool name by call id, from the assistant's calls so far.
    names: HashMap<String, String>,
}

impl Decoder<'_> {
    /// Refuses a field the upstream cannot carry.
    pub(crate) fn need(&self, cap: Cap, at: &Path<'_>) -> Result<()> {
        if cap.carried_by(self.upstream) {
            Ok(())
        } else {
            Err(at.unsupported(cap.reason()))
        }
    }

    pub(crate) fn push(&mut self, message: Message) {
        if let Message::Assistant(parts) = &message {
            for part in parts {
                if let Part::ToolCall(call) = part {
                    self.names.insert(call.id.clone(), call.name.clone());
                }
            }
        }
        self.hub.push(message);
    }

    /// Pushes a tool result, naming its tool from the earlier call with its id.
    pub(crate) fn push_tool(&mut self, mut result: ToolResult) {
        if result.name.is_none() {
            result.name = self.names.get(&result.call_id).cloned();
        }
        self.hub.push(Message::Tool(result));
    }
}

/// The state of one encoding.
pub(crate) struct Encoder<'a, 'o> {
    pub(crate) opts: &'a RequestOptions<'a>,
    /// The client's dialect, to name its fields in an error.
    pub(crate) client: Dialect,
    pub(crate) omitted: &'o mut Omissions,
}

/// A request setting, named per client dialect for errors that depend on several fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Knob {
    MaxTokens,
    Temperature,
    TopP,
    TopK,
    Reasoning,
    ToolChoice,
    OutputFormat,
    /// The id a tool result answers (Gemini needs the called tool's name from it).
    ToolCallId,
}

impl Encoder<'_, '_> {
    /// The client's name for a setting.
    pub(crate) fn field(&self, knob: Knob) -> &'static str {
        match (self.client, knob) {
            (Dialect::Chat, Knob::MaxTokens) => "max_completion_tokens",
            (Dialect::Responses, Knob::MaxTokens) => "max_output_tokens",
            (Dialect::Messages, Knob::MaxTokens) => "max_tokens",
            (Dialect::Chat, Knob::Reasoning) => "reasoning_effort",
            (Dialect::Responses, Knob::Reasoning) => "reasoning.effort",
            (Dialect::Messages, Knob::Reasoning) => "thinking",
            (Dialect::Gemini, Knob::MaxTokens) => "generationConfig.maxOutputTokens",
            (Dialect::Gemini, Knob::Reasoning) => "generationConfig.thinkingConfig",
            (Dialect::Gemini, Knob::Temperature) => "generationConfig.temperature",
            (Dialect::Gemini, Knob::TopP) => "generationConfig.topP",
            (Dialect::Gemini, Knob::TopK) => "generationConfig.topK",
            (Dialect::Gemini, Knob::ToolChoice) => "toolConfig.functionCallingConfig",
            (Dialect::Gemini, Knob::OutputFormat) => "generationConfig.responseMimeType",
            (Dialect::Gemini, Knob::ToolCallId) => "contents[].parts[].functionResponse.id",
            (Dialect::Chat, Knob::ToolCallId) => "messages[].tool_call_id",
            (Dialect::Responses, Knob::ToolCallId) => "input[].call_id",
            (Dialect::Messages, Knob::ToolCallId) => "messages[].content[].tool_use_id",
            (_, Knob::Temperature) => "temperature",
            (_, Knob::TopP) => "top_p",
            (_, Knob::TopK) => "top_k",
            (_, Knob::ToolChoice) => "tool_choice",
            (Dialect::Chat, Knob::OutputFormat) => "response_format",
            (Dialect::Responses, Knob::OutputFormat) => "text.format",
            (Dialect::Messages, Knob::OutputFormat) => "output_config.format",
        }
    }

    pub(crate) fn omit(&mut self, field: &str, reason: &'static str) {
        self.omitted.note(|| field.to_string(), reason);
    }
}
