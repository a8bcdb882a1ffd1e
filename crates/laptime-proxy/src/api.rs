//! The read-back API: `GET /api/requests` and `GET /api/requests/{id}`, scoped to the token's
//! workspace, in the snake_case request-log shape; plus `GET /v1/models`.

use std::sync::Arc;

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, StatusCode};
use laptime_core::views::RequestLogView;
use laptime_store::auth::{Principal, Scope};
use laptime_store::records;
use serde::Deserialize;
use serde_json::json;

use crate::auth::AuthFailure;
use crate::App;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

fn api_error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": {"message": message.into()}}))).into_response()
}

/// Authenticates a management request and checks its scope.
pub async fn principal(
    app: &App,
    headers: &HeaderMap,
    needed: Scope,
) -> Result<Principal, Response> {
    match app.auth.authenticate(headers).await {
        Ok(p) if p.scope.allows(needed) => Ok(p),
        Ok(p) => Err(api_error(
            StatusCode::FORBIDDEN,
            format!(
                "a {} token cannot do this; it needs {}",
                p.scope.as_str(),
                needed.as_str()
            ),
        )),
        Err(AuthFailure::Unavailable) => Err(api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "credentials could not be checked",
        )),
        Err(_) => Err(api_error(
            StatusCode::UNAUTHORIZED,
            "missing or invalid token",
        )),
    }
}

#[derive(Debug, Deserialize)]
pub struct ListQuery {
    limit: Option<String>,
}

pub async fn list(app: Arc<App>, headers: HeaderMap, Query(q): Query<ListQuery>) -> Response {
    let p = match principal(&app, &headers, Scope::Read).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let limit = match q.limit.as_deref().map(str::parse::<u32>) {
        None => DEFAULT_LIMIT,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return api_error(
                StatusCode::BAD_REQUEST,
                format!("limit must be a whole number from 1 to {MAX_LIMIT}"),
            )
        }
    };
    let store = app.store.clone();
    let rows = tokio::task::spawn_blocking(move || {
        store.with_conn(|c| records::recent(c, &p.workspace_id, limit))
    })
    .await;
    match rows {
        Ok(Ok(rows)) => {
            let views: Vec<RequestLogView> = rows.iter().map(RequestLogView::new).collect();
            Json(json!({ "requests": views })).into_response()
        }
        _ => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request log could not be read",
        ),
    }
}

pub async fn one(app: Arc<App>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    let p = match principal(&app, &headers, Scope::Read).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let store = app.store.clone();
    let row = tokio::task::spawn_blocking(move || {
        store.with_conn(|c| records::get(c, &p.workspace_id, &id))
    })
    .await;
    match row {
        Ok(Ok(Some(r))) => Json(RequestLogView::new(&r)).into_response(),
        // Another workspace's id answers exactly like an id that does not exist.
        Ok(Ok(None)) => api_error(StatusCode::NOT_FOUND, "no such request"),
        _ => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request log could not be read",
        ),
    }
}

/// `GET /v1/models` in the OpenAI list shape, or Anthropic's when the client sends
/// `anthropic-version`.
pub async fn models(app: Arc<App>, headers: HeaderMap) -> Response {
    let p = match principal(&app, &headers, Scope::Proxy).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let models = app.router.models(app.group_of(&p));
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
