//! An upstream that refuses the request for what it is: over the model's context window, the
//! request goes to the route's `context_fallback` model (once, and never the same model again,
//! whatever channel serves it); refused by a content filter, no channel is asked again. Each is
//! recorded under its own class. Under paused time, in every dialect: what the client got, which
//! upstreams were asked, the record.

pub mod memory;

use laptime_core::timeline::{ErrorClass, Outcome};
use laptime_core::Dialect;
use laptime_proxy::config::{Config, Models};
use memory::*;

/// The provider's 400 for an input over the context window, in the dialect's own wording.
fn over_context(dialect: Dialect) -> Reply {
    let body = match dialect {
        Dialect::Messages => {
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#
        }
        Dialect::Gemini => {
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#
        }
        Dialect::Chat | Dialect::Responses => {
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#
        }
    };
    error_reply(body)
}

fn content_filtered(dialect: Dialect) -> Reply {
    let body = match dialect {
        Dialect::Messages | Dialect::Gemini => {
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Output blocked by content filtering policy"}}"#
        }
        Dialect::Chat | Dialect::Responses => {
            r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400}}"#
        }
    };
    error_reply(body)
}

fn error_reply(body: &str) -> Reply {
    Reply::error(5, 400, body)
}

/// Channels `a` and `a2` serve `m`; `big` serves only `m-large`, the route's context fallback.
fn with_fallback(cfg: &mut Config) {
    let mut big = channel("big", 2);
    big.models = Models::List(vec!["m-large".into()]);
    cfg.channels = vec![channel("a", 0), channel("a2", 1), big];
    cfg.routes[0].context_fallback = Some("m-large".into());
}

fn hosts(gw: &Gw) -> Vec<String> {
    gw.seen().into_iter().map(|(h, _)| h).collect()
}

fn classes(rec: &laptime_core::timeline::RequestRecord) -> Vec<Option<ErrorClass>> {
    rec.attempts.iter().map(|a| a.error_class).collect()
}

#[tokio::test(start_paused = true)]
async fn over_the_context_window_the_larger_model_answers_and_the_same_model_is_not_asked_again() {
    for dialect in DIALECTS {
        let replies = [
            ("a", over_context(dialect)),
            ("a2", healthy(dialect)),
            ("big", healthy(dialect)),
        ];
        let gw = gateway_with(&replies, with_fallback).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}: {body}");
        assert!(body.contains("Hi"), "{dialect}: {body}");
        // `a2` serves the same model: it would refuse the same input, so it is passed over.
        assert_eq!(hosts(&gw), ["a", "big"], "{dialect}");
        assert_eq!(rec.outcome, Outcome::Completed);
        assert_eq!(rec.channel.as_deref(), Some("big"));
        assert_eq!(
            classes(&rec),
            [Some(ErrorClass::ContextLengthExceeded), None],
            "{dialect}"
        );
        assert_eq!(rec.attempts[0].status, Some(400));
        assert!(rec.attempts[1].won);
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_context_fallback_the_providers_400_is_relayed_once_and_recorded_as_such() {
    for dialect in DIALECTS {
        let refusal = over_context(dialect);
        let expected = refusal.frames[0].1.clone();
        let gw = gateway(&[("a", refusal), ("b", healthy(dialect))], |_| {}).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, body.as_str()),
            (400, expected.as_str()),
            "{dialect}"
        );
        assert_eq!(hosts(&gw), ["a"], "{dialect}: a 400 is not failed over");
        assert_eq!(rec.outcome, Outcome::UpstreamError);
        assert_eq!(rec.error_class, Some(ErrorClass::ContextLengthExceeded));
        assert_eq!(
            rec.fault(),
            Some(laptime_core::timeline::Fault::Client),
            "{dialect}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_content_filter_refusal_is_relayed_and_no_channel_is_asked_again() {
    for dialect in DIALECTS {
        let refusal = content_filtered(dialect);
        let expected = refusal.frames[0].1.clone();
        let replies = [
            ("a", refusal),
            ("a2", healthy(dialect)),
            ("big", healthy(dialect)),
        ];
        // Even with a context fallback configured: a filter is not a context problem.
        let gw = gateway_with(&replies, with_fallback).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, body.as_str()),
            (400, expected.as_str()),
            "{dialect}"
        );
        assert_eq!(hosts(&gw), ["a"], "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::ContentFiltered));
        assert_eq!(rec.attempts.len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn any_other_400_is_the_answer_even_with_a_context_fallback() {
    for dialect in DIALECTS {
        let plain = error_reply(
            r#"{"error":{"message":"Invalid request.","type":"invalid_request_error","param":null,"code":null}}"#,
        );
        let replies = [
            ("a", plain),
            ("a2", healthy(dialect)),
            ("big", healthy(dialect)),
        ];
        let gw = gateway_with(&replies, with_fallback).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 400, "{dialect}: {body}");
        assert!(body.contains("Invalid request."), "{dialect}: {body}");
        assert_eq!(hosts(&gw), ["a"], "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::UpstreamStatus4xx));
    }
}

#[tokio::test(start_paused = true)]
async fn a_larger_model_that_is_itself_over_its_window_is_the_clients_answer() {
    for dialect in DIALECTS {
        let replies = [
            ("a", over_context(dialect)),
            ("a2", healthy(dialect)),
            ("big", over_context(dialect)),
        ];
        let gw = gateway_with(&replies, with_fallback).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 400, "{dialect}: {body}");
        assert_eq!(hosts(&gw), ["a", "big"], "{dialect}: one fallback, no loop");
        // The fallback's 400 is the answer: its attempt won, with the same class.
        assert_eq!(
            classes(&rec),
            [Some(ErrorClass::ContextLengthExceeded); 2],
            "{dialect}"
        );
        assert!(rec.attempts[1].won, "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::ContextLengthExceeded));
        assert_eq!(rec.channel.as_deref(), Some("big"));
    }
}

#[test]
fn a_context_fallback_must_name_another_served_model() {
    for (fallback, says) in [
        ("m", "must name another model"),
        ("*", "must name another model"),
        ("nowhere", "no channel serves model \"nowhere\""),
    ] {
        let mut cfg = Config::embedded_default(&|_| None);
        cfg.channels = vec![channel("a", 0)];
        cfg.routes = vec![cfg.route_for("m").clone()];
        cfg.routes[0].model = "m".into();
        cfg.routes[0].context_fallback = Some(fallback.into());
        let err = cfg.validate(&|_| None).unwrap_err().to_string();
        assert!(err.contains("routes[0].context_fallback"), "{err}");
        assert!(err.contains(says), "{fallback}: {err}");
    }
}
