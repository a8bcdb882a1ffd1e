//! The whole request path under paused tokio time, against in-memory upstreams (real HTTP/1.1
//! bytes over in-process pipes, no socket): deadlines, failover and hedging happen at exactly
//! the configured offsets, the upstreams see exactly the attempts expected, and the record (in
//! a real SQLite store) carries every attempt's marks to the microsecond.

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::timeline::{DeadlineKind, ErrorClass, Hedge, Outcome};
use laptime_core::Dialect;
use laptime_proxy::config::RouteConfig;
use memory::*;

#[tokio::test(start_paused = true)]
async fn a_stream_silent_before_its_first_event_fails_over_exactly_at_the_first_event_deadline() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let gw = gateway(
            &[("a", Reply::sse(10, &[], true)), ("b", healthy(dialect))],
            |r| r.timeouts.first_event_ms = 300,
        )
        .await;
        let (status, text, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        // The client gets only the backup's bytes, plus the comment.
        assert_eq!(
            without_comment(&text, f.terminal),
            [f.preamble, f.text, f.terminal].concat()
        );
        assert_eq!(
            gw.seen(),
            vec![("a".to_string(), ms(0)), ("b".to_string(), ms(300))]
        );
        assert_eq!(rec.outcome, Outcome::Completed);
        assert_eq!(rec.failover_count, 1);
        let (a, b) = (&rec.attempts[0], &rec.attempts[1]);
        assert_eq!((a.channel.as_str(), a.won), ("a", false));
        assert_eq!(a.error_class, Some(ErrorClass::Timeout));
        assert_eq!(
            (a.start, a.headers, a.end),
            (Some(ms(0)), Some(ms(10)), Some(ms(300)))
        );
        assert_eq!(a.first_byte, None);
        assert_eq!(
            (b.channel.as_str(), b.won, b.role.as_str()),
            ("b", true, "failover")
        );
        assert_eq!((b.start, b.headers), (Some(ms(300)), Some(ms(320))));
        let m = rec.marks;
        assert_eq!(m.upstream_start, Some(ms(300)));
        assert_eq!(m.upstream_headers, Some(ms(320)));
        assert_eq!(m.first_byte, Some(ms(325)));
        assert_eq!(m.first_event, Some(ms(325)));
        assert_eq!(m.first_effective, Some(ms(330)));
        assert_eq!(m.first_visible, Some(ms(330)));
        assert_eq!(m.upstream_done, Some(ms(335)));
        assert_eq!(rec.channel.as_deref(), Some("b"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_with_only_a_preamble_fails_over_exactly_at_the_first_output_deadline() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let gw = gateway(
            &[
                ("a", Reply::sse(10, &[(5, f.preamble)], true)),
                ("b", healthy(dialect)),
            ],
            |r| r.timeouts.first_output_ms = 400,
        )
        .await;
        let (status, text, rec) = gw.call(dialect).await;
        assert_eq!(status, 200);
        // One preamble: the first attempt's was held, never relayed.
        assert_eq!(text.matches(f.preamble).count(), 1, "{dialect}: {text}");
        assert_eq!(gw.seen()[1], ("b".to_string(), ms(400)));
        let a = &rec.attempts[0];
        assert_eq!(a.error_class, Some(ErrorClass::Timeout));
        assert_eq!((a.first_byte, a.end), (Some(ms(15)), Some(ms(400))));
        assert_eq!(rec.marks.first_visible, Some(ms(430)));
        assert_eq!(rec.failover_count, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn an_error_event_before_any_output_fails_over_when_it_arrives() {
    let dialect = Dialect::Messages;
    let f = frames(dialect);
    let overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let gw = gateway(
        &[
            (
                "a",
                Reply::sse(10, &[(5, f.preamble), (40, overloaded)], false),
            ),
            ("b", healthy(dialect)),
        ],
        |_| {},
    )
    .await;
    let (status, text, rec) = gw.call(dialect).await;
    assert_eq!(status, 200);
    assert!(!text.contains("overloaded_error"), "{text}");
    assert_eq!(gw.seen()[1], ("b".to_string(), ms(50)));
    let a = &rec.attempts[0];
    assert_eq!(a.error_class, Some(ErrorClass::StreamError));
    assert_eq!(a.end, Some(ms(50)));
    assert_eq!(rec.marks.upstream_start, Some(ms(50)));
    assert_eq!(rec.outcome, Outcome::Completed);
}

#[tokio::test(start_paused = true)]
async fn a_missing_head_fails_over_exactly_at_the_headers_deadline_and_a_retryable_status_at_once()
{
    let dialect = Dialect::Chat;
    let gw = gateway(
        &[
            ("a", Reply::sse(3_600_000, &[], false)),
            ("b", Reply::status(30, 503)),
            ("c", healthy(dialect)),
        ],
        |r| r.timeouts.headers_ms = 250,
    )
    .await;
    let (status, _, rec) = gw.call(dialect).await;
    assert_eq!(status, 200);
    let seen = gw.seen();
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), ms(0)),
            ("b".to_string(), ms(250)),
            ("c".to_string(), ms(280))
        ]
    );
    let (a, b, c) = (&rec.attempts[0], &rec.attempts[1], &rec.attempts[2]);
    assert_eq!(
        (a.error_class, a.end),
        (Some(ErrorClass::Timeout), Some(ms(250)))
    );
    assert_eq!(a.headers, None);
    assert_eq!(
        (b.status, b.error_class),
        (Some(503), Some(ErrorClass::UpstreamStatus5xx))
    );
    assert_eq!((b.headers, b.end), (Some(ms(280)), Some(ms(280))));
    assert!(c.won);
    assert_eq!(rec.failover_count, 2);
}

#[tokio::test(start_paused = true)]
async fn alone_a_missed_headers_deadline_is_a_504_of_kind_headers() {
    let gw = gateway(&[("a", Reply::sse(3_600_000, &[], false))], |r| {
        r.timeouts.headers_ms = 250
    })
    .await;
    let (status, text, rec) = gw.call(Dialect::Responses).await;
    assert_eq!(status, 504, "{text}");
    assert_eq!(rec.outcome, Outcome::Timeout);
    assert_eq!(rec.timeout_kind, Some(DeadlineKind::Headers));
    assert_eq!(rec.attempts[0].end, Some(ms(250)));
    assert_eq!(rec.marks.handler_done, Some(ms(250)));
}

#[tokio::test(start_paused = true)]
async fn the_last_candidate_is_relayed_at_once_and_a_stall_after_output_ends_in_band_at_the_idle_deadline(
) {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let gw = gateway(
            &[("a", Reply::sse(10, &[(5, f.preamble), (10, f.text)], true))],
            |r| r.timeouts.idle_ms = 1_000,
        )
        .await;
        let (status, text, rec) = gw.call(dialect).await;
        assert_eq!(status, 200);
        // Everything the upstream sent, then the dialect's own error event; no terminal frame.
        assert!(text.starts_with(&[f.preamble, f.text].concat()), "{text}");
        assert!(text.contains("idle deadline"), "{dialect}: {text}");
        assert!(!text.contains(f.terminal));
        assert_eq!(rec.outcome, Outcome::Timeout);
        assert_eq!(rec.timeout_kind, Some(DeadlineKind::Idle));
        // The last byte came at 20 ms: idle fires exactly 1 s later.
        assert_eq!(rec.marks.upstream_done, Some(ms(1_020)));
        assert_eq!(rec.marks.first_visible, Some(ms(20)));
    }
}

#[tokio::test(start_paused = true)]
async fn a_hedge_goes_out_exactly_after_its_delay_and_the_first_event_wins() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let slow = Reply::sse(
            500,
            &[(5, f.preamble), (10, f.text), (15, f.terminal)],
            false,
        );
        let gw = gateway(&[("a", slow), ("b", healthy(dialect))], hedge_after(100)).await;
        let (status, text, rec) = gw.call(dialect).await;
        assert_eq!(status, 200);
        assert_eq!(
            without_comment(&text, f.terminal),
            [f.preamble, f.text, f.terminal].concat()
        );
        assert!(text.contains("hedge=hedge"), "{text}");
        assert_eq!(
            gw.seen(),
            vec![("a".to_string(), ms(0)), ("b".to_string(), ms(100))]
        );
        assert_eq!(rec.hedge, Hedge::Hedge);
        let (a, b) = (&rec.attempts[0], &rec.attempts[1]);
        assert_eq!(
            (a.role.as_str(), a.won, a.error_class),
            ("primary", false, None)
        );
        // The loser was closed when the hedge's first event came, before its own head.
        assert_eq!((a.headers, a.end), (None, Some(ms(125))));
        assert_eq!((b.role.as_str(), b.won), ("hedge", true));
        assert_eq!((b.start, b.headers), (Some(ms(100)), Some(ms(120))));
        // Figures count from the primary's dispatch.
        assert_eq!(rec.marks.upstream_start, Some(ms(0)));
        assert_eq!(rec.marks.first_event, Some(ms(125)));
        assert_eq!(rec.failover_count, 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_answers_before_the_hedge_delay_sends_no_hedge() {
    let dialect = Dialect::Chat;
    let gw = gateway(
        &[("a", healthy(dialect)), ("b", healthy(dialect))],
        hedge_after(100),
    )
    .await;
    let (_, text, rec) = gw.call(dialect).await;
    assert!(text.contains("hedge=none"), "{text}");
    assert_eq!(gw.seen(), vec![("a".to_string(), ms(0))]);
    assert_eq!(rec.hedge, Hedge::None);
    assert_eq!(rec.attempts.len(), 1);
    assert_eq!(rec.marks.first_visible, Some(ms(30)));
}

#[tokio::test(start_paused = true)]
async fn each_stream_deadline_after_the_commit_fires_exactly_with_its_own_kind() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let heartbeat = ": keep-alive\n\n";
        // (frames after a head at 10 ms, the route's deadlines, kind, when it fires)
        let first_output = vec![(5, f.preamble)];
        let mut progress = vec![(5, f.preamble), (10, f.text)];
        progress.extend(repeat(heartbeat, 50, 50, 2_000));
        let mut total = vec![(5, f.preamble)];
        total.extend(repeat(f.text, 10, 50, 2_000));
        type Case = (
            Vec<(u64, &'static str)>,
            fn(&mut RouteConfig),
            DeadlineKind,
            u64,
        );
        let cases: [Case; 3] = [
            (
                first_output,
                |r| r.timeouts.first_output_ms = 300,
                DeadlineKind::FirstOutput,
                300,
            ),
            // Heartbeats keep it from going idle, but they are not progress.
            (
                progress,
                |r| r.timeouts.progress_ms = 300,
                DeadlineKind::Progress,
                320,
            ),
            (
                total,
                |r| r.timeouts.total_ms = 400,
                DeadlineKind::Total,
                400,
            ),
        ];
        for (script, deadlines, kind, at) in cases {
            let gw = gateway(&[("a", Reply::sse(10, &script, true))], deadlines).await;
            let (status, text, rec) = gw.call(dialect).await;
            assert_eq!(status, 200);
            assert!(
                text.contains(&format!("the {} deadline", kind.as_str())),
                "{dialect}: {text}"
            );
            assert_eq!(rec.outcome, Outcome::Timeout, "{dialect} {kind:?}");
            assert_eq!(rec.timeout_kind, Some(kind));
            assert_eq!(rec.marks.upstream_done, Some(ms(at)), "{dialect} {kind:?}");
            assert_eq!(rec.marks.handler_done, Some(ms(at)), "{dialect} {kind:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn heartbeats_are_not_events_so_the_first_event_deadline_fires_through_them() {
    let ping = "event: ping\ndata: {\"type\":\"ping\"}\n\n";
    let gw = gateway(
        &[("a", Reply::sse(10, &repeat(ping, 0, 50, 5_000), true))],
        |r| r.timeouts.first_event_ms = 400,
    )
    .await;
    let (_, text, rec) = gw.call(Dialect::Messages).await;
    assert!(
        text.contains("event: ping") && text.contains("timeout_error"),
        "{text}"
    );
    assert_eq!(rec.timeout_kind, Some(DeadlineKind::FirstEvent));
    assert_eq!(rec.marks.first_byte, Some(ms(10)));
    assert_eq!(rec.marks.first_event, None);
    assert_eq!(rec.marks.handler_done, Some(ms(400)));
}

#[tokio::test(start_paused = true)]
async fn a_primary_that_fails_before_the_hedge_delay_fails_over_to_the_second_candidate_at_once() {
    let dialect = Dialect::Responses;
    let gw = gateway(
        &[("a", Reply::status(30, 500)), ("b", healthy(dialect))],
        hedge_after(100),
    )
    .await;
    let (status, _, rec) = gw.call(dialect).await;
    assert_eq!(status, 200);
    // No hedge went out: the second candidate is a failover, sent when the primary failed.
    assert_eq!(
        gw.seen(),
        vec![("a".to_string(), ms(0)), ("b".to_string(), ms(30))]
    );
    assert_eq!(rec.hedge, Hedge::None);
    let (a, b) = (&rec.attempts[0], &rec.attempts[1]);
    assert_eq!(
        (a.status, a.error_class),
        (Some(500), Some(ErrorClass::UpstreamStatus5xx))
    );
    assert_eq!(
        (b.role.as_str(), b.won, b.start),
        ("failover", true, Some(ms(30)))
    );
    assert_eq!(rec.failover_count, 1);
}

#[tokio::test(start_paused = true)]
async fn when_the_primary_fails_after_the_hedge_went_out_the_hedge_answers() {
    let dialect = Dialect::Chat;
    let gw = gateway(
        &[("a", Reply::status(110, 503)), ("b", healthy(dialect))],
        hedge_after(100),
    )
    .await;
    let (status, text, rec) = gw.call(dialect).await;
    assert_eq!(status, 200);
    assert!(text.contains("hedge=hedge"), "{text}");
    assert_eq!(
        gw.seen(),
        vec![("a".to_string(), ms(0)), ("b".to_string(), ms(100))]
    );
    let (a, b) = (&rec.attempts[0], &rec.attempts[1]);
    // The primary's 503 came at 110 ms, after the hedge went out and before its first event.
    assert_eq!((a.status, a.end), (Some(503), Some(ms(110))));
    assert_eq!(a.error_class, Some(ErrorClass::UpstreamStatus5xx));
    assert_eq!((b.won, b.headers), (true, Some(ms(120))));
    assert_eq!(rec.marks.first_event, Some(ms(125)));
    // The primary failed: that is a failover, counted, although the hedge was already out.
    assert_eq!(rec.failover_count, 1);
}

#[tokio::test(start_paused = true)]
async fn a_race_winner_that_then_misses_its_first_output_fails_over_to_the_next_candidate() {
    let dialect = Dialect::Messages;
    let f = frames(dialect);
    let gw = gateway(
        &[
            ("a", Reply::sse(3_600_000, &[], false)),
            ("b", Reply::sse(10, &[(5, f.preamble)], true)),
            ("c", healthy(dialect)),
        ],
        |r| {
            hedge_after(100)(r);
            r.timeouts.first_output_ms = 400;
        },
    )
    .await;
    let (status, text, rec) = gw.call(dialect).await;
    assert_eq!(status, 200);
    assert_eq!(text.matches(f.preamble).count(), 1, "{text}");
    // b won the race at its first event (115 ms), then missed its first output at 100 + 400.
    assert_eq!(
        gw.seen(),
        vec![
            ("a".to_string(), ms(0)),
            ("b".to_string(), ms(100)),
            ("c".to_string(), ms(500))
        ]
    );
    let (a, b, c) = (&rec.attempts[0], &rec.attempts[1], &rec.attempts[2]);
    assert_eq!((a.won, a.error_class, a.end), (false, None, Some(ms(115))));
    assert_eq!(
        (b.won, b.error_class, b.end),
        (false, Some(ErrorClass::Timeout), Some(ms(500)))
    );
    assert_eq!(b.first_byte, Some(ms(115)));
    assert_eq!(
        (c.role.as_str(), c.won, c.start),
        ("failover", true, Some(ms(500)))
    );
    assert_eq!(rec.marks.upstream_start, Some(ms(500)));
    assert_eq!(rec.failover_count, 1);
    // Neither racer answered.
    assert_eq!(rec.hedge, Hedge::None);
    assert!(text.contains("hedge=none"), "{text}");
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_mid_stream_closes_the_upstream_call_at_that_instant() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        let gw = gateway(
            &[("a", Reply::sse(10, &[(5, f.preamble), (10, f.text)], true))],
            |_| {},
        )
        .await;
        let resp = gw.send(dialect).await;
        let id = request_id(&resp);
        let mut body = resp.into_body();
        let mut got = String::new();
        while !got.contains(f.text) {
            let frame = body.frame().await.unwrap().unwrap();
            got.push_str(std::str::from_utf8(frame.data_ref().unwrap()).unwrap());
        }
        tokio::time::sleep(ms(100)).await;
        drop(body);
        // Let the connection tasks run; no time passes while they do.
        for _ in 0..100 {
            if !gw.logs.closed.lock().unwrap().is_empty() {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(
            gw.logs.closed.lock().unwrap().clone(),
            vec![("a".to_string(), ms(120))],
            "{dialect}: the upstream connection closed when the client left"
        );
        let rec = gw.record(&id);
        assert_eq!(rec.outcome, Outcome::ClientCancelled, "{dialect}");
        assert_eq!(rec.error_class, Some(ErrorClass::ClientCancelled));
        assert_eq!(rec.marks.handler_done, Some(ms(120)));
        assert_eq!(rec.marks.first_visible, Some(ms(20)));
        assert_eq!(rec.marks.upstream_done, None);
    }
}
