//! Packs the request indexes of a day that has ended: one day's partition per pass, rebuilt
//! full.
//!
//! Why: a day's indexes grow as its requests arrive, and with several gateways writing at once
//! their ids and times interleave, so B-tree inserts land inside pages and split them at half
//! instead of filling the right edge. Measured at 10 M requests, two instances: the primary key
//! 74 B and the workspace index 61 B a request, against 50 and 41 B with one writer. A finished
//! day takes (almost) no more inserts, so its indexes can be rebuilt once, full
//! (`fillfactor = 100`), and stay packed until retention drops the day. A late record for it
//! (an import, a recorder catching up) still goes in; it splits a full page, which costs that
//! page's room and nothing else.
//!
//! How: `REINDEX TABLE CONCURRENTLY`, so reads and the odd late write go on while it runs (it
//! waits for transactions older than itself, in the whole database, to end; a pass gives up
//! after [`PASS_LIMIT`]), then `ANALYZE`. One instance at a time packs (a session advisory
//! lock, tried, never waited for); the newest unpacked day first, since it will be kept
//! longest; a table comment marks a day done. A rebuild cut short (the limit, a restart, a lost
//! connection) leaves invalid indexes behind, which the next pass on that day drops first.

use std::time::Duration;

use deadpool_postgres::ClientWrapper;

use super::records::{day_partitions, DAY_US};
use crate::Result;

/// How long after its day ends a partition is packed: late records of the day (batches the
/// recorder retries, clocks a little behind) have come by then.
pub const GRACE_US: i64 = 3_600_000_000;

/// The comment on a partition whose indexes are packed.
const MARK: &str = "laptime: indexes packed";

/// The advisory lock one packing instance holds (per schema, so stores sharing a database do
/// not wait on each other).
const LOCK_KEY: &str = "hashtext('laptime pack ' || current_schema())";

/// One day's partition packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The partition (`requests_pYYYYMMDD`).
    pub partition: String,
    /// Its indexes' bytes before and after.
    pub before_bytes: i64,
    pub after_bytes: i64,
    pub took: Duration,
}

/// How long one pass may take before it gives up (a `statement_timeout` on each statement). A
/// concurrent rebuild waits for every older transaction in the database, and a backup's can
/// last hours; retention must not wait with it. A day of 5.8 M requests took 7.7 s here.
pub const PASS_LIMIT: Duration = Duration::from_secs(600);

/// Packs the newest day's partition that ended [`GRACE_US`] before `now_us` and is not packed
/// yet; `None` when there is none, or another instance is packing. Each statement gives up
/// after `limit` (an error; what a cut rebuild left, the next pass drops).
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
    let Some(partition) = newest_unpacked(c, now_us).await? else {
        return Ok(None);
    };
    c.batch_execute(&format!("SET statement_timeout = {}", limit.as_millis()))
        .await?;
    let packed = pack(c, partition).await;
    // Back to the session's own (the store URL's options may set one).
    let reset = c.batch_execute("RESET statement_timeout").await;
    let packed = packed?;
    reset?;
    Ok(Some(packed))
}

async fn pack(c: &mut ClientWrapper, partition: String) -> Result<Packed> {
    let started = tokio::time::Instant::now();
    for invalid in indexes(c, &partition, false).await? {
        c.batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {invalid}"))
            .await?;
    }
    let before_bytes = indexes_size(c, &partition).await?;
    for index in indexes(c, &partition, true).await? {
        c.batch_execute(&format!("ALTER INDEX {index} SET (fillfactor = 100)"))
            .await?;
    }
    // Not in a transaction: the server refuses `CONCURRENTLY` inside one.
    c.batch_execute(&format!("REINDEX TABLE CONCURRENTLY {partition}"))
        .await?;
    // The rebuild sets the partition's row count; with that count and no column statistics
    // (autovacuum's analyze not come yet) the planner took a workspace's millions of rows for
    // a few hundred and sorted them all: a log probe went from 0.8 ms to 4.1 s at 10 M.
    c.batch_execute(&format!("ANALYZE {partition}")).await?;
    c.batch_execute(&format!("COMMENT ON TABLE {partition} IS '{MARK}'"))
        .await?;
    let after_bytes = indexes_size(c, &partition).await?;
    Ok(Packed {
        partition,
        before_bytes,
        after_bytes,
        took: started.elapsed(),
    })
}

/// The newest request partition whose day ended [`GRACE_US`] before `now_us`, not yet marked
/// packed.
async fn newest_unpacked(c: &ClientWrapper, now_us: i64) -> Result<Option<String>> {
    let newest = day_partitions(c)
        .await?
        .into_iter()
        .filter(|(day, _, comment)| {
            let ended = (day + 1).saturating_mul(DAY_US).saturating_add(GRACE_US) <= now_us;
            ended && comment.as_deref() != Some(MARK)
        })
        .max_by_key(|(day, _, _)| *day);
    Ok(newest.map(|(_, name, _)| name))
}

/// The indexes of `partition` that are valid (or, with `valid` false, those a rebuild cut short
/// left behind), as quoted identifiers.
async fn indexes(c: &ClientWrapper, partition: &str, valid: bool) -> Result<Vec<String>> {
    let rows = c
        .query(
            "SELECT quote_ident(ic.relname::text) FROM pg_index x
             JOIN pg_class ic ON ic.oid = x.indexrelid
             WHERE x.indrelid = $1::text::regclass AND x.indisvalid = $2
             ORDER BY 1",
            &[&partition, &valid],
        )
        .await?;
    rows.iter()
        .map(|r| r.try_get(0).map_err(Into::into))
        .collect()
}

async fn indexes_size(c: &ClientWrapper, partition: &str) -> Result<i64> {
    Ok(
        c.query_one("SELECT pg_indexes_size($1::text::regclass)", &[&partition])
            .await?
            .try_get(0)?,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::Store;
    use laptime_core::timeline::RequestRecord;

    /// A day well in the past (2024-10-04), so the store's own clock plays no part.
    const DAY: i64 = 20_000;

    /// `n` records of `DAY` whose ids do not arrive in their order, as several writers' ids do
    /// not: the primary key's inserts land inside its pages.
    fn interleaved(n: i64) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let id = format!("r{:08}", (i * 7919) % n);
                sample(&id, "ws", DAY * DAY_US + i * 1_000_000)
            })
            .collect()
    }

    async fn store() -> (crate::testing::PgSchema, Store, deadpool_postgres::Object) {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let store = Store::open_postgres(schema.url()).await.unwrap();
        let c = store.postgres().unwrap().client().await.unwrap();
        (schema, store, c)
    }

    async fn texts(c: &ClientWrapper, sql: &str) -> Vec<String> {
        let rows = c.query(sql, &[]).await.unwrap();
        rows.iter().map(|r| r.get::<_, String>(0)).collect()
    }

    const PKEY_BYTES: &str = "SELECT pg_relation_size('requests_p20241004_pkey')::text";

    /// The day after `DAY` is whole once its grace has passed.
    fn after_grace() -> i64 {
        (DAY + 1) * DAY_US + GRACE_US
    }

    /// One pass at `now_us`: the partition it packed.
    async fn pass(c: &mut ClientWrapper, now_us: i64) -> Option<String> {
        let packed = pack_one_finished_day(c, now_us, PASS_LIMIT).await.unwrap();
        packed.map(|p| p.partition)
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

    /// A finished day's indexes are rebuilt full, once, and cleared of what a rebuild cut short
    /// left; its rows read back as before, and the day still being written is left alone.
    #[tokio::test]
    async fn a_finished_days_indexes_are_packed_once_and_its_rows_read_the_same() {
        let (_schema, store, mut c) = store().await;
        let mut records = interleaved(20_000);
        records.push(sample("today", "ws", (DAY + 1) * DAY_US + 5));
        store.insert_batch(records.clone()).await.unwrap();
        let before = store
            .recent("ws", Default::default(), None, 50)
            .await
            .unwrap();
        // A unique index built concurrently over duplicates fails and stays, invalid, as a
        // `REINDEX CONCURRENTLY` that was cut short leaves its new indexes.
        let failed = c
            .batch_execute(
                "CREATE UNIQUE INDEX CONCURRENTLY requests_p20241004_ccnew
                 ON requests_p20241004 (workspace_id)",
            )
            .await;
        assert!(failed.is_err());
        let invalid = "SELECT ic.relname::text FROM pg_index x JOIN pg_class ic
                       ON ic.oid = x.indexrelid
                       WHERE x.indrelid = 'requests_p20241004'::regclass AND NOT x.indisvalid";
        assert_eq!(texts(&c, invalid).await, ["requests_p20241004_ccnew"]);

        let pkey_before = texts(&c, PKEY_BYTES).await;
        let packed = pack_one_finished_day(&mut c, after_grace(), PASS_LIMIT)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(packed.partition, "requests_p20241004");
        assert!(packed.after_bytes < packed.before_bytes, "{packed:?}");
        // The primary key's pages, split at half, are packed full (1.14 MB → 0.75 MB).
        let pkey_after = texts(&c, PKEY_BYTES).await;
        assert!(
            pkey_after[0].parse::<i64>().unwrap() * 10 < pkey_before[0].parse::<i64>().unwrap() * 7,
            "{pkey_before:?} → {pkey_after:?}"
        );
        assert!(texts(&c, invalid).await.is_empty());
        let analyzed = "SELECT count(*)::text FROM pg_stats WHERE schemaname = current_schema()
                        AND tablename = 'requests_p20241004' AND attname = 'workspace_id'";
        assert_eq!(texts(&c, analyzed).await, ["1"]);
        let options = "SELECT ic.relname::text || ' ' || ic.reloptions::text FROM pg_index x
                       JOIN pg_class ic ON ic.oid = x.indexrelid
                       WHERE x.indrelid = 'requests_p20241004'::regclass ORDER BY 1";
        let options = texts(&c, options).await;
        assert_eq!(options.len(), 2, "{options:?}");
        assert!(
            options.iter().all(|o| o.ends_with("{fillfactor=100}")),
            "{options:?}"
        );
        let untouched =
            "SELECT count(*)::text FROM pg_class WHERE relname LIKE 'requests_p20241005%'
                         AND relnamespace = current_schema()::regnamespace
                         AND reloptions IS NOT NULL";
        assert_eq!(texts(&c, untouched).await, ["0"]);

        assert_eq!(
            store
                .recent("ws", Default::default(), None, 50)
                .await
                .unwrap(),
            before
        );
        for r in [&records[0], &records[12_345], &records[19_999]] {
            let got = store.record("ws", &r.request_id).await.unwrap();
            assert_eq!(got.as_ref().map(|g| &g.request_id), Some(&r.request_id));
        }
        // Done once: the next pass finds no day due, and a late record still goes in.
        assert_eq!(pass(&mut c, after_grace()).await, None);
        store
            .insert_batch(vec![sample("late", "ws", DAY * DAY_US + 7)])
            .await
            .unwrap();
        assert!(store.record("ws", "late").await.unwrap().is_some());
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
        let packed = pass(&mut c, after_grace()).await;
        assert_eq!(packed.as_deref(), Some("requests_p20241004"));
        assert!(lock_is_free(&other).await, "the pass let go of its lock");
    }

    /// A pass held up by an older transaction (a backup's, say) gives up at its limit, lets go
    /// of its lock and its timeout; once that transaction ends, the next pass drops what the
    /// cut rebuild left and packs the day.
    #[tokio::test]
    async fn a_pass_held_up_by_an_older_transaction_gives_up_at_its_limit_and_the_next_packs() {
        let (schema, store, mut c) = store().await;
        store.insert_batch(interleaved(1_000)).await.unwrap();
        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let older = crate::pg::connect(&config).await.unwrap();
        older
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM names")
            .await
            .unwrap();
        // Long enough for the rebuild to reach its wait (past making its new indexes) on a
        // busy machine, short for a test.
        let cut = pack_one_finished_day(&mut c, after_grace(), Duration::from_secs(2)).await;
        match cut {
            Err(crate::StoreError::Postgres(e)) => {
                assert_eq!(
                    e.code(),
                    Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
                )
            }
            other => panic!("{other:?}"),
        }
        let timeout: String = c
            .query_one("SHOW statement_timeout", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(timeout, "0");
        let invalid = "SELECT count(*)::text FROM pg_index x
                       WHERE x.indrelid = 'requests_p20241004'::regclass AND NOT x.indisvalid";
        // The cut rebuild left its two new indexes behind, invalid.
        assert_eq!(texts(&c, invalid).await, ["2"]);
        older.batch_execute("COMMIT").await.unwrap();
        assert!(
            lock_is_free(&older).await,
            "the cut pass let go of its lock"
        );

        let packed = pass(&mut c, after_grace()).await;
        assert_eq!(packed.as_deref(), Some("requests_p20241004"));
        assert_eq!(texts(&c, invalid).await, ["0"]);
    }
}
