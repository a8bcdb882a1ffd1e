//! Google Gemini requests (`generateContent`): the decoder (a Gemini client's body into the hub)
//! and the encoder (the hub into a Gemini upstream's body). The model and stream-ness are in the
//! URL, so a client body has no `model` (one sent is ignored) and the encoder writes neither.
//!
//! Tool calls: Gemini answers a function by its name, and its calls may have no id. The decoder
//! gives each call without an id `call_<n>` (n counts the request's calls from 0) and matches a
//! response without an id to the earliest unanswered call of that name; the encoder writes the
//! hub's ids (Gemini's `id` fields) and needs each result's tool name.

use serde_json::{json, Map, Value};

use super::error::RequestError;
use super::hub::{
    Document, Effort, Image, Instruction, InstructionRole, JsonSchema, Message, OutputFormat, Part,
    Reasoning, ReasoningSummary, Source, Thought, Tool, ToolCall, ToolChoice, ToolResult,
};
use super::json::{Obj, Result};
use super::shared::{arguments_object, insert_opt};
use super::{Cap, Decoder, Encoder, HubRequest, Knob};

const FIELDS: &[&str] = &[
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
];

const CONFIG_FIELDS: &[&str] = &[
    "maxOutputTokens",
    "temperature",
    "topP",
    "topK",
    "stopSequences",
    "candidateCount",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "thinkingConfig",
    "seed",
    "presencePenalty",
    "frequencyPenalty",
    "responseModalities",
];

const UNKNOWN: &str = "not a Gemini field laptime can translate";

/// What a function response holds when it is the tool's output (Google's convention).
const OUTPUT: &str = "output";
/// What it holds when the tool failed.
const ERROR: &str = "error";

/// Keys whose values are the client's own JSON (function arguments and results, schemas):
/// their insides keep the client's spelling.
const FREE_FORM: &[&str] = &[
    "args",
    "response",
    "parameters",
    "parametersJsonSchema",
    "responseSchema",
    "responseJsonSchema",
];

/// Spells every field name of a Gemini body in lowerCamelCase, as Google's proto-JSON parser
/// accepts either spelling (google-genai itself sends `mime_type` and `file_uri` inside its
/// parts); the client's own JSON under [`FREE_FORM`] keys is left as written.
pub(super) fn camel_case_keys(map: &mut Map<String, Value>) {
    let entries = std::mem::take(map);
    for (key, mut value) in entries {
        let key = if key.contains('_') {
            lower_camel(&key)
        } else {
            key
        };
        if !FREE_FORM.contains(&key.as_str()) {
            camel_case_value(&mut value);
        }
        // The camelCase spelling wins when a body has both.
        if !map.contains_key(&key) {
            map.insert(key, value);
        }
    }
}

fn camel_case_value(value: &mut Value) {
    match value {
        Value::Object(m) => camel_case_keys(m),
        Value::Array(items) => items.iter_mut().for_each(camel_case_value),
        _ => {}
    }
}

fn lower_camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        if c == '_' {
            upper = !out.is_empty();
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub(super) fn decode(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    o.only(FIELDS, UNKNOWN)?;
    // The model is the URL's; a body's copy is not the one that counts.
    o.str("model")?;
    if o.get("cachedContent").is_some() {
        return Err(o
            .path
            .key("cachedContent")
            .unsupported("Gemini context caches exist only at Google"));
    }
    if o.array("safetySettings")?.is_some_and(|s| !s.is_empty()) {
        return Err(o.path.key("safetySettings").unsupported(
            "safety thresholds are Google's; other providers apply their own policies",
        ));
    }
    system_instruction(o, d)?;
    if let Some(c) = o.get("generationConfig") {
        let at = o.path.key("generationConfig");
        generation_config(Obj::new(c, &at)?, d)?;
    }
    o.each_object("tools", |t| tools(t, d))?;
    if let Some(c) = o.get("toolConfig") {
        let at = o.path.key("toolConfig");
        tool_config(Obj::new(c, &at)?, d)?;
    }
    let mut calls = Calls::default();
    if !o.each_object("contents", |c| content(c, d, &mut calls))? {
        return Err(o.path.key("contents").invalid("required"));
    }
    Ok(())
}

fn system_instruction(o: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    let Some(s) = o.get("systemInstruction") else {
        return Ok(());
    };
    let at = o.path.key("systemInstruction");
    let s = Obj::new(s, &at)?;
    s.only(&["role", "parts"], UNKNOWN)?;
    let mut parts = Vec::new();
    s.each_object("parts", |p| {
        p.only(&["text"], "only text parts can be instructions")?;
        let text = p.req_str("text")?;
        if !text.is_empty() {
            parts.push(text.to_string());
        }
        Ok(())
    })?;
    if !parts.is_empty() {
        d.hub.instructions.push(Instruction {
            role: InstructionRole::System,
            parts,
        });
    }
    Ok(())
}

fn generation_config(c: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    c.only(CONFIG_FIELDS, UNKNOWN)?;
    let at = |key| c.path.key(key);
    d.hub.max_output_tokens = c.u32("maxOutputTokens")?;
    d.hub.temperature = c.f64("temperature")?;
    d.hub.top_p = c.f64("topP")?;
    d.hub.top_k = c.u32("topK")?;
    if d.hub.top_k.is_some() {
        d.need(Cap::TopK, &at("topK"))?;
    }
    d.hub.stop = c.strings("stopSequences")?;
    if !d.hub.stop.is_empty() {
        d.need(Cap::Stop, &at("stopSequences"))?;
    }
    d.hub.choices = c.u32("candidateCount")?;
    if d.hub.choices.is_some_and(|n| n > 1) {
        // The response side reads one candidate: more cannot be answered to a Gemini client.
        return Err(at("candidateCount").unsupported("laptime translates one candidate"));
    }
    d.hub.seed = c.i64("seed")?;
    if d.hub.seed.is_some() {
        d.need(Cap::Seed, &at("seed"))?;
    }
    d.hub.presence_penalty = c.f64("presencePenalty")?;
    d.hub.frequency_penalty = c.f64("frequencyPenalty")?;
    for key in ["presencePenalty", "frequencyPenalty"] {
        if c.get(key).is_some() {
            d.need(Cap::Penalties, &at(key))?;
        }
    }
    let modalities = c.strings("responseModalities")?;
    if let Some(i) = modalities.iter().position(|m| m != "TEXT") {
        let m_at = at("responseModalities");
        return Err(m_at.index(i).unsupported("only text output is translated"));
    }
    d.hub.output = output_format(c, d)?;
    if let Some(t) = c.get("thinkingConfig") {
        let t_at = at("thinkingConfig");
        thinking_config(Obj::new(t, &t_at)?, d)?;
    }
    Ok(())
}

fn output_format(c: Obj<'_>, d: &Decoder<'_>) -> Result<Option<OutputFormat>> {
    let json_schema = c.get("responseJsonSchema");
    let schema = match (json_schema, c.get("responseSchema")) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(s)) => Some(openapi_to_json_schema(s)),
        (None, None) => None,
    };
    let at = c.path.key("responseMimeType");
    Ok(match (c.str("responseMimeType")?, schema) {
        (None, None) => None,
        (Some("text/plain"), None) => Some(OutputFormat::Text),
        (Some("application/json"), None) => {
            d.need(Cap::JsonObject, &at)?;
            Some(OutputFormat::JsonObject)
        }
        (Some("application/json") | None, Some(schema)) => {
            Some(OutputFormat::JsonSchema(JsonSchema {
                name: None,
                description: None,
                schema,
                strict: None,
            }))
        }
        (Some(other), _) => {
            return Err(c.path.unsupported_value(
                "responseMimeType",
                other,
                "only text/plain and application/json are translated",
            ))
        }
    })
}

/// Google's OpenAPI schema spells types in capitals (`OBJECT`); JSON Schema, as every other
/// dialect takes it, in lower case.
fn openapi_to_json_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| match (k.as_str(), v) {
                    ("type", Value::String(t)) => (k.clone(), t.to_ascii_lowercase().into()),
                    _ => (k.clone(), openapi_to_json_schema(v)),
                })
                .collect(),
        ),
        Value::Array(items) => items.iter().map(openapi_to_json_schema).collect(),
        other => other.clone(),
    }
}

fn thinking_config(t: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    t.only(
        &["thinkingBudget", "includeThoughts", "thinkingLevel"],
        UNKNOWN,
    )?;
    if t.bool("includeThoughts")? == Some(true) {
        d.hub.reasoning_summary = Some(ReasoningSummary::Auto);
    }
    if let Some(level) = t.str("thinkingLevel")? {
        let effort = Effort::parse(&level.to_ascii_lowercase())
            .filter(|e| {
                matches!(
                    e,
                    Effort::Minimal | Effort::Low | Effort::Medium | Effort::High
                )
            })
            .ok_or_else(|| {
                t.path
                    .key("thinkingLevel")
                    .invalid("expected MINIMAL, LOW, MEDIUM or HIGH")
            })?;
        d.hub.reasoning = Some(Reasoning::Effort(effort));
    }
    if let Some(budget) = t.i64("thinkingBudget")? {
        d.hub.reasoning = Some(match budget {
            0 => Reasoning::Disabled,
            -1 => Reasoning::Dynamic,
            n => Reasoning::Budget(u32::try_from(n).map_err(|_| {
                t.path
                    .key("thinkingBudget")
                    .invalid("expected -1 (dynamic), 0 (off) or a number of tokens")
            })?),
        });
    }
    Ok(())
}

fn tools(t: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    if let Some(k) = t.map.keys().find(|k| *k != "functionDeclarations") {
        return Err(t
            .path
            .key(k)
            .unsupported("built-in Gemini tools are not translated to other providers"));
    }
    t.each_object("functionDeclarations", |f| {
        f.only(
            &["name", "description", "parameters", "parametersJsonSchema"],
            UNKNOWN,
        )?;
        let json_schema = f.get("parametersJsonSchema");
        let parameters = match (json_schema, f.get("parameters")) {
            (Some(s), _) => Some(s.clone()),
            (None, Some(s)) => Some(openapi_to_json_schema(s)),
            (None, None) => None,
        };
        d.hub.tools.push(Tool {
            name: f.req_str("name")?.to_string(),
            description: f.str("description")?.map(str::to_string),
            parameters,
            strict: None,
        });
        Ok(())
    })?;
    Ok(())
}

fn tool_config(c: Obj<'_>, d: &mut Decoder<'_>) -> Result<()> {
    c.only(&["functionCallingConfig"], UNKNOWN)?;
    let Some(f) = c.get("functionCallingConfig") else {
        return Ok(());
    };
    let at = c.path.key("functionCallingConfig");
    let f = Obj::new(f, &at)?;
    f.only(&["mode", "allowedFunctionNames"], UNKNOWN)?;
    let names = f.strings("allowedFunctionNames")?;
    let names_at = at.key("allowedFunctionNames");
    let subset = "a subset of allowed functions is carried only as one forced function";
    d.hub.tool_choice = match (f.str("mode")?, names.as_slice()) {
        (None | Some("MODE_UNSPECIFIED"), []) => None,
        (Some("AUTO"), []) => Some(ToolChoice::Auto),
        // Calls checked against their schemas: OpenAI's strict tools.
        (Some("VALIDATED"), []) => {
            for t in &mut d.hub.tools {
                t.strict = Some(true);
            }
            Some(ToolChoice::Auto)
        }
        (Some("NONE"), []) => Some(ToolChoice::None),
        (Some("ANY"), []) => Some(ToolChoice::Required),
        (Some("ANY"), [one]) => Some(ToolChoice::Named(one.clone())),
        (Some("ANY" | "AUTO" | "VALIDATED" | "NONE") | None, _) => {
            return Err(names_at.unsupported(subset))
        }
        (Some(other), _) => {
            return Err(at
                .key("mode")
                .invalid(format!("unknown function calling mode {other:?}")))
        }
    };
    Ok(())
}

/// The calls of the conversation so far that no response answered yet, and how many calls
/// there were (for the ids given to calls without one).
#[derive(Default)]
struct Calls {
    count: usize,
    pending: Vec<(String, String)>,
}

impl Calls {
    fn id_for(&mut self, id: Option<&str>, name: &str) -> String {
        let id = id.map_or_else(|| format!("call_{}", self.count), str::to_string);
        self.count += 1;
        self.pending.push((id.clone(), name.to_string()));
        id
    }

    /// The call a response answers: the one with its id, else the earliest unanswered one
    /// with its name.
    fn answer(&mut self, id: Option<&str>, name: &str) -> Option<String> {
        let at = match id {
            Some(id) => self.pending.iter().position(|(i, _)| i == id),
            None => self.pending.iter().position(|(_, n)| n == name),
        };
        match (at, id) {
            (Some(at), _) => Some(self.pending.remove(at).0),
            (None, Some(id)) => Some(id.to_string()),
            (None, None) => None,
        }
    }
}

fn content(c: Obj<'_>, d: &mut Decoder<'_>, calls: &mut Calls) -> Result<()> {
    c.only(&["role", "parts"], UNKNOWN)?;
    let model = match c.str("role")? {
        None | Some("user" | "function") => false,
        Some("model") => true,
        Some(other) => {
            return Err(c
                .path
                .key("role")
                .invalid(format!("unknown role {other:?}; expected user or model")))
        }
    };
    let mut parts = Vec::new();
    c.each_object("parts", |p| {
        if model {
            model_part(p, &mut parts, calls)
        } else {
            user_part(p, d, &mut parts, calls)
        }
    })?;
    if model {
        d.push(Message::Assistant(parts));
    } else if !parts.is_empty() {
        d.push(Message::User(parts));
    }
    Ok(())
}

fn model_part(p: Obj<'_>, parts: &mut Vec<Part>, calls: &mut Calls) -> Result<()> {
    p.only(
        &["text", "thought", "thoughtSignature", "functionCall"],
        "only text, thoughts and function calls are translated in model turns",
    )?;
    let signature = p.str("thoughtSignature")?.map(str::to_string);
    let text = p.str("text")?.unwrap_or_default();
    if p.bool("thought")? == Some(true) {
        parts.push(Part::Thought(Thought {
            text: text.to_string(),
            signature,
            redacted: None,
            id: None,
        }));
        return Ok(());
    }
    if let Some(signature) = signature {
        // A signature on an answer part: carried as signed reasoning with no text before it.
        parts.push(Part::Thought(Thought {
            text: String::new(),
            signature: Some(signature),
            redacted: None,
            id: None,
        }));
    }
    if let Some(call) = p.get("functionCall") {
        let at = p.path.key("functionCall");
        let f = Obj::new(call, &at)?;
        f.only(&["name", "args", "id"], UNKNOWN)?;
        let name = f.req_str("name")?;
        let args_at = at.key("args");
        let arguments = match f.get("args") {
            None => Value::Object(Map::new()),
            Some(v) => arguments_object(v, &args_at)?,
        };
        parts.push(Part::ToolCall(ToolCall {
            id: calls.id_for(f.str("id")?, name),
            name: name.to_string(),
            arguments,
        }));
    } else if !text.is_empty() {
        parts.push(Part::Text(text.to_string()));
    }
    Ok(())
}

fn user_part(
    p: Obj<'_>,
    d: &mut Decoder<'_>,
    parts: &mut Vec<Part>,
    calls: &mut Calls,
) -> Result<()> {
    for (key, reason) in [
        ("executableCode", "code execution is Gemini's"),
        ("codeExecutionResult", "code execution is Gemini's"),
        ("functionCall", "a function call belongs in a model turn"),
    ] {
        if p.get(key).is_some() {
            return Err(p.path.key(key).unsupported(reason));
        }
    }
    p.only(
        &["text", "inlineData", "fileData", "functionResponse"],
        "this part type is not translated",
    )?;
    if let Some(text) = p.str("text")? {
        if !text.is_empty() {
            parts.push(Part::Text(text.to_string()));
        }
    } else if let Some(blob) = p.get("inlineData") {
        let at = p.path.key("inlineData");
        let b = Obj::new(blob, &at)?;
        b.only(&["mimeType", "data"], UNKNOWN)?;
        let source = Source::Base64 {
            media_type: b.req_str("mimeType")?.to_string(),
            data: b.req_str("data")?.to_string(),
        };
        parts.push(media(source));
    } else if let Some(file) = p.get("fileData") {
        let at = p.path.key("fileData");
        let f = Obj::new(file, &at)?;
        f.only(&["mimeType", "fileUri"], UNKNOWN)?;
        let image = f.str("mimeType")?.is_some_and(|m| m.starts_with("image/"));
        d.need(
            if image {
                Cap::ImageUrl
            } else {
                Cap::DocumentUrl
            },
            &at,
        )?;
        let source = Source::Url(f.req_str("fileUri")?.to_string());
        parts.push(if image {
            Part::Image(Image {
                source,
                detail: None,
            })
        } else {
            Part::Document(Document { source, name: None })
        });
    } else if let Some(r) = p.get("functionResponse") {
        // A tool result is its own hub message, in order with the user's other parts.
        if !parts.is_empty() {
            d.push(Message::User(std::mem::take(parts)));
        }
        let at = p.path.key("functionResponse");
        let result = function_response(Obj::new(r, &at)?, calls)?;
        d.push_tool(result);
    }
    Ok(())
}

/// Inline bytes: an image when the media type says so, else a document.
fn media(source: Source) -> Part {
    match &source {
        Source::Base64 { media_type, .. } if media_type.starts_with("image/") => {
            Part::Image(Image {
                source,
                detail: None,
            })
        }
        _ => Part::Document(Document { source, name: None }),
    }
}

fn function_response(r: Obj<'_>, calls: &mut Calls) -> Result<ToolResult> {
    r.only(&["name", "response", "id"], UNKNOWN)?;
    let name = r.req_str("name")?;
    let call_id = calls.answer(r.str("id")?, name).ok_or_else(|| {
        r.path.key("name").invalid(format!(
            "no earlier functionCall named {name:?} awaits a response"
        ))
    })?;
    let at = r.path.key("response");
    let response = r
        .object("response")?
        .ok_or_else(|| at.invalid("required"))?;
    let (text, is_error) = match (response.len(), response.get(OUTPUT), response.get(ERROR)) {
        (1, Some(v), None) => (value_text(v), false),
        (1, None, Some(v)) => (value_text(v), true),
        _ => (Value::Object(response.clone()).to_string(), false),
    };
    Ok(ToolResult {
        call_id,
        name: Some(name.to_string()),
        content: if text.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text(text)]
        },
        is_error,
    })
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

// === encoder ===

pub(super) fn encode(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    let system: Vec<Value> = hub
        .instructions
        .iter()
        .flat_map(|i| &i.parts)
        .map(|t| json!({"text": t}))
        .collect();
    if !system.is_empty() {
        out.insert("systemInstruction".into(), json!({"parts": system}));
    }
    out.insert("contents".into(), turns(&hub.messages, e)?.into());
    if !hub.tools.is_empty() {
        let decls: Vec<Value> = hub.tools.iter().map(tool_value).collect();
        out.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    if let Some(config) = tool_config_value(hub, e) {
        out.insert("toolConfig".into(), config);
    }
    let config = generation_config_value(hub, e);
    if !config.is_empty() {
        out.insert("generationConfig".into(), config.into());
    }
    if hub.user.is_some() {
        e.omit("user", "Gemini has no end-user id");
    }
    if !hub.metadata.is_empty() {
        e.omit("metadata", "Gemini requests carry no metadata");
    }
    if hub.prompt_cache_key.is_some() {
        e.omit("prompt_cache_key", "Gemini caches by prefix without a key");
    }
    Ok(out)
}

/// The conversation as alternating `user` / `model` turns: tool results are user parts, and
/// consecutive same-role messages are one turn.
fn turns(messages: &[Message], e: &mut Encoder<'_, '_>) -> Result<Vec<Value>> {
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(messages.len());
    for m in messages {
        let (role, parts) = match m {
            Message::User(parts) => ("user", parts_value(parts, e)),
            Message::Assistant(parts) => ("model", parts_value(parts, e)),
            Message::Tool(r) => ("user", vec![function_response_value(r, e)?]),
        };
        if parts.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(parts),
            _ => turns.push((role, parts)),
        }
    }
    Ok(turns
        .into_iter()
        .map(|(role, parts)| json!({"role": role, "parts": parts}))
        .collect())
}

fn parts_value(parts: &[Part], e: &mut Encoder<'_, '_>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(parts.len());
    // A signature with no reasoning text rides on the part after it, where Gemini put it.
    let mut signature: Option<&str> = None;
    for p in parts {
        let mut part = match p {
            Part::Text(t) => json!({"text": t}),
            Part::Image(img) => {
                if img.detail.is_some() {
                    e.omit("image detail", "Gemini has no image detail setting");
                }
                source_value(&img.source)
            }
            Part::Document(doc) => {
                if doc.name.is_some() {
                    e.omit("document name", "Gemini inline data has no file name");
                }
                source_value(&doc.source)
            }
            Part::ToolCall(c) => json!({"functionCall": {
                "id": c.id, "name": c.name, "args": c.arguments,
            }}),
            Part::Thought(t) => match (&t.redacted, &t.signature) {
                (None, Some(sig)) if t.text.is_empty() => {
                    signature = Some(sig);
                    continue;
                }
                (None, Some(sig)) => {
                    json!({"text": t.text, "thought": true, "thoughtSignature": sig})
                }
                _ => {
                    e.omit(
                        "reasoning of an earlier turn",
                        "Gemini takes back only reasoning with its thought signature",
                    );
                    continue;
                }
            },
        };
        if let (Some(sig), Some(obj)) = (signature.take(), part.as_object_mut()) {
            obj.insert("thoughtSignature".into(), sig.into());
        }
        out.push(part);
    }
    out
}

fn source_value(source: &Source) -> Value {
    match source {
        // Decoders refuse URLs for Gemini (Cap::ImageUrl, Cap::DocumentUrl): it needs a type.
        Source::Url(url) => json!({"fileData": {"fileUri": url}}),
        Source::Base64 { media_type, data } => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
    }
}

fn function_response_value(r: &ToolResult, e: &Encoder<'_, '_>) -> Result<Value> {
    let name = r.name.as_deref().ok_or_else(|| {
        RequestError::invalid(
            e.field(Knob::ToolCallId),
            format!(
                "no earlier tool call has the id {:?}: Gemini answers a tool by its name",
                r.call_id
            ),
        )
    })?;
    // Decoders refuse media in tool results for Gemini (Cap::ToolResultMedia).
    let text: Vec<&str> = r
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    let key = if r.is_error { ERROR } else { OUTPUT };
    Ok(json!({"functionResponse": {
        "id": r.call_id, "name": name, "response": {key: text.join("\n\n")},
    }}))
}

fn tool_value(t: &Tool) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), t.name.clone().into());
    insert_opt(&mut f, "description", t.description.clone());
    insert_opt(&mut f, "parametersJsonSchema", t.parameters.clone());
    f.into()
}

fn tool_config_value(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Option<Value> {
    if hub.parallel_tool_calls.is_some() {
        // Decoders refuse turning them off (Cap::ParallelOff); on is Gemini's way anyway.
        e.omit(
            "parallel_tool_calls",
            "Gemini has no parallel tool call setting; it may call several",
        );
    }
    let strict = !hub.tools.is_empty() && hub.tools.iter().all(|t| t.strict == Some(true));
    if hub.tools.iter().any(|t| t.strict.is_some()) && !strict {
        e.omit(
            "tools[].strict",
            "Gemini checks calls against their schemas for every tool or none",
        );
    }
    let config = match hub.tool_choice.as_ref()? {
        ToolChoice::Auto if strict => json!({"mode": "VALIDATED"}),
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Named(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    };
    Some(json!({"functionCallingConfig": config}))
}

fn generation_config_value(hub: &HubRequest, e: &mut Encoder<'_, '_>) -> Map<String, Value> {
    let mut c = Map::new();
    insert_opt(&mut c, "maxOutputTokens", hub.max_output_tokens);
    insert_opt(&mut c, "temperature", hub.temperature);
    insert_opt(&mut c, "topP", hub.top_p);
    insert_opt(&mut c, "topK", hub.top_k);
    if !hub.stop.is_empty() {
        c.insert("stopSequences".into(), hub.stop.clone().into());
    }
    insert_opt(&mut c, "candidateCount", hub.choices);
    insert_opt(&mut c, "seed", hub.seed);
    insert_opt(&mut c, "presencePenalty", hub.presence_penalty);
    insert_opt(&mut c, "frequencyPenalty", hub.frequency_penalty);
    match &hub.output {
        None => {}
        Some(OutputFormat::Text) => {
            c.insert("responseMimeType".into(), "text/plain".into());
        }
        Some(OutputFormat::JsonObject) => {
            c.insert("responseMimeType".into(), "application/json".into());
        }
        Some(OutputFormat::JsonSchema(s)) => {
            if s.name.is_some() || s.description.is_some() || s.strict.is_some() {
                e.omit(
                    "json schema name",
                    "Gemini's output format has only the schema",
                );
            }
            c.insert("responseMimeType".into(), "application/json".into());
            c.insert("responseJsonSchema".into(), s.schema.clone());
        }
    }
    let mut thinking = Map::new();
    match hub.reasoning {
        None => {}
        Some(Reasoning::Disabled) => {
            thinking.insert("thinkingBudget".into(), 0.into());
        }
        Some(Reasoning::Dynamic) => {
            thinking.insert("thinkingBudget".into(), (-1).into());
        }
        Some(Reasoning::Effort(effort)) if e.opts.reasoning.native_effort => {
            // Gemini's levels stop at high.
            let level = match effort {
                Effort::XHigh | Effort::Max => Effort::High,
                e => e,
            };
            thinking.insert("thinkingLevel".into(), level.as_str().into());
        }
        Some(Reasoning::Effort(effort)) => {
            let budget = e.opts.reasoning.budget_for(effort);
            thinking.insert("thinkingBudget".into(), budget.into());
        }
        Some(Reasoning::Budget(b)) => {
            thinking.insert("thinkingBudget".into(), b.into());
        }
    }
    if hub.reasoning_summary.is_some() {
        thinking.insert("includeThoughts".into(), true.into());
    }
    if !thinking.is_empty() {
        c.insert("thinkingConfig".into(), thinking.into());
    }
    c
}
