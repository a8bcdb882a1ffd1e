//! Anthropic Messages requests: the decoder (a Messages client's body into the hub) and the
//! encoder (the hub into a Messages upstream's body, with its max_tokens and thinking rules).

use serde_json::{json, Map, Value};

use super::error::RequestError;
use super::hub::{
    Document, Effort, Image, Instruction, InstructionRole, JsonSchema, Message, OutputFormat, Part,
    Reasoning, ReasoningSummary, Source, Thought, Tool, ToolCall, ToolChoice, ToolResult,
};
use super::json::{Obj, Path, Result};
use super::shared::{arguments_object, insert_opt};
use super::{Cap, Decoder, Encoder, HubRequest, Knob};

const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "output_format",
    "service_tier",
    "cache_control",
    "container",
    "mcp_servers",
    "context_management",
    "inference_geo",
];

const UNKNOWN: &str = "not a Messages field laptime can translate";
const CACHE_HINT: &str = "prompt caching hints are Anthropic's; other providers cache by prefix";

/// Anthropic's smallest thinking budget.
const MIN_BUDGET: u32 = 1024;

pub(super) fn decode(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(FIELDS, UNKNOWN)?;
    for (key, reason) in [
        ("container", "code execution containers are Anthropic's"),
        ("mcp_servers", "the MCP connector is Anthropic's"),
        ("context_management", "context management is Anthropic's"),
        ("inference_geo", "inference regions are Anthropic's"),
    ] {
        if o.get(key).is_some() {
            return Err(o.path.key(key).unsupported(reason));
        }
    }
    if let Some(tier) = o.str("service_tier")? {
        if tier != "auto" {
            return Err(o.path.unsupported_value(
                "service_tier",
                tier,
                "service tiers are not translated",
            ));
        }
    }
    if o.get("cache_control").is_some() {
        d.omitted.note(|| "cache_control".into(), CACHE_HINT);
    }
    o.str("model")?;
    d.hub.stream = o.bool("stream")?;
    d.hub.max_output_tokens = o.u32("max_tokens")?;
    d.hub.temperature = o.f64("temperature")?;
    d.hub.top_p = o.f64("top_p")?;
    d.hub.top_k = o.u32("top_k")?;
    if d.hub.top_k.is_some() {
        d.need(Cap::TopK, &o.path.key("top_k"))?;
    }
    d.hub.stop = o.strings("stop_sequences")?;
    if !d.hub.stop.is_empty() {
        d.need(Cap::Stop, &o.path.key("stop_sequences"))?;
    }
    if let Some(meta) = o.get("metadata") {
        let at = o.path.key("metadata");
        let meta = Obj::new(meta, &at)?;
        meta.only(&["user_id"], UNKNOWN)?;
        d.hub.user = meta.str("user_id")?.map(str::to_string);
    }
    system(o, d)?;
    thinking(o, d)?;
    output_config(o, d)?;
    o.each_object("tools", |t| {
        let tool = tool(t, d)?;
        d.hub.tools.push(tool);
        Ok(())
    })?;
    if let Some(choice) = o.get("tool_choice") {
        let at = o.path.key("tool_choice");
        tool_choice(Obj::new(choice, &at)?, d)?;
    }
    if !o.each_object("messages", |m| message(m, d))? {
        return Err(o.path.key("messages").invalid("required"));
    }
    Ok(())
}

fn system(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let at = o.path.key("system");
    let parts = match o.get("system") {
        None => return Ok(()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                let at = at.index(i);
                let b = Obj::new(b, &at)?;
                match text_block(b, d)? {
                    Part::Text(t) => parts.push(t),
                    _ => return Err(at.invalid("expected a text block")),
                }
            }
            parts
        }
        Some(_) => return Err(at.invalid("expected a string or an array of text blocks")),
    };
    let parts: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
    if !parts.is_empty() {
        d.hub.instructions.push(Instruction {
            role: InstructionRole::System,
            parts,
        });
    }
    Ok(())
}

fn thinking(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let Some(t) = o.get("thinking") else {
        return Ok(());
    };
    let at = o.path.key("thinking");
    let t = Obj::new(t, &at)?;
    t.only(&["type", "budget_tokens", "display"], UNKNOWN)?;
    d.hub.reasoning = Some(match t.req_str("type")? {
        "enabled" => {
            let b_at = at.key("budget_tokens");
            Reasoning::Budget(
                t.u32("budget_tokens")?
                    .ok_or_else(|| b_at.invalid("required"))?,
            )
        }
        "disabled" => Reasoning::Disabled,
        "adaptive" => Reasoning::Dynamic,
        other => {
            return Err(at
                .key("type")
                .invalid(format!("unknown thinking type {other:?}")))
        }
    });
    match t.str("display")? {
        None | Some("omitted") => {}
        Some("summarized") => d.hub.reasoning_summary = Some(ReasoningSummary::Auto),
        Some(other) => {
            return Err(at
                .key("display")
                .invalid(format!("unknown display {other:?}")))
        }
    }
    Ok(())
}

fn output_config(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    if let Some(f) = o.get("output_format") {
        let at = o.path.key("output_format");
        d.hub.output = Some(output_format(Obj::new(f, &at)?)?);
    }
    let Some(c) = o.get("output_config") else {
        return Ok(());
    };
    let at = o.path.key("output_config");
    let c = Obj::new(c, &at)?;
    c.only(&["effort", "format"], UNKNOWN)?;
    if let Some(word) = c.str("effort")? {
        let effort = match word {
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" => Effort::High,
            "xhigh" => Effort::XHigh,
            "max" => Effort::Max,
            _ => {
                return Err(at
                    .key("effort")
                    .invalid("expected low, medium, high, xhigh or max"))
            }
        };
        d.hub.reasoning = match d.hub.reasoning {
            Some(Reasoning::Disabled) => Some(Reasoning::Disabled),
            _ => Some(Reasoning::Effort(effort)),
        };
    }
    if let Some(f) = c.get("format") {
        let at = at.key("format");
        d.hub.output = Some(output_format(Obj::new(f, &at)?)?);
    }
    Ok(())
}

fn output_format(f: Obj<'_>) -> Result<OutputFormat> {
    f.only(&["type", "schema"], UNKNOWN)?;
    match f.req_str("type")? {
        "json_schema" => Ok(OutputFormat::JsonSchema(JsonSchema {
            name: None,
            description: None,
            schema: f
                .get("schema")
                .cloned()
                .ok_or_else(|| f.path.key("schema").invalid("required"))?,
            strict: None,
        })),
        other => Err(f
            .path
            .key("type")
            .invalid(format!("unknown format {other:?}"))),
    }
}

fn tool(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<Tool> {
    if let Some(kind) = o.str("type")? {
        if kind != "custom" {
            return Err(o.path.unsupported_value(
                "type",
                kind,
                "Anthropic's server tools are not translated to other providers",
            ));
        }
    }
    o.only(
        &[
            "type",
            "name",
            "description",
            "input_schema",
            "cache_control",
            "strict",
        ],
        UNKNOWN,
    )?;
    if o.get("cache_control").is_some() {
        let at = o.path.key("cache_control");
        d.omitted.note(|| at.render(), CACHE_HINT);
    }
    Ok(Tool {
        name: o.req_str("name")?.to_string(),
        description: o.str("description")?.map(str::to_string),
        parameters: Some(
            o.get("input_schema")
                .cloned()
                .ok_or_else(|| o.path.key("input_schema").invalid("required"))?,
        ),
        strict: o.bool("strict")?,
    })
}

fn tool_choice(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(&["type", "name", "disable_parallel_tool_use"], UNKNOWN)?;
    d.hub.tool_choice = Some(match o.req_str("type")? {
        "auto" => ToolChoice::Auto,
        "any" => ToolChoice::Required,
        "none" => ToolChoice::None,
        "tool" => ToolChoice::Named(o.req_str("name")?.to_string()),
        other => {
            return Err(o
                .path
                .key("type")
                .invalid(format!("unknown tool choice {other:?}")))
        }
    });
    if let Some(disable) = o.bool("disable_parallel_tool_use")? {
        d.hub.parallel_tool_calls = Some(!disable);
        if disable {
            d.need(Cap::ParallelOff, &o.path.key("disable_parallel_tool_use"))?;
        }
    }
    Ok(())
}

fn message(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(&["role", "content"], UNKNOWN)?;
    let role = o.req_str("role")?;
    let at = o.path.key("content");
    let blocks: Vec<(usize, &Value)> = match o.get("content") {
        Some(Value::String(s)) => {
            let parts = if s.is_empty() {
                vec![]
            } else {
                vec![Part::Text(s.clone())]
            };
            match role {
                "user" => d.push(Message::User(parts)),
                "assistant" => d.push(Message::Assistant(parts)),
                other => {
                    return Err(o
                        .path
                        .key("role")
                        .invalid(format!("unknown role {other:?}")))
                }
            }
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks.iter().enumerate().collect(),
        _ => return Err(at.invalid("expected a string or an array of content blocks")),
    };
    match role {
        "user" => user_blocks(&blocks, &at, d),
        "assistant" => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks {
                let at = at.index(i);
                let b = Obj::new(b, &at)?;
                if let Some(p) = assistant_block(b, d)? {
                    parts.push(p);
                }
            }
            d.push(Message::Assistant(parts));
            Ok(())
        }
        other => Err(o
            .path
            .key("role")
            .invalid(format!("unknown role {other:?}"))),
    }
}

/// A user turn: its tool results become tool messages and the rest user messages, in order.
fn user_blocks(blocks: &[(usize, &Value)], at: &Path<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let mut pending = Vec::new();
    for &(i, b) in blocks {
        let at = at.index(i);
        let b = Obj::new(b, &at)?;
        if b.str("type")? == Some("tool_result") {
            if !pending.is_empty() {
                d.push(Message::User(std::mem::take(&mut pending)));
            }
            let result = tool_result(b, d)?;
            d.push_tool(result);
        } else if let Some(p) = media_or_text_block(b, d)? {
            pending.push(p);
        }
    }
    if !pending.is_empty() {
        d.push(Message::User(pending));
    }
    Ok(())
}

fn note_cache_control(b: Obj<'_>, d: &mut Decoder<'_>) {
    if b.get("cache_control").is_some() {
        let at = b.path.key("cache_control");
        d.omitted.note(|| at.render(), CACHE_HINT);
    }
}

fn text_block(b: Obj<'_>, d: &mut Decoder<'_>) -> Result<Part> {
    b.only(&["type", "text", "cache_control", "citations"], UNKNOWN)?;
    if b.req_str("type")? != "text" {
        return Err(b.path.key("type").invalid("expected a text block"));
    }
    note_cache_control(b, d);
    if b.array("citations")?.is_some_and(|c| !c.is_empty()) {
        let at = b.path.key("citations");
        d.omitted.note(
            || at.render(),
            "citations of an earlier answer are Anthropic's",
        );
    }
    Ok(Part::Text(b.req_str("text")?.to_string()))
}

/// A text, image or document block (what a user turn and a tool result may hold).
fn media_or_text_block(b: Obj<'_>, d: &mut Decoder<'_>) -> Result<Option<Part>> {
    match b.req_str("type")? {
        "text" => match text_block(b, d)? {
            Part::Text(t) if t.is_empty() => Ok(None),
            p => Ok(Some(p)),
        },
        "image" => {
            b.only(&["type", "source", "cache_control"], UNKNOWN)?;
            note_cache_control(b, d);
            let source = source(b, d, Cap::ImageUrl)?;
            Ok(Some(Part::Image(Image {
                source,
                detail: None,
            })))
        }
        "document" => {
            b.only(
                &[
                    "type",
                    "source",
                    "title",
                    "context",
                    "citations",
                    "cache_control",
                ],
                UNKNOWN,
            )?;
            note_cache_control(b, d);
            if b.get("context").is_some() {
                return Err(b
                    .path
                    .key("context")
                    .unsupported("document context is Anthropic's"));
            }
            if let Some(c) = b.get("citations") {
                let at = b.path.key("citations");
                if Obj::new(c, &at)?.bool("enabled")? == Some(true) {
                    return Err(at.unsupported("citations are Anthropic's"));
                }
            }
            let source = source(b, d, Cap::DocumentUrl)?;
            Ok(Some(Part::Document(Document {
                source,
                name: b.str("title")?.map(str::to_string),
            })))
        }
        kind => {
            Err(b
                .path
                .unsupported_value("type", kind, "this content block type is not translated"))
        }
    }
}

/// An image or document `source`: base64 bytes or a URL.
fn source(b: Obj<'_>, d: &Decoder<'_>, url_cap: Cap) -> Result<Source> {
    let at = b.path.key("source");
    let s = Obj::new(b.get("source").unwrap_or(&Value::Null), &at)?;
    match s.req_str("type")? {
        "base64" => {
            s.only(&["type", "media_type", "data"], UNKNOWN)?;
            Ok(Source::Base64 {
                media_type: s.req_str("media_type")?.to_string(),
                data: s.req_str("data")?.to_string(),
            })
        }
        "url" => {
            s.only(&["type", "url"], UNKNOWN)?;
            d.need(url_cap, &at)?;
            Ok(Source::Url(s.req_str("url")?.to_string()))
        }
        kind => {
            Err(at.unsupported_value("type", kind, "only base64 and URL sources are translated"))
        }
    }
}

fn tool_result(b: Obj<'_>, d: &mut Decoder<'_>) -> Result<ToolResult> {
    b.only(
        &[
            "type",
            "tool_use_id",
            "content",
            "is_error",
            "cache_control",
        ],
        UNKNOWN,
    )?;
    note_cache_control(b, d);
    let at = b.path.key("content");
    let content = match b.get("content") {
        None => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::with_capacity(blocks.len());
            for (i, c) in blocks.iter().enumerate() {
                let at = at.index(i);
                let c = Obj::new(c, &at)?;
                if let Some(p) = media_or_text_block(c, d)? {
                    if !matches!(p, Part::Text(_)) {
                        d.need(Cap::ToolResultMedia, &at)?;
                    }
                    parts.push(p);
                }
            }
            parts
        }
        Some(_) => return Err(at.invalid("expected a string or an array of content blocks")),
    };
    Ok(ToolResult {
        call_id: b.req_str("tool_use_id")?.to_string(),
        name: None,
        content,
        is_error: b.bool("is_error")?.unwrap_or(false),
    })
}

fn assistant_block(b: Obj<'_>, d: &mut Decoder<'_>) -> Result<Option<Part>> {
    match b.req_str("type")? {
        "tool_use" => {
            b.only(&["type", "id", "name", "input", "cache_control"], UNKNOWN)?;
            note_cache_control(b, d);
            let at = b.path.key("input");
            Ok(Some(Part::ToolCall(ToolCall {
                id: b.req_str("id")?.to_string(),
                name: b.req_str("name")?.to_string(),
                arguments: arguments_object(b.get("input").unwrap_or(&Value::Null), &at)?,
            })))
        }
        "thinking" => {
            b.only(&["type", "thinking", "signature"], UNKNOWN)?;
            Ok(Some(Part::Thought(Thought {
                text: b.req_str("thinking")?.to_string(),
                signature: b.str("signature")?.map(str::to_string),
                redacted: None,
                id: None,
            })))
        }
        "redacted_thinking" => {
            b.only(&["type", "data"], UNKNOWN)?;
            Ok(Some(Part::Thought(Thought {
                text: String::new(),
                signature: None,
                redacted: Some(b.req_str("data")?.to_string()),
                id: None,
            })))
        }
        "tool_result" => Err(b
            .path
            .key("type")
            .invalid("a tool result belongs in a user turn")),
        _ => media_or_text_block(b, d),
    }
}

// === encoder ===

pub(super) fn encode(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Result<Map<String, Value>> {
    let max_tokens = hub.max_output_tokens.or(e.opts.default_max_tokens).ok_or(
        RequestError::MissingMaxTokens {
            field: e.field(Knob::MaxTokens),
        },
    )?;
    let mut out = Map::new();
    out.insert("model".into(), e.opts.upstream_model.into());
    out.insert("max_tokens".into(), max_tokens.into());
    let system: Vec<&String> = hub.instructions.iter().flat_map(|i| &i.parts).collect();
    match system.as_slice() {
        [] => {}
        [one] => {
            out.insert("system".into(), (*one).clone().into());
        }
        many => {
            let blocks: Vec<Value> = many
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect();
            out.insert("system".into(), blocks.into());
        }
    }
    out.insert("messages".into(), turns(&hub.messages, e).into());
    out.insert("stream".into(), e.opts.stream.into());
    insert_opt(&mut out, "temperature", hub.temperature);
    insert_opt(&mut out, "top_p", hub.top_p);
    insert_opt(&mut out, "top_k", hub.top_k);
    if !hub.stop.is_empty() {
        out.insert("stop_sequences".into(), hub.stop.clone().into());
    }
    if !hub.tools.is_empty() {
        let tools: Vec<Value> = hub.tools.iter().map(|t| tool_value(t, e)).collect();
        out.insert("tools".into(), tools.into());
    }
    if let Some(choice) = tool_choice_value(hub, e) {
        out.insert("tool_choice".into(), choice);
    }
    let mut output_config = Map::new();
    if let Some(thinking) = thinking_value(hub, max_tokens, e, &mut output_config)? {
        out.insert("thinking".into(), thinking);
    }
    match &hub.output {
        None | Some(OutputFormat::Text) => {}
        Some(OutputFormat::JsonObject) => {
            // Decoders refuse it for this upstream (Cap::JsonObject); kept total for safety.
            return Err(RequestError::unsupported(
                e.field(Knob::OutputFormat),
                Cap::JsonObject.reason(),
            ));
        }
        Some(OutputFormat::JsonSchema(s)) => {
            if s.name.is_some() || s.description.is_some() || s.strict.is_some() {
                e.omit(
                    "json schema name",
                    "Anthropic's output format has only the schema",
                );
            }
            output_config.insert(
                "format".into(),
                json!({"type": "json_schema", "schema": s.schema}),
            );
        }
    }
    if !output_config.is_empty() {
        out.insert("output_config".into(), output_config.into());
    }
    if let Some(user) = &hub.user {
        out.insert("metadata".into(), json!({"user_id": user}));
    }
    if !hub.metadata.is_empty() {
        e.omit("metadata", "Anthropic's metadata holds only a user id");
    }
    if hub.prompt_cache_key.is_some() {
        e.omit(
            "prompt_cache_key",
            "Anthropic caches by prefix without a key",
        );
    }
    Ok(out)
}

/// The conversation as alternating turns: tool results join the user turn after them, and
/// consecutive same-role messages are one turn.
fn turns(messages: &[Message], e: &mut Encoder<'_, '_>) -> Vec<Value> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(messages.len());
    for m in messages {
        let (role, blocks) = match m {
            Message::User(parts) => ("user", blocks(parts, e)),
            Message::Assistant(parts) => ("assistant", blocks(parts, e)),
            Message::Tool(r) => ("user", vec![tool_result_value(r, e)]),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

fn blocks(parts: &[Part], e: &mut Encoder<'_, '_>) -> Vec<Value> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            Part::Text(t) => out.push(json!({"type": "text", "text": t})),
            Part::Image(img) => {
                if img.detail.is_some() {
                    e.omit("image detail", "Anthropic has no image detail setting");
                }
                out.push(json!({"type": "image", "source": source_value(&img.source)}));
            }
            Part::Document(doc) => {
                let mut block = Map::new();
                block.insert("type".into(), "document".into());
                block.insert("source".into(), source_value(&doc.source));
                insert_opt(&mut block, "title", doc.name.clone());
                out.push(block.into());
            }
            Part::ToolCall(c) => out.push(json!({
                "type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments,
            })),
            Part::Thought(t) => match (&t.redacted, &t.signature) {
                (Some(data), _) => out.push(json!({"type": "redacted_thinking", "data": data})),
                (None, Some(sig)) => out.push(json!({
                    "type": "thinking", "thinking": t.text, "signature": sig,
                })),
                (None, None) => e.omit(
                    "reasoning of an earlier turn",
                    "Anthropic takes back only reasoning it signed",
                ),
            },
        }
    }
    out
}

fn source_value(source: &Source) -> Value {
    match source {
        Source::Url(url) => json!({"type": "url", "url": url}),
        Source::Base64 { media_type, data } => {
            json!({"type": "base64", "media_type": media_type, "data": data})
        }
    }
}

fn tool_result_value(r: &ToolResult, e: &mut Encoder<'_, '_>) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), "tool_result".into());
    block.insert("tool_use_id".into(), r.call_id.clone().into());
    match r.content.as_slice() {
        [] => {}
        [Part::Text(t)] => {
            block.insert("content".into(), t.clone().into());
        }
        parts => {
            block.insert("content".into(), blocks(parts, e).into());
        }
    }
    if r.is_error {
        block.insert("is_error".into(), true.into());
    }
    block.into()
}

fn tool_value(t: &Tool, e: &mut Encoder<'_, '_>) -> Value {
    let mut tool = Map::new();
    tool.insert("name".into(), t.name.clone().into());
    insert_opt(&mut tool, "description", t.description.clone());
    let schema = t
        .parameters
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    tool.insert("input_schema".into(), schema);
    if t.strict.is_some() {
        e.omit(
            "tools[].strict",
            "Anthropic tool definitions have no strict flag",
        );
    }
    tool.into()
}

fn tool_choice_value(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Option<Value> {
    let mut choice = match &hub.tool_choice {
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Named(name)) => json!({"type": "tool", "name": name}),
        Some(ToolChoice::None) => {
            if hub.parallel_tool_calls.is_some() {
                e.omit(
                    "parallel_tool_calls",
                    "no tool is called when tool choice is none",
                );
            }
            return Some(json!({"type": "none"}));
        }
        None if hub.parallel_tool_calls == Some(false) => json!({"type": "auto"}),
        None => return None,
    };
    if let (Some(parallel), Some(obj)) = (hub.parallel_tool_calls, choice.as_object_mut()) {
        obj.insert("disable_parallel_tool_use".into(), (!parallel).into());
    }
    Some(choice)
}

/// The `thinking` value, checked against Anthropic's rules: a budget of at least 1024 and
/// below max_tokens, and with thinking on, temperature 1, no top_k, top_p ≥ 0.95 and no
/// forced tool.
fn thinking_value(
    hub: &HubRequest,
    max_tokens: u32,
    e: &mut Encoder<'_, '_>,
    output_config: &mut Map<String, Value>,
) -> Result<Option<Value>> {
    let table = e.opts.reasoning;
    let thinking = match hub.reasoning {
        None => return Ok(None),
        Some(Reasoning::Disabled) => return Ok(Some(json!({"type": "disabled"}))),
        Some(Reasoning::Dynamic) => json!({"type": "adaptive"}),
        Some(Reasoning::Effort(effort)) if table.native_effort => {
            let word = match effort {
                Effort::Minimal | Effort::Low => "low",
                other => other.as_str(),
            };
            output_config.insert("effort".into(), word.into());
            json!({"type": "adaptive"})
        }
        Some(Reasoning::Effort(effort)) => {
            let mut budget = table.budget_for(effort).max(MIN_BUDGET);
            if budget >= max_tokens {
                // An effort is a wish, not a number: keep half the cap for the answer.
                budget = max_tokens / 2;
            }
            if budget < MIN_BUDGET {
                return Err(RequestError::invalid(
                    e.field(Knob::MaxTokens),
                    "too small for reasoning: Anthropic needs a thinking budget of at least 1024 \
                     tokens below max_tokens",
                ));
            }
            json!({"type": "enabled", "budget_tokens": budget})
        }
        Some(Reasoning::Budget(asked)) => {
            // Anthropic's floor is the nearest budget it takes to a smaller one.
            let budget = asked.max(MIN_BUDGET);
            if budget >= max_tokens {
                return Err(RequestError::invalid(
                    e.field(Knob::Reasoning),
                    "the thinking budget must be below the max output tokens (and at least 1024)",
                ));
            }
            json!({"type": "enabled", "budget_tokens": budget})
        }
    };
    if hub.temperature.is_some_and(|t| t != 1.0) {
        return Err(RequestError::unsupported(
            e.field(Knob::Temperature),
            "Anthropic allows only temperature 1 with thinking",
        ));
    }
    if hub.top_k.is_some() {
        return Err(RequestError::unsupported(
            e.field(Knob::TopK),
            "Anthropic allows no top_k with thinking",
        ));
    }
    if hub.top_p.is_some_and(|p| p < 0.95) {
        return Err(RequestError::unsupported(
            e.field(Knob::TopP),
            "Anthropic allows only top_p of 0.95 or more with thinking",
        ));
    }
    if matches!(
        hub.tool_choice,
        Some(ToolChoice::Required | ToolChoice::Named(_))
    ) {
        return Err(RequestError::unsupported(
            e.field(Knob::ToolChoice),
            "Anthropic cannot force a tool call with thinking",
        ));
    }
    Ok(Some(thinking))
}
