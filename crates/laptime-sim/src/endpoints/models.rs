//! The model list and lookup: `GET /v1/models` lists the presets, `GET /v1/models/{id}` finds
//! one, each in Anthropic's shape when the client sent `anthropic-version`, else OpenAI's; any
//! other id is OpenAI's 404 `model_not_found`.

use http::HeaderMap;

use crate::json::{obj, J};
use crate::script::PRESET_NAMES;
use crate::wire::{ApiError, CREATED};

use super::Ctx;

fn model(id: &str, anthropic: bool) -> J {
    if anthropic {
        obj! {
            "type": "model",
            "id": id,
            "display_name": id,
            "created_at": "2025-10-09T08:53:20Z",
        }
    } else {
        obj! {"id": id, "object": "model", "created": CREATED, "owned_by": "laptime-sim"}
    }
}

/// `GET /v1/models`.
pub(crate) fn list(headers: &HeaderMap) -> String {
    let anthropic = headers.contains_key("anthropic-version");
    let data: Vec<J> = PRESET_NAMES.iter().map(|id| model(id, anthropic)).collect();
    let body = if anthropic {
        obj! {
            "data": data,
            "has_more": false,
            "first_id": PRESET_NAMES.first().copied(),
            "last_id": PRESET_NAMES.last().copied(),
        }
    } else {
        obj! {"object": "list", "data": data}
    };
    body.encode()
}

/// `GET /v1/models/{id}`.
pub(super) fn get(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    if !PRESET_NAMES.contains(&id) {
        return Err(
            ApiError::not_found(format!("The model '{id}' does not exist"), Some("model"))
                .code("model_not_found"),
        );
    }
    Ok(model(id, ctx.headers.contains_key("anthropic-version")).encode())
}
