//! Upstream answers that are never relayed. A refusal of the channel's credentials (401/403):
//! its body may echo part of the key, so the client is told in the gateway's own words, the
//! record says `upstream_auth` (the gateway's fault), and another channel takes the request. A
//! redirect (3xx) is never followed nor relayed: `upstream_redirect`, and the next channel.

pub mod memory;

use laptime_core::timeline::{ErrorClass, Fault, Outcome};
use laptime_core::Dialect;
use memory::*;

const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

/// A provider's refusal that quotes the key it was given.
fn refusal(status: u16) -> Reply {
    Reply {
        frames: vec![(
            ms(0),
            r#"{"error":{"message":"Incorrect API key provided: sk-proj-AbCd****************wxyz"}}"#
                .into(),
        )],
        ..Reply::status(5, status)
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_key_is_answered_in_the_gateways_words_and_never_relayed() {
    for status in [401, 403] {
        for dialect in DIALECTS {
            let gw = gateway(&[("a", refusal(status))], |_| {}).await;
            let (got, body, rec) = gw.call(dialect).await;
            assert_eq!(got, 502, "{dialect} {status}");
            assert!(
                !body.contains("sk-proj") && !body.contains("wxyz"),
                "{body}"
            );
            assert!(body.contains("refused the gateway's credentials"), "{body}");
            assert_eq!(rec.outcome, Outcome::UpstreamError);
            assert_eq!(rec.error_class, Some(ErrorClass::UpstreamAuth));
            assert_eq!(rec.fault(), Some(Fault::Gateway));
            assert_eq!(rec.attempts.len(), 1);
            assert_eq!(rec.attempts[0].status, Some(status));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_refused_key_fails_over_to_the_next_channel() {
    for dialect in DIALECTS {
        let gw = gateway(&[("a", refusal(401)), ("b", healthy(dialect))], |_| {}).await;
        let (got, body, rec) = gw.call(dialect).await;
        assert_eq!(got, 200, "{dialect}");
        assert!(!body.contains("sk-proj"), "{body}");
        assert_eq!(rec.outcome, Outcome::Completed);
        assert_eq!(rec.channel.as_deref(), Some("b"));
        let classes: Vec<_> = rec.attempts.iter().map(|a| a.error_class).collect();
        assert_eq!(classes, [Some(ErrorClass::UpstreamAuth), None]);
        let hosts: Vec<String> = gw.seen().into_iter().map(|(h, _)| h).collect();
        assert_eq!(hosts, ["a", "b"]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_redirect_is_neither_followed_nor_relayed_and_the_next_channel_answers() {
    for status in [301, 302, 307] {
        for dialect in DIALECTS {
            let moved = Reply {
                frames: vec![(ms(0), "moved to http://169.254.169.254/latest".into())],
                ..Reply::status(5, status)
            };
            let gw = gateway(&[("a", moved.clone())], |_| {}).await;
            let (got, body, rec) = gw.call(dialect).await;
            assert_eq!(got, 502, "{dialect} {status}");
            assert!(!body.contains("169.254"), "{body}");
            assert!(body.contains("redirect"), "{body}");
            assert_eq!(rec.outcome, Outcome::UpstreamError);
            assert_eq!(rec.error_class, Some(ErrorClass::UpstreamRedirect));
            let gw = gateway(&[("a", moved), ("b", healthy(dialect))], |_| {}).await;
            let (got, _, rec) = gw.call(dialect).await;
            assert_eq!((got, rec.channel.as_deref()), (200, Some("b")));
            assert_eq!(
                gw.seen().len(),
                2,
                "one call each: the redirect was not followed"
            );
        }
    }
}
