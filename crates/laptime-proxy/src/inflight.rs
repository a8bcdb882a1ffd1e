//! The in-flight registry: every request of this gateway process from ingress until the store
//! has committed its record, with what is known of it so far; and its journal, a snapshot on
//! disk beside the store that a restart after a crash turns into records.
//!
//! The request path touches the registry a handful of times per request (ingress, the end of
//! each phase, each attempt's dispatch and head, the commit to a stream, the first byte, event,
//! effective output and visible text, the end), each an O(1) update under the mutex of the
//! request's own entry, which its slot holds, never across I/O and never per SSE event; the
//! entries are found by id in one of [`SHARDS`] maps only to open, read and remove them. A
//! reader (the journal writer, the read-back API) holds each shard only to copy its entries'
//! `Arc`s; an update that meets a record still shared with such a snapshot copies it first.
//! Once finished, an entry holds the finished record until the recorder says the batch holding
//! it is done; only then is it forgotten, so a crash between the end of a request and the
//! commit of its record does not lose it.
//!
//! The journal is written by its own thread ([`JournalWriter`]), never by the request path:
//! every `[server] inflight_snapshot_ms` when something changed, it appends the entries that
//! changed and a line for each that left; now and then it is rewritten whole, to a temporary
//! file renamed over it. A crash mid-append leaves at most the last line torn, which a reader
//! skips; a crash mid-rewrite leaves the previous journal whole. It is not synced: it
//! covers the gateway process dying (killed, crashed, out of memory), not the machine losing
//! power. A request that starts and ends within one interval may never be in a snapshot, so a
//! crash in the few milliseconds before its record is committed still loses it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use laptime_core::slow::{self, Thresholds};
use laptime_core::timeline::{Marks, Outcome, RequestRecord};
use laptime_store::Store;
use serde::{Deserialize, Serialize};

use crate::record::Pending;

/// The journal's file name, in the store's directory.
pub const JOURNAL_FILE: &str = "inflight.journal";

/// How many mutexes the entries are spread over, so that serving threads rarely meet on one.
pub const SHARDS: usize = 16;

/// The status recorded for a request found in flight after a crash before any answer head
/// reached its client: the gateway failed it (the client saw its connection close).
pub const UNANSWERED_STATUS: u16 = 500;

/// The first line of a journal: what wrote it, so another format is never misread. Version 2
/// appends: a request's line may come again (the last one holds), and a `gone` line says it
/// left. A version-1 journal (one line per entry) reads the same way.
const JOURNAL_FORMAT: &str = "laptime-inflight-2";
const JOURNAL_FORMAT_V1: &str = "laptime-inflight-1";

/// Whether an entry's request is still running or only waits for its record's commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Running,
    /// Finished; its record is queued for the store, not committed yet.
    Finished,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Running => "running",
            State::Finished => "finished",
        }
    }
}

/// What is running at one moment: requests, and the streams among them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Running {
    pub requests: usize,
    pub streams: usize,
}

/// One request in the registry.
#[derive(Debug, Clone)]
pub enum Entry {
    /// The record so far: its marks as reached, no end marks, outcome `gateway_crashed` (what it
    /// would be recorded as if the process ended now); `answered` is the status sent to the
    /// client once a head was.
    Running {
        /// Shared with a snapshot being written (which then costs the next update a copy), so
        /// a snapshot holds a shard's lock only to count references.
        record: Arc<RequestRecord>,
        answered: Option<u16>,
    },
    Finished(Arc<RequestRecord>),
}

impl Entry {
    pub fn state(&self) -> State {
        match self {
            Entry::Running { .. } => State::Running,
            Entry::Finished(_) => State::Finished,
        }
    }

    pub fn record(&self) -> &RequestRecord {
        match self {
            Entry::Running { record, .. } => record,
            Entry::Finished(r) => r,
        }
    }

    /// The status the client got: absent while a running request has sent no head.
    pub fn status(&self) -> Option<u16> {
        match self {
            Entry::Running { answered, .. } => *answered,
            Entry::Finished(r) => Some(r.status),
        }
    }

    /// The record to store for this entry after a crash: a finished one as it ended; a running
    /// one `gateway_crashed`, with the marks it had and no end marks invented.
    pub fn into_record(self, thresholds: &Thresholds) -> RequestRecord {
        match self {
            Entry::Finished(r) => Arc::unwrap_or_clone(r),
            Entry::Running { record, answered } => {
                let mut record = Arc::unwrap_or_clone(record);
                record.outcome = Outcome::GatewayCrashed;
                record.status = answered.unwrap_or(UNANSWERED_STATUS);
                record.marks.upstream_done = None;
                record.marks.handler_done = None;
                // As `record::build` does for a finished request.
                let first_byte = record.marks.first_byte;
                if let Some(winner) = record.attempts.iter_mut().rev().find(|a| a.won) {
                    winner.first_byte = first_byte;
                }
                let (classification, flags) = slow::classify(
                    &record.marks,
                    record.tokens.output_for_speed(),
                    record.outcome,
                    thresholds,
                );
                record.classification = classification;
                record.flags = flags;
                record
            }
        }
    }
}

/// An entry, and the number of the change that made it what it is. No two changes of any
/// entries share a number, so the journal writer keeps the line of an entry whose number it has
/// seen instead of serialising it again.
#[derive(Debug)]
struct Tracked {
    entry: Entry,
    change: u64,
}

/// An entry's cell: its request's slot updates it under the cell's own lock, without finding
/// it in its shard (hashing the id and taking the shard's lock, half a dozen times a request).
/// Lock order: a shard, then a cell in it; a slot takes only its cell's.
type Cell = Arc<Mutex<Tracked>>;

type Shard = HashMap<String, Cell>;

fn lock_cell(cell: &Mutex<Tracked>) -> MutexGuard<'_, Tracked> {
    cell.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The registry of one gateway process (in [`crate::App`]). Bounded: past `capacity` entries a
/// new request is served but not tracked (counted in [`Inflight::untracked`]).
pub struct Inflight {
    shards: Box<[Mutex<Shard>]>,
    len: AtomicUsize,
    capacity: usize,
    /// Changes so far: each change takes the next number.
    changes: AtomicU64,
    untracked: AtomicU64,
}

impl std::fmt::Debug for Inflight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflight")
            .field("len", &self.len())
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

impl Inflight {
    pub fn new(capacity: usize) -> Arc<Inflight> {
        Arc::new(Inflight {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            len: AtomicUsize::new(0),
            capacity,
            changes: AtomicU64::new(0),
            untracked: AtomicU64::new(0),
        })
    }

    /// Entries now.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Requests served without an entry because the registry was full.
    pub fn untracked(&self) -> u64 {
        self.untracked.load(Ordering::Relaxed)
    }

    /// The shard of a request id: by its last byte, random in the gateway's ids.
    fn shard(&self, id: &str) -> MutexGuard<'_, Shard> {
        let i = id.as_bytes().last().map_or(0, |b| usize::from(*b)) % self.shards.len();
        self.shards[i]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts tracking the request `pending` is; `None` when the registry is full.
    pub fn open(self: &Arc<Self>, pending: &Pending) -> Option<Slot> {
        if self.len.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.untracked.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let record = Arc::new(partial(pending));
        let id = pending.request_id.clone();
        let cell = Arc::new(Mutex::new(Tracked {
            entry: Entry::Running {
                record,
                answered: None,
            },
            change: self.next_change(),
        }));
        let replaced = self.shard(&id).insert(id.clone(), cell.clone());
        if replaced.is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
        }
        Some(Slot {
            registry: self.clone(),
            id,
            cell,
            handed_over: false,
        })
    }

    fn remove(&self, id: &str) {
        if self.shard(id).remove(id).is_some() {
            self.len.fetch_sub(1, Ordering::Relaxed);
            self.next_change();
        }
    }

    /// Numbers a change (an entry opened, updated, finished or removed).
    fn next_change(&self) -> u64 {
        self.changes.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Forgets the records of a batch the recorder is done with (the recorder's callback, on its
    /// writer thread).
    pub fn written(&self, batch: &[RequestRecord]) {
        for r in batch {
            self.remove(&r.request_id);
        }
    }

    /// Every entry now, for the journal and the read-back. Each shard is locked in turn, long
    /// enough to copy its entries' pointers (records are shared, not copied).
    pub fn snapshot(&self) -> Vec<Entry> {
        self.numbered_snapshot()
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }

    /// [`Inflight::snapshot`] with each entry's change number, for the journal writer.
    fn numbered_snapshot(&self) -> Vec<(u64, Entry)> {
        let mut out = Vec::with_capacity(self.len());
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            out.extend(shard.values().map(|c| {
                let t = lock_cell(c);
                (t.change, t.entry.clone())
            }));
        }
        out
    }

    /// The requests running now, and how many of them are streams (for the shutdown's log).
    pub fn running(&self) -> Running {
        let mut running = Running::default();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            for cell in shard.values() {
                let t = lock_cell(cell);
                if t.entry.state() == State::Running {
                    running.requests += 1;
                    running.streams += usize::from(t.entry.record().stream);
                }
            }
        }
        running
    }

    /// The entries of one workspace, oldest first.
    pub fn of_workspace(&self, workspace_id: &str) -> Vec<Entry> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            out.extend(shard.values().filter_map(|cell| {
                let t = lock_cell(cell);
                (t.entry.record().workspace_id.as_deref() == Some(workspace_id))
                    .then(|| t.entry.clone())
            }));
        }
        out.sort_by(|a, b| {
            (a.record().created_at_us, &a.record().request_id)
                .cmp(&(b.record().created_at_us, &b.record().request_id))
        });
        out
    }

    /// The number of the last change made.
    fn last_change(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }
}

/// A request's handle on its entry, held by its pending record. Dropped without
/// [`Slot::finished`] (a request that records nothing), it removes the entry.
pub struct Slot {
    registry: Arc<Inflight>,
    id: String,
    cell: Cell,
    handed_over: bool,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot").field("id", &self.id).finish()
    }
}

impl Slot {
    /// Updates the running entry.
    fn update(&self, f: impl FnOnce(&mut RequestRecord, &mut Option<u16>)) {
        self.update_numbered(true, f);
    }

    /// Updates the running entry; `numbered` gives the update a change number of its own,
    /// which the journal writer writes the entry again for. Without one the registry (and so
    /// the read-back) sees the update, and the journal's line waits for the entry's next
    /// numbered change.
    fn update_numbered(
        &self,
        numbered: bool,
        f: impl FnOnce(&mut RequestRecord, &mut Option<u16>),
    ) {
        let mut t = lock_cell(&self.cell);
        if let Tracked {
            entry: Entry::Running { record, answered },
            change,
        } = &mut *t
        {
            f(Arc::make_mut(record), answered);
            if numbered {
                *change = self.registry.next_change();
            }
        }
    }

    /// Copies what the pending record knows now into the entry (strings reuse the entry's
    /// buffers, so a repeated sync rarely allocates).
    pub fn sync(&self, p: &Pending) {
        self.update(|r, _| {
            r.workspace_id.clone_from(&p.workspace_id);
            r.key_id.clone_from(&p.key_id);
            r.model.clone_from(&p.model);
            r.provider.clone_from(&p.provider);
            r.channel.clone_from(&p.channel);
            r.group.clone_from(&p.group);
            r.upstream_dialect = p.upstream_dialect;
            r.stream = p.stream;
            r.shape.clone_from(&p.shape);
            r.channel_inflight = p.channel_inflight;
            r.attempts.clone_from(&p.attempts);
            r.hedge = p.hedge;
            r.cached = p.cached;
            let seen = stream_marks(&r.marks);
            r.marks = p.marks;
            merge_stream_marks(&mut r.marks, seen);
        });
    }

    /// The client was sent a head with `status`.
    pub fn answered(&self, status: u16) {
        self.update(|_, answered| {
            *answered = Some(status);
        });
    }

    /// The stream marks reached so far (the first byte, event, effective output, visible
    /// text, and the last effective output): a handful of calls per request, when one of the
    /// first-time marks is new or the last output moved on by a step.
    pub fn stream_marks(&self, m: &Marks) {
        self.update(|r, _| {
            merge_stream_marks(&mut r.marks, stream_marks(m));
        });
    }

    /// The last effective output moved on, and nothing else: the in-flight list sees it at
    /// once, the journal with the entry's next numbered change ([`Slot::stream_marks`] or its
    /// end). A journal line serialises the whole record; writing one for every step of output
    /// was a quarter of what observing a paced stream cost (benchmarks/README, item 13).
    pub fn live_output(&self, m: &Marks) {
        self.update_numbered(false, |r, _| {
            merge_stream_marks(&mut r.marks, stream_marks(m));
        });
    }

    /// The request ended with `record`, which is about to be queued; it stays until the
    /// recorder has written it.
    pub fn finished(mut self, record: &RequestRecord) -> Handed {
        self.handed_over = true;
        {
            let mut t = lock_cell(&self.cell);
            let Tracked { entry: e, change } = &mut *t;
            let done = match e {
                // Into the running record's own buffers: most of its strings are the same.
                Entry::Running { record: kept, .. } => {
                    copy_into(Arc::make_mut(kept), record);
                    Arc::clone(kept)
                }
                Entry::Finished(_) => Arc::new(record.clone()),
            };
            *e = Entry::Finished(done);
            *change = self.registry.next_change();
        }
        Handed {
            registry: self.registry.clone(),
            id: std::mem::take(&mut self.id),
        }
    }
}

/// A finished entry, waiting for the recorder.
#[must_use = "a record the recorder refused must be forgotten with `not_queued`"]
pub struct Handed {
    registry: Arc<Inflight>,
    id: String,
}

impl Handed {
    /// The recorder refused the record (its queue was full): nothing will write it, so the
    /// registry forgets it now.
    pub fn not_queued(self) {
        self.registry.remove(&self.id);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if !self.handed_over {
            self.registry.remove(&self.id);
        }
    }
}

/// Makes `dst` equal to `src`, reusing `dst`'s allocations (`clone_from` field by field, where
/// a derived `Clone` would allocate every string anew). The destructuring is exhaustive, so a
/// field added to the record cannot be left out here.
fn copy_into(dst: &mut RequestRecord, src: &RequestRecord) {
    let RequestRecord {
        request_id,
        workspace_id,
        key_id,
        created_at_us,
        model,
        provider,
        channel,
        group,
        dialect,
        upstream_dialect,
        stream,
        status,
        outcome,
        timeout_kind,
        error_class,
        classification,
        flags,
        marks,
        tokens,
        event_count,
        text_delta_count,
        channel_inflight,
        attempts,
        hedge,
        failover_count,
        cached,
        shape,
        region,
        instance,
        trace_id,
        cost,
        refused_by,
        exchange,
        in_band,
    } = src;
    dst.request_id.clone_from(request_id);
    dst.workspace_id.clone_from(workspace_id);
    dst.key_id.clone_from(key_id);
    dst.created_at_us = *created_at_us;
    dst.model.clone_from(model);
    dst.provider.clone_from(provider);
    dst.channel.clone_from(channel);
    dst.group.clone_from(group);
    dst.dialect = *dialect;
    dst.upstream_dialect = *upstream_dialect;
    dst.stream = *stream;
    dst.status = *status;
    dst.outcome = *outcome;
    dst.timeout_kind = *timeout_kind;
    dst.error_class = *error_class;
    dst.classification = *classification;
    dst.flags.clone_from(flags);
    dst.marks = *marks;
    dst.tokens = *tokens;
    dst.event_count = *event_count;
    dst.text_delta_count = *text_delta_count;
    dst.channel_inflight = *channel_inflight;
    dst.attempts.clone_from(attempts);
    dst.hedge = *hedge;
    dst.failover_count = *failover_count;
    dst.cached = *cached;
    dst.shape.clone_from(shape);
    dst.region.clone_from(region);
    dst.instance.clone_from(instance);
    dst.trace_id.clone_from(trace_id);
    dst.cost = *cost;
    dst.refused_by = *refused_by;
    dst.exchange = *exchange;
    dst.in_band = *in_band;
}

/// The stream marks, as a `Marks` holds them: the four first-time ones, then the last
/// effective output (which moves on as the answer streams).
type StreamMarks = [Option<Duration>; 5];

fn stream_marks(m: &Marks) -> StreamMarks {
    [
        m.first_byte,
        m.first_event,
        m.first_effective,
        m.first_visible,
        m.last_effective,
    ]
}

/// Keeps each first-time mark `m` has, else takes the one in `s` (each happens once), and the
/// later of the two last outputs.
fn merge_stream_marks(m: &mut Marks, s: StreamMarks) {
    let [byte, event, effective, visible, last] = s;
    m.first_byte = m.first_byte.or(byte);
    m.first_event = m.first_event.or(event);
    m.first_effective = m.first_effective.or(effective);
    m.first_visible = m.first_visible.or(visible);
    m.last_effective = m.last_effective.max(last);
}

/// How many first-time stream marks `m` has: a new one changes the count.
pub fn stream_mark_count(m: &Marks) -> usize {
    stream_marks(m)[..4].iter().flatten().count()
}

/// The record so far of a request just taken in (outcome `gateway_crashed`, no end marks).
fn partial(p: &Pending) -> RequestRecord {
    RequestRecord {
        request_id: p.request_id.clone(),
        workspace_id: p.workspace_id.clone(),
        key_id: p.key_id.clone(),
        created_at_us: p.created_at_us,
        model: p.model.clone(),
        provider: p.provider.clone(),
        channel: p.channel.clone(),
        group: p.group.clone(),
        dialect: p.dialect,
        upstream_dialect: p.upstream_dialect,
        stream: p.stream,
        status: UNANSWERED_STATUS,
        outcome: Outcome::GatewayCrashed,
        timeout_kind: None,
        error_class: None,
        classification: slow::Classification::Failed,
        flags: Vec::new(),
        marks: p.marks,
        tokens: Default::default(),
        event_count: 0,
        text_delta_count: 0,
        channel_inflight: p.channel_inflight,
        attempts: p.attempts.clone(),
        hedge: p.hedge,
        failover_count: 0,
        cached: p.cached,
        shape: p.shape.clone(),
        region: p.region.clone(),
        instance: p.instance.clone(),
        trace_id: p.trace_id.clone(),
        // What a crashed request was billed is not known.
        cost: None,
        refused_by: p.refused_by,
        exchange: p.exchange(),
        // Not known until the answer is done (a crash may have cut it anywhere).
        in_band: None,
    }
}

// === the journal ===

/// The journal of the store at `store_path`: beside it, in the same directory.
pub fn journal_path(store_path: &Path) -> PathBuf {
    store_path.with_file_name(JOURNAL_FILE)
}

#[derive(Serialize)]
struct LineOut<'a> {
    state: State,
    #[serde(skip_serializing_if = "Option::is_none")]
    answered: Option<u16>,
    record: &'a RequestRecord,
}

#[derive(Deserialize)]
struct LineIn {
    state: State,
    answered: Option<u16>,
    record: RequestRecord,
}

/// Writes `entries` as the journal at `path`: to a temporary file beside it, then renamed over
/// it, so a reader (or a crash) sees the previous journal or this one, never a part.
pub fn write_journal(path: &Path, entries: &[Entry]) -> std::io::Result<()> {
    let lines = entries
        .iter()
        .map(line_of)
        .collect::<std::io::Result<Vec<_>>>()?;
    write_lines(path, lines.iter().map(Vec::as_slice))
}

/// One entry's journal line, with its newline.
fn line_of(e: &Entry) -> std::io::Result<Vec<u8>> {
    let (record, answered) = match e {
        Entry::Running { record, answered } => (&**record, *answered),
        Entry::Finished(r) => (&**r, None),
    };
    let line = LineOut {
        state: e.state(),
        answered,
        record,
    };
    // A stream's line is about 1.8 KB: written into room for it, not grown from 128 bytes by
    // four reallocations (the same 2 KB in the end).
    let mut out = Vec::with_capacity(2048);
    serde_json::to_writer(&mut out, &line).map_err(std::io::Error::other)?;
    out.push(b'\n');
    Ok(out)
}

/// Writes a journal of `lines` (each with its newline) as [`write_journal`] does.
fn write_lines<'a>(path: &Path, lines: impl Iterator<Item = &'a [u8]>) -> std::io::Result<()> {
    let tmp = path.with_extension("journal.tmp");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
    out.write_all(JOURNAL_FORMAT.as_bytes())?;
    out.write_all(b"\n")?;
    for line in lines {
        out.write_all(line)?;
    }
    out.into_inner().map_err(|e| e.into_error())?;
    std::fs::rename(&tmp, path)
}

/// The journal writer's state: the lines of the last snapshot, by each entry's change number,
/// and the journal it appends to. An entry that has not changed since is written from here
/// rather than serialised again: serialising every entry at every interval took 4 % of a
/// gateway's CPU with 300 paced streams open (a stream's entry changes a handful of times in
/// its life, and is written ten times a second). And only what changed is written: rewriting
/// the whole journal at every interval (a new file, renamed over the old one) took most of the
/// writer's time there, the rename alone a fifth of it.
#[derive(Debug)]
struct JournalLines {
    lines: HashMap<u64, Vec<u8>>,
    appending: Option<Appending>,
    /// The journal is rewritten whole once its size is over `rewrite_factor` times its live
    /// lines plus `rewrite_slack` bytes.
    rewrite_factor: u64,
    rewrite_slack: u64,
}

/// The journal file as the writer left it: open for appending, with the change number of each
/// request's last line in it and its size.
#[derive(Debug)]
struct Appending {
    file: std::fs::File,
    written: HashMap<String, u64>,
    bytes: u64,
}

/// See [`JournalLines::rewrite_factor`]: 4 keeps a journal under five times what it must hold,
/// and rewrites it about every 2 s with 300 paced streams open.
const REWRITE_FACTOR: u64 = 4;
const REWRITE_SLACK: u64 = 1 << 20;

impl Default for JournalLines {
    fn default() -> Self {
        JournalLines {
            lines: HashMap::new(),
            appending: None,
            rewrite_factor: REWRITE_FACTOR,
            rewrite_slack: REWRITE_SLACK,
        }
    }
}

impl JournalLines {
    /// Brings the journal at `path` to `entries`: appends the line of each entry that changed
    /// since the last write and a `gone` line for each that left, or, the first time, after a
    /// failed write and once appends have made it large, rewrites it whole as
    /// [`write_journal`] does. An append is one write at the end: a crash in it leaves at most
    /// its last line torn, which a reader skips (that entry's earlier line stands).
    fn write(&mut self, path: &Path, entries: &[(u64, Entry)]) -> std::io::Result<()> {
        let mut kept = HashMap::with_capacity(entries.len());
        let mut live = 0;
        for (change, e) in entries {
            let line = match self.lines.remove(change) {
                Some(line) => line,
                None => line_of(e)?,
            };
            live += line.len() as u64;
            kept.insert(*change, line);
        }
        self.lines = kept;
        let result = match self.appending.take() {
            Some(a) if a.bytes <= self.rewrite_factor * live + self.rewrite_slack => {
                self.append(a, entries)
            }
            _ => self.rewrite(path, entries),
        };
        self.appending = Some(result?);
        Ok(())
    }

    fn append(&self, mut a: Appending, entries: &[(u64, Entry)]) -> std::io::Result<Appending> {
        let mut out = Vec::new();
        let mut written = HashMap::with_capacity(entries.len());
        for (change, e) in entries {
            let id = &e.record().request_id;
            let (id, last) = a
                .written
                .remove_entry(id)
                .map_or_else(|| (id.clone(), None), |(id, last)| (id, Some(last)));
            if last != Some(*change) {
                if let Some(line) = self.lines.get(change) {
                    out.extend_from_slice(line);
                }
            }
            written.insert(id, *change);
        }
        for id in a.written.keys() {
            out.extend(serde_json::to_vec(&Gone { gone: id }).map_err(std::io::Error::other)?);
            out.push(b'\n');
        }
        if !out.is_empty() {
            a.file.write_all(&out)?;
            a.bytes += out.len() as u64;
        }
        a.written = written;
        Ok(a)
    }

    fn rewrite(&self, path: &Path, entries: &[(u64, Entry)]) -> std::io::Result<Appending> {
        let lines = entries
            .iter()
            .filter_map(|(change, _)| self.lines.get(change).map(Vec::as_slice));
        write_lines(path, lines)?;
        let file = std::fs::OpenOptions::new().append(true).open(path)?;
        let bytes = file.metadata()?.len();
        let written = entries
            .iter()
            .map(|(change, e)| (e.record().request_id.clone(), *change))
            .collect();
        Ok(Appending {
            file,
            written,
            bytes,
        })
    }
}

/// The line that says an entry left the registry (its record was committed, or it recorded
/// nothing).
#[derive(Serialize, Deserialize)]
struct Gone<S> {
    gone: S,
}

/// What a journal held.
#[derive(Debug, Default)]
pub struct Journal {
    pub entries: Vec<Entry>,
    /// Lines that could not be read (another format, a damaged file), left out.
    pub unreadable: usize,
}

/// Reads the journal at `path`, at most `max_entries` entries of it; `None` when there is none.
/// A request's last line holds, and a `gone` line removes it.
pub fn read_journal(path: &Path, max_entries: usize) -> std::io::Result<Option<Journal>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut lines = text.lines();
    let mut journal = Journal::default();
    if !matches!(lines.next(), Some(JOURNAL_FORMAT | JOURNAL_FORMAT_V1)) {
        journal.unreadable = text.lines().count();
        return Ok(Some(journal));
    }
    let mut entries: Vec<Option<Entry>> = Vec::new();
    let mut at: HashMap<String, usize> = HashMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<LineIn>(line) {
            Ok(l) => {
                let id = l.record.request_id.clone();
                let entry = match l.state {
                    State::Running => Entry::Running {
                        record: Arc::new(l.record),
                        answered: l.answered,
                    },
                    State::Finished => Entry::Finished(Arc::new(l.record)),
                };
                if let Some(&i) = at.get(&id) {
                    entries[i] = Some(entry);
                } else if at.len() < max_entries {
                    at.insert(id, entries.len());
                    entries.push(Some(entry));
                } else {
                    journal.unreadable += 1;
                }
            }
            Err(_) => match serde_json::from_str::<Gone<String>>(line) {
                Ok(g) => {
                    if let Some(i) = at.remove(&g.gone) {
                        entries[i] = None;
                    }
                }
                Err(_) => journal.unreadable += 1,
            },
        }
    }
    journal.entries = entries.into_iter().flatten().collect();
    Ok(Some(journal))
}

/// What a start found in the journal.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Requests in flight when the process ended: recorded `gateway_crashed`.
    pub crashed: usize,
    /// Finished requests whose records had not been committed: recorded as they ended.
    pub finished: usize,
    /// Entries whose record the store had already.
    pub already_stored: usize,
    pub unreadable: usize,
}

/// Turns a journal left by a process that did not shut down cleanly into records (each stored
/// only if its request id is not stored yet, so a replay is harmless), then removes it. Runs
/// before the gateway serves and before its recorder starts.
pub async fn recover(
    store: &Store,
    path: &Path,
    max_entries: usize,
    thresholds: &Thresholds,
) -> Result<Option<Recovered>, String> {
    let journal =
        read_journal(path, max_entries).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let Some(journal) = journal else {
        return Ok(None);
    };
    let mut recovered = Recovered {
        unreadable: journal.unreadable,
        ..Recovered::default()
    };
    let mut records = Vec::with_capacity(journal.entries.len());
    let mut crashed_ids = std::collections::HashSet::new();
    for e in journal.entries {
        if e.state() == State::Running {
            crashed_ids.insert(e.record().request_id.clone());
        }
        records.push(e.into_record(thresholds));
    }
    let total = records.len();
    let written = store
        .insert_absent(records)
        .await
        .map_err(|e| format!("recording the in-flight journal: {e}"))?;
    recovered.crashed = written
        .iter()
        .filter(|id| crashed_ids.contains(*id))
        .count();
    recovered.finished = written.len() - recovered.crashed;
    recovered.already_stored = total - written.len();
    std::fs::remove_file(path).map_err(|e| format!("removing {}: {e}", path.display()))?;
    Ok(Some(recovered))
}

/// The thread that writes the journal every interval when the registry changed. Stopped by
/// [`JournalWriter::stop`], which removes the journal (a clean shutdown leaves none).
pub struct JournalWriter {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
    registry: Arc<Inflight>,
}

impl std::fmt::Debug for JournalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl JournalWriter {
    pub fn start(
        registry: Arc<Inflight>,
        path: PathBuf,
        every: Duration,
    ) -> std::io::Result<JournalWriter> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        let at = path.clone();
        let writing = registry.clone();
        let thread = std::thread::Builder::new()
            .name("laptime-journal".into())
            .spawn(move || {
                let _log = tracing::dispatcher::set_default(&dispatch);
                let mut failing = false;
                let mut written = 0;
                let mut lines = JournalLines::default();
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(every)
                {
                    // Read before the snapshot: a change made while it is taken is written
                    // again at the next interval.
                    let last = writing.last_change();
                    if last == written {
                        continue;
                    }
                    match lines.write(&at, &writing.numbered_snapshot()) {
                        Ok(()) if failing => {
                            written = last;
                            failing = false;
                            tracing::info!(path = %at.display(), "in-flight journal written again");
                        }
                        Ok(()) => written = last,
                        Err(e) => {
                            // Tried again at the next interval; one line per failing streak.
                            if !failing {
                                failing = true;
                                tracing::warn!(error = %e, path = %at.display(), "writing the in-flight journal failed");
                            }
                        }
                    }
                }
            })?;
        Ok(JournalWriter {
            stop,
            thread: Some(thread),
            path,
            registry,
        })
    }

    /// Stops the writer (waiting for a write under way) and removes the journal: after a clean
    /// shutdown every record is in the store. With `keep` (the recorder could not flush), it
    /// writes the registry one last time instead, for the next start to record.
    pub fn stop(mut self, keep: bool) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if keep {
            if let Err(e) = write_journal(&self.path, &self.registry.snapshot()) {
                tracing::warn!(error = %e, path = %self.path.display(), "writing the in-flight journal failed");
            }
            return;
        }
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(error = %e, path = %self.path.display(), "removing the in-flight journal failed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use laptime_core::Dialect;
    use tokio::time::Instant;

    fn pending(id: &str, ws: &str) -> Pending {
        let mut p = Pending::new(Instant::now(), 1_000, id.into(), Dialect::Chat);
        p.workspace_id = Some(ws.into());
        p
    }

    fn ms(v: u64) -> Option<Duration> {
        Some(Duration::from_millis(v))
    }

    #[test]
    fn an_entry_lives_from_ingress_until_its_record_is_written() {
        let reg = Inflight::new(10);
        let mut p = pending("req_a1", "ws");
        let slot = reg.open(&p).unwrap();
        assert_eq!(reg.len(), 1);
        p.model = Some("sim-fast".into());
        p.marks.auth = ms(1);
        p.marks.upstream_start = ms(3);
        p.marks.upstream_headers = ms(9);
        slot.sync(&p);
        slot.answered(200);
        let mut m = Marks {
            first_byte: ms(10),
            first_event: ms(11),
            ..Marks::default()
        };
        slot.stream_marks(&m);
        // A later sync from the pending record keeps the stream marks the observer gave.
        slot.sync(&p);
        let e = &reg.snapshot()[0];
        assert_eq!(e.state(), State::Running);
        assert_eq!(e.status(), Some(200));
        let r = e.record();
        assert_eq!(r.model.as_deref(), Some("sim-fast"));
        assert_eq!(
            (r.marks.upstream_headers, r.marks.first_event),
            (ms(9), ms(11))
        );
        assert_eq!(r.marks.handler_done, None);
        m.first_visible = ms(20);
        m.last_effective = ms(20);
        slot.stream_marks(&m);
        // The last output moves on as the answer streams, and a sync keeps it.
        m.last_effective = ms(400);
        slot.stream_marks(&m);
        slot.sync(&p);
        assert_eq!(reg.snapshot()[0].record().marks.last_effective, ms(400));
        let mut done = e.clone().into_record(&Thresholds::default());
        done.outcome = Outcome::Completed;
        done.marks.handler_done = ms(30);
        done.flags = vec![slow::Flag::Unobserved];
        done.attempts.clear();
        done.shape.tool_choice = Some("auto".into());
        let _handed = slot.finished(&done);
        assert_eq!(reg.len(), 1, "finished, not written yet");
        assert_eq!(reg.snapshot()[0].state(), State::Finished);
        assert_eq!(
            reg.snapshot()[0].record(),
            &done,
            "copied whole into the entry"
        );
        reg.written(std::slice::from_ref(&done));
        assert!(reg.is_empty());
        assert!(reg.snapshot().is_empty());
    }

    #[test]
    fn a_request_that_records_nothing_leaves_no_entry() {
        let reg = Inflight::new(10);
        let slot = reg.open(&pending("req_b2", "ws")).unwrap();
        drop(slot);
        assert!(reg.is_empty());
        // A record the recorder refused (its queue full) is forgotten too.
        let slot = reg.open(&pending("req_b3", "ws")).unwrap();
        let record = reg.snapshot()[0]
            .clone()
            .into_record(&Thresholds::default());
        slot.finished(&record).not_queued();
        assert!(reg.is_empty());
    }

    #[test]
    fn the_registry_is_bounded_and_counts_what_it_did_not_track() {
        let reg = Inflight::new(3);
        let slots: Vec<_> = (0..5)
            .filter_map(|i| reg.open(&pending(&format!("req_{i}"), "ws")))
            .collect();
        assert_eq!(slots.len(), 3);
        assert_eq!(reg.len(), 3);
        assert_eq!(reg.untracked(), 2);
        drop(slots);
        assert!(reg.is_empty());
        assert!(reg.open(&pending("req_x", "ws")).is_some());
    }

    #[test]
    fn a_workspace_sees_only_its_own_entries_oldest_first() {
        let reg = Inflight::new(10);
        let mut a2 = pending("req_a2", "a");
        a2.created_at_us = 2;
        let mut a1 = pending("req_a1", "a");
        a1.created_at_us = 1;
        let _s = [
            reg.open(&a2).unwrap(),
            reg.open(&a1).unwrap(),
            reg.open(&pending("req_b", "b")).unwrap(),
        ];
        let ids: Vec<String> = reg
            .of_workspace("a")
            .iter()
            .map(|e| e.record().request_id.clone())
            .collect();
        assert_eq!(ids, ["req_a1", "req_a2"]);
    }

    #[test]
    fn the_journal_round_trips_running_and_finished_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let mut p = pending("req_run", "ws");
        p.marks.upstream_start = ms(2);
        p.marks.upstream_headers = ms(40);
        let running = reg.open(&p).unwrap();
        running.sync(&p);
        running.answered(200);
        let done_slot = reg.open(&pending("req_done", "ws")).unwrap();
        let mut done = reg
            .snapshot()
            .into_iter()
            .find(|e| e.record().request_id == "req_done")
            .unwrap()
            .into_record(&Thresholds::default());
        done.outcome = Outcome::Completed;
        done.status = 200;
        done.marks.handler_done = ms(50);
        let _handed = done_slot.finished(&done);
        write_journal(&path, &reg.snapshot()).unwrap();
        let back = read_journal(&path, 100).unwrap().unwrap();
        assert_eq!(back.unreadable, 0);
        let mut back: Vec<_> = back.entries;
        back.sort_by(|a, b| a.record().request_id.cmp(&b.record().request_id));
        assert_eq!(back[0].state(), State::Finished);
        assert_eq!(back[0].record(), &done);
        assert_eq!(back[1].state(), State::Running);
        assert_eq!(back[1].status(), Some(200));
        let crashed = back[1].clone().into_record(&Thresholds::default());
        assert_eq!(crashed.outcome, Outcome::GatewayCrashed);
        assert_eq!(crashed.status, 200);
        assert_eq!(crashed.marks.upstream_headers, ms(40));
        assert_eq!(crashed.marks.upstream_done, None);
        assert_eq!(crashed.marks.handler_done, None);
        assert_eq!(crashed.classification, slow::Classification::Failed);
        assert_eq!(
            read_journal(&dir.path().join("none"), 100)
                .unwrap()
                .map(|j| j.entries.len()),
            None
        );
    }

    #[test]
    fn a_new_journal_replaces_the_old_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let slots: Vec<_> = (0..3)
            .filter_map(|i| reg.open(&pending(&format!("req_{i}"), "ws")))
            .collect();
        write_journal(&path, &reg.snapshot()).unwrap();
        // A write that dies before its rename (a crash mid-write) leaves the previous journal.
        std::fs::write(
            path.with_extension("journal.tmp"),
            "laptime-inflight-1\n{\"sta",
        )
        .unwrap();
        assert_eq!(read_journal(&path, 100).unwrap().unwrap().entries.len(), 3);
        drop(slots);
        write_journal(&path, &reg.snapshot()).unwrap();
        let back = read_journal(&path, 100).unwrap().unwrap();
        assert_eq!((back.entries.len(), back.unreadable), (0, 0));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [JOURNAL_FILE]);
    }

    #[test]
    fn reading_a_journal_is_bounded_and_skips_what_it_cannot_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let _slots: Vec<_> = (0..5)
            .filter_map(|i| reg.open(&pending(&format!("req_{i}"), "ws")))
            .collect();
        write_journal(&path, &reg.snapshot()).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("not json\n");
        std::fs::write(&path, &text).unwrap();
        let back = read_journal(&path, 3).unwrap().unwrap();
        assert_eq!((back.entries.len(), back.unreadable), (3, 3));
        std::fs::write(&path, "some other file\n{}\n").unwrap();
        let back = read_journal(&path, 3).unwrap().unwrap();
        assert_eq!((back.entries.len(), back.unreadable), (0, 2));
    }

    #[tokio::test]
    async fn recovery_stores_each_entry_once_and_removes_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let path = journal_path(store.path().unwrap());
        let reg = Inflight::new(10);
        let mut p = pending("req_slow", "ws");
        p.marks.upstream_start = ms(1);
        p.marks.upstream_headers = ms(6);
        let slow = reg.open(&p).unwrap();
        slow.sync(&p);
        let fast = reg.open(&pending("req_fast", "ws")).unwrap();
        let mut done = reg
            .of_workspace("ws")
            .into_iter()
            .find(|e| e.record().request_id == "req_fast")
            .unwrap()
            .into_record(&Thresholds::default());
        done.outcome = Outcome::Completed;
        done.status = 200;
        let _handed = fast.finished(&done);
        write_journal(&path, &reg.snapshot()).unwrap();
        let got = recover(&store, &path, 100, &Thresholds::default())
            .await
            .unwrap();
        assert_eq!(
            got,
            Some(Recovered {
                crashed: 1,
                finished: 1,
                already_stored: 0,
                unreadable: 0
            })
        );
        assert!(!path.exists());
        let slow_row = store.record("ws", "req_slow").await.unwrap().unwrap();
        assert_eq!(slow_row.outcome, Outcome::GatewayCrashed);
        assert_eq!(slow_row.status, UNANSWERED_STATUS);
        assert_eq!(slow_row.marks.upstream_headers, ms(6));
        assert_eq!(slow_row.marks.handler_done, None);
        assert_eq!(store.record("ws", "req_fast").await.unwrap(), Some(done));
        // The same journal again (a crash before it was removed): nothing is stored twice.
        write_journal(&path, &reg.snapshot()).unwrap();
        let again = recover(&store, &path, 100, &Thresholds::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(again.already_stored, 2);
        assert_eq!(
            recover(&store, &path, 100, &Thresholds::default()).await,
            Ok(None)
        );
    }

    /// What a journal holds, in an order that does not depend on how it was written.
    fn read_back(path: &Path) -> Vec<(State, Option<u16>, RequestRecord)> {
        let journal = read_journal(path, 100).unwrap().unwrap();
        assert_eq!(journal.unreadable, 0);
        let mut out: Vec<_> = journal
            .entries
            .iter()
            .map(|e| (e.state(), e.status(), e.record().clone()))
            .collect();
        out.sort_by(|a, b| a.2.request_id.cmp(&b.2.request_id));
        out
    }

    fn size(path: &Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    #[test]
    fn the_appended_journal_reads_back_as_a_fresh_one_and_grows_by_what_changed_only() {
        let dir = tempfile::tempdir().unwrap();
        let (kept, fresh) = (dir.path().join("kept"), dir.path().join("fresh"));
        let reg = Inflight::new(10);
        let slots: Vec<_> = ["req_k1", "req_k2", "req_k3", "req_k4"]
            .iter()
            .map(|id| reg.open(&pending(id, "ws")).unwrap())
            .collect();
        let mut lines = JournalLines::default();
        let same = |lines: &mut JournalLines| {
            lines.write(&kept, &reg.numbered_snapshot()).unwrap();
            write_journal(&fresh, &reg.snapshot()).unwrap();
            read_back(&kept) == read_back(&fresh)
        };
        assert!(same(&mut lines));
        assert_eq!(size(&kept), size(&fresh), "the first write is whole");
        // Every kind of change: an update of each kind, a finish, a removal, a new entry.
        let mut slots = slots.into_iter();
        let (a, b, c, d) = (
            slots.next().unwrap(),
            slots.next().unwrap(),
            slots.next().unwrap(),
            slots.next().unwrap(),
        );
        let before = size(&kept);
        a.answered(200);
        b.stream_marks(&Marks {
            first_byte: ms(10),
            ..Marks::default()
        });
        let mut record = reg.snapshot()[0].record().clone();
        record.request_id = "req_k3".into();
        record.status = 429;
        let handed = c.finished(&record);
        drop(d);
        let e = reg.open(&pending("req_k5", "ws")).unwrap();
        assert!(same(&mut lines));
        assert_eq!(
            lines.lines.len(),
            4,
            "the removed entry's line is forgotten"
        );
        // Appended: the four changed entries' lines and the removed one's `gone` line.
        let changed: u64 = reg
            .numbered_snapshot()
            .iter()
            .map(|(change, _)| lines.lines[change].len() as u64)
            .sum();
        let gone = serde_json::to_vec(&Gone { gone: "req_k4" }).unwrap().len() as u64 + 1;
        assert_eq!(size(&kept) - before, changed + gone);
        let journal = read_journal(&kept, 10).unwrap().unwrap();
        let status = |id: &str| {
            journal
                .entries
                .iter()
                .find(|e| e.record().request_id == id)
                .and_then(Entry::status)
        };
        assert_eq!((status("req_k1"), status("req_k3")), (Some(200), Some(429)));
        // Nothing changed: nothing appended, every line is the one kept.
        let (kept_lines, at) = (lines.lines.clone(), size(&kept));
        assert!(same(&mut lines));
        assert_eq!((&lines.lines, size(&kept)), (&kept_lines, at));
        // One change: one line.
        a.answered(201);
        assert!(same(&mut lines));
        let a_line = reg
            .numbered_snapshot()
            .iter()
            .find(|(_, e)| e.record().request_id == "req_k1")
            .map(|(change, _)| lines.lines[change].len() as u64)
            .unwrap();
        assert_eq!(size(&kept) - at, a_line);
        drop((a, b, e, handed));
    }

    #[test]
    fn a_live_output_step_is_read_back_at_once_and_journaled_with_the_next_numbered_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        let reg = Inflight::new(10);
        let slot = reg.open(&pending("req_l1", "ws")).unwrap();
        let mut m = Marks {
            first_byte: ms(10),
            last_effective: ms(20),
            ..Marks::default()
        };
        slot.stream_marks(&m);
        let mut lines = JournalLines::default();
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        let (at, journaled) = (size(&path), |path: &Path| {
            let j = read_journal(path, 10).unwrap().unwrap();
            j.entries[0].record().marks.last_effective
        });
        m.last_effective = ms(270);
        slot.live_output(&m);
        assert_eq!(reg.snapshot()[0].record().marks.last_effective, ms(270));
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        assert_eq!(size(&path), at, "no line for a live step alone");
        assert_eq!(journaled(&path), ms(20));
        // The next numbered change writes the entry as it is now, the live step included.
        slot.answered(200);
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        assert!(size(&path) > at);
        assert_eq!(journaled(&path), ms(270));
        m.last_effective = ms(1300);
        slot.stream_marks(&m);
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        assert_eq!(journaled(&path), ms(1300));
    }

    #[test]
    fn an_appended_journal_is_rewritten_whole_once_it_outgrows_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let slot = reg.open(&pending("req_r", "ws")).unwrap();
        let _other = reg.open(&pending("req_s", "ws")).unwrap();
        let mut lines = JournalLines {
            rewrite_factor: 2,
            rewrite_slack: 0,
            ..JournalLines::default()
        };
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        let whole = size(&path);
        let mut sizes = Vec::new();
        for status in 200..206 {
            slot.answered(status);
            lines.write(&path, &reg.numbered_snapshot()).unwrap();
            sizes.push(size(&path));
            assert_eq!(read_back(&path)[0].1, Some(status));
        }
        // Each change appends one line until the journal is over twice its live lines; the
        // next write rewrites it at its live size again.
        assert!(sizes[0] > whole && sizes[1] > sizes[0], "{sizes:?}");
        let rewritten = sizes.windows(2).position(|w| w[1] < w[0]).unwrap();
        let head = JOURNAL_FORMAT.len() as u64 + 1;
        let live: u64 = lines.lines.values().map(|l| l.len() as u64).sum();
        assert!(sizes[rewritten] > 2 * live, "{sizes:?}");
        assert_eq!(sizes[rewritten + 1], head + live, "{sizes:?}");
    }

    #[test]
    fn a_torn_last_append_leaves_the_earlier_lines_and_version_one_journals_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let slot = reg.open(&pending("req_t", "ws")).unwrap();
        let mut lines = JournalLines::default();
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        slot.answered(200);
        lines.write(&path, &reg.numbered_snapshot()).unwrap();
        // A crash in the middle of the next append.
        let mut text = std::fs::read_to_string(&path).unwrap();
        let whole = text.len();
        text.push_str("{\"state\":\"finished\",\"rec");
        std::fs::write(&path, &text).unwrap();
        let back = read_journal(&path, 10).unwrap().unwrap();
        assert_eq!(back.unreadable, 1);
        assert_eq!(back.entries.len(), 1);
        assert_eq!(back.entries[0].status(), Some(200));
        // What a build before appends wrote: one line per entry under the first version.
        let v1 = text[..whole].replacen(JOURNAL_FORMAT, JOURNAL_FORMAT_V1, 1);
        let last = v1.lines().last().unwrap();
        std::fs::write(&path, format!("{JOURNAL_FORMAT_V1}\n{last}\n")).unwrap();
        let back = read_journal(&path, 10).unwrap().unwrap();
        assert_eq!((back.entries.len(), back.unreadable), (1, 0));
        assert_eq!(back.entries[0].status(), Some(200));
        drop(slot);
    }

    #[test]
    fn the_writer_writes_only_after_a_change_and_its_stop_removes_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        let reg = Inflight::new(10);
        let writer =
            JournalWriter::start(reg.clone(), path.clone(), Duration::from_millis(5)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert!(!path.exists(), "nothing changed, nothing written");
        let slot = reg.open(&pending("req_w", "ws")).unwrap();
        let mut seen = None;
        for _ in 0..400 {
            if let Some(j) = read_journal(&path, 10).unwrap() {
                if !j.entries.is_empty() {
                    seen = Some(j.entries.len());
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(seen, Some(1));
        writer.stop(false);
        assert!(!path.exists());
        // Stopped after a failed flush, it keeps what is still in flight.
        let writer =
            JournalWriter::start(reg.clone(), path.clone(), Duration::from_secs(60)).unwrap();
        writer.stop(true);
        assert_eq!(read_journal(&path, 10).unwrap().unwrap().entries.len(), 1);
        drop(slot);
    }
}
