//! What the in-flight registry costs a request, and what a journal snapshot costs its writer
//! thread.
//!
//! `request_with_registry`: one request's life as the request path lives it: the entry opened at
//! ingress, synced at the end of auth and routing, at the dispatch, the head and the win, the
//! head sent to the client, four first-time stream marks, the record built and handed over, and
//! the recorder's callback forgetting it. `request_without_registry` is the same without an
//! entry (every registry call a no-op), so the difference is the registry's share.
//! `snapshot`: what a snapshot of N entries does under the shard locks (copies `Arc`s);
//! `snapshot_and_write`: the journal writer's whole work for N entries in flight (snapshot,
//! JSON, temp file, rename).
//!
//! Run: `cargo bench -p laptime-proxy --bench inflight`. The allocation profiler shows
//! allocations per request.

#![expect(clippy::unwrap_used, reason = "a benchmark fails loudly")]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use divan::Bencher;
use laptime_core::slow::Thresholds;
use laptime_core::timeline::{Attempt, AttemptRole, Marks, Outcome};
use laptime_core::Dialect;
use laptime_proxy::inflight::{self, Inflight};
use laptime_proxy::record::{self, Ending, Pending};
use tokio::time::Instant;

#[global_allocator]
static ALLOC: divan::AllocProfiler = divan::AllocProfiler::system();

fn main() {
    divan::main();
}

fn ms(v: u64) -> Option<Duration> {
    Some(Duration::from_millis(v))
}

fn pending(i: usize) -> Pending {
    let mut p = Pending::new(
        Instant::now(),
        1_700_000_000_000_000,
        format!("req_0190d6a1b2c3{i:020x}"),
        Dialect::Chat,
    );
    p.region = Some("eu".into());
    p.trace_id = Some("0af7651916cd43dd8448eb211c80319c".into());
    p
}

/// What auth and routing fill in.
fn routed(p: &mut Pending) {
    p.workspace_id = Some("ws_8488dba03890c346".into());
    p.key_id = Some("key_1".into());
    p.model = Some("gpt-4.1-mini".into());
    p.group = Some("default".into());
    p.stream = true;
    p.marks.auth = ms(0);
    p.marks.body_read = ms(0);
    p.marks.distribution = ms(0);
}

/// One request through the phases that touch the registry.
fn one_request(reg: Option<&Arc<Inflight>>, i: usize, thresholds: &Thresholds) {
    let mut p = pending(i);
    p.inflight = reg.and_then(|r| r.open(&p));
    routed(&mut p);
    p.publish();
    p.publish();
    p.channel = Some("openai".into());
    p.provider = Some("openai".into());
    p.upstream_dialect = Some(Dialect::Chat);
    p.marks.upstream_start = ms(1);
    p.attempts.push(Attempt {
        channel: "openai".into(),
        role: AttemptRole::Primary,
        won: false,
        status: None,
        error_class: None,
        start: ms(1),
        headers: None,
        first_byte: None,
        end: None,
        connection: Default::default(),
        span_id: None,
    });
    p.publish();
    p.attempts[0].headers = ms(200);
    p.attempts[0].status = Some(200);
    p.publish();
    p.attempts[0].won = true;
    p.marks.upstream_headers = ms(200);
    p.publish();
    let mut stream = Marks::default();
    if let Some(s) = &p.inflight {
        s.answered(200);
        for (k, at) in [201, 202, 300, 400].into_iter().enumerate() {
            match k {
                0 => stream.first_byte = ms(at),
                1 => stream.first_event = ms(at),
                2 => stream.first_effective = ms(at),
                _ => stream.first_visible = ms(at),
            }
            s.stream_marks(&stream);
        }
    }
    let slot = p.inflight.take();
    let ending = Ending {
        status: 200,
        outcome: Outcome::Completed,
        error_class: None,
        timeout_kind: None,
        stream: None,
    };
    let record = record::build(
        p,
        ending,
        Duration::from_millis(500),
        (thresholds, &laptime_core::cost::PriceTable::EMPTY),
    );
    if let Some(s) = slot {
        let _handed = s.finished(&record);
    }
    if let Some(r) = reg {
        r.written(std::slice::from_ref(black_box(&record)));
    }
    black_box(record);
}

#[divan::bench]
fn request_with_registry(bencher: Bencher) {
    let reg = Inflight::new(100_000);
    let thresholds = Thresholds::default();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        one_request(Some(&reg), i, &thresholds);
    });
    assert!(reg.is_empty());
}

#[divan::bench]
fn request_without_registry(bencher: Bencher) {
    let thresholds = Thresholds::default();
    let mut i = 0;
    bencher.bench_local(|| {
        i += 1;
        one_request(None, i, &thresholds);
    });
}

/// A registry with `n` running entries, and their slots.
fn filled(n: usize) -> (Arc<Inflight>, Vec<inflight::Slot>) {
    let reg = Inflight::new(100_000);
    let slots = (0..n)
        .filter_map(|i| {
            let mut p = pending(i);
            routed(&mut p);
            let s = reg.open(&p);
            if let Some(s) = &s {
                s.sync(&p);
            }
            s
        })
        .collect();
    (reg, slots)
}

/// The part of a snapshot done under the shard locks (what a request may wait for).
#[divan::bench(args = [100, 1000])]
fn snapshot(bencher: Bencher, n: usize) {
    let (reg, slots) = filled(n);
    bencher.bench_local(|| black_box(reg.snapshot()));
    drop(slots);
}

#[divan::bench(args = [100, 1000])]
fn snapshot_and_write(bencher: Bencher, n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(inflight::JOURNAL_FILE);
    let (reg, slots) = filled(n);
    bencher.bench_local(|| {
        inflight::write_journal(&path, &reg.snapshot()).unwrap();
    });
    drop(slots);
}
