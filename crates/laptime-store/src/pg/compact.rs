//! Packs a day that has ended: its requests into blocks ([`super::blocks`]), then its
//! partition rewritten with only the rows that stay rows; one day per pass.
//!
//! Why: a finished day takes (almost) no more writes, and its requests as rows with their two
//! indexes took 301 B each at 10 M requests, as blocks a fraction of it (see the README's
//! sizing). Deleting the packed rows alone would free nothing: a partition keeps its pages
//! until it is rewritten, and an old day gets no new rows to reuse them.
//!
//! How: one transaction takes the partition's `SHARE` lock (writers of that day wait, readers
//! go on), packs its rows into blocks, deletes them and marks the day [`PACKED`]: a reader sees
//! the rows or the blocks, never both nor neither. Then `VACUUM FULL` rewrites the partition
//! (its `ACCESS EXCLUSIVE` lock makes readers of that day wait for a rewrite of the few rows
//! left; it gives up after [`LOCK_WAIT`] behind others), and `ANALYZE`. The rewrite would have
//! to keep the deleted rows while a transaction older than the pack could still read them, so
//! the pass first waits (up to [`LOCK_WAIT`]) for those to end, and leaves the rewrite to the
//! next pass when they do not; one that dropped the rows marks the day [`DONE`]. One instance at
//! a time packs (a session advisory lock, tried, never waited for), the newest day not done
//! first, since it will be kept longest. A day an older build marked (its indexes rebuilt) is
//! packed as any other; invalid indexes its cut rebuilds left are dropped first.

use std::time::Duration;

use deadpool_postgres::ClientWrapper;

use super::records::{day_partitions, DAY_US};
use crate::Result;

/// How long after its day ends a partition is packed: late records of the day (batches the
/// recorder retries, clocks a little behind) have come by then.
pub const GRACE_US: i64 = 3_600_000_000;

/// The comment on a partition whose rows are packed into blocks, not rewritten yet.
const PACKED: &str = "laptime: blocks";

/// The comment on a partition packed and rewritten.
const DONE: &str = "laptime: blocks, rewritten";

/// The advisory lock one packing instance holds (per schema, so stores sharing a database do
/// not wait on each other).
const LOCK_KEY: &str = "hashtext('laptime pack ' || current_schema())";

/// One day packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The partition (`requests_pYYYYMMDD`).
    pub partition: String,
    /// Requests moved into blocks, and the blocks they went into (0 and 0 when an earlier pass
    /// packed the day and this one rewrote its partition).
    pub requests: u64,
    pub blocks: u64,
    /// The partition's bytes (rows and indexes) before and after.
    pub before_bytes: i64,
    pub after_bytes: i64,
    /// Whether the rewrite left only the rows that stay (else the next pass rewrites again).
    pub rewritten: bool,
    pub took: Duration,
}

/// How long one pass may take before it gives up (a `statement_timeout` on each statement):
/// retention must not wait behind it. A day of 7.4 M requests took 110 s to pack here.
pub const PASS_LIMIT: Duration = Duration::from_secs(600);

/// How long a statement of the pass waits for a lock: the pack for the day's writers, the
/// rewrite for its readers (while it waits, new readers of the day queue behind it).
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Packs the newest day's partition that ended [`GRACE_US`] before `now_us` and is not done
/// yet; `None` when there is none, or another instance is packing. Each statement gives up
/// after `limit` (an error; the next pass goes on from what this one committed).
pub async fn pack_one_finished_day(
    c: &mut ClientWrapper,
    now_us: i64,
    limit: Duration,
) -> Result<Option<Packed>> {
    let locked: bool = c
        .query_one(&format!("SELECT pg_try_advisory_lock({LOCK_KEY})"), &[])
        .await?
        .try_get(0)?;
    if !locked {
        return Ok(None);
    }
    let packed = pack_newest(c, now_us, limit).await;
    // A failed unlock means a broken connection, whose session (and lock) the server ends.
    let unlocked = c
        .query_one(&format!("SELECT pg_advisory_unlock({LOCK_KEY})"), &[])
        .await;
    let packed = packed?;
    unlocked?;
    Ok(packed)
}

async fn pack_newest(
    c: &mut ClientWrapper,
    now_us: i64,
    limit: Duration,
) -> Result<Option<Packed>> {
    let Some((partition, comment)) = newest_due(c, now_us).await? else {
        return Ok(None);
    };
    c.batch_execute(&format!(
        "SET statement_timeout = {}; SET lock_timeout = {}",
        limit.as_millis(),
        LOCK_WAIT.min(limit).as_millis()
    ))
    .await?;
    let packed = pack(c, partition, comment, LOCK_WAIT.min(limit)).await;
    // Back to the session's own (the store URL's options may set them).
    let reset = c
        .batch_execute("RESET statement_timeout; RESET lock_timeout")
        .await;
    let packed = packed?;
    reset?;
    Ok(Some(packed))
}

async fn pack(
    c: &mut ClientWrapper,
    partition: String,
    comment: Option<String>,
    wait: Duration,
) -> Result<Packed> {
    let started = tokio::time::Instant::now();
    for invalid in invalid_indexes(c, &partition).await? {
        c.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {invalid}"))
            .await?;
    }
    let before_bytes = size(c, &partition).await?;
    let (requests, blocks, settled) = if comment.as_deref() == Some(PACKED) {
        (0, 0, true)
    } else {
        let tx = c.transaction().await?;
        tx.batch_execute(&format!("LOCK TABLE {partition} IN SHARE MODE"))
            .await?;
        let (requests, blocks) = super::blocks::pack_partition(&tx, &partition).await?;
        tx.batch_execute(&format!("COMMENT ON TABLE {partition} IS '{PACKED}'"))
            .await?;
        let xid: i64 = tx
            .query_one("SELECT txid_current()", &[])
            .await?
            .try_get(0)?;
        tx.commit().await?;
        (requests, blocks, older_ended(c, xid, wait).await?)
    };
    let rewritten = settled && rewrite(c, &partition).await?;
    if rewritten {
        c.batch_execute(&format!("COMMENT ON TABLE {partition} IS '{DONE}'"))
            .await?;
    }
    let after_bytes = size(c, &partition).await?;
    Ok(Packed {
        partition,
        requests,
        blocks,
        before_bytes,
        after_bytes,
        rewritten,
        took: started.elapsed(),
    })
}

/// Rewrites `partition` (`VACUUM FULL`, then `ANALYZE`); whether it then holds only the rows
/// that stay.
async fn rewrite(c: &ClientWrapper, partition: &str) -> Result<bool> {
    // Not in a transaction: the server refuses `VACUUM` inside one.
    c.batch_execute(&format!("VACUUM FULL {partition}")).await?;
    // Without statistics (autovacuum's analyze not come yet) the planner takes a rewritten
    // partition's row count for what it holds, and has planned scans of millions of rows.
    c.batch_execute(&format!("ANALYZE {partition}")).await?;
    // What stays a row takes well under 1 KiB; a rewrite that kept the deleted rows, far more.
    Ok(c.query_one(
        &format!(
            "SELECT pg_relation_size($1::text::regclass)
                        <= 16384 + 1024 * (SELECT count(*) FROM {partition})"
        ),
        &[&partition],
    )
    .await?
    .try_get(0)?)
}

/// Whether every transaction of the database that could still read what transaction `xid`
/// deleted has ended, waiting up to `wait` for them: a rewrite before would copy every
/// deleted row (a day's) for them, and free nothing.
async fn older_ended(c: &ClientWrapper, xid: i64, wait: Duration) -> Result<bool> {
    let deadline = tokio::time::Instant::now() + wait;
    let stmt = c
        .prepare(
            "SELECT NOT EXISTS (SELECT 1 FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND backend_xmin IS NOT NULL
                  AND age(backend_xmin) >= age(($1 % 4294967296)::text::xid))",
        )
        .await?;
    loop {
        if c.query_one(&stmt, &[&xid]).await?.try_get(0)? {
            return Ok(true);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The newest request partition whose day ended [`GRACE_US`] before `now_us`, not done yet,
/// with its comment.
async fn newest_due(c: &ClientWrapper, now_us: i64) -> Result<Option<(String, Option<String>)>> {
    let newest = day_partitions(c)
        .await?
        .into_iter()
        .filter(|(day, _, comment)| {
            let ended = (day + 1).saturating_mul(DAY_US).saturating_add(GRACE_US) <= now_us;
            ended && comment.as_deref() != Some(DONE)
        })
        .max_by_key(|(day, _, _)| *day);
    Ok(newest.map(|(_, name, comment)| (name, comment)))
}

/// The indexes of `partition` that a cut `REINDEX CONCURRENTLY` (of an older build's pass) left
/// invalid, as quoted identifiers.
async fn invalid_indexes(c: &ClientWrapper, partition: &str) -> Result<Vec<String>> {
    let rows = c
        .query(
            "SELECT quote_ident(ic.relname::text) FROM pg_index x
             JOIN pg_class ic ON ic.oid = x.indexrelid
             WHERE x.indrelid = $1::text::regclass AND NOT x.indisvalid
             ORDER BY 1",
            &[&partition],
        )
        .await?;
    rows.iter()
        .map(|r| r.try_get(0).map_err(Into::into))
        .collect()
}

/// A partition's bytes, rows and indexes.
async fn size(c: &ClientWrapper, partition: &str) -> Result<i64> {
    Ok(c.query_one(
        "SELECT pg_total_relation_size($1::text::regclass)",
        &[&partition],
    )
    .await?
    .try_get(0)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::usage::{GroupDim, UsageFilter};
    use crate::Store;
    use laptime_core::timeline::{Outcome, RequestRecord};

    /// A day well in the past (2024-10-04), so the store's own clock plays no part.
    const DAY: i64 = 20_000;

    /// `n` records of `DAY` whose ids do not arrive in their order, as several writers' ids do
    /// not, and are not ids the gateway makes.
    fn interleaved(n: i64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let id = format!("r{:08}", (i * 7919) % n);
                sample(&id, "ws", DAY * DAY_US + i * 1_000_000)
            })
            .collect()
    }

    /// An id the gateway would make at `created` (µs), `i` for the rest.
    fn made_at(created: i64, i: i64) -> String {
        format!("req_{:012x}{:020x}", created / 1000, i)
    }

    /// `n` records of `DAY`, two to a microsecond, of two workspaces, with models, outcomes,
    /// statuses and stream flags to filter on; among them some that stay rows: ids the
    /// gateway did not make, ids made an hour from their request's time, no workspace.
    fn day(n: i64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let created = DAY * DAY_US + (i / 2) * 8_000_000 + 17;
                let id = match i {
                    i if i % 101 == 0 => format!("imported-{i}"),
                    i if i % 307 == 0 => made_at(created + 3_600_000_000, i),
                    i => made_at(created, i),
                };
                let ws = if i % 7 == 0 { "other" } else { "ws" };
                let mut r = sample(&id, ws, created);
                r.model = Some(format!("m{}", i % 5));
                r.stream = i % 2 == 0;
                if i % 97 == 0 {
                    r.outcome = Outcome::Timeout;
                }
                if i % 53 == 0 {
                    r.status = 500;
                    r.outcome = Outcome::UpstreamError;
                }
                if i % 211 == 0 {
                    r.workspace_id = None;
                }
                r.tokens.output = Some(i as u64 % 300);
                r
            })
            .collect()
    }

    /// Whether blocks may hold `r` (see [`super::super::blocks`]).
    fn packable(r: &RequestRecord) -> bool {
        r.workspace_id.is_some()
            && crate::stored_id::made_at_us(&r.request_id)
                .is_some_and(|t| (t - r.created_at_us).abs() <= super::super::blocks::ID_SLACK_US)
    }

    fn filters() -> Vec<UsageFilter> {
        vec![
            UsageFilter::default(),
            UsageFilter {
                model: Some("m3".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                outcome: Some("timeout".into()),
                ..UsageFilter::default()
            },
            UsageFilter {
                status: Some(500),
                ..UsageFilter::default()
            },
            UsageFilter {
                stream: Some(false),
                model: Some("m1".into()),
                ..UsageFilter::default()
            },
        ]
    }

    /// Every read of `ids` and of the log and usage of `DAY` that packing must leave as it is.
    async fn reads(store: &Store, ids: &[String]) -> Vec<String> {
        let mut out = Vec::new();
        let mid = DAY * DAY_US + 40_000_000_000;
        for ws in ["ws", "other"] {
            for filter in filters() {
                for (window, limit) in [
                    (None, 50),
                    (None, 3_000),
                    (None, 30_000),
                    (Some((DAY * DAY_US, mid)), 700),
                    (Some((mid - 600_000_000, mid + 17)), 30_000),
                ] {
                    let got = store
                        .recent(ws, filter.clone(), window, limit)
                        .await
                        .unwrap();
                    out.push(format!("{ws} {filter:?} {window:?} {limit}: {got:?}"));
                }
            }
            let usage = store
                .usage(
                    ws,
                    (DAY * DAY_US, (DAY + 1) * DAY_US),
                    UsageFilter::default(),
                    vec![GroupDim::Model],
                )
                .await
                .unwrap();
            // Counts and tokens (a sketch's float sum depends on the order it was merged in).
            let sums = |r: &laptime_core::rollup::Rollup| {
                (r.requests, r.errors, r.input_tokens, r.output_tokens)
            };
            let groups: Vec<_> = usage.groups.iter().map(|(k, r)| (k, sums(r))).collect();
            out.push(format!("{ws} usage: {:?} {groups:?}", sums(&usage.total)));
            for id in ids {
                let got = store.record(ws, id).await.unwrap();
                out.push(format!("{ws} {id}: {got:?}"));
            }
        }
        out
    }

    async fn store() -> (crate::testing::PgSchema, Store, deadpool_postgres::Object) {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let store = Store::open_postgres(schema.url()).await.unwrap();
        let c = store.postgres().unwrap().client().await.unwrap();
        (schema, store, c)
    }

    async fn count(c: &ClientWrapper, sql: &str) -> i64 {
        c.query_one(sql, &[]).await.unwrap().get(0)
    }

    /// The day after `DAY` is whole once its grace has passed.
    fn after_grace() -> i64 {
        (DAY + 1) * DAY_US + GRACE_US
    }

    /// One pass at `now_us`.
    async fn pass(c: &mut ClientWrapper, now_us: i64) -> Option<Packed> {
        pack_one_finished_day(c, now_us, PASS_LIMIT).await.unwrap()
    }

    /// Whether another session can take the packing lock at once (it lets go again).
    async fn lock_is_free(other: &tokio_postgres::Client) -> bool {
        let taken: bool = other
            .query_one(&format!("SELECT pg_try_advisory_lock({LOCK_KEY})"), &[])
            .await
            .unwrap()
            .get(0);
        if taken {
            other
                .batch_execute(&format!("SELECT pg_advisory_unlock({LOCK_KEY})"))
                .await
                .unwrap();
        }
        taken
    }

    const ROWS: &str = "SELECT count(*) FROM requests_p20241004";
    const BLOCKED: &str = "SELECT COALESCE(sum(n), 0)::int8 FROM request_blocks";

    /// A finished day goes into blocks once (what must stay rows stays), its partition shrinks,
    /// and every read of it answers as before: each log filter and window, usage, each id,
    /// another workspace's id. The day still being written is left alone.
    #[tokio::test]
    async fn a_finished_day_packed_into_blocks_reads_back_as_its_rows_did() {
        let (_schema, store, mut c) = store().await;
        let mut records = day(6_000);
        records.push(sample("today", "ws", (DAY + 1) * DAY_US + 5));
        store.insert_batch(records.clone()).await.unwrap();
        let ids: Vec<String> = [0, 1, 2, 7, 101, 307, 422, 1_023, 1_024, 3_001, 5_998, 5_999]
            .iter()
            .map(|i| records[*i].request_id.clone())
            .chain([
                "today".to_string(),
                "req_00000000000000000000000000000000".into(),
            ])
            .collect();
        let before = reads(&store, &ids).await;

        let packed = pass(&mut c, after_grace()).await.unwrap();
        let packed_n = records.iter().filter(|r| packable(r)).count() as i64;
        assert!(packed_n > 5_000 && packed_n < 6_000, "{packed_n}");
        assert_eq!(packed.partition, "requests_p20241004");
        assert_eq!(packed.requests as i64, packed_n);
        // Two workspaces: a block of 512 each, and each one's last part.
        let per_ws = |ws: &str| {
            records
                .iter()
                .filter(|r| packable(r) && r.workspace_id.as_deref() == Some(ws))
                .count() as u64
        };
        assert_eq!(
            packed.blocks,
            per_ws("ws").div_ceil(512) + per_ws("other").div_ceil(512)
        );
        assert!(packed.rewritten, "{packed:?}");
        assert!(packed.after_bytes * 5 < packed.before_bytes, "{packed:?}");
        assert_eq!(count(&c, ROWS).await, 6_000 - packed_n);
        assert_eq!(count(&c, BLOCKED).await, packed_n);
        assert_eq!(
            count(&c, "SELECT count(*) FROM requests_p20241005").await,
            1,
            "the day still written"
        );

        let after = reads(&store, &ids).await;
        for (b, a) in before.iter().zip(&after) {
            assert_eq!(b, a);
        }
        assert_eq!(before.len(), after.len());
        // Done once: the next pass finds no day due.
        assert_eq!(pass(&mut c, after_grace()).await, None);
    }

    /// A record for a request a block holds replaces it, stored once, with the rollups of its
    /// minute rebuilt as if it had been written over a row; a replayed one that is stored
    /// already (in a block) is left as it is; a new record of the packed day goes in beside the
    /// blocks. Every read then answers as that of a store that never packed.
    #[tokio::test]
    async fn late_records_for_a_packed_day_are_stored_once_with_their_rollups_right() {
        let (_schema, store, mut c) = store().await;
        let (_plain_schema, plain, _) = self::store().await;
        let records = day(3_000);
        store.insert_batch(records.clone()).await.unwrap();
        plain.insert_batch(records.clone()).await.unwrap();
        assert!(pass(&mut c, after_grace()).await.unwrap().requests > 2_000);

        let mut replaced = records[1_234].clone();
        assert!(packable(&replaced));
        replaced.model = Some("m-late".into());
        replaced.tokens.output = Some(999);
        let created = DAY * DAY_US + 20_000_000_000 + 3;
        let fresh = sample(&made_at(created, 77_777), "ws", created);
        for s in [&store, &plain] {
            // Alone (the fast path finds it in a block), then again with a new one.
            s.insert_batch(vec![replaced.clone()]).await.unwrap();
            s.insert_batch(vec![replaced.clone(), fresh.clone()])
                .await
                .unwrap();
        }
        assert_eq!(count(&c, BLOCKED).await + count(&c, ROWS).await, 3_001);
        let replayed = records[2_001].clone();
        assert!(packable(&replayed));
        let newer = sample(&made_at(created + 9, 88_888), "ws", created + 9);
        for s in [&store, &plain] {
            let written = s
                .insert_absent(vec![replayed.clone(), newer.clone()])
                .await
                .unwrap();
            assert_eq!(written, vec![newer.request_id.clone()]);
        }
        let ids =
            [&replaced, &fresh, &replayed, &newer, &records[1_235]].map(|r| r.request_id.clone());
        assert_eq!(
            store.record("ws", &replaced.request_id).await.unwrap(),
            Some(replaced.clone())
        );
        let (got, want) = (reads(&store, &ids).await, reads(&plain, &ids).await);
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g, w);
        }
        assert_eq!(count(&c, BLOCKED).await + count(&c, ROWS).await, 3_002);
    }

    /// A block that ends at the very microsecond of the log's `limit`-th row still takes part:
    /// its request there, written after that row, is the newer of the two.
    #[tokio::test]
    async fn the_log_reads_a_block_ending_at_its_last_rows_time_in_order() {
        let (_schema, store, mut c) = store().await;
        let at = |i: i64| DAY * DAY_US + i * 1_000_000;
        // Rows that stay rows (ids the gateway did not make), one a second.
        let rows: Vec<RequestRecord> = (0..60)
            .map(|i| sample(&format!("imported-{i}"), "ws", at(i)))
            .collect();
        store.insert_batch(rows).await.unwrap();
        // The 50th newest row is at 10 s; a request packed into a block, written later, there.
        let packed = sample(&made_at(at(10), 1), "ws", at(10));
        store.insert_batch(vec![packed.clone()]).await.unwrap();
        let before = store
            .recent("ws", UsageFilter::default(), None, 50)
            .await
            .unwrap();
        assert_eq!(before[49].request_id, packed.request_id);

        assert_eq!(pass(&mut c, after_grace()).await.unwrap().requests, 1);
        let after = store
            .recent("ws", UsageFilter::default(), None, 50)
            .await
            .unwrap();
        assert_eq!(after, before);
    }

    /// A writer that comes while its day is being packed waits for the packing (its insert
    /// needs the lock the packer holds), then finds its request in a block: the replacement is
    /// stored once and reads back.
    #[tokio::test]
    async fn a_replacement_written_while_its_day_is_packed_waits_and_is_stored_once() {
        let (_schema, store, mut c) = store().await;
        let watcher = store.postgres().unwrap().client().await.unwrap();
        let records = day(2_000);
        store.insert_batch(records.clone()).await.unwrap();
        let mut replaced = records[701].clone();
        assert!(packable(&replaced));
        replaced.model = Some("m-late".into());

        // The packer's transaction, held open with the day packed.
        let tx = c.transaction().await.unwrap();
        tx.batch_execute("LOCK TABLE requests_p20241004 IN SHARE MODE")
            .await
            .unwrap();
        let (packed, _) = super::super::blocks::pack_partition(&tx, "requests_p20241004")
            .await
            .unwrap();
        assert!(packed > 1_800, "{packed}");
        let writer = tokio::spawn({
            let (store, r) = (store.clone(), replaced.clone());
            async move { store.insert_batch(vec![r]).await }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let waiting = "SELECT count(*) FROM pg_locks
                       WHERE relation = 'requests_p20241004'::regclass AND NOT granted";
        while count(&watcher, waiting).await == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer never waited"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tx.commit().await.unwrap();
        writer.await.unwrap().unwrap();

        assert_eq!(
            count(&watcher, BLOCKED).await + count(&watcher, ROWS).await,
            2_000
        );
        assert_eq!(
            store.record("ws", &replaced.request_id).await.unwrap(),
            Some(replaced)
        );
    }

    /// Retention through a packed day counts and deletes each request before its cutoff once,
    /// through the middle of a block, and keeps the rest readable.
    #[tokio::test]
    async fn retention_cuts_through_a_block_and_counts_each_request_once() {
        let (_schema, store, mut c) = store().await;
        let records = day(4_000);
        store.insert_batch(records.clone()).await.unwrap();
        pass(&mut c, after_grace()).await.unwrap();
        let cutoff = records[1_300].created_at_us;
        let before = records.iter().filter(|r| r.created_at_us < cutoff).count();
        assert_eq!(store.delete_older_than(cutoff, 100).await.unwrap(), before);
        let kept = store
            .recent("ws", UsageFilter::default(), None, 10_000)
            .await
            .unwrap();
        let want: Vec<&String> = records
            .iter()
            .rev()
            .filter(|r| r.created_at_us >= cutoff && r.workspace_id.as_deref() == Some("ws"))
            .map(|r| &r.request_id)
            .collect();
        let mut kept: Vec<&String> = kept.iter().map(|r| &r.request_id).collect();
        let mut want = want;
        kept.sort();
        want.sort();
        assert_eq!(kept, want);
        assert_eq!(
            store
                .record("ws", &records[1_299].request_id)
                .await
                .unwrap(),
            None
        );
        assert!(store
            .record("ws", &records[1_301].request_id)
            .await
            .unwrap()
            .is_some());
        assert_eq!(
            count(&c, BLOCKED).await + count(&c, ROWS).await,
            (4_000 - before) as i64
        );
        // The whole day: its partition goes, with its blocks.
        let rest = 4_000 - before;
        assert_eq!(
            store
                .delete_older_than((DAY + 1) * DAY_US, 100)
                .await
                .unwrap(),
            rest
        );
        assert_eq!(count(&c, "SELECT count(*) FROM request_blocks").await, 0);
    }

    /// A day is packed only once its grace has passed, and by one instance at a time: one that
    /// finds another packing goes on without waiting.
    #[tokio::test]
    async fn a_day_waits_out_its_grace_and_one_instance_packs_at_a_time() {
        let (schema, store, mut c) = store().await;
        store.insert_batch(interleaved(100)).await.unwrap();
        let within = (DAY + 1) * DAY_US + GRACE_US - 1;
        assert_eq!(pass(&mut c, within).await, None);

        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let other = crate::pg::connect(&config).await.unwrap();
        other
            .batch_execute(&format!("SELECT pg_advisory_lock({LOCK_KEY})"))
            .await
            .unwrap();
        assert_eq!(pass(&mut c, after_grace()).await, None);
        other
            .batch_execute(&format!("SELECT pg_advisory_unlock({LOCK_KEY})"))
            .await
            .unwrap();
        let packed = pass(&mut c, after_grace()).await.unwrap();
        assert_eq!(packed.partition, "requests_p20241004");
        // Ids the gateway did not make stay rows.
        assert_eq!((packed.requests, packed.blocks), (0, 0));
        assert!(lock_is_free(&other).await, "the pass let go of its lock");
    }

    /// A transaction older than the pack still reads the day's rows after it, so the pass
    /// leaves the rewrite (which would keep them all) once it has waited its limit; once that
    /// transaction ends, the next pass rewrites the partition without packing again.
    #[tokio::test]
    async fn a_rewrite_an_older_transaction_holds_back_is_done_by_the_next_pass() {
        let (schema, store, mut c) = store().await;
        store.insert_batch(day(1_000)).await.unwrap();
        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let older = crate::pg::connect(&config).await.unwrap();
        older
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM names")
            .await
            .unwrap();
        let first = pack_one_finished_day(&mut c, after_grace(), Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        assert!(first.requests > 900 && !first.rewritten, "{first:?}");
        let seen: i64 = older.query_one(ROWS, &[]).await.unwrap().get(0);
        assert_eq!(seen, 1_000);
        let blocks: i64 = older.query_one(BLOCKED, &[]).await.unwrap().get(0);
        assert_eq!(blocks, 0);
        older.batch_execute("COMMIT").await.unwrap();

        let second = pass(&mut c, after_grace()).await.unwrap();
        assert_eq!((second.requests, second.blocks), (0, 0));
        assert!(second.rewritten, "{second:?}");
        assert!(second.after_bytes * 5 < second.before_bytes, "{second:?}");
        assert_eq!(pass(&mut c, after_grace()).await, None);
        assert_eq!(count(&c, BLOCKED).await, first.requests as i64);
    }
}
