//! What a request asks for, from its method and path (an Azure URL already resolved to the
//! OpenAI path it stands for), and whose words its errors are in.

use http::Method;
use laptime_core::{Dialect, GeminiMethod};

use crate::azure;
use crate::endpoints::{self, Endpoint, Found};

pub(crate) enum Route {
    /// A scripted Chat, Responses or Messages answer.
    Api(Dialect),
    /// `POST /v1beta/models/{model}:{method}` (or `/v1/models/…`): model and stream-ness come
    /// from the path.
    Gemini {
        model: String,
        method: GeminiMethod,
    },
    /// Another provider endpoint ([`crate::endpoints`]).
    Endpoint(Endpoint),
    /// Azure refused the URL itself.
    Azure(azure::Refusal),
    Models,
    Stats,
    Requests,
    Timing,
    NotFound,
    MethodNotAllowed,
}

impl Route {
    pub(crate) fn of(method: &Method, path: &str) -> Route {
        let gemini = path
            .strip_prefix(Dialect::Gemini.path())
            .or_else(|| path.strip_prefix("/v1/models"))
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(GeminiMethod::split);
        if let Some((model, gemini_method)) = gemini {
            return if method == Method::POST {
                Route::Gemini {
                    model: model.to_owned(),
                    method: gemini_method,
                }
            } else {
                Route::MethodNotAllowed
            };
        }
        let other = endpoints::route(method, path).or_else(|| endpoints::sim_route(method, path));
        match other {
            Some(Found::Endpoint(endpoint)) => return Route::Endpoint(endpoint),
            Some(Found::WrongMethod) => return Route::MethodNotAllowed,
            None => {}
        }
        let api = Dialect::ALL
            .into_iter()
            .filter(|d| *d != Dialect::Gemini)
            .find(|d| d.path() == path);
        match (method, path, api) {
            (&Method::POST, _, Some(dialect)) => Route::Api(dialect),
            (&Method::GET, "/v1/models", _) => Route::Models,
            (&Method::GET, "/sim/stats", _) => Route::Stats,
            (&Method::GET, "/sim/requests", _) => Route::Requests,
            (&Method::GET, "/sim/timing", _) => Route::Timing,
            (_, "/v1/models" | "/sim/stats" | "/sim/requests" | "/sim/timing", _)
            | (_, _, Some(_)) => Route::MethodNotAllowed,
            _ => Route::NotFound,
        }
    }

    /// The vocabulary of the errors about this request: its dialect's, Anthropic's on
    /// Anthropic's paths, Google's on Google's, OpenAI's elsewhere.
    pub(crate) fn error_dialect(&self, path: &str) -> Dialect {
        match self {
            Route::Api(d) => *d,
            Route::Gemini { .. } => Dialect::Gemini,
            Route::Endpoint(e) => e.dialect(),
            _ if path.starts_with("/v1/messages") => Dialect::Messages,
            _ if path.starts_with("/v1beta/") => Dialect::Gemini,
            _ => Dialect::Chat,
        }
    }

    /// Not a provider endpoint: not counted, not logged.
    pub(crate) fn is_sim_own(&self) -> bool {
        matches!(
            self,
            Route::Stats | Route::Requests | Route::Timing | Route::Endpoint(Endpoint::SimImage)
        )
    }
}
