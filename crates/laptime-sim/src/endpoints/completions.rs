//! OpenAI's legacy `POST /v1/completions` (what OpenAI-compatible servers and Azure
//! deployments still serve): the script's text, streamed as `text_completion` chunks and
//! `data: [DONE]`, or whole.
//!
//! The script is picked as for the chat dialects (a `laptime_sim` object, else the preset the
//! model names) and its text deltas play at their scripted instants; reasoning and tool calls
//! have no place here and are left out. A token-limit end is `finish_reason: "length"`, any
//! other complete answer `"stop"`; `stream_options.include_usage` adds the usage chunk. A
//! scripted status is OpenAI's error for it; a close, reset or stall cuts the stream after the
//! last delta (the body in half, not streamed).

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use crate::json::{obj, J};
use crate::plan::{choose, SCRIPTED_MODEL};
use crate::script::{Deltas, End, Finish, Schedule, Script, Step, Timeline, Usage, JSON, SSE};
use crate::wire::{ApiError, CREATED};

use super::{missing, object, Ctx};

const ID: &str = "cmpl-laptimesim0001";

pub(super) fn serve(ctx: &Ctx<'_>, body: &[u8]) -> Result<Schedule, ApiError> {
    let value = Value::Object(object(body)?);
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .or(ctx.deployment);
    let script = choose(&value, model)?;
    if !value
        .get("prompt")
        .is_some_and(|p| p.is_string() || p.is_array())
    {
        return Err(missing("prompt"));
    }
    let stream = value.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = value.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    let model = model.unwrap_or(SCRIPTED_MODEL);
    Ok(schedule(
        &script,
        model,
        (stream, include_usage),
        body.len(),
    ))
}

/// The whole non-streamed answer to a request (a batch line's), with its status.
pub(crate) fn whole(value: &Value) -> Result<(u16, String), ApiError> {
    let model = value.get("model").and_then(Value::as_str);
    let script = choose(value, model)?;
    let body_bytes = value.to_string().len();
    let s = schedule(
        &script,
        model.unwrap_or(SCRIPTED_MODEL),
        (false, false),
        body_bytes,
    );
    let body: Vec<u8> = s.steps.iter().flat_map(|st| st.bytes.to_vec()).collect();
    Ok((s.status, String::from_utf8_lossy(&body).into_owned()))
}

/// `body_bytes`: the request body's size, the input when the script does not pin it.
fn schedule(
    script: &Script,
    model: &str,
    (stream, include_usage): (bool, bool),
    body_bytes: usize,
) -> Schedule {
    let play = Play::new(script, model, body_bytes);
    match (script.end, stream) {
        (End::Status, _) => play.whole(script.status, play.timeline.head, play.error()),
        (End::ErrorEvent, false) => play.whole(script.status, play.timeline.end, play.error()),
        (_, false) => {
            let choice = play.choice(play.deltas.joined(), J::from(play.reason()));
            let mut body = completion(model, choice)
                .with("usage", play.usage.clone())
                .encode();
            if !play.complete() {
                body.truncate(body.len() / 2);
            }
            Schedule {
                finish: play.finish(),
                ..play.whole(200, play.timeline.end, body)
            }
        }
        (_, true) => Schedule {
            status: 200,
            content_type: SSE,
            head_at: play.timeline.head,
            steps: play.stream(include_usage),
            finish: play.finish(),
            retry_after_s: script.retry_after_s,
        },
    }
}

/// One scripted completion: its text deltas, their instants and its usage.
struct Play<'a> {
    script: &'a Script,
    model: &'a str,
    deltas: Deltas,
    timeline: Timeline,
    usage: J,
}

impl<'a> Play<'a> {
    fn new(script: &'a Script, model: &'a str, body_bytes: usize) -> Play<'a> {
        let mut deltas = Deltas::of(script);
        if let Some(n) = script.cut_after {
            deltas.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        }
        let sent = u32::try_from(deltas.len()).unwrap_or(u32::MAX);
        let timeline = Timeline::new(script, sent);
        let u = Usage::resolve(script, &timeline, body_bytes);
        let usage = obj! {
            "prompt_tokens": u.input_total(),
            "completion_tokens": u.output,
            "total_tokens": u.total(),
        };
        Play {
            script,
            model,
            deltas,
            timeline,
            usage,
        }
    }

    /// The answer ends with its finish reason (not cut, not an error).
    fn complete(&self) -> bool {
        matches!(
            self.script.end,
            End::Terminal | End::Incomplete | End::Filtered
        )
    }

    fn reason(&self) -> &'static str {
        if self.script.end == End::Incomplete {
            "length"
        } else {
            "stop"
        }
    }

    fn finish(&self) -> Finish {
        match self.script.end {
            End::Reset => Finish::Reset,
            End::Stall => Finish::Stall,
            _ => Finish::Eof,
        }
    }

    /// The scripted error's body, in OpenAI's shape.
    fn error(&self) -> String {
        let e = match self.script.refusal {
            Some(r) => ApiError::refused(r, laptime_core::Dialect::Chat),
            None => ApiError::scripted(self.script.status),
        };
        obj! {"error": e.openai_object()}.encode()
    }

    fn whole(&self, status: u16, at: Duration, body: String) -> Schedule {
        Schedule {
            status,
            content_type: JSON,
            head_at: at,
            steps: vec![Step {
                at,
                bytes: Bytes::from(body),
            }],
            finish: Finish::Eof,
            retry_after_s: self.script.retry_after_s,
        }
    }

    fn choice(&self, text: &str, reason: J) -> J {
        obj! {"text": text, "index": 0u32, "logprobs": J::Null, "finish_reason": reason}
    }

    /// One chunk per delta at its instant, then at the end the finish chunk, the usage chunk
    /// and `[DONE]` (or the in-band error and `[DONE]`; nothing for a cut answer).
    fn stream(&self, include_usage: bool) -> Vec<Step> {
        let event = |j: &J| Bytes::from(format!("data: {}\n\n", j.encode()));
        let chunk =
            |text: &str, reason: J| event(&completion(self.model, self.choice(text, reason)));
        let mut steps: Vec<Step> = self
            .timeline
            .text
            .iter()
            .flat_map(|t| t.at.iter().enumerate())
            .map(|(i, at)| Step {
                at: *at,
                bytes: chunk(self.deltas.get(i), J::Null),
            })
            .collect();
        let end = self.timeline.end;
        let mut last = |bytes: Bytes| steps.push(Step { at: end, bytes });
        if self.complete() {
            last(chunk("", J::from(self.reason())));
            if include_usage {
                let usage_chunk = completion(self.model, J::Null).with("usage", self.usage.clone());
                last(event(&usage_chunk));
            }
        }
        let error = self.script.end == End::ErrorEvent;
        if error {
            last(Bytes::from(format!("data: {}\n\n", self.error())));
        }
        if self.complete() || error {
            last(Bytes::from_static(b"data: [DONE]\n\n"));
        }
        steps
    }
}

/// A `text_completion` object with one choice (`J::Null` for none yet).
fn completion(model: &str, choice: J) -> J {
    let choices = match choice {
        J::Null => J::Arr(Vec::new()),
        c => J::Arr(vec![c]),
    };
    obj! {
        "id": ID,
        "object": "text_completion",
        "created": CREATED,
        "model": model,
        "choices": choices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::preset;

    fn text_of(s: &Schedule) -> String {
        s.steps
            .iter()
            .map(|st| std::str::from_utf8(&st.bytes).unwrap().to_owned())
            .collect()
    }

    #[test]
    fn the_stream_is_the_scripts_text_then_the_finish_and_done() {
        let s = schedule(
            &preset("sim-max-tokens").unwrap(),
            "sim-max-tokens",
            (true, true),
            0,
        );
        let body = text_of(&s);
        let events: Vec<Value> = body
            .split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
            .map(|e| serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap())
            .collect();
        let text: String = events
            .iter()
            .filter_map(|e| e["choices"][0]["text"].as_str())
            .collect();
        assert_eq!(text, "Sure, here is the short answer:");
        assert_eq!(
            events[events.len() - 2]["choices"][0]["finish_reason"],
            "length"
        );
        assert_eq!(events.last().unwrap()["usage"]["completion_tokens"], 8);
        assert!(body.ends_with("data: [DONE]\n\n"));
        assert!(events.iter().all(|e| e["object"] == "text_completion"));
    }

    #[test]
    fn the_whole_answer_is_one_text_completion() {
        let (status, body) =
            whole(&serde_json::json!({"model": "sim-fast", "prompt": "x"})).unwrap();
        assert_eq!(status, 200);
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        // sim-fast pins no input: the body, a token per four bytes.
        let sent = serde_json::json!({"model": "sim-fast", "prompt": "x"}).to_string();
        assert_eq!(v["usage"]["prompt_tokens"], sent.len().div_ceil(4));
        let (status, _) =
            whole(&serde_json::json!({"model": "sim-rate-limited", "prompt": "x"})).unwrap();
        assert_eq!(status, 429);
    }
}
