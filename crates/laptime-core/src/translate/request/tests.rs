//! Every (client, upstream) pair of different dialects, one scenario at a time: the client's
//! body in its own dialect, what the upstream's body must hold, and what must be refused.

use serde_json::{json, Value};

use super::*;
use crate::Dialect::{self, Chat, Gemini, Messages, Responses};

/// The dialects with a decoder and an encoder.
const DIALECTS: &[Dialect] = &[Chat, Responses, Messages];

fn pairs() -> impl Iterator<Item = (Dialect, Dialect)> {
    DIALECTS
        .iter()
        .flat_map(|&c| DIALECTS.iter().map(move |&u| (c, u)))
        .filter(|(c, u)| c != u)
}

const TABLE: ReasoningTable = ReasoningTable::DEFAULT;

fn opts(stream: bool) -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "up-model",
        stream,
        default_max_tokens: Some(4096),
        reasoning: &TABLE,
        pass_through: &[],
        prefill: None,
    }
}

fn run(client: Dialect, upstream: Dialect, body: &Value) -> Result<TranslatedRequest> {
    translate_request(client, upstream, body.to_string().as_bytes(), &opts(false))
}

fn out(client: Dialect, upstream: Dialect, body: &Value) -> Value {
    match run(client, upstream, body) {
        Ok(t) => serde_json::from_slice(&t.body).unwrap(),
        Err(e) => panic!("{client} → {upstream}: {e:?}\n{body:#}"),
    }
}

fn refused(client: Dialect, upstream: Dialect, body: &Value) -> RequestError {
    match run(client, upstream, body) {
        Ok(t) => panic!(
            "{client} → {upstream} should be refused, gave {}",
            String::from_utf8_lossy(&t.body)
        ),
        Err(e) => e,
    }
}

/// A body of the client's dialect: the model, the max tokens and the given fields.
fn body(client: Dialect, fields: Value) -> Value {
    let mut b = json!({"model": "client-model"});
    if client == Messages {
        b["max_tokens"] = json!(1000);
    }
    for (k, v) in fields.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

/// The conversation of an upstream body as (role, content) in that dialect's words.
fn conversation(upstream: Dialect, out: &Value) -> Vec<Value> {
    match upstream {
        Chat | Messages => out["messages"].as_array().unwrap().clone(),
        Responses => out["input"].as_array().unwrap().clone(),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

// === system + user text ===

#[test]
fn system_and_user_text_reach_every_upstream() {
    for (client, upstream) in pairs() {
        let b = match client {
            Chat => body(
                client,
                json!({"messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"}]}),
            ),
            Responses => body(client, json!({"instructions": "Be brief.", "input": "Hi"})),
            Messages => body(
                client,
                json!({"system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]}),
            ),
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        };
        let o = out(client, upstream, &b);
        assert_eq!(o["model"], "up-model", "{client} → {upstream}");
        let conv = conversation(upstream, &o);
        match upstream {
            Chat => assert_eq!(
                conv,
                vec![
                    json!({"role": "system", "content": "Be brief."}),
                    json!({"role": "user", "content": "Hi"})
                ]
            ),
            Responses => assert_eq!(
                conv,
                vec![
                    json!({"role": "system", "content": "Be brief."}),
                    json!({"role": "user", "content": [{"type": "input_text", "text": "Hi"}]})
                ]
            ),
            Messages => {
                assert_eq!(o["system"], "Be brief.");
                assert_eq!(
                    conv,
                    vec![json!({"role": "user", "content": [{"type": "text", "text": "Hi"}]})]
                );
            }
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        }
    }
}

// === images ===

fn image_body(client: Dialect) -> Value {
    let url = "https://example.com/cat.png";
    match client {
        Chat => body(
            client,
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]}]}),
        ),
        Responses => body(
            client,
            json!({"input": [{"role": "user", "content": [
                {"type": "input_text", "text": "Compare"},
                {"type": "input_image", "image_url": url},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO"}]}]}),
        ),
        Messages => body(
            client,
            json!({"messages": [{"role": "user", "content": [
                {"type": "text", "text": "Compare"},
                {"type": "image", "source": {"type": "url", "url": url}},
                {"type": "image", "source":
                    {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]}]}),
        ),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn images_by_url_and_by_bytes_reach_every_upstream() {
    for (client, upstream) in pairs() {
        let o = out(client, upstream, &image_body(client));
        let conv = conversation(upstream, &o);
        let content = &conv[0]["content"];
        let url = "https://example.com/cat.png";
        let expected = match upstream {
            Chat => json!([
                {"type": "text", "text": "Compare"},
                {"type": "image_url", "image_url": {"url": url}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}}]),
            Responses => json!([
                {"type": "input_text", "text": "Compare"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBO",
                 "detail": "auto"}]),
            Messages => json!([
                {"type": "text", "text": "Compare"},
                {"type": "image", "source": {"type": "url", "url": url}},
                {"type": "image", "source":
                    {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]),
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        };
        assert_eq!(content, &expected, "{client} → {upstream}");
    }
}

// === documents ===

fn document_body(client: Dialect) -> Value {
    match client {
        Chat => body(
            client,
            json!({"messages": [{"role": "user", "content": [
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE",
                                          "filename": "a.pdf"}},
                {"type": "text", "text": "Summarise"}]}]}),
        ),
        Responses => body(
            client,
            json!({"input": [{"role": "user", "content": [
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE",
                 "filename": "a.pdf"},
                {"type": "input_text", "text": "Summarise"}]}]}),
        ),
        Messages => body(
            client,
            json!({"messages": [{"role": "user", "content": [
                {"type": "document", "title": "a.pdf", "source":
                    {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}},
                {"type": "text", "text": "Summarise"}]}]}),
        ),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn a_pdf_document_reaches_every_upstream() {
    for (client, upstream) in pairs() {
        let o = out(client, upstream, &document_body(client));
        let first = conversation(upstream, &o)[0]["content"][0].clone();
        let expected = match upstream {
            Chat => json!({"type": "file", "file":
                {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}}),
            Responses => json!({"type": "input_file",
                "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}),
            Messages => json!({"type": "document", "title": "a.pdf", "source":
                {"type": "base64", "media_type": "application/pdf", "data": "JVBE"}}),
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        };
        assert_eq!(first, expected, "{client} → {upstream}");
    }
}

#[test]
fn a_document_url_is_refused_where_only_bytes_are_taken() {
    let url = "https://example.com/a.pdf";
    for client in [Responses, Messages] {
        let b = match client {
            Responses => body(
                client,
                json!({"input": [{"role": "user", "content": [
                    {"type": "input_file", "file_url": url}]}]}),
            ),
            _ => body(
                client,
                json!({"messages": [{"role": "user", "content": [
                    {"type": "document", "source": {"type": "url", "url": url}}]}]}),
            ),
        };
        let e = refused(client, Chat, &b);
        let field = match client {
            Responses => "input[0].content[0].file_url",
            _ => "messages[0].content[0].source",
        };
        assert_eq!(e.field(), field);
        assert!(matches!(e, RequestError::Unsupported { .. }), "{e:?}");
    }
}

// === tools ===

fn tools_body(client: Dialect) -> Value {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    match client {
        Chat => body(
            client,
            json!({"messages": [{"role": "user", "content": "Weather?"}],
                "tools": [{"type": "function", "function":
                    {"name": "weather", "description": "Forecast", "parameters": schema}}],
                "tool_choice": {"type": "function", "function": {"name": "weather"}},
                "parallel_tool_calls": false}),
        ),
        Responses => body(
            client,
            json!({"input": "Weather?",
                "tools": [{"type": "function", "name": "weather", "description": "Forecast",
                    "parameters": schema}],
                "tool_choice": {"type": "function", "name": "weather"},
                "parallel_tool_calls": false}),
        ),
        Messages => body(
            client,
            json!({"messages": [{"role": "user", "content": "Weather?"}],
                "tools": [{"name": "weather", "description": "Forecast", "input_schema": schema}],
                "tool_choice": {"type": "tool", "name": "weather",
                    "disable_parallel_tool_use": true}}),
        ),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn tools_a_named_choice_and_no_parallel_calls_reach_every_upstream() {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    for (client, upstream) in pairs() {
        let o = out(client, upstream, &tools_body(client));
        let at = format!("{client} → {upstream}");
        match upstream {
            Chat => {
                assert_eq!(
                    o["tools"],
                    json!([{"type": "function", "function":
                        {"name": "weather", "description": "Forecast", "parameters": schema}}]),
                    "{at}"
                );
                assert_eq!(
                    o["tool_choice"],
                    json!({"type": "function", "function": {"name": "weather"}})
                );
                assert_eq!(o["parallel_tool_calls"], false, "{at}");
            }
            Responses => {
                assert_eq!(
                    o["tools"],
                    json!([{"type": "function", "name": "weather", "description": "Forecast",
                        "parameters": schema, "strict": false}]),
                    "{at}"
                );
                assert_eq!(
                    o["tool_choice"],
                    json!({"type": "function", "name": "weather"})
                );
                assert_eq!(o["parallel_tool_calls"], false, "{at}");
            }
            Messages => {
                assert_eq!(
                    o["tools"],
                    json!([{"name": "weather", "description": "Forecast",
                        "input_schema": schema}]),
                    "{at}"
                );
                assert_eq!(
                    o["tool_choice"],
                    json!({"type": "tool", "name": "weather", "disable_parallel_tool_use": true}),
                    "{at}"
                );
            }
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        }
    }
}

// === a tool call, its failed result and a follow-up ===

fn tool_round_body(client: Dialect) -> Value {
    match client {
        Chat => body(
            client,
            json!({"messages": [
                {"role": "user", "content": "Weather in Oslo and Rome?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                    {"id": "c2", "type": "function",
                     "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "Error: timeout"},
                {"role": "tool", "tool_call_id": "c2", "content": "sunny"},
                {"role": "user", "content": "And tomorrow?"}]}),
        ),
        Responses => body(
            client,
            json!({"input": [
                {"role": "user", "content": "Weather in Oslo and Rome?"},
                {"role": "assistant", "content": "Checking."},
                {"type": "function_call", "call_id": "c1", "name": "weather",
                 "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call", "call_id": "c2", "name": "weather",
                 "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "Error: timeout"},
                {"type": "function_call_output", "call_id": "c2", "output": "sunny"},
                {"role": "user", "content": "And tomorrow?"}]}),
        ),
        Messages => body(
            client,
            json!({"messages": [
                {"role": "user", "content": "Weather in Oslo and Rome?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Oslo"}},
                    {"type": "tool_use", "id": "c2", "name": "weather", "input": {"city": "Rome"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1", "content": "timeout",
                     "is_error": true},
                    {"type": "tool_result", "tool_use_id": "c2", "content": "sunny"},
                    {"type": "text", "text": "And tomorrow?"}]}]}),
        ),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn a_tool_call_its_failed_result_and_a_follow_up_reach_every_upstream() {
    for (client, upstream) in pairs() {
        let o = out(client, upstream, &tool_round_body(client));
        let conv = conversation(upstream, &o);
        let at = format!("{client} → {upstream}");
        match upstream {
            Chat => assert_eq!(
                conv,
                vec![
                    json!({"role": "user", "content": "Weather in Oslo and Rome?"}),
                    json!({"role": "assistant", "content": "Checking.", "tool_calls": [
                        {"id": "c1", "type": "function",
                         "function": {"name": "weather", "arguments": "{\"city\":\"Oslo\"}"}},
                        {"id": "c2", "type": "function",
                         "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}}]}),
                    json!({"role": "tool", "tool_call_id": "c1", "content": "Error: timeout"}),
                    json!({"role": "tool", "tool_call_id": "c2", "content": "sunny"}),
                    json!({"role": "user", "content": "And tomorrow?"}),
                ],
                "{at}"
            ),
            Responses => assert_eq!(
                conv,
                vec![
                    json!({"role": "user", "content":
                        [{"type": "input_text", "text": "Weather in Oslo and Rome?"}]}),
                    json!({"role": "assistant", "content": "Checking."}),
                    json!({"type": "function_call", "call_id": "c1", "name": "weather",
                        "arguments": "{\"city\":\"Oslo\"}"}),
                    json!({"type": "function_call", "call_id": "c2", "name": "weather",
                        "arguments": "{\"city\":\"Rome\"}"}),
                    json!({"type": "function_call_output", "call_id": "c1",
                        "output": "Error: timeout"}),
                    json!({"type": "function_call_output", "call_id": "c2", "output": "sunny"}),
                    json!({"role": "user", "content":
                        [{"type": "input_text", "text": "And tomorrow?"}]}),
                ],
                "{at}"
            ),
            Messages => {
                // OpenAI clients have no error flag: "Error: timeout" stays text.
                let first_result = match client {
                    Chat | Responses => {
                        json!({"type": "tool_result", "tool_use_id": "c1",
                            "content": "Error: timeout"})
                    }
                    Messages => unreachable!(),
                    Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
                };
                assert_eq!(
                    conv,
                    vec![
                        json!({"role": "user", "content":
                            [{"type": "text", "text": "Weather in Oslo and Rome?"}]}),
                        json!({"role": "assistant", "content": [
                            {"type": "text", "text": "Checking."},
                            {"type": "tool_use", "id": "c1", "name": "weather",
                             "input": {"city": "Oslo"}},
                            {"type": "tool_use", "id": "c2", "name": "weather",
                             "input": {"city": "Rome"}}]}),
                        json!({"role": "user", "content": [
                            first_result,
                            {"type": "tool_result", "tool_use_id": "c2", "content": "sunny"},
                            {"type": "text", "text": "And tomorrow?"}]}),
                    ],
                    "{at}"
                );
            }
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        }
    }
}

#[test]
fn consecutive_same_role_messages_merge_into_one_anthropic_turn() {
    let b = body(
        Chat,
        json!({"messages": [
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": "c"},
            {"role": "assistant", "content": "d"}]}),
    );
    let o = out(Chat, Messages, &b);
    assert_eq!(
        o["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content":
                [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}]}])
    );
}

// === JSON schema output ===

fn schema_body(client: Dialect) -> Value {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let messages = json!([{"role": "user", "content": "Count"}]);
    match client {
        Chat => body(
            client,
            json!({"messages": messages, "response_format": {"type": "json_schema",
                "json_schema": {"name": "count", "schema": schema, "strict": true}}}),
        ),
        Responses => body(
            client,
            json!({"input": messages, "text": {"format": {"type": "json_schema",
                "name": "count", "schema": schema, "strict": true}}}),
        ),
        Messages => body(
            client,
            json!({"messages": messages,
                "output_config": {"format": {"type": "json_schema", "schema": schema}}}),
        ),
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn a_json_schema_output_reaches_every_upstream() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    for (client, upstream) in pairs() {
        let o = out(client, upstream, &schema_body(client));
        // Anthropic's format has no name or strict flag; OpenAI requires a name.
        let (name, strict) = match client {
            Messages => ("response", None),
            _ => ("count", Some(true)),
        };
        let at = format!("{client} → {upstream}");
        match upstream {
            Chat => {
                let mut expected = json!({"name": name, "schema": schema});
                if let Some(s) = strict {
                    expected["strict"] = json!(s);
                }
                assert_eq!(
                    o["response_format"],
                    json!({"type": "json_schema", "json_schema": expected}),
                    "{at}"
                );
            }
            Responses => {
                let mut expected = json!({"type": "json_schema", "name": name, "schema": schema});
                if let Some(s) = strict {
                    expected["strict"] = json!(s);
                }
                assert_eq!(o["text"]["format"], expected, "{at}");
            }
            Messages => assert_eq!(
                o["output_config"]["format"],
                json!({"type": "json_schema", "schema": schema}),
                "{at}"
            ),
            Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
        }
    }
}

#[test]
fn json_mode_without_a_schema_is_refused_for_anthropic() {
    for client in [Chat, Responses] {
        let b = match client {
            Chat => body(
                client,
                json!({"messages": [{"role": "user", "content": "x"}],
                    "response_format": {"type": "json_object"}}),
            ),
            _ => body(
                client,
                json!({"input": "x", "text": {"format": {"type": "json_object"}}}),
            ),
        };
        let e = refused(client, Messages, &b);
        let field = match client {
            Chat => "response_format.type",
            _ => "text.format.type",
        };
        assert_eq!(e.field(), field, "{client}");
    }
}

// === reasoning ===

fn reasoning_body(client: Dialect, level: &str) -> Value {
    let messages = json!([{"role": "user", "content": "Think"}]);
    match client {
        Chat => body(
            client,
            json!({"messages": messages, "reasoning_effort": level,
                "max_completion_tokens": 64_000}),
        ),
        Responses => body(
            client,
            json!({"input": messages, "reasoning": {"effort": level},
                "max_output_tokens": 64_000}),
        ),
        Messages => {
            let budget = TABLE.budget_for(hub::Effort::parse(level).unwrap());
            let mut b = body(
                client,
                json!({"messages": messages,
                    "thinking": {"type": "enabled", "budget_tokens": budget}}),
            );
            b["max_tokens"] = json!(64_000);
            b
        }
        Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
    }
}

#[test]
fn reasoning_effort_becomes_a_budget_and_a_budget_the_nearest_effort() {
    for (client, upstream) in pairs() {
        for level in ["low", "medium", "high"] {
            let o = out(client, upstream, &reasoning_body(client, level));
            let at = format!("{client} → {upstream} ({level})");
            let budget = TABLE.budget_for(hub::Effort::parse(level).unwrap());
            match upstream {
                Chat => assert_eq!(o["reasoning_effort"], level, "{at}"),
                Responses => assert_eq!(o["reasoning"]["effort"], level, "{at}"),
                Messages => {
                    assert_eq!(
                        o["thinking"],
                        json!({"type": "enabled", "budget_tokens": budget}),
                        "{at}"
                    );
                    assert_eq!(o["max_tokens"], 64_000, "{at}");
                }
                Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
            }
        }
    }
}

#[test]
fn a_budget_between_efforts_goes_to_the_nearest() {
    let b = body(
        Messages,
        json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 20_000,
            "thinking": {"type": "enabled", "budget_tokens": 3000}}),
    );
    assert_eq!(out(Messages, Chat, &b)["reasoning_effort"], "low");
    assert_eq!(out(Messages, Responses, &b)["reasoning"]["effort"], "low");
}

#[test]
fn an_effort_larger_than_the_cap_gets_half_the_cap() {
    let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 10_000, "reasoning_effort": "high"});
    let o = out(Chat, Messages, &b);
    assert_eq!(
        o["thinking"],
        json!({"type": "enabled", "budget_tokens": 5000})
    );
    assert_eq!(o["max_tokens"], 10_000);
}

#[test]
fn reasoning_with_too_small_a_cap_or_a_temperature_is_refused_naming_the_field() {
    let small = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "max_completion_tokens": 1500, "reasoning_effort": "low"});
    let e = refused(Chat, Messages, &small);
    assert_eq!(e.field(), "max_completion_tokens");
    let hot = json!({"model": "m", "input": "x", "temperature": 0.2,
        "reasoning": {"effort": "low"}});
    let e = refused(Responses, Messages, &hot);
    assert_eq!(e.field(), "temperature");
    assert!(e.message().contains("temperature 1"), "{}", e.message());
    let forced = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "reasoning_effort": "low", "tool_choice": "required",
        "tools": [{"type": "function", "function": {"name": "f"}}]});
    assert_eq!(refused(Chat, Messages, &forced).field(), "tool_choice");
}

#[test]
fn a_table_with_native_effort_sends_anthropic_an_effort() {
    let table = ReasoningTable {
        native_effort: true,
        ..ReasoningTable::DEFAULT
    };
    let opts = RequestOptions {
        reasoning: &table,
        ..opts(false)
    };
    let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "reasoning_effort": "high"});
    let t = translate_request(Chat, Messages, b.to_string().as_bytes(), &opts).unwrap();
    let o: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(o["thinking"], json!({"type": "adaptive"}));
    assert_eq!(o["output_config"]["effort"], "high");
}

#[test]
fn disabled_reasoning_is_carried_as_disabled() {
    let b = body(
        Messages,
        json!({"messages": [{"role": "user", "content": "x"}], "thinking": {"type": "disabled"}}),
    );
    assert_eq!(out(Messages, Chat, &b)["reasoning_effort"], "none");
    let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "reasoning_effort": "none"});
    assert_eq!(
        out(Chat, Messages, &b)["thinking"],
        json!({"type": "disabled"})
    );
}

// === stop sequences ===

#[test]
fn stop_sequences_reach_upstreams_that_have_them_and_are_refused_by_responses() {
    for client in [Chat, Messages] {
        let b = match client {
            Chat => body(
                client,
                json!({"messages": [{"role": "user", "content": "x"}], "stop": ["END", "##"]}),
            ),
            _ => body(
                client,
                json!({"messages": [{"role": "user", "content": "x"}],
                    "stop_sequences": ["END", "##"]}),
            ),
        };
        for upstream in DIALECTS.iter().copied().filter(|&u| u != client) {
            match upstream {
                Chat => assert_eq!(out(client, upstream, &b)["stop"], json!(["END", "##"])),
                Messages => {
                    assert_eq!(
                        out(client, upstream, &b)["stop_sequences"],
                        json!(["END", "##"])
                    )
                }
                Responses => {
                    let e = refused(client, upstream, &b);
                    let field = if client == Chat {
                        "stop"
                    } else {
                        "stop_sequences"
                    };
                    assert_eq!(e.field(), field);
                }
                Gemini => unreachable!("Gemini pairs are tested in gemini_tests.rs"),
            }
        }
    }
}

#[test]
fn a_single_stop_string_is_one_sequence() {
    let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": "END"});
    assert_eq!(out(Chat, Messages, &b)["stop_sequences"], json!(["END"]));
}

// === max tokens ===

#[test]
fn anthropic_max_tokens_come_from_the_client_else_the_default_else_an_error() {
    for client in [Chat, Responses] {
        let (field, b) = match client {
            Chat => (
                "max_completion_tokens",
                json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
            ),
            _ => ("max_output_tokens", json!({"model": "m", "input": "x"})),
        };
        assert_eq!(out(client, Messages, &b)["max_tokens"], 4096, "the default");
        let mut given = b.clone();
        given[field] = json!(77);
        assert_eq!(
            out(client, Messages, &given)["max_tokens"],
            77,
            "the client's"
        );
        let no_default = RequestOptions {
            default_max_tokens: None,
            ..opts(false)
        };
        let e =
            translate_request(client, Messages, b.to_string().as_bytes(), &no_default).unwrap_err();
        assert_eq!(e, RequestError::MissingMaxTokens { field });
        assert!(e.message().contains("max_tokens"), "{}", e.message());
    }
    let legacy = json!({"model": "m", "max_tokens": 55,
        "messages": [{"role": "user", "content": "x"}]});
    assert_eq!(out(Chat, Messages, &legacy)["max_tokens"], 55);
}

#[test]
fn max_tokens_are_carried_to_openai_upstreams() {
    let b = body(
        Messages,
        json!({"messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!(out(Messages, Chat, &b)["max_completion_tokens"], 1000);
    assert_eq!(out(Messages, Responses, &b)["max_output_tokens"], 1000);
}

// === streaming and usage ===

#[test]
fn a_chat_upstream_stream_always_asks_for_usage_and_the_client_wish_is_returned() {
    for client in DIALECTS.iter().copied().filter(|&c| c != Chat) {
        let b = match client {
            Responses => json!({"model": "m", "input": "x", "stream": true}),
            _ => body(
                client,
                json!({"messages": [{"role": "user", "content": "x"}]}),
            ),
        };
        let t = translate_request(client, Chat, b.to_string().as_bytes(), &opts(true)).unwrap();
        let o: Value = serde_json::from_slice(&t.body).unwrap();
        assert_eq!(o["stream"], true);
        assert_eq!(o["stream_options"], json!({"include_usage": true}));
        assert!(!t.client_wants_usage_chunk);
    }
    for (wish, expected) in [
        (json!(true), true),
        (json!(false), false),
        (Value::Null, false),
    ] {
        let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
            "stream": true, "stream_options": {"include_usage": wish}});
        let t = translate_request(Chat, Messages, b.to_string().as_bytes(), &opts(true)).unwrap();
        assert_eq!(t.client_wants_usage_chunk, expected);
        let o: Value = serde_json::from_slice(&t.body).unwrap();
        assert_eq!(o["stream"], true);
    }
}

#[test]
fn the_stream_flag_is_the_callers_not_the_clients() {
    let b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": true});
    for upstream in [Responses, Messages] {
        assert_eq!(out(Chat, upstream, &b)["stream"], false);
    }
}

// === what cannot be carried ===

/// (client, field added to a plain request, upstream, the field the error must name).
fn unsupported_cases() -> Vec<(Dialect, Value, Dialect, &'static str)> {
    let user = json!([{"role": "user", "content": "x"}]);
    vec![
        (Chat, json!({"n": 2}), Messages, "n"),
        (Chat, json!({"n": 2}), Responses, "n"),
        (Chat, json!({"logprobs": true}), Messages, "logprobs"),
        (Chat, json!({"top_logprobs": 2}), Responses, "top_logprobs"),
        (
            Chat,
            json!({"logit_bias": {"50256": -100}}),
            Messages,
            "logit_bias",
        ),
        (
            Chat,
            json!({"prediction": {"type": "content", "content": "x"}}),
            Messages,
            "prediction",
        ),
        (
            Chat,
            json!({"audio": {"voice": "alloy", "format": "wav"}}),
            Responses,
            "audio",
        ),
        (
            Chat,
            json!({"modalities": ["text", "audio"]}),
            Messages,
            "modalities[1]",
        ),
        (Chat, json!({"seed": 7}), Messages, "seed"),
        (
            Chat,
            json!({"presence_penalty": 0.5}),
            Responses,
            "presence_penalty",
        ),
        (Chat, json!({"store": true}), Messages, "store"),
        (
            Chat,
            json!({"web_search_options": {}}),
            Messages,
            "web_search_options",
        ),
        (Chat, json!({"verbosity": "low"}), Messages, "verbosity"),
        (Chat, json!({"frobnicate": 1}), Messages, "frobnicate"),
        (
            Chat,
            json!({"messages": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
            Messages,
            "messages[0].content[0].input_audio",
        ),
        (
            Chat,
            json!({"messages": [{"role": "user", "content": [{"type": "hologram"}]}]}),
            Responses,
            "messages[0].content[0].type=hologram",
        ),
        (
            Chat,
            json!({"tools": [{"type": "custom", "custom": {"name": "x"}}], "messages": user}),
            Messages,
            "tools[0].type=custom",
        ),
        (
            Responses,
            json!({"previous_response_id": "resp_1"}),
            Chat,
            "previous_response_id",
        ),
        (Responses, json!({"store": true}), Messages, "store"),
        (
            Responses,
            json!({"conversation": "conv_1"}),
            Messages,
            "conversation",
        ),
        (Responses, json!({"background": true}), Chat, "background"),
        (
            Responses,
            json!({"tools": [{"type": "web_search_preview"}]}),
            Chat,
            "tools[0].type=web_search_preview",
        ),
        (
            Responses,
            json!({"tools": [{"type": "file_search", "vector_store_ids": ["v"]}]}),
            Messages,
            "tools[0].type=file_search",
        ),
        (
            Responses,
            json!({"tools": [{"type": "code_interpreter", "container": {"type": "auto"}}]}),
            Messages,
            "tools[0].type=code_interpreter",
        ),
        (
            Responses,
            json!({"include": ["file_search_call.results"]}),
            Chat,
            "include[0]=file_search_call.results",
        ),
        (Responses, json!({"top_logprobs": 3}), Chat, "top_logprobs"),
        (
            Responses,
            json!({"truncation": "auto"}),
            Messages,
            "truncation",
        ),
        (
            Responses,
            json!({"input": [{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}]}),
            Messages,
            "input[0].content[0].type=input_audio",
        ),
        (
            Responses,
            json!({"input": [{"type": "item_reference", "id": "msg_1"}]}),
            Chat,
            "input[0].type=item_reference",
        ),
        (Responses, json!({"frobnicate": 1}), Chat, "frobnicate"),
        (Messages, json!({"top_k": 5}), Chat, "top_k"),
        (Messages, json!({"top_k": 5}), Responses, "top_k"),
        (
            Messages,
            json!({"stop_sequences": ["x"]}),
            Responses,
            "stop_sequences",
        ),
        (
            Messages,
            json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            Chat,
            "tools[0].type=web_search_20250305",
        ),
        (
            Messages,
            json!({"tools": [{"type": "computer_20250124", "name": "computer",
                "display_width_px": 1024, "display_height_px": 768}]}),
            Responses,
            "tools[0].type=computer_20250124",
        ),
        (Messages, json!({"mcp_servers": []}), Chat, "mcp_servers"),
        (
            Messages,
            json!({"messages": [{"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t", "content": [
                    {"type": "image", "source":
                        {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]}]}]}),
            Chat,
            "messages[0].content[0].content[0]",
        ),
        (
            Messages,
            json!({"messages": [{"role": "user", "content": [
                {"type": "search_result", "source": "s", "title": "t", "content": []}]}]}),
            Chat,
            "messages[0].content[0].type=search_result",
        ),
        (Messages, json!({"frobnicate": 1}), Responses, "frobnicate"),
    ]
}

#[test]
fn each_field_that_cannot_be_carried_is_refused_naming_it() {
    for (client, fields, upstream, field) in unsupported_cases() {
        if !DIALECTS.contains(&client) || !DIALECTS.contains(&upstream) {
            continue;
        }
        let mut b = match client {
            Responses => json!({"model": "m", "input": "x"}),
            _ => body(
                client,
                json!({"messages": [{"role": "user", "content": "x"}]}),
            ),
        };
        for (k, v) in fields.as_object().unwrap() {
            b[k] = v.clone();
        }
        let e = refused(client, upstream, &b);
        assert!(
            matches!(e, RequestError::Unsupported { .. }),
            "{client} {field}: {e:?}"
        );
        assert_eq!(e.field(), field, "{client} → {upstream}: {e:?}");
        assert!(e.message().contains(field), "{}", e.message());
    }
}

#[test]
fn malformed_bodies_are_invalid_not_unsupported() {
    for client in DIALECTS.iter().copied() {
        let e = translate_request(client, Chat, b"{not json", &opts(false)).unwrap_err();
        assert!(matches!(e, RequestError::Invalid { .. }), "{e:?}");
        assert_eq!(e.field(), "");
        let e = translate_request(client, Messages, b"[1]", &opts(false)).unwrap_err();
        assert!(matches!(e, RequestError::Invalid { .. }), "{e:?}");
    }
    let wrong = json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
        "temperature": "hot"});
    let e = refused(Chat, Messages, &wrong);
    assert_eq!(
        e,
        RequestError::Invalid {
            field: "temperature".into(),
            reason: "expected a number".into()
        }
    );
    let bad_args = json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]});
    let e = refused(Chat, Messages, &bad_args);
    assert_eq!(e.field(), "messages[0].tool_calls[0].function.arguments");
    assert!(matches!(e, RequestError::Invalid { .. }));
}

// === omissions ===

#[test]
fn hints_left_out_are_listed_once_per_reason() {
    let b = body(
        Messages,
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
            {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]}]}),
    );
    let t = run(Messages, Chat, &b).unwrap();
    assert_eq!(t.omitted.len(), 1, "{:?}", t.omitted);
    assert_eq!(t.omitted[0].field, "messages[0].content[0].cache_control");
}

#[test]
fn thinking_of_an_earlier_turn_goes_back_to_anthropic_only_when_signed() {
    let b = json!({"model": "m", "input": [
        {"role": "user", "content": "x"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}],
         "encrypted_content": "sig"},
        {"type": "message", "role": "assistant", "content": "y"},
        {"type": "reasoning", "id": "rs_2", "summary": []},
        {"type": "message", "role": "assistant", "content": "z"},
        {"role": "user", "content": "again"}]});
    let o = out(Responses, Messages, &b);
    assert_eq!(
        o["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "hm", "signature": "sig"},
            {"type": "text", "text": "y"},
            {"type": "text", "text": "z"}])
    );
    let t = run(Responses, Messages, &b).unwrap();
    assert!(
        t.omitted.iter().any(|o| o.reason.contains("signed")),
        "{:?}",
        t.omitted
    );
}

#[test]
fn each_tool_result_is_named_from_the_earlier_call_with_its_id() {
    for client in DIALECTS.iter().copied() {
        let upstream = if client == Chat { Messages } else { Chat };
        let t = run(client, upstream, &tool_round_body(client)).unwrap();
        let names: Vec<(&str, Option<&str>)> = t
            .hub
            .messages
            .iter()
            .filter_map(|m| match m {
                hub::Message::Tool(r) => Some((r.call_id.as_str(), r.name.as_deref())),
                _ => None,
            })
            .collect();
        assert_eq!(
            names,
            vec![("c1", Some("weather")), ("c2", Some("weather"))],
            "{client}"
        );
    }
    let orphan = json!({"model": "m", "messages": [
        {"role": "tool", "tool_call_id": "nowhere", "content": "x"}]});
    let t = run(Chat, Messages, &orphan).unwrap();
    assert!(matches!(&t.hub.messages[0], hub::Message::Tool(r) if r.name.is_none()));
}

#[test]
fn pass_through_fields_are_copied_untranslated_and_others_still_refused() {
    let b = json!({"model": "m", "max_tokens": 8, "laptime_sim": {"text_tokens": 3},
        "messages": [{"role": "user", "content": "x"}]});
    let carry = RequestOptions {
        pass_through: &["laptime_sim"],
        prefill: None,
        ..opts(false)
    };
    let t = translate_request(Messages, Chat, b.to_string().as_bytes(), &carry).unwrap();
    let up: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(up["laptime_sim"], json!({"text_tokens": 3}));
    let e = translate_request(Messages, Chat, b.to_string().as_bytes(), &opts(false)).unwrap_err();
    assert_eq!(e.field(), "laptime_sim");
}

#[test]
fn a_prefill_is_the_last_assistant_turn_each_upstream_continues_and_responses_refuses_it() {
    let with_prefill = RequestOptions {
        prefill: Some("Once upon a"),
        ..opts(true)
    };
    for client in DIALECTS.iter().copied() {
        let body = match client {
            Dialect::Chat => {
                json!({"model": "m", "messages": [{"role": "user", "content": "tell"}]})
            }
            Dialect::Responses => json!({"model": "m", "input": "tell"}),
            Dialect::Messages => {
                json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "tell"}]})
            }
            Dialect::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": "tell"}]}]}),
        };
        let bytes = body.to_string();
        for upstream in DIALECTS.iter().copied() {
            let got = translate_request(client, upstream, bytes.as_bytes(), &with_prefill);
            let pair = format!("{client} → {upstream}");
            if upstream == Dialect::Responses {
                let e = got.unwrap_err();
                assert!(
                    matches!(e, RequestError::Unsupported { .. }),
                    "{pair}: {e:?}"
                );
                continue;
            }
            let v: Value = serde_json::from_slice(&got.unwrap().body).unwrap();
            let last = match upstream {
                Dialect::Gemini => v["contents"].as_array().unwrap().last().unwrap().clone(),
                _ => v["messages"].as_array().unwrap().last().unwrap().clone(),
            };
            match upstream {
                Dialect::Chat => {
                    assert_eq!(last["role"], "assistant", "{pair}: {v}");
                    assert_eq!(last["content"], "Once upon a", "{pair}: {v}");
                    assert_eq!(last["prefix"], true, "{pair}: {v}");
                }
                Dialect::Messages => {
                    assert_eq!(last["role"], "assistant", "{pair}: {v}");
                    let text = last["content"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| last["content"][0]["text"].as_str().unwrap().to_owned());
                    assert_eq!(text, "Once upon a", "{pair}: {v}");
                }
                _ => {
                    assert_eq!(last["role"], "model", "{pair}: {v}");
                    assert_eq!(last["parts"][0]["text"], "Once upon a", "{pair}: {v}");
                }
            }
        }
    }
}
