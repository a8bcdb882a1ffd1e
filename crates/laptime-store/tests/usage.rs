#![expect(clippy::unwrap_used, reason = "tests fail loudly")]
//! The usage API's data side against a real SQLite store: rollups written by the recorder's
//! transactions answer exactly what the rows say, under every filter and grouping; newest-first
//! reads; retention.

use std::time::Duration;

use laptime_core::rollup::{Metric, Rollup};
use laptime_core::timeline::{Attempt, Hedge, Marks, Outcome, RequestRecord, RequestShape};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use laptime_store::recorder::Recorder;
use laptime_store::records::{self, delete_older_than_batched, insert_batch};
use laptime_store::usage::{recent_filtered, usage, GroupDim, UsageFilter};
use laptime_store::Store;
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
        }],
        hedge: Hedge::None,
        failover_count: 0,
        cached: false,
        shape: RequestShape::default(),
        region: None,
        trace_id: None,
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
                _ => {}
            }
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

fn store_with(records: &[RequestRecord], batch: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    for chunk in records.chunks(batch) {
        store.with_conn(|c| insert_batch(c, chunk)).unwrap();
    }
    (dir, store)
}

#[test]
fn usage_equals_a_rollup_of_the_matching_rows_under_every_filter_and_grouping() {
    let rows = corpus("ws", 600, 1);
    let (_dir, store) = store_with(&rows, 37);
    let all = |f: &UsageFilter, g: &[GroupDim]| {
        store
            .with_conn(|c| usage(c, "ws", BASE, BASE + 100 * MIN, f, g))
            .unwrap()
    };

    let got = all(&UsageFilter::default(), &[]);
    assert_eq!(got.total.requests, 600);
    assert!(got.total.agrees_with(&rollup_of(&rows)));
    assert!(got.groups.is_empty());
    assert!(got.total.errors > 0 && got.total.cache_hits > 0);
    assert!(got.total.stats(Metric::TtftMs).null_count > 0);

    // Grouped by model: one group per model, the missing model as None, most requests first.
    let by_model = all(&UsageFilter::default(), &[GroupDim::Model]);
    assert!(by_model.total.agrees_with(&got.total));
    assert_eq!(by_model.groups.len(), 4);
    for (key, r) in &by_model.groups {
        let [(GroupDim::Model, model)] = key.as_slice() else {
            panic!("{key:?}")
        };
        let want = rollup_of(rows.iter().filter(|x| x.model == *model));
        assert!(r.agrees_with(&want), "{model:?}");
    }
    assert!(by_model.groups.iter().any(|(k, _)| k[0].1.is_none()));
    assert!(by_model
        .groups
        .windows(2)
        .all(|w| w[0].1.requests >= w[1].1.requests));

    // Two dimensions; stream and status read as text.
    let two = all(
        &UsageFilter::default(),
        &[GroupDim::Stream, GroupDim::Status],
    );
    let sum: u64 = two.groups.iter().map(|(_, r)| r.requests).sum();
    assert_eq!(sum, 600);
    for (key, r) in &two.groups {
        let stream = key[0].1.as_deref() == Some("true");
        let status: u16 = key[1].1.as_deref().unwrap().parse().unwrap();
        let want = rollup_of(
            rows.iter()
                .filter(|x| x.stream == stream && x.status == status),
        );
        assert!(r.agrees_with(&want), "{key:?}");
    }

    // Filters, one at a time and combined.
    type Pred = fn(&RequestRecord) -> bool;
    let cases: Vec<(UsageFilter, Pred)> = vec![
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
        // An empty value asks for requests without one.
        (
            UsageFilter {
                group: Some(String::new()),
                ..UsageFilter::default()
            },
            |r| r.group.is_none(),
        ),
    ];
    for (filter, pred) in cases {
        let got = all(&filter, &[]);
        let want = rollup_of(rows.iter().filter(|r| pred(r)));
        assert!(want.requests > 0, "{filter:?} matches something");
        assert!(got.total.agrees_with(&want), "{filter:?}");
        let recent = store
            .with_conn(|c| recent_filtered(c, "ws", &filter, None, 1000))
            .unwrap();
        assert_eq!(recent.len() as u64, want.requests, "{filter:?}");
    }
}

#[test]
fn the_window_is_widened_to_whole_minutes() {
    let rows = [
        plain("a", "ws", BASE + MIN - 1, Some("m")),
        plain("b", "ws", BASE + MIN, Some("m")),
        plain("c", "ws", BASE + 2 * MIN - 1, Some("m")),
        plain("d", "ws", BASE + 2 * MIN, Some("m")),
    ];
    let (_dir, store) = store_with(&rows, 10);
    let q = |from: i64, to: i64| {
        store
            .with_conn(|c| usage(c, "ws", from, to, &UsageFilter::default(), &[]))
            .unwrap()
    };
    let inner = q(BASE + MIN + 30_000_000, BASE + MIN + 40_000_000);
    assert_eq!(
        (inner.window.from_us, inner.window.to_us),
        (BASE + MIN, BASE + 2 * MIN)
    );
    assert_eq!(inner.total.requests, 2, "b and c");
    assert_eq!(q(BASE + MIN, BASE + 2 * MIN).total.requests, 2);
    let wider = q(BASE + MIN, BASE + 2 * MIN + 1);
    assert_eq!(wider.window.to_us, BASE + 3 * MIN);
    assert_eq!(wider.total.requests, 3, "b, c and d");
    let empty = q(BASE + 10 * MIN, BASE + 11 * MIN);
    assert_eq!(empty.total.requests, 0);
    assert_eq!(empty.total.error_rate(), None);
    assert_eq!(empty.total.stats(Metric::LatencyMs).p50, None);
}

#[test]
fn usage_never_shows_another_workspace() {
    let mut rows = corpus("ws_a", 50, 2);
    rows.extend(corpus("ws_b", 30, 3));
    let mut orphan = plain("orphan", "ws_a", BASE, Some("m"));
    orphan.workspace_id = None;
    rows.push(orphan);
    let (_dir, store) = store_with(&rows, 16);
    let get = |ws: &str| {
        store
            .with_conn(|c| {
                usage(
                    c,
                    ws,
                    BASE,
                    BASE + 100 * MIN,
                    &UsageFilter::default(),
                    &[GroupDim::Model],
                )
            })
            .unwrap()
    };
    assert_eq!(get("ws_a").total.requests, 50);
    assert_eq!(get("ws_b").total.requests, 30);
    assert_eq!(get("ws_c").total.requests, 0);
    assert!(get("ws_c").groups.is_empty());
    assert!(store
        .with_conn(|c| recent_filtered(c, "ws_c", &UsageFilter::default(), None, 10))
        .unwrap()
        .is_empty());
}

#[test]
fn a_replaced_record_is_counted_once_with_its_new_values() {
    let first = plain("r1", "ws", BASE + 5, Some("a"));
    let (_dir, store) = store_with(std::slice::from_ref(&first), 10);
    let mut again = plain("r1", "ws", BASE + 6, Some("b"));
    again.outcome = Outcome::UpstreamError;
    again.classification = laptime_core::slow::Classification::Failed;
    again.attempts.push(again.attempts[0].clone());
    let other = plain("r2", "ws", BASE + 7, Some("a"));
    // The same id twice in one batch too: the last one wins.
    let mut twice = plain("r3", "ws", BASE + 8, Some("a"));
    let mut twice_again = twice.clone();
    twice_again.model = Some("c".into());
    twice.status = 201;
    store
        .with_conn(|c| insert_batch(c, &[again.clone(), other, twice, twice_again]))
        .unwrap();

    let got = store
        .with_conn(|c| {
            usage(
                c,
                "ws",
                BASE,
                BASE + MIN,
                &UsageFilter::default(),
                &[GroupDim::Model],
            )
        })
        .unwrap();
    assert_eq!(got.total.requests, 3);
    assert_eq!(got.total.errors, 1);
    let count = |m: &str| {
        got.groups
            .iter()
            .find(|(k, _)| k[0].1.as_deref() == Some(m))
            .map_or(0, |(_, r)| r.requests)
    };
    assert_eq!((count("a"), count("b"), count("c")), (1, 1, 1));
    let back = store.with_conn(|c| records::get(c, "ws", "r1")).unwrap();
    assert_eq!(back, Some(again));
    let attempts: i64 = store
        .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))?))
        .unwrap();
    assert_eq!(attempts, 2 + 1 + 1);
}

#[test]
fn recent_filtered_is_newest_first_within_the_window_and_filter() {
    let rows = corpus("ws", 300, 4);
    let (_dir, store) = store_with(&rows, 50);
    let newest = |pred: &dyn Fn(&RequestRecord) -> bool, limit: usize| {
        let mut v: Vec<_> = rows.iter().filter(|r| pred(r)).collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.created_at_us));
        v.into_iter()
            .take(limit)
            .map(|r| r.request_id.clone())
            .collect::<Vec<_>>()
    };
    let ids = |v: Vec<RequestRecord>| v.into_iter().map(|r| r.request_id).collect::<Vec<_>>();

    let plain_recent = store.with_conn(|c| records::recent(c, "ws", 20)).unwrap();
    assert_eq!(plain_recent[0].attempts.len(), rows[299].attempts.len());
    assert_eq!(ids(plain_recent), newest(&|_| true, 20));

    let window = (BASE + 5 * MIN, BASE + 9 * MIN);
    let in_window = |r: &RequestRecord| (window.0..window.1).contains(&r.created_at_us);
    let got = store
        .with_conn(|c| recent_filtered(c, "ws", &UsageFilter::default(), Some(window), 7))
        .unwrap();
    assert_eq!(ids(got), newest(&in_window, 7));

    let filter = UsageFilter {
        model: Some("o3-mini".into()),
        stream: Some(true),
        ..UsageFilter::default()
    };
    let got = store
        .with_conn(|c| recent_filtered(c, "ws", &filter, Some(window), 50))
        .unwrap();
    let want = newest(
        &|r| in_window(r) && r.model.as_deref() == Some("o3-mini") && r.stream,
        50,
    );
    assert!(!want.is_empty());
    assert_eq!(ids(got), want);

    let none = UsageFilter {
        model: Some(String::new()),
        ..UsageFilter::default()
    };
    let got = store
        .with_conn(|c| recent_filtered(c, "ws", &none, None, 500))
        .unwrap();
    assert_eq!(ids(got), newest(&|r| r.model.is_none(), 500));
}

#[test]
fn retention_deletes_rows_attempts_and_whole_minutes_of_rollups_in_batches() {
    let rows = corpus("ws", 120, 5); // about 14 minutes
    let (_dir, store) = store_with(&rows, 25);
    let cutoff = BASE + 4 * MIN + 30_000_000;
    let deleted = store
        .with_conn(|c| delete_older_than_batched(c, cutoff, 7))
        .unwrap();
    let old = rows.iter().filter(|r| r.created_at_us < cutoff).count();
    assert!(old > 7, "more than one batch");
    assert_eq!(deleted, old);

    let count = |sql: &str| -> i64 {
        store
            .with_conn(|c| Ok(c.query_row(sql, [], |r| r.get(0))?))
            .unwrap()
    };
    assert_eq!(count("SELECT count(*) FROM requests"), (120 - old) as i64);
    let attempts_left: usize = rows
        .iter()
        .filter(|r| r.created_at_us >= cutoff)
        .map(|r| r.attempts.len())
        .sum();
    assert_eq!(count("SELECT count(*) FROM attempts"), attempts_left as i64);
    // The minute holding the cutoff keeps its rollup; every earlier minute is gone.
    assert_eq!(count("SELECT min(minute_us) FROM rollups"), BASE + 4 * MIN);
    let got = store
        .with_conn(|c| usage(c, "ws", 0, BASE + 100 * MIN, &UsageFilter::default(), &[]))
        .unwrap();
    let want = rollup_of(rows.iter().filter(|r| r.created_at_us >= BASE + 4 * MIN));
    assert!(got.total.agrees_with(&want));

    // Nothing left to delete is not an error; the plain call deletes the rest.
    assert_eq!(
        store
            .with_conn(|c| delete_older_than_batched(c, cutoff, 7))
            .unwrap(),
        0
    );
    let rest = store
        .with_conn(|c| records::delete_older_than(c, i64::MAX))
        .unwrap();
    assert_eq!(rest, 120 - old);
    assert_eq!(count("SELECT count(*) FROM rollups"), 0);
}

#[tokio::test]
async fn the_recorder_keeps_rollups_in_step_with_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    let (rec, task) = Recorder::start(&store, 64).unwrap();
    let rows = corpus("ws", 1_000, 6);
    for r in rows.iter().cloned() {
        let mut pending = Box::new(r);
        while let Err(back) = rec.try_record(pending) {
            pending = back;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    assert!(rec.shutdown(task, Duration::from_secs(30)).await);
    let got = store
        .with_conn(|c| {
            usage(
                c,
                "ws",
                BASE,
                BASE + 200 * MIN,
                &UsageFilter::default(),
                &[GroupDim::Classification],
            )
        })
        .unwrap();
    assert!(got.total.agrees_with(&rollup_of(&rows)));
    assert_eq!(
        got.groups.iter().map(|(_, r)| r.requests).sum::<u64>(),
        1_000
    );
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
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_dir(dir.path()).unwrap();
    // Old rows for retention to chew through, in small batches.
    let old = corpus("ws", 3_000, 7);
    for chunk in old.chunks(500) {
        store.with_conn(|c| insert_batch(c, chunk)).unwrap();
    }
    let (rec, task) = Recorder::start(&store, 256).unwrap();
    let retention = {
        let store = store.clone();
        tokio::task::spawn_blocking(move || {
            store.with_conn(|c| delete_older_than_batched(c, BASE + 1_000 * MIN, 50))
        })
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
    assert_eq!(retention.await.unwrap().unwrap(), 3_000);
    assert!(rec.shutdown(task, Duration::from_secs(30)).await);
    assert_eq!(
        rec.stats()
            .failed
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    let got = store
        .with_conn(|c| usage(c, "ws", 0, i64::MAX / 2, &UsageFilter::default(), &[]))
        .unwrap();
    assert!(got.total.agrees_with(&rollup_of(&new)));
}
