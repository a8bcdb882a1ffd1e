//! The provider endpoints besides the four scripted dialects: OpenAI's embeddings,
//! moderations, images, audio (speech, transcriptions, translations), legacy completions, files, batches, stored responses and model
//! lookup, Anthropic's token count, and Gemini's embeddings and token count. Routing by method
//! and path, and the one entry point the server calls.

mod batches;
mod completions;
mod count_tokens;
mod embeddings;
mod files;
mod images;
pub(crate) mod models;
mod moderations;
pub(crate) mod responses;
mod speech;
mod transcriptions;

use bytes::Bytes;
use futures_util::Stream;
use http::{HeaderMap, Method, Response};
use laptime_core::Dialect;
use serde_json::Value;

use crate::objects::Owner;
use crate::reply::{self, Body};
use crate::script::Schedule;
use crate::server::Sim;
use crate::wire::ApiError;
use transcriptions::Task;

/// A Gemini method other than generating content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GeminiOther {
    EmbedContent,
    BatchEmbedContents,
    CountTokens,
}

/// One of the endpoints this module serves, with what its path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Endpoint {
    Embeddings,
    Moderations,
    ImageGenerations,
    Speech,
    Transcriptions,
    Translations,
    Completions,
    FileUpload,
    FileList,
    FileGet(String),
    FileContent(String),
    FileDelete(String),
    BatchCreate,
    BatchList,
    BatchGet(String),
    BatchCancel(String),
    ResponseGet(String),
    ResponseDelete(String),
    ResponseCancel(String),
    ResponseInputItems(String),
    ModelGet(String),
    /// Anthropic's `POST /v1/messages/count_tokens`.
    CountTokens,
    Gemini {
        model: String,
        method: GeminiOther,
    },
    /// `GET /sim/image.png`: the image the `url` answers of image generation point at.
    SimImage,
}

/// What a method and path name here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Endpoint(Endpoint),
    /// A path served here, with another method.
    WrongMethod,
}

/// The endpoint `method` and `path` name, if the path is one of this module's.
pub(crate) fn route(method: &Method, path: &str) -> Option<Found> {
    use Endpoint as E;
    if let Some(gemini) = gemini(path) {
        return Some(only(method, Method::POST, gemini));
    }
    let segments: Vec<&str> = path.strip_prefix("/v1/")?.split('/').collect();
    let post = |e| only(method, Method::POST, e);
    let get = |e| only(method, Method::GET, e);
    let id = |s: &str| s.to_owned();
    Some(match segments.as_slice() {
        ["embeddings"] => post(E::Embeddings),
        ["moderations"] => post(E::Moderations),
        ["images", "generations"] => post(E::ImageGenerations),
        ["audio", "speech"] => post(E::Speech),
        ["audio", "transcriptions"] => post(E::Transcriptions),
        ["audio", "translations"] => post(E::Translations),
        ["completions"] => post(E::Completions),
        ["messages", "count_tokens"] => post(E::CountTokens),
        ["files"] => match *method {
            Method::POST => Found::Endpoint(E::FileUpload),
            Method::GET => Found::Endpoint(E::FileList),
            _ => Found::WrongMethod,
        },
        ["files", f] => match *method {
            Method::GET => Found::Endpoint(E::FileGet(id(f))),
            Method::DELETE => Found::Endpoint(E::FileDelete(id(f))),
            _ => Found::WrongMethod,
        },
        ["files", f, "content"] => get(E::FileContent(id(f))),
        ["batches"] => match *method {
            Method::POST => Found::Endpoint(E::BatchCreate),
            Method::GET => Found::Endpoint(E::BatchList),
            _ => Found::WrongMethod,
        },
        ["batches", b] => get(E::BatchGet(id(b))),
        ["batches", b, "cancel"] => post(E::BatchCancel(id(b))),
        ["responses", r] => match *method {
            Method::GET => Found::Endpoint(E::ResponseGet(id(r))),
            Method::DELETE => Found::Endpoint(E::ResponseDelete(id(r))),
            _ => Found::WrongMethod,
        },
        ["responses", r, "cancel"] => post(E::ResponseCancel(id(r))),
        ["responses", r, "input_items"] => get(E::ResponseInputItems(id(r))),
        ["models", m] if !m.contains(':') => get(E::ModelGet(id(m))),
        _ => return None,
    })
}

/// `GET /sim/image.png`.
pub(crate) fn sim_image() -> Response<Body> {
    images::sim_image()
}

/// The sim's own image, outside `/v1/`.
pub(crate) fn sim_route(method: &Method, path: &str) -> Option<Found> {
    (path == images::SIM_IMAGE_PATH).then(|| only(method, Method::GET, Endpoint::SimImage))
}

fn only(method: &Method, wanted: Method, endpoint: Endpoint) -> Found {
    if *method == wanted {
        Found::Endpoint(endpoint)
    } else {
        Found::WrongMethod
    }
}

/// `/v1beta/models/{model}:{method}` or `/v1/models/{model}:{method}` for the Gemini methods
/// served here.
fn gemini(path: &str) -> Option<Endpoint> {
    let segment = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, method) = segment.rsplit_once(':')?;
    let method = match method {
        "embedContent" => GeminiOther::EmbedContent,
        "batchEmbedContents" => GeminiOther::BatchEmbedContents,
        "countTokens" => GeminiOther::CountTokens,
        _ => return None,
    };
    (!model.is_empty() && !model.contains('/')).then(|| Endpoint::Gemini {
        model: model.to_owned(),
        method,
    })
}

impl Endpoint {
    /// The vocabulary of this endpoint's errors.
    pub(crate) fn dialect(&self) -> Dialect {
        match self {
            Endpoint::CountTokens => Dialect::Messages,
            Endpoint::Gemini { .. } => Dialect::Gemini,
            _ => Dialect::Chat,
        }
    }

    /// Whether the endpoint reads its body as it arrives (a multipart upload) rather than
    /// whole.
    pub(crate) fn streams_body(&self) -> bool {
        matches!(
            self,
            Endpoint::FileUpload | Endpoint::Transcriptions | Endpoint::Translations
        )
    }

    /// The model a request names, for the log: the path's (Gemini), else the body's, else the
    /// Azure deployment's.
    pub(crate) fn model(&self, body: &[u8], deployment: Option<&str>) -> Option<String> {
        if let Endpoint::Gemini { model, .. } = self {
            return Some(model.clone());
        }
        let from_body = serde_json::from_slice::<Value>(body)
            .ok()
            .and_then(|v| v.get("model").and_then(Value::as_str).map(str::to_owned));
        from_body.or_else(|| deployment.map(str::to_owned))
    }
}

/// What an endpoint's handler sees of the request besides its body.
pub(crate) struct Ctx<'a> {
    pub(crate) sim: &'a Sim,
    pub(crate) owner: &'a Owner,
    pub(crate) query: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    /// The Azure deployment the URL named, the model when the body names none.
    pub(crate) deployment: Option<&'a str>,
}

/// An endpoint's answer: whole, or a schedule for the server to play over time.
pub(crate) enum Outcome {
    Reply(Response<Body>),
    Play(Schedule),
}

impl Outcome {
    fn of(endpoint: &Endpoint, result: Result<Outcome, ApiError>) -> Outcome {
        result.unwrap_or_else(|e| Outcome::Reply(reply::error(&e, endpoint.dialect())))
    }
}

/// JSON `200` or the error.
fn ok(result: Result<String, ApiError>) -> Result<Outcome, ApiError> {
    result.map(|body| Outcome::Reply(reply::ok(body)))
}

/// Answers an endpoint whose body was read whole.
pub(crate) fn serve(endpoint: &Endpoint, ctx: &Ctx<'_>, body: &Bytes) -> Outcome {
    use Endpoint as E;
    let result = match endpoint {
        E::Embeddings => ok(embeddings::openai(ctx, body)),
        E::Moderations => ok(moderations::serve(body)),
        E::ImageGenerations => ok(images::generate(ctx, body)),
        E::Speech => speech::serve(ctx, body).map(Outcome::Play),
        E::Completions => completions::serve(ctx, body).map(Outcome::Play),
        E::FileList => ok(files::list(ctx)),
        E::FileGet(id) => ok(files::get(ctx, id)),
        E::FileContent(id) => files::content(ctx, id).map(Outcome::Reply),
        E::FileDelete(id) => ok(files::delete(ctx, id)),
        E::BatchCreate => ok(batches::create(ctx, body)),
        E::BatchList => ok(batches::list(ctx)),
        E::BatchGet(id) => ok(batches::get(ctx, id)),
        E::BatchCancel(id) => batches::cancel(ctx, id).map(Outcome::Reply),
        E::ResponseGet(id) => ok(responses::get(ctx, id)),
        E::ResponseDelete(id) => ok(responses::delete(ctx, id)),
        E::ResponseCancel(id) => ok(responses::cancel(ctx, id)),
        E::ResponseInputItems(id) => ok(responses::input_items(ctx, id)),
        E::ModelGet(id) => ok(models::get(ctx, id)),
        E::CountTokens => ok(count_tokens::anthropic(body)),
        E::Gemini { model, method } => ok(match method {
            GeminiOther::EmbedContent => embeddings::gemini_one(model, body),
            GeminiOther::BatchEmbedContents => embeddings::gemini_batch(model, body),
            GeminiOther::CountTokens => count_tokens::gemini(model, body),
        }),
        E::SimImage => Ok(Outcome::Reply(images::sim_image())),
        // Read as they arrive: see `serve_streamed`.
        E::FileUpload | E::Transcriptions | E::Translations => Err(ApiError::scripted(500)),
    };
    Outcome::of(endpoint, result)
}

/// Answers an endpoint that reads its body as it arrives; also the model its form named (for
/// the log).
pub(crate) async fn serve_streamed<S, E>(
    endpoint: &Endpoint,
    ctx: &Ctx<'_>,
    body: S,
) -> (Outcome, Option<String>)
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let (model, result) = match endpoint {
        Endpoint::FileUpload => (None, files::upload(ctx, body).await),
        Endpoint::Transcriptions => transcriptions::serve(ctx, body, Task::Transcribe).await,
        Endpoint::Translations => transcriptions::serve(ctx, body, Task::Translate).await,
        _ => (None, Err(ApiError::scripted(500))),
    };
    (Outcome::of(endpoint, result.map(Outcome::Reply)), model)
}

// === Shared by the handlers ===

/// The body as a JSON object, or OpenAI's words for one that is not.
fn object(body: &[u8]) -> Result<serde_json::Map<String, Value>, ApiError> {
    match crate::plan::parse(body)? {
        Value::Object(map) => Ok(map),
        _ => Err(ApiError::invalid_request(
            "The request body must be a JSON object.".to_owned(),
        )),
    }
}

/// OpenAI's error for a required field the request lacks.
fn missing(param: &'static str) -> ApiError {
    ApiError::invalid_request(format!("Missing required parameter: '{param}'."))
        .param(param)
        .code("missing_required_parameter")
}

/// OpenAI's error for a field of the wrong value.
fn invalid(param: &'static str, message: String) -> ApiError {
    ApiError::invalid_request(message).param(param)
}

/// The model a request names, or OpenAI's error for none.
fn model(body: &serde_json::Map<String, Value>, ctx: &Ctx<'_>) -> Result<String, ApiError> {
    body.get("model")
        .and_then(Value::as_str)
        .or(ctx.deployment)
        .map(str::to_owned)
        .ok_or_else(|| ApiError::invalid_request("you must provide a model parameter".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(method: Method, path: &str) -> Option<Found> {
        route(&method, path)
    }

    #[test]
    fn paths_route_to_their_endpoint_or_to_a_wrong_method() {
        use Endpoint as E;
        let ep = |e| Some(Found::Endpoint(e));
        assert_eq!(found(Method::POST, "/v1/embeddings"), ep(E::Embeddings));
        assert_eq!(
            found(Method::GET, "/v1/embeddings"),
            Some(Found::WrongMethod)
        );
        assert_eq!(found(Method::GET, "/v1/files"), ep(E::FileList));
        assert_eq!(found(Method::POST, "/v1/files"), ep(E::FileUpload));
        assert_eq!(
            found(Method::DELETE, "/v1/files/f"),
            ep(E::FileDelete("f".into()))
        );
        assert_eq!(
            found(Method::GET, "/v1/files/f/content"),
            ep(E::FileContent("f".into()))
        );
        assert_eq!(
            found(Method::POST, "/v1/batches/b/cancel"),
            ep(E::BatchCancel("b".into()))
        );
        assert_eq!(
            found(Method::GET, "/v1/responses/r/input_items"),
            ep(E::ResponseInputItems("r".into()))
        );
        assert_eq!(
            found(Method::GET, "/v1/models/sim-fast"),
            ep(E::ModelGet("sim-fast".into()))
        );
        assert_eq!(
            found(Method::POST, "/v1/messages/count_tokens"),
            ep(E::CountTokens)
        );
        assert_eq!(
            found(
                Method::POST,
                "/v1beta/models/text-embedding-004:embedContent"
            ),
            ep(E::Gemini {
                model: "text-embedding-004".into(),
                method: GeminiOther::EmbedContent
            })
        );
        assert_eq!(
            found(Method::POST, "/v1/models/gemini-2.5-flash:countTokens"),
            ep(E::Gemini {
                model: "gemini-2.5-flash".into(),
                method: GeminiOther::CountTokens
            })
        );
        // Left to the scripted dialects and the model list.
        assert_eq!(found(Method::POST, "/v1/chat/completions"), None);
        assert_eq!(found(Method::POST, "/v1/responses"), None);
        assert_eq!(found(Method::GET, "/v1/models"), None);
        assert_eq!(
            found(Method::POST, "/v1beta/models/m:generateContent"),
            None
        );
    }
}
