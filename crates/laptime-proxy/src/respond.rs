//! Respond: the gateway's own errors in each dialect's error shape (one exhaustive match from
//! error class to status and body), and which upstream headers are relayed.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use laptime_core::timeline::ErrorClass;
use laptime_core::Dialect;
use serde_json::json;

/// An error the gateway answers itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    pub class: ErrorClass,
    pub message: String,
}

impl GatewayError {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        GatewayError {
            class,
            message: message.into(),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self.class {
            ErrorClass::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorClass::Forbidden => StatusCode::FORBIDDEN,
            ErrorClass::BadRequest => StatusCode::BAD_REQUEST,
            ErrorClass::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorClass::UnknownModel => StatusCode::NOT_FOUND,
            ErrorClass::ConnectFailed
            | ErrorClass::Tls
            | ErrorClass::RateLimited
            | ErrorClass::UpstreamStatus5xx
            | ErrorClass::UpstreamStatus4xx
            | ErrorClass::StreamError
            | ErrorClass::ClosedEarly
            | ErrorClass::BodyError => StatusCode::BAD_GATEWAY,
            ErrorClass::ConnectTimeout | ErrorClass::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorClass::CircuitOpen => StatusCode::SERVICE_UNAVAILABLE,
            // Nobody reads this answer; the status is for the record.
            ErrorClass::ClientCancelled => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST)
            }
            ErrorClass::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// (OpenAI `type`, OpenAI `code`, Anthropic `type`).
    fn kinds(&self) -> (&'static str, Option<&'static str>, &'static str) {
        match self.class {
            ErrorClass::Unauthorized => (
                "invalid_request_error",
                Some("invalid_api_key"),
                "authentication_error",
            ),
            ErrorClass::Forbidden => (
                "invalid_request_error",
                Some("insufficient_scope"),
                "permission_error",
            ),
            ErrorClass::BadRequest => ("invalid_request_error", None, "invalid_request_error"),
            ErrorClass::PayloadTooLarge => (
                "invalid_request_error",
                Some("request_too_large"),
                "request_too_large",
            ),
            ErrorClass::UnknownModel => (
                "invalid_request_error",
                Some("model_not_found"),
                "not_found_error",
            ),
            ErrorClass::ConnectTimeout | ErrorClass::Timeout => {
                ("api_error", Some("upstream_timeout"), "timeout_error")
            }
            ErrorClass::CircuitOpen => (
                "api_error",
                Some("upstream_unavailable"),
                "overloaded_error",
            ),
            ErrorClass::ConnectFailed
            | ErrorClass::Tls
            | ErrorClass::RateLimited
            | ErrorClass::UpstreamStatus5xx
            | ErrorClass::UpstreamStatus4xx
            | ErrorClass::StreamError
            | ErrorClass::ClosedEarly
            | ErrorClass::BodyError => ("api_error", Some("upstream_unavailable"), "api_error"),
            ErrorClass::ClientCancelled | ErrorClass::Internal => {
                ("server_error", None, "api_error")
            }
        }
    }

    /// The body in the dialect's own error shape.
    pub fn body(&self, dialect: Dialect) -> Bytes {
        let (oa_type, oa_code, an_type) = self.kinds();
        let v = if dialect.is_anthropic() {
            json!({"type": "error", "error": {"type": an_type, "message": self.message}})
        } else {
            json!({"error": {"message": self.message, "type": oa_type, "param": null, "code": oa_code}})
        };
        Bytes::from(v.to_string())
    }
}

/// An error event in the dialect's own stream shape, for a failure after the head was relayed.
/// No terminal frame follows it.
pub fn in_band_error(dialect: Dialect, code: &str, message: &str) -> Bytes {
    let event = match dialect {
        Dialect::Chat => format!(
            "data: {}\n\n",
            json!({"error": {"message": message, "type": "timeout", "param": null, "code": code}})
        ),
        Dialect::Responses => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "code": code, "message": message, "param": null})
        ),
        Dialect::Messages => format!(
            "event: error\ndata: {}\n\n",
            json!({"type": "error", "error": {"type": "timeout_error", "message": message}})
        ),
    };
    Bytes::from(event)
}

/// Hop-by-hop and framing headers that are never relayed from upstream: the gateway frames its
/// own response.
const NOT_RELAYED: [&str; 10] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "proxy-authenticate",
    "alt-svc",
];

/// Copies the upstream response headers a client should see.
pub fn relay_headers(upstream: &HeaderMap, out: &mut HeaderMap) {
    for (name, value) in upstream {
        if !NOT_RELAYED.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
}

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-laptime-request-id");

pub fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// Whether the client accepts trailers (`TE: trailers`).
pub fn wants_trailers(headers: &HeaderMap) -> bool {
    headers.get_all(http::header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_take_each_dialects_shape() {
        let e = GatewayError::new(ErrorClass::UnknownModel, "model \"x\" is not served here");
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        let oa: serde_json::Value = serde_json::from_slice(&e.body(Dialect::Chat)).unwrap();
        assert_eq!(oa["error"]["code"], "model_not_found");
        assert_eq!(oa["error"]["type"], "invalid_request_error");
        let an: serde_json::Value = serde_json::from_slice(&e.body(Dialect::Messages)).unwrap();
        assert_eq!(an["type"], "error");
        assert_eq!(an["error"]["type"], "not_found_error");
        assert_eq!(an["error"]["message"], "model \"x\" is not served here");
    }

    #[test]
    fn statuses_match_the_issue() {
        let s = |c| GatewayError::new(c, "").status().as_u16();
        assert_eq!(s(ErrorClass::Unauthorized), 401);
        assert_eq!(s(ErrorClass::BadRequest), 400);
        assert_eq!(s(ErrorClass::PayloadTooLarge), 413);
        assert_eq!(s(ErrorClass::ConnectFailed), 502);
    }

    #[test]
    fn framing_headers_are_not_relayed() {
        let mut up = HeaderMap::new();
        up.insert("content-length", "5".parse().unwrap());
        up.insert("transfer-encoding", "chunked".parse().unwrap());
        up.insert("x-request-id", "abc".parse().unwrap());
        let mut out = HeaderMap::new();
        relay_headers(&up, &mut out);
        assert_eq!(out.len(), 1);
        assert!(out.contains_key("x-request-id"));
    }

    #[test]
    fn te_trailers_is_found_among_other_tokens() {
        let mut h = HeaderMap::new();
        h.insert("te", "gzip, Trailers".parse().unwrap());
        assert!(wants_trailers(&h));
        assert!(!wants_trailers(&HeaderMap::new()));
    }
}
