//! `GET /v1/models`, for the SDKs' model listing: the models the caller's routing group can
//! reach, in the OpenAI list shape, or Anthropic's when the client sends `anthropic-version`.

use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, StatusCode};
use laptime_store::auth::{Principal, Scope};
use serde_json::json;

use crate::App;

/// The listing for `principal` (found by the router's auth layer); a token without the `proxy`
/// scope gets 403.
pub fn list(app: &App, principal: &Principal, headers: &HeaderMap) -> Response {
    if !principal.scope.allows(Scope::Proxy) {
        let message = format!(
            "a {} token cannot do this; it needs {}",
            principal.scope.as_str(),
            Scope::Proxy.as_str()
        );
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"error": {"message": message}})),
        )
            .into_response();
    }
    let models = app.live().router.models(app.group_of(principal));
    if headers.contains_key("anthropic-version") {
        let data: Vec<_> = models
            .iter()
            .map(|(id, _)| json!({"type": "model", "id": id, "display_name": id, "created_at": "1970-01-01T00:00:00Z"}))
            .collect();
        let first = models.first().map(|m| m.0.clone());
        let last = models.last().map(|m| m.0.clone());
        return Json(json!({"data": data, "has_more": false, "first_id": first, "last_id": last}))
            .into_response();
    }
    let data: Vec<_> = models
        .iter()
        .map(|(id, owner)| json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
        .collect();
    Json(json!({"object": "list", "data": data})).into_response()
}
