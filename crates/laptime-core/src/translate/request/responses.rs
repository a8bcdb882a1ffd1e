//! OpenAI Responses requests: the decoder (a Responses client's body, stateless, into the hub)
//! and the encoder (the hub into a Responses upstream's body, with `store: false`).

use serde_json::{json, Map, Value};

use super::chat::{response_format_value, tool_result_text};
use super::hub::{
    Document, Instruction, InstructionRole, JsonSchema, Message, OutputFormat, Part, Reasoning,
    ReasoningSummary, Source, Thought, Tool, ToolCall, ToolChoice, ToolResult, Verbosity,
};
use super::json::{data_url, Obj, Path, Result};
use super::shared::{
    file_data, image_detail, image_detail_word, image_from_url, insert_opt, openai_effort,
    openai_effort_word, openai_tool_choice, parse_arguments,
};
use super::{Cap, Decoder, Encoder, HubRequest};

const FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "stream",
    "stream_options",
    "store",
    "include",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "truncation",
    "background",
    "previous_response_id",
    "conversation",
    "prompt",
    "max_tool_calls",
    "top_logprobs",
];

const UNKNOWN: &str = "not a Responses field laptime can translate";

/// What `include` may ask for: the reasoning state to carry to the next turn.
const ENCRYPTED_REASONING: &str = "reasoning.encrypted_content";

pub(super) fn decode(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(FIELDS, UNKNOWN)?;
    refuse_the_stateful(o)?;
    o.str("model")?;
    d.hub.stream = o.bool("stream")?;
    if let Some(so) = o.get("stream_options") {
        let at = o.path.key("stream_options");
        Obj::new(so, &at)?.only(&["include_obfuscation"], UNKNOWN)?;
    }
    if let Some(include) = o.array("include")? {
        let at = o.path.key("include");
        for (i, item) in include.iter().enumerate() {
            let at = at.index(i);
            match item.as_str() {
                Some(ENCRYPTED_REASONING) => d.hub.include_encrypted_reasoning = true,
                Some(other) => {
                    return Err(
                        at.unsupported_as(other, "only reasoning.encrypted_content is translated")
                    )
                }
                None => return Err(at.invalid("expected a string")),
            }
        }
    }
    d.hub.max_output_tokens = o.u32("max_output_tokens")?;
    d.hub.temperature = o.f64("temperature")?;
    d.hub.top_p = o.f64("top_p")?;
    d.hub.user = match o.str("safety_identifier")? {
        Some(id) => Some(id.to_string()),
        None => o.str("user")?.map(str::to_string),
    };
    d.hub.metadata = o.string_map("metadata")?;
    d.hub.prompt_cache_key = o.str("prompt_cache_key")?.map(str::to_string);
    if let Some(tier) = o.str("service_tier")? {
        if !matches!(tier, "auto" | "default") {
            return Err(o.path.unsupported_value(
                "service_tier",
                tier,
                "service tiers are not translated",
            ));
        }
    }
    text_options(o, d)?;
    reasoning(o, d)?;
    tools_and_choice(o, d)?;
    if let Some(text) = o.str("instructions")? {
        if !text.is_empty() {
            d.hub.instructions.push(Instruction {
                role: InstructionRole::System,
                parts: vec![text.to_string()],
            });
        }
    }
    let at = o.path.key("input");
    match o.get("input") {
        Some(Value::String(s)) => d.push(Message::User(vec![Part::Text(s.clone())])),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                let at = at.index(i);
                input_item(Obj::new(item, &at)?, d)?;
            }
        }
        Some(_) => return Err(at.invalid("expected a string or an array of input items")),
        None => return Err(at.invalid("required")),
    }
    Ok(())
}

/// Conversation state kept by OpenAI cannot be reached through another provider.
fn refuse_the_stateful(o: Obj<'_>) -> Result<()> {
    for (key, reason) in [
        (
            "previous_response_id",
            "stored responses exist only at OpenAI; send the whole conversation",
        ),
        (
            "conversation",
            "stored conversations exist only at OpenAI; send the whole conversation",
        ),
        ("prompt", "stored prompt templates exist only at OpenAI"),
        (
            "max_tool_calls",
            "a cap on built-in tool calls exists only in Responses",
        ),
        ("top_logprobs", "log probabilities are not translated"),
    ] {
        if o.get(key).is_some() {
            return Err(o.path.key(key).unsupported(reason));
        }
    }
    if o.bool("store")? == Some(true) {
        return Err(o
            .path
            .key("store")
            .unsupported("a translated response is not stored by OpenAI; send store: false"));
    }
    if o.bool("background")? == Some(true) {
        return Err(o
            .path
            .key("background")
            .unsupported("background responses are OpenAI's"));
    }
    if o.str("truncation")?.is_some_and(|t| t != "disabled") {
        return Err(o
            .path
            .key("truncation")
            .unsupported("automatic truncation is OpenAI's"));
    }
    Ok(())
}

fn text_options(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let Some(text) = o.get("text") else {
        return Ok(());
    };
    let at = o.path.key("text");
    let text = Obj::new(text, &at)?;
    text.only(&["format", "verbosity"], UNKNOWN)?;
    if let Some(word) = text.str("verbosity")? {
        let v_at = at.key("verbosity");
        d.hub.verbosity = Some(match word {
            "low" => Verbosity::Low,
            "medium" => Verbosity::Medium,
            "high" => Verbosity::High,
            _ => return Err(v_at.invalid("expected low, medium or high")),
        });
        d.need(Cap::Verbosity, &v_at)?;
    }
    let Some(format) = text.get("format") else {
        return Ok(());
    };
    let f_at = at.key("format");
    let f = Obj::new(format, &f_at)?;
    d.hub.output = Some(match f.req_str("type")? {
        "text" => OutputFormat::Text,
        "json_object" => {
            d.need(Cap::JsonObject, &f_at.key("type"))?;
            OutputFormat::JsonObject
        }
        "json_schema" => {
            f.only(
                &["type", "name", "description", "schema", "strict"],
                UNKNOWN,
            )?;
            OutputFormat::JsonSchema(JsonSchema {
                name: Some(f.req_str("name")?.to_string()),
                description: f.str("description")?.map(str::to_string),
                schema: f.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: f.bool("strict")?,
            })
        }
        other => {
            return Err(f_at
                .key("type")
                .invalid(format!("unknown format {other:?}")))
        }
    });
    Ok(())
}

fn reasoning(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let Some(r) = o.get("reasoning") else {
        return Ok(());
    };
    let at = o.path.key("reasoning");
    let r = Obj::new(r, &at)?;
    r.only(&["effort", "summary", "generate_summary"], UNKNOWN)?;
    if let Some(word) = r.str("effort")? {
        d.hub.reasoning = Some(openai_effort(word, &at.key("effort"))?);
    }
    for key in ["summary", "generate_summary"] {
        if let Some(word) = r.str(key)? {
            d.hub.reasoning_summary = Some(match word {
                "auto" => ReasoningSummary::Auto,
                "concise" => ReasoningSummary::Concise,
                "detailed" => ReasoningSummary::Detailed,
                _ => return Err(at.key(key).invalid("expected auto, concise or detailed")),
            });
        }
    }
    Ok(())
}

fn tools_and_choice(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.each_object("tools", |t| {
        d.hub.tools.push(tool(t)?);
        Ok(())
    })?;
    if let Some(choice) = o.get("tool_choice") {
        d.hub.tool_choice = Some(tool_choice(choice, &o.path.key("tool_choice"))?);
    }
    d.hub.parallel_tool_calls = o.bool("parallel_tool_calls")?;
    if d.hub.parallel_tool_calls == Some(false) {
        d.need(Cap::ParallelOff, &o.path.key("parallel_tool_calls"))?;
    }
    Ok(())
}

fn tool(o: Obj<'_>) -> Result<Tool> {
    let kind = o.req_str("type")?;
    if kind != "function" {
        return Err(o.path.unsupported_value(
            "type",
            kind,
            "OpenAI's built-in tools are not translated to other providers",
        ));
    }
    o.only(
        &["type", "name", "description", "parameters", "strict"],
        UNKNOWN,
    )?;
    Ok(Tool {
        name: o.req_str("name")?.to_string(),
        description: o.str("description")?.map(str::to_string),
        parameters: o.get("parameters").cloned(),
        strict: o.bool("strict")?,
    })
}

fn tool_choice(v: &Value, at: &Path<'_>) -> Result<ToolChoice> {
    match v {
        Value::String(s) => openai_tool_choice(s, at),
        _ => {
            let o = Obj::new(v, at)?;
            match o.req_str("type")? {
                "function" => Ok(ToolChoice::Named(o.req_str("name")?.to_string())),
                kind => Err(at.unsupported_value(
                    "type",
                    kind,
                    "only function tool choices are translated",
                )),
            }
        }
    }
}

fn input_item(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    match o.str("type")? {
        None | Some("message") => message(o, d),
        Some("function_call") => {
            o.only(
                &["type", "call_id", "name", "arguments", "id", "status"],
                UNKNOWN,
            )?;
            let arguments = o.str("arguments")?.unwrap_or("");
            let call = ToolCall {
                id: o.req_str("call_id")?.to_string(),
                name: o.req_str("name")?.to_string(),
                arguments: parse_arguments(arguments, &o.path.key("arguments"))?,
            };
            d.push(Message::Assistant(vec![Part::ToolCall(call)]));
            Ok(())
        }
        Some("function_call_output") => {
            o.only(&["type", "call_id", "output", "id", "status"], UNKNOWN)?;
            let at = o.path.key("output");
            let content = match o.get("output") {
                None => Vec::new(),
                Some(Value::String(s)) if s.is_empty() => Vec::new(),
                Some(Value::String(s)) => vec![Part::Text(s.clone())],
                Some(Value::Array(parts)) => {
                    let mut out = Vec::with_capacity(parts.len());
                    for (i, p) in parts.iter().enumerate() {
                        let at = at.index(i);
                        if let Some(part) = content_part(Obj::new(p, &at)?, d)? {
                            if !matches!(part, Part::Text(_)) {
                                d.need(Cap::ToolResultMedia, &at)?;
                            }
                            out.push(part);
                        }
                    }
                    out
                }
                Some(_) => return Err(at.invalid("expected a string or an array of content")),
            };
            d.push_tool(ToolResult {
                call_id: o.req_str("call_id")?.to_string(),
                name: None,
                content,
                is_error: false,
            });
            Ok(())
        }
        Some("reasoning") => {
            o.only(
                &[
                    "type",
                    "id",
                    "summary",
                    "encrypted_content",
                    "content",
                    "status",
                ],
                UNKNOWN,
            )?;
            let thought = reasoning_item(o)?;
            d.push(Message::Assistant(vec![Part::Thought(thought)]));
            Ok(())
        }
        Some(kind) => Err(o.path.unsupported_value(
            "type",
            kind,
            "only messages, function calls and their outputs, and reasoning are translated",
        )),
    }
}

fn reasoning_item(o: Obj<'_>) -> Result<Thought> {
    let mut texts = Vec::new();
    // The full reasoning text when the provider gave it, else its summary.
    for key in ["content", "summary"] {
        o.each_object(key, |p| {
            texts.push(p.req_str("text")?.to_string());
            Ok(())
        })?;
        if !texts.is_empty() {
            break;
        }
    }
    Ok(Thought {
        text: texts.join("\n\n"),
        signature: o.str("encrypted_content")?.map(str::to_string),
        redacted: None,
        id: o.str("id")?.map(str::to_string),
    })
}

fn message(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(&["type", "role", "content", "id", "status"], UNKNOWN)?;
    let role = o.req_str("role")?;
    let at = o.path.key("content");
    let parts = match o.get("content") {
        None => Vec::new(),
        Some(Value::String(s)) if s.is_empty() => Vec::new(),
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let at = at.index(i);
                if let Some(p) = content_part(Obj::new(item, &at)?, d)? {
                    parts.push(p);
                }
            }
            parts
        }
        Some(_) => return Err(at.invalid("expected a string or an array of content")),
    };
    match role {
        "user" => d.push(Message::User(parts)),
        "assistant" => d.push(Message::Assistant(parts)),
        "system" | "developer" => {
            let texts: Vec<String> = parts
                .into_iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t),
                    _ => None,
                })
                .collect();
            if !texts.is_empty() {
                let role = if role == "system" {
                    InstructionRole::System
                } else {
                    InstructionRole::Developer
                };
                d.hub.instructions.push(Instruction { role, parts: texts });
            }
        }
        other => {
            return Err(o
                .path
                .key("role")
                .invalid(format!("unknown role {other:?}")))
        }
    }
    Ok(())
}

fn content_part(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<Option<Part>> {
    match o.req_str("type")? {
        "input_text" | "output_text" => {
            o.only(&["type", "text", "annotations", "logprobs"], UNKNOWN)?;
            if o.array("annotations")?.is_some_and(|a| !a.is_empty()) {
                let at = o.path.key("annotations");
                d.omitted.note(
                    || at.render(),
                    "annotations of an earlier answer are OpenAI's",
                );
            }
            let text = o.req_str("text")?;
            Ok((!text.is_empty()).then(|| Part::Text(text.to_string())))
        }
        "refusal" => {
            o.only(&["type", "refusal"], UNKNOWN)?;
            Ok(Some(Part::Text(o.req_str("refusal")?.to_string())))
        }
        "input_image" => {
            o.only(&["type", "image_url", "file_id", "detail"], UNKNOWN)?;
            if o.get("file_id").is_some() {
                return Err(o
                    .path
                    .key("file_id")
                    .unsupported("files uploaded to OpenAI exist only there; send image_url"));
            }
            let detail = match o.str("detail")? {
                Some(w) => Some(image_detail(w, &o.path.key("detail"))?),
                None => None,
            };
            let url_at = o.path.key("image_url");
            let url = o
                .str("image_url")?
                .ok_or_else(|| url_at.invalid("required"))?;
            Ok(Some(Part::Image(image_from_url(url, detail, d, &url_at)?)))
        }
        "input_file" => {
            o.only(
                &["type", "file_data", "file_url", "file_id", "filename"],
                UNKNOWN,
            )?;
            if o.get("file_id").is_some() {
                return Err(o
                    .path
                    .key("file_id")
                    .unsupported("files uploaded to OpenAI exist only there; send file_data"));
            }
            let name = o.str("filename")?.map(str::to_string);
            let source = match (o.str("file_data")?, o.str("file_url")?) {
                (Some(data), _) => file_data(data, &o.path.key("file_data"))?,
                (None, Some(url)) => {
                    d.need(Cap::DocumentUrl, &o.path.key("file_url"))?;
                    Source::Url(url.to_string())
                }
                (None, None) => return Err(o.path.invalid("file_data or file_url is required")),
            };
            Ok(Some(Part::Document(Document { source, name })))
        }
        kind => Err(o
            .path
            .unsupported_value("type", kind, "this content type is not translated")),
    }
}

// === encoder ===

pub(super) fn encode(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    out.insert("model".into(), e.opts.upstream_model.into());
    let mut input: Vec<Value> = Vec::with_capacity(hub.messages.len() + 1);
    for i in &hub.instructions {
        let role = match i.role {
            InstructionRole::System => "system",
            InstructionRole::Developer => "developer",
        };
        let content: Value = match i.parts.as_slice() {
            [one] => one.clone().into(),
            parts => parts
                .iter()
                .map(|t| json!({"type": "input_text", "text": t}))
                .collect(),
        };
        input.push(json!({"role": role, "content": content}));
    }
    for m in &hub.messages {
        encode_message(m, e, &mut input);
    }
    out.insert("input".into(), input.into());
    out.insert("stream".into(), e.opts.stream.into());
    // The conversation is the client's to keep; nothing is left stored at OpenAI.
    out.insert("store".into(), false.into());
    insert_opt(&mut out, "max_output_tokens", hub.max_output_tokens);
    insert_opt(&mut out, "temperature", hub.temperature);
    insert_opt(&mut out, "top_p", hub.top_p);
    if !hub.tools.is_empty() {
        let tools: Vec<Value> = hub.tools.iter().map(tool_value).collect();
        out.insert("tools".into(), tools.into());
    }
    if let Some(choice) = &hub.tool_choice {
        let choice = match choice {
            ToolChoice::Auto => "auto".into(),
            ToolChoice::None => "none".into(),
            ToolChoice::Required => "required".into(),
            ToolChoice::Named(name) => json!({"type": "function", "name": name}),
        };
        out.insert("tool_choice".into(), choice);
    }
    insert_opt(&mut out, "parallel_tool_calls", hub.parallel_tool_calls);
    text_and_reasoning(hub, e, &mut out);
    insert_opt(&mut out, "user", hub.user.clone());
    if !hub.metadata.is_empty() {
        let map: Map<String, Value> = hub
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into()))
            .collect();
        out.insert("metadata".into(), map.into());
    }
    insert_opt(&mut out, "prompt_cache_key", hub.prompt_cache_key.clone());
    Ok(out)
}

/// `text` (format, verbosity), `reasoning` and the `include` that keeps reasoning state.
fn text_and_reasoning(hub: &HubRequest, e: &Encoder<'_, '_>, out: &mut Map<String, Value>) {
    let mut text = Map::new();
    if let Some(format) = &hub.output {
        // Chat's shape with the schema's fields one level up.
        let mut f = response_format_value(format);
        if let Some(schema) = f.get_mut("json_schema").map(Value::take) {
            if let (Value::Object(f), Value::Object(schema)) = (&mut f, schema) {
                f.remove("json_schema");
                f.extend(schema);
            }
        }
        text.insert("format".into(), f);
    }
    insert_opt(&mut text, "verbosity", hub.verbosity.map(Verbosity::as_str));
    if !text.is_empty() {
        out.insert("text".into(), text.into());
    }
    let mut reasoning = Map::new();
    if let Some(r) = hub.reasoning {
        insert_opt(
            &mut reasoning,
            "effort",
            openai_effort_word(r, e.opts.reasoning),
        );
    }
    insert_opt(
        &mut reasoning,
        "summary",
        hub.reasoning_summary.map(ReasoningSummary::as_str),
    );
    if !reasoning.is_empty() {
        out.insert("reasoning".into(), reasoning.into());
    }
    let thinking = hub.reasoning.is_some_and(|r| r != Reasoning::Disabled);
    if hub.include_encrypted_reasoning || thinking {
        // Without storage, the encrypted reasoning is the only way to carry it to the next turn.
        out.insert("include".into(), json!([ENCRYPTED_REASONING]));
    }
}

fn encode_message(m: &Message, e: &mut Encoder<'_, '_>, out: &mut Vec<Value>) {
    match m {
        Message::User(parts) => {
            let content: Vec<Value> = parts.iter().filter_map(|p| content_value(p, e)).collect();
            out.push(json!({"role": "user", "content": content}));
        }
        Message::Assistant(parts) => {
            for p in parts {
                match p {
                    Part::Text(t) => out.push(json!({"role": "assistant", "content": t})),
                    Part::ToolCall(c) => out.push(json!({
                        "type": "function_call", "call_id": c.id, "name": c.name,
                        "arguments": c.arguments.to_string(),
                    })),
                    Part::Thought(t) => match (&t.id, &t.signature) {
                        (Some(id), Some(sig)) => {
                            let summary: Vec<Value> = if t.text.is_empty() {
                                Vec::new()
                            } else {
                                vec![json!({"type": "summary_text", "text": t.text})]
                            };
                            out.push(json!({
                                "type": "reasoning", "id": id, "summary": summary,
                                "encrypted_content": sig,
                            }));
                        }
                        _ => e.omit(
                            "reasoning of an earlier turn",
                            "Responses takes back only reasoning items it encrypted",
                        ),
                    },
                    Part::Image(_) | Part::Document(_) => e.omit(
                        "assistant image or document",
                        "Responses assistant messages carry only text",
                    ),
                }
            }
        }
        Message::Tool(r) => {
            let output = if r.content.iter().all(|p| matches!(p, Part::Text(_))) {
                let texts: Vec<&str> = r
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::Text(t) => Some(t.as_str()),
                        _ => None,
                    })
                    .collect();
                match tool_result_text(&texts, r.is_error) {
                    Value::Array(parts) => parts
                        .into_iter()
                        .map(|mut p| {
                            p["type"] = "input_text".into();
                            p
                        })
                        .collect(),
                    other => other,
                }
            } else {
                let mut parts: Vec<Value> = Vec::with_capacity(r.content.len() + 1);
                if r.is_error {
                    parts.push(json!({"type": "input_text",
                        "text": super::chat::ERROR_PREFIX.trim_end()}));
                }
                parts.extend(r.content.iter().filter_map(|p| content_value(p, e)));
                parts.into()
            };
            out.push(
                json!({"type": "function_call_output", "call_id": r.call_id, "output": output}),
            );
        }
    }
}

fn content_value(p: &Part, e: &mut Encoder<'_, '_>) -> Option<Value> {
    match p {
        Part::Text(t) => Some(json!({"type": "input_text", "text": t})),
        Part::Image(img) => {
            let url = match &img.source {
                Source::Url(u) => u.clone(),
                Source::Base64 { media_type, data } => data_url(media_type, data),
            };
            let detail = img.detail.map_or("auto", image_detail_word);
            Some(json!({"type": "input_image", "image_url": url, "detail": detail}))
        }
        Part::Document(doc) => {
            let mut file = Map::new();
            file.insert("type".into(), "input_file".into());
            match &doc.source {
                Source::Url(u) => file.insert("file_url".into(), u.clone().into()),
                Source::Base64 { media_type, data } => {
                    file.insert("file_data".into(), data_url(media_type, data).into())
                }
            };
            insert_opt(&mut file, "filename", doc.name.clone());
            Some(file.into())
        }
        Part::ToolCall(_) | Part::Thought(_) => {
            e.omit(
                "tool call or reasoning in a user message",
                "Responses user messages carry no tool calls or reasoning",
            );
            None
        }
    }
}

fn tool_value(t: &Tool) -> Value {
    let mut tool = Map::new();
    tool.insert("type".into(), "function".into());
    tool.insert("name".into(), t.name.clone().into());
    insert_opt(&mut tool, "description", t.description.clone());
    tool.insert(
        "parameters".into(),
        t.parameters.clone().unwrap_or(Value::Null),
    );
    // Responses makes a tool strict unless told otherwise; the other dialects do not.
    tool.insert("strict".into(), t.strict.unwrap_or(false).into());
    tool.into()
}
