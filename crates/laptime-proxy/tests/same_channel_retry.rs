//! When the only channel left fails with a retryable status or connection error, it is asked
//! again (up to `max_attempts`), never at once: after its `Retry-After` when that is short, else
//! after a jittered backoff. A long `Retry-After` is relayed for the client to honour. Under
//! paused time, in every dialect: what the client got, when the upstream was asked, the record.

pub mod memory;

use std::time::Duration;

use laptime_core::timeline::{ErrorClass, Outcome};
use memory::*;

/// The times between the upstream's requests.
fn spacings(gw: &Gw) -> Vec<Duration> {
    let seen = gw.seen();
    seen.windows(2).map(|w| w[1].1 - w[0].1).collect()
}

#[tokio::test(start_paused = true)]
async fn a_500_once_is_asked_again_after_a_backoff_and_the_answer_completes() {
    for dialect in DIALECTS {
        let reply = Reply::status(5, 500).then(healthy(dialect));
        let gw = gateway(&[("a", reply)], |_| {}).await;
        let (status, body, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}: {body}");
        assert_eq!(rec.outcome, Outcome::Completed);
        let classes: Vec<_> = rec.attempts.iter().map(|a| a.error_class).collect();
        assert_eq!(classes, [Some(ErrorClass::UpstreamStatus5xx), None]);
        // The first answer came 5 ms after the request; the retry waited 125–250 ms more.
        let gap = spacings(&gw)[0];
        assert!(
            gap >= ms(5 + 125) && gap <= ms(5 + 250),
            "{dialect}: {gap:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_with_a_short_retry_after_is_asked_again_exactly_after_it() {
    for dialect in DIALECTS {
        let limited = Reply::status(5, 429).with_header("retry-after", "1");
        let gw = gateway(&[("a", limited.then(healthy(dialect)))], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!(status, 200, "{dialect}");
        assert_eq!(rec.attempts.len(), 2);
        assert_eq!(rec.attempts[0].error_class, Some(ErrorClass::RateLimited));
        assert_eq!(spacings(&gw), [ms(5 + 1000)], "{dialect}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_with_a_long_retry_after_is_relayed_with_it_and_not_asked_again() {
    for dialect in DIALECTS {
        let limited = Reply::status(5, 429).with_header("retry-after", "30");
        let gw = gateway(&[("a", limited.then(healthy(dialect)))], |_| {}).await;
        let resp = gw.send(dialect).await;
        assert_eq!(resp.status(), 429, "{dialect}");
        assert_eq!(resp.headers()["retry-after"], "30");
        let id = request_id(&resp);
        drop(resp);
        let rec = gw.record(&id);
        assert_eq!(rec.attempts.len(), 1);
        assert_eq!(gw.seen().len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn a_persistent_429_is_asked_with_growing_jittered_waits_and_at_most_max_attempts() {
    for dialect in DIALECTS {
        let gw = gateway(&[("a", Reply::status(5, 429))], |_| {}).await;
        let (status, _, rec) = gw.call(dialect).await;
        // The last attempt's answer is the client's: the upstream's own 429.
        assert_eq!(status, 429, "{dialect}");
        assert_eq!(rec.attempts.len(), 3);
        let gaps = spacings(&gw);
        assert_eq!(gaps.len(), 2);
        assert!(gaps[0] >= ms(5 + 125) && gaps[0] <= ms(5 + 250), "{gaps:?}");
        assert!(gaps[1] >= ms(5 + 250) && gaps[1] <= ms(5 + 500), "{gaps:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn with_another_channel_left_a_500_fails_over_at_once() {
    for dialect in DIALECTS {
        let gw = gateway(
            &[("a", Reply::status(5, 500)), ("b", healthy(dialect))],
            |_| {},
        )
        .await;
        let (status, _, rec) = gw.call(dialect).await;
        assert_eq!((status, rec.channel.as_deref()), (200, Some("b")));
        assert_eq!(
            spacings(&gw),
            [ms(5)],
            "{dialect}: no wait before the other channel"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_wait_max_ms_0_turns_same_channel_retries_off() {
    let gw = gateway(
        &[(
            "a",
            Reply::status(5, 500).then(healthy(laptime_core::Dialect::Chat)),
        )],
        |r| r.failover.retry_wait_max_ms = 0,
    )
    .await;
    let (status, _, rec) = gw.call(laptime_core::Dialect::Chat).await;
    assert_eq!((status, rec.attempts.len()), (500, 1));
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_asked_again_and_the_last_refusal_answers_without_a_wait() {
    for dialect in DIALECTS {
        // Channel `gone` has no upstream: every connection is refused.
        let gw = gateway_with(&[("a", healthy(dialect))], |cfg| {
            cfg.channels = vec![channel("gone", 0)];
        })
        .await;
        let start = tokio::time::Instant::now();
        let (status, _, rec) = gw.call(dialect).await;
        let took = start.elapsed();
        assert_eq!(status, 502, "{dialect}");
        let classes: Vec<_> = rec.attempts.iter().map(|a| a.error_class).collect();
        assert_eq!(classes, [Some(ErrorClass::ConnectFailed); 3]);
        // Two backoffs (125–250 ms, then 250–500 ms), and none after the third refusal.
        assert!(took >= ms(375) && took <= ms(750), "{dialect}: {took:?}");
    }
}
