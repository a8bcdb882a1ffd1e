//! A stream's head is held (read ahead to its first output while a backup channel remains) only
//! up to `server.max_held_bytes`: an upstream that sends megabytes before its first output is
//! released to the client at the cap instead of growing the gateway's memory, byte-exact; a
//! whole (non-streamed) answer is read at most `server.max_answer_bytes`.

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::timeline::Outcome;
use laptime_core::Dialect;
use memory::*;
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_head_bigger_than_the_cap_is_released_at_the_cap_not_held_to_the_first_output() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        // 200 heartbeat comments of 8 KiB, one per millisecond, then the answer at +500 ms.
        let beat = format!(": {}\n\n", "p".repeat(8 * 1024 - 4));
        let mut script: Vec<(Duration, String)> = (0..200).map(|i| (ms(i), beat.clone())).collect();
        script.extend([
            (ms(500), f.preamble.to_string()),
            (ms(510), f.text.to_string()),
            (ms(520), f.terminal.to_string()),
        ]);
        let big = Reply {
            frames: script.clone(),
            ..Reply::sse(20, &[], false)
        };
        let gw = gateway_with(&[("a", big), ("b", healthy(dialect))], |cfg| {
            cfg.server.max_held_bytes = 64 * 1024;
        })
        .await;
        let start = Instant::now();
        let resp = gw.send(dialect).await;
        let head_at = start.elapsed();
        // Head after 20 ms, the cap after 8 beats: without the cap, the client would wait for
        // the first output at 530 ms.
        assert!(head_at <= ms(40), "{dialect}: head after {head_at:?}");
        let id = request_id(&resp);
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let sent: String = script.iter().map(|(_, s)| s.as_str()).collect();
        assert_eq!(without_comment(&text, f.terminal), sent, "{dialect}");
        let rec = gw.record(&id);
        assert_eq!(rec.outcome, Outcome::Completed);
        assert_eq!(rec.channel.as_deref(), Some("a"));
        assert_eq!(gw.seen().len(), 1, "{dialect}: the backup was not needed");
    }
}

#[tokio::test(start_paused = true)]
async fn a_whole_answer_over_the_cap_is_a_502_not_read_on() {
    for dialect in DIALECTS {
        // A 200 JSON answer of 5 x 64 KiB: over a 128 KiB cap.
        let chunk = format!("{{\"pad\":\"{}\"}}", "x".repeat(64 * 1024));
        let huge = Reply {
            status: 200,
            frames: (0..5).map(|i| (ms(i), chunk.clone())).collect(),
            ..Reply::status(10, 200)
        };
        let gw = gateway_with(&[("a", huge)], |cfg| {
            cfg.server.max_answer_bytes = 128 * 1024;
        })
        .await;
        let body = match dialect {
            Dialect::Messages => r#"{"model":"m","max_tokens":8,"messages":[]}"#,
            _ => r#"{"model":"m","input":"hi","messages":[]}"#,
        };
        let resp = gw.post(dialect.path(), body, Some(&gw.token.clone())).await;
        assert_eq!(resp.status(), 502, "{dialect}");
        let id = request_id(&resp);
        let text = resp.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8(text.to_vec()).unwrap();
        assert!(text.contains("131072-byte limit"), "{text}");
        let rec = gw.record(&id);
        assert_eq!(rec.outcome, Outcome::UpstreamError);
        assert_eq!(
            rec.error_class,
            Some(laptime_core::timeline::ErrorClass::InvalidBody)
        );
    }
}
