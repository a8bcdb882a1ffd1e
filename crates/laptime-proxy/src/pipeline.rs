//! The request path, one function per phase, in order: ingress → auth → admission → routing →
//! translation → attempts (the strategy: failover and hedging over one attempt function) → respond, which
//! hands the record to the body that finishes it (observe → record). Each phase stamps its mark
//! on the pending record; every exit answers through a body that records exactly once.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body as AxumBody;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Request};
use laptime_core::timeline::ErrorClass;
use laptime_core::translate::request::{translate_request, RequestError, RequestOptions};
use laptime_core::translate::stream::ClientStreamOptions;
use laptime_core::Dialect;
use laptime_store::auth::{Principal, Scope};
use tokio::time::Instant;

use crate::attempt::AttemptCtx;
use crate::auth::{AuthFailure, Authenticated};
use crate::budget::{BodyBudget, Held, Refusal};
use crate::cache::{self, CachedAnswer};
use crate::config::RouteConfig;
use crate::continuation::{Resume, ResumeFrom};
use crate::ingress::{self, RequestHead, Trace};
use crate::live::Live;
use crate::record::{Finisher, Pending};
use crate::respond::{self, GatewayError, StoreIn};
use crate::routing::Route;
use crate::strategy::{self, Plan};
use crate::App;

/// The dialects whose model calls have a path of their own (a Gemini call names its model in
/// the path, so the router matches it).
pub const MODEL_CALLS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

/// Which dialect's model call a request is, by its method and path: `POST` at the path of one
/// of [`MODEL_CALLS`] (a query string aside, as the router matches).
pub fn model_call(method: &http::Method, path: &str) -> Option<Dialect> {
    if method != http::Method::POST {
        return None;
    }
    MODEL_CALLS.into_iter().find(|d| d.path() == path)
}

/// Handles one proxied model call. An answer to a request that rate limits applied to carries
/// the dialect's rate-limit headers for them, whatever its status (a refusal carries its own).
pub async fn proxy(app: Arc<App>, dialect: Dialect, req: Request<AxumBody>) -> Response {
    let mut quotas = None;
    let mut resp = handle(app, dialect, req, &mut quotas).await;
    if let Some(q) = quotas {
        respond::rate_limit_headers(dialect, &q, resp.headers_mut());
    }
    resp
}

/// [`proxy`], telling `quotas` what the rate limits said at admission.
async fn handle(
    app: Arc<App>,
    dialect: Dialect,
    req: Request<AxumBody>,
    quotas: &mut Option<crate::limits::Quotas>,
) -> Response {
    let (mut parts, body) = req.into_parts();
    // The router's auth layer authenticated the head and took t0; without that layer (a caller
    // serving this handler alone) authenticate here, so the route is never open.
    let authenticated = match parts.extensions.remove::<Authenticated>() {
        Some(a) => a,
        None => app.auth.check(&parts.headers).await,
    };
    // Read once: this request keeps the configuration it started with, reloads or not.
    let live = app.live();
    let (mut finisher, trace) =
        ingress(&app, &live, dialect, &parts.headers, authenticated.received);
    let principal = match authenticate(&mut finisher.pending, authenticated) {
        Ok(p) => p,
        Err(e) => return unread(respond::reject(finisher, e), parts.version),
    };
    // The workspace now, so its in-flight list shows the request while its body is read.
    finisher.pending.publish();
    // `held`: the body's bytes (and those of the bodies derived from it for the candidates)
    // count against the gateway's budget until the request is done.
    // Gemini names the model and stream-ness in the path, not the body.
    let gemini = (dialect == Dialect::Gemini)
        .then(|| ingress::gemini_call(parts.uri.path(), parts.uri.query()));
    let admitted = admit(&app, &live, &mut finisher.pending, body, gemini).await;
    let (body, mut held, head) = match admitted {
        Ok(admitted) => admitted,
        Err(e) => return unread(respond::reject(finisher, e), parts.version),
    };
    let limited = limit(
        &app,
        &live,
        &mut finisher.pending,
        &principal,
        &head,
        Input::Body(&body),
    )
    .await;
    if let Err(refused) = limited {
        return respond::over_limit(finisher, &refused);
    }
    *quotas = finisher.pending.admission.as_ref().map(|t| t.quotas());
    let mut routed = match route(&app, &live, &mut finisher.pending, &principal, &head) {
        Ok(r) => r,
        Err(e) => return respond::reject(finisher, e),
    };
    let continues = (dialect == Dialect::Responses)
        .then_some(head.previous_response_id.as_deref())
        .flatten();
    if let Err(e) = previous_response(&app, &principal, continues, &mut routed.candidates).await {
        return respond::reject(finisher, e);
    }
    finisher.pending.publish();
    let store_in = match cache_lookup(
        &live,
        (dialect, &head),
        routed.policy,
        &parts.headers,
        &principal,
        &body,
    )
    .await
    {
        Lookup::Hit(hit) => return respond::cached(finisher, hit),
        Lookup::Miss(store_in) => store_in,
    };
    let policy = routed.policy;
    let (candidates, bodies) = match translate(
        &finisher.pending,
        (policy, &head),
        &body,
        routed.candidates,
        (&app.body_budget, &mut held),
    ) {
        Ok(t) => t,
        Err(e) => return respond::reject(finisher, e),
    };
    let client_answer = bodies.any_translated().then(|| ClientStreamOptions {
        // Each attempt names the model its channel was asked for (`for_model`).
        model: None,
        id: finisher.pending.request_id.clone(),
        created: finisher.pending.created_s(),
        include_usage: bodies.client_wants_usage_chunk,
        timing_comment: live.config.server.timing_comment(dialect),
    });
    let ctx = AttemptCtx {
        app: &app,
        live: &live,
        dialect,
        client_answer: client_answer.as_ref(),
        stream: head.stream,
        client_headers: &parts.headers,
        trace: trace.span,
        t0: finisher.pending.t0,
        timeouts: &policy.timeouts,
        endpoint: None,
        usage_asked: head.include_usage,
    };
    let body_for = |route: &Route| bodies.body_for(route).into();
    let plan = Plan {
        candidates,
        policy,
        body_for: &body_for,
    };
    let strategy::Won { answer, untried } =
        match strategy::run(&ctx, &mut finisher.pending, plan).await {
            Ok(won) => won,
            Err(e) => return respond::failed(finisher, e),
        };
    let resume = head.stream.then(|| {
        let translated = client_answer
            .as_ref()
            .filter(|_| answer.upstream != dialect)
            .map(|opts| opts.for_model(&answer.upstream_model));
        let from = ResumeFrom {
            app: &app,
            live: &live,
            client: dialect,
            request: &body,
            headers: &parts.headers,
            trace: trace.span,
            t0: finisher.pending.t0,
            policy,
            translated,
            upstream_model: &answer.upstream_model,
            request_id: &finisher.pending.request_id,
            created: finisher.pending.created_s(),
        };
        Resume::new(from, untried, std::mem::take(&mut held))
    });
    if let Some(b) = bodies.find(answer.upstream, &answer.upstream_model) {
        finisher.pending.translation_omitted = b.omitted.clone();
    }
    let total_at = finisher.pending.t0 + Duration::from_millis(policy.timeouts.total_ms);
    respond::answer(
        finisher,
        answer,
        &parts.headers,
        &live.config.server,
        total_at,
        store_in,
        (client_answer.as_ref(), resume.flatten()),
    )
    .await
}

/// A refusal answered before the request body was read: on HTTP/1 the connection is closed
/// after it (the unread body cannot be skipped), and `Connection: close` tells the client so,
/// rather than letting it write its next request into a closing socket.
pub(crate) fn unread(mut resp: Response, version: http::Version) -> Response {
    if version <= http::Version::HTTP_11 {
        resp.headers_mut().insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        );
    }
    resp
}

/// Ingress: the pending record from t0 (when the gateway had the request head), the request and
/// trace ids.
pub(crate) fn ingress(
    app: &App,
    live: &Live,
    dialect: Dialect,
    headers: &HeaderMap,
    t0: Instant,
) -> (Finisher, Trace) {
    let request_id = ingress::request_id();
    let mut pending = Pending::new(t0, crate::clock::now_unix_us(), request_id, dialect);
    pending.region = live.config.server.region.clone();
    pending.instance = live.config.server.instance.clone();
    let trace = ingress::trace(
        headers
            .get(ingress::TRACEPARENT)
            .and_then(|v| v.to_str().ok()),
    );
    pending.trace_id = Some(trace.trace_id.clone());
    pending.span = Some(trace.span);
    pending.inflight = app.inflight.open(&pending);
    let finisher = Finisher::sharing(pending, app.sinks.clone(), live.config.thresholds)
        .with_prices(live.prices.clone());
    (finisher, trace)
}

/// Auth: what the auth layer found (timed there as `auth`) must be a principal allowed to call
/// models.
pub(crate) fn authenticate(
    pending: &mut Pending,
    authenticated: Authenticated,
) -> Result<Principal, GatewayError> {
    pending.marks.auth = Some(laptime_core::timeline::offset(authenticated.took));
    let principal = authenticated.result.map_err(|f| match f {
        AuthFailure::Unavailable => {
            GatewayError::new(ErrorClass::Internal, "credentials could not be checked")
        }
        AuthFailure::Missing => GatewayError::new(
            ErrorClass::Unauthorized,
            "missing credentials: send Authorization: Bearer <token>, x-api-key or x-goog-api-key",
        ),
        AuthFailure::Invalid => {
            GatewayError::new(ErrorClass::Unauthorized, "invalid or revoked token")
        }
    })?;
    pending.workspace_id = Some(principal.workspace_id.clone());
    pending.key_id = Some(principal.key_id.clone());
    if !principal.scope.allows(Scope::Proxy) {
        return Err(GatewayError::new(
            ErrorClass::Forbidden,
            format!("a {} token cannot call models", principal.scope.as_str()),
        ));
    }
    Ok(principal)
}

/// Admission: the body within the size limit and the gateway's byte budget (timed as
/// `body_read`), and the top-level fields the gateway needs (for Gemini, what its path named).
async fn admit(
    app: &App,
    live: &Live,
    pending: &mut Pending,
    body: AxumBody,
    gemini: Option<Result<ingress::GeminiCall, ingress::BodyProblem>>,
) -> Result<(Bytes, Held, RequestHead), GatewayError> {
    let started = Instant::now();
    let read = app
        .body_budget
        .read(body, live.config.server.max_body_bytes)
        .await;
    pending.marks.body_read = Some(pending.since(started));
    let (body, held) = read.map_err(|refusal| match refusal {
        Refusal::TooLarge { limit } => GatewayError::new(
            ErrorClass::PayloadTooLarge,
            format!("request body is over the {limit}-byte limit"),
        ),
        Refusal::BudgetFull => budget_full(),
        Refusal::Unreadable => {
            GatewayError::new(ErrorClass::BadRequest, "the request body could not be read")
        }
    })?;
    pending.body_bytes = Some(body.len());
    let head = match gemini {
        None => ingress::parse_head(&body),
        Some(call) => call.and_then(|call| ingress::parse_gemini_head(call, &body)),
    }
    .map_err(|p| {
        let class = if p.not_found() {
            ErrorClass::UnknownModel
        } else {
            ErrorClass::BadRequest
        };
        GatewayError::new(class, p.message())
    })?;
    pending.model = Some(head.model.clone());
    pending.stream = head.stream;
    pending.shape = head.shape.clone();
    Ok((body, held, head))
}

/// What admission estimates a request's input tokens from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Input<'a> {
    /// The body, read whole: the tokenizer over its text.
    Body(&'a [u8]),
    /// Only its size is known (an upload streamed on): about four bytes a token.
    Bytes(usize),
}

/// Admission against the budgets and rate limits of the token and its workspace (timed as
/// `admission` when any applies): a hard budget spent refuses; tokens per minute are charged
/// with an estimate (the tokenizer over the input text, plus `max_tokens` or the configured
/// output estimate), settled when the request is recorded.
pub(crate) async fn limit(
    app: &Arc<App>,
    live: &Live,
    pending: &mut Pending,
    principal: &Principal,
    head: &RequestHead,
    input: Input<'_>,
) -> Result<(), crate::limits::Refused> {
    let started = Instant::now();
    let verdict = app.budgets.check(
        &principal.workspace_id,
        &principal.key_id,
        pending.created_at_us,
    );
    if verdict == crate::budgets::Verdict::None && principal.limits.is_empty() {
        return Ok(());
    }
    let admitted = match verdict {
        crate::budgets::Verdict::Refuse(refused) => Err(refused),
        crate::budgets::Verdict::Admit { over_soft } => {
            pending.over_budget = over_soft;
            rate_limits(app, live, pending, principal, (head, input), started).await
        }
        crate::budgets::Verdict::None => {
            rate_limits(app, live, pending, principal, (head, input), started).await
        }
    };
    pending.marks.admission = Some(pending.since(started));
    pending.admission = admitted?;
    Ok(())
}

async fn rate_limits(
    app: &Arc<App>,
    live: &Live,
    pending: &mut Pending,
    principal: &Principal,
    (head, input): (&RequestHead, Input<'_>),
    at: Instant,
) -> Result<Option<crate::limits::Ticket>, crate::limits::Refused> {
    let limits = &principal.limits;
    // Only tokens-per-minute windows are charged tokens: without one, nothing is tokenized.
    let tokens = if limits.workspace.tpm.is_some() || limits.token.tpm.is_some() {
        let input = match input {
            Input::Body(body) => {
                let n = laptime_core::estimate::input_tokens(body);
                pending.admitted_input_tokens = Some(n);
                n
            }
            Input::Bytes(n) => laptime_core::cost::estimate_input_tokens(n),
        };
        let output = head
            .shape
            .max_output_tokens
            .unwrap_or(live.config.limits.output_estimate_tokens);
        input.saturating_add(output)
    } else {
        0
    };
    let ask = crate::limits::Ask {
        workspace_id: &principal.workspace_id,
        key_id: &principal.key_id,
        limits,
        tokens,
    };
    app.limiter.admit(ask, at).await
}

/// The byte budget for request bodies is spent by the requests in flight.
pub(crate) fn budget_full() -> GatewayError {
    GatewayError::new(
        ErrorClass::Overloaded,
        "the gateway holds as many request bodies as it can now; retry shortly",
    )
}

/// A Responses request that continues a stored response (`previous_response_id`) goes only to
/// the channel and key that hold it, untranslated; an id the workspace did not create is a
/// 404. When no candidate speaks Responses, translation refuses the field itself (a stored
/// conversation cannot be carried to another dialect).
async fn previous_response(
    app: &App,
    principal: &Principal,
    previous: Option<&str>,
    candidates: &mut Vec<Route>,
) -> Result<(), GatewayError> {
    let Some(id) = previous else {
        return Ok(());
    };
    let responses = |r: &Route| r.upstream == Dialect::Responses;
    if !candidates.iter().any(responses) {
        return Ok(());
    }
    let unknown = || {
        GatewayError::new(
            ErrorClass::UnknownObject,
            format!("Previous response with id '{id}' not found."),
        )
    };
    if !laptime_core::endpoint::object_id_ok(id) {
        return Err(unknown());
    }
    let found = app
        .affinity
        .find(&principal.workspace_id, id)
        .await
        .map_err(|e| e.error(id))?;
    let p = match found {
        Some(p) if p.kind == laptime_core::endpoint::ObjectKind::Response => p,
        _ => return Err(unknown()),
    };
    candidates.retain(|r| responses(r) && r.channel.name == p.channel && !r.context_fallback);
    for r in candidates.iter_mut() {
        r.key_index = p.key_index.and_then(|k| usize::try_from(k).ok());
    }
    if candidates.is_empty() {
        return Err(GatewayError::new(
            ErrorClass::UnknownModel,
            format!(
                "the previous response lives on channel {:?}, which does not serve this model",
                p.channel
            ),
        ));
    }
    Ok(())
}

/// What routing decided.
struct Routed<'a> {
    candidates: Vec<Route>,
    policy: &'a RouteConfig,
}

/// Routing: model + dialect + the principal's group → the ordered candidates and the route's
/// policy, timed as `distribution`.
fn route<'a>(
    app: &App,
    live: &'a Live,
    pending: &mut Pending,
    principal: &Principal,
    head: &RequestHead,
) -> Result<Routed<'a>, GatewayError> {
    let started = Instant::now();
    let group = app.group_of(principal);
    let now_us = crate::clock::now_unix_us();
    let mut candidates = live
        .router
        .candidates(pending.dialect, group, &head.model, now_us);
    let policy = live.config.route_for(&head.model);
    let primaries = candidates.len();
    if let Some(larger) = &policy.context_fallback {
        let fallback = live
            .router
            .candidates(pending.dialect, group, larger, now_us);
        candidates.extend(fallback.into_iter().map(|mut r| {
            r.context_fallback = true;
            r
        }));
    }
    pending.marks.distribution = Some(pending.since(started));
    pending.group = Some(group.to_string());
    if primaries == 0 {
        return Err(GatewayError::new(
            ErrorClass::UnknownModel,
            format!(
                "model {:?} is not served for {} requests in group {group:?}",
                head.model,
                pending.dialect.path()
            ),
        ));
    }
    Ok(Routed { candidates, policy })
}

/// The body each candidate is sent, one per (dialect, upstream model) the candidates need.
struct Bodies {
    bodies: Vec<UpstreamBody>,
    /// A Chat client asked for the usage chunk (`stream_options.include_usage`).
    client_wants_usage_chunk: bool,
}

struct UpstreamBody {
    dialect: Dialect,
    model: String,
    body: Bytes,
    /// Client fields the translation left out on purpose.
    omitted: Vec<String>,
    translated: bool,
}

impl Bodies {
    fn find(&self, dialect: Dialect, model: &str) -> Option<&UpstreamBody> {
        self.bodies
            .iter()
            .find(|b| b.dialect == dialect && b.model == model)
    }

    fn any_translated(&self) -> bool {
        self.bodies.iter().any(|b| b.translated)
    }

    fn body_for(&self, route: &Route) -> Bytes {
        self.find(route.upstream, &route.upstream_model)
            .map(|b| b.body.clone())
            .unwrap_or_default()
    }
}

/// Translation: each candidate's body — the client's bytes (the model spliced in when the
/// channel maps it) when the channel speaks the client's dialect, else the request translated
/// into the channel's. A candidate the request cannot be carried to is passed over; when none
/// is left, the client is told which field, in its own dialect.
fn translate(
    pending: &Pending,
    (policy, head): (&RouteConfig, &RequestHead),
    body: &Bytes,
    candidates: Vec<Route>,
    (budget, held): (&BodyBudget, &mut Held),
) -> Result<(Vec<Route>, Bodies), GatewayError> {
    let reasoning = policy.translation.reasoning_budgets;
    let default_max_tokens = policy.translation.max_tokens_default();
    let mut bodies = Bodies {
        bodies: Vec::new(),
        client_wants_usage_chunk: false,
    };
    let mut refused: Option<RequestError> = None;
    let mut kept = Vec::with_capacity(candidates.len());
    for route in candidates {
        if bodies.find(route.upstream, &route.upstream_model).is_none() {
            let translated = if route.upstream == pending.dialect {
                Ok((upstream_body(body, head, &route), Vec::new()))
            } else {
                let opts = RequestOptions {
                    upstream_model: &route.upstream_model,
                    stream: head.stream,
                    default_max_tokens,
                    reasoning: &reasoning,
                    pass_through: route.channel.pass_through(),
                    prefill: None,
                };
                translate_request(pending.dialect, route.upstream, body, &opts).map(|t| {
                    bodies.client_wants_usage_chunk = t.client_wants_usage_chunk;
                    let omitted = t.omitted.into_iter().map(|o| o.field).collect();
                    (Bytes::from(t.body), omitted)
                })
            };
            match translated {
                Ok((b, omitted)) => {
                    // A body derived from the client's is held as long as the client's is.
                    let derived =
                        route.upstream != pending.dialect || route.upstream_model != head.model;
                    if derived && budget.take(b.len(), held).is_err() {
                        return Err(budget_full());
                    }
                    bodies.bodies.push(UpstreamBody {
                        dialect: route.upstream,
                        model: route.upstream_model.clone(),
                        body: b,
                        omitted,
                        translated: route.upstream != pending.dialect,
                    });
                }
                Err(e) => {
                    tracing::debug!(channel = %route.channel.name, error = %e, "request not translatable for this channel");
                    refused.get_or_insert(e);
                    continue;
                }
            }
        }
        kept.push(route);
    }
    if kept.iter().all(|r| r.context_fallback) {
        let message = refused.map_or_else(
            || "no channel can take this request".into(),
            |e| e.message(),
        );
        return Err(GatewayError::new(ErrorClass::BadRequest, message));
    }
    Ok((kept, bodies))
}

enum Lookup {
    /// An exact repeat: answered from memory, with no upstream call.
    Hit(CachedAnswer),
    /// Where to keep the answer, if the route caches.
    Miss(StoreIn),
}

/// The route's response cache, unless the client asked to skip it.
async fn cache_lookup(
    live: &Live,
    (dialect, head): (Dialect, &RequestHead),
    policy: &RouteConfig,
    headers: &HeaderMap,
    principal: &Principal,
    body: &[u8],
) -> Lookup {
    let Some(cache) = live.caches.get(&policy.model) else {
        return Lookup::Miss(None);
    };
    if skips_cache(headers) {
        return Lookup::Miss(None);
    }
    // The target, not only the dialect: Gemini's model and stream-ness are in it, not the body.
    let target = dialect.target(&head.model, head.stream);
    let Some(key) = cache::key(&principal.workspace_id, &target, body) else {
        return Lookup::Miss(None);
    };
    match cache.lookup(&key).await {
        Some(hit) => Lookup::Hit(hit),
        None => Lookup::Miss(Some((cache.clone(), key))),
    }
}

/// The upstream body for `route`: the client's bytes, with the model name spliced in place when
/// the channel maps it.
fn upstream_body(body: &Bytes, head: &RequestHead, route: &Route) -> Bytes {
    match head.model_span {
        Some(span) if route.upstream_model != head.model => {
            ingress::splice_model(body, span, &route.upstream_model)
        }
        // Unmapped, or a Gemini call, whose upstream model goes in the URL.
        _ => body.clone(),
    }
}

/// `Cache-Control: no-cache` (or `no-store`) from the client skips the response cache.
fn skips_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(http::header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|d| {
            matches!(
                d.trim().to_ascii_lowercase().as_str(),
                "no-cache" | "no-store"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_model_call_is_a_post_at_exactly_its_dialects_path() {
        let post = http::Method::POST;
        assert_eq!(
            model_call(&post, "/v1/chat/completions"),
            Some(Dialect::Chat)
        );
        assert_eq!(model_call(&post, "/v1/responses"), Some(Dialect::Responses));
        assert_eq!(model_call(&post, "/v1/messages"), Some(Dialect::Messages));
        assert_eq!(model_call(&http::Method::GET, "/v1/messages"), None);
        for other in [
            "/v1/chat/completions/",
            "/v1/messages/count_tokens",
            "/v1/responses/resp_1",
            "/v1beta/models",
            "/V1/messages",
        ] {
            assert_eq!(model_call(&post, other), None, "{other}");
        }
    }
}
