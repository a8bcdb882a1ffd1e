//! Why a request could not be translated, and what was deliberately left out of one that was.

/// A request that cannot go to the chosen upstream. Each names the field as the client wrote
/// it (a JSON path such as `messages[2].content[0].input_audio`), so the proxy can answer a 400
/// in the client's dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    /// The body is not what the client's dialect allows: not JSON, a wrong type, a missing
    /// required field.
    Invalid { field: String, reason: String },
    /// Well-formed, but the upstream's dialect has no way to carry it.
    Unsupported { field: String, reason: &'static str },
    /// The upstream requires a cap on output tokens; the client gave none and the caller has no
    /// default for the model. `field` is the client dialect's name for the cap.
    MissingMaxTokens { field: &'static str },
}

impl RequestError {
    pub(crate) fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        RequestError::Invalid {
            field: field.into(),
            reason: reason.into(),
        }
    }

    pub(crate) fn unsupported(field: impl Into<String>, reason: &'static str) -> Self {
        RequestError::Unsupported {
            field: field.into(),
            reason,
        }
    }

    /// The client's field the error is about (empty for the body as a whole).
    pub fn field(&self) -> &str {
        match self {
            RequestError::Invalid { field, .. } | RequestError::Unsupported { field, .. } => field,
            RequestError::MissingMaxTokens { field } => field,
        }
    }

    /// A sentence for the error body's message.
    pub fn message(&self) -> String {
        match self {
            RequestError::Invalid { field, reason } if field.is_empty() => {
                format!("invalid request body: {reason}")
            }
            RequestError::Invalid { field, reason } => format!("invalid `{field}`: {reason}"),
            RequestError::Unsupported { field, reason } => {
                format!("`{field}` cannot be carried to this model's provider: {reason}")
            }
            RequestError::MissingMaxTokens { field } => format!(
                "`{field}` is required for this model (its provider requires max_tokens) and no \
                 default is configured"
            ),
        }
    }

    /// A low-cardinality label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            RequestError::Invalid { .. } => "invalid",
            RequestError::Unsupported { .. } => "unsupported",
            RequestError::MissingMaxTokens { .. } => "missing_max_tokens",
        }
    }
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for RequestError {}

/// Something the client sent that the upstream would not have used anyway and that was left
/// out on purpose (a caching hint, the reasoning of an earlier turn without a signature the
/// upstream accepts). Recorded so that nothing is dropped silently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Omission {
    /// The first place it was seen, as the client wrote it (or the hub's name for it when it
    /// has no single place).
    pub field: String,
    pub reason: &'static str,
}

/// Omissions, one per reason: a conversation with a cache hint on every block is one entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Omissions(pub(crate) Vec<Omission>);

impl Omissions {
    pub(crate) fn note(&mut self, field: impl FnOnce() -> String, reason: &'static str) {
        if !self.0.iter().any(|o| o.reason == reason) {
            self.0.push(Omission {
                field: field(),
                reason,
            });
        }
    }
}
