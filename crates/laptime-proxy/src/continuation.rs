//! Continuation after a cut: what a committed stream keeps so that, if its upstream cuts it or
//! stalls after text reached the client, another channel can be asked to continue the answer
//! ([`Resume`]), and that attempt ([`Resume::start`]): the client's request with the text the
//! client already has as an assistant prefill, through the same attempt function as every other
//! call, read ahead to its first output before the client's stream is spliced onto it.
//!
//! Only the candidates no attempt went to, and only channels that continue a prefill
//! (`ChannelConfig::prefill`) called in a dialect that has one (not Responses), are asked.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use laptime_core::timeline::{Attempt, AttemptRole, ErrorClass};
use laptime_core::translate::request::{translate_request, RequestOptions};
use laptime_core::translate::stream::{ClientStreamOptions, Splice};
use laptime_core::Dialect;
use tokio::time::Instant;

use crate::attempt::{self, AnswerBody, AttemptCtx, ErrorStatus};
use crate::budget::Held;
use crate::config::{RouteConfig, TimeoutsConfig, TranslationConfig};
use crate::drive::UpstreamBody;
use crate::ingress::SpanIds;
use crate::live::Live;
use crate::observe::{ObservedBody, Until};
use crate::routing::{InflightGuard, Route};
use crate::App;

/// What a committed stream needs to have its answer continued elsewhere.
pub struct Resume {
    app: Arc<App>,
    live: Arc<Live>,
    client: Dialect,
    request: Bytes,
    candidates: Vec<Route>,
    headers: HeaderMap,
    trace: SpanIds,
    t0: Instant,
    timeouts: TimeoutsConfig,
    translation: TranslationConfig,
    /// The options the client's stream was translated with, when it was.
    translated: Option<ClientStreamOptions>,
    upstream_model: String,
    request_id: String,
    created: u64,
    timing_comment: bool,
    /// The request body stays counted against the gateway's body budget while it is kept.
    _held: Held,
}

/// The per-request facts a [`Resume`] is made from.
pub struct ResumeFrom<'a> {
    pub app: &'a Arc<App>,
    /// The configuration the request started with (a continuation keeps it).
    pub live: &'a Arc<Live>,
    pub client: Dialect,
    pub request: &'a Bytes,
    pub headers: &'a HeaderMap,
    pub trace: SpanIds,
    pub t0: Instant,
    pub policy: &'a RouteConfig,
    pub translated: Option<ClientStreamOptions>,
    /// The model the answering channel was asked for (named when its stream names none).
    pub upstream_model: &'a str,
    pub request_id: &'a str,
    pub created: u64,
}

/// A continuation that reached its first output.
pub struct Continued {
    pub body: Box<ObservedBody<UpstreamBody>>,
    /// Holds the channel's in-flight count until the continuation ends.
    pub guard: InflightGuard,
}

/// What the continuation attempts did: every attempt made (the last one won when `continued`
/// is set).
pub struct Resumed {
    pub continued: Option<Continued>,
    pub attempts: Vec<Attempt>,
}

impl Resume {
    /// `None` when no untried candidate could continue a prefill.
    /// `held` (the body's share of the budget) is kept with the body, or dropped with it.
    pub fn new(from: ResumeFrom<'_>, untried: Vec<Route>, held: Held) -> Option<Resume> {
        let candidates: Vec<Route> = untried
            .into_iter()
            .filter(|r| {
                r.channel.prefill && r.upstream != Dialect::Responses && !r.context_fallback
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        Some(Resume {
            app: from.app.clone(),
            live: from.live.clone(),
            client: from.client,
            request: from.request.clone(),
            candidates,
            headers: from.headers.clone(),
            trace: from.trace,
            t0: from.t0,
            timeouts: from.policy.timeouts.clone(),
            translation: from.policy.translation.clone(),
            timing_comment: from.live.config.server.timing_comment(from.client),
            translated: from.translated,
            upstream_model: from.upstream_model.to_owned(),
            request_id: from.request_id.to_owned(),
            created: from.created,
            _held: held,
        })
    }

    /// The options the client's stream is written with: those of its translator, else ones the
    /// gateway chooses (an untouched stream's own ids are the upstream's; the continuation's
    /// events carry the gateway's).
    pub fn client_stream(&self) -> ClientStreamOptions {
        if let Some(t) = &self.translated {
            return t.clone();
        }
        ClientStreamOptions {
            model: Some(self.upstream_model.clone()),
            id: self.request_id.clone(),
            created: self.created,
            include_usage: self.client == Dialect::Chat && wants_usage_chunk(&self.request),
            timing_comment: self.timing_comment,
        }
    }

    /// Asks the candidates in order to continue `splice`'s text, until one reaches its first
    /// output (then its stream is the rest of the client's).
    pub fn start(self, splice: Splice) -> Pin<Box<dyn Future<Output = Resumed> + Send>> {
        Box::pin(self.run(splice))
    }

    async fn run(self, splice: Splice) -> Resumed {
        let ctx = AttemptCtx {
            app: &self.app,
            live: &self.live,
            dialect: self.client,
            client_answer: None,
            stream: true,
            client_headers: &self.headers,
            trace: self.trace,
            t0: self.t0,
            timeouts: &self.timeouts,
            endpoint: None,
            usage_asked: self.client == Dialect::Chat && wants_usage_chunk(&self.request),
        };
        let mut attempts = Vec::new();
        let mut splice = Some(splice);
        for route in &self.candidates {
            let Some(mut s) = splice.take() else { break };
            let Some(body) = self.body_for(route, s.prefill()) else {
                splice = Some(s);
                continue;
            };
            let start = ctx.now();
            let mut tried =
                Attempt::dispatched(&route.channel.name, AttemptRole::Continuation, start);
            let span_id = crate::ingress::new_span_id();
            tried.span_id = Some(span_id);
            let sent = attempt::dispatch(
                &ctx,
                route,
                body.into(),
                (start, start),
                span_id,
                ErrorStatus::Fails,
            );
            let mut answer = match sent.await {
                Ok(a) => a,
                Err(e) => {
                    tried.status = e.status;
                    tried.headers = e.headers_at;
                    tried.connection = e.connection;
                    tried.error_class = Some(e.class);
                    tried.end = Some(e.at);
                    attempts.push(tried);
                    splice = Some(s);
                    continue;
                }
            };
            tried.status = Some(answer.parts.status.as_u16());
            tried.headers = Some(answer.headers_at);
            tried.connection = answer.connection;
            let AnswerBody::Stream(b) = &mut answer.body else {
                // A whole answer cannot be spliced into a stream.
                tried.error_class = Some(ErrorClass::InvalidBody);
                tried.end = Some(ctx.now());
                attempts.push(tried);
                splice = Some(s);
                continue;
            };
            s.continue_with(route.upstream);
            b.spliced(s);
            if let Err(e) = answer.read_ahead(Until::FirstOutput).await {
                tried.error_class = Some(e.class);
                tried.first_byte = answer.first_byte();
                tried.end = Some(e.at);
                attempts.push(tried);
                if let AnswerBody::Stream(b) = &mut answer.body {
                    splice = b.take_splice();
                }
                continue;
            }
            answer.committed();
            tried.won = true;
            tried.first_byte = answer.first_byte();
            attempts.push(tried);
            let AnswerBody::Stream(mut body) = answer.body else {
                break;
            };
            body.delegated();
            return Resumed {
                continued: Some(Continued {
                    body,
                    guard: answer.guard,
                }),
                attempts,
            };
        }
        Resumed {
            continued: None,
            attempts,
        }
    }

    /// The client's request for `route`, with `prefill` as the assistant's last turn.
    fn body_for(&self, route: &Route, prefill: &str) -> Option<Bytes> {
        let reasoning = self.translation.reasoning_budgets;
        let opts = RequestOptions {
            upstream_model: &route.upstream_model,
            stream: true,
            default_max_tokens: self.translation.max_tokens_default(),
            reasoning: &reasoning,
            pass_through: route.channel.pass_through(),
            prefill: Some(prefill),
        };
        match translate_request(self.client, route.upstream, &self.request, &opts) {
            Ok(t) => Some(Bytes::from(t.body)),
            Err(e) => {
                tracing::debug!(channel = %route.channel.name, error = %e, "continuation not translatable for this channel");
                None
            }
        }
    }
}

/// A Chat client's `stream_options.include_usage` (read only when a cut is continued).
fn wants_usage_chunk(request: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Head {
        stream_options: Option<StreamOptions>,
    }
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        include_usage: Option<bool>,
    }
    serde_json::from_slice::<Head>(request)
        .ok()
        .and_then(|h| h.stream_options?.include_usage)
        .unwrap_or(false)
}
