//! `POST /v1/audio/transcriptions` and `/v1/audio/translations`: a `multipart/form-data`
//! upload (`file`, `model`, `response_format`, `language`, …) read as it arrives; the audio is
//! counted, not kept (at most [`MAX_AUDIO`] bytes, OpenAI's 25 MB, else 413).
//!
//! The transcript is made from what arrived: `The sim heard {bytes} bytes of {filename}.`
//! (`The sim translated …` for a translation, always in English),
//! lasting one second per 16 000 bytes. `json` (default) is `{"text", "usage"}` (usage in
//! seconds for `whisper-*` models, in tokens otherwise: audio tokens one per 1 000 bytes, the
//! text's by [`crate::tokens`]); `text`, `srt` and `vtt` are text; `verbose_json` adds the task,
//! language, duration and one segment. No `file` or no `model` is a 400.

use bytes::Bytes;
use futures_util::Stream;
use http::{Response, StatusCode};

use crate::json::{arr, obj, J};
use crate::multipart::{self, Form, Sink};
use crate::reply::{self, Body};
use crate::tokens;
use crate::wire::ApiError;

use super::{invalid, missing, Ctx};

/// OpenAI's limit on the audio file.
pub(crate) const MAX_AUDIO: u64 = 25 * 1024 * 1024;
/// Bytes of audio per second of speech, as the sim pretends.
const BYTES_PER_SECOND: f64 = 16_000.0;

/// What is asked of the audio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Task {
    Transcribe,
    Translate,
}

/// The answer's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json,
    Text,
    Srt,
    VerboseJson,
    Vtt,
}

impl Format {
    fn parse(name: &str) -> Option<Format> {
        Some(match name {
            "json" => Format::Json,
            "text" => Format::Text,
            "srt" => Format::Srt,
            "verbose_json" => Format::VerboseJson,
            "vtt" => Format::Vtt,
            _ => return None,
        })
    }
}

/// The answer, and the model the form named (for the log).
pub(super) async fn serve<S, E>(
    ctx: &Ctx<'_>,
    body: S,
    task: Task,
) -> (Option<String>, Result<Response<Body>, ApiError>)
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let content_type = ctx
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    let sink = Sink::Count { limit: MAX_AUDIO };
    let form = match multipart::read(content_type, body, sink).await {
        Ok((form, _)) => form,
        Err(e) => return (None, Err(e.api_error("The audio file"))),
    };
    let model = form.field("model").map(str::to_owned);
    (model, transcribe(ctx, &form, task))
}

fn transcribe(ctx: &Ctx<'_>, form: &Form, task: Task) -> Result<Response<Body>, ApiError> {
    let file = form.file.as_ref().ok_or_else(|| missing("file"))?;
    let model = form
        .field("model")
        .or(ctx.deployment)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| missing("model"))?;
    let format = match form.field("response_format") {
        None => Format::Json,
        Some(name) => Format::parse(name).ok_or_else(|| {
            invalid(
                "response_format",
                format!(
                    "Invalid value: '{name}'. Supported values are: 'json', 'text', 'srt', \
                     'verbose_json', and 'vtt'."
                ),
            )
        })?,
    };
    let verb = match task {
        Task::Transcribe => "heard",
        Task::Translate => "translated",
    };
    let text = format!("The sim {verb} {} bytes of {}.", file.bytes, file.filename);
    let seconds = file.bytes as f64 / BYTES_PER_SECOND;
    let usage = usage(model, file.bytes, form.field("prompt"), &text, seconds);
    let plain = |body: String| {
        reply::bytes(
            StatusCode::OK,
            "text/plain; charset=utf-8",
            Bytes::from(body),
        )
    };
    Ok(match format {
        Format::Json => reply::ok(obj! {"text": text.as_str(), "usage": usage}.encode()),
        Format::Text => plain(format!("{text}\n")),
        Format::Srt => plain(format!(
            "1\n00:00:00,000 --> {}\n{text}\n\n",
            stamp(seconds, ',')
        )),
        Format::Vtt => plain(format!(
            "WEBVTT\n\n00:00:00.000 --> {}\n{text}\n\n",
            stamp(seconds, '.')
        )),
        Format::VerboseJson => {
            let (name, language) = match task {
                Task::Transcribe => ("transcribe", form.field("language").unwrap_or("english")),
                Task::Translate => ("translate", "english"),
            };
            reply::ok(verbose(name, &text, language, seconds, usage).encode())
        }
    })
}

/// Seconds of audio for `whisper-*` models, tokens for the others.
fn usage(model: &str, bytes: u64, prompt: Option<&str>, text: &str, seconds: f64) -> J {
    if model.starts_with("whisper") {
        return obj! {"type": "duration", "seconds": seconds.ceil() as u64};
    }
    let audio = bytes.div_ceil(1000);
    let prompt = prompt.map_or(0, tokens::of_text);
    let output = tokens::of_text(text);
    obj! {
        "type": "tokens",
        "input_tokens": audio + prompt,
        "input_token_details": obj! {"text_tokens": prompt, "audio_tokens": audio},
        "output_tokens": output,
        "total_tokens": audio + prompt + output,
    }
}

/// `verbose_json`: the transcript as one segment.
fn verbose(task: &str, text: &str, language: &str, seconds: f64, usage: J) -> J {
    let segment = obj! {
        "id": 0u32, "seek": 0u32, "start": 0.0, "end": seconds,
        "text": format!(" {text}"), "tokens": arr![], "temperature": 0.0,
        "avg_logprob": -0.2, "compression_ratio": 1.0, "no_speech_prob": 0.0,
    };
    obj! {
        "task": task,
        "language": language,
        "duration": seconds,
        "text": text,
        "segments": J::Arr(vec![segment]),
        "usage": usage,
    }
}

/// `HH:MM:SS{sep}mmm`.
fn stamp(seconds: f64, sep: char) -> String {
    let ms = (seconds * 1000.0).round() as u64;
    let (h, m, s, ms) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    format!("{h:02}:{m:02}:{s:02}{sep}{ms:03}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_subtitle_shaped() {
        assert_eq!(stamp(0.5, ','), "00:00:00,500");
        assert_eq!(stamp(3725.25, '.'), "01:02:05.250");
    }
}
