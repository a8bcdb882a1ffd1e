//! Continuation after a cut, over real sockets: the presets that cut an answer mid-way
//! (`sim-cut-after-40`, `sim-stall-after-20`), a trailing assistant turn continued as each
//! dialect sends a prefill (Messages, Chat with `prefix: true`, Gemini), and a prefill refused
//! in each provider's shape (`sim-prefill-refused`).

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod common;

use std::time::Duration;

use common::{sse, Harness};
use futures_util::future::join_all;
use laptime_core::Dialect;
use laptime_sim::{canonical_text, preset};
use serde_json::{json, Value};

/// Cuts " short": the prefill ends inside a token.
const MID_TOKEN: &str = "Sure, here is the sh";

fn canonical() -> String {
    canonical_text(&preset("sim-long").unwrap())
}

/// A request for `model` in `dialect` whose conversation is `hi`, then `turn` (a dialect's own
/// message object) when there is one. Returns the target and the body.
fn request(dialect: Dialect, model: &str, stream: bool, turn: Option<Value>) -> (String, Value) {
    let body = match dialect {
        Dialect::Chat | Dialect::Messages => {
            let mut messages = vec![json!({"role": "user", "content": "hi"})];
            messages.extend(turn);
            json!({"model": model, "stream": stream, "max_tokens": 64, "messages": messages})
        }
        Dialect::Responses => {
            let mut input = vec![json!({"role": "user", "content": "hi"})];
            input.extend(turn);
            json!({"model": model, "stream": stream, "input": input})
        }
        Dialect::Gemini => {
            let mut contents = vec![json!({"role": "user", "parts": [{"text": "hi"}]})];
            contents.extend(turn);
            json!({"contents": contents})
        }
    };
    (dialect.target(model, stream), body)
}

/// The assistant turn carrying `text` as a prefill in `dialect`.
fn prefill_turn(dialect: Dialect, text: &str) -> Value {
    match dialect {
        Dialect::Messages => json!({"role": "assistant", "content": text}),
        Dialect::Chat => json!({"role": "assistant", "content": text, "prefix": true}),
        Dialect::Gemini => json!({"role": "model", "parts": [{"text": text}]}),
        Dialect::Responses => json!({"role": "assistant", "content": text}),
    }
}

/// What a client reads from a stream: its text deltas and whether the dialect's terminal came.
#[derive(Debug)]
struct Read {
    deltas: Vec<String>,
    terminal: bool,
}

impl Read {
    fn text(&self) -> String {
        self.deltas.concat()
    }
}

fn read_stream(dialect: Dialect, body: &str) -> Read {
    let mut read = Read {
        deltas: Vec::new(),
        terminal: false,
    };
    for ev in sse(body) {
        if ev.data == "[DONE]" {
            read.terminal = true;
            continue;
        }
        let j = ev.json();
        let text = match dialect {
            Dialect::Chat => j["choices"][0]["delta"]["content"].as_str(),
            Dialect::Responses => {
                read.terminal |= j["type"] == "response.completed";
                (j["type"] == "response.output_text.delta")
                    .then(|| j["delta"].as_str())
                    .flatten()
            }
            Dialect::Messages => {
                read.terminal |= j["type"] == "message_stop";
                (j["delta"]["type"] == "text_delta")
                    .then(|| j["delta"]["text"].as_str())
                    .flatten()
            }
            Dialect::Gemini => {
                let candidate = &j["candidates"][0];
                read.terminal |= candidate["finishReason"].is_string();
                candidate["content"]["parts"][0]["text"].as_str()
            }
        };
        if let Some(text) = text.filter(|t| !t.is_empty()) {
            read.deltas.push(text.to_owned());
        }
    }
    read
}

/// The text of a whole (non-streamed) answer.
fn whole_text(dialect: Dialect, b: &Value) -> String {
    match dialect {
        Dialect::Chat => b["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_owned(),
        Dialect::Messages => b["content"][0]["text"].as_str().unwrap().to_owned(),
        Dialect::Gemini => b["candidates"][0]["content"]["parts"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned(),
        Dialect::Responses => b["output"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned(),
    }
}

async fn stream(h: &Harness, dialect: Dialect, model: &str, turn: Option<Value>) -> Read {
    let (target, body) = request(dialect, model, true, turn);
    let resp = h.post(&target, &body).await;
    assert_eq!(resp.status(), 200, "{dialect} {model}");
    read_stream(dialect, &resp.text().await.unwrap())
}

#[tokio::test]
async fn a_cut_after_40_stream_ends_cleanly_after_its_40th_delta_in_every_dialect() {
    let h = Harness::start().await;
    let canonical = canonical();
    let check = |dialect| {
        let (h, canonical) = (&h, &canonical);
        async move {
            let read = stream(h, dialect, "sim-cut-after-40", None).await;
            assert_eq!(read.deltas.len(), 40, "{dialect}");
            assert!(!read.terminal, "no terminal, {dialect}");
            let full = stream(h, dialect, "sim-long", None).await;
            assert_eq!(read.deltas[..], full.deltas[..40], "{dialect}");
            assert!(canonical.starts_with(&read.text()), "{dialect}");
            assert!(full.terminal && full.text() == *canonical, "{dialect}");
        }
    };
    join_all(Dialect::ALL.map(check)).await;
}

#[tokio::test]
async fn a_stall_after_20_stream_sends_20_deltas_then_holds_the_connection_in_every_dialect() {
    let h = Harness::start().await;
    for dialect in Dialect::ALL {
        let (target, body) = request(dialect, "sim-stall-after-20", true, None);
        let mut resp = h.post(&target, &body).await;
        assert_eq!(resp.status(), 200);
        let mut received = String::new();
        // 20 deltas from 20 ms at 200 per second: all in by 115 ms.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while read_stream(dialect, &received).deltas.len() < 20 {
            let chunk = tokio::time::timeout_at(deadline, resp.chunk()).await;
            let chunk = chunk.unwrap().unwrap().unwrap();
            received.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        let more = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await;
        assert!(
            more.is_err(),
            "nothing after the 20th delta, {dialect}: {more:?}"
        );
        let read = read_stream(dialect, &received);
        assert_eq!((read.deltas.len(), read.terminal), (20, false), "{dialect}");
        assert!(canonical().starts_with(&read.text()), "{dialect}");
    }
}

#[tokio::test]
async fn a_prefill_is_continued_with_exactly_the_rest_in_messages_chat_and_gemini() {
    let h = Harness::start().await;
    let canonical = canonical();
    let check = |dialect: Dialect, prefill: &'static str, remaining: usize| {
        let (h, canonical) = (&h, &canonical);
        async move {
            let turn = Some(prefill_turn(dialect, prefill));
            let read = stream(h, dialect, "sim-long", turn.clone()).await;
            assert!(read.terminal, "{dialect}");
            assert_eq!(format!("{prefill}{}", read.text()), *canonical, "{dialect}");
            assert_eq!(read.deltas.len(), remaining, "{dialect} {prefill:?}");
            if prefill == MID_TOKEN {
                assert_eq!(
                    read.deltas[0], "ort",
                    "the rest of the cut token, {dialect}"
                );
            }

            let (target, body) = request(dialect, "sim-long", false, turn);
            let resp = h.post(&target, &body).await;
            assert_eq!(resp.status(), 200);
            let b: Value = resp.json().await.unwrap();
            assert_eq!(format!("{prefill}{}", whole_text(dialect, &b)), *canonical);
        }
    };
    let mut checks = Vec::new();
    for dialect in [Dialect::Messages, Dialect::Chat, Dialect::Gemini] {
        // 60 tokens: the first prefill holds 5 whole ("Sure" "," " here" " is" " the") and part
        // of " short", the second 6 whole.
        for (prefill, remaining) in [(MID_TOKEN, 55), ("Sure, here is the short", 54)] {
            checks.push(check(dialect, prefill, remaining));
        }
    }
    join_all(checks).await;
}

#[tokio::test]
async fn a_messages_prefill_in_text_blocks_is_continued() {
    let h = Harness::start().await;
    let turn = json!({"role": "assistant", "content": [
        {"type": "text", "text": "Sure, here"},
        {"type": "text", "text": " is the sh"},
    ]});
    let read = stream(&h, Dialect::Messages, "sim-long", Some(turn)).await;
    assert_eq!(format!("{MID_TOKEN}{}", read.text()), canonical());
}

#[tokio::test]
async fn a_continuation_of_a_cut_preset_is_cut_after_its_own_40th_delta() {
    let h = Harness::start().await;
    let canonical = canonical();
    let turn = Some(prefill_turn(Dialect::Messages, MID_TOKEN));
    let read = stream(&h, Dialect::Messages, "sim-cut-after-40", turn).await;
    assert_eq!((read.deltas.len(), read.terminal), (40, false));
    assert!(canonical.starts_with(&format!("{MID_TOKEN}{}", read.text())));
}

#[tokio::test]
async fn a_trailing_assistant_turn_that_is_no_prefill_gets_the_whole_answer() {
    let h = Harness::start().await;
    let canonical = canonical();
    // Chat without `prefix: true`: an ordinary earlier turn.
    let chat = json!({"role": "assistant", "content": MID_TOKEN});
    let read = stream(&h, Dialect::Chat, "sim-long", Some(chat)).await;
    assert_eq!((read.text(), read.deltas.len()), (canonical.clone(), 60));
    // Responses has no prefill at all.
    let turn = Some(prefill_turn(Dialect::Responses, MID_TOKEN));
    let read = stream(&h, Dialect::Responses, "sim-long", turn).await;
    assert_eq!(read.text(), canonical);
    // A prefill the answer does not start with is ignored, as by a model that does not follow it.
    for dialect in [Dialect::Messages, Dialect::Chat, Dialect::Gemini] {
        let turn = Some(prefill_turn(dialect, "Certainly"));
        let read = stream(&h, dialect, "sim-long", turn).await;
        assert_eq!(read.text(), canonical, "{dialect}");
    }
}

#[tokio::test]
async fn a_refused_prefill_is_a_400_in_each_providers_shape() {
    let h = Harness::start().await;
    let message = "This model does not support assistant message prefill. The conversation must \
                   end with a user message.";
    for dialect in [Dialect::Messages, Dialect::Chat, Dialect::Gemini] {
        for stream_it in [true, false] {
            let turn = Some(prefill_turn(dialect, MID_TOKEN));
            let (target, body) = request(dialect, "sim-prefill-refused", stream_it, turn);
            let resp = h.post(&target, &body).await;
            assert_eq!(resp.status(), 400, "{dialect}");
            let b: Value = resp.json().await.unwrap();
            match dialect {
                Dialect::Messages => {
                    assert_eq!(b["type"], "error");
                    assert_eq!(b["error"]["type"], "invalid_request_error");
                }
                Dialect::Chat => {
                    assert_eq!(b["error"]["type"], "invalid_request_error");
                    assert!(b["error"]["code"].is_null(), "{b}");
                }
                Dialect::Gemini => {
                    assert_eq!(b["error"]["code"], 400);
                    assert_eq!(b["error"]["status"], "INVALID_ARGUMENT");
                }
                Dialect::Responses => unreachable!(),
            }
            assert_eq!(b["error"]["message"], message, "{dialect}");
        }
        // Without a prefill the same model answers as usual.
        let read = stream(&h, dialect, "sim-prefill-refused", None).await;
        assert_eq!(read.text(), canonical(), "{dialect}");
    }
    // A Chat assistant turn without `prefix` is no prefill, so it is not refused.
    let chat = json!({"role": "assistant", "content": MID_TOKEN});
    let read = stream(&h, Dialect::Chat, "sim-prefill-refused", Some(chat)).await;
    assert!(read.terminal);
}
