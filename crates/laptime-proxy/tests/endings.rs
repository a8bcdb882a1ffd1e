//! How a relayed stream's ending is told, to the client and in the record: a stream the
//! upstream cuts before its terminal event ends with the dialect's error event (the bytes
//! relayed before it untouched, an incomplete event held back dropped) and is recorded
//! `upstream_closed_early`; a Chat stream complete but for its `data: [DONE]` (providers that
//! omit the sentinel) is completed, flagged `no_terminal_sentinel`, and relayed untouched.

pub mod memory;

use http_body_util::BodyExt;
use laptime_core::slow::Flag;
use laptime_core::timeline::Outcome;
use laptime_core::Dialect;
use memory::*;

const FINISH: &str =
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n";
const USAGE: &str =
    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n";

#[tokio::test(start_paused = true)]
async fn a_chat_stream_without_done_but_with_finish_and_usage_is_completed_and_flagged() {
    let f = frames(Dialect::Chat);
    let script = [(5, f.preamble), (10, f.text), (12, FINISH), (15, USAGE)];
    let gw = gateway(&[("a", Reply::sse(20, &script, false))], |_| {}).await;
    let resp = gw.send(Dialect::Chat).await;
    let id = request_id(&resp);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let sent: String = script.iter().map(|(_, s)| *s).collect();
    assert_eq!(String::from_utf8(bytes.to_vec()).unwrap(), sent);
    let rec = gw.record(&id);
    assert_eq!((rec.outcome, rec.error_class), (Outcome::Completed, None));
    assert!(
        rec.flags.contains(&Flag::NoTerminalSentinel),
        "{:?}",
        rec.flags
    );
    assert_eq!(rec.tokens.output, Some(2));
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_its_text_ends_with_the_dialects_error_event() {
    for dialect in DIALECTS {
        let f = frames(dialect);
        // The cut falls inside an event: its first half is never relayed.
        let partial = "data: {\"choices\":[{\"ind";
        let script = [(5, f.preamble), (10, f.text), (12, partial)];
        let gw = gateway(&[("a", Reply::sse(20, &script, false))], |_| {}).await;
        let (status, text, rec) = gw.call(dialect).await;
        assert_eq!(status, 200);
        let relayed = format!("{}{}", f.preamble, f.text);
        let told = text
            .strip_prefix(&relayed)
            .unwrap_or_else(|| panic!("{text}"));
        let expected = laptime_proxy::respond::in_band_error(
            dialect,
            laptime_proxy::respond::InBandError::UpstreamCut,
            "the upstream closed the stream before it was complete",
        );
        assert_eq!(told.as_bytes(), &expected[..], "{dialect}");
        assert_eq!(rec.outcome, Outcome::UpstreamClosedEarly);
        assert_eq!(
            rec.error_class,
            Some(laptime_core::timeline::ErrorClass::ClosedEarly)
        );
        assert!(!rec.flags.contains(&Flag::NoTerminalSentinel));
    }
}
