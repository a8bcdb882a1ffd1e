//! The provider's endpoints besides the model calls — embeddings, moderations, count_tokens,
//! images, audio, files, batches, stored responses — as one request path in the phases of a
//! model call: ingress → auth → admission (the body read whole, or an upload streamed through
//! and never held) → limits → routing (by the object the call names, its model, or the group's
//! channel for objects) → attempts (the strategy over `attempt::dispatch`, failover before the
//! first byte) → respond → record.
//!
//! A JSON answer is read whole (within `max_answer_bytes`): its tokens are recorded, the objects
//! it names are placed on the answering channel, a listing keeps the caller's objects only, and
//! it gets `Server-Timing`. Any other answer (speech audio, a file's content) is relayed as it
//! arrives, its first byte and end stamped where they arrive. None gets in-band timing: none is
//! SSE. The record says which endpoint it was and the bytes in and out.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body as AxumBody;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body::{Body, Frame};
use laptime_core::endpoint::{self, BodyKind, Call, Endpoint, ObjectKind};
use laptime_core::observe::StreamSummary;
use laptime_core::timeline::{ErrorClass, InBandCarrier, Outcome, RequestShape};
use laptime_core::views::push_ms;
use laptime_store::auth::Principal;
use tokio::time::Instant;

use crate::attempt::{AnswerBody, AttemptCtx, EndpointTarget};
use crate::auth::Authenticated;
use crate::budget::{Held, Refusal};
use crate::config::RouteConfig;
use crate::drive::UpstreamBody;
use crate::ingress::{self, RequestHead};
use crate::live::Live;
use crate::observe::{StampedBody, WholeRead, WholeReadError};
use crate::outbody::{OutBody, Upload};
use crate::pipeline;
use crate::record::{Ending, Finisher, Pending};
use crate::respond::{self, GatewayError};
use crate::routing::Route;
use crate::strategy::{self, Plan};
use crate::App;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most objects of one kind a listing is checked against (the caller's newest).
const LISTED_MAX: u32 = 10_000;

/// Serves a call to one of the endpoint routes: a provider endpoint call, or on Gemini's model
/// paths a model call (`:generateContent`); a path whose id no provider could have made is, once
/// the caller is authenticated, an unknown object.
pub async fn serve(app: Arc<App>, req: Request<AxumBody>) -> Response {
    let path = req.uri().path();
    match Call::of(req.method().as_str(), path) {
        Some(call) => handle(app, call, req).await,
        None if path.starts_with("/v1beta/models/") || path.starts_with("/v1/models/") => {
            pipeline::proxy(app, laptime_core::Dialect::Gemini, req).await
        }
        None => no_such_object(app, req).await,
    }
}

/// A path naming an object id that is none of a provider's (`..`, over-long, odd bytes): the
/// caller is authenticated first, then told, and the refusal recorded.
async fn no_such_object(app: Arc<App>, req: Request<AxumBody>) -> Response {
    let (mut parts, _) = req.into_parts();
    let authenticated = match parts.extensions.remove::<Authenticated>() {
        Some(a) => a,
        None => app.auth.check(&parts.headers).await,
    };
    let dialect = laptime_core::Dialect::Chat;
    let live = app.live();
    let (mut finisher, _) =
        pipeline::ingress(&app, &live, dialect, &parts.headers, authenticated.received);
    if let Err(e) = pipeline::authenticate(&mut finisher.pending, authenticated) {
        return pipeline::unread(respond::reject(finisher, e), parts.version);
    }
    let err = GatewayError::new(ErrorClass::UnknownObject, "No such object");
    pipeline::unread(respond::reject(finisher, err), parts.version)
}

/// One endpoint call, phase by phase; its answer carries the rate-limit headers of the limits
/// that applied to it, as a model call's does.
pub async fn handle(app: Arc<App>, call: Call, req: Request<AxumBody>) -> Response {
    let dialect = call.dialect;
    let mut quotas = None;
    let mut resp = handle_limited(app, call, req, &mut quotas).await;
    if let Some(q) = quotas {
        respond::rate_limit_headers(dialect, &q, resp.headers_mut());
    }
    resp
}

async fn handle_limited(
    app: Arc<App>,
    call: Call,
    req: Request<AxumBody>,
    quotas: &mut Option<crate::limits::Quotas>,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let authenticated = match parts.extensions.remove::<Authenticated>() {
        Some(a) => a,
        None => app.auth.check(&parts.headers).await,
    };
    // Read once: this call keeps the configuration it started with, reloads or not.
    let live = app.live();
    let (mut finisher, trace) = pipeline::ingress(
        &app,
        &live,
        call.dialect,
        &parts.headers,
        authenticated.received,
    );
    finisher.pending.exchange.endpoint = call.endpoint;
    let principal = match pipeline::authenticate(&mut finisher.pending, authenticated) {
        Ok(p) => p,
        Err(e) => return pipeline::unread(respond::reject(finisher, e), parts.version),
    };
    finisher.pending.publish();
    let admitted = admit(
        &app,
        &live,
        &mut finisher.pending,
        &call,
        &parts.headers,
        body,
    )
    .await;
    let admitted = match admitted {
        Ok(a) => a,
        Err(e) => return pipeline::unread(respond::reject(finisher, e), parts.version),
    };
    let head = RequestHead {
        model: admitted.by.model().unwrap_or_default().to_string(),
        model_span: None,
        stream: false,
        shape: RequestShape::default(),
        previous_response_id: None,
        include_usage: false,
    };
    let input = match &admitted.sent {
        Sent::Held(bytes) if !bytes.is_empty() => pipeline::Input::Body(bytes),
        _ => pipeline::Input::Bytes(finisher.pending.body_bytes.unwrap_or(0)),
    };
    if let Err(refused) =
        pipeline::limit(&app, &live, &mut finisher.pending, &principal, &head, input).await
    {
        return respond::over_limit(finisher, &refused);
    }
    *quotas = finisher.pending.admission.as_ref().map(|t| t.quotas());
    let (candidates, policy) = match route(
        &app,
        &live,
        &mut finisher.pending,
        &principal,
        &call,
        &admitted.by,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return respond::reject(finisher, e),
    };
    finisher.pending.publish();
    let target = EndpointTarget {
        method: parts.method.clone(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_string(), |p| p.as_str().to_string()),
        gemini_verb: gemini_verb(&call, parts.uri.path()),
    };
    let ctx = AttemptCtx {
        app: &app,
        live: &live,
        dialect: call.dialect,
        client_answer: None,
        stream: false,
        client_headers: &parts.headers,
        trace: trace.span,
        t0: finisher.pending.t0,
        timeouts: &policy.timeouts,
        endpoint: Some(&target),
        usage_asked: true,
    };
    let sent = &admitted.sent;
    let model_at = admitted.model_at;
    let body_for = |route: &Route| sent.body_for(route, &head.model, model_at);
    let plan = Plan {
        candidates,
        policy: &policy,
        body_for: &body_for,
    };
    let won = strategy::run(&ctx, &mut finisher.pending, plan).await;
    if let Sent::Upload { counted, .. } = &admitted.sent {
        finisher.pending.body_bytes = usize::try_from(counted.load(Ordering::Relaxed)).ok();
    }
    let answer = match won {
        Ok(won) => won.answer,
        Err(e) => return respond::failed(finisher, e),
    };
    drop(admitted.held);
    let total_at = finisher.pending.t0 + Duration::from_millis(policy.timeouts.total_ms);
    respond(
        &app,
        &live,
        finisher,
        answer,
        (&call, &parts.headers),
        total_at,
    )
    .await
}

/// What routes an endpoint call.
#[derive(Debug, Clone, PartialEq, Eq)]
enum By {
    /// The object the path (or a batch's `input_file_id`) names lives on one channel.
    Object(ObjectKind, String),
    Model(String),
    /// Nothing names a model: the group's channel for objects.
    NoModel,
}

impl By {
    fn model(&self) -> Option<&str> {
        match self {
            By::Model(m) => Some(m),
            By::Object(..) | By::NoModel => None,
        }
    }
}

/// The request body as it goes upstream: held bytes (given to every attempt), or an upload
/// that can be sent once.
enum Sent {
    Held(Bytes),
    Upload {
        upload: Mutex<Option<Upload>>,
        counted: Arc<AtomicU64>,
    },
}

impl Sent {
    fn body_for(&self, route: &Route, model: &str, model_at: Option<ModelAt>) -> OutBody {
        match self {
            // A channel that maps the model gets its own name for it.
            Sent::Held(bytes) => match model_at.filter(|_| route.upstream_model != model) {
                Some(ModelAt::Json(span)) => {
                    OutBody::full(ingress::splice_model(bytes, span, &route.upstream_model))
                }
                Some(ModelAt::Form((start, end))) => {
                    let mut out = Vec::with_capacity(bytes.len() + route.upstream_model.len());
                    out.extend_from_slice(&bytes[..start]);
                    out.extend_from_slice(route.upstream_model.as_bytes());
                    out.extend_from_slice(&bytes[end..]);
                    OutBody::full(Bytes::from(out))
                }
                None => OutBody::full(bytes.clone()),
            },
            // One attempt only (see `route`): a second would find it taken.
            Sent::Upload { upload, .. } => upload
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .map_or_else(OutBody::empty, OutBody::Upload),
        }
    }
}

struct Admitted {
    sent: Sent,
    /// The body's bytes count against the gateway's budget until the answer is had.
    held: Held,
    by: By,
    /// Where the model's name is in the body, for a channel that maps it.
    model_at: Option<ModelAt>,
}

/// Where a body names its model: a JSON string (quotes included), or a form field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelAt {
    Json((usize, usize)),
    Form((usize, usize)),
}

/// Admission: the body, within the size limit and the byte budget (timed as `body_read`), and
/// what routes the call. An upload is not read here: it streams through to the upstream.
async fn admit(
    app: &App,
    live: &Live,
    pending: &mut Pending,
    call: &Call,
    headers: &HeaderMap,
    body: AxumBody,
) -> Result<Admitted, GatewayError> {
    let max = live.config.server.max_body_bytes;
    let path_object = call.object.clone().map(|(k, id)| By::Object(k, id));
    let path_model = call.path_model.clone().map(By::Model);
    match call.body {
        BodyKind::Empty => {
            pending.body_bytes = Some(0);
            let by = path_object.or(path_model).unwrap_or(By::NoModel);
            Ok(Admitted {
                sent: Sent::Held(Bytes::new()),
                held: Held::default(),
                by,
                model_at: None,
            })
        }
        BodyKind::Upload => {
            let declared = headers
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
            if declared.is_some_and(|n| n > max as u64) {
                return Err(too_large(max));
            }
            let (upload, counted) = Upload::new(body, max as u64);
            Ok(Admitted {
                sent: Sent::Upload {
                    upload: Mutex::new(Some(upload)),
                    counted,
                },
                held: Held::default(),
                by: By::NoModel,
                model_at: None,
            })
        }
        BodyKind::Json | BodyKind::Form => {
            let started = Instant::now();
            let read = app.body_budget.read(body, max).await;
            pending.marks.body_read = Some(pending.since(started));
            let (bytes, held) = read.map_err(|r| match r {
                Refusal::TooLarge { limit } => too_large(limit),
                Refusal::BudgetFull => pipeline::budget_full(),
                Refusal::Unreadable => {
                    GatewayError::new(ErrorClass::BadRequest, "the request body could not be read")
                }
            })?;
            pending.body_bytes = Some(bytes.len());
            let (by, model_at) = match call.body {
                BodyKind::Form => match form_model(headers, &bytes) {
                    Some((model, span)) => (By::Model(model), Some(ModelAt::Form(span))),
                    None => (By::NoModel, None),
                },
                _ => json_routing(call, &bytes)?,
            };
            let by = path_object.or(path_model).unwrap_or(by);
            pending.model = by.model().map(str::to_string);
            Ok(Admitted {
                sent: Sent::Held(bytes),
                held,
                by,
                model_at,
            })
        }
    }
}

fn too_large(limit: usize) -> GatewayError {
    GatewayError::new(
        ErrorClass::PayloadTooLarge,
        format!("request body is over the {limit}-byte limit"),
    )
}

/// A JSON body's `model` (with its place, for a channel that maps it), or for a batch the input
/// file it names.
fn json_routing(call: &Call, bytes: &[u8]) -> Result<(By, Option<ModelAt>), GatewayError> {
    if call.endpoint == Endpoint::Batches {
        #[derive(serde::Deserialize)]
        struct Batch<'a> {
            #[serde(borrow)]
            input_file_id: Option<&'a str>,
        }
        let batch: Batch<'_> = serde_json::from_slice(bytes).map_err(|e| {
            GatewayError::new(
                ErrorClass::BadRequest,
                format!("the body is not a JSON object: {e}"),
            )
        })?;
        let Some(id) = batch.input_file_id.filter(|id| endpoint::object_id_ok(id)) else {
            return Err(GatewayError::new(
                ErrorClass::BadRequest,
                "a batch needs input_file_id: the id of a file uploaded through this gateway",
            ));
        };
        return Ok((By::Object(ObjectKind::File, id.to_string()), None));
    }
    match ingress::parse_head(bytes) {
        Ok(head) => Ok((By::Model(head.model), head.model_span.map(ModelAt::Json))),
        Err(ingress::BodyProblem::NoModel) => Ok((By::NoModel, None)),
        Err(p) => Err(GatewayError::new(ErrorClass::BadRequest, p.message())),
    }
}

/// The `model` field of a multipart form (an audio transcription, an image edit) and where its
/// value lies in the body: the first field of that name, at most 256 bytes of UTF-8. Read from
/// the bytes as they are (not through a form parser) so that a channel that maps the model can
/// have it replaced in place, every other byte of the upload untouched.
fn form_model(headers: &HeaderMap, body: &[u8]) -> Option<(String, (usize, usize))> {
    let content_type = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    let boundary = multer::parse_boundary(content_type).ok()?;
    let delimiter = format!("\r\n--{boundary}");
    // The first delimiter may open the body without the CRLF the others have.
    let mut pos = memchr::memmem::find(body, &delimiter.as_bytes()[2..])? + delimiter.len() - 2;
    loop {
        if body.get(pos..pos + 2)? != b"\r\n" {
            return None; // `--`: the closing delimiter, no model field.
        }
        let head_start = pos + 2;
        let head_end = head_start + memchr::memmem::find(&body[head_start..], b"\r\n\r\n")?;
        let value_start = head_end + 4;
        let value_end =
            value_start + memchr::memmem::find(&body[value_start..], delimiter.as_bytes())?;
        if names_model(&body[head_start..head_end]) {
            let value = std::str::from_utf8(&body[value_start..value_end]).ok()?;
            let ok = !value.is_empty() && value.len() <= 256;
            return ok.then(|| (value.to_string(), (value_start, value_end)));
        }
        pos = value_end + delimiter.len();
    }
}

/// Whether a form part's headers name it `model` (`Content-Disposition: form-data; name="model"`;
/// a `filename="model"` does not count).
fn names_model(head: &[u8]) -> bool {
    String::from_utf8_lossy(head).lines().any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("content-disposition")
                && value.split(';').any(|p| p.trim() == "name=\"model\"")
        })
    })
}

/// Gemini's `:embedContent` etc., which each channel calls with its own model in the path.
fn gemini_verb(call: &Call, path: &str) -> Option<String> {
    (call.dialect == laptime_core::Dialect::Gemini)
        .then(|| path.rsplit_once(':').map(|(_, verb)| verb.to_string()))
        .flatten()
}

/// Routing: the channel that holds the named object (and its key), or the channels that serve
/// the model to this endpoint's dialect untranslated, or the group's channel for objects;
/// timed as `distribution`. Also the route's policy, fitted to the call: a call that creates or
/// changes an object is never hedged, and an upload (which streams once) gets one attempt.
async fn route(
    app: &App,
    live: &Live,
    pending: &mut Pending,
    principal: &Principal,
    call: &Call,
    by: &By,
) -> Result<(Vec<Route>, RouteConfig), GatewayError> {
    let started = Instant::now();
    let group = app.group_of(principal);
    pending.group = Some(group.to_string());
    let serving =
        |r: &Route| r.channel.serves_endpoints_of(call.dialect) && r.upstream == call.dialect;
    let candidates: Vec<Route> = match by {
        By::Object(kind, id) => {
            vec![placed((app, live), &principal.workspace_id, *kind, id, call).await?]
        }
        By::Model(model) => live
            .router
            .candidates(call.dialect, group, model, crate::clock::now_unix_us())
            .into_iter()
            .filter(serving)
            .collect(),
        By::NoModel => live.router.objects_channels(group, call.dialect),
    };
    pending.marks.distribution = Some(pending.since(started));
    if candidates.is_empty() {
        let what = by.model().map_or_else(
            || "no channel of this group serves calls that name no model".to_string(),
            |m| format!("model {m:?} is not served"),
        );
        return Err(GatewayError::new(
            ErrorClass::UnknownModel,
            format!("{what} for {} in group {group:?}", call.endpoint),
        ));
    }
    let mut policy = live.config.route_for(by.model().unwrap_or("*")).clone();
    if changes_objects(call) {
        policy.hedge = None;
        policy.cache = None;
    }
    if call.body == BodyKind::Upload {
        policy.failover.max_attempts = 1;
    }
    if matches!(
        call.endpoint,
        Endpoint::Images | Endpoint::AudioSpeech | Endpoint::AudioTranscriptions
    ) {
        // These answer their head only once the work is done (an image, a transcript), so
        // the head may come as late as the whole request may take.
        policy.timeouts.headers_ms = policy.timeouts.total_ms;
    }
    Ok((candidates, policy))
}

/// Whether the call creates, changes or deletes a provider object (never hedged: two calls
/// would make two).
fn changes_objects(call: &Call) -> bool {
    match call.method {
        endpoint::Verb::Delete => true,
        endpoint::Verb::Post => matches!(
            call.endpoint,
            Endpoint::Files | Endpoint::Batches | Endpoint::StoredResponses
        ),
        endpoint::Verb::Get => false,
    }
}

/// The route to the channel (and key) that holds `id`, if the caller's workspace created it.
async fn placed(
    (app, live): (&App, &Live),
    workspace_id: &str,
    kind: ObjectKind,
    id: &str,
    call: &Call,
) -> Result<Route, GatewayError> {
    let unknown = || {
        GatewayError::new(
            ErrorClass::UnknownObject,
            format!("No such {} object: {id}", kind.noun()),
        )
    };
    let placement = app
        .affinity
        .find(workspace_id, id)
        .await
        .map_err(|e| e.error(id))?
        .ok_or_else(unknown)?;
    if placement.kind != kind {
        return Err(unknown());
    }
    let channel = live
        .router
        .channels()
        .iter()
        .find(|c| c.name == placement.channel && c.serves_endpoints_of(call.dialect))
        .ok_or_else(|| {
            GatewayError::new(
                ErrorClass::UnknownObject,
                format!(
                    "{id} lives on channel {:?}, which is no longer configured",
                    placement.channel
                ),
            )
        })?;
    Ok(Route::pinned(
        channel,
        call.dialect,
        placement.key_index.and_then(|k| usize::try_from(k).ok()),
    ))
}

/// Respond: a JSON (or error) answer read whole and answered with `Server-Timing`; any other
/// relayed as it arrives.
async fn respond(
    app: &App,
    live: &Live,
    mut finisher: Finisher,
    mut answer: crate::attempt::Answer,
    (call, client_headers): (&Call, &HeaderMap),
    total_at: Instant,
) -> Response {
    answer.committed();
    finisher.hold_inflight(answer.guard);
    let parts = answer.parts;
    let incoming = match answer.body {
        AnswerBody::Whole(incoming) => incoming,
        AnswerBody::Read(read) => {
            return whole(app, finisher, parts, read, (call, answer.start)).await
        }
        // An endpoint that answered server-sent events (speech with `stream_format: sse`):
        // relayed as any stream, observed on the way.
        AnswerBody::Stream(mut body) => {
            let status = parts.status;
            body.commit(
                finisher,
                status.as_u16(),
                respond::wants_trailers(client_headers),
            );
            let mut resp = Response::new(AxumBody::new(body));
            *resp.status_mut() = status;
            respond::relay_headers(&parts.headers, resp.headers_mut());
            return resp;
        }
    };
    let json = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.to_ascii_lowercase().contains("json"));
    if json || !parts.status.is_success() {
        let t0 = finisher.pending.t0;
        let max = live.config.server.max_answer_bytes;
        let read = WholeRead::read(incoming, t0, total_at, max).await;
        return whole(app, finisher, parts, read, (call, answer.start)).await;
    }
    relayed(finisher, parts, incoming, answer.start)
}

/// A whole answer: its tokens, the objects it names, a listing cut to the caller's objects.
async fn whole(
    app: &App,
    mut finisher: Finisher,
    parts: http::response::Parts,
    read: WholeRead,
    (call, start): (&Call, Duration),
) -> Response {
    let mut summary = StreamSummary::whole(read.first_byte, read.end);
    let bytes = match read.bytes {
        Ok(b) if !read.broke => b,
        Ok(_) => {
            let err = GatewayError::new(ErrorClass::BodyError, "the upstream broke off its answer");
            return respond::error(
                finisher,
                &err,
                failure(&err, Outcome::UpstreamError, summary),
            );
        }
        Err(WholeReadError::TooLarge) => {
            let err = GatewayError::new(
                ErrorClass::InvalidBody,
                "the upstream answer is over the gateway's answer limit",
            );
            return respond::error(
                finisher,
                &err,
                failure(&err, Outcome::UpstreamError, summary),
            );
        }
        Err(WholeReadError::Timeout) => {
            let err = GatewayError::new(
                ErrorClass::Timeout,
                "the upstream missed the total deadline",
            );
            let mut ending = failure(&err, Outcome::Timeout, summary);
            ending.timeout_kind = Some(laptime_core::timeline::DeadlineKind::Total);
            return respond::error(finisher, &err, ending);
        }
    };
    let status = parts.status;
    let ok = status.is_success();
    let mut body = bytes;
    if ok {
        summary.tokens = endpoint::tokens_of(call, &body);
        finisher.pending.objects = endpoint::objects_named(call, &body);
        if let Some(kind) = call.lists {
            match own_listing(app, &finisher.pending, kind, &body).await {
                Ok(kept) => body = kept,
                Err(err) => {
                    return respond::error(
                        finisher,
                        &err,
                        failure(&err, Outcome::UpstreamError, summary),
                    )
                }
            }
        }
    }
    let (outcome, class) = if ok {
        (Outcome::Completed, None)
    } else {
        (
            Outcome::UpstreamError,
            ErrorClass::from_status(status.as_u16()).or(Some(ErrorClass::UpstreamStatus5xx)),
        )
    };
    summary.outcome = Some(outcome);
    summary.error_class = class;
    let mut extra = HeaderMap::new();
    let timing =
        respond::server_timing(&finisher.pending.marks, summary.marks.upstream_done, start);
    if let Some(timing) = timing {
        extra.insert(respond::SERVER_TIMING, timing);
        finisher.pending.in_band = InBandCarrier::ServerTiming;
    }
    let ending = Ending {
        status: status.as_u16(),
        outcome,
        error_class: class,
        timeout_kind: None,
        stream: Some(summary),
    };
    respond::buffered(finisher, status, parts.headers, extra, body, ending)
}

/// A listing of the answering channel's objects, cut to those the caller's workspace created.
async fn own_listing(
    app: &App,
    pending: &Pending,
    kind: ObjectKind,
    body: &[u8],
) -> Result<Bytes, GatewayError> {
    let refused = |why: String| {
        GatewayError::new(
            ErrorClass::Internal,
            format!("which objects are this workspace's could not be read: {why}"),
        )
    };
    let (Some(ws), Some(channel)) = (&pending.workspace_id, &pending.channel) else {
        return Err(refused("no workspace or channel".into()));
    };
    let own = app
        .affinity
        .placed(ws, channel, kind, LISTED_MAX)
        .await
        .map_err(|e| refused(e.0))?;
    endpoint::filter_listing(body, &|id| own.contains(id))
        .map(Bytes::from)
        .ok_or_else(|| {
            GatewayError::new(
                ErrorClass::InvalidBody,
                "the upstream's listing is not a list",
            )
        })
}

fn failure(err: &GatewayError, outcome: Outcome, summary: StreamSummary) -> Ending {
    Ending {
        status: err.status().as_u16(),
        outcome,
        error_class: Some(err.class),
        timeout_kind: None,
        stream: Some(summary),
    }
}

/// An answer relayed as it arrives (audio, a file's content): stamped and counted on the way,
/// recorded at its end, when it breaks, or when the client leaves.
fn relayed(
    mut finisher: Finisher,
    parts: http::response::Parts,
    incoming: UpstreamBody,
    start: Duration,
) -> Response {
    let mut own = HeaderMap::new();
    respond::own_headers(&finisher.pending, &mut own);
    if let Some(h) = finisher
        .pending
        .marks
        .upstream_headers
        .and_then(|h| h.checked_sub(start))
    {
        own.insert(
            respond::SERVER_TIMING,
            respond::header_value(&{
                let mut timing = String::from("upstream-headers;dur=");
                push_ms(&mut timing, h);
                timing
            }),
        );
        finisher.pending.in_band = InBandCarrier::ServerTimingHead;
    }
    let status = parts.status;
    let t0 = finisher.pending.t0;
    let body = Relayed {
        inner: StampedBody::new(incoming, t0),
        finisher: Some(finisher),
        status,
        sent: 0,
    };
    let mut resp = Response::new(AxumBody::new(body));
    *resp.status_mut() = status;
    respond::relay_headers(&parts.headers, resp.headers_mut());
    resp.headers_mut().extend(own);
    resp
}

/// See [`relayed`]: records exactly once.
struct Relayed {
    inner: StampedBody<UpstreamBody>,
    finisher: Option<Finisher>,
    status: StatusCode,
    sent: u64,
}

impl Relayed {
    fn finish(&mut self, outcome: Outcome, class: Option<ErrorClass>) {
        let Some(mut finisher) = self.finisher.take() else {
            return;
        };
        finisher.pending.exchange.bytes_out = Some(self.sent);
        let mut summary = StreamSummary::whole(self.inner.first_byte, self.inner.end);
        summary.outcome = Some(outcome);
        summary.error_class = class;
        finisher.finish(Ending {
            status: self.status.as_u16(),
            outcome,
            error_class: class,
            timeout_kind: None,
            stream: Some(summary),
        });
    }
}

impl Body for Relayed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let polled = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &polled {
            Some(Ok(frame)) => {
                if let Some(d) = frame.data_ref() {
                    this.sent += d.len() as u64;
                }
            }
            Some(Err(_)) => this.finish(Outcome::UpstreamClosedEarly, Some(ErrorClass::BodyError)),
            None => this.finish(Outcome::Completed, None),
        }
        Poll::Ready(polled)
    }
}

impl Drop for Relayed {
    fn drop(&mut self) {
        self.finish(Outcome::ClientCancelled, Some(ErrorClass::ClientCancelled));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn call(m: &str, p: &str) -> Call {
        Call::of(m, p).unwrap()
    }

    #[test]
    fn a_batch_routes_by_its_input_file_and_other_json_by_its_model() {
        let batch = call("POST", "/v1/batches");
        let (by, _) = json_routing(
            &batch,
            br#"{"input_file_id":"file-1","endpoint":"/v1/chat/completions"}"#,
        )
        .unwrap();
        assert_eq!(by, By::Object(ObjectKind::File, "file-1".into()));
        assert!(json_routing(&batch, br#"{"endpoint":"x"}"#).is_err());
        let emb = call("POST", "/v1/embeddings");
        let (by, span) = json_routing(&emb, br#"{"model":"e","input":"x"}"#).unwrap();
        assert_eq!(by, By::Model("e".into()));
        assert!(span.is_some());
        let (by, _) = json_routing(
            &call("POST", "/v1/images/generations"),
            br#"{"prompt":"p"}"#,
        )
        .unwrap();
        assert_eq!(by, By::NoModel);
        assert!(json_routing(&emb, b"[1]").is_err());
    }

    #[tokio::test]
    async fn a_forms_model_field_is_found_in_place_and_a_mapped_name_replaces_only_it() {
        let body = Bytes::from_static(
            b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF....\r\n--XB\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--XB--\r\n",
        );
        let mut h = HeaderMap::new();
        h.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=XB"),
        );
        let (model, span) = form_model(&h, &body).unwrap();
        assert_eq!(model, "whisper-1");
        assert_eq!(&body[span.0..span.1], b"whisper-1");
        assert_eq!(form_model(&HeaderMap::new(), &body), None);
        // A channel that maps it gets its own name, every other byte as sent.
        let route_model = "whisper-large";
        let sent = Sent::Held(body.clone());
        let channel = std::sync::Arc::new(crate::routing::Channel::from_config(
            &crate::config::ChannelConfig::default(),
            "http://127.0.0.1:9".into(),
            &|_| None,
        ));
        let mut route = Route::pinned(&channel, laptime_core::Dialect::Chat, None);
        route.upstream_model = route_model.into();
        let OutBody::Full(full) = sent.body_for(&route, &model, Some(ModelAt::Form(span))) else {
            panic!("held bytes")
        };
        let mapped = http_body_util::BodyExt::collect(full)
            .await
            .unwrap()
            .to_bytes();
        let want = String::from_utf8_lossy(&body).replace("whisper-1", route_model);
        assert_eq!(String::from_utf8_lossy(&mapped), want);
        // A file named "model" is not the model field, and a form without one has none.
        let decoy = Bytes::from_static(
            b"--XB\r\nContent-Disposition: form-data; name=\"file\"; filename=\"model\"\r\n\r\nabc\r\n--XB--\r\n",
        );
        assert_eq!(form_model(&h, &decoy), None);
    }

    #[test]
    fn calls_that_change_objects_are_known() {
        assert!(changes_objects(&call("POST", "/v1/files")));
        assert!(changes_objects(&call("POST", "/v1/batches")));
        assert!(!changes_objects(&call("GET", "/v1/files")));
        assert!(!changes_objects(&call("GET", "/v1/files/file-1")));
        assert!(!changes_objects(&call("POST", "/v1/embeddings")));
        assert!(changes_objects(&call("DELETE", "/v1/files/file-1")));
        assert!(changes_objects(&call("POST", "/v1/batches/batch_1/cancel")));
        assert!(!changes_objects(&call("GET", "/v1/responses/resp_1")));
    }
}
