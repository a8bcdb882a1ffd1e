//! OpenAI Chat Completions requests: the decoder (a Chat client's body into the hub) and the
//! encoder (the hub into a Chat upstream's body).

use serde_json::{json, Map, Value};

use super::hub::{
    Document, Instruction, InstructionRole, JsonSchema, Message, OutputFormat, Part, Source, Tool,
    ToolCall, ToolChoice, ToolResult, Verbosity,
};
use super::json::{data_url, Obj, Path, Result};
use super::shared::{
    file_data, image_detail, image_detail_word, image_from_url, insert_opt, openai_effort,
    openai_effort_word, openai_tool_choice, parse_arguments,
};
use super::{Cap, Decoder, Encoder, HubRequest};

/// Every top-level field a Chat request may have; the rest are refused by name.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "n",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logprobs",
    "top_logprobs",
    "logit_bias",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "verbosity",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "metadata",
    "store",
    "service_tier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
    "functions",
    "function_call",
];

const UNKNOWN: &str = "not a Chat Completions field laptime can translate";

pub(super) fn decode(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(FIELDS, UNKNOWN)?;
    refuse_the_untranslatable(o)?;
    o.str("model")?;
    d.hub.stream = o.bool("stream")?;
    if let Some(so) = o.get("stream_options") {
        let at = o.path.key("stream_options");
        let so = Obj::new(so, &at)?;
        // include_obfuscation pads OpenAI's own stream; the client's stream is written here.
        so.only(&["include_usage", "include_obfuscation"], UNKNOWN)?;
        d.hub.include_usage = so.bool("include_usage")?;
    }
    d.hub.max_output_tokens = match o.u32("max_completion_tokens")? {
        Some(n) => Some(n),
        None => o.u32("max_tokens")?,
    };
    sampling(o, d)?;
    if let Some(word) = o.str("reasoning_effort")? {
        d.hub.reasoning = Some(openai_effort(word, &o.path.key("reasoning_effort"))?);
    }
    if let Some(word) = o.str("verbosity")? {
        let at = o.path.key("verbosity");
        d.hub.verbosity = Some(verbosity(word, &at)?);
        d.need(Cap::Verbosity, &at)?;
    }
    d.hub.user = match o.str("safety_identifier")? {
        Some(id) => Some(id.to_string()),
        None => o.str("user")?.map(str::to_string),
    };
    d.hub.metadata = o.string_map("metadata")?;
    d.hub.prompt_cache_key = o.str("prompt_cache_key")?.map(str::to_string);
    if let Some(rf) = o.get("response_format") {
        let at = o.path.key("response_format");
        d.hub.output = Some(response_format(Obj::new(rf, &at)?, d)?);
    }
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
    if !o.each_object("messages", |m| message(m, d))? {
        return Err(o.path.key("messages").invalid("required"));
    }
    Ok(())
}

/// Fields no other upstream has, refused whenever they ask for something.
fn refuse_the_untranslatable(o: Obj<'_>) -> Result<()> {
    for (key, reason) in [
        ("audio", "audio output is not translated"),
        (
            "prediction",
            "predicted outputs exist only in Chat Completions",
        ),
        (
            "web_search_options",
            "built-in web search is not translated to other providers",
        ),
        (
            "functions",
            "the deprecated functions field is not translated; use tools",
        ),
        (
            "function_call",
            "the deprecated function_call field is not translated; use tool_choice",
        ),
        ("top_logprobs", "log probabilities are not translated"),
    ] {
        if o.get(key).is_some() {
            return Err(o.path.key(key).unsupported(reason));
        }
    }
    if o.bool("logprobs")? == Some(true) {
        return Err(o
            .path
            .key("logprobs")
            .unsupported("log probabilities are not translated"));
    }
    if o.object("logit_bias")?.is_some_and(|m| !m.is_empty()) {
        return Err(o
            .path
            .key("logit_bias")
            .unsupported("logit bias exists only in Chat Completions"));
    }
    if o.bool("store")? == Some(true) {
        return Err(o
            .path
            .key("store")
            .unsupported("a translated completion is not stored by OpenAI"));
    }
    if let Some(tier) = o.str("service_tier")? {
        if !matches!(tier, "auto" | "default") {
            return Err(o.path.unsupported_value(
                "service_tier",
                tier,
                "service tiers are not translated",
            ));
        }
    }
    let modalities = o.strings("modalities")?;
    if let Some(i) = modalities.iter().position(|m| m != "text") {
        let at = o.path.key("modalities");
        return Err(at.index(i).unsupported("only text output is translated"));
    }
    Ok(())
}

/// Temperature, top_p, stop, n, seed and the penalties.
fn sampling(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    d.hub.temperature = o.f64("temperature")?;
    d.hub.top_p = o.f64("top_p")?;
    d.hub.stop = o.strings("stop")?;
    if !d.hub.stop.is_empty() {
        d.need(Cap::Stop, &o.path.key("stop"))?;
    }
    d.hub.choices = o.u32("n")?;
    if d.hub.choices.is_some_and(|n| n > 1) {
        d.need(Cap::Choices, &o.path.key("n"))?;
    }
    d.hub.seed = o.i64("seed")?;
    if d.hub.seed.is_some() {
        d.need(Cap::Seed, &o.path.key("seed"))?;
    }
    for key in ["presence_penalty", "frequency_penalty"] {
        let v = o.f64(key)?;
        if v.is_some() {
            d.need(Cap::Penalties, &o.path.key(key))?;
        }
        match key {
            "presence_penalty" => d.hub.presence_penalty = v,
            _ => d.hub.frequency_penalty = v,
        }
    }
    Ok(())
}

fn verbosity(word: &str, at: &Path<'_>) -> Result<Verbosity> {
    match word {
        "low" => Ok(Verbosity::Low),
        "medium" => Ok(Verbosity::Medium),
        "high" => Ok(Verbosity::High),
        _ => Err(at.invalid("expected low, medium or high")),
    }
}

fn response_format(o: Obj<'_>, d: &Decoder<'_>) -> Result<OutputFormat> {
    let kind = o.req_str("type")?;
    match kind {
        "text" => Ok(OutputFormat::Text),
        "json_object" => {
            d.need(Cap::JsonObject, &o.path.key("type"))?;
            Ok(OutputFormat::JsonObject)
        }
        "json_schema" => {
            let at = o.path.key("json_schema");
            let s = Obj::new(o.get("json_schema").unwrap_or(&Value::Null), &at)?;
            s.only(&["name", "description", "schema", "strict"], UNKNOWN)?;
            Ok(OutputFormat::JsonSchema(JsonSchema {
                name: Some(s.req_str("name")?.to_string()),
                description: s.str("description")?.map(str::to_string),
                schema: s.get("schema").cloned().unwrap_or_else(|| json!({})),
                strict: s.bool("strict")?,
            }))
        }
        other => Err(o
            .path
            .key("type")
            .invalid(format!("unknown response format {other:?}"))),
    }
}

fn tool(o: Obj<'_>) -> Result<Tool> {
    let kind = o.req_str("type")?;
    if kind != "function" {
        return Err(o
            .path
            .unsupported_value("type", kind, "only function tools are translated"));
    }
    o.only(&["type", "function"], UNKNOWN)?;
    let at = o.path.key("function");
    let f = Obj::new(o.get("function").unwrap_or(&Value::Null), &at)?;
    f.only(&["name", "description", "parameters", "strict"], UNKNOWN)?;
    Ok(Tool {
        name: f.req_str("name")?.to_string(),
        description: f.str("description")?.map(str::to_string),
        parameters: f.get("parameters").cloned(),
        strict: f.bool("strict")?,
    })
}

fn tool_choice(v: &Value, at: &Path<'_>) -> Result<ToolChoice> {
    match v {
        Value::String(s) => openai_tool_choice(s, at),
        _ => {
            let o = Obj::new(v, at)?;
            let kind = o.req_str("type")?;
            if kind != "function" {
                return Err(at.unsupported_value(
                    "type",
                    kind,
                    "only function tool choices are translated",
                ));
            }
            let fat = at.key("function");
            let f = Obj::new(o.get("function").unwrap_or(&Value::Null), &fat)?;
            Ok(ToolChoice::Named(f.req_str("name")?.to_string()))
        }
    }
}

fn message(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let role = o.req_str("role")?;
    if o.get("name").is_some() {
        let at = o.path.key("name");
        d.omitted.note(
            || at.render(),
            "participant names have no equivalent upstream",
        );
    }
    match role {
        "system" | "developer" => {
            o.only(&["role", "content", "name"], UNKNOWN)?;
            let parts = content(o, d, Allow::Text)?
                .into_iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t),
                    _ => None,
                })
                .collect::<Vec<_>>();
            if !parts.is_empty() {
                let role = match role {
                    "system" => InstructionRole::System,
                    _ => InstructionRole::Developer,
                };
                d.hub.instructions.push(Instruction { role, parts });
            }
        }
        "user" => {
            o.only(&["role", "content", "name"], UNKNOWN)?;
            let parts = content(o, d, Allow::Media)?;
            d.push(Message::User(parts));
        }
        "assistant" => assistant(o, d)?,
        "tool" => {
            o.only(&["role", "content", "tool_call_id"], UNKNOWN)?;
            let content = content(o, d, Allow::Text)?;
            d.push_tool(ToolResult {
                call_id: o.req_str("tool_call_id")?.to_string(),
                name: None,
                content,
                is_error: false,
            });
        }
        "function" => {
            return Err(o.path.unsupported_value(
                "role",
                role,
                "the deprecated function role is not translated; use tool",
            ))
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

fn assistant(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(
        &[
            "role",
            "content",
            "refusal",
            "tool_calls",
            "name",
            "audio",
            "function_call",
        ],
        UNKNOWN,
    )?;
    if o.get("audio").is_some() {
        return Err(o.path.key("audio").unsupported("audio is not translated"));
    }
    if o.get("function_call").is_some() {
        return Err(o
            .path
            .key("function_call")
            .unsupported("the deprecated function_call is not translated; use tool_calls"));
    }
    let mut parts = content(o, d, Allow::Text)?;
    if let Some(refusal) = o.str("refusal")? {
        if !refusal.is_empty() {
            parts.push(Part::Text(refusal.to_string()));
        }
    }
    o.each_object("tool_calls", |c| {
        parts.push(Part::ToolCall(tool_call(c)?));
        Ok(())
    })?;
    d.push(Message::Assistant(parts));
    Ok(())
}

fn tool_call(o: Obj<'_>) -> Result<ToolCall> {
    if let Some(kind) = o.str("type")? {
        if kind != "function" {
            return Err(o.path.unsupported_value(
                "type",
                kind,
                "only function tool calls are translated",
            ));
        }
    }
    o.only(&["id", "type", "function"], UNKNOWN)?;
    let at = o.path.key("function");
    let f = Obj::new(o.get("function").unwrap_or(&Value::Null), &at)?;
    f.only(&["name", "arguments"], UNKNOWN)?;
    let arguments = f.str("arguments")?.unwrap_or("");
    Ok(ToolCall {
        id: o.req_str("id")?.to_string(),
        name: f.req_str("name")?.to_string(),
        arguments: parse_arguments(arguments, &at.key("arguments"))?,
    })
}

/// Which content parts a message may have.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Allow {
    Text,
    Media,
}

/// A message's `content`: a string or an array of parts.
fn content(o: Obj<'_>, d: &mut Decoder<'_>, allow: Allow) -> Result<Vec<Part>> {
    let at = o.path.key("content");
    match o.get("content") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![Part::Text(s.clone())]),
        Some(Value::Array(items)) => {
            let mut parts = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let at = at.index(i);
                if let Some(part) = content_part(Obj::new(item, &at)?, d, allow)? {
                    parts.push(part);
                }
            }
            Ok(parts)
        }
        Some(_) => Err(at.invalid("expected a string or an array of content parts")),
    }
}

fn content_part(o: Obj<'_>, d: &mut Decoder<'_>, allow: Allow) -> Result<Option<Part>> {
    let kind = o.req_str("type")?;
    match (kind, allow) {
        ("text", _) => {
            o.only(&["type", "text"], UNKNOWN)?;
            let text = o.req_str("text")?;
            Ok((!text.is_empty()).then(|| Part::Text(text.to_string())))
        }
        ("refusal", _) => {
            o.only(&["type", "refusal"], UNKNOWN)?;
            Ok(Some(Part::Text(o.req_str("refusal")?.to_string())))
        }
        ("image_url", Allow::Media) => {
            o.only(&["type", "image_url"], UNKNOWN)?;
            let at = o.path.key("image_url");
            let img = Obj::new(o.get("image_url").unwrap_or(&Value::Null), &at)?;
            img.only(&["url", "detail"], UNKNOWN)?;
            let detail = match img.str("detail")? {
                Some(w) => Some(image_detail(w, &at.key("detail"))?),
                None => None,
            };
            Ok(Some(Part::Image(image_from_url(
                img.req_str("url")?,
                detail,
                d,
                &at.key("url"),
            )?)))
        }
        ("file", Allow::Media) => {
            o.only(&["type", "file"], UNKNOWN)?;
            let at = o.path.key("file");
            let f = Obj::new(o.get("file").unwrap_or(&Value::Null), &at)?;
            f.only(&["file_data", "file_id", "filename"], UNKNOWN)?;
            if f.get("file_id").is_some() {
                return Err(at
                    .key("file_id")
                    .unsupported("files uploaded to OpenAI exist only there; send file_data"));
            }
            let data_at = at.key("file_data");
            let data = f
                .str("file_data")?
                .ok_or_else(|| data_at.invalid("required"))?;
            Ok(Some(Part::Document(Document {
                source: file_data(data, &data_at)?,
                name: f.str("filename")?.map(str::to_string),
            })))
        }
        ("input_audio", Allow::Media) => Err(o
            .path
            .key("input_audio")
            .unsupported("audio input is not translated")),
        _ => Err(o.path.unsupported_value(
            "type",
            kind,
            "this content part type is not translated here",
        )),
    }
}

// === encoder ===

pub(super) fn encode(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    out.insert("model".into(), e.opts.upstream_model.into());
    let mut messages: Vec<Value> = Vec::with_capacity(hub.messages.len() + 1);
    for i in &hub.instructions {
        let role = match i.role {
            InstructionRole::System => "system",
            InstructionRole::Developer => "developer",
        };
        let content = match i.parts.as_slice() {
            [one] => Value::String(one.clone()),
            parts => parts
                .iter()
                .map(|t| json!({"type": "text", "text": t}))
                .collect(),
        };
        messages.push(json!({"role": role, "content": content}));
    }
    for m in &hub.messages {
        encode_message(m, e, &mut messages);
    }
    out.insert("messages".into(), messages.into());
    out.insert("stream".into(), e.opts.stream.into());
    if e.opts.stream {
        // Always asked for, so usage is known; the client's own wish is returned separately.
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    insert_opt(&mut out, "max_completion_tokens", hub.max_output_tokens);
    insert_opt(&mut out, "temperature", hub.temperature);
    insert_opt(&mut out, "top_p", hub.top_p);
    if !hub.stop.is_empty() {
        out.insert("stop".into(), hub.stop.clone().into());
    }
    insert_opt(&mut out, "n", hub.choices);
    insert_opt(&mut out, "seed", hub.seed);
    insert_opt(&mut out, "presence_penalty", hub.presence_penalty);
    insert_opt(&mut out, "frequency_penalty", hub.frequency_penalty);
    if let Some(r) = hub.reasoning {
        insert_opt(
            &mut out,
            "reasoning_effort",
            openai_effort_word(r, e.opts.reasoning),
        );
    }
    if hub.reasoning_summary.is_some() {
        e.omit(
            "reasoning summary",
            "Chat Completions returns no reasoning summary",
        );
    }
    insert_opt(&mut out, "verbosity", hub.verbosity.map(Verbosity::as_str));
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
    if let Some(format) = &hub.output {
        out.insert("response_format".into(), response_format_value(format));
    }
    if !hub.tools.is_empty() {
        let tools: Vec<Value> = hub.tools.iter().map(tool_value).collect();
        out.insert("tools".into(), tools.into());
    }
    if let Some(choice) = &hub.tool_choice {
        out.insert("tool_choice".into(), tool_choice_value(choice));
    }
    insert_opt(&mut out, "parallel_tool_calls", hub.parallel_tool_calls);
    Ok(out)
}

fn encode_message(m: &Message, e: &mut Encoder<'_, '_>, out: &mut Vec<Value>) {
    match m {
        Message::User(parts) => {
            let content = user_content(parts, e);
            out.push(json!({"role": "user", "content": content}));
        }
        Message::Assistant(parts) => {
            let mut texts = Vec::new();
            let mut calls = Vec::new();
            for p in parts {
                match p {
                    Part::Text(t) => texts.push(t.as_str()),
                    Part::ToolCall(c) => calls.push(json!({
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()},
                    })),
                    Part::Thought(_) => e.omit(
                        "reasoning of an earlier turn",
                        "Chat Completions takes no reasoning back",
                    ),
                    Part::Image(_) | Part::Document(_) => e.omit(
                        "assistant image or document",
                        "Chat Completions assistant messages carry only text",
                    ),
                }
            }
            let mut msg = Map::new();
            msg.insert("role".into(), "assistant".into());
            let content = match texts.as_slice() {
                [] => Value::Null,
                [one] => Value::String((*one).to_string()),
                many => many
                    .iter()
                    .map(|t| json!({"type": "text", "text": t}))
                    .collect(),
            };
            msg.insert("content".into(), content);
            if !calls.is_empty() {
                msg.insert("tool_calls".into(), calls.into());
            }
            out.push(msg.into());
        }
        Message::Tool(r) => {
            let texts: Vec<&str> = r
                .content
                .iter()
                .filter_map(|p| match p {
                    Part::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            out.push(json!({
                "role": "tool",
                "tool_call_id": r.call_id,
                "content": tool_result_text(&texts, r.is_error),
            }));
        }
    }
}

/// A tool result's content. Chat has no error flag, so a failed call says so in its text.
pub(super) fn tool_result_text(texts: &[&str], is_error: bool) -> Value {
    let mut texts: Vec<String> = texts.iter().map(|t| (*t).to_string()).collect();
    if is_error {
        match texts.first_mut() {
            Some(first) => first.insert_str(0, ERROR_PREFIX),
            None => texts.push(ERROR_PREFIX.trim_end().to_string()),
        }
    }
    match texts.as_slice() {
        [] => Value::String(String::new()),
        [one] => Value::String(one.clone()),
        many => many
            .iter()
            .map(|t| json!({"type": "text", "text": t}))
            .collect(),
    }
}

/// What a failed tool call's result starts with where the upstream has no error flag.
pub(super) const ERROR_PREFIX: &str = "Error: ";

fn user_content(parts: &[Part], e: &mut Encoder<'_, '_>) -> Value {
    if let [Part::Text(t)] = parts {
        return Value::String(t.clone());
    }
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            Part::Text(t) => out.push(json!({"type": "text", "text": t})),
            Part::Image(img) => {
                let url = match &img.source {
                    Source::Url(u) => u.clone(),
                    Source::Base64 { media_type, data } => data_url(media_type, data),
                };
                let mut image_url = json!({"url": url});
                if let (Some(detail), Some(obj)) = (img.detail, image_url.as_object_mut()) {
                    obj.insert("detail".into(), image_detail_word(detail).into());
                }
                out.push(json!({"type": "image_url", "image_url": image_url}));
            }
            Part::Document(doc) => {
                // Decoders refuse document URLs for Chat (Cap::DocumentUrl).
                if let Source::Base64 { media_type, data } = &doc.source {
                    let mut file = json!({"file_data": data_url(media_type, data)});
                    if let (Some(name), Some(obj)) = (&doc.name, file.as_object_mut()) {
                        obj.insert("filename".into(), name.clone().into());
                    }
                    out.push(json!({"type": "file", "file": file}));
                }
            }
            Part::ToolCall(_) | Part::Thought(_) => e.omit(
                "tool call or reasoning in a user message",
                "Chat Completions user messages carry no tool calls or reasoning",
            ),
        }
    }
    out.into()
}

pub(super) fn response_format_value(format: &OutputFormat) -> Value {
    match format {
        OutputFormat::Text => json!({"type": "text"}),
        OutputFormat::JsonObject => json!({"type": "json_object"}),
        OutputFormat::JsonSchema(s) => {
            let mut schema = Map::new();
            schema.insert(
                "name".into(),
                s.name.as_deref().unwrap_or("response").into(),
            );
            insert_opt(&mut schema, "description", s.description.clone());
            schema.insert("schema".into(), s.schema.clone());
            insert_opt(&mut schema, "strict", s.strict);
            json!({"type": "json_schema", "json_schema": schema})
        }
    }
}

fn tool_value(t: &Tool) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), t.name.clone().into());
    insert_opt(&mut f, "description", t.description.clone());
    insert_opt(&mut f, "parameters", t.parameters.clone());
    insert_opt(&mut f, "strict", t.strict);
    json!({"type": "function", "function": f})
}

fn tool_choice_value(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
    }
}
