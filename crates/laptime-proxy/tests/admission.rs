//! Ingress and admission refusals through the whole router without a socket: a body over the
//! limit, a body that is not JSON or names no model, a model no channel serves, and a call
//! without credentials. Each is answered in the dialect's own error shape, recorded as
//! `rejected` with its class and phase marks, and never reaches an upstream.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::timeline::{ErrorClass, Outcome, RequestRecord};
use laptime_core::Dialect;
use memory::*;
use serde_json::Value;

/// Sends `body` in `dialect` and returns the status, the parsed error body and the record.
async fn refused(
    gw: &Gw,
    dialect: Dialect,
    body: impl Into<axum::body::Body>,
    token: Option<&str>,
) -> (u16, Value, RequestRecord) {
    let resp = gw.post(dialect.path(), body, token).await;
    let status = resp.status().as_u16();
    let id = request_id(&resp);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    (status, v, gw.record(&id))
}

/// The error message in the dialect's own shape (checking the shape on the way).
fn message(dialect: Dialect, v: &Value) -> String {
    if dialect.is_anthropic() {
        assert_eq!(v["type"], "error", "{v}");
        assert!(v["error"]["type"].is_string(), "{v}");
    } else {
        assert!(v["error"]["type"].is_string(), "{v}");
    }
    v["error"]["message"].as_str().unwrap().to_string()
}

const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

#[tokio::test(start_paused = true)]
async fn a_body_over_the_limit_is_a_413_naming_the_limit_and_no_upstream_is_called() {
    let gw = gateway_with(&[("a", healthy(Dialect::Chat))], |cfg| {
        cfg.server.max_body_bytes = 64
    })
    .await;
    for dialect in DIALECTS {
        let big = format!(r#"{{"model":"m","input":"{}"}}"#, "x".repeat(200));
        let token = gw.token.clone();
        let (status, v, rec) = refused(&gw, dialect, big, Some(&token)).await;
        assert_eq!(status, 413, "{dialect}");
        assert!(message(dialect, &v).contains("64-byte limit"), "{v}");
        assert_eq!(rec.outcome, Outcome::Rejected);
        assert_eq!(rec.error_class, Some(ErrorClass::PayloadTooLarge));
        assert!(rec.marks.auth.is_some() && rec.marks.body_read.is_some());
        assert_eq!(rec.marks.upstream_start, None);
    }
    assert!(gw.seen().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_body_that_is_not_json_or_names_no_model_is_a_400_saying_which() {
    let gw = gateway(&[("a", healthy(Dialect::Chat))], |_| {}).await;
    let token = gw.token.clone();
    let cases = [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (r#"{"stream": true}"#, "no \"model\" string"),
    ];
    for dialect in DIALECTS {
        for (body, says) in cases {
            let (status, v, rec) = refused(&gw, dialect, body, Some(&token)).await;
            assert_eq!(status, 400, "{dialect} {body}");
            assert!(message(dialect, &v).contains(says), "{dialect} {body}: {v}");
            assert_eq!(
                (rec.outcome, rec.error_class),
                (Outcome::Rejected, Some(ErrorClass::BadRequest))
            );
            assert_eq!(rec.model, None);
        }
    }
    assert!(gw.seen().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_model_no_channel_serves_is_a_404_naming_the_model_and_the_group() {
    let gw = gateway(&[("a", healthy(Dialect::Chat))], |_| {}).await;
    let token = gw.token.clone();
    for dialect in DIALECTS {
        let body = r#"{"model":"nobody-serves-this","stream":true,"max_tokens":8,"input":"hi"}"#;
        let (status, v, rec) = refused(&gw, dialect, body, Some(&token)).await;
        assert_eq!(status, 404, "{dialect}");
        let m = message(dialect, &v);
        assert!(
            m.contains("\"nobody-serves-this\"") && m.contains("group \"default\""),
            "{m}"
        );
        assert_eq!(rec.error_class, Some(ErrorClass::UnknownModel));
        assert_eq!(rec.model.as_deref(), Some("nobody-serves-this"));
        assert!(rec.marks.distribution.is_some());
        assert!(rec.attempts.is_empty());
    }
    assert!(gw.seen().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_without_credentials_is_a_401_in_the_dialects_shape_and_calls_no_upstream() {
    let gw = gateway(&[("a", healthy(Dialect::Chat))], |_| {}).await;
    for dialect in DIALECTS {
        let body = r#"{"model":"m","input":"hi"}"#;
        let resp = gw.post(dialect.path(), body, None).await;
        assert_eq!(resp.status(), 401, "{dialect}");
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(message(dialect, &v).contains("missing credentials"), "{v}");
    }
    assert!(gw.seen().is_empty());
}
