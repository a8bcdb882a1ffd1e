//! Cool-downs and circuits are per (channel, model): one model's 429 with `Retry-After` or its
//! failures skip that model on the channel, never the channel's other models.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::Dialect;
use laptime_proxy::config::Models;
use memory::*;

/// A streamed Chat call for `model`: its status and the channel that answered.
async fn call_model(gw: &Gw, model: &str) -> (u16, Option<String>) {
    let body = format!(
        r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let resp = gw
        .post_later(Dialect::Chat.path(), body, Some(&gw.token))
        .await;
    let status = resp.status().as_u16();
    let id = request_id(&resp);
    resp.into_body().collect().await.unwrap();
    (status, gw.record(&id).channel)
}

#[tokio::test(start_paused = true)]
async fn one_models_retry_after_does_not_cool_the_channels_other_models() {
    let limited = Reply::status(5, 429).with_header("retry-after", "30");
    let gw = gateway_with(
        &[
            ("a", limited.then(healthy(Dialect::Chat))),
            ("b", healthy(Dialect::Chat)),
        ],
        |cfg| {
            for c in &mut cfg.channels {
                c.models = Models::List(vec!["m".into(), "n".into()]);
            }
        },
    )
    .await;
    // `m` on `a` asks to be left alone for 30 s: `b` answers.
    assert_eq!(call_model(&gw, "m").await, (200, Some("b".into())));
    let first = gw.seen().len();
    assert_eq!(first, 2);
    // `n` on `a` is not cooling down: `a` is still its first choice.
    assert_eq!(call_model(&gw, "n").await, (200, Some("a".into())));
    // `m` on `a` still is: `b` goes first.
    assert_eq!(call_model(&gw, "m").await, (200, Some("b".into())));
    let hosts: Vec<String> = gw.seen().into_iter().map(|(h, _)| h).collect();
    assert_eq!(hosts, ["a", "b", "a", "b"]);
}
