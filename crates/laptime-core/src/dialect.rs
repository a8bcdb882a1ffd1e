//! The three wire formats laptime speaks, and how a request path names one.

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
}

impl Dialect {
    pub const ALL: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Chat => "chat",
            Dialect::Responses => "responses",
            Dialect::Messages => "messages",
        }
    }

    pub fn parse(s: &str) -> Option<Dialect> {
        Dialect::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The gateway path a client calls for this dialect.
    pub fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Responses => "/v1/responses",
            Dialect::Messages => "/v1/messages",
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
