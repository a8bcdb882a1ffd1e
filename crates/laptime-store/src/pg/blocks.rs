//! Finished days of the request log as blocks: a workspace's requests of one day, 512 at a time
//! in the log's order (`created_at_us, seq`), in one row of `request_blocks` that holds an
//! array for each column of a request row.
//!
//! Why: a request as a row pays fixed parts whatever it holds (a header of about 32 bytes with
//! its null map, a line pointer, an entry in each of two indexes): at 10 M requests the rows
//! took 210 B a request, the primary key 50 B and the workspace index 41 B. A block pays them
//! once for 512 requests, and its arrays, stored out of line, compress (89 B a request at
//! 10 M; see the README's sizing). Only
//! days that have ended are packed ([`super::compact`]), each once, so blocks are written once
//! and the blocks of a workspace never overlap in the log's order.
//!
//! What stays a row: a request without a workspace (no workspace's log reads it), one whose id
//! the gateway did not make or whose creation time lies more than [`ID_SLACK_US`] from the
//! time its id begins with (a lookup by id finds its block by that time), a row of the layout
//! before v9.
//!
//! Reads take rows and blocks: a lookup by id the blocks around its id's time ([`get`]); the
//! log the blocks of its window, newest first, merged with the rows ([`recent`], [`probe`]).
//!
//! Writes: a record whose request a block holds (a late replacement, a journal replayed into a
//! packed day) first takes the blocks of its minute back into rows ([`unpack_holding`]), so
//! that replacing it and rebuilding its minute's rollups work on rows, as on any other day. A
//! writer looks for blocks only while it holds the `ROW EXCLUSIVE` lock of the day's partition
//! (the lock an insert takes), which the packer's `SHARE` lock excludes: a day is packed either
//! before the writer looks or after it commits.

use std::collections::{BTreeSet, HashSet};

use deadpool_postgres::{GenericClient, Transaction};
use laptime_core::timeline::RequestRecord;
use tokio_postgres::types::ToSql;

use super::records::{from_row, partition_name, select_list, COLUMNS, DAY_US, READ_COLUMNS, SEQ};
use crate::rollups::{floor_minute, MINUTE_US};
use crate::Result;

/// Requests a block holds, at most.
const BLOCK_ROWS: i64 = 512;

/// How far a packed request's creation time may lie from the time its id begins with.
pub(super) const ID_SLACK_US: i64 = 2_000_000;

/// The columns of a request row that a block holds, as arrays of the same names: every column
/// rows are written with but the workspace (the block's own), then `seq`.
fn columns() -> impl Iterator<Item = &'static str> {
    COLUMNS
        .iter()
        .copied()
        .filter(|c| *c != "workspace_id")
        .chain(["seq"])
}

fn column_list(prefix: &str) -> String {
    columns()
        .map(|c| format!("{prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `WHERE` condition of the rows of a partition that blocks may hold.
fn packable() -> String {
    format!(
        "workspace_id IS NOT NULL AND packed IS NOT NULL
         AND length(request_id) = 17 AND get_byte(request_id, 0) = 0
         AND abs(('x' || encode(substring(request_id FROM 2 FOR 6), 'hex'))::bit(48)::int8
                 * 1000 - created_at_us) <= {ID_SLACK_US}"
    )
}

/// Packs the rows of `partition` that blocks may hold into blocks and deletes them; returns how
/// many rows went into how many blocks. The caller holds the partition's `SHARE` lock, so that
/// both statements see the same rows.
pub(super) async fn pack_partition(tx: &Transaction<'_>, partition: &str) -> Result<(u64, u64)> {
    let arrays: Vec<String> = columns()
        .map(|c| format!("array_agg({c} ORDER BY created_at_us, seq)"))
        .collect();
    let packable = packable();
    let blocks = tx
        .execute(
            &format!(
                "INSERT INTO request_blocks (workspace_id, first_us, first_seq, last_us, n, {})
                 SELECT workspace_id, min(created_at_us),
                        (array_agg(seq ORDER BY created_at_us, seq))[1],
                        max(created_at_us), count(*), {}
                 FROM (SELECT *, (row_number() OVER (PARTITION BY workspace_id
                                    ORDER BY created_at_us, seq) - 1) / {BLOCK_ROWS} AS block
                       FROM {partition} WHERE {packable}) r
                 GROUP BY workspace_id, block",
                column_list(""),
                arrays.join(", ")
            ),
            &[],
        )
        .await?;
    let rows = tx
        .execute(&format!("DELETE FROM {partition} WHERE {packable}"), &[])
        .await?;
    Ok((rows, blocks))
}

/// The columns [`select_list`] reads that blocks do not hold (nor any row written since v9),
/// as NULL.
fn absent() -> String {
    let held: Vec<&str> = columns().collect();
    READ_COLUMNS
        .iter()
        .filter(|c| **c != "workspace_id" && !held.contains(c))
        .map(|c| format!("NULL AS {c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The requests of the blocks that `picked` (a condition on the blocks, as `b`) selects, as a
/// table named `requests` with every column [`select_list`] reads.
fn source(picked: &str) -> String {
    format!(
        "(SELECT b.workspace_id, u.*, {} FROM request_blocks b
          CROSS JOIN LATERAL unnest({}) AS u({}) WHERE {picked}) AS requests",
        absent(),
        column_list("b."),
        column_list("")
    )
}

/// As [`source`], only the newest `limit` (a parameter) requests that meet `conditions` (terms
/// on a table named `requests`, as [`crate::usage::push_filter`] writes them). The filter and
/// the order unnest, for every picked block, only the arrays they name (with the time and
/// `seq`). The others, most of a block's bytes (at 10 M the ids and packed fields were 672 MB
/// of 886), are read only for the blocks that hold a request kept: each array once, as a slice
/// (`[:]`, a plain copy, so that taking the kept requests' elements does not decompress it
/// again for each; materialized, so that the planner does not evaluate it for each). Measured
/// at 10 M, a filter over 16 blocks: unnesting every array of the blocks with a request kept
/// took 32 of 37 ms.
fn newest_source(picked: &str, conditions: &str, limit: &str) -> String {
    let named: HashSet<&str> = conditions
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    let sought = |c: &str| c == "created_at_us" || c == "seq" || named.contains(c);
    let list = |prefix: &str, wanted: bool| {
        columns()
            .filter(|c| sought(c) == wanted)
            .map(|c| format!("{prefix}{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let rest = |form: &str| {
        columns()
            .filter(|c| !sought(c))
            .map(|c| form.replace("{c}", c))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "(WITH hits AS (
            SELECT * FROM (SELECT b.workspace_id, b.first_us AS block_us,
                                  b.first_seq AS block_seq, u.*
                           FROM request_blocks b CROSS JOIN LATERAL
                           unnest({}) WITH ORDINALITY AS u({}, i) WHERE {picked}) AS requests
            WHERE true{conditions} ORDER BY created_at_us DESC, seq DESC LIMIT {limit}),
         kept AS MATERIALIZED (
            SELECT k.*, {} FROM (SELECT DISTINCT workspace_id, block_us, block_seq FROM hits) k
            JOIN request_blocks b ON (b.workspace_id, b.first_us, b.first_seq)
                                   = (k.workspace_id, k.block_us, k.block_seq))
          SELECT h.*, {}, {} FROM hits h JOIN kept ON (h.workspace_id, h.block_us, h.block_seq)
                         = (kept.workspace_id, kept.block_us, kept.block_seq)) AS requests",
        list("b.", true),
        list("", true),
        rest("b.{c}[:] AS {c}"),
        rest("kept.{c}[h.i] AS {c}"),
        absent(),
    )
}

const WORKSPACE: &str = "b.workspace_id = (SELECT id FROM names WHERE value = $1)";

/// When the workspace (`$1`) has blocks, the time its newest one ends (a workspace's blocks
/// never overlap, so the one that begins last), else NULL: one step down the primary key, for
/// a statement over rows to say whether blocks could hold anything newer.
pub(super) const NEWEST_END: &str = "(SELECT b.last_us FROM request_blocks b
    WHERE b.workspace_id = (SELECT id FROM names WHERE value = $1)
    ORDER BY b.first_us DESC, b.first_seq DESC LIMIT 1)";

/// The condition on a workspace's blocks (`$1`) that they begin no earlier than the newest one
/// that begins at or before `from` (a parameter): with those after it, the only ones that may
/// hold a request from `from` on, a workspace's blocks never overlapping. A bound on `first_us`
/// alone, so that a scan of the primary key stops at it (`last_us >= from` scanned a day's
/// blocks: 1 ms a page of the log at 10 M).
fn reaching(from: &str) -> String {
    format!(
        "b.first_us >= COALESCE((SELECT max(x.first_us) FROM request_blocks x
             WHERE x.workspace_id = (SELECT id FROM names WHERE value = $1)
               AND x.first_us <= {from}), {from})"
    )
}

/// The request of a workspace a block holds under `request_id` (the newest, should two share
/// it), looked for in the blocks around the time the id begins with.
pub(super) async fn get(
    c: &impl GenericClient,
    workspace_id: &str,
    request_id: &str,
) -> Result<Option<RequestRecord>> {
    let Some(made) = crate::stored_id::made_at_us(request_id) else {
        return Ok(None);
    };
    let (from, to) = (made - ID_SLACK_US, made + ID_SLACK_US);
    let sql = format!(
        "SELECT {} FROM {} WHERE requests.request_id = $2
         ORDER BY created_at_us DESC LIMIT 1",
        select_list(),
        source(&format!(
            "{WORKSPACE} AND b.first_us <= $4 AND {} AND $2 = ANY(b.request_id)",
            reaching("$3")
        ))
    );
    let stmt = c.prepare_cached(&sql).await?;
    let id = crate::stored_id::pg_key(request_id);
    match c
        .query_opt(&stmt, &[&workspace_id, &id, &from, &to])
        .await?
    {
        Some(row) => Ok(Some(from_row(&row)?)),
        None => Ok(None),
    }
}

/// The log's query of rows for one page of blocks: the conditions and values of
/// `super::usage::recent_rows` (`$1` the workspace, `$2`/`$3` the window, then its filters),
/// `limit` the next value.
pub(super) struct Query<'a> {
    pub conditions: &'a str,
    pub values: &'a [Box<dyn ToSql + Sync + Send>],
    pub window: (i64, i64),
    pub limit: u32,
}

/// Adds to `found` (with their `seq`) the newest requests of the workspace's blocks that meet
/// `q`: at least every one of them newer than the `limit`-th newest of `found` and of their
/// own, so that the `limit` newest of `found` are then those of rows and blocks together.
/// Reads pages of blocks newest first, one block, then twice as many each time.
pub(super) async fn recent(
    c: &impl GenericClient,
    q: &Query<'_>,
    found: &mut Vec<(RequestRecord, i64)>,
) -> Result<()> {
    let (from, to) = q.window;
    let pages = c
        .prepare_cached(&format!(
            "SELECT first_us, first_seq FROM request_blocks b WHERE {WORKSPACE}
               AND b.first_us < $3 AND {}
               AND (b.first_us, b.first_seq) < ($4, $5)
             ORDER BY b.first_us DESC, b.first_seq DESC LIMIT $6",
            reaching("$2")
        ))
        .await?;
    let n = q.values.len();
    let picked = format!(
        "{WORKSPACE} AND (b.first_us, b.first_seq) >= (${}, ${})
         AND (b.first_us, b.first_seq) <= (${}, ${})",
        n + 2,
        n + 3,
        n + 4,
        n + 5
    );
    let sql = format!(
        "SELECT {}, requests.seq FROM {} ORDER BY created_at_us DESC, seq DESC",
        select_list(),
        newest_source(&picked, q.conditions, &format!("${}", n + 1)),
    );
    let rows_stmt = c.prepare_cached(&sql).await?;
    let workspace = q.values.first().map(|v| &**v as &(dyn ToSql + Sync));
    let Some(workspace) = workspace else {
        return Ok(());
    };
    let mut before = (i64::MAX, i64::MAX);
    let mut page: i64 = 1;
    let mut taken = 0_usize;
    loop {
        let keys: Vec<(i64, i64)> = c
            .query(
                &pages,
                &[workspace, &from, &to, &before.0, &before.1, &page],
            )
            .await?
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
            .collect::<Result<_>>()?;
        let (Some(newest), Some(oldest)) = (keys.first(), keys.last()) else {
            return Ok(());
        };
        let limit = i64::from(q.limit);
        let mut params: Vec<&(dyn ToSql + Sync)> = q.values.iter().map(|v| &**v as _).collect();
        params.extend([
            &limit as &(dyn ToSql + Sync),
            &oldest.0,
            &oldest.1,
            &newest.0,
            &newest.1,
        ]);
        for row in c.query(&rows_stmt, &params).await? {
            found.push((from_row(&row)?, row.try_get(SEQ)?));
            taken += 1;
        }
        // Older blocks hold only older requests than every one taken.
        if taken >= q.limit as usize || (keys.len() as i64) < page {
            return Ok(());
        }
        before = *oldest;
        page = (page * 2).min(32);
    }
}

/// The time from which on the workspace's blocks hold at least `look` requests of `window`
/// (newest first, counted by whole blocks); `None` when they hold fewer.
pub(super) async fn probe(
    c: &impl GenericClient,
    workspace_id: &str,
    (from, to): (i64, i64),
    look: i64,
) -> Result<Option<i64>> {
    let stmt = c
        .prepare_cached(&format!(
            "SELECT first_us FROM (
                SELECT b.first_us, sum(b.n) OVER (ORDER BY b.first_us DESC, b.first_seq DESC)
                    AS total
                FROM request_blocks b WHERE {WORKSPACE}
                  AND b.first_us < $3 AND {}) t
             WHERE total >= $4 LIMIT 1",
            reaching("$2")
        ))
        .await?;
    Ok(c.query_opt(&stmt, &[&workspace_id, &from, &to, &look])
        .await?
        .map(|r| r.try_get(0))
        .transpose()?)
}

/// Takes the `ROW EXCLUSIVE` lock of the partition of each day of `records`, in the order of
/// days, as an insert would: from then on no day of theirs is packed until the transaction
/// ends, and a day packed before shows its blocks.
pub(super) async fn lock_days(tx: &Transaction<'_>, records: &[RequestRecord]) -> Result<()> {
    let days: BTreeSet<i64> = records
        .iter()
        .map(|r| r.created_at_us.div_euclid(DAY_US))
        .collect();
    for day in days {
        tx.batch_execute(&format!(
            "LOCK TABLE {} IN ROW EXCLUSIVE MODE",
            partition_name(day)
        ))
        .await?;
    }
    Ok(())
}

/// The requests of `records` that blocks hold, as (stored id, `created_at_us`).
pub(super) async fn held(
    c: &impl GenericClient,
    records: &[RequestRecord],
) -> Result<HashSet<(Vec<u8>, i64)>> {
    let times = records.iter().map(|r| r.created_at_us);
    let (Some(first), Some(last)) = (times.clone().min(), times.clone().max()) else {
        return Ok(HashSet::new());
    };
    // A block lies within a day: one that reaches `first` ends before a day after `last`.
    let before = last.saturating_add(DAY_US);
    // Asked first without the batch's ids: binding them cost 3 ms a batch of 8,000, and a
    // batch of the current day meets no block.
    let any = c
        .prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM request_blocks
                            WHERE last_us >= $1 AND last_us < $2 AND first_us <= $3)",
        )
        .await?;
    if !c
        .query_one(&any, &[&first, &before, &last])
        .await?
        .try_get::<_, bool>(0)?
    {
        return Ok(HashSet::new());
    }
    let ids: Vec<Vec<u8>> = records
        .iter()
        .map(|r| crate::stored_id::pg_key(&r.request_id))
        .collect();
    let created: Vec<i64> = times.collect();
    let stmt = c
        .prepare_cached(
            "SELECT u.id, u.created FROM request_blocks b
             CROSS JOIN LATERAL unnest(b.request_id, b.created_at_us) AS u(id, created)
             WHERE b.last_us >= $1 AND b.last_us < $2 AND b.first_us <= $3
               AND b.request_id && $4::bytea[]
               AND (u.id, u.created) IN (SELECT * FROM unnest($4::bytea[], $5::int8[]))",
        )
        .await?;
    c.query(&stmt, &[&first, &before, &last, &ids, &created])
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect()
}

/// Takes back into rows every block that overlaps the minute of a request of `records` that a
/// block holds, so that it is replaced, and its minute's rollups rebuilt, from rows. The
/// caller holds the days' locks ([`lock_days`]).
pub(super) async fn unpack_holding(tx: &Transaction<'_>, records: &[RequestRecord]) -> Result<()> {
    let minutes: BTreeSet<i64> = held(tx, records)
        .await?
        .into_iter()
        .map(|(_, created)| floor_minute(created))
        .collect();
    for minute in minutes {
        unpack(tx, minute, minute.saturating_add(MINUTE_US)).await?;
    }
    Ok(())
}

/// Takes every block that ends at or after `from` and begins before `to` back into rows (with
/// `from == to`: those holding requests on both sides of it), in one statement, so that of two
/// at once one takes a block.
async fn unpack(c: &impl GenericClient, from: i64, to: i64) -> Result<()> {
    let stmt = c
        .prepare_cached(&format!(
            "WITH gone AS (DELETE FROM request_blocks
                           WHERE last_us >= $1 AND last_us < $3 AND first_us < $2 RETURNING *)
             INSERT INTO requests (workspace_id, {})
             SELECT g.workspace_id, u.* FROM gone g
             CROSS JOIN LATERAL unnest({}) AS u({})",
            column_list(""),
            column_list("g."),
            column_list("")
        ))
        .await?;
    let before = to.saturating_add(DAY_US);
    c.execute(&stmt, &[&from, &to, &before]).await?;
    Ok(())
}

/// Retention of blocks: takes those holding requests on both sides of `cutoff_us` back into
/// rows (the caller deletes the rows before it), and deletes those wholly before it; returns
/// how many requests the deleted ones held.
pub(super) async fn delete_before(c: &impl GenericClient, cutoff_us: i64) -> Result<u64> {
    unpack(c, cutoff_us, cutoff_us).await?;
    delete_ending(c, i64::MIN, cutoff_us).await
}

/// Deletes the blocks whose last request lies in `[from, to)` (a day's, when its partition is
/// dropped); returns how many requests they held.
pub(super) async fn delete_ending(c: &impl GenericClient, from: i64, to: i64) -> Result<u64> {
    let n: i64 = c
        .query_one(
            "WITH gone AS (DELETE FROM request_blocks
                           WHERE last_us >= $1 AND last_us < $2 RETURNING n)
             SELECT COALESCE(sum(n), 0)::int8 FROM gone",
            &[&from, &to],
        )
        .await?
        .try_get(0)?;
    Ok(u64::try_from(n).unwrap_or(0))
}
