//! The recorder: the request path hands finished records to a bounded queue and moves on; one
//! writer thread drains the queue in batches, one transaction per batch. The same transaction
//! folds the batch into the per-minute rollups ([`crate::rollups`]), so the usage API never sees
//! rows without their rollups or the other way round.
//!
//! The choice: the request path must never wait on the store, so a full queue drops the record
//! and counts the drop (exposed as a metric) rather than applying back-pressure to live traffic.
//! Batching comes from draining whatever is queued when the writer wakes, and the writer starts
//! at most one transaction per [`MIN_WRITE_INTERVAL`]: under load it sleeps out the rest of the
//! interval (senders do not wake a sleeping thread) and then writes everything queued, instead of
//! waking and committing once per request. Shutdown sends a stop message behind every queued
//! record and waits for the writer to flush them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use laptime_core::timeline::RequestRecord;
use tokio::sync::mpsc;

use crate::{records, Result, Store};

enum Msg {
    Record(Box<RequestRecord>),
    Stop(std::sync::mpsc::Sender<()>),
}

/// Counters the metrics endpoint exposes.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub written: AtomicU64,
    pub dropped: AtomicU64,
    pub failed: AtomicU64,
    pub batches: AtomicU64,
    /// Duration of the last batch write, microseconds.
    pub last_batch_us: AtomicU64,
    /// Sum of every batch write's duration, microseconds.
    pub batch_us_total: AtomicU64,
    /// The longest batch write so far, microseconds: how long the queue must absorb arrivals.
    pub max_batch_us: AtomicU64,
}

/// The request path's handle. Cheap to clone; `record` never blocks.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Msg>,
    stats: Arc<RecorderStats>,
    capacity: usize,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// Owns the writer thread; `shutdown` drains and joins it.
pub struct RecorderTask {
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for RecorderTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecorderTask")
    }
}

/// The most records one transaction writes. Larger batches share each commit, each rollup
/// upsert and each touched index page among more records (measured at 1M rows: 512 → 12k,
/// 2048 → 19k, 4096 → 24k records/s). 8192 was faster still, but its longest batch (~560 ms)
/// would fill the gateway's default 10,000-record queue at 20k records/s; 4096 stays near
/// 350 ms.
const MAX_BATCH: usize = 4096;

/// The shortest time between two batch transactions. An idle gateway's record is written at
/// once; a busy one's waits at most this long, and each commit (its WAL writes, its rollup
/// upserts, its wake-up) is shared by every record of the interval.
const MIN_WRITE_INTERVAL: Duration = Duration::from_millis(5);

/// The writer's page cache (negative: KiB). It fills as the store grows and is never given
/// back, so it is the largest part of the gateway's resident memory: 64 MiB looked like a leak
/// (RSS +0.9 KB per request up to ~80 MB). 16 MiB bounds it; the recorder stays far above the
/// gateway's request rate (`usage_load --rows 1000000`: 64 MiB 21.0k, 16 MiB 15.0k, 8 MiB
/// 17.3k records/s, measured while another build shared the 2 cores, so within noise of each
/// other).
const WRITER_CACHE_KIB: i64 = 16 * 1024;

impl Recorder {
    /// Starts the writer on its own thread (SQLite is blocking) with a queue of `capacity`.
    pub fn start(store: &Store, capacity: usize) -> Result<(Recorder, RecorderTask)> {
        let mut conn = store.open_connection()?;
        conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
        let (tx, mut rx) = mpsc::channel::<Msg>(capacity.max(1));
        let stats = Arc::new(RecorderStats::default());
        let writer_stats = stats.clone();
        let thread = std::thread::Builder::new()
            .name("laptime-recorder".into())
            .spawn(move || {
                let mut batch: Vec<RequestRecord> = Vec::with_capacity(MAX_BATCH);
                let mut stop: Option<std::sync::mpsc::Sender<()>> = None;
                let mut last_write: Option<tokio::time::Instant> = None;
                while let Some(first) = rx.blocking_recv() {
                    if let Some(wait) = last_write
                        .map(|at| MIN_WRITE_INTERVAL.saturating_sub(at.elapsed()))
                        .filter(|w| !w.is_zero())
                    {
                        std::thread::sleep(wait);
                    }
                    let mut next = Some(first);
                    while let Some(msg) = next.take() {
                        match msg {
                            Msg::Record(r) => batch.push(*r),
                            Msg::Stop(ack) => stop = Some(ack),
                        }
                        if batch.len() < MAX_BATCH && stop.is_none() {
                            next = rx.try_recv().ok();
                        }
                    }
                    last_write = Some(tokio::time::Instant::now());
                    write(&mut conn, &mut batch, &writer_stats);
                    if let Some(ack) = stop.take() {
                        let _ = ack.send(());
                        break;
                    }
                }
            })?;
        Ok((
            Recorder {
                tx,
                stats,
                capacity,
            },
            RecorderTask {
                thread: Some(thread),
            },
        ))
    }

    /// Queues a record; a full queue drops it and counts the drop. Never waits.
    pub fn record(&self, record: RequestRecord) -> bool {
        match self.try_record(Box::new(record)) {
            Ok(()) => true,
            Err(_) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("recorder queue full or closed; record dropped");
                false
            }
        }
    }

    /// Queues a record, or hands it back when the queue is full or closed, without counting a
    /// drop: for callers that can afford to wait and retry (load tools, imports). The request
    /// path uses [`Recorder::record`]. Never waits.
    pub fn try_record(
        &self,
        record: Box<RequestRecord>,
    ) -> std::result::Result<(), Box<RequestRecord>> {
        match self.tx.try_send(Msg::Record(record)) {
            Ok(()) => Ok(()),
            Err(e) => match e.into_inner() {
                Msg::Record(r) => Err(r),
                // Only a record was sent, so only a record can come back.
                Msg::Stop(_) => Ok(()),
            },
        }
    }

    pub fn stats(&self) -> &RecorderStats {
        &self.stats
    }

    /// Records waiting to be written.
    pub fn queue_depth(&self) -> usize {
        self.capacity.saturating_sub(self.tx.capacity())
    }

    /// Flushes everything queued so far and stops the writer; waits at most `timeout` for the
    /// flush. The wait runs on a blocking thread, which also keeps paused-time tests from
    /// auto-advancing past it.
    pub async fn shutdown(&self, task: RecorderTask, timeout: Duration) -> bool {
        let tx = self.tx.clone();
        let flushed = tokio::task::spawn_blocking(move || {
            let (ack_tx, ack_rx) = std::sync::mpsc::channel();
            tx.blocking_send(Msg::Stop(ack_tx)).is_ok() && ack_rx.recv_timeout(timeout).is_ok()
        })
        .await
        .unwrap_or(false);
        drop(task);
        flushed
    }
}

impl Drop for RecorderTask {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            // The writer exits after the stop message or when every sender is gone.
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

fn write(conn: &mut rusqlite::Connection, batch: &mut Vec<RequestRecord>, stats: &RecorderStats) {
    if batch.is_empty() {
        return;
    }
    let started = tokio::time::Instant::now();
    match records::insert_batch(conn, batch) {
        Ok(()) => {
            stats
                .written
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        Err(e) => {
            stats
                .failed
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            tracing::error!(error = %e, records = batch.len(), "writing a record batch failed");
        }
    }
    stats.batches.fetch_add(1, Ordering::Relaxed);
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    stats.last_batch_us.store(us, Ordering::Relaxed);
    stats.batch_us_total.fetch_add(us, Ordering::Relaxed);
    stats.max_batch_us.fetch_max(us, Ordering::Relaxed);
    batch.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;

    #[tokio::test]
    async fn shutdown_flushes_every_queued_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 1000).unwrap();
        for i in 0..300 {
            assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
        }
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        let n: i64 = store
            .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(n, 300);
        assert_eq!(rec.stats().written.load(Ordering::Relaxed), 300);
        assert!(rec.stats().batches.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        // Hold the database's write lock so the writer stalls and the queue fills.
        let blocker = store.connect().unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (rec, task) = Recorder::start(&store, 4).unwrap();
        let accepted = (0..50)
            .filter(|i| rec.record(sample(&format!("r{i}"), "ws", *i)))
            .count();
        assert!(accepted < 50);
        assert_eq!(
            rec.stats().dropped.load(Ordering::Relaxed),
            (50 - accepted) as u64
        );
        blocker.execute_batch("COMMIT").unwrap();
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn try_record_hands_a_record_back_when_full_without_counting_a_drop() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let blocker = store.connect().unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        let (rec, task) = Recorder::start(&store, 2).unwrap();
        let mut refused = None;
        let mut accepted = 0;
        for i in 0..50 {
            match rec.try_record(Box::new(sample(&format!("r{i}"), "ws", i))) {
                Ok(()) => accepted += 1,
                Err(r) => {
                    refused = Some(r);
                    break;
                }
            }
        }
        let refused = refused.expect("a queue of 2 behind a locked store fills up");
        assert_eq!(rec.stats().dropped.load(Ordering::Relaxed), 0);
        blocker.execute_batch("COMMIT").unwrap();
        // Waiting and retrying gets it in.
        let mut pending = refused;
        loop {
            match rec.try_record(pending) {
                Ok(()) => break,
                Err(r) => {
                    pending = r;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        assert_eq!(rec.stats().dropped.load(Ordering::Relaxed), 0);
        assert_eq!(rec.stats().failed.load(Ordering::Relaxed), 0);
        assert_eq!(rec.stats().written.load(Ordering::Relaxed), accepted + 1);
    }
}
