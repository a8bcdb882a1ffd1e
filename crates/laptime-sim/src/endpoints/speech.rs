//! `POST /v1/audio/speech`: audio streamed as it is "spoken", in several body frames over
//! time with no Content-Length, so a gateway's first byte and binary streaming can be tested.
//!
//! The answer has `⌈input bytes / 16⌉` frames (at least 2, at most 256) of [`FRAME_BYTES`]
//! bytes each: the first at the head, then one every 20 ms. Each format's bytes start as its
//! files do (an MPEG frame sync for mp3, `OggS`, an ADTS sync, `fLaC`, a RIFF/WAVE header; pcm
//! is raw) and are otherwise a fixed pattern, so the same request gets the same bytes. The
//! `content-type` follows `response_format` (default mp3, `audio/mpeg`). With
//! `stream_format: "sse"` the frames are `speech.audio.delta` events (base64 audio) and a
//! `speech.audio.done` event with usage. A top-level `"laptime_sim": {"headers_ms", "frame_ms"}`
//! moves the head and spaces the frames.

use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::json::obj;
use crate::script::{Finish, Schedule, Step, SSE};
use crate::tokens;
use crate::vectors::base64;
use crate::wire::ApiError;

use super::{invalid, missing, model, object, Ctx};

pub(crate) const FRAME_BYTES: usize = 1024;
const MAX_INPUT_CHARS: usize = 4096;
const MAX_FRAMES: usize = 256;
const MAX_FRAME_MS: u64 = 10_000;

/// The scriptable timing of a speech answer.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct SpeechScript {
    headers_ms: u64,
    frame_ms: u64,
}

impl Default for SpeechScript {
    fn default() -> Self {
        SpeechScript {
            headers_ms: 0,
            frame_ms: 20,
        }
    }
}

/// An audio format OpenAI's speech endpoint answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Mp3,
    Opus,
    Aac,
    Flac,
    Wav,
    Pcm,
}

impl Format {
    const ALL: [Format; 6] = [
        Format::Mp3,
        Format::Opus,
        Format::Aac,
        Format::Flac,
        Format::Wav,
        Format::Pcm,
    ];

    fn name(self) -> &'static str {
        match self {
            Format::Mp3 => "mp3",
            Format::Opus => "opus",
            Format::Aac => "aac",
            Format::Flac => "flac",
            Format::Wav => "wav",
            Format::Pcm => "pcm",
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Format::Mp3 => "audio/mpeg",
            Format::Opus => "audio/opus",
            Format::Aac => "audio/aac",
            Format::Flac => "audio/flac",
            Format::Wav => "audio/wav",
            Format::Pcm => "audio/pcm",
        }
    }

    /// What frame `i` starts with.
    fn header(self, i: usize) -> &'static [u8] {
        match (self, i) {
            (Format::Mp3, _) => &[0xff, 0xf3, 0x44, 0xc4],
            (Format::Aac, _) => &[0xff, 0xf1, 0x50, 0x80],
            (Format::Opus, 0) => b"OggS",
            (Format::Flac, 0) => b"fLaC",
            (Format::Wav, 0) => b"RIFF\xff\xff\xff\xffWAVEfmt ",
            _ => &[],
        }
    }
}

/// The audio frames of `input` in `format`.
pub(crate) fn frames(format: Format, input: &str) -> Vec<Bytes> {
    let n = input.len().div_ceil(16).clamp(2, MAX_FRAMES);
    (0..n)
        .map(|i| {
            let mut frame = Vec::with_capacity(FRAME_BYTES);
            frame.extend_from_slice(format.header(i));
            let fill = (frame.len()..FRAME_BYTES).map(|j| ((i * 31 + j * 7) & 0xff) as u8);
            frame.extend(fill);
            Bytes::from(frame)
        })
        .collect()
}

pub(super) fn serve(ctx: &Ctx<'_>, body: &[u8]) -> Result<Schedule, ApiError> {
    let body = object(body)?;
    model(&body, ctx)?;
    let input = body
        .get("input")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("input"))?;
    let chars = input.chars().count();
    if chars > MAX_INPUT_CHARS {
        return Err(invalid(
            "input",
            format!(
                "Invalid 'input': string too long. Expected a string with maximum length \
                 {MAX_INPUT_CHARS}, but got a string with length {chars} instead."
            ),
        )
        .code("string_above_max_length"));
    }
    if !body
        .get("voice")
        .is_some_and(|v| v.is_string() || v.is_object())
    {
        return Err(missing("voice"));
    }
    let format = match body.get("response_format").and_then(Value::as_str) {
        None => Format::Mp3,
        Some(name) => Format::ALL
            .into_iter()
            .find(|f| f.name() == name)
            .ok_or_else(|| {
                invalid(
                    "response_format",
                    format!(
                        "Invalid value: '{name}'. Supported values are: 'mp3', 'opus', 'aac', \
                         'flac', 'wav', and 'pcm'."
                    ),
                )
            })?,
    };
    let script = match body.get("laptime_sim") {
        Some(v) => SpeechScript::deserialize(v)
            .map_err(|e| ApiError::invalid_request(format!("Invalid laptime_sim script: {e}")))?,
        None => SpeechScript::default(),
    };
    let sse = body.get("stream_format").and_then(Value::as_str) == Some("sse");
    Ok(schedule(format, input, script, sse))
}

fn schedule(format: Format, input: &str, script: SpeechScript, sse: bool) -> Schedule {
    let head_at = Duration::from_millis(script.headers_ms);
    let gap = Duration::from_millis(script.frame_ms.min(MAX_FRAME_MS));
    let frames = frames(format, input);
    let at = |i: usize| head_at + gap * u32::try_from(i).unwrap_or(u32::MAX);
    let mut steps: Vec<Step> = frames
        .iter()
        .enumerate()
        .map(|(i, frame)| Step {
            at: at(i),
            bytes: if sse {
                let event = obj! {"type": "speech.audio.delta", "audio": base64(frame)};
                Bytes::from(format!("data: {}\n\n", event.encode()))
            } else {
                frame.clone()
            },
        })
        .collect();
    if sse {
        let input_tokens = tokens::of_text(input);
        let output_tokens = (frames.len() * FRAME_BYTES / 64) as u64;
        let usage = obj! {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        };
        let done = obj! {"type": "speech.audio.done", "usage": usage};
        steps.push(Step {
            at: at(frames.len().saturating_sub(1)),
            bytes: Bytes::from(format!("data: {}\n\n", done.encode())),
        });
    }
    Schedule {
        status: 200,
        content_type: if sse { SSE } else { format.content_type() },
        head_at,
        steps,
        finish: Finish::Eof,
        retry_after_s: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_grow_with_the_input_and_start_as_the_format_does() {
        assert_eq!(frames(Format::Mp3, "hi").len(), 2);
        assert_eq!(frames(Format::Mp3, &"x".repeat(160)).len(), 10);
        assert_eq!(frames(Format::Mp3, &"x".repeat(10_000)).len(), MAX_FRAMES);
        let wav = frames(Format::Wav, "hello there");
        assert!(wav[0].starts_with(b"RIFF"));
        assert!(wav.iter().all(|f| f.len() == FRAME_BYTES));
        assert!(frames(Format::Mp3, "x")
            .iter()
            .all(|f| f.starts_with(&[0xff, 0xf3])));
        assert_eq!(frames(Format::Flac, "abc"), frames(Format::Flac, "abc"));
    }

    #[test]
    fn frames_are_spaced_by_the_script_and_sse_ends_with_done() {
        let script = SpeechScript {
            headers_ms: 5,
            frame_ms: 20,
        };
        let s = schedule(Format::Pcm, &"y".repeat(48), script, false);
        let at: Vec<u64> = s.steps.iter().map(|st| st.at.as_millis() as u64).collect();
        assert_eq!(at, [5, 25, 45]);
        assert_eq!(s.content_type, "audio/pcm");
        let s = schedule(Format::Mp3, "hi", script, true);
        assert_eq!(s.content_type, SSE);
        let last = std::str::from_utf8(&s.steps.last().unwrap().bytes).unwrap();
        assert!(last.starts_with("data: {\"type\":\"speech.audio.done\""));
    }
}
