//! The timeline under paused tokio time: the sim's seed-trace schedules played into the observed
//! body give the seed's exact values and classification, and a real SQLite store keeps them;
//! translated for a client of another dialect, the same values, the comment before the client's
//! terminal frame.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers fail loudly"
)]

use std::time::Duration;

use bytes::Bytes;
use http_body_util::channel::Channel;
use http_body_util::BodyExt;
use laptime_core::observe::StreamObserver;
use laptime_core::slow::Thresholds;
use laptime_core::timeline::{Attempt, Outcome, RequestRecord};
use laptime_core::translate::stream::{ClientStreamOptions, StreamTranslator};
use laptime_core::views::{InBand, TimingView};
use laptime_core::Dialect;
use laptime_proxy::observe::ObservedBody;
use laptime_proxy::record::{Finisher, Pending};
use laptime_store::recorder::Recorder;
use laptime_store::{records, Store};
use tokio::time::Instant;

/// Plays a preset's schedule as a scripted upstream body, relays it through the observed body
/// (translated when the client's dialect is not the upstream's), and returns the stored record
/// and the bytes the client got.
async fn play_for(dialect: Dialect, client: Dialect, model: &str) -> (RequestRecord, Bytes) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let (recorder, task) = Recorder::start(&store, 100).unwrap();
    let script = laptime_sim::preset(model).unwrap();
    let schedule = laptime_sim::schedule(dialect, &script, model, (true, true), 0);

    let t0 = Instant::now();
    let mut p = Pending::new(t0, 1, "req_trace".into(), client);
    p.upstream_dialect = Some(dialect);
    p.workspace_id = Some("ws".into());
    p.stream = true;
    p.marks.upstream_start = Some(Duration::ZERO);
    tokio::time::sleep_until(t0 + schedule.head_at).await;
    let headers = p.offset(Instant::now());
    p.marks.upstream_headers = Some(headers);
    p.attempts.push(Attempt {
        channel: "sim".into(),
        role: laptime_core::timeline::AttemptRole::Primary,
        won: true,
        status: Some(200),
        error_class: None,
        start: Some(Duration::ZERO),
        headers: Some(headers),
        first_byte: None,
        end: None,
        connection: Default::default(),
        span_id: None,
    });
    let (mut tx, upstream) = Channel::<Bytes, std::io::Error>::new(4);
    let steps = schedule.steps.clone();
    tokio::spawn(async move {
        for step in steps {
            tokio::time::sleep_until(t0 + step.at).await;
            if tx.send_data(step.bytes).await.is_err() {
                return;
            }
        }
    });
    let mut obs = StreamObserver::new(dialect, Some(Duration::ZERO));
    obs.set_headers(headers);
    let finisher = Finisher::new(p, recorder.clone(), Thresholds::default());
    let mut body = ObservedBody::held(upstream, t0, client, obs);
    if client != dialect {
        let opts = ClientStreamOptions {
            model: Some(model.into()),
            id: "req_trace".into(),
            created: 1,
            include_usage: true,
            timing_comment: true,
        };
        body = body.translated(StreamTranslator::new(dialect, client, &opts));
    }
    body.commit(finisher, 200, false);
    let bytes = body.collect().await.unwrap().to_bytes();
    assert!(recorder.shutdown(task, Duration::from_secs(10)).await);
    let record = store
        .with_conn(|c| records::get(c, "ws", "req_trace"))
        .unwrap()
        .expect("the record was stored");
    (record, bytes)
}

fn close(a: Option<f64>, b: f64, rel: f64) -> bool {
    a.is_some_and(|a| ((a - b) / b).abs() <= rel)
}

struct Seed {
    model: &'static str,
    headers: f64,
    first_event: f64,
    first_response: f64,
    first_text: f64,
    total: f64,
    tps: f64,
    classification: &'static str,
}

const SEEDS: [Seed; 3] = [
    Seed {
        model: "sim-trace-a",
        headers: 6100.0,
        first_event: 6300.0,
        first_response: 6350.0,
        first_text: 6400.0,
        total: 9200.0,
        tps: 42.0,
        classification: "upstream_headers_slow",
    },
    Seed {
        model: "sim-trace-b",
        headers: 240.0,
        first_event: 310.0,
        first_response: 2900.0,
        first_text: 8700.0,
        total: 10200.0,
        tps: 55.0,
        classification: "visible_text_late",
    },
    Seed {
        model: "sim-trace-c",
        headers: 260.0,
        first_event: 330.0,
        first_response: 420.0,
        first_text: 430.0,
        total: 20430.0,
        tps: 9.8,
        classification: "generation_slow_tps",
    },
];

async fn check_seeds(dialect: Dialect) {
    check_seeds_for(dialect, dialect).await;
}

/// Every seed over an upstream of `dialect`, for a client of `client` dialect.
async fn check_seeds_for(dialect: Dialect, client: Dialect) {
    for seed in SEEDS {
        let (r, bytes) = play_for(dialect, client, seed.model).await;
        let t = TimingView::new(&r.marks, &r.tokens);
        let what = format!("{} over {dialect} for a {client} client", seed.model);
        assert_eq!(t.upstream_headers_ms, Some(seed.headers), "{what}");
        assert_eq!(t.first_sse_event_ms, Some(seed.first_event), "{what}");
        assert_eq!(t.first_response_ms, Some(seed.first_response), "{what}");
        assert_eq!(t.first_text_delta_ms, Some(seed.first_text), "{what}");
        assert_eq!(t.total_handler_ms, Some(seed.total), "{what}");
        assert!(
            close(t.visible_output_tps, seed.tps, 0.01),
            "{what}: tps {:?}",
            t.visible_output_tps
        );
        assert_eq!(r.classification.as_str(), seed.classification, "{what}");
        assert_eq!(r.outcome, Outcome::Completed, "{what}");
        // The client got the comment, with the record's values, before the terminal frame.
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        let comment = InBand::of_record(&r).comment();
        assert_eq!(text.matches(": x-laptime-timing").count(), 1, "{what}");
        assert!(text.contains(&comment), "{what}: {comment}");
        let after = &text[text.find(": x-laptime-timing").unwrap()..];
        let terminal = match client {
            Dialect::Chat => "data: [DONE]",
            Dialect::Responses => "event: response.completed",
            _ => "event: message_stop",
        };
        let next = after.split("\n\n").nth(1).unwrap_or_default();
        assert!(next.starts_with(terminal), "{what}: {next:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn translated_seed_traces_keep_the_upstreams_values_in_every_pair() {
    const SSE_WITH_TERMINAL: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];
    for upstream in SSE_WITH_TERMINAL {
        for client in SSE_WITH_TERMINAL.into_iter().filter(|c| *c != upstream) {
            check_seeds_for(upstream, client).await;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn seed_traces_give_the_seed_values_over_chat() {
    check_seeds(Dialect::Chat).await;
}

#[tokio::test(start_paused = true)]
async fn seed_traces_give_the_seed_values_over_responses() {
    check_seeds(Dialect::Responses).await;
}

#[tokio::test(start_paused = true)]
async fn seed_traces_give_the_seed_values_over_messages() {
    check_seeds(Dialect::Messages).await;
}
