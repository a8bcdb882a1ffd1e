//! One request, from its head to its answer: resolve an Azure URL, route, read the body (whole,
//! or as it arrives for a multipart upload), log it in `/sim/requests`, and answer, or play the
//! answer's schedule.
//!
//! A request is logged once its body is read and its answer decided, before any of the answer
//! is played, so a test sees it while a slow answer is still playing.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use laptime_core::Dialect;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use crate::azure;
use crate::endpoints::{self, responses, Endpoint, Outcome};
use crate::multipart::{self, SharedTally};
use crate::objects::{lock, Owner};
use crate::plan::{self, Call, GeminiCall, Planned};
use crate::reply::{self, Body};
use crate::route::Route;
use crate::server::{answer, requests_json, stats_json, ConnCtl, Sim, SimRequest};
use crate::wire::ApiError;

/// Request bodies read whole above this are refused (a fake needs no more; it keeps memory
/// bounded). Multipart uploads are read as they arrive instead, bounded by the file store.
const MAX_BODY: usize = 64 * 1024 * 1024;

/// What answering one request needs.
struct Req<'a> {
    sim: &'a Sim,
    ctl: &'a Arc<ConnCtl>,
    stop: watch::Receiver<bool>,
    /// When the head arrived: the clock of every scripted instant.
    start: Instant,
    parts: &'a Parts,
    request_id: &'a str,
    owner: Owner,
    /// The Azure deployment the URL named.
    deployment: Option<&'a str>,
}

pub(crate) async fn handle(
    sim: Sim,
    ctl: Arc<ConnCtl>,
    stop: watch::Receiver<bool>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    // The clock starts when the head is here, as a provider's would.
    let start = Instant::now();
    let request_id = sim.next_request_id();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let (route, served, deployment) = match azure::resolve(&path, parts.uri.query()) {
        Some(Err(refusal)) => (Route::Azure(refusal), path.clone(), None),
        Some(Ok(target)) => (
            Route::of(&parts.method, &target.path),
            target.path,
            target.deployment,
        ),
        None => (Route::of(&parts.method, &path), path.clone(), None),
    };
    let error_dialect = route.error_dialect(&served);
    let req = Req {
        sim: &sim,
        ctl: &ctl,
        stop,
        start,
        owner: Owner::of(&parts.headers),
        parts: &parts,
        request_id: &request_id,
        deployment: deployment.as_deref(),
    };

    let (mut response, digest) = match &route {
        Route::Endpoint(endpoint) if endpoint.streams_body() => {
            sim.count_request(parts.version);
            streamed(&req, endpoint, body).await
        }
        _ => whole(&req, &route, body, error_dialect).await,
    };

    let headers = response.headers_mut();
    insert(headers, "x-sim-body-sha256", &digest);
    insert(headers, "x-sim-request-id", &request_id);
    // The providers' own request-id headers, so a gateway can log them as it would for real.
    let provider_id = match error_dialect {
        Dialect::Messages => Some("request-id"),
        // Google names an answer in its body (`responseId`), not in a header.
        Dialect::Gemini => None,
        Dialect::Chat | Dialect::Responses => Some("x-request-id"),
    };
    if let Some(name) = provider_id {
        insert(headers, name, &request_id);
    }
    debug!(%path, %request_id, status = response.status().as_u16(), "answered");
    Ok(response)
}

/// A request whose body is read whole first (up to [`MAX_BODY`]), and the body's digest.
async fn whole(
    req: &Req<'_>,
    route: &Route,
    body: Incoming,
    error_dialect: Dialect,
) -> (Response<Body>, String) {
    let body = Limited::new(body, MAX_BODY)
        .collect()
        .await
        .map(|c| c.to_bytes());
    let digest = body
        .as_ref()
        .map(|b| hex::encode(Sha256::digest(b)))
        .unwrap_or_default();
    let response = match body {
        _ if route.is_sim_own() => sim_own(req.sim, route),
        Err(e) => {
            req.sim.count_request(req.parts.version);
            let error = ApiError::invalid_request(format!("could not read the request body: {e}"));
            reply::error(&error, error_dialect)
        }
        Ok(bytes) => {
            req.sim.count_request(req.parts.version);
            collected(req, route, &bytes, &digest, error_dialect).await
        }
    };
    (response, digest)
}

/// `/sim/*`: neither counted nor logged.
fn sim_own(sim: &Sim, route: &Route) -> Response<Body> {
    match route {
        Route::Stats => reply::ok(stats_json(sim.stats())),
        Route::Requests => reply::ok(requests_json(&sim.requests())),
        Route::Timing => reply::ok(sim.timing_json()),
        Route::Endpoint(_) => endpoints::sim_image(),
        _ => reply::openai_error(&ApiError::scripted(500)),
    }
}

impl Req<'_> {
    fn ctx(&self) -> endpoints::Ctx<'_> {
        endpoints::Ctx {
            sim: self.sim,
            owner: &self.owner,
            query: self.parts.uri.query(),
            headers: &self.parts.headers,
            deployment: self.deployment,
        }
    }

    fn record(&self, model: Option<String>, digest: &str, body_bytes: u64) {
        let h = |name| header(&self.parts.headers, name);
        let uri = &self.parts.uri;
        self.sim.record(SimRequest {
            request_id: self.request_id.to_owned(),
            path: uri.path().to_owned(),
            model,
            authorization: h("authorization"),
            x_api_key: h("x-api-key"),
            x_goog_api_key: h("x-goog-api-key"),
            anthropic_version: h("anthropic-version"),
            traceparent: h("traceparent"),
            body_sha256: digest.to_owned(),
            method: self.parts.method.to_string(),
            path_and_query: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_owned(), |pq| pq.as_str().to_owned()),
            api_key: h("api-key"),
            content_type: h("content-type"),
            body_bytes,
        });
    }

    /// Plays a schedule from the request's arrival.
    async fn play(&self, schedule: crate::script::Schedule) -> Response<Body> {
        answer(self.sim, self.ctl, self.stop.clone(), self.start, schedule).await
    }

    async fn outcome(&self, outcome: Outcome) -> Response<Body> {
        match outcome {
            Outcome::Reply(response) => response,
            Outcome::Play(schedule) => self.play(schedule).await,
        }
    }
}

/// An upload: the endpoint reads the body as it arrives, counted and hashed on the way.
async fn streamed(req: &Req<'_>, endpoint: &Endpoint, body: Incoming) -> (Response<Body>, String) {
    let tally = SharedTally::default();
    let stream = multipart::tallied(body.into_data_stream(), tally.clone());
    let (outcome, model) = endpoints::serve_streamed(endpoint, &req.ctx(), stream).await;
    let (digest, bytes) = {
        let t = lock(&tally);
        (t.sha256_hex(), t.bytes)
    };
    req.record(
        model.or_else(|| req.deployment.map(str::to_owned)),
        &digest,
        bytes,
    );
    (req.outcome(outcome).await, digest)
}

/// A request whose body was read whole.
async fn collected(
    req: &Req<'_>,
    route: &Route,
    bytes: &Bytes,
    digest: &str,
    error_dialect: Dialect,
) -> Response<Body> {
    let record = |model: Option<String>| req.record(model, digest, bytes.len() as u64);
    let scripted = |dialect: Dialect, planned: Planned| async move {
        record(planned.model.clone());
        match planned.answer {
            Ok(answer) => req.play(answer.schedule).await,
            Err(error) => reply::error(&error, dialect),
        }
    };
    match route {
        Route::Api(Dialect::Responses) => {
            let planned = plan_responses(req, bytes);
            scripted(Dialect::Responses, planned).await
        }
        Route::Api(dialect) => {
            let call = Call {
                default_model: req.deployment,
                ..Call::default()
            };
            scripted(*dialect, plan::plan(*dialect, bytes, &call)).await
        }
        Route::Gemini { model, method } => {
            let sse = req
                .parts
                .uri
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "alt=sse"));
            let call = Call {
                gemini: Some(GeminiCall {
                    model,
                    stream: method.is_stream(),
                    sse,
                }),
                ..Call::default()
            };
            scripted(Dialect::Gemini, plan::plan(Dialect::Gemini, bytes, &call)).await
        }
        Route::Endpoint(endpoint) => {
            record(endpoint.model(bytes, req.deployment));
            req.outcome(endpoints::serve(endpoint, &req.ctx(), bytes))
                .await
        }
        Route::Models => {
            record(None);
            reply::ok(endpoints::models::list(&req.parts.headers))
        }
        Route::Azure(refusal) => {
            record(None);
            refusal.response()
        }
        Route::MethodNotAllowed => {
            record(None);
            let path = req.parts.uri.path();
            let message = format!("Method {} not allowed on {path}", req.parts.method);
            reply::error(&ApiError::route(405, message), error_dialect)
        }
        Route::NotFound | Route::Stats | Route::Requests | Route::Timing => {
            record(None);
            let path = req.parts.uri.path();
            let message = format!("Unknown request URL: {} {path}", req.parts.method);
            reply::error(&ApiError::route(404, message), error_dialect)
        }
    }
}

/// A Responses request: its `previous_response_id` must be the caller's, its answer gets the
/// next response id, and what it made is stored unless `store` is false.
fn plan_responses(req: &Req<'_>, bytes: &[u8]) -> Planned {
    let value = match plan::parse(bytes) {
        Ok(value) => value,
        Err(error) => {
            return Planned {
                model: None,
                answer: Err(error),
            }
        }
    };
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .or(req.deployment)
        .map(str::to_owned);
    let meta = match responses::prepare(req.sim, &req.owner, &value) {
        Ok(meta) => meta,
        Err(error) => {
            return Planned {
                model,
                answer: Err(error),
            }
        }
    };
    let call = Call {
        default_model: req.deployment,
        response: Some(&meta),
        body_bytes: bytes.len(),
        ..Call::default()
    };
    let planned = plan::plan_value(Dialect::Responses, &value, &call);
    if let Ok(answer) = &planned.answer {
        responses::remember(req.sim, &req.owner, &meta, &value, answer);
    }
    planned
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

fn insert(headers: &mut HeaderMap, name: &'static str, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_image_is_served_without_a_request_context() {
        let sim = Sim::new();
        let response = sim_own(&sim, &Route::Endpoint(Endpoint::SimImage));
        assert_eq!(response.status(), http::StatusCode::OK);
        assert_eq!(response.headers()["content-type"], "image/png");
    }
}
