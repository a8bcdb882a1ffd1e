//! Whole HTTP answers: a JSON body, an error in a dialect's shape, bytes of a given type.

use std::convert::Infallible;
use std::io;

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::{Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use laptime_core::Dialect;

use crate::script::JSON;
use crate::wire::ApiError;

/// Every answer's body: whole, or frames played over time.
pub(crate) type Body = UnsyncBoxBody<Bytes, io::Error>;

pub(crate) fn full(bytes: Bytes) -> Body {
    UnsyncBoxBody::new(Full::new(bytes).map_err(|never: Infallible| match never {}))
}

/// `bytes` as a whole answer of `content_type` (with a Content-Length, as hyper sets it).
pub(crate) fn bytes(status: StatusCode, content_type: &str, body: Bytes) -> Response<Body> {
    let mut response = Response::new(full(body));
    *response.status_mut() = status;
    let value = HeaderValue::from_str(content_type)
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    response.headers_mut().insert(CONTENT_TYPE, value);
    response
}

pub(crate) fn json(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(full(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(JSON));
    response
}

pub(crate) fn ok(body: String) -> Response<Body> {
    json(StatusCode::OK, body)
}

pub(crate) fn error(error: &ApiError, dialect: Dialect) -> Response<Body> {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, error.body(dialect))
}

/// An error in OpenAI's shape (every OpenAI and Azure endpoint's).
pub(crate) fn openai_error(e: &ApiError) -> Response<Body> {
    error(e, Dialect::Chat)
}
