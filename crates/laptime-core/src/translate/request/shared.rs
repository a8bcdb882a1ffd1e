//! Readings and writings that several dialects share: OpenAI's effort and tool-choice words,
//! image URLs that may be `data:` URLs, tool arguments as JSON text.

use serde_json::{Map, Value};

use super::hub::{Effort, Image, ImageDetail, Reasoning, Source, ToolChoice};
use super::json::{split_data_url, Path, Result};
use super::{Cap, Decoder};

/// OpenAI's `reasoning_effort` / `reasoning.effort` word.
pub(crate) fn openai_effort(word: &str, at: &Path<'_>) -> Result<Reasoning> {
    match word {
        "none" => Ok(Reasoning::Disabled),
        "max" => Err(at.invalid("not an OpenAI reasoning effort")),
        _ => Effort::parse(word)
            .map(Reasoning::Effort)
            .ok_or_else(|| at.invalid("expected none, minimal, low, medium, high or xhigh")),
    }
}

/// The hub's reasoning as an OpenAI effort word; `None` leaves it to the model.
pub(crate) fn openai_effort_word(
    reasoning: Reasoning,
    table: &super::ReasoningTable,
) -> Option<&'static str> {
    let effort = match reasoning {
        Reasoning::Disabled => return Some("none"),
        Reasoning::Dynamic => return None,
        Reasoning::Effort(e) => e,
        Reasoning::Budget(b) => table.effort_for(b),
    };
    // OpenAI's top level is xhigh: max is carried as the highest there is.
    Some(match effort {
        Effort::Max => Effort::XHigh.as_str(),
        e => e.as_str(),
    })
}

/// OpenAI's `tool_choice` word (Chat and Responses alike); a named function is an object.
pub(crate) fn openai_tool_choice(word: &str, at: &Path<'_>) -> Result<ToolChoice> {
    match word {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        _ => Err(at.invalid("expected auto, none, required or a named function")),
    }
}

pub(crate) fn image_detail(word: &str, at: &Path<'_>) -> Result<ImageDetail> {
    match word {
        "auto" => Ok(ImageDetail::Auto),
        "low" => Ok(ImageDetail::Low),
        "high" => Ok(ImageDetail::High),
        _ => Err(at.invalid("expected auto, low or high")),
    }
}

pub(crate) fn image_detail_word(detail: ImageDetail) -> &'static str {
    match detail {
        ImageDetail::Auto => "auto",
        ImageDetail::Low => "low",
        ImageDetail::High => "high",
    }
}

/// An OpenAI image URL: a `data:` URL is the image's bytes, any other a link to it.
pub(crate) fn image_from_url(
    url: &str,
    detail: Option<ImageDetail>,
    d: &Decoder<'_>,
    at: &Path<'_>,
) -> Result<Image> {
    let source = match split_data_url(url) {
        Some((media_type, data)) => Source::Base64 {
            media_type: media_type.to_string(),
            data: data.to_string(),
        },
        None if url.starts_with("data:") => {
            return Err(at.invalid("a data URL must be base64 (data:<type>;base64,<data>)"))
        }
        None => {
            d.need(Cap::ImageUrl, at)?;
            Source::Url(url.to_string())
        }
    };
    Ok(Image { source, detail })
}

/// OpenAI `file_data`: a `data:` URL, or bare base64 which OpenAI takes to be a PDF.
pub(crate) fn file_data(data: &str, at: &Path<'_>) -> Result<Source> {
    match split_data_url(data) {
        Some((media_type, data)) => Ok(Source::Base64 {
            media_type: media_type.to_string(),
            data: data.to_string(),
        }),
        None if data.starts_with("data:") => Err(at.invalid("a data URL must be base64")),
        None => Ok(Source::Base64 {
            media_type: "application/pdf".to_string(),
            data: data.to_string(),
        }),
    }
}

/// Tool call arguments as OpenAI sends them: JSON text of an object (an empty text is no
/// arguments, as some models write it).
pub(crate) fn parse_arguments(text: &str, at: &Path<'_>) -> Result<Value> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(at.invalid("the arguments must be a JSON object")),
        Err(e) => Err(at.invalid(format!("the arguments are not JSON: {e}"))),
    }
}

/// Tool call arguments as an object (Anthropic `input`, Gemini `args`).
pub(crate) fn arguments_object(value: &Value, at: &Path<'_>) -> Result<Value> {
    match value {
        Value::Object(_) => Ok(value.clone()),
        _ => Err(at.invalid("expected an object")),
    }
}

/// Inserts the value when there is one.
pub(crate) fn insert_opt<T: Into<Value>>(out: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        out.insert(key.to_string(), v.into());
    }
}
