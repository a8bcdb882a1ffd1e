//! The REST read-back API: `GET /api/requests` and `GET /api/requests/{id}`, scoped to the
//! token's workspace, in the snake_case request-log shape, with the usage API's filters;
//! `GET /api/requests/inflight`, the requests not in the store yet;
//! `GET /api/usage`, the usage rollup as JSON; `POST /api/admin/reload`, the config file read
//! again (what SIGHUP does; `laptime reload` calls it). The router's auth layer has already found the
//! principal (it is in the request's extensions); each handler checks the scope it needs.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use http::StatusCode;
use laptime_core::views::RequestLogView;
use laptime_store::auth::{Principal, Scope};
use laptime_store::usage::{GroupDim, UsageFilter};
use serde::{Deserialize, Serialize};

use crate::reports::{
    reading, FilterInput, InflightRequest, InstanceOut, UsageReport, WindowInput,
};
use serde_json::json;

use crate::ApiState;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 500;

/// An API error: its status and a message, answered as `{"error": {"message": …}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({"error": {"message": self.message}})),
        )
            .into_response()
    }
}

pub(crate) fn api_error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        message: message.into(),
    }
}

fn bad_request(message: impl Into<String>) -> ApiError {
    api_error(StatusCode::BAD_REQUEST, message)
}

/// Checks that the principal the auth layer found may do what a route needs (403 otherwise).
pub fn require(p: &Principal, needed: Scope) -> Result<(), ApiError> {
    if p.scope.allows(needed) {
        return Ok(());
    }
    Err(api_error(
        StatusCode::FORBIDDEN,
        format!(
            "a {} token cannot do this; it needs {}",
            p.scope.as_str(),
            needed.as_str()
        ),
    ))
}

/// Query parameters of `GET /api/requests` and `GET /api/usage`: the usage API's filters and
/// window, flat, as strings (so a bad value gets a message naming it).
#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    limit: Option<String>,
    model: Option<String>,
    provider: Option<String>,
    channel: Option<String>,
    group: Option<String>,
    dialect: Option<String>,
    stream: Option<String>,
    status: Option<String>,
    outcome: Option<String>,
    classification: Option<String>,
    endpoint: Option<String>,
    reasoning_effort: Option<String>,
    tools_present: Option<String>,
    max_output_bucket: Option<String>,
    input_bucket: Option<String>,
    region: Option<String>,
    last: Option<String>,
    from: Option<String>,
    to: Option<String>,
    group_by: Option<String>,
    recent: Option<String>,
}

fn parse_limit(v: Option<&str>, name: &str, default: u32) -> Result<u32, ApiError> {
    match v.map(str::parse::<u32>) {
        None => Ok(default),
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(bad_request(format!(
            "{name} must be a whole number from 1 to {MAX_LIMIT}"
        ))),
    }
}

impl LogQuery {
    fn filter(&self) -> Result<UsageFilter, ApiError> {
        let bad = |name: &str, v: &str| bad_request(format!("{name}: {v:?} is not valid"));
        let flag = |name: &str, v: Option<&str>| match v {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(v) => Err(bad(name, v)),
        };
        let stream = flag("stream", self.stream.as_deref())?;
        let tools_present = flag("tools_present", self.tools_present.as_deref())?;
        let status = match self.status.as_deref() {
            None => None,
            Some(v) => Some(v.parse::<u16>().map_err(|_| bad("status", v))?),
        };
        FilterInput {
            model: self.model.clone(),
            provider: self.provider.clone(),
            channel: self.channel.clone(),
            group: self.group.clone(),
            dialect: self.dialect.clone(),
            stream,
            status,
            outcome: self.outcome.clone(),
            classification: self.classification.clone(),
            endpoint: self.endpoint.clone(),
            reasoning_effort: self.reasoning_effort.clone(),
            tools_present,
            max_output_bucket: self.max_output_bucket.clone(),
            input_bucket: self.input_bucket.clone(),
            region: self.region.clone(),
        }
        .try_into()
        .map_err(bad_request)
    }

    fn window(&self) -> WindowInput {
        WindowInput {
            last: self.last.clone(),
            from: self.from.clone(),
            to: self.to.clone(),
        }
    }

    /// The window, only when one was asked for (the request log has none by default).
    fn explicit_window(&self) -> Result<Option<(i64, i64)>, ApiError> {
        if self.last.is_none() && self.from.is_none() && self.to.is_none() {
            return Ok(None);
        }
        self.window()
            .resolve(laptime_proxy::clock::now_unix_us())
            .map(Some)
            .map_err(bad_request)
    }

    fn group_by(&self) -> Result<Vec<GroupDim>, ApiError> {
        let Some(v) = self.group_by.as_deref() else {
            return Ok(Vec::new());
        };
        v.split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| {
                GroupDim::parse(s.trim())
                    .ok_or_else(|| bad_request(format!("group_by: {s:?} is not a dimension")))
            })
            .collect()
    }
}

/// A store answer, or the API's 500 (the cause is logged, not shown).
fn read<T>(r: laptime_store::Result<T>) -> Result<T, ApiError> {
    r.map_err(|e| {
        tracing::error!(error = %e, "request log read failed");
        api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the request log could not be read",
        )
    })
}

/// `GET /api/requests`: newest first, with the usage API's filters and an optional window.
pub async fn list(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Read)?;
    let app = s.app.clone();
    let limit = parse_limit(q.limit.as_deref(), "limit", DEFAULT_LIMIT)?;
    let filter = q.filter()?;
    let window = q.explicit_window()?;
    let rows = read(
        app.store
            .recent(&p.workspace_id, filter, window, limit)
            .await,
    )?;
    let reading = reading(&app.live().config);
    let views: Vec<RequestLogView> = rows
        .iter()
        .map(|r| RequestLogView::new(r, &reading))
        .collect();
    Ok(Json(json!({ "requests": views })).into_response())
}

#[derive(Serialize)]
struct UsageBody {
    #[serde(flatten)]
    report: UsageReport,
    recent: Vec<RequestLogView>,
}

/// `GET /api/usage`: the usage rollup as JSON for scripts (same figures as GraphQL `usage`).
pub async fn usage_report(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Read)?;
    let app = s.app.clone();
    let (from, to) = q
        .window()
        .resolve(laptime_proxy::clock::now_unix_us())
        .map_err(bad_request)?;
    let filter = q.filter()?;
    let dims = q.group_by()?;
    let recent = parse_limit(q.recent.as_deref(), "recent", 20)?;
    let u = read(
        app.store
            .usage(&p.workspace_id, (from, to), filter.clone(), dims)
            .await,
    )?;
    let window = Some((u.window.from_us, u.window.to_us));
    let report = UsageReport::new(&u, &filter);
    let rows = read(
        app.store
            .recent(&p.workspace_id, filter, window, recent)
            .await,
    )?;
    let reading = reading(&app.live().config);
    Ok(Json(UsageBody {
        report,
        recent: rows
            .iter()
            .map(|r| RequestLogView::new(r, &reading))
            .collect(),
    })
    .into_response())
}

/// `GET /api/requests/inflight?limit=…`: this gateway process's requests whose records are not
/// in the store yet (running, or finished and queued), oldest first (at most `limit`, default
/// and most 500), each with the marks it reached.
pub async fn inflight(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
    Query(q): Query<LogQuery>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Read)?;
    let limit = parse_limit(q.limit.as_deref(), "limit", MAX_LIMIT)?;
    let now = laptime_proxy::clock::now_unix_us();
    let rows: Vec<InflightRequest> = s
        .app
        .inflight
        .of_workspace(&p.workspace_id)
        .iter()
        .take(limit as usize)
        .map(|e| InflightRequest::new(e, now))
        .collect();
    Ok(Json(json!({ "requests": rows })).into_response())
}

/// `GET /api/instances`: every live instance of the fleet with its requests in flight, in
/// total and per channel (this instance's now, the others' at their last heartbeat).
pub async fn instances(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Read)?;
    Ok(Json(json!({ "instances": InstanceOut::fleet(&s.app) })).into_response())
}

/// `POST /api/admin/reload` (admin): reads the gateway's config file again and puts it in force
/// for new requests ([`laptime_proxy::App::reload`]). 200 with what changed and what needs a
/// restart; 422 when the file was refused (the running config stays), with every problem.
pub async fn reload(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Admin)?;
    let reloaded = s.app.reload().await;
    let status = match reloaded.result {
        laptime_proxy::live::ReloadResult::Refused => StatusCode::UNPROCESSABLE_ENTITY,
        laptime_proxy::live::ReloadResult::Applied
        | laptime_proxy::live::ReloadResult::Unchanged => StatusCode::OK,
    };
    Ok((status, Json(reloaded)).into_response())
}

/// `GET /api/requests/{id}`.
pub async fn one(
    State(s): State<ApiState>,
    Extension(p): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    require(&p, Scope::Read)?;
    let app = s.app.clone();
    match read(app.store.record(&p.workspace_id, &id).await)? {
        Some(r) => Ok(Json(RequestLogView::new(&r, &reading(&app.live().config))).into_response()),
        // Another workspace's id answers exactly like an id that does not exist.
        None => Err(api_error(StatusCode::NOT_FOUND, "no such request")),
    }
}
