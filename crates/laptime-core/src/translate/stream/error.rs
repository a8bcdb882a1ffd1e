//! Errors between dialects: each [`ErrorKind`]'s name and status in every dialect, and a whole
//! upstream error response (status + body) turned into the client dialect's.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::gemini::GoogleErrorBody;
use super::hub::{ErrorKind, HubError, JsonText};
use super::json::{plain, text, JsonOut};
use crate::timeline::ErrorClass;
use crate::Dialect;

impl ErrorKind {
    /// The kind an HTTP error status names; `None` for a status below 400.
    pub fn from_status(status: u16) -> Option<ErrorKind> {
        Some(match status {
            401 => ErrorKind::Auth,
            402 => ErrorKind::Billing,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimited,
            503 | 529 => ErrorKind::Overloaded,
            504 => ErrorKind::Timeout,
            400..=499 => ErrorKind::InvalidRequest,
            500.. => ErrorKind::Server,
            _ => return None,
        })
    }

    /// The status a client of `dialect` gets for this kind when the upstream's own status does
    /// not carry over (an in-band error, or 529 which only Anthropic uses).
    pub fn status(self, dialect: Dialect) -> u16 {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLength | ErrorKind::ContentFilter => 400,
            ErrorKind::Auth => 401,
            ErrorKind::Billing => 402,
            ErrorKind::Permission => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTooLarge => 413,
            ErrorKind::RateLimited => 429,
            ErrorKind::Timeout => 504,
            ErrorKind::Overloaded if dialect.is_anthropic() => 529,
            ErrorKind::Overloaded => 503,
            ErrorKind::Server => 500,
        }
    }

    /// Anthropic's `error.type` (`types/shared/error_type.py`).
    pub fn anthropic_type(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ContextLength | ErrorKind::ContentFilter => {
                "invalid_request_error"
            }
            ErrorKind::Auth => "authentication_error",
            ErrorKind::Billing => "billing_error",
            ErrorKind::Permission => "permission_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::RequestTooLarge => "request_too_large",
            ErrorKind::RateLimited => "rate_limit_error",
            ErrorKind::Timeout => "timeout_error",
            ErrorKind::Overloaded => "overloaded_error",
            ErrorKind::Server => "api_error",
        }
    }

    pub fn from_anthropic_type(name: &str) -> Option<ErrorKind> {
        Some(match name {
            "invalid_request_error" => ErrorKind::InvalidRequest,
            "authentication_error" => ErrorKind::Auth,
            "billing_error" => ErrorKind::Billing,
            "permission_error" => ErrorKind::Permission,
            "not_found_error" => ErrorKind::NotFound,
            "request_too_large" => ErrorKind::RequestTooLarge,
            "rate_limit_error" => ErrorKind::RateLimited,
            "timeout_error" | "gateway_timeout_error" => ErrorKind::Timeout,
            "overloaded_error" => ErrorKind::Overloaded,
            "api_error" => ErrorKind::Server,
            _ => return None,
        })
    }

    /// OpenAI's `error.type` and `error.code`, as OpenAI sends them for the status (the SDKs
    /// pick their exception by status; the code is what in-band errors are told apart by).
    /// OpenAI has no overload code of its own; `server_is_overloaded` is the one its Responses
    /// streams use.
    pub fn openai_type_code(self) -> (&'static str, Option<&'static str>) {
        match self {
            ErrorKind::InvalidRequest => ("invalid_request_error", None),
            ErrorKind::ContextLength => ("invalid_request_error", Some("context_length_exceeded")),
            ErrorKind::ContentFilter => ("invalid_request_error", Some("content_filter")),
            ErrorKind::Auth => ("invalid_request_error", Some("invalid_api_key")),
            ErrorKind::Billing => ("insufficient_quota", Some("insufficient_quota")),
            ErrorKind::Permission => ("invalid_request_error", Some("permission_denied")),
            ErrorKind::NotFound => ("invalid_request_error", Some("not_found")),
            ErrorKind::RequestTooLarge => ("invalid_request_error", Some("request_too_large")),
            ErrorKind::RateLimited => ("requests", Some("rate_limit_exceeded")),
            ErrorKind::Timeout => ("server_error", Some("timeout")),
            ErrorKind::Overloaded => ("server_error", Some("server_is_overloaded")),
            ErrorKind::Server => ("server_error", None),
        }
    }

    /// The kind an OpenAI error names by its code, else its type; `None` when neither is known.
    pub fn from_openai(kind: Option<&str>, code: Option<&str>) -> Option<ErrorKind> {
        let by_name = |name: &str| {
            Some(match name {
                "rate_limit_exceeded" | "requests" | "tokens" | "rate_limit_error" => {
                    ErrorKind::RateLimited
                }
                "insufficient_quota" | "billing_error" => ErrorKind::Billing,
                "invalid_api_key" | "authentication_error" => ErrorKind::Auth,
                "permission_denied" | "permission_error" => ErrorKind::Permission,
                "not_found" | "model_not_found" | "not_found_error" => ErrorKind::NotFound,
                "request_too_large" => ErrorKind::RequestTooLarge,
                "context_length_exceeded" => ErrorKind::ContextLength,
                "content_filter" | "content_policy_violation" => ErrorKind::ContentFilter,
                "timeout" | "timeout_error" => ErrorKind::Timeout,
                "server_is_overloaded" | "overloaded" | "overloaded_error" => ErrorKind::Overloaded,
                "server_error" | "api_error" | "internal_error" => ErrorKind::Server,
                "invalid_request_error" | "invalid_prompt" => ErrorKind::InvalidRequest,
                _ => return None,
            })
        };
        code.and_then(by_name).or_else(|| kind.and_then(by_name))
    }
}

/// Writes an OpenAI error object: `{"message":…,"type":…,"param":null,"code":…}`.
pub(super) fn write_openai_error(out: &mut impl JsonOut, err: &HubError<'_>) {
    let (kind, code) = err.kind.openai_type_code();
    out.raw("{\"message\":");
    out.lit(err.message.raw());
    out.raw(",\"type\":");
    out.lit(kind);
    out.raw(",\"param\":null,\"code\":");
    match code {
        Some(code) => out.lit(code),
        None => out.raw("null"),
    }
    out.raw("}");
}

/// Writes an Anthropic error envelope: `{"type":"error","error":{"type":…,"message":…}}`.
pub(super) fn write_anthropic_error(out: &mut impl JsonOut, err: &HubError<'_>) {
    out.raw("{\"type\":\"error\",\"error\":{\"type\":");
    out.lit(err.kind.anthropic_type());
    out.raw(",\"message\":");
    out.lit(err.message.raw());
    out.raw("}}");
}

/// An error object of either family: OpenAI `{message, type, code}` or Anthropic
/// `{type, message}`; a Responses `response.error` is `{code, message}`.
#[derive(Deserialize)]
pub(super) struct ErrorObject<'a> {
    #[serde(borrow)]
    pub(super) message: Option<&'a RawValue>,
    #[serde(rename = "type", borrow)]
    pub(super) kind: Option<&'a RawValue>,
    #[serde(borrow)]
    pub(super) code: Option<&'a RawValue>,
}

impl<'a> ErrorObject<'a> {
    /// The hub error this object names; `fallback` when it names no kind we know.
    pub(super) fn hub(&self, anthropic: bool, fallback: ErrorKind) -> HubError<'a> {
        let kind = plain(self.kind);
        let code = plain(self.code);
        let named = if anthropic {
            kind.as_deref().and_then(ErrorKind::from_anthropic_type)
        } else {
            None
        };
        let kind = named
            .or_else(|| ErrorKind::from_openai(kind.as_deref(), code.as_deref()))
            .unwrap_or(fallback);
        HubError {
            kind,
            message: text(self.message).unwrap_or_default(),
        }
    }
}

/// The hub error of an upstream's in-band error (an error event in a stream, or the error
/// object of a 200 body): a server error unless the object names a kind we know; an event
/// without a readable object is a server error with no message.
pub(super) fn in_band_error<'a>(obj: Option<ErrorObject<'a>>, anthropic: bool) -> HubError<'a> {
    match obj {
        Some(obj) => obj.hub(anthropic, ErrorKind::Server),
        None => HubError {
            kind: ErrorKind::Server,
            message: JsonText::default(),
        },
    }
}

/// A whole error body of the OpenAI or Anthropic family: `{"error":{…}}` (OpenAI) or
/// `{"type":"error","error":{…}}` (Anthropic); Google's is [`GoogleErrorBody`].
#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}

/// Reads an upstream error response: the status decides the kind; the body's type or code
/// refines it only where the status names a kind broadly (another 4xx, another 5xx). A body
/// that is not an error object keeps the status's kind, with a message saying so.
pub(super) fn read_error(upstream: Dialect, status: u16, body: &[u8]) -> HubError<'_> {
    let by_status = ErrorKind::from_status(status).unwrap_or(ErrorKind::Server);
    let parsed = if upstream == Dialect::Gemini {
        serde_json::from_slice::<GoogleErrorBody<'_>>(body)
            .ok()
            .and_then(|b| b.error)
            .map(|e| e.hub())
    } else {
        serde_json::from_slice::<ErrorBody<'_>>(body)
            .ok()
            .and_then(|b| b.error)
            .map(|obj| obj.hub(upstream.is_anthropic(), by_status))
    };
    // A refusal is named by the body's wording as much as by its code.
    let refusal = match crate::classify::error_status_class(status, body) {
        Some(ErrorClass::ContextLengthExceeded) => Some(ErrorKind::ContextLength),
        Some(ErrorClass::ContentFiltered) => Some(ErrorKind::ContentFilter),
        _ => None,
    };
    match parsed {
        Some(from_body) => {
            let kind = match by_status {
                ErrorKind::InvalidRequest | ErrorKind::Server => refusal.unwrap_or(from_body.kind),
                precise => precise,
            };
            HubError {
                kind,
                message: from_body.message,
            }
        }
        None => HubError {
            kind: by_status,
            message: JsonText::escaped("upstream answered with an error status"),
        },
    }
}

/// The client's status: the upstream's, except where the client dialect names the kind with
/// another (529 is Anthropic's alone; an OpenAI client gets 503, and an Anthropic client gets
/// 529 for an overload whatever the upstream's status), or where the status is not an error.
pub(super) fn client_status(kind: ErrorKind, client: Dialect, upstream_status: u16) -> u16 {
    match kind {
        ErrorKind::Overloaded => kind.status(client),
        _ if upstream_status >= 400 => upstream_status,
        _ => kind.status(client),
    }
}
