//! `GET /healthz` (the process answers) and `GET /readyz` (the store answers too). Both answer
//! without a token: they say nothing about traffic.

use axum::extract::State;
use axum::response::{IntoResponse, Response};

use crate::ApiState;

/// `GET /healthz`.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: `ready` when the store can be read, else 503.
pub async fn readyz(State(s): State<ApiState>) -> Response {
    if s.app.store.ping().await {
        "ready".into_response()
    } else {
        (http::StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
    }
}
