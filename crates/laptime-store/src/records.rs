//! Request records: one row per request, its upstream calls (attempts) inside it.

use std::collections::HashSet;
use std::time::Duration;

use laptime_core::cost::Cost;
use laptime_core::endpoint::Endpoint;
use laptime_core::limit::{Limit, Zone};
use laptime_core::slow::Classification;
use laptime_core::timeline::{
    DeadlineKind, ErrorClass, Exchange, Hedge, InBandCarrier, Marks, Outcome, RequestRecord,
    RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction, TransactionBehavior};

use crate::budgets;
use crate::names::{self, named, Codes};
use crate::rollups::{self, RollupKey};
use crate::stored_id;
use crate::usage::{self, UsageFilter};
use crate::{Result, StoreError};

#[cfg(test)]
pub(crate) fn us(d: Option<Duration>) -> Option<i64> {
    d.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub(crate) fn dur(v: Option<i64>) -> Option<Duration> {
    v.map(|v| Duration::from_micros(v.max(0) as u64))
}

/// Nano-USD as the store's signed integer (a sum past i64::MAX, $9.2 billion, is clamped).
pub(crate) fn nano(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub(crate) fn tok(v: Option<u64>) -> Option<i64> {
    v.map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

pub(crate) fn untok(v: Option<i64>) -> Option<u64> {
    v.map(|v| v.max(0) as u64)
}

/// Writes records with their attempts, and folds them into the per-minute rollups, in one
/// transaction. A record whose request id is already stored replaces that row (and its attempts);
/// the rollups it touches are then rebuilt from the rows, since a sketch cannot subtract.
pub fn insert_batch(conn: &mut Connection, records: &[RequestRecord], zone: &Zone) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (rebuild, replaced) = insert_rows(&tx, records)?;
    let mut delta = rollups::aggregate(records);
    delta.retain(|k, _| !rebuild.contains(k));
    rollups::merge_into(&tx, delta)?;
    rollups::rebuild(&tx, &rebuild)?;
    budgets::apply(&tx, &budgets::delta(records, &replaced, zone))?;
    tx.commit()?;
    Ok(())
}

/// Writes the records whose request id is not stored yet (with their attempts and rollups), in
/// one transaction, and leaves every stored one as it is; returns how many were written. For a
/// replay that may repeat records already written (the in-flight journal after a crash): a row
/// already stored is the one the request's own end wrote, and it wins. Returns the ids written.
pub fn insert_absent(
    conn: &mut Connection,
    records: &[RequestRecord],
    zone: &Zone,
) -> Result<Vec<String>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let mut fresh: Vec<RequestRecord> = Vec::with_capacity(records.len());
    {
        let mut stored = tx.prepare_cached(&format!(
            "SELECT 1 FROM requests WHERE {}",
            stored_id::lookup(1)
        ))?;
        let mut seen = HashSet::new();
        for r in records {
            if seen.insert(r.request_id.as_str())
                && !stored.exists(stored_id::params_of(&r.request_id))?
            {
                fresh.push(r.clone());
            }
        }
    }
    let (rebuild, _) = insert_rows(&tx, &fresh)?;
    let mut delta = rollups::aggregate(&fresh);
    delta.retain(|k, _| !rebuild.contains(k));
    rollups::merge_into(&tx, delta)?;
    budgets::apply(&tx, &budgets::delta(&fresh, &[], zone))?;
    rollups::rebuild(&tx, &rebuild)?;
    tx.commit()?;
    Ok(fresh.into_iter().map(|r| r.request_id).collect())
}

/// Writes the rows of `records` and their attempts (no rollups); returns the rollup keys that
/// replaced rows touched, which must be rebuilt from the rows, and the rows replaced.
pub(crate) fn insert_rows(
    tx: &Connection,
    records: &[RequestRecord],
) -> Result<(HashSet<RollupKey>, Vec<RequestRecord>)> {
    let mut rebuild: HashSet<RollupKey> = HashSet::new();
    let mut replaced = Vec::new();
    {
        let moved_ms = stored_id::moved_ms(tx)?;
        let codes = Codes::of(tx, records)?;
        let mut req = tx.prepare_cached(INSERT)?;
        let mut text = tx.prepare_cached("SELECT 1 FROM requests WHERE request_id = ?1")?;
        for r in records {
            // A row written before v15 holds the id as text, which the insert cannot see.
            let older =
                stored_id::may_be_text(&r.request_id, moved_ms) && text.exists([&r.request_id])?;
            if older || insert_row(&mut req, &codes, r)? == 0 {
                // The id is taken: replace the old row, and rebuild both its rollup and ours.
                let old = get_row(tx, &r.request_id)?;
                rebuild.extend(old.as_ref().and_then(RollupKey::of));
                replaced.extend(old);
                rebuild.extend(RollupKey::of(r));
                tx.prepare_cached(&format!(
                    "DELETE FROM requests WHERE {}",
                    stored_id::lookup(1)
                ))?
                .execute(stored_id::params_of(&r.request_id))?;
                insert_row(&mut req, &codes, r)?;
            }
        }
    }
    Ok((rebuild, replaced))
}

/// A request's row since schema v14: the columns queries filter, group or sort on, the others
/// packed into one value ([`crate::packed`]). The older columns that may not be NULL take the
/// values that cost a row no bytes (0 and `''`: SQLite writes them in the row's header alone),
/// and mean nothing beside the packed value. Since v16 the names are codes ([`crate::names`]).
const INSERT: &str = "INSERT INTO requests (
        request_id, workspace_id, created_at_us, model, provider, channel, grp, dialect, stream,
        status, outcome, classification, endpoint, input_tokens, max_output_tokens,
        reasoning_effort, tool_count, region, packed,
        flags, event_count, text_delta_count, hedge, failover_count, cached)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
        ?19, '', 0, 0, '', 0, 0)
     ON CONFLICT (request_id) DO NOTHING";

/// Inserts one request row unless its id exists, its names as `codes` has them; returns the
/// rows inserted (0 or 1).
fn insert_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
    codes: &Codes,
    r: &RequestRecord,
) -> Result<usize> {
    let [model, provider, channel, group, dialect, endpoint, region] =
        names::names_of(r).map(|name| codes.value(name, r.created_at_us));
    Ok(stmt.execute(params![
        stored_id::key(&r.request_id),
        r.workspace_id,
        r.created_at_us,
        model,
        provider,
        channel,
        group,
        dialect,
        r.stream,
        r.status,
        r.outcome.as_str(),
        r.classification.as_str(),
        endpoint,
        tok(r.tokens.input),
        tok(r.shape.max_output_tokens),
        r.shape.reasoning_effort,
        r.shape.tool_count,
        region,
        crate::packed::encode(r),
    ])?)
}

/// A W3C span id as stored: 16 hex digits.
pub(crate) fn parse_span_id(s: &str) -> Option<[u8; 8]> {
    let mut id = [0u8; 8];
    hex::decode_to_slice(s, &mut id).ok().map(|()| id)
}

/// One stored record by id, in any workspace: for tests that look at what a request without
/// a workspace (refused before auth resolved one) left.
#[cfg(any(test, feature = "test-support"))]
pub fn stored(conn: &Connection, request_id: &str) -> Result<Option<RequestRecord>> {
    get_row(conn, request_id)
}

/// One stored row by id, in any workspace.
fn get_row(conn: &Connection, request_id: &str) -> Result<Option<RequestRecord>> {
    let mut stmt = conn.prepare_cached(&format!("{SELECT} WHERE {}", stored_id::lookup(1)))?;
    Ok(stmt
        .query_row(stored_id::params_of(request_id), from_row)
        .optional()?)
}

/// The columns [`from_row`] reads, in its order: every column rows have had (rows written
/// before schema v14 hold each field in its own), then the packed fields of newer rows.
/// The coded columns read back as their names ([`crate::names`]).
pub(crate) const SELECT: &str = concat!(
    "SELECT request_id, workspace_id, key_id, created_at_us, ",
    named!("model"),
    ", ",
    named!("provider"),
    ", ",
    named!("channel"),
    ", ",
    named!("grp"),
    ", ",
    named!("dialect"),
    ", stream, status, outcome, timeout_kind, error_class, classification,
    flags, auth_us, body_read_us, distribution_us, upstream_start_us, upstream_headers_us,
    first_byte_us, first_event_us, first_effective_us, first_visible_us, last_effective_us,
    upstream_done_us, handler_done_us, input_tokens, output_tokens, cache_read_tokens,
    cache_write_tokens, reasoning_tokens, event_count, text_delta_count, channel_inflight, hedge,
    failover_count, cached, max_output_tokens, reasoning_effort, tool_count, tool_choice,
    response_format, temperature, top_p, ",
    named!("region"),
    ", trace_id, upstream_dialect, instance,
    cache_write_1h_tokens, cost_nano_usd, cost_estimated, admission_us, refused_by, ",
    named!("endpoint"),
    ",
    bytes_in, bytes_out, key_index, estimated_output_tokens, in_band, attempts, packed
    FROM requests"
);

fn corrupt(what: &str, v: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Corrupt(format!("{what}: {v}"))),
    )
}

pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
    match row.get_ref(62)?.as_blob_or_null()? {
        Some(packed) => from_packed_row(row, packed),
        None => from_columns(row),
    }
}

/// Column 0 of `row`, the request id in either of its stored forms ([`stored_id`]).
fn request_id(row: &Row<'_>) -> rusqlite::Result<String> {
    let v = row.get_ref(0)?;
    stored_id::id_of(v).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            v.data_type(),
            Box::new(StoreError::Corrupt("request id".into())),
        )
    })
}

/// Column `i` of `row`, a closed set's stored name.
fn named<T>(
    row: &Row<'_>,
    i: usize,
    what: &str,
    parse: fn(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let v: String = row.get(i)?;
    parse(&v).ok_or_else(|| corrupt(what, &v))
}

/// A row written since schema v14: the columns of [`INSERT`] and the packed fields.
fn from_packed_row(row: &Row<'_>, packed: &[u8]) -> rusqlite::Result<RequestRecord> {
    let columns = crate::packed::Columns {
        request_id: request_id(row)?,
        created_at_us: row.get(3)?,
        workspace_id: row.get(1)?,
        model: row.get(4)?,
        provider: row.get(5)?,
        channel: row.get(6)?,
        group: row.get(7)?,
        dialect: named(row, 8, "dialect", Dialect::parse)?,
        stream: row.get(9)?,
        status: row.get(10)?,
        outcome: named(row, 11, "outcome", Outcome::parse)?,
        classification: named(row, 14, "classification", Classification::parse)?,
        endpoint: named(row, 55, "endpoint", Endpoint::parse)?,
        input_tokens: untok(row.get(28)?),
        max_output_tokens: untok(row.get(39)?),
        reasoning_effort: row.get(40)?,
        tool_count: row.get(41)?,
        region: row.get(46)?,
    };
    crate::packed::record(columns, packed).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(62, rusqlite::types::Type::Blob, Box::new(e))
    })
}

/// A row written before schema v14: each field in its column.
fn from_columns(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
    let dialect: String = row.get(8)?;
    let outcome: String = row.get(11)?;
    let error_class: Option<String> = row.get(13)?;
    let timeout_kind: Option<String> = row.get(12)?;
    let classification: String = row.get(14)?;
    let flags: String = row.get(15)?;
    let hedge: String = row.get(36)?;
    let upstream_dialect: Option<String> = row.get(48)?;
    let cost_nano: Option<i64> = row.get(51)?;
    let cost_estimated: Option<bool> = row.get(52)?;
    let refused_by: Option<String> = row.get(54)?;
    let endpoint: String = row.get(55)?;
    let in_band: Option<String> = row.get(60)?;
    Ok(RequestRecord {
        request_id: request_id(row)?,
        workspace_id: row.get(1)?,
        key_id: row.get(2)?,
        created_at_us: row.get(3)?,
        model: row.get(4)?,
        provider: row.get(5)?,
        channel: row.get(6)?,
        group: row.get(7)?,
        dialect: Dialect::parse(&dialect).ok_or_else(|| corrupt("dialect", &dialect))?,
        upstream_dialect: match upstream_dialect {
            Some(d) => Some(Dialect::parse(&d).ok_or_else(|| corrupt("upstream_dialect", &d))?),
            None => None,
        },
        stream: row.get(9)?,
        status: row.get(10)?,
        outcome: Outcome::parse(&outcome).ok_or_else(|| corrupt("outcome", &outcome))?,
        timeout_kind: match timeout_kind {
            Some(k) => Some(DeadlineKind::parse(&k).ok_or_else(|| corrupt("timeout_kind", &k))?),
            None => None,
        },
        error_class: match error_class {
            Some(c) => Some(ErrorClass::parse(&c).ok_or_else(|| corrupt("error_class", &c))?),
            None => None,
        },
        classification: Classification::parse(&classification)
            .ok_or_else(|| corrupt("classification", &classification))?,
        flags: serde_json::from_str(&flags).map_err(|_| corrupt("flags", &flags))?,
        marks: Marks {
            auth: dur(row.get(16)?),
            admission: dur(row.get(53)?),
            body_read: dur(row.get(17)?),
            distribution: dur(row.get(18)?),
            upstream_start: dur(row.get(19)?),
            upstream_headers: dur(row.get(20)?),
            first_byte: dur(row.get(21)?),
            first_event: dur(row.get(22)?),
            first_effective: dur(row.get(23)?),
            first_visible: dur(row.get(24)?),
            last_effective: dur(row.get(25)?),
            upstream_done: dur(row.get(26)?),
            handler_done: dur(row.get(27)?),
        },
        tokens: Tokens {
            input: untok(row.get(28)?),
            output: untok(row.get(29)?),
            cache_read: untok(row.get(30)?),
            cache_write: untok(row.get(31)?),
            cache_write_1h: untok(row.get(50)?),
            reasoning: untok(row.get(32)?),
            estimated_output: untok(row.get(59)?),
        },
        event_count: row.get(33)?,
        text_delta_count: row.get(34)?,
        channel_inflight: row.get(35)?,
        hedge: Hedge::parse(&hedge).ok_or_else(|| corrupt("hedge", &hedge))?,
        failover_count: row.get(37)?,
        cached: row.get(38)?,
        shape: RequestShape {
            max_output_tokens: untok(row.get(39)?),
            reasoning_effort: row.get(40)?,
            tool_count: row.get(41)?,
            tool_choice: row.get(42)?,
            response_format: row.get(43)?,
            temperature: row.get(44)?,
            top_p: row.get(45)?,
        },
        region: row.get(46)?,
        trace_id: row.get(47)?,
        instance: row.get(49)?,
        cost: cost_nano.map(|n| Cost {
            nano_usd: u64::try_from(n).unwrap_or(0),
            estimated: cost_estimated.unwrap_or(false),
        }),
        refused_by: match refused_by {
            Some(l) => Some(Limit::parse(&l).ok_or_else(|| corrupt("refused_by", &l))?),
            None => None,
        },
        exchange: Exchange {
            endpoint: Endpoint::parse(&endpoint).ok_or_else(|| corrupt("endpoint", &endpoint))?,
            bytes_in: untok(row.get(56)?),
            bytes_out: untok(row.get(57)?),
            key_index: row.get(58)?,
        },
        in_band: match in_band {
            Some(c) => Some(InBandCarrier::parse(&c).ok_or_else(|| corrupt("in_band", &c))?),
            None => None,
        },
        attempts: match row.get::<_, Option<String>>(61)? {
            Some(stored) => crate::attempts::decode(&stored).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    61,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?,
            None => Vec::new(),
        },
    })
}

/// The newest records of a workspace, newest first.
pub fn recent(conn: &Connection, workspace_id: &str, limit: u32) -> Result<Vec<RequestRecord>> {
    usage::recent_filtered(conn, workspace_id, &UsageFilter::default(), None, limit)
}

/// One record of a workspace; `None` both when it does not exist and when it belongs to another
/// workspace, so the two cannot be told apart.
pub fn get(
    conn: &Connection,
    workspace_id: &str,
    request_id: &str,
) -> Result<Option<RequestRecord>> {
    let sql = format!(
        "{SELECT} WHERE workspace_id = ?1 AND {}",
        stored_id::lookup(2)
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let [key, text] = stored_id::params_of(request_id);
    let mut rows = stmt.query_map(params![workspace_id, key, text], from_row)?;
    match rows.next() {
        Some(r) => Ok(Some(r?)),
        None => Ok(None),
    }
}

/// Deletes records older than `cutoff_us` with their attempts, and the rollups of the minutes
/// wholly before it; returns how many records went. See [`delete_older_than_batched`].
pub fn delete_older_than(conn: &Connection, cutoff_us: i64) -> Result<usize> {
    delete_older_than_batched(conn, cutoff_us, RETENTION_BATCH)
}

/// Rows one retention transaction deletes by default.
pub const RETENTION_BATCH: usize = 1000;

/// Retention that never holds the write lock for long: deletes records older than `cutoff_us`
/// (with their attempts), then the rollups of every minute that ends at or before the cutoff
/// (the minute holding the cutoff keeps its rollup), each in transactions of at most `batch`
/// rows. Between transactions it sleeps as long as the last one took (1–50 ms), so the recorder
/// gets the lock at least half the time. Blocking: run it on a blocking thread. Returns how many
/// records were deleted.
///
/// It goes one workspace at a time (those without one last), down the index that starts with
/// the workspace: since v15 no index orders the requests by time alone.
pub fn delete_older_than_batched(conn: &Connection, cutoff_us: i64, batch: usize) -> Result<usize> {
    let batch = i64::try_from(batch.max(1)).unwrap_or(i64::MAX);
    let mut deleted = 0;
    let mut after = None;
    while let Some(ws) = next_workspace(conn, &["requests"], after.as_deref())? {
        deleted += delete_requests_before(conn, Some(&ws), cutoff_us, batch)?;
        after = Some(ws);
    }
    deleted += delete_requests_before(conn, None, cutoff_us, batch)?;
    delete_rollups_before(conn, rollups::floor_minute(cutoff_us), batch)?;
    Ok(deleted)
}

/// Deletes the requests of workspace `ws` (`None`: those without one) older than `cutoff_us`,
/// `batch` rows a transaction, the oldest first; returns how many went.
fn delete_requests_before(
    conn: &Connection,
    ws: Option<&str>,
    cutoff_us: i64,
    batch: i64,
) -> Result<usize> {
    let mut deleted = 0;
    loop {
        let started = tokio::time::Instant::now();
        let tx = write_transaction(conn)?;
        let went = tx
            .prepare_cached(
                "DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests
                    WHERE workspace_id IS ?1 AND created_at_us < ?2
                    ORDER BY created_at_us LIMIT ?3)",
            )?
            .execute(params![ws, cutoff_us, batch])?;
        if went == 0 {
            return Ok(deleted);
        }
        deleted += went;
        tx.commit()?;
        yield_lock(started);
    }
}

/// Deletes the rollups of every minute before `minute_cutoff`, in both tiers, one workspace
/// at a time: the tiers are keyed by workspace first and have no index by time alone (v15).
fn delete_rollups_before(conn: &Connection, minute_cutoff: i64, batch: i64) -> Result<()> {
    let mut after = None;
    while let Some(ws) = next_workspace(conn, &["rollups", "rollups_hourly"], after.as_deref())? {
        delete_workspace_rollups_before(conn, &ws, minute_cutoff, batch)?;
        after = Some(ws);
    }
    Ok(())
}

/// The least workspace after `after` (the least of all when `None`) that any of `tables` holds
/// rows of: one step down each table's index or key that starts with the workspace, however
/// many rows a workspace has. Requests without a workspace are not among them.
fn next_workspace(
    conn: &Connection,
    tables: &[&str],
    after: Option<&str>,
) -> Result<Option<String>> {
    // Text sorts after NULL and every number, and '' before any other text.
    let (op, from) = match after {
        Some(after) => (">", after),
        None => (">=", ""),
    };
    let mins: Vec<String> = tables
        .iter()
        .map(|t| format!("SELECT min(workspace_id) AS w FROM {t} WHERE workspace_id {op} ?1"))
        .collect();
    let sql = format!("SELECT min(w) FROM ({})", mins.join(" UNION ALL "));
    Ok(conn.prepare_cached(&sql)?.query_row([from], |r| r.get(0))?)
}

/// [`delete_rollups_before`] for one workspace, a transaction per unit: as many whole hours as
/// hold at most `batch` minute rows (at least one hour, whatever it holds, so that no hour row
/// is ever left merging minutes that are gone), then the part of the hour holding the cutoff,
/// whose hour rows are rebuilt from the minutes it keeps. Each transaction leaves the
/// workspace's tiers agreeing, so a usage answer is the same whichever one served it.
fn delete_workspace_rollups_before(
    conn: &Connection,
    ws: &str,
    minute_cutoff: i64,
    batch: i64,
) -> Result<()> {
    loop {
        let started = tokio::time::Instant::now();
        let tx = write_transaction(conn)?;
        let oldest: Option<i64> = tx
            .prepare_cached("SELECT min(minute_us) FROM rollups WHERE workspace_id = ?1")?
            .query_row([ws], |r| r.get(0))?;
        let Some(oldest) = oldest.filter(|m| *m < minute_cutoff) else {
            // Hour rows whose minutes are all gone already (none while every deletion runs
            // here, but cheap to be sure of).
            tx.prepare_cached(
                "DELETE FROM rollups_hourly WHERE workspace_id = ?1 AND hour_us < ?2",
            )?
            .execute(params![ws, rollups::floor_hour(minute_cutoff)])?;
            tx.commit()?;
            break;
        };
        // The minute of the batch-th oldest rollup row; the unit ends at the last hour boundary
        // after the oldest hour and at or before the minute after it.
        let through: Option<i64> = tx
            .prepare_cached(
                "SELECT minute_us FROM rollups WHERE workspace_id = ?1 AND minute_us < ?2
                 ORDER BY minute_us LIMIT 1 OFFSET ?3",
            )?
            .query_row(params![ws, minute_cutoff, batch - 1], |r| r.get(0))
            .optional()?;
        let first_hour_end = rollups::floor_hour(oldest).saturating_add(rollups::HOUR_US);
        let end = match through {
            Some(m) => {
                rollups::floor_hour(m.saturating_add(rollups::MINUTE_US)).max(first_hour_end)
            }
            None => minute_cutoff,
        }
        .min(minute_cutoff);
        tx.prepare_cached("DELETE FROM rollups WHERE workspace_id = ?1 AND minute_us < ?2")?
            .execute(params![ws, end])?;
        let cut_hour = rollups::floor_hour(end);
        tx.prepare_cached("DELETE FROM rollups_hourly WHERE workspace_id = ?1 AND hour_us < ?2")?
            .execute(params![ws, cut_hour])?;
        if cut_hour < end {
            rollups::rebuild_hour_rows(&tx, ws, cut_hour)?;
        }
        tx.commit()?;
        yield_lock(started);
    }
    Ok(())
}

/// A transaction that takes the write lock at once (waiting out the busy timeout for it). A
/// deferred one that reads first would fail outright when the recorder commits in between, since
/// SQLite cannot upgrade a stale read snapshot to a write.
fn write_transaction(conn: &Connection) -> Result<Transaction<'_>> {
    Ok(Transaction::new_unchecked(
        conn,
        TransactionBehavior::Immediate,
    )?)
}

/// Sleeps as long as the transaction that started at `started` took, within 1–50 ms.
fn yield_lock(started: tokio::time::Instant) {
    let took = started.elapsed();
    std::thread::sleep(took.clamp(Duration::from_millis(1), Duration::from_millis(50)));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Store;
    use laptime_core::timeline::{Attempt, ConnectionMarks};

    /// Writes `records` as builds before schema v14 did: every field in its own column.
    pub(crate) fn insert_legacy_rows(tx: &Connection, records: &[RequestRecord]) {
        let mut req = tx.prepare_cached(
            "INSERT INTO requests (
                request_id, workspace_id, key_id, created_at_us, model, provider, channel, grp,
                dialect, stream, status, outcome, timeout_kind, error_class, classification, flags,
                auth_us, body_read_us, distribution_us, upstream_start_us, upstream_headers_us,
                first_byte_us, first_event_us, first_effective_us, first_visible_us,
                last_effective_us, upstream_done_us, handler_done_us,
                input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
                event_count, text_delta_count, channel_inflight, hedge, failover_count, cached,
                max_output_tokens, reasoning_effort, tool_count, tool_choice, response_format,
                temperature, top_p, region, trace_id, upstream_dialect, instance,
                cache_write_1h_tokens, cost_nano_usd, cost_estimated, admission_us, refused_by,
                endpoint, bytes_in, bytes_out, key_index, estimated_output_tokens, in_band,
                attempts)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31, ?32, ?33,
                ?34, ?35, ?36, ?37, ?38, ?39, ?40, ?41, ?42, ?43, ?44, ?45, ?46, ?47, ?48, ?49,
                ?50, ?51, ?52, ?53, ?54, ?55, ?56, ?57, ?58, ?59, ?60, ?61, ?62)
             ON CONFLICT (request_id) DO NOTHING",
        ).unwrap();
        for r in records {
            insert_legacy_row(&mut req, r).unwrap();
        }
    }

    /// One row as builds before schema v14 wrote it.
    fn insert_legacy_row(
        stmt: &mut rusqlite::CachedStatement<'_>,
        r: &RequestRecord,
    ) -> Result<usize> {
        let m = &r.marks;
        let flags =
            serde_json::to_string(&r.flags).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let attempts = (!r.attempts.is_empty()).then(|| crate::attempts::encode(&r.attempts));
        Ok(stmt.execute(params![
            r.request_id,
            r.workspace_id,
            r.key_id,
            r.created_at_us,
            r.model,
            r.provider,
            r.channel,
            r.group,
            r.dialect.as_str(),
            r.stream,
            r.status,
            r.outcome.as_str(),
            r.timeout_kind.map(|k| k.as_str()),
            r.error_class.map(|c| c.as_str()),
            r.classification.as_str(),
            flags,
            us(m.auth),
            us(m.body_read),
            us(m.distribution),
            us(m.upstream_start),
            us(m.upstream_headers),
            us(m.first_byte),
            us(m.first_event),
            us(m.first_effective),
            us(m.first_visible),
            us(m.last_effective),
            us(m.upstream_done),
            us(m.handler_done),
            tok(r.tokens.input),
            tok(r.tokens.output),
            tok(r.tokens.cache_read),
            tok(r.tokens.cache_write),
            tok(r.tokens.reasoning),
            r.event_count,
            r.text_delta_count,
            r.channel_inflight,
            r.hedge.as_str(),
            r.failover_count,
            r.cached,
            tok(r.shape.max_output_tokens),
            r.shape.reasoning_effort,
            r.shape.tool_count,
            r.shape.tool_choice,
            r.shape.response_format,
            r.shape.temperature,
            r.shape.top_p,
            r.region,
            r.trace_id,
            r.upstream_dialect.map(Dialect::as_str),
            r.instance,
            tok(r.tokens.cache_write_1h),
            r.cost.map(|c| nano(c.nano_usd)),
            r.cost.map(|c| c.estimated),
            us(m.admission),
            r.refused_by.map(|l| l.as_str()),
            r.exchange.endpoint.as_str(),
            tok(r.exchange.bytes_in),
            tok(r.exchange.bytes_out),
            r.exchange.key_index,
            tok(r.tokens.estimated_output),
            r.in_band.map(InBandCarrier::as_str),
            attempts,
        ])?)
    }

    pub(crate) fn sample(id: &str, ws: &str, created: i64) -> RequestRecord {
        let ms = |v: u64| Some(Duration::from_millis(v));
        RequestRecord {
            request_id: id.into(),
            workspace_id: Some(ws.into()),
            key_id: Some("tok_1".into()),
            created_at_us: created,
            model: Some("sim-fast".into()),
            provider: Some("sim".into()),
            channel: Some("sim".into()),
            group: Some("default".into()),
            dialect: Dialect::Messages,
            upstream_dialect: Some(Dialect::Messages),
            stream: true,
            status: 200,
            outcome: Outcome::Completed,
            timeout_kind: None,
            error_class: None,
            classification: laptime_core::slow::Classification::Ok,
            flags: vec![laptime_core::slow::Flag::Slow(
                laptime_core::slow::SlowStage::FirstEventSlow,
            )],
            marks: Marks {
                auth: Some(Duration::from_micros(12)),
                upstream_start: ms(1),
                upstream_headers: ms(5),
                first_byte: ms(6),
                first_event: ms(6),
                upstream_done: ms(9),
                handler_done: ms(10),
                ..Marks::default()
            },
            tokens: Tokens {
                input: Some(10),
                output: Some(16),
                ..Tokens::default()
            },
            event_count: 20,
            text_delta_count: 16,
            channel_inflight: Some(1),
            attempts: vec![Attempt {
                channel: "sim".into(),
                role: laptime_core::timeline::AttemptRole::Primary,
                won: true,
                status: Some(200),
                error_class: None,
                start: ms(1),
                headers: ms(5),
                first_byte: ms(6),
                end: ms(9),
                connection: ConnectionMarks::default(),
                span_id: None,
            }],
            hedge: Hedge::None,
            failover_count: 0,
            cached: false,
            shape: RequestShape {
                max_output_tokens: Some(64),
                temperature: Some(0.5),
                ..RequestShape::default()
            },
            region: None,
            instance: None,
            trace_id: Some("0af7651916cd43dd8448eb211c80319c".into()),
            cost: None,
            refused_by: None,
            exchange: Exchange::default(),
            in_band: None,
        }
    }

    #[test]
    fn a_record_reads_back_exactly_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let r = sample("req_1", "ws_a", 1_000);
        store
            .with_conn(|c| insert_batch(c, std::slice::from_ref(&r), &Zone::utc()))
            .unwrap();
        let back = store.with_conn(|c| get(c, "ws_a", "req_1")).unwrap();
        assert_eq!(back, Some(r));
    }

    #[test]
    fn another_workspace_cannot_read_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store
            .with_conn(|c| insert_batch(c, &[sample("req_1", "ws_a", 1)], &Zone::utc()))
            .unwrap();
        assert_eq!(store.with_conn(|c| get(c, "ws_b", "req_1")).unwrap(), None);
        assert!(store
            .with_conn(|c| recent(c, "ws_b", 10))
            .unwrap()
            .is_empty());
    }

    #[test]
    fn recent_is_newest_first_and_limited() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let batch: Vec<_> = (0..5)
            .map(|i| sample(&format!("req_{i}"), "ws_a", i64::from(i) * 10))
            .collect();
        store
            .with_conn(|c| insert_batch(c, &batch, &Zone::utc()))
            .unwrap();
        let got = store.with_conn(|c| recent(c, "ws_a", 3)).unwrap();
        let ids: Vec<_> = got.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["req_4", "req_3", "req_2"]);
        assert_eq!(got[0].attempts.len(), 1);
    }

    /// Rows written before v14 (each field in its column) and after (most fields packed) live
    /// side by side in one table, and each reads back as the record it was written from.
    #[test]
    fn rows_of_either_layout_read_back_as_written() {
        use crate::packed::tests::{full, sparse};
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let mut old = full();
        old.request_id = "req_old".into();
        old.tokens.estimated_output = Some(i64::MAX as u64);
        let mut new = full();
        new.request_id = "req_new".into();
        let mut bare = sparse();
        bare.request_id = "req_bare".into();
        bare.workspace_id.clone_from(&old.workspace_id);
        let ws = old.workspace_id.clone().unwrap();
        let all = [&old, &new, &bare];
        store
            .with_conn(|c| {
                insert_legacy_rows(c, std::slice::from_ref(&old));
                insert_batch(c, &[new.clone(), bare.clone()], &Zone::utc())?;
                let packed: i64 = c.query_row(
                    "SELECT count(*) FROM requests WHERE packed IS NOT NULL",
                    [],
                    |r| r.get(0),
                )?;
                assert_eq!(packed, 2);
                for r in all {
                    assert_eq!(get(c, &ws, &r.request_id)?.as_ref(), Some(r));
                }
                let recent = recent(c, &ws, 10)?;
                assert_eq!(recent.len(), 3);
                for r in &recent {
                    assert_eq!(
                        Some(r),
                        all.into_iter().find(|w| w.request_id == r.request_id)
                    );
                }
                Ok(())
            })
            .unwrap();
    }

    /// The wall clock in unix milliseconds.
    pub(crate) fn now_ms() -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        i64::try_from(since.as_millis()).unwrap()
    }

    #[test]
    fn a_gateway_id_is_found_once_whether_its_row_holds_it_as_text_or_as_bytes() {
        use crate::packed::tests::full;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        // Written as text before v15, and as bytes since.
        let mut old = full();
        old.request_id = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e6f".into();
        // The most the older columns held.
        old.tokens.estimated_output = Some(i64::MAX as u64);
        let mut new = full();
        new.request_id = "req_0190f3a2b4c5d6e7f8091a2b3c4d5e70".into();
        let ws = old.workspace_id.clone().unwrap();
        store
            .with_conn(|c| {
                insert_legacy_rows(c, std::slice::from_ref(&old));
                // The store moves to bytes after the older row, as v15 does on a store with rows.
                c.execute_batch(crate::schema::V15)?;
                insert_batch(c, std::slice::from_ref(&new), &Zone::utc())?;
                let types: Vec<String> = c
                    .prepare("SELECT typeof(request_id) FROM requests ORDER BY rowid")?
                    .query_map([], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?;
                assert_eq!(types, ["text", "blob"]);
                for r in [&old, &new] {
                    assert_eq!(get(c, &ws, &r.request_id)?.as_ref(), Some(r));
                    assert_eq!(stored(c, &r.request_id)?.as_ref(), Some(r));
                }
                // A replay of either is not written again.
                let written = insert_absent(c, &[old.clone(), new.clone()], &Zone::utc())?;
                assert!(written.is_empty(), "{written:?}");
                // Written again, the old row is replaced (not doubled), now as bytes.
                let mut again = old.clone();
                again.status = 599;
                insert_batch(c, std::slice::from_ref(&again), &Zone::utc())?;
                let rows: Vec<(String, i64)> = c
                    .prepare("SELECT typeof(request_id), status FROM requests ORDER BY rowid")?
                    .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<_>>()?;
                assert_eq!(
                    rows,
                    [("blob".into(), i64::from(new.status)), ("blob".into(), 599)]
                );
                assert_eq!(get(c, &ws, &old.request_id)?, Some(again));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn retention_deletes_old_rows_and_their_attempts() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store
            .with_conn(|c| {
                insert_batch(
                    c,
                    &[sample("old", "ws", 5), sample("new", "ws", 50)],
                    &Zone::utc(),
                )
            })
            .unwrap();
        let n = store.with_conn(|c| delete_older_than(c, 10)).unwrap();
        assert_eq!(n, 1);
        let rows: i64 = store
            .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(rows, 1);
        let kept = store.with_conn(|c| get(c, "ws", "new")).unwrap().unwrap();
        assert_eq!(kept.attempts.len(), 1);
    }

    #[test]
    fn a_replay_writes_only_the_records_not_stored_and_never_replaces_one() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let ended = sample("req_1", "ws_a", 1_000);
        store
            .with_conn(|c| insert_batch(c, std::slice::from_ref(&ended), &Zone::utc()))
            .unwrap();
        // The journal still had req_1 in flight, and req_2 (twice) that never reached the store.
        let mut stale = sample("req_1", "ws_a", 1_000);
        stale.outcome = Outcome::GatewayCrashed;
        let mut crashed = sample("req_2", "ws_a", 2_000);
        crashed.outcome = Outcome::GatewayCrashed;
        let replay = [stale, crashed.clone(), crashed.clone()];
        assert_eq!(
            store
                .with_conn(|c| insert_absent(c, &replay, &Zone::utc()))
                .unwrap(),
            ["req_2"]
        );
        assert!(store
            .with_conn(|c| insert_absent(c, &replay, &Zone::utc()))
            .unwrap()
            .is_empty());
        let got = |id: &str| store.with_conn(|c| get(c, "ws_a", id)).unwrap();
        assert_eq!(got("req_1"), Some(ended));
        assert_eq!(got("req_2"), Some(crashed));
        let rows: i64 = store
            .with_conn(|c| Ok(c.query_row("SELECT count(*) FROM requests", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(rows, 2);
    }
}
