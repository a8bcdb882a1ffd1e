//! The four wire formats laptime speaks, and how a request path names one.

use serde::{Deserialize, Serialize};

/// A wire format: the request body, the response body and the stream all follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// OpenAI Chat Completions (`POST /v1/chat/completions`).
    Chat,
    /// OpenAI Responses (`POST /v1/responses`).
    Responses,
    /// Anthropic Messages (`POST /v1/messages`).
    Messages,
    /// Google Gemini (`POST /v1beta/models/{model}:generateContent`, or
    /// `:streamGenerateContent?alt=sse` for a stream): the model and stream-ness are in the
    /// path, not the body.
    Gemini,
}

impl Dialect {
    pub const ALL: [Dialect; 4] = [
        Dialect::Chat,
        Dialect::Responses,
        Dialect::Messages,
        Dialect::Gemini,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
            Dialect::Messages => "messages",
            Dialect::Gemini => "gemini",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The gateway path a client calls for this dialect. Gemini's calls are not one path: they
    /// are `{model}:{method}` segments under this collection (see [`Dialect::target`]).
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Responses => "/v1/responses",
            Dialect::Messages => "/v1/messages",
            Dialect::Gemini => "/v1beta/models",
        }
    }

    /// The request target (path and query) of one call: the fixed path for the dialects that
    /// carry model and stream in the body; for Gemini the model's method, with `alt=sse` for a
    /// stream (without it Gemini streams one JSON array, not SSE). `model` must already be a
    /// safe path segment (see [`gemini_model_ok`]).
    pub fn target(self, model: &str, stream: bool) -> String {
        match self {
            Dialect::Gemini => {
                let method = GeminiMethod::for_stream(stream);
                let query = if stream { "?alt=sse" } else { "" };
                format!("/v1beta/models/{model}:{}{query}", method.as_str())
            }
            Dialect::Chat | Dialect::Responses | Dialect::Messages => self.path().to_owned(),
        }
    }

    /// Whether errors and streams follow Anthropic's shapes rather than OpenAI's.
    pub fn is_anthropic(self) -> bool {
        matches!(self, Dialect::Messages)
    }
}

impl std::fmt::Display for Dialect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The two Gemini methods laptime serves, named after the model in the last path segment
/// (`gemini-2.5-flash:streamGenerateContent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GeminiMethod {
    /// `:generateContent`: one whole JSON answer.
    GenerateContent,
    /// `:streamGenerateContent`: a stream (SSE only with `alt=sse`).
    StreamGenerateContent,
}

impl GeminiMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            GeminiMethod::GenerateContent => "generateContent",
            GeminiMethod::StreamGenerateContent => "streamGenerateContent",
        }
    }

    pub fn for_stream(stream: bool) -> GeminiMethod {
        if stream {
            GeminiMethod::StreamGenerateContent
        } else {
            GeminiMethod::GenerateContent
        }
    }

    pub fn is_stream(self) -> bool {
        self == GeminiMethod::StreamGenerateContent
    }

    /// Splits a `{model}:{method}` segment at its last `:`. `None` when there is no `:` or the
    /// method is not one of the two; the model is returned as it is (check it with
    /// [`gemini_model_ok`]).
    pub fn split(segment: &str) -> Option<(&str, GeminiMethod)> {
        let (model, method) = segment.rsplit_once(':')?;
        let method = match method {
            "generateContent" => GeminiMethod::GenerateContent,
            "streamGenerateContent" => GeminiMethod::StreamGenerateContent,
            _ => return None,
        };
        Some((model, method))
    }
}

/// Whether a Gemini model name may be put in an upstream path as it is: non-empty, ASCII
/// letters, digits, `-`, `.` and `_` only, and not a dot segment. A model name comes from the
/// client's path (decoded), and with a wildcard channel it is sent upstream; nothing in it may
/// change which path or host is called.
pub fn gemini_model_ok(model: &str) -> bool {
    !model.is_empty()
        && model != "."
        && model != ".."
        && model
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// The `google.rpc.Code` name Google's APIs put in an error's `status` for an HTTP status
/// (`{"error":{"code":429,"message":…,"status":"RESOURCE_EXHAUSTED"}}`).
pub fn google_status(http_status: u16) -> &'static str {
    match http_status {
        400 | 413 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        400..=499 => "FAILED_PRECONDITION",
        _ => "INTERNAL",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dialect_parses_back_from_its_name() {
        for d in Dialect::ALL {
            assert_eq!(Dialect::parse(d.as_str()), Some(d));
        }
        assert_eq!(Dialect::parse("gemini"), Some(Dialect::Gemini));
    }

    #[test]
    fn gemini_targets_name_the_model_and_the_method() {
        assert_eq!(
            Dialect::Gemini.target("gemini-2.5-flash", false),
            "/v1beta/models/gemini-2.5-flash:generateContent"
        );
        assert_eq!(
            Dialect::Gemini.target("gemini-2.5-flash", true),
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        );
        assert_eq!(Dialect::Chat.target("x", true), "/v1/chat/completions");
    }

    #[test]
    fn a_gemini_segment_splits_at_its_last_colon() {
        assert_eq!(
            GeminiMethod::split("gemini-2.5-pro:streamGenerateContent"),
            Some(("gemini-2.5-pro", GeminiMethod::StreamGenerateContent))
        );
        assert_eq!(
            GeminiMethod::split("a:b:generateContent"),
            Some(("a:b", GeminiMethod::GenerateContent))
        );
        assert_eq!(GeminiMethod::split("gemini-2.5-pro:countTokens"), None);
        assert_eq!(GeminiMethod::split("gemini-2.5-pro"), None);
    }

    #[test]
    fn http_statuses_have_googles_status_names() {
        let names: Vec<&str> = [400, 403, 404, 429, 500, 503, 504]
            .into_iter()
            .map(google_status)
            .collect();
        assert_eq!(
            names,
            [
                "INVALID_ARGUMENT",
                "PERMISSION_DENIED",
                "NOT_FOUND",
                "RESOURCE_EXHAUSTED",
                "INTERNAL",
                "UNAVAILABLE",
                "DEADLINE_EXCEEDED"
            ]
        );
        assert_eq!(google_status(401), "UNAUTHENTICATED");
    }

    #[test]
    fn only_plain_model_names_may_go_into_a_path() {
        for ok in ["gemini-2.5-flash", "gemini-1.5-pro-002", "sim_fast", "a.b"] {
            assert!(gemini_model_ok(ok), "{ok}");
        }
        for bad in [
            "", ".", "..", "a/b", "a?key=x", "a#b", "a b", "a:b", "é", "a%2Fb",
        ] {
            assert!(!gemini_model_ok(bad), "{bad}");
        }
    }
}
