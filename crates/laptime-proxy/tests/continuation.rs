//! Continuation after a cut: when the upstream cuts or stalls a stream after text reached the
//! client and another channel that continues a prefill remains, that channel is asked to
//! continue the text the client has, and its answer is the rest of the client's stream: one
//! whole answer, nothing repeated, no error. When it refuses, the client gets the cut's own
//! in-band error. Under paused time, in every dialect: the client's answer, what the second
//! channel was sent, the record.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

pub mod memory;

use laptime_core::slow::Flag;
use laptime_core::timeline::{AttemptRole, ErrorClass, Outcome};
use laptime_core::translate::stream::{read_stream, Answer, BlockKind};
use laptime_core::Dialect;
use laptime_proxy::config::Config;
use memory::*;
use serde_json::Value;

/// `a` cuts; `b`, the second channel, continues in Messages (a sim channel pinned to it).
fn two_channels(cfg: &mut Config) {
    cfg.channels = vec![channel("a", 0), channel("b", 1)];
    cfg.channels[1].dialect = Some(Dialect::Messages);
}

fn text_of(a: &Answer) -> String {
    a.blocks
        .iter()
        .filter(|b| b.kind == BlockKind::Text)
        .map(|b| serde_json::from_str::<String>(&format!("\"{}\"", b.text)).unwrap())
        .collect()
}

/// The last assistant turn `b` was sent.
fn prefill_sent(gw: &Gw) -> Value {
    let body = gw.bodies("b").pop().expect("b was asked");
    body["messages"].as_array().unwrap().last().unwrap().clone()
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_text_is_continued_by_the_next_channel_into_one_whole_answer() {
    for dialect in DIALECTS {
        let a = reply(&started(dialect, &["Hello", " wor"]), false);
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&[("a", a), ("b", b)], two_channels).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}: {body}");
        let got = read_stream(dialect, body.as_bytes());
        assert_eq!(text_of(&got), "Hello world!", "{dialect}: {body}");
        assert!(
            got.error.is_none() && got.ended,
            "{dialect}: one whole answer\n{body}"
        );
        assert!(!body.contains("upstream_closed_early"), "{dialect}: {body}");
        // The second channel was asked to continue exactly what the client had.
        let last = prefill_sent(&gw);
        assert_eq!(last["role"], "assistant", "{dialect}: {last}");
        let prefill = last["content"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| last["content"][0]["text"].as_str().unwrap().to_owned());
        assert_eq!(prefill, "Hello wor", "{dialect}");
        assert_eq!(rec.outcome, Outcome::Completed, "{dialect}");
        assert!(
            rec.flags.contains(&Flag::Continued),
            "{dialect}: {:?}",
            rec.flags
        );
        let roles: Vec<_> = rec.attempts.iter().map(|a| (a.role, a.won)).collect();
        assert_eq!(
            roles,
            [
                (AttemptRole::Primary, true),
                (AttemptRole::Continuation, true)
            ],
            "{dialect}"
        );
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::ClosedEarly));
        // The timeline keeps the first attempt's marks: its first text, the frame after its
        // envelope (frames every 10 ms from 5 ms after a 20 ms head).
        let envelope = started(dialect, &[]).len() as u64;
        assert_eq!(
            rec.marks.first_visible,
            Some(ms(20 + 5 + 10 * envelope)),
            "{dialect}"
        );
        assert_eq!(rec.channel.as_deref(), Some("a"));
        assert_eq!(
            rec.tokens.output,
            Some(3),
            "{dialect}: the continuation's count"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_after_text_is_continued_at_its_idle_deadline() {
    for dialect in DIALECTS {
        let frames = started(dialect, &["Hello", " wor"]);
        let last_byte = 20 + 5 + 10 * (frames.len() as u64 - 1);
        let a = reply(&frames, true);
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&[("a", a), ("b", b)], |cfg| {
            two_channels(cfg);
            cfg.routes[0].timeouts.idle_ms = 2_000;
        })
        .await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        let got = read_stream(dialect, body.as_bytes());
        assert_eq!(text_of(&got), "Hello world!", "{dialect}: {body}");
        assert!(got.error.is_none() && got.ended, "{dialect}\n{body}");
        assert_eq!(rec.outcome, Outcome::Completed);
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::Timeout));
        // `b` was asked when the idle deadline fired: 2 s after a's last byte.
        let asked = gw.seen().iter().find(|(h, _)| h == "b").unwrap().1;
        assert_eq!(asked, ms(last_byte + 2_000), "{dialect}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_channel_that_refuses_the_prefill_leaves_the_client_the_cuts_own_error() {
    for dialect in DIALECTS {
        let a = reply(&started(dialect, &["Hello", " wor"]), false);
        let refuses = Reply::error(
            5,
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}"#,
        );
        let gw = gateway_with(&[("a", a), ("b", refuses)], two_channels).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert!(
            body.contains("upstream_closed_early") || body.contains("closed the stream"),
            "{dialect}: {body}"
        );
        assert!(
            !body.contains("prefill"),
            "{dialect}: never the prefill's 400\n{body}"
        );
        let got = read_stream(dialect, body.as_bytes());
        assert_eq!(text_of(&got), "Hello wor", "{dialect}");
        assert!(got.error.is_some(), "{dialect}: in-band error");
        assert_eq!(rec.outcome, Outcome::UpstreamClosedEarly, "{dialect}");
        assert!(!rec.flags.contains(&Flag::Continued));
        let b = rec.attempts.iter().find(|a| a.channel == "b").unwrap();
        assert_eq!(
            (b.role, b.status, b.won),
            (AttemptRole::Continuation, Some(400), false)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_cut_before_any_text_or_with_no_channel_left_is_not_continued() {
    for dialect in DIALECTS {
        // Only the envelope reached the client: nothing a prefill could carry. With `b` left the
        // read-ahead fails a over to b before the commit instead (a failover, no continuation).
        let a = reply(&started(dialect, &[]), false);
        let gw = gateway_with(&[("a", a.clone())], |_| {}).await;
        let (_, body, rec) = gw.call(dialect).await;
        assert_eq!(
            rec.outcome,
            Outcome::UpstreamClosedEarly,
            "{dialect}: {body}"
        );
        assert!(rec
            .attempts
            .iter()
            .all(|a| a.role != AttemptRole::Continuation));
        // Text, but no other channel: the in-band error, as before.
        let cut = reply(&started(dialect, &["Hello"]), false);
        let gw = gateway_with(&[("a", cut)], |_| {}).await;
        let (_, body, rec) = gw.call(dialect).await;
        assert!(body.contains("closed the stream"), "{dialect}: {body}");
        assert_eq!(rec.attempts.len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_translated_stream_is_continued_in_the_clients_dialect_too() {
    for dialect in [Dialect::Chat, Dialect::Responses] {
        // `a` speaks Messages only: the client's stream so far is a translation.
        let a = reply(&started(Dialect::Messages, &["Hello", " wor"]), false);
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&[("a", a), ("b", b)], |cfg| {
            two_channels(cfg);
            cfg.channels[0].dialect = Some(Dialect::Messages);
        })
        .await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}: {body}");
        let got = read_stream(dialect, body.as_bytes());
        assert_eq!(text_of(&got), "Hello world!", "{dialect}: {body}");
        assert!(got.error.is_none() && got.ended, "{dialect}\n{body}");
        assert_eq!(
            body.matches("event: response.created").count(),
            usize::from(dialect == Dialect::Responses)
        );
        assert_eq!(rec.outcome, Outcome::Completed, "{dialect}");
        assert!(rec.flags.contains(&Flag::Continued));
    }
}
