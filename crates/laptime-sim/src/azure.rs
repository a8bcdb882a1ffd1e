//! Azure OpenAI's URL shapes, served as the OpenAI paths they stand for.
//!
//! - `/openai/deployments/{deployment}/{chat/completions|completions|embeddings|
//!   images/generations|audio/speech|audio/transcriptions|audio/translations}
//!   ?api-version=YYYY-MM-DD[-preview]`:
//!   the deployment is the model when the body names none.
//! - `/openai/{files|batches|responses}[/…]?api-version=…`: the data-plane paths of the dated
//!   API versions.
//! - `/openai/v1/…`: the v1 API, the OpenAI path under `/openai`; `api-version` optional.
//!
//! Without `api-version` where one is required Azure answers 404
//! `{"error":{"code":"404","message":"Resource not found"}}`, and so does the sim, as for any
//! other path under `/openai/`. A malformed one is a 400 `BadRequest` "API version not
//! supported". Bodies, streams and errors past the URL are OpenAI's.

use http::StatusCode;

use crate::json::obj;
use crate::query;
use crate::reply::{self, Body};

/// The operations a deployment serves.
const DEPLOYMENT_OPERATIONS: [&str; 7] = [
    "chat/completions",
    "completions",
    "embeddings",
    "images/generations",
    "audio/speech",
    "audio/transcriptions",
    "audio/translations",
];

/// The collections of the dated data-plane API.
const DATA_PLANE: [&str; 3] = ["files", "batches", "responses"];

/// What an Azure URL is served as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The OpenAI path.
    pub(crate) path: String,
    pub(crate) deployment: Option<String>,
}

/// Azure's own refusal of a URL, before any OpenAI semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No `api-version`, or a path Azure does not have.
    NotFound,
    /// An `api-version` that is not a date (with `-preview` or not).
    BadVersion,
}

impl Refusal {
    pub(crate) fn response(self) -> http::Response<Body> {
        let (status, code, message) = match self {
            Refusal::NotFound => (StatusCode::NOT_FOUND, "404", "Resource not found"),
            Refusal::BadVersion => (
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "API version not supported",
            ),
        };
        let body = obj! {"error": obj! {"code": code, "message": message}};
        reply::json(status, body.encode())
    }
}

/// `None` for a path that is not Azure's; else the OpenAI path it is served as, or Azure's
/// refusal.
pub(crate) fn resolve(path: &str, query_text: Option<&str>) -> Option<Result<Target, Refusal>> {
    let rest = path.strip_prefix("/openai/")?;
    let version = query::get(query_text, "api-version").filter(|v| !v.is_empty());
    if let Some(v1) = rest.strip_prefix("v1/") {
        return Some(Ok(Target {
            path: format!("/v1/{v1}"),
            deployment: None,
        }));
    }
    let target = if let Some(deployed) = rest.strip_prefix("deployments/") {
        deployed
            .split_once('/')
            .filter(|(d, op)| !d.is_empty() && DEPLOYMENT_OPERATIONS.contains(op))
            .map(|(deployment, operation)| Target {
                path: format!("/v1/{operation}"),
                deployment: Some(deployment.to_owned()),
            })
    } else {
        let collection = rest.split('/').next().unwrap_or("");
        DATA_PLANE.contains(&collection).then(|| Target {
            path: format!("/v1/{rest}"),
            deployment: None,
        })
    };
    Some(match (target, version) {
        (None, _) | (_, None) => Err(Refusal::NotFound),
        (Some(_), Some(v)) if !dated(&v) => Err(Refusal::BadVersion),
        (Some(target), Some(_)) => Ok(target),
    })
}

/// `YYYY-MM-DD` or `YYYY-MM-DD-preview`.
fn dated(version: &str) -> bool {
    let date = version.strip_suffix("-preview").unwrap_or(version);
    let b = date.as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(path: &str, deployment: Option<&str>) -> Option<Result<Target, Refusal>> {
        Some(Ok(Target {
            path: path.to_owned(),
            deployment: deployment.map(str::to_owned),
        }))
    }

    #[test]
    fn deployment_urls_are_the_openai_operation_with_the_deployment_as_model() {
        let v = Some("api-version=2024-10-21");
        assert_eq!(
            resolve("/openai/deployments/sim-fast/chat/completions", v),
            ok("/v1/chat/completions", Some("sim-fast"))
        );
        assert_eq!(
            resolve(
                "/openai/deployments/emb/embeddings",
                Some("api-version=2025-04-01-preview")
            ),
            ok("/v1/embeddings", Some("emb"))
        );
        assert_eq!(
            resolve("/openai/deployments/tts/audio/speech", v),
            ok("/v1/audio/speech", Some("tts"))
        );
        assert_eq!(
            resolve("/openai/files/file-x/content", v),
            ok("/v1/files/file-x/content", None)
        );
    }

    #[test]
    fn api_version_is_required_except_under_v1() {
        let path = "/openai/deployments/d/chat/completions";
        assert_eq!(resolve(path, None), Some(Err(Refusal::NotFound)));
        assert_eq!(
            resolve(path, Some("api-version=")),
            Some(Err(Refusal::NotFound))
        );
        assert_eq!(
            resolve(path, Some("api-version=latest")),
            Some(Err(Refusal::BadVersion))
        );
        assert_eq!(
            resolve("/openai/v1/responses", None),
            ok("/v1/responses", None)
        );
        assert_eq!(
            resolve("/openai/v1/chat/completions", Some("api-version=preview")),
            ok("/v1/chat/completions", None)
        );
    }

    #[test]
    fn other_paths_are_azures_404_and_non_azure_paths_are_left_alone() {
        let v = Some("api-version=2024-10-21");
        assert_eq!(
            resolve("/openai/deployments/d/fine_tunes", v),
            Some(Err(Refusal::NotFound))
        );
        assert_eq!(
            resolve("/openai/deployments//chat/completions", v),
            Some(Err(Refusal::NotFound))
        );
        assert_eq!(
            resolve("/openai/deployments/d", v),
            Some(Err(Refusal::NotFound))
        );
        assert_eq!(resolve("/openai/models", v), Some(Err(Refusal::NotFound)));
        assert_eq!(resolve("/v1/chat/completions", v), None);
    }
}
