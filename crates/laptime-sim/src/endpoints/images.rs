//! `POST /v1/images/generations`: `n` (1 to 10) copies of one tiny valid PNG.
//!
//! `gpt-image-*` models answer with `b64_json` always, plus `usage`, `background`,
//! `output_format`, `quality` and `size`, as OpenAI does for them; DALL·E models answer with
//! `url` (default) or `b64_json` as `response_format` asks, and `revised_prompt` for
//! `dall-e-3`. A `url` points at the sim itself (`GET /sim/image.png`, through the request's
//! `Host`). Usage tokens: the prompt by [`crate::tokens`], 272 output tokens per image.

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{Map, Value};

use crate::json::{obj, J};
use crate::reply::{self, Body};
use crate::tokens;
use crate::vectors::base64;
use crate::wire::ApiError;

use super::{invalid, missing, object, Ctx};

pub(super) const SIM_IMAGE_PATH: &str = "/sim/image.png";
const MAX_N: u64 = 10;
const OUTPUT_TOKENS_PER_IMAGE: u64 = 272;

/// A 1×1 RGBA PNG (one opaque blue pixel), 70 bytes, every chunk's CRC valid.
pub(crate) const PNG: [u8; 70] = [
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xd0, 0xae, 0xb9, 0xf9,
    0x1f, 0x00, 0x04, 0xd6, 0x02, 0x80, 0xbd, 0xfd, 0x27, 0x2f, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// `GET /sim/image.png`.
pub(super) fn sim_image() -> Response<Body> {
    reply::bytes(StatusCode::OK, "image/png", Bytes::from_static(&PNG))
}

pub(super) fn generate(ctx: &Ctx<'_>, body: &[u8]) -> Result<String, ApiError> {
    let body = object(body)?;
    let prompt = body
        .get("prompt")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| missing("prompt"))?;
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .or(ctx.deployment)
        .unwrap_or("dall-e-2");
    let n = count(body.get("n"))?;
    let gpt_image = model.starts_with("gpt-image");
    let url = match body.get("response_format").and_then(Value::as_str) {
        _ if gpt_image => false,
        None | Some("url") => true,
        Some("b64_json") => false,
        Some(other) => {
            return Err(invalid(
                "response_format",
                format!("Invalid value: '{other}'. Supported values are: 'url' and 'b64_json'."),
            ))
        }
    };
    let host = ctx
        .headers
        .get("host")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let image = || {
        let item = if url {
            obj! {"url": format!("http://{host}{SIM_IMAGE_PATH}")}
        } else {
            obj! {"b64_json": base64(&PNG)}
        };
        if model == "dall-e-3" {
            item.with("revised_prompt", prompt)
        } else {
            item
        }
    };
    let data: Vec<J> = (0..n).map(|_| image()).collect();
    let answer = obj! {"created": ctx.sim.objects().now(), "data": data};
    Ok(if gpt_image {
        gpt_image_fields(answer, &body, prompt, n)
    } else {
        answer
    }
    .encode())
}

/// `n`: 1 (the default) to 10, else OpenAI's 400.
fn count(n: Option<&Value>) -> Result<u64, ApiError> {
    let v = match n {
        None | Some(Value::Null) => return Ok(1),
        Some(v) => v,
    };
    match v.as_u64() {
        Some(n) if (1..=MAX_N).contains(&n) => Ok(n),
        Some(n) if n > MAX_N => Err(invalid(
            "n",
            format!(
                "Invalid 'n': integer above maximum value. Expected a value <= {MAX_N}, but got \
                 {n} instead."
            ),
        )
        .code("integer_above_max_value")),
        _ => Err(invalid(
            "n",
            format!(
                "Invalid 'n': integer below minimum value. Expected a value >= 1, but got {v} \
                 instead."
            ),
        )
        .code("integer_below_min_value")),
    }
}

/// What a `gpt-image-*` answer adds: the settings it used and its token usage.
fn gpt_image_fields(answer: J, body: &Map<String, Value>, prompt: &str, n: u64) -> J {
    let setting = |key: &str, default: &str| {
        body.get(key)
            .and_then(Value::as_str)
            .filter(|v| *v != "auto")
            .unwrap_or(default)
            .to_owned()
    };
    let input = tokens::of_text(prompt);
    let output = n * OUTPUT_TOKENS_PER_IMAGE;
    answer
        .with("background", setting("background", "opaque"))
        .with("output_format", setting("output_format", "png"))
        .with("quality", setting("quality", "low"))
        .with("size", setting("size", "1024x1024"))
        .with(
            "usage",
            obj! {
                "input_tokens": input,
                "input_tokens_details": obj! {"image_tokens": 0u64, "text_tokens": input},
                "output_tokens": output,
                "total_tokens": input + output,
            },
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CRC-32 (IEEE), bit by bit: enough to check four chunks.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for b in bytes {
            crc ^= u32::from(*b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn the_png_has_its_signature_and_every_chunk_crc_right() {
        assert_eq!(&PNG[..8], b"\x89PNG\r\n\x1a\n");
        let mut at = 8;
        let mut types = Vec::new();
        while at < PNG.len() {
            let len = u32::from_be_bytes(PNG[at..at + 4].try_into().unwrap()) as usize;
            let typed = &PNG[at + 4..at + 8 + len];
            let crc = u32::from_be_bytes(PNG[at + 8 + len..at + 12 + len].try_into().unwrap());
            assert_eq!(crc32(typed), crc);
            types.push(String::from_utf8(typed[..4].to_vec()).unwrap());
            at += 12 + len;
        }
        assert_eq!(types, ["IHDR", "IDAT", "IEND"]);
    }
}
