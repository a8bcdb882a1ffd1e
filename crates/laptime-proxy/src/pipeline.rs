//! The request path, in order: ingress → auth → body → routing → attempt → observe → respond →
//! record. Each stage stamps its mark on the pending record; every exit goes through a body that
//! finishes the record exactly once.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body as AxumBody;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Limited};
use laptime_core::classify::{classify_body, StopHint};
use laptime_core::observe::{StreamObserver, StreamSummary};
use laptime_core::timeline::{Attempt, ErrorClass, Hedge, Marks, Outcome};
use laptime_core::usage::UsageAcc;
use laptime_core::views::{ms, upstream_ms};
use laptime_core::Dialect;
use laptime_store::auth::Scope;
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt;
use crate::auth::{AuthFailure, Authenticated};
use crate::cache::{self, CachedAnswer};
use crate::hedge;
use crate::ingress;
use crate::observe::{BufferedBody, ObservedBody, StreamDeadlines};
use crate::record::{Ending, Finisher, Pending};
use crate::respond::{header_value, relay_headers, wants_trailers, GatewayError, REQUEST_ID};
use crate::App;

/// Reads a race winner's stream on to its first effective output (a non-streamed answer is
/// already whole). A miss closes its connection and counts against its channel.
async fn hold_winner_to_first_output(
    mut primed: hedge::Primed,
    dialect: Dialect,
    t0: Instant,
    start: Duration,
    early: hedge::EarlyDeadlines,
) -> Result<hedge::Primed, hedge::Miss> {
    if !hedge::is_sse(primed.response.headers()) {
        return Ok(primed);
    }
    let held = hedge::hold_to_first_output(
        primed.response,
        dialect,
        t0,
        start,
        &mut primed.chunks,
        early,
    )
    .await;
    match held {
        Ok(response) => {
            primed.response = response;
            Ok(primed)
        }
        Err(miss) => {
            primed.channel.circuit_record(true);
            Err(miss)
        }
    }
}

/// Handles one proxied model call.
pub async fn proxy(app: Arc<App>, dialect: Dialect, req: Request<AxumBody>) -> Response {
    // === ingress ===
    let (mut parts, body) = req.into_parts();
    // The router's auth layer authenticated the head and took t0; without that layer (a
    // caller serving this handler alone) authenticate here, so the route is never open.
    let authenticated = match parts.extensions.remove::<Authenticated>() {
        Some(a) => a,
        None => app.auth.check(&parts.headers).await,
    };
    let t0 = authenticated.received;
    let mut pending = Pending::new(
        t0,
        crate::clock::now_unix_us(),
        ingress::request_id(),
        dialect,
    );
    pending.region = app.config.server.region.clone();
    let trace = ingress::trace(
        parts
            .headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok()),
    );
    pending.trace_id = Some(trace.trace_id.clone());
    let finisher = Finisher::new(pending, app.recorder.clone(), app.config.thresholds)
        .with_metrics(app.metrics.clone());

    // === auth ===
    let mut finisher = finisher;
    finisher.pending.marks.auth = Some(laptime_core::timeline::offset(authenticated.took));
    let principal = match authenticated.result {
        Ok(p) => p,
        Err(AuthFailure::Unavailable) => {
            return reject(
                finisher,
                GatewayError::new(ErrorClass::Internal, "credentials could not be checked"),
            )
        }
        Err(AuthFailure::Missing) => {
            return reject(
                finisher,
                GatewayError::new(
                    ErrorClass::Unauthorized,
                    "missing credentials: send Authorization: Bearer <token> or x-api-key",
                ),
            )
        }
        Err(AuthFailure::Invalid) => {
            return reject(
                finisher,
                GatewayError::new(ErrorClass::Unauthorized, "invalid or revoked token"),
            )
        }
    };
    finisher.pending.workspace_id = Some(principal.workspace_id.clone());
    finisher.pending.key_id = Some(principal.key_id.clone());
    if !principal.scope.allows(Scope::Proxy) {
        return reject(
            finisher,
            GatewayError::new(
                ErrorClass::Forbidden,
                format!("a {} token cannot call models", principal.scope.as_str()),
            ),
        );
    }

    // === body ===
    let started = Instant::now();
    let read = Limited::new(body, app.config.server.max_body_bytes)
        .collect()
        .await;
    finisher.pending.marks.body_read = Some(finisher.pending.since(started));
    let body: Bytes = match read {
        Ok(c) => c.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            let limit = app.config.server.max_body_bytes;
            return reject(
                finisher,
                GatewayError::new(
                    ErrorClass::PayloadTooLarge,
                    format!("request body is over the {limit}-byte limit"),
                ),
            );
        }
        Err(_) => {
            return reject(
                finisher,
                GatewayError::new(ErrorClass::BadRequest, "the request body could not be read"),
            );
        }
    };
    let head = match ingress::parse_head(&body) {
        Ok(h) => h,
        Err(p) => {
            return reject(
                finisher,
                GatewayError::new(ErrorClass::BadRequest, p.message()),
            )
        }
    };
    finisher.pending.model = Some(head.model.clone());
    finisher.pending.stream = head.stream;
    finisher.pending.shape = head.shape.clone();

    // === routing ===
    let started = Instant::now();
    let group = app.group_of(&principal);
    let candidates =
        app.router
            .candidates(dialect, group, &head.model, crate::clock::now_unix_us());
    let policy = app.config.route_for(&head.model);
    finisher.pending.marks.distribution = Some(finisher.pending.since(started));
    finisher.pending.group = Some(group.to_string());
    if candidates.is_empty() {
        return reject(
            finisher,
            GatewayError::new(
                ErrorClass::UnknownModel,
                format!(
                    "model {:?} is not served for {} requests in group {group:?}",
                    head.model,
                    dialect.path()
                ),
            ),
        );
    }

    // === cache: an exact repeat is answered from memory, with no upstream call ===
    let cache = app.caches.get(&policy.model).cloned();
    let cache_key = match &cache {
        Some(_) if !skips_cache(&parts.headers) => {
            cache::key(&principal.workspace_id, dialect, &body)
        }
        _ => None,
    };
    if let (Some(c), Some(k)) = (&cache, &cache_key) {
        if let Some(hit) = c.get(k) {
            return cached(finisher, hit);
        }
    }
    let store_in = cache.zip(cache_key);

    let max_attempts = policy.failover.max_attempts.max(1) as usize;
    let headers_deadline = Duration::from_millis(policy.timeouts.headers_ms);
    let early = hedge::EarlyDeadlines {
        first_event: Duration::from_millis(policy.timeouts.first_event_ms),
        first_output: Duration::from_millis(policy.timeouts.first_output_ms),
    };
    let mut failure: Option<(ErrorClass, Option<&'static str>)> = None;
    let mut won = None;
    let mut made = 0;
    let mut replay: Vec<(Duration, Bytes)> = Vec::new();
    let mut candidates = candidates;
    let body_for = |route: &crate::routing::Route| {
        if route.upstream_model == head.model {
            body.clone()
        } else {
            ingress::splice_model(&body, head.model_span, &route.upstream_model)
        }
    };

    // === hedge: the first two candidates race to their first event ===
    if let Some(h) = policy.hedge.clone() {
        if max_attempts >= 2
            && candidates.len() >= 2
            && candidates[0].channel.circuit_available()
            && candidates[1].channel.circuit_available()
        {
            let total = app.hedge_requests.fetch_add(1, Ordering::Relaxed) + 1;
            let primary = candidates.remove(0);
            let second = candidates.remove(0);
            let delay = match h.after_ms {
                Some(ms) => Some(Duration::from_millis(ms)),
                None => primary.channel.first_event_p95(),
            };
            let within_budget =
                (app.hedges_sent.load(Ordering::Relaxed) as f64) < h.budget * total as f64;
            let race = hedge::Race {
                app: &app,
                dialect,
                headers: &parts.headers,
                traceparent: &trace.traceparent,
                t0: finisher.pending.t0,
                headers_deadline,
                early,
                connect_ms: policy.timeouts.connect_ms,
            };
            primary.channel.circuit_acquire();
            made += 1;
            let p_start = finisher.pending.offset(Instant::now());
            finisher.pending.marks.upstream_start = Some(p_start);
            let p_prog = hedge::progress(&primary.channel, "primary", p_start);
            let mut p_fut = Box::pin(race.run(&primary, body_for(&primary), p_prog.clone()));
            let before_hedge = match delay.filter(|_| within_budget) {
                Some(d) => tokio::select! {
                    r = &mut p_fut => Some(r),
                    _ = tokio::time::sleep(d) => None,
                },
                None => Some((&mut p_fut).await),
            };
            let (result, hedged, winner, loser) = match before_hedge {
                Some(r) => (r, Hedge::None, p_prog.clone(), None),
                None => {
                    app.hedges_sent.fetch_add(1, Ordering::Relaxed);
                    second.channel.circuit_acquire();
                    made += 1;
                    let h_start = finisher.pending.offset(Instant::now());
                    let h_prog = hedge::progress(&second.channel, "hedge", h_start);
                    let mut h_fut = Box::pin(race.run(&second, body_for(&second), h_prog.clone()));
                    let first = tokio::select! {
                        r = &mut p_fut => (r, true),
                        r = &mut h_fut => (r, false),
                    };
                    // The loser's future is dropped here, which closes its connection.
                    match first {
                        (Ok(p), true) => {
                            (Ok(p), Hedge::Primary, p_prog.clone(), Some(h_prog.clone()))
                        }
                        (Ok(p), false) => {
                            (Ok(p), Hedge::Hedge, h_prog.clone(), Some(p_prog.clone()))
                        }
                        (Err(_), true) => (
                            h_fut.await,
                            Hedge::Hedge,
                            h_prog.clone(),
                            Some(p_prog.clone()),
                        ),
                        (Err(_), false) => (
                            (&mut p_fut).await,
                            Hedge::Primary,
                            p_prog.clone(),
                            Some(h_prog.clone()),
                        ),
                    }
                }
            };
            drop(p_fut);
            if hedged == Hedge::None {
                // No hedge went out: the second candidate is still a failover candidate.
                candidates.insert(0, second);
            }
            // The winner has its first event; while another candidate could take over, hold the
            // client until its first output too.
            let result = match result {
                Ok(primed) if made < max_attempts && !candidates.is_empty() => {
                    let start = hedge::snapshot(&winner)
                        .and_then(|a| a.start)
                        .unwrap_or_default();
                    hold_winner_to_first_output(primed, dialect, finisher.pending.t0, start, early)
                        .await
                        .map_err(|(class, kind, at)| {
                            if let Ok(mut a) = winner.lock() {
                                a.error_class = Some(class);
                                a.end = Some(at);
                            }
                            (class, kind)
                        })
                }
                other => other,
            };
            let now = finisher.pending.offset(Instant::now());
            let mut lost = loser.and_then(|l| hedge::snapshot(&l));
            if let Some(l) = lost.as_mut() {
                l.end.get_or_insert(now);
            }
            let mut win = hedge::snapshot(&winner);
            match result {
                Ok(primed) => {
                    if let Some(w) = win.as_mut() {
                        w.won = true;
                        w.end = None;
                    }
                    finisher.pending.hedge = hedged;
                    finisher.pending.marks.upstream_headers = win.as_ref().and_then(|w| w.headers);
                    finisher.pending.channel = Some(primed.channel.name.clone());
                    finisher.pending.provider = Some(primed.channel.provider.as_str().to_string());
                    finisher.pending.channel_inflight = Some(primed.inflight);
                    let t2 = finisher.pending.marks.upstream_headers.unwrap_or(now);
                    finisher.hold_inflight(primed.guard);
                    replay = primed.chunks;
                    won = Some((primed.response, p_start, t2, primed.channel));
                }
                Err(f) => failure = Some(f),
            }
            let mut both: Vec<Attempt> = lost.into_iter().chain(win).collect();
            both.sort_by_key(|a| a.start);
            finisher.pending.attempts.extend(both);
        }
    }

    // === attempt: failover to the next candidate while nothing has reached the client ===
    // Before the last candidate, a streamed answer is read to its first effective output before
    // its head is relayed, so a stall before the first event or the first output can still fail
    // over; the last candidate is relayed at once, as there is nothing left to fail over to.
    let n_candidates = candidates.len();
    for (c, route) in candidates.into_iter().enumerate() {
        if won.is_some() || made == max_attempts {
            break;
        }
        let channel = route.channel.clone();
        // An ejected channel is passed over without an attempt.
        if !channel.circuit_acquire() {
            failure.get_or_insert((ErrorClass::CircuitOpen, None));
            continue;
        }
        let i = made;
        made += 1;
        let last = made == max_attempts || c + 1 == n_candidates;
        finisher.pending.channel = Some(channel.name.clone());
        finisher.pending.provider = Some(channel.provider.as_str().to_string());
        let upstream_body = body_for(&route);
        let request = match attempt::build_request(
            &channel,
            dialect,
            upstream_body,
            &parts.headers,
            &trace.traceparent,
        ) {
            Ok(r) => r,
            Err(e) => return reject(finisher, e),
        };
        let (guard, inflight) = channel.enter();
        let start = finisher.pending.offset(Instant::now());
        finisher.pending.marks.upstream_start = Some(start);
        finisher.pending.channel_inflight = Some(inflight);
        let sent = tokio::time::timeout(
            headers_deadline,
            app.client_for(policy.timeouts.connect_ms).request(request),
        )
        .await;
        let t2 = finisher.pending.offset(Instant::now());
        let mut attempt = Attempt {
            channel: channel.name.clone(),
            role: if i == 0 { "primary" } else { "failover" }.into(),
            won: false,
            status: None,
            error_class: None,
            start: Some(start),
            headers: None,
            first_byte: None,
            end: Some(t2),
        };
        let response = match sent {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                channel.circuit_record(true);
                let class = attempt::classify_error(&e);
                tracing::debug!(channel = %channel.name, error = %e, "upstream call failed");
                attempt.error_class = Some(class);
                finisher.pending.attempts.push(attempt);
                failure = Some((class, None));
                if class.retryable() {
                    continue;
                }
                break;
            }
            Err(_) => {
                channel.circuit_record(true);
                attempt.error_class = Some(ErrorClass::Timeout);
                finisher.pending.attempts.push(attempt);
                failure = Some((ErrorClass::Timeout, Some("headers")));
                continue;
            }
        };
        let status = response.status().as_u16();
        let reads_ahead =
            !last && response.status().is_success() && hedge::is_sse(response.headers());
        if !reads_ahead {
            channel.circuit_record(status == 429 || status >= 500);
        }
        if let Some(wait) = retry_after(response.headers()) {
            channel.cool_down_until(crate::clock::now_unix_us() + wait);
        }
        attempt.status = Some(status);
        attempt.headers = Some(t2);
        if !last && policy.failover.on_status.contains(&status) {
            // Dropped unread: the connection closes instead of going back to the pool.
            drop(response);
            attempt.error_class = ErrorClass::from_status(status);
            failure = attempt.error_class.map(|c| (c, None));
            finisher.pending.attempts.push(attempt);
            continue;
        }
        let mut response = response;
        if reads_ahead {
            let t0 = finisher.pending.t0;
            let held =
                hedge::hold_to_first_output(response, dialect, t0, start, &mut replay, early).await;
            channel.circuit_record(held.is_err());
            attempt.first_byte = replay.first().map(|(at, _)| *at);
            match held {
                Ok(r) => response = r,
                Err((class, kind, at)) => {
                    // Nothing reached the client: the body was dropped (its connection
                    // closed) and the next candidate gets the request.
                    attempt.error_class = Some(class);
                    attempt.end = Some(at);
                    failure = Some((class, kind));
                    finisher.pending.attempts.push(attempt);
                    replay.clear();
                    continue;
                }
            }
        }
        attempt.end = None;
        attempt.won = true;
        finisher.pending.attempts.push(attempt);
        finisher.pending.marks.upstream_headers = Some(t2);
        finisher.hold_inflight(guard);
        won = Some((response, start, t2, channel));
        break;
    }
    let Some((response, start, t2, channel)) = won else {
        let (class, timeout_kind) = failure.unwrap_or((ErrorClass::Internal, None));
        let err = GatewayError::new(
            class,
            match timeout_kind {
                Some(kind) => format!("no upstream channel answered within the {kind} deadline"),
                None => format!("no upstream channel could be reached ({})", class.as_str()),
            },
        );
        let status = err.status();
        let ending = Ending {
            status: status.as_u16(),
            outcome: if matches!(class, ErrorClass::ConnectTimeout | ErrorClass::Timeout) {
                Outcome::Timeout
            } else {
                Outcome::UpstreamError
            },
            error_class: Some(class),
            timeout_kind: timeout_kind
                .or((class == ErrorClass::ConnectTimeout).then_some("connect")),
            stream: None,
        };
        return buffered(
            finisher,
            status,
            HeaderMap::new(),
            json_headers(),
            err.body(dialect),
            ending,
        );
    };
    let is_sse = hedge::is_sse(response.headers());
    let (up_parts, up_body) = response.into_parts();
    let status = up_parts.status;

    // === observe + respond ===
    if status.is_success() && is_sse {
        let mut obs = StreamObserver::new(dialect, Some(start));
        obs.set_headers(t2);
        let trailers = wants_trailers(&parts.headers);
        let request_id = finisher.pending.request_id.clone();
        let t = &policy.timeouts;
        // First event and first output count from the answering attempt's dispatch, so an
        // attempt after a failover gets the whole setting; `total` counts from t0.
        let deadlines = StreamDeadlines {
            dialect,
            first_event: start + early.first_event,
            first_output: start + early.first_output,
            idle: Duration::from_millis(t.idle_ms),
            progress: Duration::from_millis(t.progress_ms),
            total: Duration::from_millis(t.total_ms),
        };
        let content_type = up_parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut finisher = finisher;
        finisher.pending.unobserved = !app.config.server.observe;
        let mut body = ObservedBody::new(up_body, obs, finisher, status.as_u16(), trailers)
            .with_deadlines(deadlines);
        if let Some((c, k)) = store_in {
            body = body.with_capture(c, k, content_type);
        }
        if !app.config.server.observe {
            body = body.unobserved();
        }
        let body = body.replay(replay);
        let mut resp = Response::new(AxumBody::new(body));
        *resp.status_mut() = status;
        relay_headers(&up_parts.headers, resp.headers_mut());
        resp.headers_mut()
            .insert(REQUEST_ID, header_value(&request_id));
        if trailers {
            resp.headers_mut().insert(
                http::header::TRAILER,
                HeaderValue::from_static(
                    "X-Laptime-Upstream-Ms, X-Laptime-TTFT-Ms, X-Laptime-Cached-Tokens, X-Laptime-Cache-Write-Tokens, X-Laptime-Hedge",
                ),
            );
        }
        return resp;
    }

    // A whole answer: read it, stamping as the bytes arrive, then answer with Server-Timing.
    let mut summary = StreamSummary {
        marks: Marks::default(),
        outcome: None,
        error_class: None,
        tokens: Default::default(),
        event_count: 0,
        text_delta_count: 0,
    };
    let mut buf = Vec::new();
    let mut up_body = up_body;
    let total = finisher.pending.t0 + Duration::from_millis(policy.timeouts.total_ms);
    let read_ok = loop {
        let Ok(frame) = tokio::time::timeout_at(total, up_body.frame()).await else {
            let err = GatewayError::new(
                ErrorClass::Timeout,
                "the upstream missed the total deadline",
            );
            let status = err.status();
            let ending = Ending {
                status: status.as_u16(),
                outcome: Outcome::Timeout,
                error_class: Some(ErrorClass::Timeout),
                timeout_kind: Some("total"),
                stream: Some(summary),
            };
            return buffered(
                finisher,
                status,
                HeaderMap::new(),
                json_headers(),
                err.body(dialect),
                ending,
            );
        };
        match frame {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if !data.is_empty() {
                        summary
                            .marks
                            .first_byte
                            .get_or_insert(finisher.pending.offset(Instant::now()));
                        buf.extend_from_slice(&data);
                    }
                }
            }
            Some(Err(_)) => break false,
            None => break true,
        }
    };
    summary.marks.upstream_done = Some(finisher.pending.offset(Instant::now()));
    let body_summary = classify_body(dialect, &buf);
    let mut usage = UsageAcc::new(dialect);
    usage.apply(&body_summary.usage);
    summary.tokens = usage.tokens();
    summary.text_delta_count = u32::from(body_summary.has_text);
    let (outcome, error_class) = if !read_ok {
        (Outcome::UpstreamClosedEarly, Some(ErrorClass::BodyError))
    } else if let Some(class) = ErrorClass::from_status(status.as_u16()) {
        (Outcome::UpstreamError, Some(class))
    } else if body_summary.error {
        (Outcome::UpstreamError, Some(ErrorClass::StreamError))
    } else if matches!(
        body_summary.stop,
        Some(StopHint::Length | StopHint::ContentFilter)
    ) {
        (Outcome::Incomplete, None)
    } else {
        (Outcome::Completed, None)
    };
    summary.outcome = Some(outcome);
    summary.error_class = error_class;
    if !read_ok {
        let err = GatewayError::new(
            ErrorClass::BodyError,
            format!("upstream channel {:?} broke off its answer", channel.name),
        );
        let status = err.status();
        let ending = Ending {
            status: status.as_u16(),
            outcome,
            error_class,
            timeout_kind: None,
            stream: Some(summary),
        };
        return buffered(
            finisher,
            status,
            HeaderMap::new(),
            json_headers(),
            err.body(dialect),
            ending,
        );
    }
    let mut marks = finisher.pending.marks;
    marks.upstream_done = summary.marks.upstream_done;
    let mut extra = HeaderMap::new();
    if let Some(up) = upstream_ms(&marks) {
        let mut timing = format!("upstream;dur={up}");
        if let Some(h) = marks.upstream_headers.and_then(|h| h.checked_sub(start)) {
            timing.push_str(&format!(", upstream-headers;dur={}", ms(h)));
        }
        extra.insert("server-timing", header_value(&timing));
    }
    let ending = Ending {
        status: status.as_u16(),
        outcome,
        error_class,
        timeout_kind: None,
        stream: Some(summary),
    };
    let buf = Bytes::from(buf);
    if let (Some((c, k)), Outcome::Completed) = (store_in, outcome) {
        c.insert(
            k,
            CachedAnswer {
                status: status.as_u16(),
                content_type: up_parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: buf.clone(),
                stream: false,
            },
        );
    }
    buffered(finisher, status, up_parts.headers, extra, buf, ending)
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

/// Replays a cached answer: the same bytes (a streamed answer replays its SSE), no upstream call,
/// no upstream figures in-band; the record says `cached` with null ttft/upstream.
fn cached(mut finisher: Finisher, hit: CachedAnswer) -> Response {
    finisher.pending.cached = true;
    let status = StatusCode::from_u16(hit.status).unwrap_or(StatusCode::OK);
    let ending = Ending {
        status: hit.status,
        outcome: Outcome::CacheHit,
        error_class: None,
        timeout_kind: None,
        stream: None,
    };
    let mut headers = HeaderMap::new();
    if let Some(ct) = hit.content_type.as_deref() {
        headers.insert(http::header::CONTENT_TYPE, header_value(ct));
    }
    headers.insert("x-laptime-cache", HeaderValue::from_static("hit"));
    buffered(
        finisher,
        status,
        HeaderMap::new(),
        headers,
        hit.body,
        ending,
    )
}

fn json_headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h
}

/// `Retry-After` in seconds (the HTTP-date form is not used by LLM providers), as microseconds,
/// capped at an hour.
fn retry_after(headers: &HeaderMap) -> Option<i64> {
    let secs: i64 = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(secs.clamp(0, 3600) * 1_000_000)
}

/// Answers with a gateway error in the dialect's shape, recorded as rejected.
fn reject(finisher: Finisher, err: GatewayError) -> Response {
    let status = err.status();
    let body = err.body(finisher.pending.dialect);
    let ending = Ending::rejected(status.as_u16(), err.class);
    buffered(
        finisher,
        status,
        HeaderMap::new(),
        json_headers(),
        body,
        ending,
    )
}

/// A whole answer: upstream headers relayed, then the gateway's own.
fn buffered(
    finisher: Finisher,
    status: StatusCode,
    upstream_headers: HeaderMap,
    extra: HeaderMap,
    body: Bytes,
    ending: Ending,
) -> Response {
    let request_id = finisher.pending.request_id.clone();
    let len = body.len();
    let mut resp = Response::new(AxumBody::new(BufferedBody::new(body, finisher, ending)));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    relay_headers(&upstream_headers, h);
    for (k, v) in extra {
        if let Some(k) = k {
            h.insert(k, v);
        }
    }
    h.insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(REQUEST_ID, header_value(&request_id));
    resp
}
