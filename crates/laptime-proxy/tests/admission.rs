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
        assert_eq!(
            resp.headers()["connection"],
            "close",
            "the body was not read"
        );
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(message(dialect, &v).contains("missing credentials"), "{v}");
    }
    assert!(gw.seen().is_empty());
}

/// A body that declares `len` bytes and then sends none: whatever waits for it never ends.
struct Declared(u64);

impl http_body::Body for Declared {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        std::task::Poll::Pending
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0)
    }
}

/// A POST in `dialect` with `body`, through the whole router, without waiting for anything else.
async fn post_body(
    gw: &Gw,
    dialect: Dialect,
    body: axum::body::Body,
) -> http::Response<axum::body::Body> {
    use tower::ServiceExt;
    let req = http::Request::post(dialect.path())
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {}", gw.token))
        .body(body)
        .unwrap();
    laptime_api::router(gw.gw.app.clone())
        .oneshot(req)
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_declared_length_over_the_limit_is_a_413_before_any_body_byte_is_read() {
    let gw = gateway_with(&[("a", healthy(Dialect::Chat))], |cfg| {
        cfg.server.max_body_bytes = 1024
    })
    .await;
    for dialect in DIALECTS {
        // Waiting for the body would never end: the answer must come from the head alone.
        let resp = tokio::time::timeout(
            ms(1),
            post_body(&gw, dialect, axum::body::Body::new(Declared(1025))),
        )
        .await
        .expect("answered without reading the body");
        assert_eq!(resp.status(), 413, "{dialect}");
        assert_eq!(
            resp.headers()["connection"],
            "close",
            "the body was not read"
        );
        let id = request_id(&resp);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(message(dialect, &v).contains("1024-byte limit"), "{v}");
        assert_eq!(
            gw.record(&id).error_class,
            Some(ErrorClass::PayloadTooLarge)
        );
    }
    assert!(gw.seen().is_empty());
}

#[tokio::test(start_paused = true)]
async fn bodies_over_the_gateways_byte_budget_are_a_503_with_retry_after_until_bytes_free() {
    let gw = gateway_with(&[("a", healthy(Dialect::Chat))], |cfg| {
        cfg.server.max_body_bytes = 1000;
        cfg.server.body_budget_bytes = 1500;
    })
    .await;
    let app = gw.gw.app.clone();
    // One upload that holds 1,000 bytes of the budget (declared, then never sent).
    let holding = tokio::spawn({
        let router = laptime_api::router(app.clone());
        let req = http::Request::post(Dialect::Chat.path())
            .header("authorization", format!("Bearer {}", gw.token))
            .body(axum::body::Body::new(Declared(1000)))
            .unwrap();
        async move { tower::ServiceExt::oneshot(router, req).await }
    });
    while app.body_budget.available() != 500 {
        tokio::task::yield_now().await;
    }
    let padded = |n: usize| {
        let pad = "x".repeat(n - 40);
        format!(r#"{{"model":"m","stream":true,"input":"{pad}"}}"#)
    };
    for dialect in DIALECTS {
        let body = padded(600);
        let resp = post_body(&gw, dialect, body.into()).await;
        assert_eq!(resp.status(), 503, "{dialect}");
        assert_eq!(resp.headers()["retry-after"], "1");
        let id = request_id(&resp);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(message(dialect, &v).contains("retry shortly"), "{v}");
        let rec = gw.record(&id);
        assert_eq!(rec.error_class, Some(ErrorClass::Overloaded));
        assert_eq!(rec.fault(), Some(laptime_core::timeline::Fault::Gateway));
    }
    assert_eq!(app.body_budget.available(), 500, "a refusal holds nothing");
    // A body that fits what is left is served meanwhile.
    let resp = post_body(&gw, Dialect::Chat, padded(400).into()).await;
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();
    // The held upload gives its bytes back when it ends (here: its client goes away).
    holding.abort();
    let _ = holding.await;
    assert_eq!(app.body_budget.available(), 1500);
    let resp = post_body(&gw, Dialect::Chat, padded(600).into()).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(gw.seen().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_translated_body_is_held_against_the_budget_like_the_clients() {
    let gw = gateway_with(&[("a", healthy(Dialect::Messages))], |cfg| {
        cfg.server.max_body_bytes = 800;
        cfg.server.body_budget_bytes = 900;
        cfg.channels[0].dialect = Some(Dialect::Messages);
    })
    .await;
    let app = gw.gw.app.clone();
    let chat = |n: usize| {
        let pad = "x".repeat(n);
        format!(
            r#"{{"model":"m","max_tokens":8,"messages":[{{"role":"user","content":"{pad}"}}]}}"#
        )
    };
    // 600 bytes fit the budget once, not with their ~600-byte translation beside them.
    let resp = post_body(&gw, Dialect::Chat, chat(520).into()).await;
    assert_eq!(resp.status(), 503);
    let id = request_id(&resp);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(message(Dialect::Chat, &v).contains("retry shortly"), "{v}");
    assert_eq!(gw.record(&id).error_class, Some(ErrorClass::Overloaded));
    assert_eq!(app.body_budget.available(), 900, "a refusal holds nothing");
    assert!(gw.seen().is_empty(), "refused before any upstream call");
    // Small enough for both: translated and served, and every byte given back.
    let resp = post_body(&gw, Dialect::Chat, chat(100).into()).await;
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();
    assert_eq!(app.body_budget.available(), 900);
    assert_eq!(gw.seen().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn unauthenticated_refusals_are_all_counted_but_only_a_sample_is_stored() {
    let gw = gateway(&[("a", healthy(Dialect::Chat))], |_| {}).await;
    let calls = 3 * laptime_proxy::record::UNAUTHENTICATED_ROWS_PER_S;
    for i in 0..calls {
        let token = (i % 2 == 0).then_some("lt_not_a_real_token");
        let resp = gw
            .post(Dialect::Chat.path(), r#"{"model":"m"}"#, token)
            .await;
        assert_eq!(resp.status(), 401);
        // Half read their refusal, half leave without it: both kinds are sampled.
        if i % 4 < 2 {
            resp.into_body().collect().await.unwrap();
        }
    }
    // A real call after them, so its row proves the recorder has written theirs.
    let (status, _, _) = gw.call(Dialect::Chat).await;
    assert_eq!(status, 200);
    let stored: u32 = gw
        .store
        .with_conn(|c| {
            Ok(c.query_row(
                "SELECT count(*) FROM requests WHERE workspace_id IS NULL",
                [],
                |r| r.get(0),
            )?)
        })
        .unwrap();
    assert_eq!(stored, laptime_proxy::record::UNAUTHENTICATED_ROWS_PER_S);
    let text = gw
        .gw
        .app
        .metrics
        .render(
            &gw.gw.app.live().router,
            &gw.gw.app.recorder,
            &gw.gw.app.connections,
            &gw.gw.app.inflight,
        )
        .unwrap();
    let sampled_out = text
        .lines()
        .find_map(|l| l.strip_prefix("laptime_records_sampled_out_total "))
        .unwrap();
    assert_eq!(sampled_out, (calls - stored).to_string());
    let counted: u32 = text
        .lines()
        .filter(|l| l.starts_with("laptime_requests_total{") && l.contains("status=\"401\""))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u32>().unwrap())
        .sum();
    assert_eq!(counted, calls);
}
