//! The upstream fault matrix with the default configuration, one test per fault, each in every
//! dialect under paused time: what the client got, which upstreams were asked and when, the
//! record, and a healthy request afterwards. Channel `a` is tried first; `b`, when there is
//! one, is the fallback.

#![expect(clippy::unwrap_used, reason = "test helpers fail loudly")]

pub mod memory;

use std::time::Duration;

use laptime_core::slow::Flag;
use laptime_core::timeline::{AttemptRole, ErrorClass, Outcome, RequestRecord};
use laptime_core::translate::stream::{read_stream, BlockKind};
use laptime_core::Dialect;
use laptime_proxy::config::{Config, Models};
use memory::*;

fn hosts(gw: &Gw) -> Vec<String> {
    gw.seen().into_iter().map(|(h, _)| h).collect()
}

fn gaps(gw: &Gw) -> Vec<Duration> {
    gw.seen().windows(2).map(|w| w[1].1 - w[0].1).collect()
}

fn classes(rec: &RequestRecord) -> Vec<Option<ErrorClass>> {
    rec.attempts.iter().map(|a| a.error_class).collect()
}

fn text(dialect: Dialect, body: &str) -> String {
    read_stream(dialect, body.as_bytes())
        .blocks
        .iter()
        .filter(|b| b.kind == BlockKind::Text)
        .map(|b| serde_json::from_str::<String>(&format!("\"{}\"", b.text)).unwrap())
        .collect()
}

/// After the fault, the gateway answers the next request whole.
async fn healthy_afterwards(gw: &Gw, dialect: Dialect) {
    let (status, body, rec) = gw.call_later(dialect).await;
    assert_eq!(status, 200, "{dialect}: afterwards {body}");
    assert_eq!(rec.outcome, Outcome::Completed, "{dialect}: afterwards");
}

fn with_b(cfg: &mut Config) {
    cfg.channels = vec![channel("a", 0), channel("b", 1)];
}

#[tokio::test(start_paused = true)]
async fn rate_limited_with_a_short_retry_after_is_asked_again_exactly_after_it() {
    for dialect in Dialect::ALL {
        let limited = Reply::status(5, 429).with_header("retry-after", "1");
        let gw = gateway(&[("a", limited.then(healthy(dialect)))], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(classes(&rec), [Some(ErrorClass::RateLimited), None]);
        assert_eq!(gaps(&gw), [ms(5 + 1_000)], "{dialect}");
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limited_with_a_long_retry_after_fails_over_at_once_and_the_channel_cools_down() {
    for dialect in Dialect::ALL {
        let limited = Reply::status(5, 429).with_header("retry-after", "30");
        let gw = gateway(
            &[
                ("a", limited.then(healthy(dialect))),
                ("b", healthy(dialect)),
            ],
            |_| {},
        )
        .await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(gaps(&gw), [ms(5)], "{dialect}: no wait");
        // Within its Retry-After, `a` is passed over.
        let (status, _, rec) = gw.call_later(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(hosts(&gw), ["a", "b", "b"], "{dialect}");
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limited_persistently_is_asked_a_bounded_number_of_times_with_jittered_waits() {
    for dialect in Dialect::ALL {
        let three = Reply::status(5, 429)
            .then(Reply::status(5, 429))
            .then(Reply::status(5, 429))
            .then(healthy(dialect));
        let gw = gateway(&[("a", three)], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!((status, rec.attempts.len()), (429, 3), "{dialect}");
        let g = gaps(&gw);
        assert!(
            g[0] >= ms(5 + 125) && g[0] <= ms(5 + 250),
            "{dialect}: {g:?}"
        );
        assert!(
            g[1] >= ms(5 + 250) && g[1] <= ms(5 + 500),
            "{dialect}: {g:?}"
        );
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_500_once_is_asked_once_more_on_the_same_channel() {
    for dialect in Dialect::ALL {
        let gw = gateway(
            &[("a", Reply::status(5, 500).then(healthy(dialect)))],
            |_| {},
        )
        .await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(classes(&rec), [Some(ErrorClass::UpstreamStatus5xx), None]);
        assert_eq!(hosts(&gw), ["a", "a"]);
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_503_that_persists_fails_over_to_the_next_channel() {
    for dialect in Dialect::ALL {
        let gw = gateway(
            &[("a", Reply::status(5, 503)), ("b", healthy(dialect))],
            |_| {},
        )
        .await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(classes(&rec), [Some(ErrorClass::UpstreamStatus5xx), None]);
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_reset_before_headers_fails_over_at_once() {
    for dialect in Dialect::ALL {
        // Without the reset this reply would be a healthy answer from `a`.
        let reset = Reply {
            reset_before_head: true,
            ..healthy(dialect)
        };
        let gw = gateway(&[("a", reset), ("b", healthy(dialect))], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(rec.attempts.len(), 2);
        let class = rec.attempts[0].error_class;
        assert!(class.is_some_and(|c| c.retryable()), "{dialect}: {class:?}");
        assert_eq!(gaps(&gw), [ms(0)], "{dialect}: no wait");
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn no_response_at_all_fails_over_at_the_headers_deadline() {
    for dialect in Dialect::ALL {
        let silent = Reply::status(600_000, 200).then(healthy(dialect));
        let gw = gateway(&[("a", silent), ("b", healthy(dialect))], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::Timeout));
        // headers_ms is 15 s by default.
        assert_eq!(gaps(&gw), [ms(15_000)], "{dialect}");
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_first_token_20_s_late_on_a_fast_channel_fails_over_at_the_adaptive_floor() {
    for dialect in Dialect::ALL {
        let f = frames(dialect);
        let fast = Reply::sse(
            20,
            &[(5, f.preamble), (10, f.text), (15, f.terminal)],
            false,
        );
        let mut history = fast.clone();
        for _ in 1..20 {
            history = history.then(fast.clone());
        }
        let mut late = Reply::sse(
            20,
            &[(5, f.preamble), (20_000, f.text), (20_005, f.terminal)],
            false,
        );
        late.frames.extend(
            repeat(": ping\n\n", 1_000, 1_000, 19_000)
                .into_iter()
                .map(|(t, s)| (ms(t), s.to_string())),
        );
        late.frames.sort_by_key(|(t, _)| *t);
        let gw = gateway(
            &[("a", history.then(late)), ("b", healthy(dialect))],
            |_| {},
        )
        .await;
        for _ in 0..20 {
            let (status, _, _) = gw.call_later(dialect).await;
            assert_eq!(status, 200);
        }
        let asked = tokio::time::Instant::now();
        let (status, _, rec) = gw.call_later(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}"
        );
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::Timeout));
        // 4 × p95 (10 ms) is under the 10 s floor: the floor decides.
        let b_at = gw.seen().last().unwrap().1;
        let a_at = gw.seen()[gw.seen().len() - 2].1;
        assert_eq!(b_at - a_at, ms(10_000), "{dialect}");
        assert!(asked.elapsed() < ms(10_100));
        healthy_afterwards(&gw, dialect).await;
    }
}

/// `a` cuts or stalls after "Hello wor"; `b` continues with "ld!".
fn cut_and_continued(dialect: Dialect, stall: bool, b: Reply) -> [(&'static str, Reply); 2] {
    [
        (
            "a",
            reply(&started(dialect, &["Hello", " wor"]), stall).then(healthy(dialect)),
        ),
        ("b", b.then(healthy(dialect))),
    ]
}

fn pinned_b(cfg: &mut Config) {
    with_b(cfg);
    cfg.channels[1].dialect = Some(Dialect::Messages);
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_text_is_continued_by_the_fallback_into_the_whole_answer() {
    for dialect in Dialect::ALL {
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&cut_and_continued(dialect, false, b), pinned_b).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(text(dialect, &body), "Hello world!", "{dialect}: {body}");
        assert_eq!(rec.outcome, Outcome::Completed, "{dialect}");
        assert!(rec.flags.contains(&Flag::Continued));
        assert_eq!(rec.attempts[1].role, AttemptRole::Continuation);
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_stalls_after_text_is_continued_at_the_idle_deadline() {
    for dialect in Dialect::ALL {
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&cut_and_continued(dialect, true, b), pinned_b).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(text(dialect, &body), "Hello world!", "{dialect}: {body}");
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::Timeout));
        // idle_ms is 30 s by default.
        let frames = started(dialect, &["Hello", " wor"]).len() as u64;
        let b_at = gw.seen()[1].1;
        assert_eq!(b_at, ms(20 + 5 + 10 * (frames - 1) + 30_000), "{dialect}");
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_refuses_the_prefill_leaves_a_clean_in_band_error_naming_the_cut() {
    for dialect in Dialect::ALL {
        let refuses = Reply::error(
            5,
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill."}}"#,
        );
        let gw = gateway_with(&cut_and_continued(dialect, false, refuses), pinned_b).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert!(
            body.contains("closed the stream before it was complete"),
            "{dialect}: {body}"
        );
        assert!(!body.contains("prefill"), "{dialect}: {body}");
        assert_eq!(rec.outcome, Outcome::UpstreamClosedEarly);
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_chat_stream_without_done_but_complete_is_completed_and_flagged() {
    let f = frames(Dialect::Chat);
    let usage =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\n";
    let no_done = Reply::sse(20, &[(5, f.preamble), (10, f.text), (12, usage)], false);
    let gw = gateway(&[("a", no_done.then(healthy(Dialect::Chat)))], |_| {}).await;
    let (status, _, rec) = gw.call(Dialect::Chat).await;
    assert_eq!(status, 200);
    assert_eq!(rec.outcome, Outcome::Completed);
    assert!(rec.flags.contains(&Flag::NoTerminalSentinel));
    healthy_afterwards(&gw, Dialect::Chat).await;
}

#[tokio::test(start_paused = true)]
async fn a_stream_without_its_terminal_and_no_fallback_ends_with_an_in_band_error() {
    for dialect in Dialect::ALL {
        let cut = reply(&started(dialect, &["Hello"]), false).then(healthy(dialect));
        let gw = gateway(&[("a", cut)], |_| {}).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200);
        assert!(
            body.contains("closed the stream before it was complete"),
            "{dialect}: {body}"
        );
        assert_eq!(rec.outcome, Outcome::UpstreamClosedEarly, "{dialect}");
        healthy_afterwards(&gw, dialect).await;
    }
}

fn over_context() -> Reply {
    Reply::error(
        5,
        400,
        r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
    )
}

#[tokio::test(start_paused = true)]
async fn context_length_exceeded_goes_to_the_larger_model_and_never_the_same_one_again() {
    for dialect in Dialect::ALL {
        let replies = [
            ("a", over_context().then(healthy(dialect))),
            ("a2", healthy(dialect)),
            ("big", healthy(dialect)),
        ];
        let gw = gateway_with(&replies, |cfg| {
            let mut big = channel("big", 2);
            big.models = Models::List(vec!["m-large".into()]);
            cfg.channels = vec![channel("a", 0), channel("a2", 1), big];
            cfg.routes[0].context_fallback = Some("m-large".into());
        })
        .await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("big")),
            "{dialect}"
        );
        assert_eq!(hosts(&gw), ["a", "big"], "{dialect}");
        assert_eq!(
            rec.attempts[0].error_class,
            Some(ErrorClass::ContextLengthExceeded)
        );
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_content_filter_refusal_is_relayed_with_its_reason_and_not_retried() {
    for dialect in Dialect::ALL {
        let filtered = Reply::error(
            5,
            400,
            r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"code":"content_filter"}}"#,
        );
        let gw = gateway(
            &[
                ("a", filtered.then(healthy(dialect))),
                ("b", healthy(dialect)),
            ],
            |_| {},
        )
        .await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 400, "{dialect}");
        assert!(
            body.contains("content_filter"),
            "{dialect}: the reason reaches the client"
        );
        assert_eq!(hosts(&gw), ["a"], "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::ContentFiltered));
        healthy_afterwards(&gw, dialect).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_down_for_60_s_is_back_within_30_s_of_its_recovery() {
    for dialect in Dialect::ALL {
        let a = Reply {
            down_until: Some(ms(60_000)),
            ..healthy(dialect)
        };
        let gw = gateway(&[("a", a), ("b", healthy(dialect))], |_| {}).await;
        let mut served_by = Vec::new();
        let start = tokio::time::Instant::now();
        // One request a second for 100 s.
        for i in 0..100u64 {
            tokio::time::sleep_until(start + ms(i * 1_000)).await;
            let (status, _, rec) = gw.call_later(dialect).await;
            assert_eq!(status, 200, "{dialect}: request {i}");
            served_by.push((i, rec.channel.unwrap()));
        }
        let back = served_by
            .iter()
            .find(|(i, c)| *i >= 60 && c == "a")
            .map(|(i, _)| *i)
            .expect("back on the primary");
        assert!(back <= 60 + 30, "{dialect}: back at {back} s");
        assert!(
            served_by
                .iter()
                .filter(|(i, _)| *i > back + 1)
                .all(|(_, c)| c == "a"),
            "{dialect}: and stays there: {served_by:?}"
        );
        // While it was down it was asked rarely (circuit), not once per request.
        let a_while_down = gw
            .seen()
            .iter()
            .filter(|(h, t)| h == "a" && *t < ms(60_000))
            .count();
        assert!(
            a_while_down < 20,
            "{dialect}: {a_while_down} calls to a while down"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn after_a_failover_the_client_sees_the_fallbacks_usage_and_the_record_its_channel() {
    for dialect in Dialect::ALL {
        let gw = gateway(
            &[("a", Reply::status(5, 500)), ("b", healthy(dialect))],
            |cfg| {
                cfg.failover.retry_wait_max_ms = 0;
            },
        )
        .await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        let answer = read_stream(dialect, body.as_bytes());
        assert_eq!(rec.channel.as_deref(), Some("b"));
        // The record's tokens are the answer's, the fallback's own report.
        if let Some(out) = answer.usage.output {
            assert_eq!(rec.tokens.output, Some(out), "{dialect}");
        }
        assert_eq!(rec.failover_count, 1, "{dialect}");
    }
}

/// An event cut in the middle of its JSON, in the dialect's framing.
fn malformed(dialect: Dialect) -> String {
    let bad: &str = match dialect {
        Dialect::Chat | Dialect::Gemini => "data: {\"choices\":[{\"delta\":{\"cont\n\n",
        Dialect::Responses => {
            "event: response.output_text.delta\ndata: {\"type\":\"response.output\n\n"
        }
        Dialect::Messages => "event: content_block_delta\ndata: {\"type\":\"content_block_d\n\n",
    };
    bad.replace(
        "\n\n",
        if dialect == Dialect::Gemini {
            "\r\n\r\n"
        } else {
            "\n\n"
        },
    )
}

#[tokio::test(start_paused = true)]
async fn a_malformed_event_is_never_relayed_and_the_stream_is_rescued_or_ended_in_band() {
    for dialect in Dialect::ALL {
        // Before any output, with a fallback: failed over, the client sees only b's answer.
        let mut early = started(dialect, &[]);
        early.push(malformed(dialect));
        let gw = gateway(
            &[("a", reply(&early, false)), ("b", healthy(dialect))],
            |_| {},
        )
        .await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(
            (status, rec.channel.as_deref()),
            (200, Some("b")),
            "{dialect}: {body}"
        );
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::InvalidBody));
        assert!(
            !body.contains("cont\n") && !body.contains("_d\n"),
            "{dialect}: {body}"
        );
        healthy_afterwards(&gw, dialect).await;

        // After text, with a fallback that continues: one whole answer.
        let mut late = started(dialect, &["Hello", " wor"]);
        late.push(malformed(dialect));
        late.extend(
            started(dialect, &["never sent"])
                .into_iter()
                .skip(started(dialect, &[]).len()),
        );
        let b = reply(&whole_messages(&["ld!"]), false);
        let gw = gateway_with(&[("a", reply(&late, false)), ("b", b)], pinned_b).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(text(dialect, &body), "Hello world!", "{dialect}: {body}");
        assert!(
            !body.contains("never sent"),
            "{dialect}: nothing after it is read"
        );
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::InvalidBody));
        assert!(rec.flags.contains(&Flag::Continued));

        // After text, alone: the client is told in-band; the bad bytes never reach it.
        let gw = gateway(&[("a", reply(&late, false).then(healthy(dialect)))], |_| {}).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert!(body.contains("not valid JSON"), "{dialect}: {body}");
        if matches!(dialect, Dialect::Chat | Dialect::Responses) {
            assert!(body.contains("upstream_invalid_event"), "{dialect}: {body}");
        }
        assert!(!body.contains("never sent"), "{dialect}: {body}");
        assert_eq!(text(dialect, &body), "Hello wor", "{dialect}");
        assert_eq!(rec.outcome, Outcome::UpstreamError, "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::InvalidBody), "{dialect}");
        healthy_afterwards(&gw, dialect).await;
    }
}
