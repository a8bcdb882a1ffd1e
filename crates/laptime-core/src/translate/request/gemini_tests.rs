//! Every pair with Gemini on one side, one scenario at a time: a Gemini client's body to each
//! other upstream, each other client's body to a Gemini upstream, and what must be refused.

use serde_json::{json, Value};

use super::*;
use crate::Dialect::{self, Chat, Gemini, Messages, Responses};

const OTHERS: [Dialect; 3] = [Chat, Responses, Messages];
const TABLE: ReasoningTable = ReasoningTable::DEFAULT;

fn opts() -> RequestOptions<'static> {
    RequestOptions {
        upstream_model: "up-model",
        stream: true,
        default_max_tokens: Some(4096),
        reasoning: &TABLE,
        pass_through: &[],
        prefill: None,
    }
}

fn run(client: Dialect, upstream: Dialect, body: &Value) -> Result<TranslatedRequest> {
    translate_request(client, upstream, body.to_string().as_bytes(), &opts())
}

fn out(client: Dialect, upstream: Dialect, body: &Value) -> Value {
    match run(client, upstream, body) {
        Ok(t) => serde_json::from_slice(&t.body).unwrap(),
        Err(e) => panic!("{client} → {upstream}: {e:?}"),
    }
}

fn refused(client: Dialect, upstream: Dialect, body: &Value) -> RequestError {
    match run(client, upstream, body) {
        Ok(t) => panic!(
            "{client} → {upstream} accepted: {}",
            String::from_utf8_lossy(&t.body)
        ),
        Err(e) => e,
    }
}

/// A Gemini conversation: instructions, a question, a call without an id, its response.
fn gemini_tool_turns() -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
            {"role": "model", "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "Sunny"}}},
                {"text": "And tomorrow?"}]}
        ],
        "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather",
            "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {"maxOutputTokens": 512, "temperature": 0.5, "stopSequences": ["END"]}
    })
}

#[test]
fn a_gemini_conversation_with_a_tool_reaches_every_upstream() {
    let chat = out(Gemini, Chat, &gemini_tool_turns());
    assert_eq!(chat["model"], "up-model");
    assert_eq!(chat["max_completion_tokens"], 512);
    assert_eq!(chat["stop"], json!(["END"]));
    assert_eq!(chat["tool_choice"], "required");
    assert_eq!(
        chat["tools"][0]["function"]["parameters"],
        json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        "Google's capital types become JSON Schema's"
    );
    assert_eq!(
        chat["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0",
                "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "Sunny"},
            {"role": "user", "content": "And tomorrow?"}
        ])
    );
    let messages = out(Gemini, Messages, &gemini_tool_turns());
    assert_eq!(messages["max_tokens"], 512);
    assert_eq!(messages["system"], "Be brief.");
    assert_eq!(
        messages["messages"][2]["content"],
        json!([{"type": "tool_result", "tool_use_id": "call_0", "content": "Sunny"},
               {"type": "text", "text": "And tomorrow?"}])
    );
    assert_eq!(messages["tool_choice"], json!({"type": "any"}));
    let mut no_stop = gemini_tool_turns();
    no_stop["generationConfig"]["stopSequences"] = json!([]);
    let responses = out(Gemini, Responses, &no_stop);
    let e = refused(Gemini, Responses, &gemini_tool_turns());
    assert_eq!(e.field(), "generationConfig.stopSequences");
    let items = responses["input"].as_array().unwrap();
    let of = |t: &str| items.iter().find(|i| i["type"] == t).unwrap();
    assert_eq!(of("function_call")["call_id"], "call_0");
    assert_eq!(of("function_call_output")["call_id"], "call_0");
    assert_eq!(of("function_call_output")["output"], "Sunny");
    assert_eq!(responses["max_output_tokens"], 512);
}

#[test]
fn a_gemini_response_is_matched_to_its_call_by_name_then_order() {
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "Two cities"}]},
        {"role": "model", "parts": [
            {"functionCall": {"name": "w", "args": {"c": "A"}}},
            {"functionCall": {"name": "t", "args": {}}},
            {"functionCall": {"name": "w", "args": {"c": "B"}}}]},
        {"role": "user", "parts": [
            {"functionResponse": {"name": "w", "response": {"output": "a"}}},
            {"functionResponse": {"name": "w", "response": {"error": "no B"}}},
            {"functionResponse": {"name": "t", "response": {"time": 3}}}]}
    ]});
    let o = out(Gemini, Messages, &body);
    let results: Vec<(&str, &Value, bool)> = o["messages"][2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let error = b.get("is_error").is_some();
            (b["tool_use_id"].as_str().unwrap(), &b["content"], error)
        })
        .collect();
    assert_eq!(
        results,
        vec![
            ("call_0", &json!("a"), false),
            ("call_2", &json!("no B"), true),
            ("call_1", &json!("{\"time\":3}"), false),
        ]
    );
    let orphan = json!({"contents": [{"role": "user", "parts": [
        {"functionResponse": {"name": "w", "response": {"output": "a"}}}]}]});
    let e = refused(Gemini, Chat, &orphan);
    assert_eq!(e.field(), "contents[0].parts[0].functionResponse.name");
}

#[test]
fn a_gemini_thinking_budget_becomes_each_upstreams_reasoning() {
    let body = |config: Value| {
        json!({"contents": [{"parts": [{"text": "Hi"}]}],
               "generationConfig": {"maxOutputTokens": 20000, "thinkingConfig": config}})
    };
    let b = body(json!({"thinkingBudget": 8000, "includeThoughts": true}));
    assert_eq!(out(Gemini, Chat, &b)["reasoning_effort"], "medium");
    assert_eq!(
        out(Gemini, Messages, &b)["thinking"],
        json!({"type": "enabled", "budget_tokens": 8000})
    );
    assert_eq!(
        out(Gemini, Responses, &b)["reasoning"],
        json!({"effort": "medium", "summary": "auto"})
    );
    let off = body(json!({"thinkingBudget": 0}));
    assert_eq!(out(Gemini, Chat, &off)["reasoning_effort"], "none");
    assert_eq!(
        out(Gemini, Messages, &off)["thinking"],
        json!({"type": "disabled"})
    );
    let level = body(json!({"thinkingLevel": "HIGH"}));
    assert_eq!(out(Gemini, Chat, &level)["reasoning_effort"], "high");
}

#[test]
fn what_gemini_clients_send_that_no_upstream_carries_is_refused_by_name() {
    let text = json!([{"parts": [{"text": "Hi"}]}]);
    for (extra, field) in [
        (
            json!({"tools": [{"googleSearch": {}}]}),
            "tools[0].googleSearch",
        ),
        (
            json!({"tools": [{"codeExecution": {}}]}),
            "tools[0].codeExecution",
        ),
        (
            json!({"safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT",
                                       "threshold": "BLOCK_NONE"}]}),
            "safetySettings",
        ),
        (
            json!({"cachedContent": "cachedContents/abc"}),
            "cachedContent",
        ),
        (
            json!({"generationConfig": {"candidateCount": 2}}),
            "generationConfig.candidateCount",
        ),
        (
            json!({"generationConfig": {"responseModalities": ["TEXT", "IMAGE"]}}),
            "generationConfig.responseModalities[1]",
        ),
        (
            json!({"toolConfig": {"functionCallingConfig": {"mode": "ANY",
                "allowedFunctionNames": ["a", "b"]}}}),
            "toolConfig.functionCallingConfig.allowedFunctionNames",
        ),
    ] {
        let mut body = json!({"contents": text});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        for upstream in OTHERS {
            let e = refused(Gemini, upstream, &body);
            assert!(matches!(e, RequestError::Unsupported { .. }), "{e:?}");
            assert_eq!(e.field(), field, "{upstream}");
        }
    }
    // An empty safetySettings asks for nothing.
    let body = json!({"contents": text, "safetySettings": []});
    assert!(run(Gemini, Chat, &body).is_ok());
    // Per upstream: top_k only to Messages, penalties only to Chat.
    let top_k = json!({"contents": text, "generationConfig": {"topK": 40}});
    assert_eq!(
        refused(Gemini, Chat, &top_k).field(),
        "generationConfig.topK"
    );
    assert_eq!(out(Gemini, Messages, &top_k)["top_k"], 40);
    let pen = json!({"contents": text, "generationConfig": {"presencePenalty": 0.5}});
    assert_eq!(out(Gemini, Chat, &pen)["presence_penalty"], 0.5);
    let e = refused(Gemini, Messages, &pen);
    assert_eq!(e.field(), "generationConfig.presencePenalty");
    // Messages needs max_tokens: the default, else the Gemini field is named.
    let no_max = RequestOptions {
        default_max_tokens: None,
        ..opts()
    };
    let body = json!({"contents": text});
    let e = translate_request(Gemini, Messages, body.to_string().as_bytes(), &no_max);
    assert_eq!(
        e.unwrap_err(),
        RequestError::MissingMaxTokens {
            field: "generationConfig.maxOutputTokens"
        }
    );
}

/// Each other dialect's body: instructions, a question, a call, its result, and more text.
fn tool_turns(client: Dialect) -> Value {
    match client {
        Chat => json!({"model": "m", "max_completion_tokens": 300, "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [{"id": "c1",
                "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "Sunny"},
            {"role": "user", "content": "Thanks"}]}),
        Responses => json!({"model": "m", "max_output_tokens": 300, "instructions": "Be brief.",
            "input": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": "{\"city\":\"Paris\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "Sunny"},
            {"role": "user", "content": "Thanks"}]}),
        Messages => json!({"model": "m", "max_tokens": 300, "system": "Be brief.", "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "Sunny"},
                {"type": "text", "text": "Thanks"}]}]}),
        Gemini => unreachable!("a Gemini client is the other side here"),
    }
}

#[test]
fn every_client_reaches_a_gemini_upstream_in_alternating_turns() {
    for client in OTHERS {
        let o = out(client, Gemini, &tool_turns(client));
        assert!(
            o.get("model").is_none() && o.get("stream").is_none(),
            "{client}: the URL's"
        );
        assert_eq!(
            o["systemInstruction"],
            json!({"parts": [{"text": "Be brief."}]})
        );
        assert_eq!(o["generationConfig"]["maxOutputTokens"], 300, "{client}");
        assert_eq!(
            o["contents"],
            json!([
                {"role": "user", "parts": [{"text": "Weather?"}]},
                {"role": "model", "parts": [{"text": "Checking."},
                    {"functionCall": {"id": "c1", "name": "get_weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [
                    {"functionResponse": {"id": "c1", "name": "get_weather",
                                          "response": {"output": "Sunny"}}},
                    {"text": "Thanks"}]}
            ]),
            "{client}"
        );
    }
}

#[test]
fn a_tool_result_whose_call_is_unknown_cannot_reach_gemini() {
    let chat = json!({"model": "m", "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "tool", "tool_call_id": "nope", "content": "x"}]});
    let e = refused(Chat, Gemini, &chat);
    assert!(matches!(e, RequestError::Invalid { .. }), "{e:?}");
    assert_eq!(e.field(), "messages[].tool_call_id");
    assert!(e.message().contains("\"nope\""), "{}", e.message());
}

#[test]
fn settings_reach_gemini_in_its_generation_config() {
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}],
        "temperature": 0.2, "top_p": 0.9, "stop": "END", "seed": 7, "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "n",
            "schema": {"type": "object"}}},
        "tools": [{"type": "function", "function": {"name": "f", "strict": true}}],
        "tool_choice": "auto", "user": "u1"});
    let t = run(Chat, Gemini, &chat).unwrap();
    let o: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(
        o["generationConfig"],
        json!({"temperature": 0.2, "topP": 0.9, "stopSequences": ["END"], "seed": 7,
               "responseMimeType": "application/json",
               "responseJsonSchema": {"type": "object"},
               "thinkingConfig": {"thinkingBudget": 2048}})
    );
    assert_eq!(
        o["toolConfig"],
        json!({"functionCallingConfig": {"mode": "VALIDATED"}})
    );
    let omitted: Vec<&str> = t.omitted.iter().map(|o| o.field.as_str()).collect();
    assert!(omitted.contains(&"user"), "{omitted:?}");
    let native = ReasoningTable {
        native_effort: true,
        ..TABLE
    };
    let opts = RequestOptions {
        reasoning: &native,
        ..opts()
    };
    let t = translate_request(Chat, Gemini, chat.to_string().as_bytes(), &opts).unwrap();
    let o: Value = serde_json::from_slice(&t.body).unwrap();
    assert_eq!(
        o["generationConfig"]["thinkingConfig"],
        json!({"thinkingLevel": "low"})
    );
}

#[test]
fn what_gemini_cannot_carry_is_refused_by_the_clients_name() {
    let msg = json!([{"role": "user", "content": "Hi"}]);
    for (body, field) in [
        (
            json!({"model": "m", "messages": msg, "parallel_tool_calls": false}),
            "parallel_tool_calls",
        ),
        (
            json!({"model": "m", "messages": msg, "verbosity": "low"}),
            "verbosity",
        ),
        (json!({"model": "m", "messages": msg, "n": 2}), "n"),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]}),
            "messages[0].content[0].image_url.url",
        ),
    ] {
        let e = refused(Chat, Gemini, &body);
        assert!(matches!(e, RequestError::Unsupported { .. }), "{e:?}");
        assert_eq!(e.field(), field);
    }
}

#[test]
fn inline_media_and_signed_thoughts_go_through_gemini_and_back() {
    let body = json!({"contents": [
        {"role": "user", "parts": [{"text": "Look"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
            {"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}}]},
        {"role": "model", "parts": [
            {"text": "Hmm", "thought": true, "thoughtSignature": "sig1"},
            {"functionCall": {"id": "x", "name": "f", "args": {}}, "thoughtSignature": "sig2"}]},
        {"role": "user", "parts": [{"functionResponse": {"id": "x", "name": "f",
            "response": {"output": "ok"}}}]}
    ]});
    let mut omitted = error::Omissions::default();
    let hub = decode(Gemini, Gemini, body.to_string().as_bytes(), &mut omitted).unwrap();
    let o = Value::Object(encode(Gemini, Gemini, &hub, &opts(), &mut omitted).unwrap());
    assert_eq!(o["contents"], body["contents"]);
    let m = out(Gemini, Messages, &body);
    assert_eq!(m["messages"][0]["content"][1]["type"], "image");
    assert_eq!(m["messages"][0]["content"][2]["type"], "document");
    assert_eq!(
        m["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "Hmm", "signature": "sig1"})
    );
}

#[test]
fn the_schema_fields_google_genai_sends_by_their_proto_names_are_read() {
    let schema = json!({"type": "object", "properties": {"q": {"type": "string"}}});
    let body = json!({"contents": [{"parts": [{"text": "Hi"}]}],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters_json_schema": schema}]}],
        "generationConfig": {"responseMimeType": "application/json",
                             "response_json_schema": schema}});
    let o = out(Gemini, Chat, &body);
    assert_eq!(o["tools"][0]["function"]["parameters"], schema);
    assert_eq!(o["response_format"]["json_schema"]["schema"], schema);
}

#[test]
fn proto_names_are_read_as_their_camel_case_and_the_clients_own_json_is_kept() {
    // google-genai writes parts' insides by their proto names.
    let body = json!({
        "system_instruction": {"parts": [{"text": "Be brief."}]},
        "contents": [{"role": "user", "parts": [
            {"text": "What is in these?"},
            {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
            {"fileData": {"file_uri": "https://example.com/a.pdf", "mime_type": "application/pdf"}},
        ]}],
        "tools": [{"function_declarations": [{"name": "get_weather",
            "parameters_json_schema": {"type": "object",
                "properties": {"city_name": {"type": "string"}}}}]}],
        "generation_config": {"max_output_tokens": 77, "stop_sequences": ["END"]},
    });
    let up = out(Gemini, Messages, &body);
    assert_eq!(up["system"], "Be brief.", "{up}");
    assert_eq!(up["max_tokens"], 77);
    assert_eq!(up["stop_sequences"], json!(["END"]));
    let content = &up["messages"][0]["content"];
    assert_eq!(content[1]["source"]["media_type"], "image/png", "{up}");
    assert_eq!(content[2]["type"], "document", "{up}");
    // A property named by the client keeps its spelling.
    assert_eq!(
        up["tools"][0]["input_schema"]["properties"]["city_name"]["type"], "string",
        "{up}"
    );
}
