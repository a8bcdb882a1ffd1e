//! The `sim-echo` answer: a compact JSON summary of the request the fake received, in the
//! dialect it was called in, so a test behind a translating gateway can check what reached the
//! upstream (roles, part kinds, tool calls and results, parameters) without the fake keeping
//! bodies around.
//!
//! The summary is one JSON object, compact, keys always present and in this order (`null`
//! when the request did not say):
//!
//! ```text
//! {"dialect":"messages",                 the endpoint's dialect: chat | responses | messages
//!  "model":"sim-echo",
//!  "stream":true,                        `stream`, false when absent
//!  "system":"Be brief.",                 see below; null when there is none
//!  "turns":[{"role":"user","parts":["text","image:url"]}, …],
//!  "tools":["get_weather"],              each tool's name (its type when it has no name)
//!  "tool_choice":"auto",                 see below
//!  "parallel_tool_calls":false,
//!  "max_tokens":64,                      Chat max_completion_tokens (else max_tokens),
//!                                        Responses max_output_tokens, Messages max_tokens
//!  "temperature":0.5,"top_p":null,
//!  "stop":["END"],                       Chat stop (a string becomes a list), Messages
//!                                        stop_sequences
//!  "response_format":"json_schema:name", Chat response_format, Responses text.format, Messages
//!                                        output_config.format (else output_format): the
//!                                        type, `json_schema:<name>` when it names one
//!  "reasoning":"effort:high",            see below
//!  "include_usage":true,                 Chat stream_options.include_usage; null elsewhere
//!  "other":["metadata","user"]}          top-level keys not summarised above, sorted
//! ```
//!
//! - `system`: Chat's leading `system`/`developer` messages; Responses' `instructions` then its
//!   leading `system`/`developer` input messages; Messages' `system` (a string or text blocks).
//!   Texts are joined with a blank line. Later system messages stay turns.
//! - `turns`: Chat and Messages messages as `{"role","parts"}`; Responses input items: messages
//!   as `{"role","parts"}` (a string `input` is one user turn), other items as
//!   `{"item":"<type>","parts"}`.
//! - `parts`: `text`; `image:url`, `image:base64` (a `data:` URL or a base64 source),
//!   `image:file` (a file id); `audio`; `file`; `document`; `refusal`; `reasoning` (Messages
//!   thinking blocks, Chat `reasoning_content`, Responses reasoning items);
//!   `tool_call:<name>:<call id>` (Chat `tool_calls`, Responses `function_call`, Messages
//!   `tool_use`); `tool_result:<call id>` (Chat `tool` messages, Responses
//!   `function_call_output`, Messages `tool_result`; then `:error` when Messages' `is_error`
//!   is true, or when a Chat or Responses result's text starts with `Error: `, the way
//!   translation carries that flag);
//!   `unknown:<type>` for a part type not listed here.
//! - `tool_choice`: Chat and Responses `auto|none|required`, `function:<name>`, or the type of
//!   another object; Messages `auto|any|none`, `tool:<name>`. Messages'
//!   `disable_parallel_tool_use` is reported as `parallel_tool_calls` (negated).
//! - `reasoning`: Chat `effort:<reasoning_effort>`; Responses `effort:<effort>` and
//!   `,summary:<summary>` when set; Messages `budget_tokens:<n>` for enabled thinking, else the
//!   thinking type (`disabled`, `adaptive`), then `,effort:<e>` for `output_config.effort`.
//!
//! - Gemini (`dialect: "gemini"`): the model and stream are in the URL, so `model` is null and
//!   `stream` false; `system` is `systemInstruction`'s texts; `turns` are `contents` with
//!   parts `text`, `reasoning` (`thought: true`), `image:base64` / `document` (`inlineData`
//!   by its MIME type), `image:url` / `file` (`fileData`), `tool_call:<name>:<id>`
//!   (`functionCall`, the id empty when there is none) and `tool_result:<name>:<id>`
//!   (`functionResponse`, `:error` when its response holds `error`); `tool_choice` is
//!   `functionCallingConfig.mode` lower-cased, `:<names>` after it when it allows some; the
//!   sampling fields, `max_tokens` (`maxOutputTokens`), `stop` (`stopSequences`),
//!   `response_format` (`json_schema` with a schema, `json_object` for `application/json`,
//!   else the MIME type) and `reasoning` (`budget:<n>` or `level:<l>`, then
//!   `,include_thoughts`) come from `generationConfig`.
//!
//! A field whose shape cannot be read is reported as the string `invalid:<json type>` in place
//! of its value; nothing in a request makes the summary fail.

use laptime_core::Dialect;
use serde_json::{Map, Value};

use crate::json::{obj, J};

/// The summary of `body`, received on `dialect`'s endpoint, as compact JSON text.
pub(crate) fn summary(dialect: Dialect, body: &Value) -> String {
    let empty = Map::new();
    let b = body.as_object().unwrap_or(&empty);
    let s = match dialect {
        Dialect::Chat => chat(b),
        Dialect::Responses => responses(b),
        Dialect::Messages => messages(b),
        Dialect::Gemini => gemini(b),
    };
    let other: Vec<J> = {
        let mut keys: Vec<&String> = b
            .keys()
            .filter(|k| !s.known.contains(&k.as_str()) && k.as_str() != "laptime_sim")
            .collect();
        keys.sort();
        keys.into_iter().map(J::from).collect()
    };
    obj! {
        "dialect": dialect.as_str(),
        "model": b.get("model").map(scalar),
        "stream": b.get("stream").and_then(Value::as_bool).unwrap_or(false),
        "system": s.system,
        "turns": s.turns,
        "tools": s.tools,
        "tool_choice": s.tool_choice,
        "parallel_tool_calls": s.parallel_tool_calls,
        "max_tokens": s.max_tokens,
        "temperature": sampling(dialect, b, "temperature", "temperature"),
        "top_p": sampling(dialect, b, "top_p", "topP"),
        "stop": s.stop,
        "response_format": s.response_format,
        "reasoning": s.reasoning,
        "include_usage": s.include_usage,
        "other": other,
    }
    .encode()
}

/// The dialect-specific half of a summary.
struct Summary {
    /// The top-level keys this dialect's summary reads (the rest are listed in `other`).
    known: &'static [&'static str],
    system: J,
    turns: J,
    tools: J,
    tool_choice: J,
    parallel_tool_calls: J,
    max_tokens: J,
    stop: J,
    response_format: J,
    reasoning: J,
    include_usage: J,
}

// === Chat ===

const CHAT_KEYS: &[&str] = &[
    "model",
    "stream",
    "messages",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "stop",
    "response_format",
    "reasoning_effort",
    "stream_options",
];

fn chat(b: &Map<String, Value>) -> Summary {
    let (system, turns) = match b.get("messages") {
        None => (J::Null, J::Null),
        Some(Value::Array(messages)) => {
            let lead = leading_system(messages, |m| m.get("role"));
            let system = join_texts(lead.iter().map(|m| m.get("content")));
            let turns = messages[lead.len()..].iter().map(chat_turn).collect();
            (system, J::Arr(turns))
        }
        Some(v) => (J::Null, invalid(v)),
    };
    Summary {
        known: CHAT_KEYS,
        system,
        turns,
        tools: names(b.get("tools"), |t| {
            t.pointer("/function/name")
                .or_else(|| t.pointer("/custom/name"))
                .or_else(|| t.get("type"))
        }),
        tool_choice: match b.get("tool_choice") {
            None => J::Null,
            Some(Value::String(s)) => J::from(s.as_str()),
            Some(Value::Object(o)) => match (str_of(o.get("type")), o.get("function")) {
                ("function", Some(f)) => J::from(format!("function:{}", str_of(f.get("name")))),
                (ty, _) => J::from(ty),
            },
            Some(v) => invalid(v),
        },
        parallel_tool_calls: bool_field(b.get("parallel_tool_calls")),
        max_tokens: first_of(b, &["max_completion_tokens", "max_tokens"]),
        stop: match b.get("stop") {
            None | Some(Value::Null) => J::Null,
            Some(Value::String(s)) => J::Arr(vec![J::from(s.as_str())]),
            Some(v) => strings(v),
        },
        response_format: format_of(b.get("response_format"), |f| f.pointer("/json_schema/name")),
        reasoning: match b.get("reasoning_effort") {
            None | Some(Value::Null) => J::Null,
            Some(Value::String(e)) => J::from(format!("effort:{e}")),
            Some(v) => invalid(v),
        },
        include_usage: match b.get("stream_options") {
            None | Some(Value::Null) => J::Null,
            Some(o) => bool_field(o.get("include_usage")),
        },
    }
}

fn chat_turn(m: &Value) -> J {
    let Some(o) = m.as_object() else {
        return obj! {"role": J::Null, "parts": invalid(m)};
    };
    let role = str_of(o.get("role"));
    let mut parts = Vec::new();
    if role == "tool" {
        parts.push(J::from(format!(
            "tool_result:{}{}",
            str_of(o.get("tool_call_id")),
            error_mark(o.get("content"))
        )));
    } else {
        if o.get("reasoning_content")
            .is_some_and(|r| r.as_str().is_some_and(|s| !s.is_empty()))
        {
            parts.push(J::from("reasoning"));
        }
        match o.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(_)) => parts.push(J::from("text")),
            Some(Value::Array(items)) => parts.extend(items.iter().map(openai_part)),
            Some(v) => parts.push(invalid(v)),
        }
        for call in o
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(J::from(format!(
                "tool_call:{}:{}",
                str_of(call.pointer("/function/name")),
                str_of(call.get("id"))
            )));
        }
    }
    obj! {"role": role, "parts": parts}
}

/// A content part of Chat or Responses.
fn openai_part(p: &Value) -> J {
    let ty = str_of(p.get("type"));
    let image = |url: Option<&Value>| match url.and_then(Value::as_str) {
        Some(u) if u.starts_with("data:") => "image:base64",
        Some(_) => "image:url",
        None => "image:file",
    };
    J::from(match ty {
        "text" | "input_text" | "output_text" => "text",
        // Chat nests the URL (`image_url.url`); Responses has it flat (`image_url`) or a file id.
        "image_url" => image(p.pointer("/image_url/url")),
        "input_image" => image(p.get("image_url")),
        "input_audio" => "audio",
        "file" | "input_file" => "file",
        "refusal" => "refusal",
        other => return J::from(format!("unknown:{other}")),
    })
}

// === Responses ===

const RESPONSES_KEYS: &[&str] = &[
    "model",
    "stream",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "max_output_tokens",
    "temperature",
    "top_p",
    "text",
    "reasoning",
];

fn responses(b: &Map<String, Value>) -> Summary {
    let instructions = b.get("instructions").filter(|v| !v.is_null());
    let (lead, turns) = match b.get("input") {
        None => (&[][..], J::Null),
        Some(Value::String(_)) => (
            &[][..],
            J::Arr(vec![obj! {"role": "user", "parts": vec![J::from("text")]}]),
        ),
        Some(Value::Array(items)) => {
            let lead = leading_system(items, |i| {
                let is_message = i.get("type").is_none_or(|t| t == "message");
                i.get("role").filter(|_| is_message)
            });
            let turns = items[lead.len()..].iter().map(responses_item).collect();
            (lead, J::Arr(turns))
        }
        Some(v) => (&[][..], invalid(v)),
    };
    let system = join_texts(
        instructions
            .into_iter()
            .chain(lead.iter().filter_map(|m| m.get("content")))
            .map(Some),
    );
    Summary {
        known: RESPONSES_KEYS,
        system,
        turns,
        tools: names(b.get("tools"), |t| t.get("name").or_else(|| t.get("type"))),
        tool_choice: match b.get("tool_choice") {
            None => J::Null,
            Some(Value::String(s)) => J::from(s.as_str()),
            Some(Value::Object(o)) => match str_of(o.get("type")) {
                "function" => J::from(format!("function:{}", str_of(o.get("name")))),
                ty => J::from(ty),
            },
            Some(v) => invalid(v),
        },
        parallel_tool_calls: bool_field(b.get("parallel_tool_calls")),
        max_tokens: first_of(b, &["max_output_tokens"]),
        stop: J::Null,
        response_format: match b.get("text") {
            None | Some(Value::Null) => J::Null,
            Some(text) => format_of(text.get("format"), |f| f.get("name")),
        },
        reasoning: match b.get("reasoning") {
            None | Some(Value::Null) => J::Null,
            Some(Value::Object(r)) => {
                let mut s = format!("effort:{}", str_of(r.get("effort")));
                if let Some(summary) = r.get("summary").and_then(Value::as_str) {
                    s.push_str(&format!(",summary:{summary}"));
                }
                J::from(s)
            }
            Some(v) => invalid(v),
        },
        include_usage: J::Null,
    }
}

fn responses_item(i: &Value) -> J {
    let Some(o) = i.as_object() else {
        return obj! {"item": J::Null, "parts": invalid(i)};
    };
    let ty = o.get("type").and_then(Value::as_str);
    match ty {
        None | Some("message") => {
            let parts = match o.get("content") {
                Some(Value::String(_)) => vec![J::from("text")],
                Some(Value::Array(items)) => items.iter().map(openai_part).collect(),
                None | Some(Value::Null) => Vec::new(),
                Some(v) => vec![invalid(v)],
            };
            obj! {"role": str_of(o.get("role")), "parts": parts}
        }
        Some(ty) => {
            let part = match ty {
                "function_call" => J::from(format!(
                    "tool_call:{}:{}",
                    str_of(o.get("name")),
                    str_of(o.get("call_id"))
                )),
                "function_call_output" => J::from(format!(
                    "tool_result:{}{}",
                    str_of(o.get("call_id")),
                    error_mark(o.get("output"))
                )),
                "reasoning" => J::from("reasoning"),
                other => J::from(format!("unknown:{other}")),
            };
            obj! {"item": ty, "parts": vec![part]}
        }
    }
}

// === Messages ===

const MESSAGES_KEYS: &[&str] = &[
    "model",
    "stream",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "max_tokens",
    "temperature",
    "top_p",
    "stop_sequences",
    "output_config",
    "output_format",
    "thinking",
];

fn messages(b: &Map<String, Value>) -> Summary {
    let (tool_choice, parallel) = match b.get("tool_choice") {
        None => (J::Null, J::Null),
        Some(Value::Object(o)) => {
            let choice = match str_of(o.get("type")) {
                "tool" => J::from(format!("tool:{}", str_of(o.get("name")))),
                ty => J::from(ty),
            };
            let parallel = match o.get("disable_parallel_tool_use") {
                Some(Value::Bool(disable)) => J::Bool(!disable),
                _ => J::Null,
            };
            (choice, parallel)
        }
        Some(v) => (invalid(v), J::Null),
    };
    Summary {
        known: MESSAGES_KEYS,
        system: match b.get("system") {
            None | Some(Value::Null) => J::Null,
            Some(v) => join_texts(std::iter::once(Some(v))),
        },
        turns: match b.get("messages") {
            None => J::Null,
            Some(Value::Array(messages)) => J::Arr(messages.iter().map(messages_turn).collect()),
            Some(v) => invalid(v),
        },
        tools: names(b.get("tools"), |t| t.get("name").or_else(|| t.get("type"))),
        tool_choice,
        parallel_tool_calls: parallel,
        max_tokens: first_of(b, &["max_tokens"]),
        stop: match b.get("stop_sequences") {
            None | Some(Value::Null) => J::Null,
            Some(v) => strings(v),
        },
        response_format: format_of(
            b.get("output_config")
                .and_then(|c| c.get("format"))
                .or_else(|| b.get("output_format")),
            |f| f.get("name"),
        ),
        reasoning: messages_reasoning(b),
        include_usage: J::Null,
    }
}

/// `thinking` (`budget_tokens:<n>` when enabled, else its type), then `effort:<e>` from
/// `output_config.effort`, joined by a comma; null when neither is there.
fn messages_reasoning(b: &Map<String, Value>) -> J {
    let mut said = Vec::new();
    match b.get("thinking") {
        None | Some(Value::Null) => {}
        Some(Value::Object(t)) => match (str_of(t.get("type")), t.get("budget_tokens")) {
            ("enabled", Some(n)) => said.push(format!("budget_tokens:{n}")),
            (ty, _) => said.push(ty.to_owned()),
        },
        Some(v) => return invalid(v),
    }
    if let Some(effort) = b
        .get("output_config")
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str)
    {
        said.push(format!("effort:{effort}"));
    }
    if said.is_empty() {
        J::Null
    } else {
        J::from(said.join(","))
    }
}

fn messages_turn(m: &Value) -> J {
    let Some(o) = m.as_object() else {
        return obj! {"role": J::Null, "parts": invalid(m)};
    };
    let parts = match o.get("content") {
        Some(Value::String(_)) => vec![J::from("text")],
        Some(Value::Array(blocks)) => blocks.iter().map(messages_block).collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(v) => vec![invalid(v)],
    };
    obj! {"role": str_of(o.get("role")), "parts": parts}
}

fn messages_block(b: &Value) -> J {
    J::from(match str_of(b.get("type")) {
        "text" => "text",
        "image" => match str_of(b.pointer("/source/type")) {
            "base64" => "image:base64",
            "url" => "image:url",
            "file" => "image:file",
            other => return J::from(format!("image:{other}")),
        },
        "document" => "document",
        "thinking" | "redacted_thinking" => "reasoning",
        "tool_use" => {
            return J::from(format!(
                "tool_call:{}:{}",
                str_of(b.get("name")),
                str_of(b.get("id"))
            ))
        }
        "tool_result" => {
            let error = if b.get("is_error") == Some(&Value::Bool(true)) {
                ":error"
            } else {
                ""
            };
            return J::from(format!(
                "tool_result:{}{error}",
                str_of(b.get("tool_use_id"))
            ));
        }
        other => return J::from(format!("unknown:{other}")),
    })
}

// === Gemini ===

const GEMINI_KEYS: &[&str] = &[
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
];

fn gemini(b: &Map<String, Value>) -> Summary {
    let config = |key: &str| {
        b.get("generationConfig")
            .and_then(|c| c.get(key))
            .filter(|v| !v.is_null())
    };
    let calling = b
        .get("toolConfig")
        .and_then(|c| c.get("functionCallingConfig"));
    Summary {
        known: GEMINI_KEYS,
        system: join_texts(std::iter::once(
            b.get("systemInstruction").and_then(|s| s.get("parts")),
        )),
        turns: match b.get("contents") {
            None => J::Null,
            Some(Value::Array(contents)) => J::Arr(contents.iter().map(gemini_turn).collect()),
            Some(v) => invalid(v),
        },
        tools: match b.get("tools") {
            None | Some(Value::Null) => J::Null,
            Some(Value::Array(tools)) => J::Arr(
                tools
                    .iter()
                    .flat_map(|t| match t.get("functionDeclarations") {
                        Some(Value::Array(decls)) => decls
                            .iter()
                            .map(|d| J::from(str_of(d.get("name"))))
                            .collect(),
                        _ => vec![J::from(
                            t.as_object()
                                .and_then(|o| o.keys().next())
                                .map_or("unknown", String::as_str),
                        )],
                    })
                    .collect(),
            ),
            Some(v) => invalid(v),
        },
        tool_choice: match calling {
            None => J::Null,
            Some(c) => {
                let mut choice = str_of(c.get("mode")).to_ascii_lowercase();
                if let Some(Value::Array(names)) = c.get("allowedFunctionNames") {
                    let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
                    choice.push(':');
                    choice.push_str(&names.join(","));
                }
                J::from(choice)
            }
        },
        parallel_tool_calls: J::Null,
        max_tokens: config("maxOutputTokens").map_or(J::Null, scalar),
        stop: config("stopSequences").map_or(J::Null, strings),
        response_format: match (
            config("responseMimeType").and_then(Value::as_str),
            config("responseJsonSchema").or_else(|| config("responseSchema")),
        ) {
            (None, None) => J::Null,
            (_, Some(_)) => J::from("json_schema"),
            (Some("application/json"), None) => J::from("json_object"),
            (Some(mime), None) => J::from(mime),
        },
        reasoning: match config("thinkingConfig") {
            None => J::Null,
            Some(t) => {
                let mut said = Vec::new();
                if let Some(n) = t.get("thinkingBudget") {
                    said.push(format!("budget:{n}"));
                }
                if let Some(l) = t.get("thinkingLevel").and_then(Value::as_str) {
                    said.push(format!("level:{l}"));
                }
                if t.get("includeThoughts") == Some(&Value::Bool(true)) {
                    said.push("include_thoughts".to_owned());
                }
                J::from(said.join(","))
            }
        },
        include_usage: J::Null,
    }
}

fn gemini_turn(c: &Value) -> J {
    let parts = match c.get("parts") {
        Some(Value::Array(parts)) => parts.iter().map(gemini_part).collect(),
        None | Some(Value::Null) => Vec::new(),
        Some(v) => vec![invalid(v)],
    };
    obj! {"role": str_of(c.get("role")), "parts": parts}
}

/// A Gemini field by its camelCase name or its proto name: Google reads either, and
/// google-genai writes the proto names inside parts (`mime_type`, `file_uri`).
fn proto<'v>(v: &'v Value, camel: &str, snake: &str) -> Option<&'v Value> {
    v.get(camel).or_else(|| v.get(snake))
}

fn gemini_part(p: &Value) -> J {
    let image = |blob: &Value| str_of(proto(blob, "mimeType", "mime_type")).starts_with("image/");
    if let Some(call) = proto(p, "functionCall", "function_call") {
        return J::from(format!(
            "tool_call:{}:{}",
            str_of(call.get("name")),
            str_of(call.get("id"))
        ));
    }
    if let Some(r) = proto(p, "functionResponse", "function_response") {
        let error = if r.pointer("/response/error").is_some() {
            ":error"
        } else {
            ""
        };
        return J::from(format!(
            "tool_result:{}:{}{error}",
            str_of(r.get("name")),
            str_of(r.get("id"))
        ));
    }
    J::from(
        match (
            proto(p, "inlineData", "inline_data"),
            proto(p, "fileData", "file_data"),
        ) {
            (Some(blob), _) if image(blob) => "image:base64",
            (Some(_), _) => "document",
            (None, Some(file)) if image(file) => "image:url",
            (None, Some(_)) => "file",
            (None, None) if p.get("thought") == Some(&Value::Bool(true)) => "reasoning",
            (None, None) if p.get("text").is_some() => "text",
            (None, None) => "unknown:part",
        },
    )
}

/// A sampling field: top-level in every dialect but Gemini, whose are in `generationConfig`.
fn sampling(dialect: Dialect, b: &Map<String, Value>, key: &str, gemini_key: &str) -> J {
    let v = match dialect {
        Dialect::Gemini => b.get("generationConfig").and_then(|c| c.get(gemini_key)),
        Dialect::Chat | Dialect::Responses | Dialect::Messages => b.get(key),
    };
    v.map_or(J::Null, scalar)
}

// === Shared ===

/// `:error` for an OpenAI tool result whose text starts with `Error: `, the way translation
/// carries Anthropic's `is_error` to a dialect without the flag; else nothing.
fn error_mark(content: Option<&Value>) -> &'static str {
    let text = match content {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Array(parts)) => parts
            .first()
            .and_then(|p| p.get("text"))
            .and_then(Value::as_str),
        _ => None,
    };
    if text.is_some_and(|t| t.starts_with("Error: ")) {
        ":error"
    } else {
        ""
    }
}

/// The first of `keys` the body has (not null), as a scalar; null when none.
fn first_of(b: &Map<String, Value>, keys: &[&str]) -> J {
    keys.iter()
        .find_map(|k| b.get(*k).filter(|v| !v.is_null()))
        .map_or(J::Null, scalar)
}

/// The messages (or items) at the start of `list` whose role is `system` or `developer`.
fn leading_system(list: &[Value], role: impl Fn(&Value) -> Option<&Value>) -> &[Value] {
    let n = list
        .iter()
        .take_while(|m| {
            role(m)
                .and_then(Value::as_str)
                .is_some_and(|r| r == "system" || r == "developer")
        })
        .count();
    &list[..n]
}

/// The texts of `contents` (strings or arrays of text parts) joined by a blank line; null when
/// there are none.
fn join_texts<'v>(contents: impl Iterator<Item = Option<&'v Value>>) -> J {
    let mut texts = Vec::new();
    for content in contents.flatten() {
        match content {
            Value::String(s) => texts.push(s.clone()),
            Value::Array(parts) => {
                let text: String = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                texts.push(text);
            }
            Value::Null => {}
            v => return invalid(v),
        }
    }
    if texts.is_empty() {
        J::Null
    } else {
        J::from(texts.join("\n\n"))
    }
}

/// The names of a `tools` list; null when absent.
fn names(tools: Option<&Value>, name: impl Fn(&Value) -> Option<&Value>) -> J {
    match tools {
        None | Some(Value::Null) => J::Null,
        Some(Value::Array(tools)) => J::Arr(
            tools
                .iter()
                .map(|t| J::from(name(t).and_then(Value::as_str).unwrap_or("unknown")))
                .collect(),
        ),
        Some(v) => invalid(v),
    }
}

/// A `{type, …}` output format: its type, `json_schema:<name>` when it names one.
fn format_of(format: Option<&Value>, name: impl Fn(&Value) -> Option<&Value>) -> J {
    match format {
        None | Some(Value::Null) => J::Null,
        Some(f @ Value::Object(_)) => {
            let ty = str_of(f.get("type"));
            match name(f).and_then(Value::as_str) {
                Some(n) if ty == "json_schema" => J::from(format!("json_schema:{n}")),
                _ => J::from(ty),
            }
        }
        Some(v) => invalid(v),
    }
}

/// A list of strings, or `invalid:…`.
fn strings(v: &Value) -> J {
    match v.as_array() {
        Some(items) if items.iter().all(Value::is_string) => {
            J::Arr(items.iter().map(scalar).collect())
        }
        _ => invalid(v),
    }
}

fn bool_field(v: Option<&Value>) -> J {
    match v {
        None | Some(Value::Null) => J::Null,
        Some(Value::Bool(b)) => J::Bool(*b),
        Some(v) => invalid(v),
    }
}

/// A string, a number or a bool as itself; anything else as `invalid:…`.
fn scalar(v: &Value) -> J {
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::String(s) => J::from(s.as_str()),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => J::Int(i),
            (None, Some(u), _) => J::from(u),
            (None, None, Some(f)) => J::Float(f),
            (None, None, None) => invalid(v),
        },
        Value::Array(_) | Value::Object(_) => invalid(v),
    }
}

/// The string at `v`, or `""` when it is absent or not a string.
fn str_of(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

fn invalid(v: &Value) -> J {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    J::from(format!("invalid:{kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemini_body_is_summarised_from_its_contents_and_generation_config() {
        let body = serde_json::json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Hi"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBO"}}]},
                {"role": "model", "parts": [{"text": "Hmm", "thought": true},
                    {"functionCall": {"id": "c1", "name": "get_weather", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "c1",
                    "name": "get_weather", "response": {"error": "down"}}}]}
            ],
            "tools": [{"functionDeclarations": [{"name": "get_weather"}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                "allowedFunctionNames": ["get_weather"]}},
            "generationConfig": {"maxOutputTokens": 64, "temperature": 0.5,
                "stopSequences": ["END"], "responseMimeType": "application/json",
                "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}},
            "labels": {"a": "b"}
        });
        let got: Value = serde_json::from_str(&summary(Dialect::Gemini, &body)).unwrap();
        assert_eq!(
            got,
            serde_json::json!({
                "dialect": "gemini", "model": null, "stream": false, "system": "Be brief.",
                "turns": [
                    {"role": "user", "parts": ["text", "image:base64"]},
                    {"role": "model", "parts": ["reasoning", "tool_call:get_weather:c1"]},
                    {"role": "user", "parts": ["tool_result:get_weather:c1:error"]}
                ],
                "tools": ["get_weather"], "tool_choice": "any:get_weather",
                "parallel_tool_calls": null, "max_tokens": 64, "temperature": 0.5,
                "top_p": null, "stop": ["END"], "response_format": "json_object",
                "reasoning": "budget:1024,include_thoughts", "include_usage": null,
                "other": ["labels"]
            })
        );
    }
}
