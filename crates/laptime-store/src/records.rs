//! Request records: one row per request, its upstream calls (attempts) inside it.

use std::collections::HashSet;
use std::time::Duration;

use laptime_core::endpoint::Endpoint;
use laptime_core::limit::Zone;
use laptime_core::timeline::RequestRecord;
use laptime_core::Dialect;
use rusqlite::types::Value;
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
        let mut stored = tx.prepare_cached("SELECT 1 FROM requests WHERE request_id = ?1")?;
        let mut seen = HashSet::new();
        for r in records {
            if seen.insert(r.request_id.as_str())
                && !stored.exists([stored_id::key(&r.request_id)])?
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
        let codes = Codes::of(tx, records)?;
        let mut req = tx.prepare_cached(&insert_sql("requests"))?;
        for r in records {
            if insert_row(&mut req, &codes, r)? == 0 {
                // The id is taken: replace the old row, and rebuild both its rollup and ours.
                let old = get_row(tx, &r.request_id)?;
                rebuild.extend(old.as_ref().and_then(RollupKey::of));
                replaced.extend(old);
                rebuild.extend(RollupKey::of(r));
                tx.prepare_cached("DELETE FROM requests WHERE request_id = ?1")?
                    .execute([stored_id::key(&r.request_id)])?;
                insert_row(&mut req, &codes, r)?;
            }
        }
    }
    Ok((rebuild, replaced))
}

/// A request's row since schema v19 (v14 packed the fields no query filters, groups or sorts
/// on; v19 dropped the columns that held them before): the columns queries use, the key id and
/// the instance, then the packed fields ([`crate::packed`]). The names, the workspace, the key
/// id and the instance are codes ([`crate::names`]), the outcome and the classification
/// numbers ([`crate::closed`]), the ids the gateway makes their bytes ([`stored_id`]).
pub(crate) const COLUMNS: &str = "request_id, workspace_id, created_at_us, model, provider, \
    channel, grp, dialect, stream, status, outcome, classification, endpoint, input_tokens, \
    max_output_tokens, reasoning_effort, tool_count, region, key_id, instance, packed";

/// The statement that writes a row of [`COLUMNS`] into `table` unless its id is there.
pub(crate) fn insert_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, \
         ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21) ON CONFLICT (request_id) DO NOTHING"
    )
}

/// Inserts one request row unless its id exists, its names as `codes` has them; returns the
/// rows inserted (0 or 1).
pub(crate) fn insert_row(
    stmt: &mut rusqlite::CachedStatement<'_>,
    codes: &Codes,
    r: &RequestRecord,
) -> Result<usize> {
    let [model, provider, channel, group, dialect, endpoint, region] =
        names::names_of(r).map(|name| codes.value(name));
    Ok(stmt.execute(params![
        stored_id::key(&r.request_id),
        codes.value(r.workspace_id.as_deref()),
        r.created_at_us,
        model,
        provider,
        channel,
        group,
        dialect,
        r.stream,
        r.status,
        crate::closed::outcome_code(r.outcome),
        crate::closed::classification_code(r.classification),
        endpoint,
        tok(r.tokens.input),
        tok(r.shape.max_output_tokens),
        r.shape.reasoning_effort,
        r.shape.tool_count,
        region,
        codes.value(r.key_id.as_deref()),
        codes.value(r.instance.as_deref()),
        crate::packed::encode_without_key_and_instance(r),
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
    let mut stmt = conn.prepare_cached(&format!("{SELECT} WHERE request_id = ?1"))?;
    Ok(stmt
        .query_row([stored_id::key(request_id)], from_row)
        .optional()?)
}

/// The columns [`from_row`] reads, in the order of [`COLUMNS`]; the coded columns read back
/// as their names ([`crate::names`]).
pub(crate) const SELECT: &str = concat!(
    "SELECT request_id, ",
    named!("workspace_id"),
    ", created_at_us, ",
    named!("model"),
    ", ",
    named!("provider"),
    ", ",
    named!("channel"),
    ", ",
    named!("grp"),
    ", ",
    named!("dialect"),
    ", stream, status, outcome, classification, ",
    named!("endpoint"),
    ", input_tokens, max_output_tokens, reasoning_effort, tool_count, ",
    named!("region"),
    ", ",
    named!("key_id"),
    ", ",
    named!("instance"),
    ", packed FROM requests"
);

pub(crate) fn corrupt(what: &str, v: &str) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(
        0,
        rusqlite::types::Type::Text,
        Box::new(StoreError::Corrupt(format!("{what}: {v}"))),
    )
}

/// Column 0 of `row`, the request id in either of its stored forms ([`stored_id`]).
pub(crate) fn request_id(row: &Row<'_>) -> rusqlite::Result<String> {
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
pub(crate) fn named<T>(
    row: &Row<'_>,
    i: usize,
    what: &str,
    parse: fn(&str) -> Option<T>,
) -> rusqlite::Result<T> {
    let v: String = row.get(i)?;
    parse(&v).ok_or_else(|| corrupt(what, &v))
}

/// Column `i` of `row`, a closed set's stored number ([`crate::closed`]).
fn numbered<T>(
    row: &Row<'_>,
    i: usize,
    what: &str,
    parse: fn(i64) -> Option<T>,
) -> rusqlite::Result<T> {
    let v: i64 = row.get(i)?;
    parse(v).ok_or_else(|| corrupt(what, &v.to_string()))
}

/// A record from a row of [`SELECT`].
pub(crate) fn from_row(row: &Row<'_>) -> rusqlite::Result<RequestRecord> {
    let columns = crate::packed::Columns {
        request_id: request_id(row)?,
        workspace_id: row.get(1)?,
        created_at_us: row.get(2)?,
        model: row.get(3)?,
        provider: row.get(4)?,
        channel: row.get(5)?,
        group: row.get(6)?,
        dialect: named(row, 7, "dialect", Dialect::parse)?,
        stream: row.get(8)?,
        status: row.get(9)?,
        outcome: numbered(row, 10, "outcome", crate::closed::outcome_of)?,
        classification: numbered(row, 11, "classification", crate::closed::classification_of)?,
        endpoint: named(row, 12, "endpoint", Endpoint::parse)?,
        input_tokens: untok(row.get(13)?),
        max_output_tokens: untok(row.get(14)?),
        reasoning_effort: row.get(15)?,
        tool_count: row.get(16)?,
        region: row.get(17)?,
    };
    let packed = row.get_ref(20)?.as_blob()?;
    let mut r = crate::packed::record(columns, packed).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(20, rusqlite::types::Type::Blob, Box::new(e))
    })?;
    // Not in the packed value ([`crate::packed::encode_without_key_and_instance`]).
    (r.key_id, r.instance) = (row.get(18)?, row.get(19)?);
    Ok(r)
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
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT} WHERE workspace_id = ?1 AND request_id = ?2"
    ))?;
    let ws = names::stored(conn, workspace_id)?;
    let mut rows = stmt.query_map(params![ws, stored_id::key(request_id)], from_row)?;
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
    while let Some(ws) = next_workspace(conn, &["requests"], after.as_ref())? {
        deleted += delete_requests_before(conn, Some(&ws), cutoff_us, batch)?;
        after = Some(ws);
    }
    deleted += delete_requests_before(conn, None, cutoff_us, batch)?;
    delete_rollups_before(conn, rollups::floor_minute(cutoff_us), batch)?;
    Ok(deleted)
}

/// Deletes the requests of workspace `ws` as stored (`None`: those without one) older than
/// `cutoff_us`, `batch` rows a transaction, the oldest first; returns how many went.
fn delete_requests_before(
    conn: &Connection,
    ws: Option<&Value>,
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
    while let Some(ws) = next_workspace(conn, &["rollups", "rollups_hourly"], after.as_ref())? {
        // The rollups hold the workspace as text ([`crate::names`]).
        if let Value::Text(name) = &ws {
            delete_workspace_rollups_before(conn, name, minute_cutoff, batch)?;
        }
        after = Some(ws);
    }
    Ok(())
}

/// The least workspace, as stored, after `after` (the least of all when `None`) that any of
/// `tables` holds rows of: one step down each table's index or key that starts with the
/// workspace, however many rows a workspace has. Requests without a workspace are not among
/// them.
fn next_workspace(
    conn: &Connection,
    tables: &[&str],
    after: Option<&Value>,
) -> Result<Option<Value>> {
    // Text sorts after NULL and every number, '' before any other text, and a blob (a code)
    // after every text.
    let empty = Value::Text(String::new());
    let (op, from) = match after {
        Some(after) => (">", after),
        None => (">=", &empty),
    };
    let mins: Vec<String> = tables
        .iter()
        .map(|t| format!("SELECT min(workspace_id) AS w FROM {t} WHERE workspace_id {op} ?1"))
        .collect();
    let sql = format!("SELECT min(w) FROM ({})", mins.join(" UNION ALL "));
    Ok(conn
        .prepare_cached(&sql)?
        .query_row([from], |r| r.get::<_, Option<Value>>(0))?
        .filter(|v| *v != Value::Null))
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
    use laptime_core::timeline::{
        Attempt, ConnectionMarks, Exchange, Hedge, InBandCarrier, Marks, Outcome, RequestShape,
    };
    use laptime_core::usage::Tokens;

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

    /// The wall clock in unix milliseconds.
    pub(crate) fn now_ms() -> i64 {
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        i64::try_from(since.as_millis()).unwrap()
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
