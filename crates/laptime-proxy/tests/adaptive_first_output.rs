//! While another channel could take over, the first-output deadline adapts to the (channel,
//! model)'s recent history: 4 × its p95 time to first output, at least 10 s, at most the
//! configured 60 s. A first token 20 s late on a channel that answers in milliseconds fails
//! over at 10 s; long prefills on a channel whose history is long do not. Under paused time.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::timeline::{ErrorClass, Outcome, RequestRecord};
use laptime_core::Dialect;
use memory::*;

/// One streamed Chat call at any time: the record.
async fn chat(gw: &Gw) -> RequestRecord {
    let body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = gw
        .post_later(Dialect::Chat.path(), body, Some(&gw.token))
        .await;
    let id = request_id(&resp);
    resp.into_body().collect().await.unwrap();
    gw.record(&id)
}

/// `n` answers whose first output comes `first_output_ms` after the head, then `last`.
fn history(n: usize, first_output_ms: u64, last: Reply) -> Reply {
    let f = frames(Dialect::Chat);
    let one = Reply::sse(
        20,
        &[
            (5, f.preamble),
            (first_output_ms, f.text),
            (first_output_ms + 5, f.terminal),
        ],
        false,
    );
    let mut chain = one.clone();
    for _ in 1..n {
        chain = chain.then(one.clone());
    }
    chain.then(last)
}

#[tokio::test(start_paused = true)]
async fn a_first_output_far_past_the_channels_history_fails_over_at_the_floor() {
    let f = frames(Dialect::Chat);
    let late = Reply::sse(
        20,
        &[(5, f.preamble), (20_000, f.text), (20_005, f.terminal)],
        false,
    );
    // Heartbeats keep the idle deadline away from the late answer.
    let late = Reply {
        frames: {
            let mut v = late.frames.clone();
            v.extend(
                repeat(": ping\n\n", 1_000, 1_000, 19_000)
                    .into_iter()
                    .map(|(t, s)| (ms(t), s.to_string())),
            );
            v.sort_by_key(|(t, _)| *t);
            v
        },
        ..late
    };
    let gw = gateway(
        &[("a", history(20, 10, late)), ("b", healthy(Dialect::Chat))],
        |_| {},
    )
    .await;
    for _ in 0..20 {
        assert_eq!(chat(&gw).await.channel.as_deref(), Some("a"));
    }
    let rec = chat(&gw).await;
    assert_eq!(
        (rec.outcome, rec.channel.as_deref()),
        (Outcome::Completed, Some("b"))
    );
    let cut = &rec.attempts[0];
    assert_eq!(cut.error_class, Some(ErrorClass::Timeout));
    // History p95 30 ms × 4 is under the floor: cut at 10 s after a's dispatch, and b asked then.
    assert_eq!(cut.end.unwrap() - cut.start.unwrap(), ms(10_000));
    assert_eq!(rec.attempts[1].start, cut.end);
    let seen = gw.seen();
    assert_eq!(seen.len(), 22);
    assert_eq!(seen[21].1 - seen[20].1, ms(10_000));
}

#[tokio::test(start_paused = true)]
async fn long_prefills_on_a_channel_whose_history_is_long_do_not_fail_over() {
    let f = frames(Dialect::Chat);
    // Every answer's first output 25 s after its head, heartbeats meanwhile.
    let mut slow = Reply::sse(
        20,
        &[(5, f.preamble), (25_000, f.text), (25_005, f.terminal)],
        false,
    );
    slow.frames.extend(
        repeat(": ping\n\n", 1_000, 1_000, 24_000)
            .into_iter()
            .map(|(t, s)| (ms(t), s.to_string())),
    );
    slow.frames.sort_by_key(|(t, _)| *t);
    let mut chain = slow.clone();
    for _ in 0..20 {
        chain = chain.then(slow.clone());
    }
    let gw = gateway(&[("a", chain), ("b", healthy(Dialect::Chat))], |_| {}).await;
    for _ in 0..21 {
        let rec = chat(&gw).await;
        assert_eq!(rec.channel.as_deref(), Some("a"), "{:?}", rec.attempts);
        assert_eq!(rec.attempts.len(), 1);
    }
    assert!(gw.seen().iter().all(|(h, _)| h == "a"));
}
