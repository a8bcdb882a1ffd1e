//! The GraphQL usage API at `POST /graphql` (the query page, [`crate::query_page`], on GET): recent requests, one request, usage
//! rollups with percentiles, and admin mutations for workspaces and tokens.
//!
//! Tenant isolation: a `read` token reads only its own workspace, and asking for another
//! workspace's id answers exactly as for an id that does not exist; `admin` manages and reads all;
//! `proxy` tokens cannot read. Depth and complexity are limited; every failure is a GraphQL
//! error, never a panic.

use std::sync::Arc;

use async_graphql::{
    ComplexObject, Context, EmptySubscription, Enum, Error, MaybeUndefined, Object, Result, Schema,
    SimpleObject, ID,
};
use laptime_core::limit::{BudgetMode, Limits, Period};
use laptime_store::auth::{self, Principal, Scope};
use laptime_store::manage;
use laptime_store::usage::{GroupDim, UsageFilter};
use laptime_store::StoreError;

use crate::reports::{
    reading, FilterInput, GroupDimension, InflightRequest, InstanceOut, Population, RequestEvent,
    RollupOut, UsageGroup, UsageReport, WindowInput, WindowOut,
};
use crate::ApiState;
use axum::extract::State;
use axum::Extension;
use laptime_proxy::App;

pub type LaptimeSchema = Schema<Query, Mutation, EmptySubscription>;

pub const MAX_DEPTH: usize = 10;
pub const MAX_COMPLEXITY: usize = 2_000;
pub const MAX_RECENT: i32 = 500;

/// Builds the schema. The app and the principal are attached to each request, not the schema.
pub fn schema() -> LaptimeSchema {
    Schema::build(Query, Mutation, EmptySubscription)
        .limit_depth(MAX_DEPTH)
        .limit_complexity(MAX_COMPLEXITY)
        .finish()
}

/// The SDL, for `laptime graphql-schema` and the schema snapshot test.
pub fn sdl() -> String {
    schema().sdl()
}

fn app<'a>(ctx: &Context<'a>) -> Result<&'a Arc<App>> {
    ctx.data::<Arc<App>>()
}

fn principal<'a>(ctx: &Context<'a>) -> Result<&'a Principal> {
    ctx.data::<Principal>()
        .map_err(|_| Error::new("unauthenticated"))
}

fn not_found() -> Error {
    Error::new("workspace not found")
}

fn internal(e: impl std::fmt::Display) -> Error {
    tracing::error!(error = %e, "usage API store error");
    Error::new("internal error reading the store")
}

/// A store answer as a GraphQL one: conflicts and missing names say so, anything else is an
/// internal error.
fn stored<T>(r: laptime_store::Result<T>) -> Result<T> {
    match r {
        Ok(v) => Ok(v),
        Err(e @ (StoreError::Conflict(_) | StoreError::NotFound(_))) => {
            Err(Error::new(e.to_string()))
        }
        Err(e) => Err(internal(e)),
    }
}

/// The workspace id a principal may read, given the id (or name) it asked for. Another
/// workspace's id and an unknown id give the same error.
async fn readable_workspace(ctx: &Context<'_>, asked: &str) -> Result<String> {
    let p = principal(ctx)?;
    if !p.scope.allows(Scope::Read) {
        return Err(Error::new(format!(
            "a {} token cannot read usage",
            p.scope.as_str()
        )));
    }
    if p.scope == Scope::Admin {
        let app = app(ctx)?;
        return stored(app.store.find_workspace(asked).await)?
            .map(|w| w.id)
            .ok_or_else(not_found);
    }
    if asked == p.workspace_id || asked == p.workspace_name {
        Ok(p.workspace_id.clone())
    } else {
        Err(not_found())
    }
}

fn require_admin(ctx: &Context<'_>) -> Result<()> {
    let p = principal(ctx)?;
    if p.scope == Scope::Admin {
        Ok(())
    } else {
        Err(Error::new(format!(
            "a {} token cannot manage workspaces or tokens",
            p.scope.as_str()
        )))
    }
}

/// Stored records as the usage API's events, read with the config in force now.
fn events(rows: &[laptime_core::timeline::RequestRecord], app: &App) -> Vec<RequestEvent> {
    let reading = reading(&app.live().config);
    rows.iter()
        .map(|r| RequestEvent::new(r, &reading))
        .collect()
}

fn now_us() -> i64 {
    laptime_proxy::clock::now_unix_us()
}

pub struct Query;

#[Object]
impl Query {
    /// The newest requests of a workspace, newest first (at most 500).
    async fn recent_requests(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        #[graphql(default = 50)] limit: i32,
        filter: Option<FilterInput>,
    ) -> Result<Vec<RequestEvent>> {
        if !(1..=MAX_RECENT).contains(&limit) {
            return Err(Error::new(format!("limit must be from 1 to {MAX_RECENT}")));
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let filter = UsageFilter::try_from(filter.unwrap_or_default()).map_err(Error::new)?;
        let app = app(ctx)?;
        let rows = stored(app.store.recent(&ws, filter, None, limit as u32).await)?;
        Ok(events(&rows, app))
    }

    /// This gateway process's requests of a workspace whose records are not in the store yet
    /// (running, or finished and queued), oldest first (at most 500), with the marks reached
    /// so far.
    async fn inflight_requests(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        #[graphql(default = 500)] limit: i32,
    ) -> Result<Vec<InflightRequest>> {
        if !(1..=MAX_RECENT).contains(&limit) {
            return Err(Error::new(format!("limit must be from 1 to {MAX_RECENT}")));
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let now = now_us();
        Ok(app(ctx)?
            .inflight
            .of_workspace(&ws)
            .iter()
            .take(limit as usize)
            .map(|e| InflightRequest::new(e, now))
            .collect())
    }

    /// One request of a workspace; null when there is none.
    async fn request(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        request_id: ID,
    ) -> Result<Option<RequestEvent>> {
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let app = app(ctx)?;
        let row = stored(app.store.record(&ws, &request_id).await)?;
        Ok(row.map(|r| RequestEvent::new(&r, &reading(&app.live().config))))
    }

    /// Usage over a window: the rollup, one per group, and the recent events.
    async fn usage(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        window: Option<WindowInput>,
        filter: Option<FilterInput>,
        group_by: Option<Vec<GroupDimension>>,
    ) -> Result<Usage> {
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let (from, to) = window
            .unwrap_or_default()
            .resolve(now_us())
            .map_err(Error::new)?;
        let filter = UsageFilter::try_from(filter.unwrap_or_default()).map_err(Error::new)?;
        let dims: Vec<GroupDim> = group_by
            .unwrap_or_default()
            .into_iter()
            .map(GroupDim::from)
            .collect();
        let result = stored(
            app(ctx)?
                .store
                .usage(&ws, (from, to), filter.clone(), dims)
                .await,
        )?;
        let report = UsageReport::new(&result, &filter);
        Ok(Usage {
            window: report.window,
            percentile_method: report.percentile_method,
            relative_error: report.relative_error,
            population: report.population,
            rollup: report.rollup,
            groups: report.groups,
            workspace_id: ws,
            filter,
            range: (result.window.from_us, result.window.to_us),
        })
    }

    /// Workspaces this token can see: all for admin, its own otherwise.
    async fn workspaces(&self, ctx: &Context<'_>) -> Result<Vec<WorkspaceOut>> {
        let p = principal(ctx)?.clone();
        let all = if p.scope == Scope::Admin {
            stored(app(ctx)?.store.list_workspaces().await)?
        } else {
            let own = app(ctx)?.store.find_workspace(&p.workspace_id).await;
            stored(own)?.into_iter().collect()
        };
        Ok(all.into_iter().map(WorkspaceOut::from).collect())
    }

    /// The tokens of a workspace (admin only); never the token values.
    async fn tokens(&self, ctx: &Context<'_>, workspace_id: ID) -> Result<Vec<TokenOut>> {
        require_admin(ctx)?;
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let rows = stored(app(ctx)?.store.list_tokens(&ws).await)?;
        Ok(rows.into_iter().map(TokenOut::from).collect())
    }

    /// The rate limits of a workspace and of its tokens (read: its own workspace; admin: any).
    async fn limits(&self, ctx: &Context<'_>, workspace_id: ID) -> Result<Vec<LimitsOut>> {
        if !principal(ctx)?.scope.allows(Scope::Read) {
            return Err(Error::new("a proxy token cannot read limits"));
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let rows = stored(app(ctx)?.store.list_limits(Some(&ws)).await)?;
        Ok(rows.into_iter().map(LimitsOut::from).collect())
    }

    /// The budgets of a workspace and of its tokens, with what was spent in their current
    /// period (read: its own workspace; admin: any).
    async fn budgets(&self, ctx: &Context<'_>, workspace_id: ID) -> Result<Vec<BudgetOut>> {
        if !principal(ctx)?.scope.allows(Scope::Read) {
            return Err(Error::new("a proxy token cannot read budgets"));
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let rows = stored(app(ctx)?.store.list_budgets(Some(&ws), now_us()).await)?;
        Ok(rows.into_iter().map(BudgetOut::from).collect())
    }

    /// The configured channels with their requests in flight now (any token that can read).
    async fn channels(&self, ctx: &Context<'_>) -> Result<Vec<ChannelOut>> {
        let p = principal(ctx)?;
        if !p.scope.allows(Scope::Read) {
            return Err(Error::new(format!(
                "a {} token cannot read usage",
                p.scope.as_str()
            )));
        }
        Ok(app(ctx)?
            .live()
            .router
            .channels()
            .iter()
            .map(|c| ChannelOut {
                name: c.name.clone(),
                provider: c.provider.as_str().to_string(),
                group: c.group.clone(),
                models: c.models.iter().map(|(public, _)| public.clone()).collect(),
                inflight: c.inflight.load(std::sync::atomic::Ordering::Relaxed),
                circuit: c.circuit_state().as_str().to_string(),
            })
            .collect())
    }

    /// Every live instance of the fleet with its requests in flight, in total and per channel
    /// (this instance's now, the others' at their last heartbeat, at most a few seconds old).
    async fn instances(&self, ctx: &Context<'_>) -> Result<Vec<InstanceOut>> {
        let p = principal(ctx)?;
        if !p.scope.allows(Scope::Read) {
            return Err(Error::new(format!(
                "a {} token cannot read the fleet",
                p.scope.as_str()
            )));
        }
        Ok(InstanceOut::fleet(app(ctx)?))
    }

    /// Who the presented token is.
    async fn me(&self, ctx: &Context<'_>) -> Result<Me> {
        let p = principal(ctx)?;
        Ok(Me {
            workspace_id: ID(p.workspace_id.clone()),
            workspace_name: p.workspace_name.clone(),
            key_id: ID(p.key_id.clone()),
            scope: p.scope.into(),
            group: app(ctx)?.group_of(p).to_string(),
        })
    }
}

/// A usage answer.
#[derive(SimpleObject)]
#[graphql(complex)]
pub struct Usage {
    /// The window actually used (whole minutes).
    pub window: WindowOut,
    pub percentile_method: String,
    pub relative_error: f64,
    /// The requests `rollup` describes (the filters in force and how many): print it beside
    /// every percentile.
    pub population: Population,
    pub rollup: RollupOut,
    pub groups: Vec<UsageGroup>,
    #[graphql(skip)]
    workspace_id: String,
    #[graphql(skip)]
    filter: UsageFilter,
    #[graphql(skip)]
    range: (i64, i64),
}

#[ComplexObject]
impl Usage {
    /// The newest requests in the window that match the filter.
    async fn recent(
        &self,
        ctx: &Context<'_>,
        #[graphql(default = 20)] limit: i32,
    ) -> Result<Vec<RequestEvent>> {
        if !(1..=MAX_RECENT).contains(&limit) {
            return Err(Error::new(format!("limit must be from 1 to {MAX_RECENT}")));
        }
        let (ws, filter, range) = (self.workspace_id.clone(), self.filter.clone(), self.range);
        let app = app(ctx)?;
        let rows = stored(
            app.store
                .recent(&ws, filter, Some(range), limit as u32)
                .await,
        )?;
        Ok(events(&rows, app))
    }
}

/// A channel as configured (never its key or URL), with its live in-flight count. Error rates
/// and percentiles per channel come from `usage(groupBy: [CHANNEL])`.
#[derive(SimpleObject)]
#[graphql(name = "Channel")]
pub struct ChannelOut {
    pub name: String,
    pub provider: String,
    pub group: String,
    pub models: Vec<String>,
    pub inflight: u32,
    /// The circuit breaker: `closed`, `open` (ejected) or `half_open` (one probe allowed).
    pub circuit: String,
}

#[derive(SimpleObject)]
#[graphql(name = "Workspace")]
pub struct WorkspaceOut {
    pub id: ID,
    pub name: String,
    /// The routing group its requests use (null: the default group).
    pub group: Option<String>,
}

impl From<auth::Workspace> for WorkspaceOut {
    fn from(w: auth::Workspace) -> Self {
        WorkspaceOut {
            id: ID(w.id),
            name: w.name,
            group: w.group,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Enum)]
#[graphql(name = "Scope")]
pub enum ScopeOut {
    Proxy,
    Read,
    Admin,
}

impl From<Scope> for ScopeOut {
    fn from(s: Scope) -> Self {
        match s {
            Scope::Proxy => ScopeOut::Proxy,
            Scope::Read => ScopeOut::Read,
            Scope::Admin => ScopeOut::Admin,
        }
    }
}

impl From<ScopeOut> for Scope {
    fn from(s: ScopeOut) -> Self {
        match s {
            ScopeOut::Proxy => Scope::Proxy,
            ScopeOut::Read => Scope::Read,
            ScopeOut::Admin => Scope::Admin,
        }
    }
}

#[derive(SimpleObject)]
#[graphql(name = "Token")]
pub struct TokenOut {
    pub key_id: ID,
    pub workspace_id: ID,
    pub scope: ScopeOut,
    /// The token's own routing group, overriding its workspace's (null: none).
    pub group: Option<String>,
    pub created_at: String,
    pub revoked_at: Option<String>,
}

impl From<manage::TokenInfo> for TokenOut {
    fn from(t: manage::TokenInfo) -> Self {
        TokenOut {
            key_id: ID(t.key_id),
            workspace_id: ID(t.workspace_id),
            scope: t.scope.into(),
            group: t.group,
            created_at: laptime_core::views::rfc3339(t.created_at_us),
            revoked_at: t.revoked_at_us.map(laptime_core::views::rfc3339),
        }
    }
}

/// The rate limits of a workspace (`keyId` null) or of one of its tokens; a null limit is none.
#[derive(SimpleObject)]
#[graphql(name = "Limits")]
pub struct LimitsOut {
    pub workspace_id: ID,
    pub key_id: Option<ID>,
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Tokens (input and output) per minute.
    pub tpm: Option<u64>,
    /// Requests in flight at once.
    pub concurrent: Option<u64>,
    pub updated_at: String,
}

impl From<laptime_store::limits::LimitRow> for LimitsOut {
    fn from(r: laptime_store::limits::LimitRow) -> Self {
        LimitsOut {
            workspace_id: ID(r.workspace_id),
            key_id: r.key_id.map(ID),
            rpm: r.limits.rpm,
            tpm: r.limits.tpm,
            concurrent: r.limits.concurrent,
            updated_at: laptime_core::views::rfc3339(r.updated_at_us),
        }
    }
}

#[derive(Enum, Copy, Clone, PartialEq, Eq)]
pub enum BudgetPeriod {
    Day,
    Month,
}

#[derive(Enum, Copy, Clone, PartialEq, Eq)]
pub enum BudgetModeOut {
    /// Requests continue, flagged `over_budget`.
    Soft,
    /// New requests are refused with 429 until the period ends.
    Hard,
}

/// A budget of a workspace (`keyId` null) or of one of its tokens, per UTC calendar period.
#[derive(SimpleObject)]
#[graphql(name = "Budget")]
pub struct BudgetOut {
    pub workspace_id: ID,
    pub key_id: Option<ID>,
    pub period: BudgetPeriod,
    pub usd: f64,
    pub mode: BudgetModeOut,
    /// Spent in the current period, USD (the costs of the requests recorded so far).
    pub spent_usd: f64,
    /// When the current period ends, RFC 3339.
    pub resets_at: String,
}

impl From<laptime_store::budgets::BudgetRow> for BudgetOut {
    fn from(r: laptime_store::budgets::BudgetRow) -> Self {
        BudgetOut {
            workspace_id: ID(r.workspace_id),
            key_id: r.key_id.map(ID),
            period: match r.budget.period {
                Period::Day => BudgetPeriod::Day,
                Period::Month => BudgetPeriod::Month,
            },
            usd: laptime_core::cost::nano_to_usd(r.budget.nano_usd),
            mode: match r.budget.mode {
                BudgetMode::Soft => BudgetModeOut::Soft,
                BudgetMode::Hard => BudgetModeOut::Hard,
            },
            spent_usd: laptime_core::cost::nano_to_usd(r.spent_nano_usd),
            resets_at: laptime_core::views::rfc3339(r.resets_at_us),
        }
    }
}

/// A limit argument: absent keeps the stored value, null removes it, a value (at least 1)
/// sets it.
fn merged(current: Option<u64>, arg: MaybeUndefined<u64>, name: &str) -> Result<Option<u64>> {
    match arg {
        MaybeUndefined::Undefined => Ok(current),
        MaybeUndefined::Null => Ok(None),
        MaybeUndefined::Value(0) => Err(Error::new(format!(
            "{name} must be at least 1 (null removes the limit)"
        ))),
        MaybeUndefined::Value(v) => Ok(Some(v)),
    }
}

/// A new token: the only time its value is shown.
#[derive(SimpleObject)]
pub struct NewToken {
    pub key_id: ID,
    pub workspace_id: ID,
    pub scope: ScopeOut,
    pub token: String,
}

#[derive(SimpleObject)]
pub struct Me {
    pub workspace_id: ID,
    pub workspace_name: String,
    pub key_id: ID,
    pub scope: ScopeOut,
    /// The routing group this token's model calls use.
    pub group: String,
}

/// A group some configured channel is in; anything else would route nowhere.
fn configured_group(ctx: &Context<'_>, group: &str) -> Result<()> {
    let live = app(ctx)?.live();
    let known = live.config.groups();
    if known.contains(&group) {
        return Ok(());
    }
    Err(Error::new(format!(
        "no channel is in group {group:?} (configured groups: {})",
        known.join(", ")
    )))
}

pub struct Mutation;

#[Object]
impl Mutation {
    /// Creates a workspace (admin), optionally routed to a channel group other than `default`.
    async fn create_workspace(
        &self,
        ctx: &Context<'_>,
        name: String,
        group: Option<String>,
    ) -> Result<WorkspaceOut> {
        require_admin(ctx)?;
        if let Some(g) = &group {
            configured_group(ctx, g)?;
        }
        let ws = stored(
            app(ctx)?
                .store
                .create_workspace(&name, group, now_us())
                .await,
        )?;
        Ok(ws.into())
    }

    /// Sets the channel group a workspace's requests use (admin); null returns it to `default`.
    /// Takes effect on the workspace's next request.
    async fn set_workspace_group(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        group: Option<String>,
    ) -> Result<WorkspaceOut> {
        require_admin(ctx)?;
        if let Some(g) = &group {
            configured_group(ctx, g)?;
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let ws = stored(app(ctx)?.store.set_workspace_group(&ws, group).await)?;
        app(ctx)?.auth.forget_all();
        Ok(ws.into())
    }

    /// Creates a token in a workspace (admin); its value is returned once.
    async fn create_token(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        scope: ScopeOut,
        #[graphql(desc = "a channel group for this token's calls, overriding its workspace's")]
        group: Option<String>,
    ) -> Result<NewToken> {
        require_admin(ctx)?;
        if let Some(g) = &group {
            configured_group(ctx, g)?;
        }
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let t = stored(
            app(ctx)?
                .store
                .create_token(&ws, scope.into(), group, now_us())
                .await,
        )?;
        Ok(NewToken {
            key_id: ID(t.key_id),
            workspace_id: ID(t.workspace.id),
            scope: t.scope.into(),
            token: t.token,
        })
    }

    /// Sets the rate limits of a workspace, or with `keyId` of one of its tokens (admin). An
    /// argument left out keeps its value, null removes that limit. Applies on this instance at
    /// once, and on every instance of a fleet within a second.
    async fn set_limits(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        key_id: Option<ID>,
        rpm: MaybeUndefined<u64>,
        tpm: MaybeUndefined<u64>,
        concurrent: MaybeUndefined<u64>,
    ) -> Result<LimitsOut> {
        require_admin(ctx)?;
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let app = app(ctx)?;
        let key = key_id.as_ref().map(|k| k.as_str());
        let rows = stored(app.store.list_limits(Some(&ws)).await)?;
        let current = rows
            .iter()
            .find(|r| r.key_id.as_deref() == key)
            .map(|r| r.limits)
            .unwrap_or_default();
        let limits = Limits {
            rpm: merged(current.rpm, rpm, "rpm")?,
            tpm: merged(current.tpm, tpm, "tpm")?,
            concurrent: merged(current.concurrent, concurrent, "concurrent")?,
        };
        let now = now_us();
        stored(app.store.set_limits(&ws, key, limits, now).await)?;
        app.auth.forget_all();
        Ok(LimitsOut {
            workspace_id: ID(ws),
            key_id,
            rpm: limits.rpm,
            tpm: limits.tpm,
            concurrent: limits.concurrent,
            updated_at: laptime_core::views::rfc3339(now),
        })
    }

    /// Sets the budget of one period of a workspace, or with `keyId` of one of its tokens
    /// (admin); `usd: null` removes it (and answers null). Applies within a second on every
    /// instance.
    async fn set_budget(
        &self,
        ctx: &Context<'_>,
        workspace_id: ID,
        key_id: Option<ID>,
        usd: Option<f64>,
        period: BudgetPeriod,
        #[graphql(default_with = "BudgetModeOut::Hard")] mode: BudgetModeOut,
    ) -> Result<Option<BudgetOut>> {
        require_admin(ctx)?;
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let period = match period {
            BudgetPeriod::Day => Period::Day,
            BudgetPeriod::Month => Period::Month,
        };
        let mode = match mode {
            BudgetModeOut::Soft => BudgetMode::Soft,
            BudgetModeOut::Hard => BudgetMode::Hard,
        };
        let budget = match usd {
            None => None,
            Some(v) if v.is_finite() && v >= 0.0 => Some(((v * 1e9).round() as u64, mode)),
            Some(_) => return Err(Error::new("usd must be a number ≥ 0 (null removes)")),
        };
        let app = app(ctx)?;
        let key = key_id.as_ref().map(|k| k.as_str());
        let now = now_us();
        stored(app.store.set_budget(&ws, key, period, budget, now).await)?;
        let rows = stored(app.store.list_budgets(Some(&ws), now).await)?;
        Ok(rows
            .into_iter()
            .find(|r| r.key_id.as_deref() == key && r.budget.period == period)
            .map(BudgetOut::from))
    }

    /// Revokes a token (admin). It stops working on the next request.
    async fn revoke_token(&self, ctx: &Context<'_>, workspace_id: ID, key_id: ID) -> Result<bool> {
        require_admin(ctx)?;
        let ws = readable_workspace(ctx, &workspace_id).await?;
        let app = app(ctx)?;
        let revoked = stored(app.store.revoke_token(&ws, &key_id, now_us()).await)?;
        app.auth.forget_all();
        if !revoked {
            return Err(Error::new("token not found"));
        }
        Ok(true)
    }
}

// === HTTP ===

/// `POST /graphql`: runs the query as the principal the router's auth layer found.
pub async fn handle(
    State(s): State<ApiState>,
    Extension(principal): Extension<Principal>,
    body: bytes::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let request: async_graphql::Request = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return errors(
                http::StatusCode::BAD_REQUEST,
                &format!("not a GraphQL request: {e}"),
            )
        }
    };
    let response = s
        .schema
        .execute(request.data(s.app.clone()).data(principal))
        .await;
    axum::Json(response).into_response()
}

/// An answer in GraphQL's error shape, `{"errors": [{"message": …}]}` (the dashboard and GraphQL
/// clients read the message from there, also on a 401).
pub fn errors(status: http::StatusCode, message: &str) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        status,
        axum::Json(serde_json::json!({"errors": [{"message": message}]})),
    )
        .into_response()
}
