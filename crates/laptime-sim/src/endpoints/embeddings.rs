//! Embeddings: OpenAI's `POST /v1/embeddings` and Gemini's `:embedContent` and
//! `:batchEmbedContents`, each input answered with its deterministic unit vector
//! ([`crate::vectors`]).
//!
//! OpenAI: `input` is a string, an array of strings, an array of token ids or an array of such
//! arrays (at most [`MAX_INPUTS`]); an empty string, an empty array or a mixed array is OpenAI's
//! 400 "'$.input' is invalid". `dimensions` defaults to 3072 for a `*-3-large` model, else 1536,
//! and may be 1 to [`MAX_DIMENSIONS`]. `usage.prompt_tokens` follows [`crate::tokens`] (a token
//! id counts one). Gemini: `outputDimensionality` defaults to 3072 for a `gemini-embedding*`
//! model, else 768. Every answer holds at most [`MAX_FLOATS`] numbers.

use serde_json::{Map, Value};

use crate::json::{obj, J};
use crate::tokens;
use crate::vectors::{base64_f32, unit_vector};
use crate::wire::ApiError;

use super::{invalid, model, object, Ctx};

pub(crate) const MAX_DIMENSIONS: u64 = 8192;
/// OpenAI's limit on the inputs of one request.
const MAX_INPUTS: usize = 2048;
/// Gemini's limit on the requests of one batch.
const MAX_GEMINI_BATCH: usize = 100;
/// The most numbers one answer holds (inputs × dimensions), so an answer stays a few tens of MB.
const MAX_FLOATS: usize = 4 * 1024 * 1024;

/// One input to embed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    Text(String),
    Tokens(Vec<i64>),
}

impl Input {
    fn seed(&self) -> Vec<u8> {
        match self {
            Input::Text(text) => text.as_bytes().to_vec(),
            Input::Tokens(ids) => {
                let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
                format!("tokens:{}", ids.join(",")).into_bytes()
            }
        }
    }

    fn tokens(&self) -> u64 {
        match self {
            Input::Text(text) => tokens::of_text(text),
            Input::Tokens(ids) => ids.len() as u64,
        }
    }
}

fn input_invalid() -> ApiError {
    ApiError::invalid_request(
        "'$.input' is invalid. Please check the API reference: \
         https://platform.openai.com/docs/api-reference."
            .to_owned(),
    )
}

/// The inputs of an OpenAI `input`.
pub(crate) fn inputs(input: Option<&Value>) -> Result<Vec<Input>, ApiError> {
    let token = |v: &Value| v.as_i64().filter(|n| *n >= 0);
    let tokens = |items: &[Value]| -> Option<Vec<i64>> {
        let ids: Option<Vec<i64>> = items.iter().map(token).collect();
        ids.filter(|ids| !ids.is_empty())
    };
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let parsed = match input {
        Some(Value::String(s)) if !s.is_empty() => Some(vec![Input::Text(s.clone())]),
        Some(Value::Array(items)) if !items.is_empty() => match &items[0] {
            Value::String(_) => items.iter().map(|v| text(v).map(Input::Text)).collect(),
            Value::Number(_) => tokens(items).map(|ids| vec![Input::Tokens(ids)]),
            Value::Array(_) => items
                .iter()
                .map(|v| v.as_array().and_then(|a| tokens(a)).map(Input::Tokens))
                .collect(),
            _ => None,
        },
        _ => None,
    };
    let parsed = parsed.ok_or_else(input_invalid)?;
    if parsed.len() > MAX_INPUTS {
        return Err(invalid(
            "input",
            format!("'$.input' is invalid: at most {MAX_INPUTS} inputs are allowed per request."),
        ));
    }
    Ok(parsed)
}

/// The vectors of `inputs`, refused when the answer would be larger than the sim allows.
fn vectors(inputs: &[Input], dims: usize) -> Result<Vec<Vec<f32>>, ApiError> {
    if inputs.len().saturating_mul(dims) > MAX_FLOATS {
        return Err(ApiError::invalid_request(format!(
            "laptime-sim answers at most {MAX_FLOATS} embedding values per request \
             ({} inputs of {dims} dimensions asked).",
            inputs.len()
        )));
    }
    Ok(inputs
        .iter()
        .map(|i| unit_vector(&i.seed(), dims))
        .collect())
}

/// `dimensions` (or Gemini's `outputDimensionality`), if given, checked.
fn dimensions(body: &Map<String, Value>, key: &'static str) -> Result<Option<usize>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|d| (1..=MAX_DIMENSIONS).contains(d))
            .and_then(|d| usize::try_from(d).ok())
            .map(Some)
            .ok_or_else(|| {
                invalid(
                    key,
                    format!(
                        "Invalid value for '{key}': expected an integer between 1 and \
                         {MAX_DIMENSIONS}, got {v}."
                    ),
                )
            }),
    }
}

/// How OpenAI encodes the vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Float,
    Base64,
}

/// `POST /v1/embeddings`.
pub(super) fn openai(ctx: &Ctx<'_>, body: &[u8]) -> Result<String, ApiError> {
    let body = object(body)?;
    let model = model(&body, ctx)?;
    answer(&body, &model)
}

/// The embeddings answer to a request body (also a batch line's).
pub(crate) fn answer(body: &Map<String, Value>, model: &str) -> Result<String, ApiError> {
    let inputs = inputs(body.get("input"))?;
    let encoding = match body.get("encoding_format") {
        None | Some(Value::Null) => Encoding::Float,
        Some(Value::String(s)) if s == "float" => Encoding::Float,
        Some(Value::String(s)) if s == "base64" => Encoding::Base64,
        Some(other) => {
            return Err(invalid(
                "encoding_format",
                format!(
                "Invalid value for 'encoding_format': expected 'float' or 'base64', got {other}."
            ),
            ))
        }
    };
    let dims = dimensions(body, "dimensions")?.unwrap_or(if model.contains("3-large") {
        3072
    } else {
        1536
    });
    let data: Vec<J> = vectors(&inputs, dims)?
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = match encoding {
                Encoding::Float => J::Arr(v.iter().map(|x| J::from(*x)).collect()),
                Encoding::Base64 => J::from(base64_f32(v)),
            };
            obj! {"object": "embedding", "index": index, "embedding": embedding}
        })
        .collect();
    let prompt_tokens = inputs
        .iter()
        .map(Input::tokens)
        .fold(0, u64::saturating_add);
    Ok(obj! {
        "object": "list",
        "data": data,
        "model": model,
        "usage": obj! {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    .encode())
}

// === Gemini ===

/// The text of a Gemini `content` (its parts' texts, joined).
fn gemini_text(content: Option<&Value>) -> Result<String, ApiError> {
    let parts = content
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .ok_or_else(|| {
            ApiError::invalid_request(
                "* EmbedContentRequest.content: contents is not specified".to_owned(),
            )
        })?;
    let text: String = parts
        .iter()
        .filter_map(|p| p.get("text").and_then(Value::as_str))
        .collect();
    if text.is_empty() {
        return Err(ApiError::invalid_request(
            "* EmbedContentRequest.content: contents must not be empty".to_owned(),
        ));
    }
    Ok(text)
}

fn gemini_dims(model: &str, request: &Map<String, Value>) -> Result<usize, ApiError> {
    let default = if model.contains("gemini-embedding") {
        3072
    } else {
        768
    };
    Ok(dimensions(request, "outputDimensionality")?.unwrap_or(default))
}

fn gemini_values(v: &[f32]) -> J {
    obj! {"values": J::Arr(v.iter().map(|x| J::from(*x)).collect())}
}

/// `POST /v1beta/models/{model}:embedContent`.
pub(super) fn gemini_one(model: &str, body: &[u8]) -> Result<String, ApiError> {
    let body = object(body)?;
    let text = gemini_text(body.get("content"))?;
    let dims = gemini_dims(model, &body)?;
    let v = vectors(&[Input::Text(text)], dims)?;
    let values = v.first().map(|v| gemini_values(v)).unwrap_or(J::Null);
    Ok(obj! {"embedding": values}.encode_pretty())
}

/// `POST /v1beta/models/{model}:batchEmbedContents`.
pub(super) fn gemini_batch(model: &str, body: &[u8]) -> Result<String, ApiError> {
    let body = object(body)?;
    let requests = body
        .get("requests")
        .and_then(Value::as_array)
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            ApiError::invalid_request(
                "* BatchEmbedContentsRequest.requests: requests is not specified".to_owned(),
            )
        })?;
    if requests.len() > MAX_GEMINI_BATCH {
        return Err(ApiError::invalid_request(format!(
            "* BatchEmbedContentsRequest.requests: at most {MAX_GEMINI_BATCH} requests are allowed in a batch"
        )));
    }
    let mut total = 0usize;
    let mut embeddings = Vec::with_capacity(requests.len());
    for request in requests {
        let request = request.as_object().cloned().unwrap_or_default();
        let text = gemini_text(request.get("content"))?;
        let dims = gemini_dims(model, &request)?;
        total = total.saturating_add(dims);
        if total > MAX_FLOATS {
            return Err(ApiError::invalid_request(format!(
                "laptime-sim answers at most {MAX_FLOATS} embedding values per request"
            )));
        }
        embeddings.push(gemini_values(&unit_vector(text.as_bytes(), dims)));
    }
    Ok(obj! {"embeddings": J::Arr(embeddings)}.encode_pretty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_input_shape_is_read_and_bad_ones_are_openais_400() {
        let ok = |v: Value| inputs(Some(&v)).unwrap();
        assert_eq!(ok(json!("hi")), vec![Input::Text("hi".into())]);
        assert_eq!(ok(json!(["a", "b"])).len(), 2);
        assert_eq!(ok(json!([1, 2, 3])), vec![Input::Tokens(vec![1, 2, 3])]);
        assert_eq!(
            ok(json!([[1], [2, 3]])),
            vec![Input::Tokens(vec![1]), Input::Tokens(vec![2, 3])]
        );
        for bad in [
            json!(""),
            json!([]),
            json!([""]),
            json!(["a", 1]),
            json!([[]]),
            json!({"a": 1}),
            json!([-1]),
        ] {
            let e = inputs(Some(&bad)).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert!(e.message.starts_with("'$.input' is invalid"), "{bad}");
        }
        assert!(inputs(None).is_err());
    }

    #[test]
    fn the_answer_has_one_unit_vector_per_input_and_counts_tokens() {
        let body = json!({"input": ["abcdefgh", "x"], "dimensions": 4});
        let out: Value =
            serde_json::from_str(&answer(body.as_object().unwrap(), "m").unwrap()).unwrap();
        assert_eq!(out["object"], "list");
        assert_eq!(out["model"], "m");
        assert_eq!(out["data"][1]["index"], 1);
        assert_eq!(out["data"][0]["embedding"].as_array().unwrap().len(), 4);
        assert_eq!(out["usage"], json!({"prompt_tokens": 3, "total_tokens": 3}));
    }

    #[test]
    fn dimensions_are_bounded() {
        for d in [json!(0), json!(8193), json!("8")] {
            let body = json!({"input": "x", "dimensions": d});
            let e = answer(body.as_object().unwrap(), "m").unwrap_err();
            assert_eq!(e.openai_param, Some("dimensions"));
        }
        let body = json!({"input": vec!["x"; 2048], "dimensions": 8192});
        assert_eq!(
            answer(body.as_object().unwrap(), "m").unwrap_err().status,
            400
        );
    }
}
