//! Which script answers a request, and its answer decided but not yet played: the request's
//! own `laptime_sim` object, else the preset its model names.

use laptime_core::Dialect;
use serde::Deserialize;
use serde_json::Value;

use crate::echo;
use crate::prefill;
use crate::script::{self, preset, Answer, Request, ResponseMeta, Script};
use crate::wire::ApiError;

/// The model name used when a request scripts its answer and names no model.
pub(crate) const SCRIPTED_MODEL: &str = "laptime-sim";

/// A request's answer, decided but not yet played, and the model it named (for the log).
pub(crate) struct Planned {
    pub(crate) model: Option<String>,
    pub(crate) answer: Result<Answer, ApiError>,
}

/// A Gemini call as its path named it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GeminiCall<'a> {
    pub(crate) model: &'a str,
    pub(crate) stream: bool,
    /// The query had `alt=sse` (without it Gemini streams a JSON array, which the fake does not).
    pub(crate) sse: bool,
}

/// What the request's path and the sim's stores add to its body.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Call<'a> {
    pub(crate) gemini: Option<GeminiCall<'a>>,
    /// An Azure deployment: the model unless the body names a preset (Azure ignores the
    /// body's model; a body naming a preset still picks its script, as a test may want).
    pub(crate) default_model: Option<&'a str>,
    /// A Responses answer's identity (the default one when `None`).
    pub(crate) response: Option<&'a ResponseMeta>,
    /// The size of the request body as it arrived: the input a script without its own
    /// `input_tokens` reports. [`plan`] sets it; a body already parsed says it here.
    pub(crate) body_bytes: usize,
}

/// The request body as JSON, or OpenAI's words for one that is not.
pub(crate) fn parse(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid_request(format!(
            "We could not parse the JSON body of your request: {e}"
        ))
    })
}

/// [`plan_value`] of a body still in bytes.
pub(crate) fn plan(dialect: Dialect, body: &[u8], call: &Call<'_>) -> Planned {
    if let Some(refused) = refuse_gemini_array(call) {
        return refused;
    }
    match parse(body) {
        Ok(value) => plan_value(
            dialect,
            &value,
            &Call {
                body_bytes: body.len(),
                ..*call
            },
        ),
        Err(error) => Planned {
            model: None,
            answer: Err(error),
        },
    }
}

/// Gemini without `alt=sse` streams one JSON array, which the fake does not.
fn refuse_gemini_array(call: &Call<'_>) -> Option<Planned> {
    let gemini = call.gemini.filter(|c| c.stream && !c.sse)?;
    let message = format!(
        "streamGenerateContent is served as server-sent events only: call \
         /v1beta/models/{}:streamGenerateContent?alt=sse",
        gemini.model
    );
    Some(Planned {
        model: Some(gemini.model.to_owned()),
        answer: Err(ApiError::invalid_request(message)),
    })
}

/// Picks the script for a request body: its own `laptime_sim` object, else the preset named by
/// `model` (the body's, or for Gemini the path's), and schedules it.
pub(crate) fn plan_value(dialect: Dialect, value: &Value, call: &Call<'_>) -> Planned {
    if let Some(refused) = refuse_gemini_array(call) {
        return refused;
    }
    let model = match &call.gemini {
        Some(gemini) => Some(gemini.model.to_owned()),
        None => {
            let named = value.get("model").and_then(Value::as_str);
            match call.default_model {
                Some(deployment) if named.and_then(preset).is_none() => Some(deployment),
                _ => named,
            }
            .map(str::to_owned)
        }
    };
    let answer = choose(value, model.as_deref()).map(|mut script| {
        if script.echo {
            script.text = Some(echo::summary(dialect, value));
        }
        let stream = call.gemini.as_ref().map_or_else(
            || {
                value
                    .get("stream")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
            },
            |gemini| gemini.stream,
        );
        let include_usage = value
            .pointer("/stream_options/include_usage")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let prefill = prefill::read(dialect, value);
        let default_meta = ResponseMeta::default();
        let request = Request {
            model: model.as_deref().unwrap_or(SCRIPTED_MODEL),
            stream,
            include_usage,
            prefill: prefill.as_deref(),
            response: call.response.unwrap_or(&default_meta),
            body_bytes: call.body_bytes,
        };
        script::answer(dialect, &script, &request)
    });
    Planned { model, answer }
}

/// The request's own script if it has one (the model name is then free), else the preset its
/// model names.
pub(crate) fn choose(value: &Value, model: Option<&str>) -> Result<Script, ApiError> {
    if !value.is_object() {
        let message = "The request body must be a JSON object.".to_owned();
        return Err(ApiError::invalid_request(message));
    }
    if let Some(custom) = value.get("laptime_sim") {
        let script = Script::deserialize(custom)
            .map_err(|e| ApiError::invalid_request(format!("Invalid laptime_sim script: {e}")))?;
        script.validate().map_err(ApiError::invalid_request)?;
        return Ok(script);
    }
    match model {
        Some(name) => preset(name).ok_or_else(|| ApiError::model_not_found(name)),
        None => Err(ApiError::invalid_request(
            "you must provide a model parameter".to_owned(),
        )),
    }
}
