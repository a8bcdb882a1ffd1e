//! Test support: reads a [`Schedule`] back as SSE events and classifies them with the rules of
//! `streaming-protocols.md` (heartbeat, envelope, effective, visible, usage, terminal), so the
//! schedule tests can assert the marks a gateway would stamp.
//!
//! Deliberately independent of `laptime_core`'s scanner and classifier: the fake is checked
//! against the reference text, not against the code it exists to test.

use std::time::Duration;

use laptime_core::Dialect;
use serde_json::Value;

use crate::script::Schedule;

/// One SSE block from one step.
#[derive(Debug, Clone)]
pub(crate) struct Ev {
    pub(crate) at: Duration,
    pub(crate) raw: String,
    pub(crate) comment: bool,
    pub(crate) event: Option<String>,
    pub(crate) data: Option<String>,
    pub(crate) json: Option<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Heartbeat,
    Envelope,
    Effective,
    Visible,
    Usage,
    TerminalOk,
    TerminalIncomplete,
    TerminalError,
}

/// Parses every step as exactly one SSE block (`…\n\n`, or `…\r\n\r\n` for Gemini), with `event:`/`data:` lines or a
/// comment, and every `data` other than `[DONE]` as JSON. Panics on anything else.
pub(crate) fn events(schedule: &Schedule) -> Vec<Ev> {
    schedule
        .steps
        .iter()
        .map(|step| {
            let raw = std::str::from_utf8(&step.bytes).expect("utf-8").to_owned();
            // Gemini's events end with CRLF, the others' with LF; never both in one block.
            let (block, eol) = match raw.strip_suffix("\r\n\r\n") {
                Some(block) => (block, "\r\n"),
                None => (
                    raw.strip_suffix("\n\n")
                        .unwrap_or_else(|| panic!("step does not end with a blank line: {raw:?}")),
                    "\n",
                ),
            };
            assert!(!block.contains("\n\n"), "two events in one step: {raw:?}");
            assert!(
                eol == "\r\n" || !block.contains('\r'),
                "mixed line ends: {raw:?}"
            );
            let mut ev = Ev {
                at: step.at,
                raw: raw.clone(),
                comment: false,
                event: None,
                data: None,
                json: None,
            };
            for line in block.split(eol) {
                if line.starts_with(':') {
                    ev.comment = true;
                } else if let Some(v) = line.strip_prefix("event: ") {
                    assert!(ev.event.is_none(), "two event lines: {raw:?}");
                    ev.event = Some(v.to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    assert!(ev.data.is_none(), "two data lines: {raw:?}");
                    ev.data = Some(v.to_owned());
                } else {
                    panic!("unexpected SSE line {line:?} in {raw:?}");
                }
            }
            assert!(
                ev.comment != ev.data.is_some(),
                "neither comment nor data: {raw:?}"
            );
            if let Some(data) = ev.data.as_deref().filter(|d| *d != "[DONE]") {
                ev.json = Some(serde_json::from_str(data).unwrap_or_else(|e| {
                    panic!("invalid JSON in {raw:?}: {e}");
                }));
            }
            ev
        })
        .collect()
}

fn non_empty(v: &Value) -> bool {
    v.as_str().is_some_and(|s| !s.is_empty())
}

/// The class of one event in `dialect` (reference §1.5, §2.1, §3.1).
pub(crate) fn classify(dialect: Dialect, ev: &Ev) -> Class {
    if ev.comment {
        return Class::Heartbeat;
    }
    if ev.data.as_deref() == Some("[DONE]") {
        return Class::TerminalOk;
    }
    let j = ev.json.as_ref().expect("json event");
    match dialect {
        Dialect::Chat => {
            if j.get("error").is_some() {
                return Class::TerminalError;
            }
            let choices = j["choices"].as_array().expect("choices");
            if choices.is_empty() && j.get("usage").is_some_and(|u| !u.is_null()) {
                return Class::Usage;
            }
            let mut class = Class::Envelope;
            for c in choices {
                let d = &c["delta"];
                if non_empty(&d["content"]) {
                    return Class::Visible;
                }
                let args = d["tool_calls"].as_array().is_some_and(|calls| {
                    calls.iter().any(|t| non_empty(&t["function"]["arguments"]))
                });
                if non_empty(&d["reasoning_content"]) || non_empty(&d["reasoning"]) || args {
                    class = Class::Effective;
                }
            }
            class
        }
        Dialect::Responses => {
            let ty = j["type"].as_str().expect("type");
            match ty {
                "keepalive" => Class::Heartbeat,
                "response.completed" => Class::TerminalOk,
                "response.incomplete" => Class::TerminalIncomplete,
                "response.failed" | "error" => Class::TerminalError,
                "response.output_text.delta" if non_empty(&j["delta"]) => Class::Visible,
                t if t.ends_with(".delta") && non_empty(&j["delta"]) => Class::Effective,
                _ => Class::Envelope,
            }
        }
        Dialect::Messages => {
            let ty = j["type"].as_str().expect("type");
            match ty {
                "ping" => Class::Heartbeat,
                "message_stop" => Class::TerminalOk,
                "error" => Class::TerminalError,
                "content_block_delta" => {
                    let d = &j["delta"];
                    match d["type"].as_str() {
                        Some("text_delta") if non_empty(&d["text"]) => Class::Visible,
                        Some("thinking_delta") if non_empty(&d["thinking"]) => Class::Effective,
                        Some("input_json_delta") if non_empty(&d["partial_json"]) => {
                            Class::Effective
                        }
                        _ => Class::Envelope,
                    }
                }
                _ => Class::Envelope,
            }
        }
        Dialect::Gemini => {
            if j.get("error").is_some() {
                return Class::TerminalError;
            }
            let candidate = &j["candidates"][0];
            match candidate["finishReason"].as_str() {
                Some("STOP") => return Class::TerminalOk,
                Some("MALFORMED_FUNCTION_CALL") => return Class::TerminalError,
                Some(_) => return Class::TerminalIncomplete,
                None => {}
            }
            let mut class = Class::Envelope;
            for part in candidate["content"]["parts"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let thought = part["thought"] == true;
                if non_empty(&part["text"]) && !thought {
                    return Class::Visible;
                }
                if (non_empty(&part["text"]) && thought) || part["functionCall"].is_object() {
                    class = Class::Effective;
                }
            }
            class
        }
    }
}

/// The marks a gateway would stamp on a streamed schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Marks {
    pub(crate) first_event: Option<Duration>,
    pub(crate) first_effective: Option<Duration>,
    pub(crate) first_text: Option<Duration>,
    pub(crate) last_effective: Option<Duration>,
    /// The time and class of the event that ends the stream at the protocol level (for Chat the
    /// error chunk, not the `[DONE]` after it).
    pub(crate) terminal: Option<(Duration, Class)>,
}

pub(crate) fn marks(dialect: Dialect, evs: &[Ev]) -> Marks {
    let mut m = Marks::default();
    for ev in evs {
        let class = classify(dialect, ev);
        if class != Class::Heartbeat {
            m.first_event.get_or_insert(ev.at);
        }
        if matches!(class, Class::Effective | Class::Visible) {
            m.first_effective.get_or_insert(ev.at);
            m.last_effective = Some(ev.at);
        }
        if class == Class::Visible {
            m.first_text.get_or_insert(ev.at);
        }
        let terminal = matches!(
            class,
            Class::TerminalOk | Class::TerminalIncomplete | Class::TerminalError
        );
        if terminal && m.terminal.is_none() {
            m.terminal = Some((ev.at, class));
        }
    }
    // Chat says "incomplete" with finish_reason length (or content_filter), then ends with
    // [DONE] like any stream.
    if dialect == Dialect::Chat {
        let length = evs.iter().any(|e| {
            e.json.as_ref().is_some_and(|j| {
                j["choices"].as_array().is_some_and(|c| {
                    c.iter().any(|c| {
                        c["finish_reason"] == "length" || c["finish_reason"] == "content_filter"
                    })
                })
            })
        });
        if let (true, Some((at, Class::TerminalOk))) = (length, m.terminal) {
            m.terminal = Some((at, Class::TerminalIncomplete));
        }
    }
    m
}

/// Normalised usage read from a stream, per the reference's table (§8): input total, cache
/// read, cache write, output, reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct SeenUsage {
    pub(crate) input_total: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
    pub(crate) output: u64,
    pub(crate) reasoning: u64,
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The usage a stream reports, or `None` if it reports none.
pub(crate) fn usage(dialect: Dialect, evs: &[Ev]) -> Option<SeenUsage> {
    let jsons = evs.iter().filter_map(|e| e.json.as_ref());
    match dialect {
        Dialect::Chat => jsons
            .filter_map(|j| j.get("usage").filter(|u| !u.is_null()))
            .next_back()
            .map(chat_usage),
        Dialect::Responses => jsons
            .filter_map(|j| j.get("response"))
            .filter_map(|r| r.get("usage").filter(|u| !u.is_null()))
            .next_back()
            .map(responses_usage),
        Dialect::Messages => {
            let mut seen = None;
            for j in jsons {
                match j["type"].as_str() {
                    Some("message_start") => {
                        let u = &j["message"]["usage"];
                        seen = Some(SeenUsage {
                            input_total: n(&u["input_tokens"])
                                + n(&u["cache_read_input_tokens"])
                                + n(&u["cache_creation_input_tokens"]),
                            cache_read: n(&u["cache_read_input_tokens"]),
                            cache_write: n(&u["cache_creation_input_tokens"]),
                            output: n(&u["output_tokens"]),
                            reasoning: 0,
                        });
                    }
                    Some("message_delta") => {
                        if let Some(s) = seen.as_mut() {
                            s.output = n(&j["usage"]["output_tokens"]);
                        }
                    }
                    _ => {}
                }
            }
            seen
        }
        Dialect::Gemini => jsons
            .filter_map(|j| j.get("usageMetadata"))
            .next_back()
            .map(gemini_usage),
    }
}

/// Gemini's `usageMetadata`: the prompt includes cached tokens and candidates exclude thoughts.
pub(crate) fn gemini_usage(u: &Value) -> SeenUsage {
    SeenUsage {
        input_total: n(&u["promptTokenCount"]) + n(&u["toolUsePromptTokenCount"]),
        cache_read: n(&u["cachedContentTokenCount"]),
        cache_write: 0,
        output: n(&u["candidatesTokenCount"]) + n(&u["thoughtsTokenCount"]),
        reasoning: n(&u["thoughtsTokenCount"]),
    }
}

pub(crate) fn chat_usage(u: &Value) -> SeenUsage {
    SeenUsage {
        input_total: n(&u["prompt_tokens"]),
        cache_read: n(&u["prompt_tokens_details"]["cached_tokens"]),
        cache_write: n(&u["prompt_tokens_details"]["cache_write_tokens"]),
        output: n(&u["completion_tokens"]),
        reasoning: n(&u["completion_tokens_details"]["reasoning_tokens"]),
    }
}

pub(crate) fn responses_usage(u: &Value) -> SeenUsage {
    SeenUsage {
        input_total: n(&u["input_tokens"]),
        cache_read: n(&u["input_tokens_details"]["cached_tokens"]),
        cache_write: n(&u["input_tokens_details"]["cache_write_tokens"]),
        output: n(&u["output_tokens"]),
        reasoning: n(&u["output_tokens_details"]["reasoning_tokens"]),
    }
}

pub(crate) fn messages_usage(u: &Value) -> SeenUsage {
    SeenUsage {
        input_total: n(&u["input_tokens"])
            + n(&u["cache_read_input_tokens"])
            + n(&u["cache_creation_input_tokens"]),
        cache_read: n(&u["cache_read_input_tokens"]),
        cache_write: n(&u["cache_creation_input_tokens"]),
        output: n(&u["output_tokens"]),
        reasoning: 0,
    }
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
