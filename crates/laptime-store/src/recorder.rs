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
//! waking and committing once per request; a batch still small then waits a little longer
//! ([`SMALL_BATCH_LINGER`]; on PostgreSQL, where every batch leaves old versions of the rollup
//! rows it rewrites, any batch that is not full, [`POSTGRES_LINGER`]). Shutdown sends a stop
//! message behind every queued record and waits for the writer to flush them.
//!
//! Nothing queued is lost to a failing store: a batch whose write fails is written again, after
//! a wait that doubles from [`RETRY_FIRST`] to [`RETRY_MAX`], with what queued meanwhile added to
//! it, until it succeeds; records are dropped only when the queue is full (counted by the
//! request path). The exceptions are an error retrying cannot mend and a store still failing
//! at shutdown: after [`GIVE_UP_AFTER`] tries the batch is given up, counted and logged.
//!
//! The writer also says how it is doing ([`Recorder::health`], for `/readyz`): whether its last
//! batch failed and why (a full disk is told apart from a lock or an I/O error, because the
//! operator's fix differs), whether a batch has been writing for longer than [`STALL_AFTER`],
//! and whether the queue is nearly full. Its log says the same without flooding: during an
//! outage every batch fails, so [`FailureLog`] writes the first failure, then at most one
//! summary per [`LOG_INTERVAL`], and one line when a batch succeeds again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use laptime_core::timeline::RequestRecord;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::{records, Result, Store, StoreError};

enum Msg {
    Record(Box<RequestRecord>),
    /// Write everything queued before this, then acknowledge and go on.
    Flush(std::sync::mpsc::Sender<()>),
    Stop(std::sync::mpsc::Sender<()>),
}

/// A batch writing for longer than this is a stalled store: the longest healthy batches
/// measured are ~560 ms for SQLite (one that checkpoints, at 8192 records; [`SQLITE_MAX_BATCH`]
/// keeps it near 350 ms) and 0.94–1.07 s for PostgreSQL (once each in 10 M-row loads of
/// [`POSTGRES_MAX_BATCH`]), while a database locked by another process holds a batch for the
/// whole busy timeout (5 s).
pub const STALL_AFTER: Duration = Duration::from_secs(2);

/// The queue counts as nearly full from this share of its capacity (per mille): past it, a
/// burst or a slow batch starts dropping records.
const NEARLY_FULL_PER_MILLE: usize = 900;

/// At most one log line per this interval about failing batches (and about dropped records).
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Why a batch write failed, as far as the operator's fix goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteFailure {
    /// `SQLITE_FULL`: no room left on the disk (or under the database's page cap).
    DiskFull,
    /// `SQLITE_IOERR` and friends: the disk failed a read, a write or a sync.
    DiskIo,
    /// `SQLITE_BUSY` / `SQLITE_LOCKED`: another connection held the database for longer than
    /// the busy timeout.
    Locked,
    /// `SQLITE_READONLY`, `SQLITE_CANTOPEN`, `SQLITE_PERM`: the file cannot be written.
    NotWritable,
    /// PostgreSQL: the server cannot be reached, refused the connection, or is restarting.
    Unreachable,
    /// Anything else (a constraint, a corrupt file, a bug).
    Other,
}

impl WriteFailure {
    /// Classifies a store error by its SQLite result code or PostgreSQL SQLSTATE.
    pub fn of(e: &StoreError) -> WriteFailure {
        use rusqlite::ErrorCode as C;
        match e {
            StoreError::Io(_) => WriteFailure::DiskIo,
            StoreError::Postgres(e) => WriteFailure::of_postgres(e),
            StoreError::PoolTimeout(_) => WriteFailure::Unreachable,
            StoreError::Sqlite(e) => match e.sqlite_error_code() {
                Some(C::DiskFull) => WriteFailure::DiskFull,
                Some(C::SystemIoFailure) => WriteFailure::DiskIo,
                Some(C::DatabaseBusy | C::DatabaseLocked) => WriteFailure::Locked,
                Some(C::ReadOnly | C::CannotOpen | C::PermissionDenied) => {
                    WriteFailure::NotWritable
                }
                _ => WriteFailure::Other,
            },
            _ => WriteFailure::Other,
        }
    }

    /// A PostgreSQL error by its SQLSTATE class: 08 (connection), 57P0x (the server shutting
    /// down or starting), 53 (out of disk or memory), 40 (a serialisation failure or a
    /// deadlock: retrying mends it), 25006 (a read-only server). No code at all is a
    /// connection that broke.
    fn of_postgres(e: &tokio_postgres::Error) -> WriteFailure {
        let Some(code) = e.code().map(|c| c.code()) else {
            return WriteFailure::Unreachable;
        };
        match code {
            c if c.starts_with("08") || c.starts_with("57P") => WriteFailure::Unreachable,
            "53100" => WriteFailure::DiskFull,
            c if c.starts_with("40") => WriteFailure::Locked,
            "25006" | "42501" => WriteFailure::NotWritable,
            _ => WriteFailure::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            WriteFailure::Unreachable => "store unreachable",
            WriteFailure::DiskFull => "disk full",
            WriteFailure::DiskIo => "disk I/O error",
            WriteFailure::Locked => "store locked",
            WriteFailure::NotWritable => "store not writable",
            WriteFailure::Other => "store write failed",
        }
    }
}

/// How the recorder is doing, worst first: what `/readyz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecorderHealth {
    /// Writing, and the last batch succeeded (or none was written yet).
    Ready,
    /// The writer thread is gone (stopped, or it died): nothing more will be written.
    Stopped,
    /// A batch has been writing for `running` (longer than [`STALL_AFTER`]).
    Stalled { running: Duration },
    /// The last batch failed, and none has succeeded since.
    Failing {
        failure: WriteFailure,
        /// The database's own words.
        error: String,
    },
    /// The queue holds `depth` of its `capacity` records: close to dropping.
    QueueNearlyFull { depth: usize, capacity: usize },
}

impl RecorderHealth {
    pub fn is_ready(&self) -> bool {
        *self == RecorderHealth::Ready
    }
}

impl std::fmt::Display for RecorderHealth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecorderHealth::Ready => f.write_str("ready"),
            RecorderHealth::Stopped => f.write_str("recorder stopped"),
            RecorderHealth::Stalled { running } => write!(
                f,
                "store stalled: a record batch has been writing for {:.1} s",
                running.as_secs_f64()
            ),
            RecorderHealth::Failing { failure, error } => write!(
                f,
                "{}: the last record batch failed ({error})",
                failure.as_str()
            ),
            RecorderHealth::QueueNearlyFull { depth, capacity } => {
                write!(f, "recorder queue nearly full: {depth} of {capacity}")
            }
        }
    }
}

/// What the writer thread tells the health check; locked once at the start and once at the end
/// of a batch, and by `/readyz`.
#[derive(Debug, Default)]
struct WriterState {
    /// When the batch being written started.
    batch_started: Option<Instant>,
    /// The last batch's failure, until a batch succeeds.
    last_failure: Option<(WriteFailure, String)>,
    /// The writer has stopped (after a shutdown's flush).
    stopped: bool,
}

/// Counters the metrics endpoint exposes.
#[derive(Debug, Default)]
pub struct RecorderStats {
    pub written: AtomicU64,
    /// Records the request path could not queue: `dropped_queue_full + dropped_stopped`.
    pub dropped: AtomicU64,
    /// ... because the queue was full (the store is slower than the traffic, or failing for
    /// longer than the queue holds).
    pub dropped_queue_full: AtomicU64,
    /// ... because the recorder had stopped (a record finished after shutdown's flush).
    pub dropped_stopped: AtomicU64,
    /// Records in batch writes that failed (a batch is written again until it succeeds, so a
    /// record counts once per failed try).
    pub failed: AtomicU64,
    /// Records given up after their batch kept failing: at shutdown, or on an error that
    /// retrying cannot mend ([`WriteFailure::Other`], [`GIVE_UP_AFTER`] tries). Never stored.
    pub given_up: AtomicU64,
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
    state: Arc<Mutex<WriterState>>,
    /// Rate-limits the request path's "record dropped" warning (see [`Recorder::record`]).
    drop_log: Arc<Mutex<FailureLog>>,
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

/// The most records one SQLite transaction writes. Larger batches share each commit, each
/// rollup upsert and each touched index page among more records (measured at 1M rows: 512 →
/// 12k, 2048 → 19k, 4096 → 24k records/s). 8192 was faster still, but its longest batch
/// (~560 ms, one that checkpoints) would fill a 10,000-record queue at 20k records/s; 4096
/// stays near 350 ms.
const SQLITE_MAX_BATCH: usize = 4096;

/// The most records one PostgreSQL transaction writes. Each batch rewrites the hour-tier
/// rollups it touches and pays its round trips once, so half as many batches of twice the size
/// write more per second (about 13 % in alternating `usage_load` runs: the README's sizing
/// section). Its longest batch measured 410–640 ms (936 ms once in 10 M rows), which the
/// default queue of 20,000 records takes in at 20k records/s.
const POSTGRES_MAX_BATCH: usize = 8192;

/// The most records one batch of `store`'s recorder holds: what the writer may hold beside a
/// full queue.
pub fn max_batch(store: &Store) -> usize {
    Pacing::of(store).max_batch
}

/// When the writer starts a batch's transaction, by store.
#[derive(Debug, Clone, Copy)]
struct Pacing {
    max_batch: usize,
    /// A batch smaller than this waits up to `linger` after the last transaction; a larger one
    /// [`MIN_WRITE_INTERVAL`].
    small_batch: usize,
    linger: Duration,
}

impl Pacing {
    fn of(store: &Store) -> Pacing {
        match store.postgres() {
            Some(_) => Pacing {
                max_batch: POSTGRES_MAX_BATCH,
                small_batch: POSTGRES_MAX_BATCH,
                linger: POSTGRES_LINGER,
            },
            None => Pacing {
                max_batch: SQLITE_MAX_BATCH,
                small_batch: SMALL_BATCH,
                linger: SMALL_BATCH_LINGER,
            },
        }
    }

    /// Gathers what arrives into `batch` until the transaction may start: [`MIN_WRITE_INTERVAL`]
    /// after the `last` one began, `linger` for a small batch, at once for a full batch, a
    /// flush or a stop (they wait for no one).
    fn gather(
        &self,
        last: Instant,
        rx: &mut mpsc::Receiver<Msg>,
        batch: &mut Vec<RequestRecord>,
        flushed: &mut Vec<std::sync::mpsc::Sender<()>>,
        stop: &mut Option<std::sync::mpsc::Sender<()>>,
    ) {
        loop {
            top_up(rx, (&mut *batch, self.max_batch), flushed, stop);
            if stop.is_some() || !flushed.is_empty() || batch.len() >= self.max_batch {
                return;
            }
            let until = match batch.len() + rx.len() < self.small_batch {
                true => self.linger,
                false => MIN_WRITE_INTERVAL,
            };
            let Some(left) = until.checked_sub(last.elapsed()).filter(|d| !d.is_zero()) else {
                return;
            };
            std::thread::sleep(left.min(LINGER_STEP));
        }
    }
}

/// A failed batch is written again after this, doubling with each failure up to
/// [`RETRY_MAX`]: the store is not hammered, and a lock held by another process (SQLite's busy
/// timeout is 5 s per try) or a full disk the operator is freeing loses nothing while the queue
/// holds the records that arrive meanwhile.
pub const RETRY_FIRST: Duration = Duration::from_millis(100);
pub const RETRY_MAX: Duration = Duration::from_secs(2);

/// Tries of a batch that fails for a reason retrying cannot mend ([`WriteFailure::Other`]: a
/// constraint, a corrupt file), and of a failing batch at shutdown, before it is given up.
pub const GIVE_UP_AFTER: u32 = 3;

/// The shortest time between two batch transactions. An idle gateway's record is written at
/// once; a busy one's waits at most this long, and each commit (its WAL writes, its rollup
/// upserts, its wake-up) is shared by every record of the interval.
const MIN_WRITE_INTERVAL: Duration = Duration::from_millis(5);

/// A SQLite batch smaller than this after [`MIN_WRITE_INTERVAL`] waits on, up to
/// [`SMALL_BATCH_LINGER`] after the last transaction, so that one commit serves more records.
/// Measured on the gateway (`benchmarks/compare-builds`): one request at a time (about 3,000
/// a second) cost 22-26 % less CPU per request with 20 ms between transactions than with
/// 5 ms, and paced streams 12-15 % less; but fast streams at 32 connections (12,000 a second,
/// about 60 records per 5 ms already) cost 1.5-5 % more in each of four rounds. Not profiled;
/// a likely cause is that their finished entries then stay in the in-flight registry long
/// enough for its journal to write them. So only small batches wait.
const SMALL_BATCH: usize = 32;

/// How long after the last transaction a small SQLite batch may wait. At a few hundred
/// requests a second each commit (its rollup read-merge-writes of both tiers, its WAL pages,
/// its locks) costs more than the records it carries: paced streams at 300 a second cost 6 %
/// less CPU per stream, gateway-wide, with 100 ms than with 20 ms (`benchmarks/compare-builds`,
/// 0.94 in each of three rounds). Records reach the store, and the log, at most this much
/// later; the request path does not wait either way.
const SMALL_BATCH_LINGER: Duration = Duration::from_millis(100);

/// How long after the last transaction a PostgreSQL batch that is not full waits. Each batch
/// rewrites every minute rollup row it touches (and, before schema v14, every hour row), and
/// PostgreSQL keeps each rewritten row's old version until a vacuum: at 1,000 records a second
/// in real time (`usage_load --rate 1000`, 120 s, v13), batches of 20 every 20 ms wrote 3,041 B
/// of WAL per record and left the minute tier at 195 B per request and the hour tier at 405 B
/// (2,831 live rows in 48.6 MB); batches every 250 ms wrote 1,770 B, and 135 B and 105 B.
/// Records reach the store, and the usage API, at most this much later; the request path does
/// not wait either way.
const POSTGRES_LINGER: Duration = Duration::from_millis(250);

/// How often a waiting batch looks at the queue: a flush or a stop ends the wait, and a full
/// batch is written.
const LINGER_STEP: Duration = Duration::from_millis(5);

/// The writer's page cache (negative: KiB). It fills as the store grows and is never given
/// back, so it is the largest part of the gateway's resident memory: 64 MiB looked like a leak
/// (RSS +0.9 KB per request up to ~80 MB). 16 MiB bounds it; the recorder stays far above the
/// gateway's request rate (`usage_load --rows 1000000`: 64 MiB 21.0k, 16 MiB 15.0k, 8 MiB
/// 17.3k records/s, measured while another build shared the 2 cores, so within noise of each
/// other).
const WRITER_CACHE_KIB: i64 = 16 * 1024;

/// Told every batch the writer is done with, on the writer thread, right after its transaction:
/// committed, or given up (counted in [`RecorderStats::given_up`]; a failed batch is written
/// again until it succeeds or is given up). The gateway's in-flight registry forgets its records then; the store does not know
/// the registry, so it is a callback.
pub type OnWritten = Box<dyn Fn(&[RequestRecord]) + Send>;

impl Recorder {
    /// Starts the writer on its own thread (SQLite is blocking) with a queue of `capacity`.
    pub fn start(store: &Store, capacity: usize) -> Result<(Recorder, RecorderTask)> {
        Recorder::start_with(store, capacity, None)
    }

    /// As [`Recorder::start`], telling `on_written` about every batch once it is done.
    pub fn start_with(
        store: &Store,
        capacity: usize,
        on_written: Option<OnWritten>,
    ) -> Result<(Recorder, RecorderTask)> {
        let mut conn = Writer::open(store)?;
        let pacing = Pacing::of(store);
        let max_batch = pacing.max_batch;
        let (tx, mut rx) = mpsc::channel::<Msg>(capacity.max(1));
        let stats = Arc::new(RecorderStats::default());
        let writer_stats = stats.clone();
        let state = Arc::new(Mutex::new(WriterState::default()));
        let writer_state = state.clone();
        // The writer logs where the recorder was started: the global subscriber, or a test's.
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let thread = std::thread::Builder::new()
            .name("laptime-recorder".into())
            .spawn(move || {
                let _log = tracing::dispatcher::set_default(&dispatch);
                let mut batch: Vec<RequestRecord> = Vec::with_capacity(max_batch);
                let mut stop: Option<std::sync::mpsc::Sender<()>> = None;
                let mut flushed: Vec<std::sync::mpsc::Sender<()>> = Vec::new();
                let mut last_write: Option<Instant> = None;
                let mut log = FailureLog::new(LOG_INTERVAL);
                while let Some(first) = rx.blocking_recv() {
                    match first {
                        Msg::Record(r) => batch.push(*r),
                        Msg::Flush(ack) => flushed.push(ack),
                        Msg::Stop(ack) => stop = Some(ack),
                    }
                    match last_write {
                        Some(at) => pacing.gather(at, &mut rx, &mut batch, &mut flushed, &mut stop),
                        None => top_up(&mut rx, (&mut batch, max_batch), &mut flushed, &mut stop),
                    }
                    last_write = Some(Instant::now());
                    let mut tries = 0;
                    while let Err(failure) =
                        write(&mut conn, &batch, &writer_stats, &writer_state, &mut log)
                    {
                        tries += 1;
                        let mendless = failure == WriteFailure::Other || stop.is_some();
                        if mendless && tries >= GIVE_UP_AFTER {
                            give_up(&batch, failure, &writer_stats);
                            break;
                        }
                        std::thread::sleep(retry_wait(tries));
                        // What queued meanwhile joins the retry, so one commit writes it all
                        // when the store is back.
                        top_up(&mut rx, (&mut batch, max_batch), &mut flushed, &mut stop);
                    }
                    if let Some(told) = &on_written {
                        if !batch.is_empty() {
                            told(&batch);
                        }
                    }
                    batch.clear();
                    for ack in flushed.drain(..) {
                        let _ = ack.send(());
                    }
                    if let Some(ack) = stop.take() {
                        if let Ok(mut s) = writer_state.lock() {
                            s.stopped = true;
                        }
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
                state,
                drop_log: Arc::new(Mutex::new(FailureLog::new(LOG_INTERVAL))),
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
                let why = if self.tx.is_closed() {
                    &self.stats.dropped_stopped
                } else {
                    &self.stats.dropped_queue_full
                };
                why.fetch_add(1, Ordering::Relaxed);
                let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                // A full queue drops every request's record; one warning each would flood the
                // log exactly when the store is in trouble. `try_lock`: a contended warning is
                // left to the next drop, the request path never waits.
                if let Ok(mut log) = self.drop_log.try_lock() {
                    match log.failed(Instant::now(), 1) {
                        Some(LogLine::First) => tracing::warn!(
                            dropped_total = dropped,
                            "recorder queue full or closed; record dropped (further drops are summarised every {} s)",
                            LOG_INTERVAL.as_secs()
                        ),
                        Some(LogLine::Since { batches, over, .. }) => tracing::warn!(
                            dropped = batches,
                            dropped_total = dropped,
                            "recorder queue full or closed: {batches} records dropped in the last {:.0} s",
                            over.as_secs_f64()
                        ),
                        Some(LogLine::Recovered { .. }) | None => {}
                    }
                }
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
                Msg::Flush(_) | Msg::Stop(_) => Ok(()),
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

    /// How the writer is doing now (see [`RecorderHealth`]); never waits on the store.
    pub fn health(&self) -> RecorderHealth {
        if self.tx.is_closed() {
            return RecorderHealth::Stopped;
        }
        let (started, failure) = match self.state.lock() {
            Ok(s) if !s.stopped => (s.batch_started, s.last_failure.clone()),
            _ => return RecorderHealth::Stopped,
        };
        if let Some(running) = started.map(|at| at.elapsed()).filter(|r| *r > STALL_AFTER) {
            return RecorderHealth::Stalled { running };
        }
        if let Some((failure, error)) = failure {
            return RecorderHealth::Failing { failure, error };
        }
        let depth = self.queue_depth();
        if depth * 1000 >= self.capacity * NEARLY_FULL_PER_MILLE && depth > 0 {
            return RecorderHealth::QueueNearlyFull {
                depth,
                capacity: self.capacity,
            };
        }
        RecorderHealth::Ready
    }

    /// Writes everything queued so far without stopping the writer; waits at most `timeout`
    /// (a forced exit flushes what it can this way, and does not wait on a stalled store).
    pub async fn flush(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let (ack_tx, ack_rx) = std::sync::mpsc::channel();
        let sent = tokio::time::timeout_at(deadline, self.tx.send(Msg::Flush(ack_tx))).await;
        if !matches!(sent, Ok(Ok(()))) {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        // On a blocking thread, as in `shutdown`.
        tokio::task::spawn_blocking(move || ack_rx.recv_timeout(left).is_ok())
            .await
            .unwrap_or(false)
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

/// The wait before a failed batch's `tries`-th retry.
fn retry_wait(tries: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1 << tries.saturating_sub(1).min(16))
        .min(RETRY_MAX)
}

/// Takes what queued behind a failing batch into it, up to `max` records, and the flush and
/// stop requests among it (acknowledged once the batch is done); a stop ends the top-up, so a
/// shutdown is seen even while the store keeps failing.
fn top_up(
    rx: &mut mpsc::Receiver<Msg>,
    (batch, max): (&mut Vec<RequestRecord>, usize),
    flushed: &mut Vec<std::sync::mpsc::Sender<()>>,
    stop: &mut Option<std::sync::mpsc::Sender<()>>,
) {
    while batch.len() < max && stop.is_none() {
        match rx.try_recv() {
            Ok(Msg::Record(r)) => batch.push(*r),
            Ok(Msg::Flush(ack)) => flushed.push(ack),
            Ok(Msg::Stop(ack)) => *stop = Some(ack),
            Err(_) => break,
        }
    }
}

/// A batch that cannot be written: counted, and said once (the failure log already said why).
fn give_up(batch: &[RequestRecord], failure: WriteFailure, stats: &RecorderStats) {
    let n = batch.len() as u64;
    let total = stats.given_up.fetch_add(n, Ordering::Relaxed) + n;
    tracing::error!(
        records = n,
        given_up_total = total,
        failure = failure.as_str(),
        "a record batch was given up after {GIVE_UP_AFTER} failed writes; its records are not stored"
    );
}

/// The recorder's own connection to the store, on its own thread.
enum Writer {
    Sqlite(rusqlite::Connection, laptime_core::limit::Zone),
    /// A one-connection pool (it reconnects after the server restarts) on the writer's own
    /// runtime, so that writes never compete with the request path's tasks.
    Postgres {
        runtime: tokio::runtime::Runtime,
        pool: deadpool_postgres::Pool,
        partitions: crate::pg::records::Partitions,
        zone: laptime_core::limit::Zone,
        /// The hour before which the hour tier was whole when last read: a fold is due once
        /// [`FOLD_AFTER`] has passed since the end of that hour.
        folded_before: i64,
    },
}

/// How long after an hour ends the writer folds it into the hour tier
/// ([`crate::pg::rollups::fold_closed_hours`]): requests still running then (a long stream)
/// are folded into it by their own batch, as every late record is.
const FOLD_AFTER: Duration = Duration::from_secs(5 * 60);

impl Writer {
    fn open(store: &Store) -> Result<Writer> {
        let Some(pg) = store.postgres() else {
            let conn = store.open_connection()?;
            conn.pragma_update(None, "cache_size", -WRITER_CACHE_KIB)?;
            return Ok(Writer::Sqlite(conn, store.budget_zone().clone()));
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Writer::Postgres {
            runtime,
            pool: pg.writer_pool()?,
            partitions: crate::pg::records::Partitions::default(),
            zone: store.budget_zone().clone(),
            folded_before: i64::MIN,
        })
    }

    fn insert_batch(&mut self, batch: &[RequestRecord]) -> Result<()> {
        match self {
            Writer::Sqlite(conn, zone) => records::insert_batch(conn, batch, zone),
            Writer::Postgres {
                runtime,
                pool,
                partitions,
                zone,
                folded_before,
            } => runtime.block_on(async {
                let mut c = crate::pg::pooled(pool).await?;
                crate::pg::records::insert_batch(&mut c, partitions, batch, zone).await?;
                fold_closed_hours(&mut c, folded_before).await;
                Ok(())
            }),
        }
    }
}

/// Folds the next closed hour into the hour tier when one is due, after a batch is written. A
/// failure leaves the batch written and the fold to the first batch of the next hour (said
/// once): readers take the hour's minutes meanwhile, so nothing is wrong, only slower to read.
async fn fold_closed_hours(c: &mut deadpool_postgres::ClientWrapper, folded_before: &mut i64) {
    let now_us = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    let due = crate::rollups::floor_hour(now_us.saturating_sub(FOLD_AFTER.as_micros() as i64));
    if due <= *folded_before {
        return;
    }
    match crate::pg::rollups::fold_closed_hours(c, due).await {
        Ok(folded) => *folded_before = folded,
        Err(e) => {
            *folded_before = due;
            tracing::warn!(
                error = %e,
                "folding a closed hour into the hour tier failed; the next hour tries again"
            );
        }
    }
}

/// Writes `batch` in one transaction (the caller clears it); why it failed, if it did.
fn write(
    conn: &mut Writer,
    batch: &[RequestRecord],
    stats: &RecorderStats,
    state: &Mutex<WriterState>,
    log: &mut FailureLog,
) -> std::result::Result<(), WriteFailure> {
    if batch.is_empty() {
        return Ok(());
    }
    let started = Instant::now();
    if let Ok(mut s) = state.lock() {
        s.batch_started = Some(started);
    }
    let result = conn.insert_batch(batch);
    let now = Instant::now();
    let records = batch.len() as u64;
    match &result {
        Ok(()) => {
            stats.written.fetch_add(records, Ordering::Relaxed);
            if let Some(LogLine::Recovered {
                batches,
                records,
                over,
            }) = log.succeeded(now)
            {
                tracing::info!(
                    failed_batches = batches,
                    failed_records = records,
                    "record batches are written again, after {batches} failed batches ({records} records) over {:.1} s",
                    over.as_secs_f64()
                );
            }
        }
        Err(e) => {
            stats.failed.fetch_add(records, Ordering::Relaxed);
            let failure = WriteFailure::of(e).as_str();
            match log.failed(now, records) {
                Some(LogLine::First) => tracing::error!(
                    error = %e,
                    failure,
                    records,
                    "writing a record batch failed (further failures are summarised every {} s)",
                    LOG_INTERVAL.as_secs()
                ),
                Some(LogLine::Since {
                    batches,
                    records,
                    over,
                }) => tracing::error!(
                    error = %e,
                    failure,
                    failed_batches = batches,
                    failed_records = records,
                    "record batches still failing: {batches} batches ({records} records) failed in the last {:.0} s",
                    over.as_secs_f64()
                ),
                Some(LogLine::Recovered { .. }) | None => {}
            }
        }
    }
    let failure = result.as_ref().err().map(WriteFailure::of);
    if let Ok(mut s) = state.lock() {
        s.batch_started = None;
        s.last_failure = result.err().map(|e| (WriteFailure::of(&e), e.to_string()));
    }
    stats.batches.fetch_add(1, Ordering::Relaxed);
    let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
    stats.last_batch_us.store(us, Ordering::Relaxed);
    stats.batch_us_total.fetch_add(us, Ordering::Relaxed);
    stats.max_batch_us.fetch_max(us, Ordering::Relaxed);
    failure.map_or(Ok(()), Err)
}

/// One line of the rate-limited failure log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLine {
    /// The first failure since the last success (or ever): logged with its error.
    First,
    /// Failures since the previous line, `over` this long (at most one per interval).
    Since {
        batches: u64,
        records: u64,
        over: Duration,
    },
    /// The first success after failures: how many failed in all and for how long.
    Recovered {
        batches: u64,
        records: u64,
        over: Duration,
    },
}

/// Decides which failures are worth a log line: the first of an outage, then at most one summary
/// per `interval` with the counts since the previous line, and one line at recovery. Pure (times
/// are arguments), so its limits are unit-tested exactly.
#[derive(Debug)]
pub(crate) struct FailureLog {
    interval: Duration,
    outage: Option<Outage>,
}

#[derive(Debug)]
struct Outage {
    began: Instant,
    last_line: Instant,
    /// Everything that failed since `began`.
    batches: u64,
    records: u64,
    /// What failed since `last_line` (not in a line yet).
    pending_batches: u64,
    pending_records: u64,
}

impl FailureLog {
    pub(crate) fn new(interval: Duration) -> FailureLog {
        FailureLog {
            interval,
            outage: None,
        }
    }

    /// A failure (a batch of `records`) at `now`: the line to log, if any.
    pub(crate) fn failed(&mut self, now: Instant, records: u64) -> Option<LogLine> {
        let Some(o) = &mut self.outage else {
            self.outage = Some(Outage {
                began: now,
                last_line: now,
                batches: 1,
                records,
                pending_batches: 0,
                pending_records: 0,
            });
            return Some(LogLine::First);
        };
        o.batches += 1;
        o.records += records;
        o.pending_batches += 1;
        o.pending_records += records;
        let over = now.saturating_duration_since(o.last_line);
        if over < self.interval {
            return None;
        }
        let line = LogLine::Since {
            batches: o.pending_batches,
            records: o.pending_records,
            over,
        };
        o.last_line = now;
        o.pending_batches = 0;
        o.pending_records = 0;
        Some(line)
    }

    /// A success at `now`: a recovery line when failures came before it.
    pub(crate) fn succeeded(&mut self, now: Instant) -> Option<LogLine> {
        let o = self.outage.take()?;
        Some(LogLine::Recovered {
            batches: o.batches,
            records: o.records,
            over: now.saturating_duration_since(o.began),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;

    /// A pacing whose linger is an hour: only a full batch, a flush or a stop ends its wait.
    const HOUR_LINGER: Pacing = Pacing {
        max_batch: 4,
        small_batch: 4,
        linger: Duration::from_secs(3600),
    };

    /// Runs `gather` on its own thread after queueing `msgs`; what it gathered, once it returned
    /// (within 5 s, or `None`), and the messages it left queued.
    fn gathered(pacing: Pacing, msgs: Vec<Msg>) -> Option<(usize, usize, bool, usize)> {
        let (tx, mut rx) = mpsc::channel::<Msg>(16);
        for m in msgs {
            tx.try_send(m).ok().unwrap();
        }
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut batch, mut flushed, mut stop) = (Vec::new(), Vec::new(), None);
            pacing.gather(Instant::now(), &mut rx, &mut batch, &mut flushed, &mut stop);
            let _ = done.send((batch.len(), flushed.len(), stop.is_some(), rx.len()));
        });
        result.recv_timeout(Duration::from_secs(5)).ok()
    }

    fn record(i: i64) -> Msg {
        Msg::Record(Box::new(sample(&format!("r{i}"), "ws", i)))
    }

    #[test]
    fn a_waiting_batch_is_written_at_once_when_full_or_flushed_or_stopped() {
        // Full: four records of at most four; the fifth stays queued for the next batch.
        let full = gathered(HOUR_LINGER, (0..5).map(record).collect());
        assert_eq!(full, Some((4, 0, false, 1)));
        // A flush behind one record, and a stop behind two.
        let flush = gathered(
            HOUR_LINGER,
            vec![record(0), Msg::Flush(std::sync::mpsc::channel().0)],
        );
        assert_eq!(flush, Some((1, 1, false, 0)));
        let stop = gathered(
            HOUR_LINGER,
            vec![
                record(0),
                record(1),
                Msg::Stop(std::sync::mpsc::channel().0),
            ],
        );
        assert_eq!(stop, Some((2, 0, true, 0)));
        // Without any of them, the batch of one is still waiting.
        assert_eq!(gathered(HOUR_LINGER, vec![record(0)]), None);
    }

    #[test]
    fn a_batch_past_the_small_size_waits_only_the_shortest_interval() {
        let quick = Pacing {
            max_batch: 8,
            small_batch: 2,
            linger: Duration::from_secs(3600),
        };
        assert_eq!(
            gathered(quick, (0..3).map(record).collect()),
            Some((3, 0, false, 0))
        );
        // Below the small size, the same pacing waits on.
        assert_eq!(gathered(quick, vec![record(0)]), None);
    }

    #[tokio::test]
    async fn postgres_batches_linger_to_share_their_rollup_rewrites_and_sqlite_ones_do_not() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let pg = Pacing::of(&Store::open_postgres(schema.url()).await.unwrap());
        assert_eq!(pg.max_batch, POSTGRES_MAX_BATCH);
        assert_eq!(
            (pg.small_batch, pg.linger),
            (POSTGRES_MAX_BATCH, POSTGRES_LINGER)
        );
        let dir = tempfile::tempdir().unwrap();
        let sqlite = Pacing::of(&Store::open_dir(dir.path()).unwrap());
        assert_eq!(sqlite.max_batch, SQLITE_MAX_BATCH);
        assert_eq!(
            (sqlite.small_batch, sqlite.linger),
            (SMALL_BATCH, SMALL_BATCH_LINGER)
        );
    }

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
    async fn a_record_after_shutdown_is_dropped_as_recorder_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 10).unwrap();
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        for _ in 0..200 {
            if rec.tx.is_closed() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(!rec.record(sample("late", "ws", 1)));
        assert_eq!(rec.stats().dropped_stopped.load(Ordering::Relaxed), 1);
        assert_eq!(rec.stats().dropped_queue_full.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn every_written_batch_is_told_after_its_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let told: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
        let (seen, reader) = (told.clone(), store.clone());
        let on_written: OnWritten = Box::new(move |batch| {
            for r in batch {
                // Committed before the callback: the row is readable from another connection.
                let rows: i64 = reader
                    .with_conn(|c| {
                        Ok(c.query_row(
                            "SELECT count(*) FROM requests WHERE request_id = ?1",
                            [crate::stored_id::key(&r.request_id)],
                            |row| row.get(0),
                        )?)
                    })
                    .unwrap();
                seen.lock().unwrap().push((r.request_id.clone(), rows));
            }
        });
        let (rec, task) = Recorder::start_with(&store, 100, Some(on_written)).unwrap();
        for i in 0..20 {
            assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
        }
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        let told = told.lock().unwrap().clone();
        let want: Vec<(String, i64)> = (0..20).map(|i| (format!("r{i}"), 1)).collect();
        assert_eq!(told, want);
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
        assert_eq!(
            rec.stats().dropped_queue_full.load(Ordering::Relaxed),
            (50 - accepted) as u64,
            "each drop counted with its reason"
        );
        assert_eq!(rec.stats().dropped_stopped.load(Ordering::Relaxed), 0);
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

/// The writer's health and log against real SQLite files: a database locked by another
/// connection, a database that runs out of pages (`SQLITE_FULL`, as a full disk), a queue
/// behind a stalled writer.
#[cfg(test)]
mod health_tests {
    use super::*;
    use crate::records::tests::sample;

    fn failure_lines(log: &mut FailureLog, t0: Instant, every: Duration, n: u32) -> Vec<LogLine> {
        (1..=n)
            .filter_map(|i| log.failed(t0 + every * i, 3))
            .collect()
    }

    #[test]
    fn an_outage_logs_its_first_failure_then_one_summary_per_interval_then_its_recovery() {
        // One failed batch each 5 ms for 60 s: 12,000 failures.
        let every = Duration::from_millis(5);
        let t0 = Instant::now();
        let mut log = FailureLog::new(LOG_INTERVAL);
        let lines = failure_lines(&mut log, t0, every, 12_000);
        // The first at 5 ms, then one summary each 10 s after it: at 10.005 s … 50.005 s.
        assert_eq!(lines.len(), 6, "{lines:?}");
        assert_eq!(lines[0], LogLine::First);
        for line in &lines[1..] {
            assert_eq!(
                *line,
                LogLine::Since {
                    batches: 2000,
                    records: 6000,
                    over: LOG_INTERVAL
                }
            );
        }
        // The 1,999 failures after the last summary are in the recovery line's totals.
        let recovered = log.succeeded(t0 + Duration::from_secs(61));
        assert_eq!(
            recovered,
            Some(LogLine::Recovered {
                batches: 12_000,
                records: 36_000,
                over: Duration::from_secs(61) - every,
            })
        );
        // A success without failures before it logs nothing; the next outage starts afresh.
        assert_eq!(log.succeeded(t0 + Duration::from_secs(62)), None);
        assert_eq!(
            log.failed(t0 + Duration::from_secs(63), 1),
            Some(LogLine::First)
        );
        assert_eq!(log.failed(t0 + Duration::from_secs(64), 1), None);
    }

    /// Counts the recorder's log events by level.
    #[derive(Clone, Default)]
    struct Counter(Arc<Mutex<Vec<(tracing::Level, String)>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Counter {
        fn on_event(
            &self,
            event: &tracing::Event<'_>,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            struct Msg(String);
            impl tracing::field::Visit for Msg {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    if f.name() == "message" {
                        self.0 = format!("{v:?}");
                    }
                }
            }
            let mut m = Msg(String::new());
            event.record(&mut m);
            self.0
                .lock()
                .unwrap()
                .push((*event.metadata().level(), m.0));
        }
    }

    fn sql_count(store: &Store) -> i64 {
        store
            .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
            .unwrap()
    }

    /// Fills a page-capped store until a batch fails (then the writer keeps trying it, so a
    /// flush no longer completes); returns the next index.
    async fn fill_until_full(rec: &Recorder, from: i64) -> i64 {
        let mut i = from;
        loop {
            assert!(i < from + 20_000, "the capped store never filled up");
            for _ in 0..50 {
                assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
                i += 1;
            }
            if !rec.flush(Duration::from_millis(500)).await {
                return i;
            }
        }
    }

    fn load(a: &AtomicU64) -> u64 {
        a.load(Ordering::Relaxed)
    }

    #[tokio::test]
    async fn a_full_disk_keeps_every_record_reports_and_logs_once_then_writes_them_all() {
        let lines = Counter::default();
        let _log =
            tracing::subscriber::set_default(tracing_subscriber::layer::SubscriberExt::with(
                tracing_subscriber::registry(),
                lines.clone(),
            ));
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store.cap_pages(8).unwrap();
        let (rec, task) = Recorder::start(&store, 1000).unwrap();
        assert_eq!(rec.health(), RecorderHealth::Ready);
        let sent = fill_until_full(&rec, 0).await;
        let RecorderHealth::Failing { failure, error } = rec.health() else {
            panic!("{:?}", rec.health());
        };
        assert_eq!(failure, WriteFailure::DiskFull);
        assert!(error.contains("full"), "{error}");
        assert!(rec.health().to_string().starts_with("disk full:"));
        let errors = |l: &[(tracing::Level, String)]| {
            l.iter()
                .filter(|(lv, _)| *lv == tracing::Level::ERROR)
                .count()
        };
        let before = lines.0.lock().unwrap().clone();
        assert_eq!(errors(&before), 1, "{before:?}");
        // The store stays full for 3 s while 40 more records queue: the batch is tried again
        // (the waits' schedule is `retry_waits_double_up_to_their_cap`'s), nothing is dropped or
        // given up, and not one more line is logged.
        let tries = load(&rec.stats().batches);
        for k in 0..40 {
            assert!(rec.record(sample(&format!("again{k}"), "ws", sent + k)));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let retried = load(&rec.stats().batches) - tries;
        assert!(retried >= 1, "the failing batch was tried again");
        assert_eq!(
            (load(&rec.stats().dropped), load(&rec.stats().given_up)),
            (0, 0)
        );
        assert_eq!(*lines.0.lock().unwrap(), before);
        // Room again (rows deleted, as retention does): everything kept is written, health is
        // back, and one INFO line says how many tries failed.
        let written_before = load(&rec.stats().written);
        store
            .with_conn(|c| Ok(c.execute_batch("DELETE FROM requests")?))
            .unwrap();
        assert!(rec.flush(Duration::from_secs(10)).await);
        assert_eq!(rec.health(), RecorderHealth::Ready);
        let total = u64::try_from(sent).unwrap() + 40;
        assert_eq!(
            load(&rec.stats().written),
            total,
            "every record written once"
        );
        assert_eq!(
            u64::try_from(sql_count(&store)).unwrap(),
            total - written_before
        );
        // No error line after the first: the outage was said once (its recovery line is the
        // pure `FailureLog`'s, tested above).
        let seen = lines.0.lock().unwrap().clone();
        assert_eq!(errors(&seen), 1, "{seen:?}");
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        assert_eq!(rec.health(), RecorderHealth::Stopped);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_batch_failing_on_a_database_locked_past_its_busy_timeout_is_written_when_the_lock_goes(
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 1000).unwrap();
        let blocker = store.connect().unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        for i in 0..10 {
            assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
        }
        // The busy timeout (5 s) runs out: the batch (its first records, however many the
        // writer had taken) fails, and is kept.
        for _ in 0..300 {
            if load(&rec.stats().failed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(load(&rec.stats().failed) > 0, "no batch failed on the lock");
        for i in 10..20 {
            assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
        }
        blocker.execute_batch("COMMIT").unwrap();
        assert!(rec.flush(Duration::from_secs(15)).await);
        assert_eq!(sql_count(&store), 20, "every record, once");
        assert_eq!(load(&rec.stats().written), 20);
        assert_eq!(
            (load(&rec.stats().dropped), load(&rec.stats().given_up)),
            (0, 0)
        );
        assert_eq!(rec.health(), RecorderHealth::Ready);
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn a_batch_that_retrying_cannot_mend_is_given_up_after_three_tries_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 100).unwrap();
        assert!(rec.record(sample("first", "ws", 1)));
        assert!(rec.flush(Duration::from_secs(10)).await);
        // A table the batch writes into is gone: every try fails the same way.
        store
            .with_conn(|c| Ok(c.execute_batch("DROP TABLE rollups")?))
            .unwrap();
        assert!(rec.record(sample("second", "ws", 2)));
        assert!(rec.flush(Duration::from_secs(10)).await);
        assert_eq!(load(&rec.stats().given_up), 1);
        assert_eq!(load(&rec.stats().failed), u64::from(GIVE_UP_AFTER));
        assert_eq!(load(&rec.stats().written), 1);
        assert!(matches!(
            rec.health(),
            RecorderHealth::Failing {
                failure: WriteFailure::Other,
                ..
            }
        ));
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn a_store_still_failing_at_shutdown_gives_its_batch_up_instead_of_holding_the_exit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store.cap_pages(8).unwrap();
        let (rec, task) = Recorder::start(&store, 1000).unwrap();
        let sent = fill_until_full(&rec, 0).await;
        // A full disk is retried without end while running; at shutdown the batch is given up
        // after three tries, so the stop is acknowledged instead of never.
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
        let stats = rec.stats();
        assert_eq!(
            load(&stats.written) + load(&stats.given_up),
            u64::try_from(sent).unwrap(),
            "each record written or counted as given up"
        );
        assert!(load(&stats.given_up) > 0);
    }

    #[test]
    fn retry_waits_double_up_to_their_cap() {
        let waits: Vec<u128> = (1..=7).map(|t| retry_wait(t).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_batch_held_up_by_a_locked_database_is_a_stall_until_the_lock_goes() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 1000).unwrap();
        // Another connection holds the write lock (as another process would); the writer's
        // batch waits in SQLite's busy handler (5 s).
        let blocker = store.connect().unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        assert!(rec.record(sample("r1", "ws", 1)));
        let mut seen = rec.health();
        for _ in 0..90 {
            if matches!(seen, RecorderHealth::Stalled { .. }) {
                break;
            }
            assert_eq!(seen, RecorderHealth::Ready);
            tokio::time::sleep(Duration::from_millis(50)).await;
            seen = rec.health();
        }
        let RecorderHealth::Stalled { running } = seen else {
            panic!("no stall reported while the lock was held: {seen:?}");
        };
        assert!(running > STALL_AFTER);
        assert!(seen.to_string().starts_with("store stalled:"), "{seen}");
        blocker.execute_batch("COMMIT").unwrap();
        assert!(rec.flush(Duration::from_secs(10)).await);
        assert_eq!(rec.health(), RecorderHealth::Ready);
        assert_eq!(sql_count(&store), 1);
        assert_eq!(rec.stats().failed.load(Ordering::Relaxed), 0);
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
    }

    #[tokio::test]
    async fn a_queue_nearly_full_behind_a_locked_database_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let (rec, task) = Recorder::start(&store, 10).unwrap();
        let blocker = store.connect().unwrap();
        blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
        // The writer takes the first record into a batch that waits on the lock; the rest wait
        // in the queue.
        assert!(rec.record(sample("r0", "ws", 0)));
        while rec.queue_depth() > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 1..=8 {
            assert!(rec.record(sample(&format!("r{i}"), "ws", i)));
        }
        assert_eq!(
            rec.health(),
            RecorderHealth::Ready,
            "8 of 10 is not nearly full"
        );
        assert!(rec.record(sample("r9", "ws", 9)));
        assert_eq!(
            rec.health(),
            RecorderHealth::QueueNearlyFull {
                depth: 9,
                capacity: 10
            }
        );
        blocker.execute_batch("COMMIT").unwrap();
        assert!(rec.flush(Duration::from_secs(10)).await);
        assert_eq!(rec.health(), RecorderHealth::Ready);
        assert_eq!(sql_count(&store), 10);
        assert!(rec.shutdown(task, Duration::from_secs(10)).await);
    }
}
