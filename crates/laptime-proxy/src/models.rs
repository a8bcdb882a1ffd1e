//! `GET /v1/models` and `GET /v1/models/{id}`, for the SDKs' model listing and lookup: the
//! models the caller's routing group can reach, in the OpenAI shape, or Anthropic's when the
//! client sends `anthropic-version`.

use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, StatusCode};
use laptime_store::auth::{Principal, Scope};
use serde_json::{json, Value};

use crate::App;

/// The listing for `principal` (found by the router's auth layer); a token without the `proxy`
/// scope gets 403.
pub fn list(app: &App, principal: &Principal, headers: &HeaderMap) -> Response {
    if let Some(refused) = refuse(principal) {
        return refused;
    }
    let models = app.live().router.models(app.group_of(principal));
    let anthropic = headers.contains_key("anthropic-version");
    let data: Vec<_> = models
        .iter()
        .map(|(id, owner)| model(id, owner, anthropic))
        .collect();
    if anthropic {
        let first = models.first().map(|m| m.0.clone());
        let last = models.last().map(|m| m.0.clone());
        return Json(json!({"data": data, "has_more": false, "first_id": first, "last_id": last}))
            .into_response();
    }
    Json(json!({"object": "list", "data": data})).into_response()
}

/// One model of the listing, or 404 in the client's shape when the caller's group cannot reach
/// it (the same answer whether it exists elsewhere or not: another group's models are not named).
pub fn retrieve(app: &App, principal: &Principal, headers: &HeaderMap, id: &str) -> Response {
    if let Some(refused) = refuse(principal) {
        return refused;
    }
    let anthropic = headers.contains_key("anthropic-version");
    let models = app.live().router.models(app.group_of(principal));
    if let Some((id, owner)) = models.iter().find(|(m, _)| m == id) {
        return Json(model(id, owner, anthropic)).into_response();
    }
    let shown: String = id.chars().take(200).collect();
    let body = if anthropic {
        json!({"type": "error", "error": {"type": "not_found_error", "message": format!("model: {shown}")}})
    } else {
        json!({"error": {
            "message": format!("The model `{shown}` does not exist or you do not have access to it."),
            "type": "invalid_request_error",
            "param": null,
            "code": "model_not_found",
        }})
    };
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

fn model(id: &str, owner: &str, anthropic: bool) -> Value {
    if anthropic {
        json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"})
    } else {
        json!({"id": id, "object": "model", "created": 0, "owned_by": owner})
    }
}

fn refuse(principal: &Principal) -> Option<Response> {
    if principal.scope.allows(Scope::Proxy) {
        return None;
    }
    let message = format!(
        "a {} token cannot do this; it needs {}",
        principal.scope.as_str(),
        Scope::Proxy.as_str()
    );
    Some(
        (
            StatusCode::FORBIDDEN,
            Json(json!({"error": {"message": message}})),
        )
            .into_response(),
    )
}
