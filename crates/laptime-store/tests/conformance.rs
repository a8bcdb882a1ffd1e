#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]
//! The store conformance suite: every test runs against both backends, a real SQLite file and a
//! real PostgreSQL server (a schema of its own on `LAPTIME_TEST_POSTGRES_URL`, by default the
//! local server `scripts/test` starts), through the one `Store` interface. Records read back as
//! written; rollups written in the recorder's transactions answer exactly what the rows say,
//! under every filter and grouping; newest-first reads; replacement and replay; retention;
//! workspaces and tokens; migrations.

use std::time::Duration;

use laptime_core::cost::Cost;
use laptime_core::endpoint::{Endpoint, ObjectKind};
use laptime_core::limit::Limit;
use laptime_core::rollup::{Metric, Rollup};
use laptime_core::timeline::{
    Attempt, ConnectionMarks, Exchange, Hedge, InBandCarrier, Marks, Outcome, RequestRecord,
    RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use laptime_store::affinity::Placement;
use laptime_store::auth::Scope;
use laptime_store::recorder::Recorder;
use laptime_store::testing::PgSchema;
use laptime_store::usage::{GroupDim, UsageFilter, UsageResult};
use laptime_store::{BackendKind, Store, StoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A minute boundary, so that tests can reason in whole minutes.
const BASE: i64 = 1_700_000_040_000_000;
const MIN: i64 = 60_000_000;

fn ms(v: f64) -> Option<Duration> {
    Some(Duration::from_micros((v * 1000.0) as u64))
}

/// A plain successful streamed request.
fn plain(id: &str, ws: &str, created: i64, model: Option<&str>) -> RequestRecord {
    RequestRecord {
        request_id: id.into(),
        workspace_id: Some(ws.into()),
        key_id: None,
        created_at_us: created,
        model: model.map(str::to_string),
        provider: Some("openai".into()),
        channel: Some("ch-a".into()),
        group: Some("default".into()),
        dialect: Dialect::Chat,
        upstream_dialect: Some(Dialect::Chat),
        stream: true,
        status: 200,
        outcome: Outcome::Completed,
        timeout_kind: None,
        error_class: None,
        classification: laptime_core::slow::Classification::Ok,
        flags: Vec::new(),
        marks: Marks {
            upstream_start: ms(1.0),
            first_byte: ms(200.0),
            upstream_done: ms(900.0),
            handler_done: ms(901.0),
            ..Marks::default()
        },
        tokens: Tokens {
            output: Some(20),
            ..Tokens::default()
        },
        event_count: 3,
        text_delta_count: 1,
        channel_inflight: None,
        attempts: vec![Attempt {
            channel: "ch-a".into(),
            role: laptime_core::timeline::AttemptRole::Primary,
            won: true,
            status: Some(200),
            error_class: None,
            start: ms(1.0),
            headers: ms(100.0),
            first_byte: ms(200.0),
            end: ms(900.0),
            connection: ConnectionMarks::default(),
            span_id: None,
        }],
        hedge: Hedge::None,
        failover_count: 0,
        cached: false,
        shape: RequestShape::default(),
        region: None,
        instance: None,
        trace_id: None,
        cost: None,
        refused_by: None,
        exchange: Default::default(),
        in_band: None,
    }
}

/// `n` varied records over about `n × 7` seconds: three models and a missing one, two channels,
/// three dialects, both stream modes, failures of several kinds, cache hits, and marks that are
/// absent where the outcome says they must be.
fn corpus(ws: &str, n: usize, seed: u64) -> Vec<RequestRecord> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let created = BASE + i as i64 * 7_000_000 + rng.gen_range(0..1_000_000);
            let model = ["gpt-4o", "claude-sonnet", "o3-mini", ""][rng.gen_range(0..4)];
            let mut r = plain(
                &format!("{ws}-{i}"),
                ws,
                created,
                (!model.is_empty()).then_some(model),
            );
            r.dialect = [Dialect::Chat, Dialect::Responses, Dialect::Messages][i % 3];
            if i % 5 == 4 {
                r.exchange.endpoint = [Endpoint::Embeddings, Endpoint::Files][i % 2];
            }
            r.stream = rng.gen_bool(0.7);
            r.channel = [Some("ch-a"), Some("ch-b"), None][rng.gen_range(0..3)].map(Into::into);
            r.group = [Some("default"), None][rng.gen_range(0..2)].map(Into::into);
            let t1 = rng.gen_range(0.5..3.0);
            let ttft = rng.gen_range(80.0..4_000.0);
            let done = ttft + rng.gen_range(10.0..20_000.0);
            r.marks = Marks {
                auth: ms(rng.gen_range(0.01..0.5)),
                upstream_start: ms(t1),
                upstream_headers: ms(t1 + ttft * 0.8),
                first_byte: ms(t1 + ttft),
                first_event: ms(t1 + ttft + 1.0),
                first_effective: ms(t1 + ttft + 2.0),
                first_visible: rng.gen_bool(0.8).then(|| ms(t1 + ttft + 3.0)).flatten(),
                upstream_done: ms(t1 + done),
                handler_done: ms(t1 + done + 0.4),
                ..Marks::default()
            };
            r.tokens = Tokens {
                input: Some(rng.gen_range(10..5_000)),
                output: Some(rng.gen_range(1..2_000)),
                cache_read: rng.gen_bool(0.3).then(|| rng.gen_range(0..4_000)),
                ..Tokens::default()
            };
            match rng.gen_range(0..20) {
                0 => {
                    r.outcome = Outcome::UpstreamError;
                    r.status = 502;
                    r.marks.first_byte = None;
                    r.marks.first_event = None;
                    r.marks.first_effective = None;
                    r.marks.first_visible = None;
                    r.tokens = Tokens::default();
                    r.failover_count = 1;
                }
                1 => {
                    r.outcome = Outcome::UpstreamClosedEarly;
                    r.tokens.output = None;
                }
                2 => {
                    r.outcome = Outcome::CacheHit;
                    r.cached = true;
                    r.marks = Marks {
                        auth: ms(0.1),
                        handler_done: ms(3.0),
                        ..Marks::default()
                    };
                    r.attempts.clear();
                }
                3 => {
                    r.outcome = Outcome::Rejected;
                    r.status = 401;
                    r.marks = Marks {
                        auth: ms(0.2),
                        handler_done: ms(0.3),
                        ..Marks::default()
                    };
                    r.tokens = Tokens::default();
                    r.attempts.clear();
                }
                4 => r.outcome = Outcome::Incomplete,
                5 => {
                    r.outcome = Outcome::RateLimited;
                    r.status = 429;
                    r.error_class = Some(laptime_core::timeline::ErrorClass::OverLimit);
                    r.refused_by = Some(Limit::ALL[rng.gen_range(0..Limit::ALL.len())]);
                    r.marks = Marks {
                        auth: ms(0.2),
                        admission: ms(0.25),
                        handler_done: ms(0.3),
                        ..Marks::default()
                    };
                    r.tokens = Tokens::default();
                    r.attempts.clear();
                }
                _ => {}
            }
            if r.tokens.cache_read.is_some() && rng.gen_bool(0.5) {
                r.tokens.cache_write = Some(rng.gen_range(0..3_000));
                r.tokens.cache_write_1h = Some(rng.gen_range(0..1_000));
            }
            if r.outcome != Outcome::RateLimited && rng.gen_bool(0.5) {
                r.marks.admission = ms(rng.gen_range(0.001..0.1));
            }
            // The request's shape and region, which usage compares like with like by.
            r.shape.reasoning_effort = [
                None,
                Some("low"),
                Some("high"),
                Some("budget_tokens:1024"),
                Some("LOUD"),
            ][rng.gen_range(0..5)]
            .map(str::to_string);
            r.shape.tool_count = [None, Some(0), Some(3)][rng.gen_range(0..3)];
            r.shape.max_output_tokens =
                [None, Some(100), Some(2_000), Some(70_000)][rng.gen_range(0..4)];
            r.region = [None, Some("eu"), Some("us")][rng.gen_range(0..3)].map(str::to_string);
            if r.tokens.output.is_none() && r.outcome == Outcome::UpstreamClosedEarly {
                r.tokens.estimated_output = Some(rng.gen_range(1..500));
            }
            r.cost = match rng.gen_range(0..4) {
                0 => None,
                1 => Some(Cost {
                    nano_usd: rng.gen_range(0..5_000_000),
                    estimated: true,
                }),
                _ => Some(Cost {
                    nano_usd: rng.gen_range(0..5_000_000_000),
                    estimated: false,
                }),
            };
            r.classification = if !r.outcome.is_success() {
                laptime_core::slow::Classification::Failed
            } else if ttft > 2_000.0 {
                laptime_core::slow::Classification::Slow(
                    laptime_core::slow::SlowStage::UpstreamHeadersSlow,
                )
            } else {
                laptime_core::slow::Classification::Ok
            };
            r
        })
        .collect()
}

fn rollup_of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Rollup {
    let mut r = Rollup::new();
    for rec in records {
        r.add(rec);
    }
    r
}

/// A store of one backend, with what keeps it alive (its directory or its schema).
struct Backend {
    name: &'static str,
    store: Store,
    _dir: Option<tempfile::TempDir>,
    _schema: Option<PgSchema>,
}

/// A fresh, empty store of each backend.
async fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open_dir(dir.path()).unwrap();
    let schema = PgSchema::create()
        .await
        .expect("the PostgreSQL test server (LAPTIME_TEST_POSTGRES_URL) must be reachable");
    let pg = Store::open_postgres(schema.url()).await.unwrap();
    vec![
        Backend {
            name: "sqlite",
            store: sqlite,
            _dir: Some(dir),
            _schema: None,
        },
        Backend {
            name: "postgres",
            store: pg,
            _dir: None,
            _schema: Some(schema),
        },
    ]
}

/// Each backend with `records` written in batches of `batch`.
async fn backends_with(records: &[RequestRecord], batch: usize) -> Vec<Backend> {
    let all = backends().await;
    for b in &all {
        for chunk in records.chunks(batch) {
            b.store.insert_batch(chunk.to_vec()).await.unwrap();
        }
    }
    all
}

async fn usage_of(store: &Store, ws: &str, f: &UsageFilter, g: &[GroupDim]) -> UsageResult {
    store
        .usage(ws, (BASE, BASE + 100 * MIN), f.clone(), g.to_vec())
        .await
        .unwrap()
}

async fn recent(store: &Store, ws: &str, f: &UsageFilter, limit: u32) -> Vec<RequestRecord> {
    store.recent(ws, f.clone(), None, limit).await.unwrap()
}

/// An answer of thousands of rollups (PostgreSQL's arrive in several messages, folded as they
/// come) is the rollup of its rows, in total and per group.
#[tokio::test]
async fn usage_over_thousands_of_rollups_is_the_rollup_of_its_rows() {
    let rows: Vec<RequestRecord> = corpus("ws", 3_000, 5)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            // A key of its own each, within 100 minutes.
            r.model = Some(format!("m{}", i % 1_500));
            r.created_at_us = BASE + i as i64 * 1_900_000;
            r
        })
        .collect();
    let all: Vec<&RequestRecord> = rows.iter().collect();
    for b in backends_with(&rows, 500).await {
        for group_by in [
            &[][..],
            &[GroupDim::Model],
            &[GroupDim::Model, GroupDim::Stream],
        ] {
            let got = usage_of(&b.store, "ws", &UsageFilter::default(), group_by).await;
            assert_summarises(&got, &all, group_by, b.name);
        }
    }
}

#[tokio::test]
async fn usage_equals_a_rollup_of_the_matching_rows_under_every_filter_and_grouping() {
    let rows = corpus("ws", 600, 1);
    for b in backends_with(&rows, 37).await {
        let name = b.name;
        let store = &b.store;
        let got = usage_of(store, "ws", &UsageFilter::default(), &[]).await;
        assert_eq!(got.total.requests, 600, "{name}");
        assert!(got.total.agrees_with(&rollup_of(&rows)), "{name}");
        assert!(got.groups.is_empty());
        assert!(got.total.errors > 0 && got.total.cache_hits > 0);
        assert!(got.total.stats(Metric::TtftMs).null_count > 0);

        // Grouped by model: one group per model, the missing model as None, most requests first.
        let by_model = usage_of(store, "ws", &UsageFilter::default(), &[GroupDim::Model]).await;
        assert!(by_model.total.agrees_with(&got.total), "{name}");
        assert_eq!(by_model.groups.len(), 4, "{name}");
        for (key, r) in &by_model.groups {
            let [(GroupDim::Model, model)] = key.as_slice() else {
                panic!("{key:?}")
            };
            let want = rollup_of(rows.iter().filter(|x| x.model == *model));
            assert!(r.agrees_with(&want), "{name} {model:?}");
        }
        assert!(by_model.groups.iter().any(|(k, _)| k[0].1.is_none()));
        assert!(by_model
            .groups
            .windows(2)
            .all(|w| w[0].1.requests >= w[1].1.requests));

        // Two dimensions; stream and status read as text.
        let two = usage_of(
            store,
            "ws",
            &UsageFilter::default(),
            &[GroupDim::Stream, GroupDim::Status],
        )
        .await;
        let sum: u64 = two.groups.iter().map(|(_, r)| r.requests).sum();
        assert_eq!(sum, 600, "{name}");
        for (key, r) in &two.groups {
            let stream = key[0].1.as_deref() == Some("true");
            let status: u16 = key[1].1.as_deref().unwrap().parse().unwrap();
            let want = rollup_of(
                rows.iter()
                    .filter(|x| x.stream == stream && x.status == status),
            );
            assert!(r.agrees_with(&want), "{name} {key:?}");
        }

        // Each comparison dimension: one group per value the rows have, each the rollup of
        // exactly those rows (absent values as None).
        for dim in COMPARISON_DIMS {
            let grouped = usage_of(store, "ws", &UsageFilter::default(), &[dim]).await;
            let values: std::collections::BTreeSet<Option<String>> =
                rows.iter().map(|r| comparison_value(r, dim)).collect();
            assert_eq!(grouped.groups.len(), values.len(), "{name} {dim:?}");
            for (key, r) in &grouped.groups {
                let [(d, value)] = key.as_slice() else {
                    panic!("{key:?}")
                };
                assert_eq!(*d, dim);
                let want = rollup_of(rows.iter().filter(|x| comparison_value(x, dim) == *value));
                assert!(r.agrees_with(&want), "{name} {dim:?} {value:?}");
            }
        }

        // Every dimension at once, as the API allows.
        let every = usage_of(store, "ws", &UsageFilter::default(), &GroupDim::ALL).await;
        assert_eq!(
            every.groups.iter().map(|(_, r)| r.requests).sum::<u64>(),
            600,
            "{name}"
        );

        for (filter, pred) in filter_cases() {
            let got = usage_of(store, "ws", &filter, &[]).await;
            let want = rollup_of(rows.iter().filter(|r| pred(r)));
            assert!(want.requests > 0, "{filter:?} matches something");
            assert!(got.total.agrees_with(&want), "{name} {filter:?}");
            let recent = recent(store, "ws", &filter, 1000).await;
            assert_eq!(recent.len() as u64, want.requests, "{name} {filter:?}");
        }
    }
}

type Pred = fn(&RequestRecord) -> bool;

const COMPARISON_DIMS: [GroupDim; 5] = [
    GroupDim::ReasoningEffort,
    GroupDim::ToolsPresent,
    GroupDim::MaxOutputBucket,
    GroupDim::InputBucket,
    GroupDim::Region,
];

/// A record's value of a comparison dimension, worked out from its raw fields.
fn comparison_value(r: &RequestRecord, dim: GroupDim) -> Option<String> {
    let bucket = |n: Option<u64>| {
        n.map(|n| match n {
            0..256 => "<256",
            256..1024 => "256-1k",
            1024..4096 => "1k-4k",
            4096..16_384 => "4k-16k",
            16_384..65_536 => "16k-64k",
            _ => "64k+",
        })
    };
    let v = match dim {
        GroupDim::ReasoningEffort => r.shape.reasoning_effort.as_deref().map(|e| match e {
            "low" | "high" => e,
            _ if e.starts_with("budget_tokens:") => "budget",
            _ => "other",
        }),
        GroupDim::ToolsPresent => Some(if r.shape.tool_count.unwrap_or(0) > 0 {
            "true"
        } else {
            "false"
        }),
        GroupDim::MaxOutputBucket => bucket(r.shape.max_output_tokens),
        GroupDim::InputBucket => bucket(r.tokens.input),
        GroupDim::Region => r.region.as_deref(),
        _ => unreachable!("{dim:?} is not a comparison dimension"),
    };
    v.map(str::to_string)
}

/// Filters, one at a time and combined, with the rows each must match.
fn filter_cases() -> Vec<(UsageFilter, Pred)> {
    vec![
        (
            UsageFilter {
                model: Some("gpt-4o".into()),
                ..UsageFilter::default()
            },
            |r| r.model.as_deref() == Some("gpt-4o"),
        ),
        (
            UsageFilter {
                outcome: Some("upstream_error".into()),
                ..UsageFilter::default()
            },
            |r| r.outcome == Outcome::UpstreamError,
        ),
        (
            UsageFilter {
                classification: Some("failed".into()),
                stream: Some(false),
                ..UsageFilter::default()
            },
            |r| r.classification == laptime_core::slow::Classification::Failed && !r.stream,
        ),
        (
            UsageFilter {
                status: Some(401),
                dialect: Some("messages".into()),
                ..UsageFilter::default()
            },
            |r| r.status == 401 && r.dialect == Dialect::Messages,
        ),
        (
            UsageFilter {
                channel: Some("ch-b".into()),
                provider: Some("openai".into()),
                ..UsageFilter::default()
            },
            |r| r.channel.as_deref() == Some("ch-b"),
        ),
        (
            UsageFilter {
                endpoint: Some("embeddings".into()),
                ..UsageFilter::default()
            },
            |r| r.exchange.endpoint == Endpoint::Embeddings,
        ),
        (
            UsageFilter {
                endpoint: Some("generation".into()),
                dialect: Some("chat".into()),
                ..UsageFilter::default()
            },
            |r| r.exchange.endpoint == Endpoint::Generation && r.dialect == Dialect::Chat,
        ),
        // An empty value asks for requests without one.
        (
            UsageFilter {
                group: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.group.is_none(),
        ),
        // The comparison dimensions, each value class at least once, and together.
        (
            UsageFilter {
                reasoning_effort: Some("high".into()),
                ..UsageFilter::default()
            },
            |r| r.shape.reasoning_effort.as_deref() == Some("high"),
        ),
        (
            UsageFilter {
                reasoning_effort: Some("budget".into()),
                ..UsageFilter::default()
            },
            |r| r.shape.reasoning_effort.as_deref() == Some("budget_tokens:1024"),
        ),
        (
            UsageFilter {
                reasoning_effort: Some("other".into()),
                ..UsageFilter::default()
            },
            |r| r.shape.reasoning_effort.as_deref() == Some("LOUD"),
        ),
        (
            UsageFilter {
                reasoning_effort: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.shape.reasoning_effort.is_none(),
        ),
        (
            UsageFilter {
                tools_present: Some(true),
                ..UsageFilter::default()
            },
            |r| r.shape.tool_count == Some(3),
        ),
        (
            UsageFilter {
                tools_present: Some(false),
                ..UsageFilter::default()
            },
            |r| r.shape.tool_count != Some(3),
        ),
        (
            UsageFilter {
                max_output_bucket: Some("1k-4k".into()),
                ..UsageFilter::default()
            },
            |r| r.shape.max_output_tokens == Some(2_000),
        ),
        (
            UsageFilter {
                max_output_bucket: Some("64k+".into()),
                ..UsageFilter::default()
            },
            |r| r.shape.max_output_tokens == Some(70_000),
        ),
        (
            UsageFilter {
                max_output_bucket: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.shape.max_output_tokens.is_none(),
        ),
        (
            UsageFilter {
                input_bucket: Some("256-1k".into()),
                ..UsageFilter::default()
            },
            |r| r.tokens.input.is_some_and(|n| (256..1024).contains(&n)),
        ),
        (
            UsageFilter {
                input_bucket: Some("<256".into()),
                ..UsageFilter::default()
            },
            |r| r.tokens.input.is_some_and(|n| n < 256),
        ),
        (
            UsageFilter {
                input_bucket: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.tokens.input.is_none(),
        ),
        (
            UsageFilter {
                region: Some("eu".into()),
                ..UsageFilter::default()
            },
            |r| r.region.as_deref() == Some("eu"),
        ),
        (
            UsageFilter {
                region: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.region.is_none(),
        ),
        (
            UsageFilter {
                stream: Some(true),
                tools_present: Some(false),
                input_bucket: Some("1k-4k".into()),
                region: Some("us".into()),
                ..UsageFilter::default()
            },
            |r| {
                r.stream
                    && r.shape.tool_count != Some(3)
                    && r.tokens.input.is_some_and(|n| (1024..4096).contains(&n))
                    && r.region.as_deref() == Some("us")
            },
        ),
    ]
}

#[tokio::test]
async fn every_in_band_carrier_reads_back_as_sent_and_an_unnoted_one_stays_absent() {
    let mut rows: Vec<RequestRecord> = InBandCarrier::ALL
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let mut r = plain(&format!("c{i}"), "ws", BASE + i as i64, Some("m"));
            r.in_band = Some(c);
            r
        })
        .collect();
    // Written before the gateway noted it: NULL, read back as absent (never as `none`).
    rows.push(plain("unnoted", "ws", BASE + 10, Some("m")));
    for b in backends_with(&rows, 3).await {
        for r in &rows {
            let got = b.store.record("ws", &r.request_id).await.unwrap().unwrap();
            assert_eq!(got.in_band, r.in_band, "{} {}", b.name, r.request_id);
        }
    }
}

#[tokio::test]
async fn usage_keeps_estimated_output_speeds_apart_from_provider_counted_ones() {
    // Each speed is output tokens over the 1 s from first visible text to upstream done.
    let speed = |id: &str, at: i64, tokens: Tokens| {
        let mut r = plain(id, "ws", BASE + at, Some("m"));
        r.marks.first_visible = ms(100.0);
        r.marks.last_effective = ms(900.0);
        r.marks.upstream_done = ms(1100.0);
        r.tokens = tokens;
        r
    };
    let counted = |n| Tokens {
        output: Some(n),
        ..Tokens::default()
    };
    let estimated = |n| Tokens {
        estimated_output: Some(n),
        ..Tokens::default()
    };
    let rows = vec![
        speed("p1", 1, counted(10)),
        speed("p2", 2, counted(20)),
        speed("e1", 3, estimated(1000)),
        speed("e2", MIN + 4, estimated(3000)),
        // No speed at all: a null in both.
        plain("none", "ws", BASE + 5, Some("m")),
    ];
    for b in backends_with(&rows, 2).await {
        let got = usage_of(&b.store, "ws", &UsageFilter::default(), &[]).await;
        let provider = got.total.stats(Metric::VisibleOutputTps);
        let est = got.total.stats(Metric::EstimatedVisibleOutputTps);
        assert_eq!(
            (
                provider.count,
                provider.null_count,
                provider.min,
                provider.max
            ),
            (2, 3, Some(10.0), Some(20.0)),
            "{}",
            b.name
        );
        assert_eq!(
            (est.count, est.null_count, est.min, est.max),
            (2, 3, Some(1000.0), Some(3000.0)),
            "{}",
            b.name
        );
        assert_eq!(got.total.output_estimated, 2, "{}", b.name);
    }
}

#[tokio::test]
async fn a_record_reads_back_exactly_as_written_with_its_attempts_and_every_field() {
    let mut full = plain("full", "ws", BASE + 1, Some("gpt-4o"));
    full.key_id = Some("key_1".into());
    full.upstream_dialect = Some(Dialect::Messages);
    full.outcome = Outcome::Timeout;
    full.timeout_kind = Some(laptime_core::timeline::DeadlineKind::Idle);
    full.error_class = Some(laptime_core::timeline::ErrorClass::RateLimited);
    full.flags = vec![laptime_core::slow::Flag::Slow(
        laptime_core::slow::SlowStage::FirstEventSlow,
    )];
    full.marks.last_effective = ms(880.5);
    full.marks.body_read = ms(0.25);
    full.tokens.reasoning = Some(7);
    full.tokens.cache_write = Some(3);
    full.tokens.cache_write_1h = Some(1);
    full.tokens.estimated_output = Some(42);
    full.marks.admission = ms(0.03);
    full.cost = Some(Cost {
        nano_usd: 123_456_789,
        estimated: true,
    });
    full.refused_by = Some(Limit::ALL[7]);
    full.channel_inflight = Some(4);
    full.hedge = Hedge::Hedge;
    full.failover_count = 2;
    // Every connection mark (through a proxy and TLS), only the first (the proxy refused the
    // tunnel), and one left out between two (TLS without a proxy): each round-trips as it was.
    full.attempts[0].connection = ConnectionMarks {
        connected: ms(10.5),
        tunnel: ms(20.0),
        tls: ms(30.25),
    };
    full.attempts.push(Attempt {
        channel: "ch-b".into(),
        role: laptime_core::timeline::AttemptRole::Hedge,
        won: false,
        status: None,
        error_class: Some(laptime_core::timeline::ErrorClass::ProxyAuth),
        start: ms(50.0),
        headers: None,
        first_byte: None,
        end: ms(60.0),
        connection: ConnectionMarks {
            connected: ms(55.0),
            ..ConnectionMarks::default()
        },
        // A span id after connection marks that are partly absent.
        span_id: Some([0xa1, 0, 0, 0, 0, 0, 0, 0x07]),
    });
    full.attempts.push(Attempt {
        channel: "ch-c".into(),
        role: laptime_core::timeline::AttemptRole::Failover,
        won: false,
        status: None,
        error_class: Some(laptime_core::timeline::ErrorClass::Tls),
        start: ms(61.0),
        headers: None,
        first_byte: None,
        end: ms(70.0),
        connection: ConnectionMarks {
            connected: ms(62.0),
            tunnel: None,
            tls: ms(69.0),
        },
        span_id: None,
    });
    full.attempts[0].span_id = Some([0x0b, 0x7a, 0xd6, 0xb7, 0x16, 0x92, 0x03, 0x31]);
    full.in_band = Some(InBandCarrier::SseCommentAndTrailers);
    full.shape = RequestShape {
        max_output_tokens: Some(512),
        reasoning_effort: Some("high".into()),
        tool_count: Some(2),
        tool_choice: Some("auto".into()),
        response_format: Some("json_schema".into()),
        temperature: Some(0.25),
        top_p: Some(0.9),
    };
    full.region = Some("eu-west".into());
    full.instance = Some("gw-b:8080".into());
    full.trace_id = Some("0af7651916cd43dd8448eb211c80319c".into());
    full.exchange = Exchange {
        endpoint: Endpoint::AudioSpeech,
        bytes_in: Some(1_234),
        bytes_out: Some(98_765),
        key_index: Some(2),
    };
    let mut bare = plain("bare", "ws", BASE + 2, None);
    bare.marks = Marks::default();
    bare.tokens = Tokens::default();
    bare.attempts.clear();
    bare.upstream_dialect = None;
    bare.channel = None;
    bare.provider = None;
    bare.group = None;
    for b in backends_with(&[full.clone(), bare.clone()], 10).await {
        assert_eq!(
            b.store.record("ws", "full").await.unwrap(),
            Some(full.clone()),
            "{}",
            b.name
        );
        assert_eq!(
            b.store.record("ws", "bare").await.unwrap(),
            Some(bare.clone()),
            "{}",
            b.name
        );
        assert_eq!(
            b.store.record("other", "full").await.unwrap(),
            None,
            "{}",
            b.name
        );
        assert_eq!(
            b.store.record("ws", "nope").await.unwrap(),
            None,
            "{}",
            b.name
        );
    }
}

#[tokio::test]
async fn the_window_is_widened_to_whole_minutes() {
    let rows = [
        plain("a", "ws", BASE + MIN - 1, Some("m")),
        plain("b", "ws", BASE + MIN, Some("m")),
        plain("c", "ws", BASE + 2 * MIN - 1, Some("m")),
        plain("d", "ws", BASE + 2 * MIN, Some("m")),
    ];
    for b in backends_with(&rows, 10).await {
        let q = |from: i64, to: i64| {
            let store = b.store.clone();
            async move {
                store
                    .usage("ws", (from, to), UsageFilter::default(), Vec::new())
                    .await
                    .unwrap()
            }
        };
        let inner = q(BASE + MIN + 30_000_000, BASE + MIN + 40_000_000).await;
        assert_eq!(
            (inner.window.from_us, inner.window.to_us),
            (BASE + MIN, BASE + 2 * MIN)
        );
        assert_eq!(inner.total.requests, 2, "{}: b and c", b.name);
        assert_eq!(q(BASE + MIN, BASE + 2 * MIN).await.total.requests, 2);
        let wider = q(BASE + MIN, BASE + 2 * MIN + 1).await;
        assert_eq!(wider.window.to_us, BASE + 3 * MIN);
        assert_eq!(wider.total.requests, 3, "{}: b, c and d", b.name);
        let empty = q(BASE + 10 * MIN, BASE + 11 * MIN).await;
        assert_eq!(empty.total.requests, 0);
        assert_eq!(empty.total.error_rate(), None);
        assert_eq!(empty.total.stats(Metric::LatencyMs).p50, None);
    }
}

const HOUR: i64 = 60 * MIN;

/// The first whole hour after [`BASE`] (which is 14 minutes past one).
const H0: i64 = BASE - BASE.rem_euclid(HOUR) + HOUR;

/// A record's value of any dimension, as a usage group names it.
fn dim_value(r: &RequestRecord, dim: GroupDim) -> Option<String> {
    match dim {
        GroupDim::Model => r.model.clone(),
        GroupDim::Provider => r.provider.clone(),
        GroupDim::Channel => r.channel.clone(),
        GroupDim::Group => r.group.clone(),
        GroupDim::Dialect => Some(r.dialect.as_str().into()),
        GroupDim::Stream => Some(r.stream.to_string()),
        GroupDim::Status => Some(r.status.to_string()),
        GroupDim::Outcome => Some(r.outcome.as_str().into()),
        GroupDim::Classification => Some(r.classification.as_str().into()),
        GroupDim::Endpoint => Some(r.exchange.endpoint.as_str().into()),
        _ => comparison_value(r, dim),
    }
}

/// Checks a usage answer against the rows it must summarise: the total, and with `group_by`
/// exactly one group per combination of values the rows have, each the rollup of its rows.
fn assert_summarises(got: &UsageResult, rows: &[&RequestRecord], group_by: &[GroupDim], at: &str) {
    assert_eq!(got.total.requests, rows.len() as u64, "{at}");
    assert!(
        got.total.agrees_with(&rollup_of(rows.iter().copied())),
        "{at}"
    );
    if group_by.is_empty() {
        assert!(got.groups.is_empty(), "{at}");
        return;
    }
    let mut want: std::collections::BTreeMap<Vec<Option<String>>, Vec<&RequestRecord>> =
        Default::default();
    for r in rows {
        let key = group_by.iter().map(|d| dim_value(r, *d)).collect();
        want.entry(key).or_default().push(r);
    }
    assert_eq!(got.groups.len(), want.len(), "{at} {group_by:?}");
    for (key, rollup) in &got.groups {
        let values: Vec<Option<String>> = key.iter().map(|(_, v)| v.clone()).collect();
        let dims: Vec<GroupDim> = key.iter().map(|(d, _)| *d).collect();
        assert_eq!(dims, group_by, "{at}");
        let rows = want.get(&values);
        assert!(rows.is_some(), "{at}: no rows for {key:?}");
        let rows = rows.unwrap();
        assert!(
            rollup.agrees_with(&rollup_of(rows.iter().copied())),
            "{at} {key:?}"
        );
    }
}

/// Windows of whole hours, of parts of hours, and of both read the hour tier for their whole
/// hours and the minute tier for the rest; whichever served it, the answer is the rollup of the
/// rows in the window (widened to whole minutes), under every filter and grouping.
#[tokio::test]
async fn usage_is_the_same_whichever_tier_serves_each_part_of_the_window() {
    // About five hours of requests, 30 s apart, from 14 minutes before the first whole hour.
    let rows: Vec<RequestRecord> = corpus("ws", 600, 11)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.created_at_us = BASE + i as i64 * 30_000_000 + (i as i64 * 7_919) % 29_000_000;
            r
        })
        .collect();
    let windows = [
        ("whole hours", H0, H0 + 3 * HOUR),
        ("one whole hour", H0 + HOUR, H0 + 2 * HOUR),
        (
            "unaligned at both ends",
            H0 - 11 * MIN - 5_000_000,
            H0 + 3 * HOUR + 17 * MIN + 1,
        ),
        ("aligned start, unaligned end", H0, H0 + 2 * HOUR + 59 * MIN),
        ("unaligned start, aligned end", H0 + MIN, H0 + 4 * HOUR),
        ("inside one hour", H0 + HOUR + 5 * MIN, H0 + HOUR + 50 * MIN),
        ("everything", 0, i64::MAX / 2),
    ];
    let mut groupings: Vec<Vec<GroupDim>> = vec![Vec::new(), GroupDim::ALL.to_vec()];
    groupings.extend(GroupDim::ALL.map(|d| vec![d]));
    groupings.push(vec![GroupDim::Model, GroupDim::Status]);
    for b in backends_with(&rows, 64).await {
        for (name, from, to) in windows {
            let widened = (
                from - from.rem_euclid(MIN),
                to + (MIN - to.rem_euclid(MIN)) % MIN,
            );
            let inside: Vec<&RequestRecord> = rows
                .iter()
                .filter(|r| (widened.0..widened.1).contains(&r.created_at_us))
                .collect();
            assert!(!inside.is_empty(), "{name}");
            for group_by in &groupings {
                let got = b
                    .store
                    .usage("ws", (from, to), UsageFilter::default(), group_by.clone())
                    .await
                    .unwrap();
                assert_eq!((got.window.from_us, got.window.to_us), widened);
                assert_summarises(&got, &inside, group_by, &format!("{} {name}", b.name));
            }
            for (filter, pred) in filter_cases() {
                let matching: Vec<&RequestRecord> =
                    inside.iter().copied().filter(|r| pred(r)).collect();
                let got = b
                    .store
                    .usage("ws", (from, to), filter.clone(), vec![GroupDim::Model])
                    .await
                    .unwrap();
                let at = format!("{} {name} {filter:?}", b.name);
                assert_summarises(&got, &matching, &[GroupDim::Model], &at);
            }
        }
    }
}

/// Retention that cuts an hour leaves that hour's hour-tier rows summarising exactly the minutes
/// it keeps, so a window over the cut hour answers the same from the hour tier as from the
/// minutes; hours wholly before the cutoff are gone from both tiers.
#[tokio::test]
async fn a_window_across_the_retention_cutoff_counts_only_the_minutes_kept_in_either_tier() {
    let rows: Vec<RequestRecord> = corpus("ws", 400, 12)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.created_at_us = BASE + i as i64 * 40_000_000;
            r
        })
        .collect();
    for b in backends_with(&rows, 50).await {
        let name = b.name;
        // Cuts the second whole hour 25.5 minutes in: the minute holding the cutoff stays.
        let cutoff = H0 + HOUR + 25 * MIN + 30_000_000;
        let kept_from = H0 + HOUR + 25 * MIN;
        b.store.delete_older_than(cutoff, 40).await.unwrap();
        for (what, from, to) in [
            ("the cut hour, from the hour tier", H0 + HOUR, H0 + 2 * HOUR),
            ("the cut hour and the next", H0 + HOUR, H0 + 3 * HOUR),
            (
                "the cut hour, from its minutes",
                H0 + HOUR + MIN,
                H0 + 2 * HOUR,
            ),
            ("from before the data", 0, H0 + 4 * HOUR),
        ] {
            let got = b
                .store
                .usage(
                    "ws",
                    (from, to),
                    UsageFilter::default(),
                    vec![GroupDim::Outcome],
                )
                .await
                .unwrap();
            let want: Vec<&RequestRecord> = rows
                .iter()
                .filter(|r| r.created_at_us >= kept_from.max(from) && r.created_at_us < to)
                .collect();
            assert!(!want.is_empty(), "{what}");
            assert_summarises(&got, &want, &[GroupDim::Outcome], &format!("{name} {what}"));
        }
        let gone = b
            .store
            .usage("ws", (0, H0 + HOUR), UsageFilter::default(), Vec::new())
            .await
            .unwrap();
        assert_eq!(gone.total.requests, 0, "{name}");
        // New requests in the cut hour merge into what retention left.
        let late = plain("late", "ws", H0 + HOUR + 40 * MIN + 1, Some("gpt-4o"));
        b.store.insert_batch(vec![late.clone()]).await.unwrap();
        let got = b
            .store
            .usage(
                "ws",
                (H0 + HOUR, H0 + 2 * HOUR),
                UsageFilter::default(),
                Vec::new(),
            )
            .await
            .unwrap();
        let mut want: Vec<&RequestRecord> = rows
            .iter()
            .filter(|r| (kept_from..H0 + 2 * HOUR).contains(&r.created_at_us))
            .collect();
        want.push(&late);
        assert_summarises(&got, &want, &[], &format!("{name} after a late request"));
    }
}

/// A store from before the hour tier gets it built from its minute rollups when it is opened by
/// this build: the migration is taken back (the table dropped, the version lowered; on
/// PostgreSQL the minute rows' dimensions back in their text) and run again, with the later
/// ones (SQLite's v17 and PostgreSQL's v12 store the dimensions otherwise).
#[tokio::test]
async fn the_hour_tier_is_built_from_the_minutes_when_a_store_first_migrates_to_it() {
    let rows: Vec<RequestRecord> = corpus("ws", 300, 13)
        .into_iter()
        .enumerate()
        .map(|(i, mut r)| {
            r.created_at_us = BASE + i as i64 * 50_000_000;
            r
        })
        .collect();
    for b in backends_with(&rows, 100).await {
        let version = b.store.known_schema_version();
        let reopened = match b.store.kind() {
            BackendKind::Sqlite => {
                let path = b.store.path().unwrap().to_path_buf();
                let conn = rusqlite::Connection::open(&path).unwrap();
                conn.execute_batch("DROP TABLE rollups_hourly").unwrap();
                // 11 made the hour tier: back to the version before it.
                conn.pragma_update(None, "user_version", 10).unwrap();
                drop(conn);
                Store::open(&path).unwrap()
            }
            BackendKind::Postgres => {
                let url = b._schema.as_ref().unwrap().url().to_string();
                let config: tokio_postgres::Config = url.parse().unwrap();
                let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
                tokio::spawn(conn);
                // 7 made the hour tier: back to the version before it, whose minute rows held
                // their dimensions' text (12 moved them to `rollup_keys`), so that migrating
                // again takes both steps.
                let dims = "model, provider, channel, grp, dialect, stream, status, outcome, \
                    classification, endpoint, effort, tools, max_output_bucket, input_bucket, \
                    region";
                client
                    .batch_execute(&format!(
                        "CREATE TABLE rollups_text AS SELECT r.workspace_id, r.minute_us, {dims},
                            r.data FROM rollups r JOIN rollup_keys k ON k.id = r.key_id;
                         DROP TABLE rollups, rollups_hourly, rollup_keys;
                         ALTER TABLE rollups_text RENAME TO rollups;
                         ALTER TABLE rollups ADD PRIMARY KEY (workspace_id, minute_us, {dims});
                         CREATE INDEX rollups_minute ON rollups (minute_us);
                         DELETE FROM laptime_schema WHERE version >= 7"
                    ))
                    .await
                    .unwrap();
                Store::open_postgres(&url).await.unwrap()
            }
        };
        assert_eq!(
            reopened.schema_version().await.unwrap(),
            version,
            "{}",
            b.name
        );
        let got = reopened
            .usage(
                "ws",
                (H0, H0 + 4 * HOUR),
                UsageFilter::default(),
                vec![GroupDim::Model],
            )
            .await
            .unwrap();
        let want: Vec<&RequestRecord> = rows
            .iter()
            .filter(|r| (H0..H0 + 4 * HOUR).contains(&r.created_at_us))
            .collect();
        assert!(want.len() > 200);
        assert_summarises(&got, &want, &[GroupDim::Model], b.name);
    }
}

#[tokio::test]
async fn usage_never_shows_another_workspace() {
    let mut rows = corpus("ws_a", 50, 2);
    rows.extend(corpus("ws_b", 30, 3));
    let mut orphan = plain("orphan", "ws_a", BASE, Some("m"));
    orphan.workspace_id = None;
    rows.push(orphan);
    for b in backends_with(&rows, 16).await {
        let by_model = [GroupDim::Model];
        let all = UsageFilter::default();
        let get = |ws: &'static str| usage_of(&b.store, ws, &all, &by_model);
        assert_eq!(get("ws_a").await.total.requests, 50, "{}", b.name);
        assert_eq!(get("ws_b").await.total.requests, 30, "{}", b.name);
        assert_eq!(get("ws_c").await.total.requests, 0, "{}", b.name);
        assert!(get("ws_c").await.groups.is_empty());
        assert!(recent(&b.store, "ws_c", &UsageFilter::default(), 10)
            .await
            .is_empty());
        assert_eq!(
            recent(&b.store, "ws_a", &UsageFilter::default(), 100)
                .await
                .len(),
            50
        );
    }
}

/// A record stored again under its request id (same request, same creation time) replaces the
/// stored one, in rows and rollups alike.
#[tokio::test]
async fn a_replaced_record_is_counted_once_with_its_new_values() {
    let first = plain("r1", "ws", BASE + 5, Some("a"));
    for b in backends_with(std::slice::from_ref(&first), 10).await {
        let mut again = plain("r1", "ws", BASE + 5, Some("b"));
        again.outcome = Outcome::UpstreamError;
        again.classification = laptime_core::slow::Classification::Failed;
        again.attempts.push(again.attempts[0].clone());
        let other = plain("r2", "ws", BASE + 7, Some("a"));
        // The same id twice in one batch too: the last one wins.
        let mut twice = plain("r3", "ws", BASE + 8, Some("a"));
        let mut twice_again = twice.clone();
        twice_again.model = Some("c".into());
        twice.status = 201;
        b.store
            .insert_batch(vec![again.clone(), other, twice, twice_again.clone()])
            .await
            .unwrap();

        let got = usage_of(&b.store, "ws", &UsageFilter::default(), &[GroupDim::Model]).await;
        assert_eq!(got.total.requests, 3, "{}", b.name);
        assert_eq!(got.total.errors, 1, "{}", b.name);
        let count = |m: &str| {
            got.groups
                .iter()
                .find(|(k, _)| k[0].1.as_deref() == Some(m))
                .map_or(0, |(_, r)| r.requests)
        };
        assert_eq!(
            (count("a"), count("b"), count("c")),
            (1, 1, 1),
            "{}",
            b.name
        );
        // The same from the hour tier, whose rows are rebuilt from the rebuilt minutes.
        let hours = b
            .store
            .usage(
                "ws",
                (H0 - HOUR, H0 + HOUR),
                UsageFilter::default(),
                vec![GroupDim::Model],
            )
            .await
            .unwrap();
        assert!(hours.total.agrees_with(&got.total), "{}", b.name);
        assert_eq!(hours.groups.len(), got.groups.len(), "{}", b.name);
        for ((hk, hr), (k, r)) in hours.groups.iter().zip(&got.groups) {
            assert_eq!(hk, k, "{}", b.name);
            assert!(hr.agrees_with(r), "{} {k:?}", b.name);
        }
        assert_eq!(b.store.record("ws", "r1").await.unwrap(), Some(again));
        assert_eq!(b.store.record("ws", "r3").await.unwrap(), Some(twice_again));
        assert_eq!(
            recent(&b.store, "ws", &UsageFilter::default(), 10)
                .await
                .len(),
            3
        );
    }
}

/// A batch written again whole, as the recorder does when its first commit landed but the
/// answer was lost (PostgreSQL's binary `COPY` fails on the first stored row and the batch goes
/// the replacing way): every request is stored once, counted once, and reads back as written.
#[tokio::test]
async fn a_batch_written_again_after_its_commit_landed_is_stored_and_counted_once() {
    let rows = corpus("ws", 200, 9);
    for b in backends_with(&rows, 200).await {
        // Again whole, then again with new requests around it (a retry that took in what
        // queued meanwhile).
        b.store.insert_batch(rows.clone()).await.unwrap();
        let more = corpus("ws2", 30, 10);
        let mut topped = rows[150..].to_vec();
        topped.extend(more.iter().cloned());
        b.store.insert_batch(topped).await.unwrap();

        let got = usage_of(&b.store, "ws", &UsageFilter::default(), &[]).await;
        assert_eq!(got.total.requests, 200, "{}", b.name);
        assert!(got.total.agrees_with(&rollup_of(&rows)), "{}", b.name);
        let other = usage_of(&b.store, "ws2", &UsageFilter::default(), &[]).await;
        assert_eq!(other.total.requests, 30, "{}", b.name);
        assert_eq!(
            recent(&b.store, "ws", &UsageFilter::default(), 500)
                .await
                .len(),
            200,
            "{}",
            b.name
        );
        for r in [&rows[0], &rows[150], &rows[199]] {
            assert_eq!(
                b.store.record("ws", &r.request_id).await.unwrap().as_ref(),
                Some(r),
                "{}",
                b.name
            );
        }
    }
}

#[tokio::test]
async fn a_replay_writes_only_the_records_not_stored_and_never_replaces_one() {
    let ended = plain("req_1", "ws", BASE + 1_000, Some("m"));
    for b in backends_with(std::slice::from_ref(&ended), 10).await {
        let mut stale = ended.clone();
        stale.outcome = Outcome::GatewayCrashed;
        let mut crashed = plain("req_2", "ws", BASE + 2_000, Some("m"));
        crashed.outcome = Outcome::GatewayCrashed;
        let replay = vec![stale, crashed.clone(), crashed.clone()];
        assert_eq!(
            b.store.insert_absent(replay.clone()).await.unwrap(),
            ["req_2"],
            "{}",
            b.name
        );
        assert!(b.store.insert_absent(replay).await.unwrap().is_empty());
        assert_eq!(
            b.store.record("ws", "req_1").await.unwrap(),
            Some(ended.clone())
        );
        assert_eq!(b.store.record("ws", "req_2").await.unwrap(), Some(crashed));
        let total = usage_of(&b.store, "ws", &UsageFilter::default(), &[])
            .await
            .total;
        assert_eq!((total.requests, total.errors), (2, 1), "{}", b.name);
    }
}

/// A filtered log read finds its rows among the newest rows, then through the minutes whose
/// rollups match: rare rows
/// spread over a week (one run of minutes, minutes apart, hours apart, days apart), common
/// rows in every minute of the newest hours, a filter no row matches, windows that cut
/// minutes and hours; every answer is the brute-force newest-first list.
#[tokio::test]
async fn a_filtered_log_read_finds_rare_rows_hours_and_days_back() {
    let mut rows = Vec::new();
    let mut at = |id: String, created: i64, model: &str| {
        rows.push(plain(&id, "ws", created, Some(model)));
    };
    // Rare: three in consecutive minutes, then one an hour for a day, then one a day.
    let end = BASE + 7 * 24 * HOUR;
    for i in 0..3 {
        at(format!("run-{i}"), end - 30 * MIN - i * MIN + 11, "rare");
    }
    for h in 1..26 {
        at(format!("hourly-{h}"), end - h * HOUR - 17 * MIN + h, "rare");
    }
    for d in 2..7 {
        at(format!("daily-{d}"), end - d * 24 * HOUR + 3 * MIN, "rare");
    }
    // Common: fifteen every minute of the last three hours, more than the read looks at before
    // it walks the rollups (`PROBE_ROWS`), so that the older rare rows are found by the walk;
    // in pairs at one time, so that rows at the time where the first look stops are on its
    // either side (the one written last is the newer).
    for m in 0..180 {
        for k in 0..15 {
            at(
                format!("common-{m}-{k}"),
                end - m * MIN - (k / 2) * 3_000_000 - 1,
                "common",
            );
        }
    }
    rows.sort_by_key(|r| r.created_at_us);
    for b in backends_with(&rows, 200).await {
        let name = b.name;
        let newest = |model: &str, window: (i64, i64), limit: usize| {
            let mut v: Vec<(usize, &RequestRecord)> = rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.model.as_deref() == Some(model))
                .filter(|(_, r)| (window.0..window.1).contains(&r.created_at_us))
                .collect();
            v.sort_by_key(|(i, r)| std::cmp::Reverse((r.created_at_us, *i)));
            v.into_iter()
                .take(limit)
                .map(|(_, r)| r.request_id.clone())
                .collect::<Vec<_>>()
        };
        let read = |model: &str, window: Option<(i64, i64)>, limit: u32| {
            let filter = UsageFilter {
                model: Some(model.into()),
                ..UsageFilter::default()
            };
            let store = &b.store;
            async move {
                let got = store.recent("ws", filter, window, limit).await.unwrap();
                got.into_iter().map(|r| r.request_id).collect::<Vec<_>>()
            }
        };
        let open = (i64::MIN, i64::MAX);
        let all_rare = newest("rare", open, 1000);
        assert_eq!(all_rare.len(), 33);
        assert_eq!(read("rare", None, 1000).await, all_rare, "{name}");
        assert_eq!(read("rare", None, 5).await, all_rare[..5], "{name}");
        assert_eq!(read("rare", None, 31).await, all_rare[..31], "{name}");
        for window in [
            (end - 26 * HOUR - 5, end - 31 * MIN + 20),
            (end - 3 * 24 * HOUR + 3 * MIN + 1, end - HOUR),
            (end - 30 * MIN, end),
            (BASE, BASE + HOUR),
        ] {
            for limit in [1, 4, 50] {
                assert_eq!(
                    read("rare", Some(window), limit).await,
                    newest("rare", window, limit as usize),
                    "{name} {window:?} {limit}"
                );
            }
        }
        for limit in [50, 2047, 2048, 2049, 2100] {
            assert_eq!(
                read("common", None, limit).await,
                newest("common", open, limit as usize),
                "{name} {limit}"
            );
        }
        let cut = (end - 100 * MIN - 3_000_000, end - 20 * MIN - 9_000_000);
        assert_eq!(
            read("common", Some(cut), 1400).await,
            newest("common", cut, 1400),
            "{name}"
        );
        assert_eq!(
            read("absent", None, 50).await,
            Vec::<String>::new(),
            "{name}"
        );
        assert_eq!(read("rare", None, 0).await, Vec::<String>::new(), "{name}");
        let backwards = (end - 20 * MIN, end - 26 * HOUR);
        assert_eq!(
            read("rare", Some(backwards), 50).await,
            Vec::<String>::new(),
            "{name}"
        );
    }
}

#[tokio::test]
async fn recent_is_newest_first_within_the_window_and_filter() {
    let mut rows = corpus("ws", 300, 4);
    // Two requests in one microsecond: the one written last is the newer.
    rows.push(plain("tie-1", "ws", BASE + 400 * MIN, Some("m")));
    rows.push(plain("tie-2", "ws", BASE + 400 * MIN, Some("m")));
    for b in backends_with(&rows, 50).await {
        let name = b.name;
        let store = &b.store;
        let newest = |pred: &dyn Fn(&RequestRecord) -> bool, limit: usize| {
            let mut v: Vec<(usize, &RequestRecord)> =
                rows.iter().enumerate().filter(|(_, r)| pred(r)).collect();
            v.sort_by_key(|(i, r)| std::cmp::Reverse((r.created_at_us, *i)));
            v.into_iter()
                .take(limit)
                .map(|(_, r)| r.request_id.clone())
                .collect::<Vec<_>>()
        };
        let ids = |v: Vec<RequestRecord>| v.into_iter().map(|r| r.request_id).collect::<Vec<_>>();

        let plain_recent = recent(store, "ws", &UsageFilter::default(), 20).await;
        assert_eq!(plain_recent[2].attempts, rows[299].attempts);
        assert_eq!(ids(plain_recent), newest(&|_| true, 20), "{name}");

        let window = (BASE + 5 * MIN, BASE + 9 * MIN);
        let in_window = |r: &RequestRecord| (window.0..window.1).contains(&r.created_at_us);
        let got = store
            .recent("ws", UsageFilter::default(), Some(window), 7)
            .await
            .unwrap();
        assert_eq!(ids(got), newest(&in_window, 7), "{name}");

        let filter = UsageFilter {
            model: Some("o3-mini".into()),
            stream: Some(true),
            ..UsageFilter::default()
        };
        let got = store.recent("ws", filter, Some(window), 50).await.unwrap();
        let want = newest(
            &|r| in_window(r) && r.model.as_deref() == Some("o3-mini") && r.stream,
            50,
        );
        assert!(!want.is_empty());
        assert_eq!(ids(got), want, "{name}");

        let none = UsageFilter {
            model: Some(String::new()),
            ..UsageFilter::default()
        };
        let got = recent(store, "ws", &none, 500).await;
        assert_eq!(ids(got), newest(&|r| r.model.is_none(), 500), "{name}");
    }
}

#[tokio::test]
async fn retention_cuts_the_rollups_of_every_workspace_at_the_cutoff() {
    // Four workspaces over three hours, each with rows on both sides of a cutoff inside the
    // second hour; one workspace ends before the cutoff, so retention removes all of it. The
    // count of requests deleted covers those without a workspace too.
    let mut rows = Vec::new();
    for (k, ws) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let n = if ws == "d" { 60 } else { 240 };
        rows.extend(corpus(ws, n, 20 + k as u64).into_iter().map(|mut r| {
            r.created_at_us = H0 + (r.created_at_us - BASE) * 6 + k as i64;
            r
        }));
    }
    let cutoff = H0 + HOUR + 17 * MIN + 5_000_000;
    let kept_from = H0 + HOUR + 17 * MIN;
    // Requests refused before a workspace was known: one on either side of the cutoff.
    for (i, at) in [cutoff - 1, cutoff].into_iter().enumerate() {
        let mut r = plain(&format!("anon-{i}"), "x", at, Some("gpt-4o"));
        r.workspace_id = None;
        rows.push(r);
    }
    for b in backends_with(&rows, 100).await {
        let name = b.name;
        let deleted = b.store.delete_older_than(cutoff, 30).await.unwrap();
        let old = rows.iter().filter(|r| r.created_at_us < cutoff).count();
        assert_eq!(deleted, old, "{name}");
        assert_eq!(
            b.store.delete_older_than(cutoff, 30).await.unwrap(),
            0,
            "{name}"
        );
        for ws in ["a", "b", "c", "d"] {
            let mine: Vec<&RequestRecord> = rows
                .iter()
                .filter(|r| r.workspace_id.as_deref() == Some(ws))
                .collect();
            for (from, to) in [
                (0, H0 + 4 * HOUR),
                (H0 + HOUR, H0 + 2 * HOUR),
                (0, H0 + HOUR),
            ] {
                let got = b
                    .store
                    .usage(
                        ws,
                        (from, to),
                        UsageFilter::default(),
                        vec![GroupDim::Model],
                    )
                    .await
                    .unwrap();
                let want: Vec<&RequestRecord> = mine
                    .iter()
                    .copied()
                    .filter(|r| r.created_at_us >= kept_from.max(from) && r.created_at_us < to)
                    .collect();
                assert_eq!(
                    want.is_empty(),
                    ws == "d" || to <= kept_from,
                    "{name} {ws} {from}..{to}"
                );
                assert_summarises(&got, &want, &[GroupDim::Model], &format!("{name} {ws}"));
            }
        }
    }
}

#[tokio::test]
async fn retention_deletes_rows_and_whole_minutes_of_rollups_in_batches() {
    let rows = corpus("ws", 120, 5); // about 14 minutes
    for b in backends_with(&rows, 25).await {
        let name = b.name;
        let cutoff = BASE + 4 * MIN + 30_000_000;
        let deleted = b.store.delete_older_than(cutoff, 7).await.unwrap();
        let old = rows.iter().filter(|r| r.created_at_us < cutoff).count();
        assert!(old > 7, "more than one batch");
        assert_eq!(deleted, old, "{name}");
        let left = recent(&b.store, "ws", &UsageFilter::default(), 1_000).await;
        assert_eq!(left.len(), 120 - old, "{name}");
        assert!(left.iter().all(|r| r.created_at_us >= cutoff));
        // The minute holding the cutoff keeps its rollup; every earlier minute is gone.
        let got = b
            .store
            .usage(
                "ws",
                (0, BASE + 100 * MIN),
                UsageFilter::default(),
                Vec::new(),
            )
            .await
            .unwrap();
        let want = rollup_of(rows.iter().filter(|r| r.created_at_us >= BASE + 4 * MIN));
        assert!(got.total.agrees_with(&want), "{name}");

        // Nothing left to delete is not an error; a later cutoff deletes the rest.
        assert_eq!(
            b.store.delete_older_than(cutoff, 7).await.unwrap(),
            0,
            "{name}"
        );
        assert_eq!(
            b.store.delete_older_than(i64::MAX, 1_000).await.unwrap(),
            120 - old
        );
        let after = b
            .store
            .usage("ws", (0, i64::MAX / 2), UsageFilter::default(), Vec::new())
            .await
            .unwrap();
        assert_eq!(after.total.requests, 0, "{name}");
    }
}

#[tokio::test]
async fn an_object_is_placed_once_per_workspace_and_retention_forgets_it() {
    let place = |id: &str, channel: &str, key_index, at| Placement {
        object_id: id.into(),
        kind: ObjectKind::File,
        channel: channel.into(),
        key_index,
        created_at_us: at,
    };
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        s.put_placements("ws", vec![place("file-1", "a", Some(1), BASE)])
            .await
            .unwrap();
        // Ids never move: a second placement of the same id keeps the first.
        s.put_placements(
            "ws",
            vec![
                place("file-1", "b", None, BASE + 5),
                place("batch_1", "b", None, BASE + MIN),
            ],
        )
        .await
        .unwrap();
        assert_eq!(
            s.placement("ws", "file-1").await.unwrap(),
            Some(place("file-1", "a", Some(1), BASE)),
            "{name}"
        );
        let batch = s.placement("ws", "batch_1").await.unwrap().unwrap();
        assert_eq!((batch.channel.as_str(), batch.key_index), ("b", None));
        // A listing of one channel's files: the workspace's own, newest first.
        s.put_placements("ws", vec![place("file-2", "a", None, BASE + 2 * MIN)])
            .await
            .unwrap();
        assert_eq!(
            s.placed("ws", "a", ObjectKind::File, 10).await.unwrap(),
            ["file-2", "file-1"],
            "{name}"
        );
        assert!(s
            .placed("other", "a", ObjectKind::File, 10)
            .await
            .unwrap()
            .is_empty());
        assert!(s
            .placed("ws", "a", ObjectKind::Batch, 10)
            .await
            .unwrap()
            .is_empty());
        // Another workspace cannot name it.
        assert_eq!(
            s.placement("other", "file-1").await.unwrap(),
            None,
            "{name}"
        );
        // Retention forgets placements made before the cutoff, with the requests.
        s.delete_older_than(BASE + 1, 100).await.unwrap();
        assert_eq!(s.placement("ws", "file-1").await.unwrap(), None, "{name}");
        assert!(
            s.placement("ws", "batch_1").await.unwrap().is_some(),
            "{name}"
        );
    }
}

/// Rows days apart land in separate partitions on PostgreSQL; retention drops whole days and
/// cuts the day holding the cutoff, and a day dropped comes back when a record arrives for it.
#[tokio::test]
async fn retention_across_days_keeps_exactly_the_rows_after_the_cutoff() {
    const DAY: i64 = 86_400_000_000;
    let rows: Vec<RequestRecord> = (0..40)
        .map(|i| plain(&format!("d{i}"), "ws", BASE + i * DAY / 4, Some("m")))
        .collect();
    for b in backends_with(&rows, 9).await {
        let cutoff = BASE + 5 * DAY + DAY / 8;
        let old = rows.iter().filter(|r| r.created_at_us < cutoff).count();
        assert_eq!(
            b.store.delete_older_than(cutoff, 1_000).await.unwrap(),
            old,
            "{}",
            b.name
        );
        let left = recent(&b.store, "ws", &UsageFilter::default(), 1_000).await;
        assert_eq!(left.len(), rows.len() - old, "{}", b.name);
        // A late record for a day retention dropped is written, not lost.
        let late = plain("late", "ws", BASE + DAY / 2, Some("m"));
        b.store.insert_batch(vec![late.clone()]).await.unwrap();
        assert_eq!(
            b.store.record("ws", "late").await.unwrap(),
            Some(late),
            "{}",
            b.name
        );
    }
}

#[tokio::test]
async fn the_recorder_keeps_rollups_in_step_with_its_rows() {
    let rows = corpus("ws", 1_000, 6);
    for b in backends().await {
        let (rec, task) = Recorder::start(&b.store, 64).unwrap();
        for r in rows.iter().cloned() {
            let mut pending = Box::new(r);
            while let Err(back) = rec.try_record(pending) {
                pending = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        assert!(rec.shutdown(task, Duration::from_secs(30)).await);
        let got = b
            .store
            .usage(
                "ws",
                (BASE, BASE + 200 * MIN),
                UsageFilter::default(),
                vec![GroupDim::Classification],
            )
            .await
            .unwrap();
        assert!(got.total.agrees_with(&rollup_of(&rows)), "{}", b.name);
        assert_eq!(
            got.groups.iter().map(|(_, r)| r.requests).sum::<u64>(),
            1_000
        );
    }
}

#[test]
fn group_dimensions_round_trip_their_names() {
    for d in GroupDim::ALL {
        assert_eq!(GroupDim::parse(d.as_str()), Some(d));
    }
    assert_eq!(GroupDim::parse("grp"), None);
    assert_eq!(GroupDim::Group.as_str(), "group");
}

/// Retention and the recorder write the same database at once: neither may fail or lose rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_runs_beside_a_busy_recorder_without_failing_either() {
    for b in backends().await {
        let store = &b.store;
        // Old rows for retention to chew through, in small batches.
        let old = corpus("ws", 3_000, 7);
        for chunk in old.chunks(500) {
            store.insert_batch(chunk.to_vec()).await.unwrap();
        }
        let (rec, task) = Recorder::start(store, 256).unwrap();
        let retention = {
            let store = store.clone();
            tokio::spawn(async move { store.delete_older_than(BASE + 1_000 * MIN, 50).await })
        };
        let new: Vec<_> = corpus("ws", 3_000, 8)
            .into_iter()
            .map(|mut r| {
                r.request_id = format!("new-{}", r.request_id);
                r.created_at_us += 10_000 * MIN;
                r
            })
            .collect();
        for r in new.iter().cloned() {
            let mut pending = Box::new(r);
            while let Err(back) = rec.try_record(pending) {
                pending = back;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        assert_eq!(retention.await.unwrap().unwrap(), 3_000, "{}", b.name);
        assert!(rec.shutdown(task, Duration::from_secs(30)).await);
        assert_eq!(
            rec.stats()
                .failed
                .load(std::sync::atomic::Ordering::Relaxed),
            0,
            "{}",
            b.name
        );
        let got = store
            .usage("ws", (0, i64::MAX / 2), UsageFilter::default(), Vec::new())
            .await
            .unwrap();
        assert!(got.total.agrees_with(&rollup_of(&new)), "{}", b.name);
    }
}

#[tokio::test]
async fn workspaces_and_tokens_behave_the_same_in_both_stores() {
    const NOW: i64 = 1_700_000_000_000_000;
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        assert!(s.ping().await, "{name}");
        let admin = s.bootstrap(None, NOW).await.unwrap().unwrap();
        assert_eq!(admin.scope, Scope::Admin);
        assert_eq!(admin.workspace.name, "default");
        assert!(
            s.bootstrap(None, NOW).await.unwrap().is_none(),
            "{name}: once"
        );
        let p = s.authenticate(&admin.token).await.unwrap().unwrap();
        assert_eq!(
            (p.key_id.as_str(), p.scope),
            (admin.key_id.as_str(), Scope::Admin)
        );

        let team = s
            .create_workspace(" team ", Some("batch".into()), NOW + 1)
            .await
            .unwrap();
        assert_eq!(
            (team.name.as_str(), team.group.as_deref()),
            ("team", Some("batch"))
        );
        assert!(
            matches!(
                s.create_workspace("team", None, NOW).await,
                Err(StoreError::Conflict(_))
            ),
            "{name}"
        );
        assert!(matches!(
            s.create_workspace("", None, NOW).await,
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            s.set_workspace_group("team", Some("bad group".into()))
                .await,
            Err(StoreError::Conflict(_))
        ));
        assert!(matches!(
            s.workspace("nope").await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(s.workspace(&team.id).await.unwrap(), team, "{name}: by id");

        let read = s
            .create_token("team", Scope::Read, None, NOW + 1)
            .await
            .unwrap();
        let grouped = s
            .create_token("team", Scope::Proxy, Some("fast".into()), NOW + 2)
            .await
            .unwrap();
        let p = s.authenticate(&read.token).await.unwrap().unwrap();
        assert_eq!(
            (
                p.workspace_id.as_str(),
                p.workspace_name.as_str(),
                p.scope,
                p.group.as_deref()
            ),
            (team.id.as_str(), "team", Scope::Read, Some("batch")),
            "{name}: the workspace's group"
        );
        let p = s.authenticate(&grouped.token).await.unwrap().unwrap();
        assert_eq!(
            p.group.as_deref(),
            Some("fast"),
            "{name}: the token's own group wins"
        );
        s.set_workspace_group("team", None).await.unwrap();
        let p = s.authenticate(&read.token).await.unwrap().unwrap();
        assert_eq!(p.group, None, "{name}");

        // Unknown, malformed and revoked tokens are all None.
        assert_eq!(s.authenticate("lt_nope").await.unwrap(), None);
        let unknown = format!("lt_{}", "ab".repeat(32));
        assert_eq!(s.authenticate(&unknown).await.unwrap(), None);
        let other = s.create_workspace("other", None, NOW + 2).await.unwrap();
        assert!(
            !s.revoke_token(&other.id, &read.key_id, NOW).await.unwrap(),
            "{name}"
        );
        assert!(s
            .revoke_token(&team.id, &read.key_id, NOW + 3)
            .await
            .unwrap());
        assert!(!s
            .revoke_token(&team.id, &read.key_id, NOW + 4)
            .await
            .unwrap());
        assert_eq!(s.authenticate(&read.token).await.unwrap(), None, "{name}");

        let tokens = s.list_tokens(&team.id).await.unwrap();
        assert_eq!(tokens.len(), 2);
        assert_eq!(tokens[0].key_id, read.key_id, "{name}: oldest first");
        assert_eq!(tokens[0].revoked_at_us, Some(NOW + 3));
        assert_eq!(tokens[1].group.as_deref(), Some("fast"));
        let names: Vec<String> = s
            .list_workspaces()
            .await
            .unwrap()
            .into_iter()
            .map(|w| w.name)
            .collect();
        assert_eq!(names, ["default", "team", "other"], "{name}: oldest first");
    }
}

/// Runs `sql` on a connection of its own, as another process sharing the store would.
async fn elsewhere(b: &Backend, sql: &str) {
    match &b._schema {
        None => b.store.with_conn(|c| Ok(c.execute_batch(sql)?)).unwrap(),
        Some(schema) => {
            let (client, conn) = tokio_postgres::connect(schema.url(), tokio_postgres::NoTls)
                .await
                .unwrap();
            let conn = tokio::spawn(conn);
            client.batch_execute(sql).await.unwrap();
            drop(client);
            conn.await.unwrap().unwrap();
        }
    }
}

/// Every change a principal is read from moves the auth epoch, whichever call or process makes
/// it (the gateway trusts what it remembers while the epoch stays); reads and request records
/// leave it.
#[tokio::test]
async fn the_auth_epoch_moves_with_every_change_to_tokens_workspaces_and_limits() {
    use laptime_core::limit::Limits;
    const NOW: i64 = 1_700_000_000_000_000;
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        let mut last = s.auth_epoch().await.unwrap();
        let mut moved = |now: i64, what: &str| {
            assert!(now > last, "{name}: {what} moves the epoch");
            last = now;
        };
        let admin = s.bootstrap(None, NOW).await.unwrap().unwrap();
        moved(s.auth_epoch().await.unwrap(), "bootstrap");
        let team = s.create_workspace("team", None, NOW).await.unwrap();
        moved(s.auth_epoch().await.unwrap(), "a new workspace");
        let tok = s
            .create_token("team", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        moved(s.auth_epoch().await.unwrap(), "a new token");
        s.set_workspace_group("team", Some("batch".into()))
            .await
            .unwrap();
        moved(s.auth_epoch().await.unwrap(), "a workspace's group");
        let limits = Limits {
            rpm: Some(60),
            tpm: None,
            concurrent: None,
        };
        s.set_limits(&team.id, None, limits, NOW).await.unwrap();
        moved(s.auth_epoch().await.unwrap(), "a workspace's limits");
        s.set_limits(&team.id, Some(&tok.key_id), limits, NOW)
            .await
            .unwrap();
        moved(s.auth_epoch().await.unwrap(), "a token's limits");
        s.set_limits(&team.id, Some(&tok.key_id), Limits::default(), NOW)
            .await
            .unwrap();
        moved(s.auth_epoch().await.unwrap(), "a token's limits removed");
        assert!(s.revoke_token(&team.id, &tok.key_id, NOW).await.unwrap());
        moved(s.auth_epoch().await.unwrap(), "a revocation");
        elsewhere(&b, "UPDATE tokens SET scope = 'read' WHERE scope = 'admin'").await;
        moved(
            s.auth_epoch().await.unwrap(),
            "a change made on another connection",
        );

        // Reads and records leave it.
        assert!(s.authenticate(&admin.token).await.unwrap().is_some());
        s.list_tokens(&team.id).await.unwrap();
        s.list_limits(None).await.unwrap();
        s.insert_batch(vec![plain("r1", &team.id, NOW, Some("m"))])
            .await
            .unwrap();
        assert_eq!(s.auth_epoch().await.unwrap(), last, "{name}");
    }
}

#[tokio::test]
async fn limits_of_workspaces_and_tokens_reach_the_principal_in_both_stores() {
    use laptime_core::limit::{Applicable, Limits};
    const NOW: i64 = 1_700_000_000_000_000;
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        let team = s.create_workspace("team", None, NOW).await.unwrap();
        let other = s.create_workspace("other", None, NOW).await.unwrap();
        let tok = s
            .create_token("team", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        let theirs = s
            .create_token("other", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        let p = s.authenticate(&tok.token).await.unwrap().unwrap();
        assert_eq!(p.limits, Applicable::default(), "{name}: none by default");

        let ws_limits = Limits {
            rpm: Some(600),
            tpm: Some(100_000),
            concurrent: None,
        };
        let tok_limits = Limits {
            rpm: Some(60),
            tpm: None,
            concurrent: Some(2),
        };
        s.set_limits(&team.id, None, ws_limits, NOW).await.unwrap();
        s.set_limits(&team.id, Some(&tok.key_id), tok_limits, NOW + 1)
            .await
            .unwrap();
        let p = s.authenticate(&tok.token).await.unwrap().unwrap();
        assert_eq!(
            p.limits,
            Applicable {
                workspace: ws_limits,
                token: tok_limits
            },
            "{name}"
        );
        // Another workspace's token is not one of this workspace's, and its limits are its own.
        assert!(
            matches!(
                s.set_limits(&team.id, Some(&theirs.key_id), tok_limits, NOW)
                    .await,
                Err(StoreError::NotFound(_))
            ),
            "{name}"
        );
        let p = s.authenticate(&theirs.token).await.unwrap().unwrap();
        assert_eq!(p.limits, Applicable::default(), "{name}");

        let rows = s.list_limits(Some(&team.id)).await.unwrap();
        assert_eq!(rows.len(), 2, "{name}");
        assert_eq!(
            (rows[0].key_id.as_deref(), rows[0].limits),
            (None, ws_limits)
        );
        assert_eq!(
            (rows[1].key_id.as_deref(), rows[1].updated_at_us),
            (Some(tok.key_id.as_str()), NOW + 1)
        );
        assert!(s.list_limits(Some(&other.id)).await.unwrap().is_empty());
        assert_eq!(s.list_limits(None).await.unwrap().len(), 2);

        // Replacing and clearing.
        let tighter = Limits {
            rpm: Some(30),
            ..Limits::default()
        };
        s.set_limits(&team.id, None, tighter, NOW + 2)
            .await
            .unwrap();
        s.set_limits(&team.id, Some(&tok.key_id), Limits::default(), NOW + 2)
            .await
            .unwrap();
        let p = s.authenticate(&tok.token).await.unwrap().unwrap();
        assert_eq!(
            p.limits,
            Applicable {
                workspace: tighter,
                token: Limits::default()
            },
            "{name}"
        );
        assert_eq!(s.list_limits(None).await.unwrap().len(), 1, "{name}");
    }
}

#[tokio::test]
async fn spend_sums_the_costs_written_per_day_and_month_and_budgets_read_it_back() {
    use laptime_core::limit::{Budget, BudgetMode, Period};
    // 2026-03-31 23:00 UTC and the next day (another day and another month).
    const MARCH_31: i64 = 1_774_998_000_000_000;
    const APRIL_1: i64 = MARCH_31 + 2 * 3_600_000_000;
    const NOW: i64 = APRIL_1 + 60_000_000;
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        let team = s.create_workspace("team", None, NOW).await.unwrap();
        let tok = s
            .create_token("team", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        let other = s.create_workspace("other", None, NOW).await.unwrap();
        let theirs = s
            .create_token("other", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        let cost = |nano| {
            Some(Cost {
                nano_usd: nano,
                estimated: false,
            })
        };
        let mut rows = Vec::new();
        for (i, (at, key, nano)) in [
            (MARCH_31, Some(&tok.key_id), 1_000),
            (APRIL_1, Some(&tok.key_id), 20_000),
            (APRIL_1 + 1, None, 300_000),
            // Unpriced and free rows add nothing.
            (APRIL_1 + 2, Some(&tok.key_id), 0),
        ]
        .into_iter()
        .enumerate()
        {
            let mut r = plain(&format!("s{i}"), &team.id, at, Some("m"));
            r.key_id = key.cloned();
            r.cost = cost(nano);
            rows.push(r);
        }
        let mut unpriced = plain("s9", &team.id, APRIL_1, Some("m"));
        unpriced.key_id = Some(tok.key_id.clone());
        rows.push(unpriced);
        s.insert_batch(rows.clone()).await.unwrap();
        // A row written again with another cost replaces its spend, and a replay adds nothing.
        let mut again = rows[1].clone();
        again.cost = cost(50_000);
        s.insert_batch(vec![again]).await.unwrap();
        s.insert_absent(rows.clone()).await.unwrap();

        let budget = |period, nano, mode| Budget {
            period,
            nano_usd: nano,
            mode,
        };
        for (key, period) in [
            (None, Period::Day),
            (None, Period::Month),
            (Some(tok.key_id.as_str()), Period::Day),
            (Some(tok.key_id.as_str()), Period::Month),
        ] {
            s.set_budget(
                &team.id,
                key,
                period,
                Some((1_000_000, BudgetMode::Hard)),
                NOW,
            )
            .await
            .unwrap();
        }
        assert!(matches!(
            s.set_budget(
                &team.id,
                Some(&theirs.key_id),
                Period::Day,
                Some((1, BudgetMode::Soft)),
                NOW
            )
            .await,
            Err(StoreError::NotFound(_))
        ));
        s.set_budget(
            &other.id,
            None,
            Period::Month,
            Some((7, BudgetMode::Soft)),
            NOW,
        )
        .await
        .unwrap();
        let got: Vec<_> = s
            .list_budgets(Some(&team.id), NOW)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.key_id, r.budget.period, r.spent_nano_usd))
            .collect();
        // April only: the workspace has the token's 50,000 and its own 300,000; the token its
        // 50,000. March 31's 1,000 is in another day and month.
        assert_eq!(
            got,
            [
                (None, Period::Day, 350_000),
                (None, Period::Month, 350_000),
                (Some(tok.key_id.clone()), Period::Day, 50_000),
                (Some(tok.key_id.clone()), Period::Month, 50_000),
            ],
            "{name}"
        );
        let march: Vec<u64> = s
            .list_budgets(Some(&team.id), MARCH_31)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.spent_nano_usd)
            .collect();
        assert_eq!(march, [1_000, 1_000, 1_000, 1_000], "{name}");
        let all = s.list_budgets(None, NOW).await.unwrap();
        assert_eq!(all.len(), 5, "{name}");
        let theirs_row = all.iter().find(|r| r.workspace_id == other.id).unwrap();
        assert_eq!(
            theirs_row.budget,
            budget(Period::Month, 7, BudgetMode::Soft)
        );
        assert_eq!(theirs_row.spent_nano_usd, 0);
        // 2026-05-01T00:00:00Z.
        assert_eq!(theirs_row.resets_at_us, 1_777_593_600_000_000, "{name}");
        s.set_budget(&team.id, None, Period::Day, None, NOW)
            .await
            .unwrap();
        assert_eq!(s.list_budgets(Some(&team.id), NOW).await.unwrap().len(), 3);
    }
}

/// A priced row of `ws` (and its token `key`) at `at`.
fn spent(id: &str, ws: &str, key: Option<&str>, at: i64, nano: u64) -> RequestRecord {
    let mut r = plain(id, ws, at, Some("m"));
    r.key_id = key.map(str::to_string);
    r.cost = Some(Cost {
        nano_usd: nano,
        estimated: false,
    });
    r
}

#[tokio::test]
async fn spend_follows_the_budget_zone_and_is_listed_for_tokens_without_a_budget() {
    use laptime_core::limit::{BudgetMode, Period, Zone};
    // 2026-03-31T21:30Z is 23:30 on 31 March in Berlin (CEST); 22:30Z is 00:30 on 1 April.
    const BEFORE: i64 = 1_774_992_600_000_000;
    const AFTER: i64 = BEFORE + 3_600_000_000;
    const NOW: i64 = AFTER + 60_000_000;
    for b in backends().await {
        let name = b.name;
        let s = &b
            .store
            .clone()
            .with_budget_zone(Zone::named("Europe/Berlin").unwrap());
        let team = s.create_workspace("team", None, NOW).await.unwrap();
        let budgeted = s
            .create_token("team", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        let free = s
            .create_token("team", Scope::Proxy, None, NOW)
            .await
            .unwrap();
        s.insert_batch(vec![
            spent("z1", &team.id, Some(&budgeted.key_id), BEFORE, 1_000),
            spent("z2", &team.id, Some(&budgeted.key_id), AFTER, 20_000),
            spent("z3", &team.id, Some(&free.key_id), AFTER, 300_000),
        ])
        .await
        .unwrap();
        s.set_budget(
            &team.id,
            Some(&budgeted.key_id),
            Period::Month,
            Some((1_000_000, BudgetMode::Hard)),
            NOW,
        )
        .await
        .unwrap();
        let budgets = s.list_budgets(Some(&team.id), NOW).await.unwrap();
        // April in Berlin: only the row after local midnight; it resets at Berlin's 1 May.
        assert_eq!(budgets.len(), 1, "{name}");
        assert_eq!(budgets[0].spent_nano_usd, 20_000, "{name}");
        // 2026-04-30T22:00:00Z.
        assert_eq!(budgets[0].resets_at_us, 1_777_586_400_000_000, "{name}");
        // Every token that spent is listed, with a budget or not, and the workspace's whole.
        let spend = s.list_spend(Some(&team.id), NOW).await.unwrap();
        let got: Vec<_> = spend
            .iter()
            .map(|r| (r.key_id.clone(), r.day_nano_usd, r.month_nano_usd))
            .collect();
        let mut want = vec![
            (None, 320_000, 320_000),
            (Some(budgeted.key_id.clone()), 20_000, 20_000),
            (Some(free.key_id.clone()), 300_000, 300_000),
        ];
        want.sort();
        assert_eq!(got, want, "{name}");
        // In Berlin's 31 March only the first row counts.
        let march = s.list_spend(Some(&team.id), BEFORE).await.unwrap();
        let march: Vec<_> = march
            .iter()
            .map(|r| (r.key_id.clone(), r.day_nano_usd, r.month_nano_usd))
            .collect();
        assert_eq!(
            march,
            [
                (None, 1_000, 1_000),
                (Some(budgeted.key_id.clone()), 1_000, 1_000)
            ],
            "{name}"
        );
        // The same rows summed in UTC are all 31 March.
        let utc = b.store.list_spend(Some(&team.id), BEFORE).await.unwrap();
        assert!(
            utc.is_empty(),
            "{name}: sums are kept per the writer's zone"
        );
        assert!(s.list_spend(Some("ws_none"), NOW).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn spend_retention_keeps_the_current_and_the_previous_period_of_every_sum() {
    const DAY: i64 = 86_400_000_000;
    // 2026-04-02T12:00Z, and rows on 2 April, 1 April, 31 March and 15 February.
    const NOW: i64 = 1_775_131_200_000_000;
    const FEB_15: i64 = NOW - 46 * DAY;
    for b in backends().await {
        let name = b.name;
        let s = &b.store;
        let ws = s.create_workspace("team", None, NOW).await.unwrap();
        s.insert_batch(vec![
            spent("r0", &ws.id, None, NOW, 1),
            spent("r1", &ws.id, None, NOW - DAY, 20),
            spent("r2", &ws.id, None, NOW - 2 * DAY, 300),
            spent("r3", &ws.id, None, FEB_15, 4_000),
        ])
        .await
        .unwrap();
        let ws_id = ws.id.as_str();
        let at = |t| async move {
            let rows = s.list_spend(Some(ws_id), t).await.unwrap();
            rows.first()
                .map(|r| (r.day_nano_usd, r.month_nano_usd))
                .unwrap_or((0, 0))
        };
        assert_eq!(at(FEB_15).await, (4_000, 4_000), "{name}");
        // Day sums of 31 March and 15 February, and February's month: 3 sums.
        assert_eq!(s.prune_spend(NOW).await.unwrap(), 3, "{name}");
        assert_eq!(at(NOW).await, (1, 21), "{name}: today and April kept");
        assert_eq!(at(NOW - DAY).await, (20, 21), "{name}: yesterday kept");
        assert_eq!(
            at(NOW - 2 * DAY).await,
            (0, 300),
            "{name}: March kept, its days not"
        );
        assert_eq!(at(FEB_15).await, (0, 0), "{name}: February gone");
        assert_eq!(s.prune_spend(NOW).await.unwrap(), 0, "{name}");
    }
}

#[tokio::test]
async fn a_bootstrap_token_given_must_look_like_one() {
    for b in backends().await {
        assert!(
            matches!(
                b.store.bootstrap(Some("secret".into()), 1).await,
                Err(StoreError::Conflict(_))
            ),
            "{}",
            b.name
        );
        let given = format!("lt_{}", "0f".repeat(32));
        let t = b
            .store
            .bootstrap(Some(given.clone()), 1)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.token, given);
        assert!(
            b.store.authenticate(&given).await.unwrap().is_some(),
            "{}",
            b.name
        );
    }
}

/// Opening a store applies its migrations once; opening it again (another instance) finds
/// nothing to do and the data intact.
#[tokio::test]
async fn reopening_a_store_keeps_its_data_and_migrates_nothing() {
    let rows = corpus("ws", 20, 9);
    for b in backends_with(&rows, 20).await {
        let again = match b.store.kind() {
            BackendKind::Sqlite => Store::open(b.store.path().unwrap()).unwrap(),
            BackendKind::Postgres => {
                let schema = b._schema.as_ref().unwrap();
                Store::open_postgres(schema.url()).await.unwrap()
            }
        };
        assert_eq!(
            recent(&again, "ws", &UsageFilter::default(), 100)
                .await
                .len(),
            20,
            "{}",
            b.name
        );
    }
}

#[tokio::test]
async fn instances_starting_at_once_on_an_empty_database_all_come_up_and_migrate_once() {
    let dir = tempfile::tempdir().unwrap();
    let schema = PgSchema::create().await.unwrap();
    let opens = (0..4).map(|_| {
        let url = schema.url().to_string();
        tokio::spawn(async move { Store::open_postgres(&url).await })
    });
    let path = dir.path().join("laptime.db");
    let sqlite_opens: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || Store::open(&path))
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().unwrap());
    }
    for open in sqlite_opens {
        stores.push(open.join().unwrap().unwrap());
    }
    for s in &stores {
        assert_eq!(
            s.schema_version().await.unwrap(),
            s.known_schema_version(),
            "{:?}",
            s.kind()
        );
    }
    // Each version applied once: one row per version in the migrations table.
    let config: tokio_postgres::Config = schema.url().parse().unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let rows: i64 = client
        .query_one("SELECT count(*) FROM laptime_schema", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(rows, stores[0].known_schema_version());
}

#[tokio::test]
async fn a_store_migrated_by_a_newer_laptime_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = Store::open_dir(dir.path()).unwrap();
    let newer = sqlite.known_schema_version() + 1;
    let conn = rusqlite::Connection::open(sqlite.path().unwrap()).unwrap();
    conn.pragma_update(None, "user_version", newer).unwrap();
    let refused = Store::open_dir(dir.path()).unwrap_err();
    assert!(matches!(refused, StoreError::SchemaTooNew { found, .. } if found == newer));
    assert!(
        refused.to_string().contains("newer laptime migrated it"),
        "{refused}"
    );

    let schema = PgSchema::create().await.unwrap();
    let pg = Store::open_postgres(schema.url()).await.unwrap();
    let newer = pg.known_schema_version() + 1;
    let config: tokio_postgres::Config = schema.url().parse().unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    client
        .execute(
            "INSERT INTO laptime_schema (version) VALUES ($1)",
            &[&newer],
        )
        .await
        .unwrap();
    let refused = Store::open_postgres(schema.url()).await.unwrap_err();
    assert!(matches!(refused, StoreError::SchemaTooNew { found, .. } if found == newer));
}

/// Rollup rows are rewritten by the batches of their minute (and of a folded hour, by those of
/// its late records): on PostgreSQL the tiers' pages keep room for those rewrites (HOT updates,
/// pruned in place), the hour tier half, the minute tier 15 %.
#[tokio::test]
async fn the_postgres_rollup_tiers_keep_room_on_their_pages_for_rewrites() {
    let schema = PgSchema::create().await.unwrap();
    let _pg = Store::open_postgres(schema.url()).await.unwrap();
    let config: tokio_postgres::Config = schema.url().parse().unwrap();
    let (client, conn) = config.connect(tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    let mut options = Vec::new();
    for table in ["rollups_hourly", "rollups"] {
        let row = client
            .query_one(
                "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = to_regclass($1::text)",
                &[&table],
            )
            .await
            .unwrap();
        options.push(row.get::<_, Vec<String>>(0));
    }
    assert_eq!(
        options,
        [
            vec!["fillfactor=50".to_string()],
            vec!["fillfactor=85".to_string()]
        ]
    );
}

/// Each instance's heartbeat is one row, replaced by its next one; a reader asks for the ones
/// written since a moment (older ones are instances that are gone), a clean shutdown removes
/// the row, and rows long stale are deleted by the next write.
#[tokio::test]
async fn heartbeats_replace_each_other_and_old_ones_are_left_out_then_forgotten() {
    use laptime_core::fleet::{ChannelInFlight, Heartbeat};
    let beat = |instance: &str, in_flight: u32, at_us: i64| Heartbeat {
        instance: instance.into(),
        in_flight,
        channels: vec![
            ChannelInFlight {
                channel: "sim".into(),
                in_flight,
            },
            ChannelInFlight {
                channel: "other".into(),
                in_flight: 0,
            },
        ],
        at_us,
    };
    for b in backends().await {
        let (name, s) = (b.name, &b.store);
        s.put_heartbeat(beat("b:1", 2, BASE)).await.unwrap();
        s.put_heartbeat(beat("a:1", 1, BASE)).await.unwrap();
        s.put_heartbeat(beat("a:1", 7, BASE + 1_000_000))
            .await
            .unwrap();
        assert_eq!(
            s.heartbeats_since(BASE).await.unwrap(),
            [beat("a:1", 7, BASE + 1_000_000), beat("b:1", 2, BASE)],
            "{name}"
        );
        assert_eq!(
            s.heartbeats_since(BASE + 1).await.unwrap(),
            [beat("a:1", 7, BASE + 1_000_000)],
            "{name}: b's beat is older than asked"
        );
        s.forget_heartbeat("a:1").await.unwrap();
        assert_eq!(
            s.heartbeats_since(BASE).await.unwrap(),
            [beat("b:1", 2, BASE)],
            "{name}"
        );
        // A write an hour and more later deletes the rows of instances long gone.
        let later = BASE + laptime_store::instances::FORGET_AFTER_US + 1;
        s.put_heartbeat(beat("c:1", 0, later)).await.unwrap();
        assert_eq!(
            s.heartbeats_since(0).await.unwrap(),
            [beat("c:1", 0, later)],
            "{name}"
        );
    }
}
