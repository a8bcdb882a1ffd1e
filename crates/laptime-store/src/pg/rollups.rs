//! Rollups on PostgreSQL, in the two tiers of [`crate::rollups`] (per minute in `rollups`, per
//! hour in `rollups_hourly`, each hour row the merge of its key's minute rows), shared by every
//! instance: folded into in the transaction that writes the rows, rebuilt where a replaced row
//! cannot be subtracted, cut by retention, and the hour tier built once from the minutes by the
//! migration that adds it.
//!
//! Rollups are read-merge-written as in SQLite, but by many instances at once: new keys are
//! inserted outright, existing ones are locked (`FOR UPDATE`, in key order, the minute tier
//! before the hour tier) before they are merged, so two instances folding into one minute never
//! lose each other's requests and never deadlock on each other.

use std::collections::{HashMap, HashSet};

use deadpool_postgres::{GenericClient, Transaction};
use laptime_core::rollup::Rollup;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::records::{from_row, select};
use crate::corrupt;
use crate::rollups::{aggregate, by_hour, floor_hour, RollupKey, Tier, HOUR_US, MINUTE_US};
use crate::{Result, StoreError};

/// The key columns of rollup rows, as `UNNEST` parameters `$1`…`$17`.
struct KeyCols {
    workspace_id: Vec<String>,
    start_us: Vec<i64>,
    model: Vec<String>,
    provider: Vec<String>,
    channel: Vec<String>,
    grp: Vec<String>,
    dialect: Vec<String>,
    stream: Vec<bool>,
    status: Vec<i32>,
    outcome: Vec<String>,
    classification: Vec<String>,
    endpoint: Vec<String>,
    effort: Vec<String>,
    tools: Vec<String>,
    max_output_bucket: Vec<String>,
    input_bucket: Vec<String>,
    region: Vec<String>,
}

/// The key columns of `tier`, in [`RollupKey`] order.
fn key_columns(tier: Tier) -> String {
    format!(
        "workspace_id, {}, {}",
        tier.start_column(),
        crate::rollups::DIM_COLUMNS
    )
}

const KEY_UNNEST: &str = "UNNEST($1::text[], $2::int8[], $3::text[], $4::text[], $5::text[], \
    $6::text[], $7::text[], $8::bool[], $9::int4[], $10::text[], $11::text[], $12::text[], \
    $13::text[], $14::text[], $15::text[], $16::text[], $17::text[]";

impl KeyCols {
    fn of<'a>(keys: impl IntoIterator<Item = &'a RollupKey>) -> KeyCols {
        let mut c = KeyCols {
            workspace_id: Vec::new(),
            start_us: Vec::new(),
            model: Vec::new(),
            provider: Vec::new(),
            channel: Vec::new(),
            grp: Vec::new(),
            dialect: Vec::new(),
            stream: Vec::new(),
            status: Vec::new(),
            outcome: Vec::new(),
            classification: Vec::new(),
            endpoint: Vec::new(),
            effort: Vec::new(),
            tools: Vec::new(),
            max_output_bucket: Vec::new(),
            input_bucket: Vec::new(),
            region: Vec::new(),
        };
        for k in keys {
            c.workspace_id.push(k.workspace_id.clone());
            c.start_us.push(k.start_us);
            c.model.push(k.model.clone());
            c.provider.push(k.provider.clone());
            c.channel.push(k.channel.clone());
            c.grp.push(k.grp.clone());
            c.dialect.push(k.dialect.clone());
            c.stream.push(k.stream);
            c.status.push(i32::from(k.status));
            c.outcome.push(k.outcome.clone());
            c.classification.push(k.classification.clone());
            c.endpoint.push(k.endpoint.clone());
            c.effort.push(k.effort.clone());
            c.tools.push(k.tools.clone());
            c.max_output_bucket.push(k.max_output_bucket.clone());
            c.input_bucket.push(k.input_bucket.clone());
            c.region.push(k.region.clone());
        }
        c
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![
            &self.workspace_id,
            &self.start_us,
            &self.model,
            &self.provider,
            &self.channel,
            &self.grp,
            &self.dialect,
            &self.stream,
            &self.status,
            &self.outcome,
            &self.classification,
            &self.endpoint,
            &self.effort,
            &self.tools,
            &self.max_output_bucket,
            &self.input_bucket,
            &self.region,
        ]
    }
}

/// A rollup row's key, read from its first 17 columns (in [`key_columns`] order).
fn key_of(row: &Row) -> Result<RollupKey> {
    let status: i32 = row.try_get(8)?;
    Ok(RollupKey {
        workspace_id: row.try_get(0)?,
        start_us: row.try_get(1)?,
        model: row.try_get(2)?,
        provider: row.try_get(3)?,
        channel: row.try_get(4)?,
        grp: row.try_get(5)?,
        dialect: row.try_get(6)?,
        stream: row.try_get(7)?,
        status: u16::try_from(status).map_err(|_| corrupt("status", &status.to_string()))?,
        outcome: row.try_get(9)?,
        classification: row.try_get(10)?,
        endpoint: row.try_get(11)?,
        effort: row.try_get(12)?,
        tools: row.try_get(13)?,
        max_output_bucket: row.try_get(14)?,
        input_bucket: row.try_get(15)?,
        region: row.try_get(16)?,
    })
}

fn corrupt_rollup(e: String) -> StoreError {
    StoreError::Corrupt(format!("rollup: {e}"))
}

/// Writes `(key, encoded rollup)` rows of `tier`: inserts, or with a `DO UPDATE` conflict
/// overwrites existing keys; returns the keys written.
async fn write_rollups<D: AsRef<[u8]>>(
    tx: &Transaction<'_>,
    tier: Tier,
    rows: &[(&RollupKey, D)],
    conflict: &str,
) -> Result<Vec<Row>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let keys = KeyCols::of(rows.iter().map(|(k, _)| *k));
    let data: Vec<&[u8]> = rows.iter().map(|(_, d)| d.as_ref()).collect();
    let mut params = keys.params();
    params.push(&data);
    let (table, columns) = (tier.table(), key_columns(tier));
    let sql = format!(
        "INSERT INTO {table} ({columns}, data) SELECT * FROM {KEY_UNNEST}, $18::bytea[])
         ON CONFLICT ({columns}) {conflict} RETURNING {columns}"
    );
    let stmt = tx.prepare_cached(&sql).await?;
    Ok(tx.query(&stmt, &params).await?)
}

/// Folds `delta` (minute rollups) into the stored rollups of both tiers, inside the transaction
/// that wrote its rows.
pub(crate) async fn merge_into(
    tx: &Transaction<'_>,
    delta: HashMap<RollupKey, Rollup>,
) -> Result<()> {
    let hours = by_hour(&delta);
    merge_tier(tx, Tier::Minute, delta).await?;
    merge_tier(tx, Tier::Hour, hours).await
}

async fn merge_tier(
    tx: &Transaction<'_>,
    tier: Tier,
    delta: HashMap<RollupKey, Rollup>,
) -> Result<()> {
    if delta.is_empty() {
        return Ok(());
    }
    let mut delta: Vec<(RollupKey, Rollup)> = delta.into_iter().collect();
    delta.sort_by(|a, b| a.0.cmp(&b.0));
    // Keys no instance has written yet: inserted as they are.
    let encoded: Vec<(&RollupKey, Vec<u8>)> = delta.iter().map(|(k, r)| (k, r.encode())).collect();
    let inserted: HashSet<RollupKey> = write_rollups(tx, tier, &encoded, "DO NOTHING")
        .await?
        .iter()
        .map(key_of)
        .collect::<Result<_>>()?;
    let mut rest: HashMap<RollupKey, Rollup> = delta
        .into_iter()
        .filter(|(k, _)| !inserted.contains(k))
        .collect();
    if rest.is_empty() {
        return Ok(());
    }
    // The others: locked in key order (instances folding into one minute queue, never
    // deadlock on each other), merged with what is stored, written back.
    let keys = KeyCols::of(rest.keys());
    let (table, columns) = (tier.table(), key_columns(tier));
    let sql = format!(
        "SELECT {columns}, data FROM {table} WHERE ({columns}) IN
            (SELECT * FROM {KEY_UNNEST}))
         ORDER BY {columns} FOR UPDATE"
    );
    let stmt = tx.prepare_cached(&sql).await?;
    for row in tx.query(&stmt, &keys.params()).await? {
        let key = key_of(&row)?;
        let stored: &[u8] = row.try_get(17)?;
        if let Some(r) = rest.get_mut(&key) {
            r.merge_encoded(stored).map_err(corrupt_rollup)?;
        }
    }
    let merged: Vec<(&RollupKey, Vec<u8>)> = rest.iter().map(|(k, r)| (k, r.encode())).collect();
    write_rollups(tx, tier, &merged, "DO UPDATE SET data = excluded.data").await?;
    Ok(())
}

/// Locks the rows of `keys` in `tier` (made empty where missing), in key order, so that a
/// concurrent fold waits and then merges into the rebuilt value.
async fn lock_keys(tx: &Transaction<'_>, tier: Tier, sorted: &[&RollupKey]) -> Result<()> {
    let empty = Rollup::new().encode();
    let placeholders: Vec<(&RollupKey, Vec<u8>)> =
        sorted.iter().map(|k| (*k, empty.clone())).collect();
    write_rollups(tx, tier, &placeholders, "DO NOTHING").await?;
    let locked = KeyCols::of(sorted.iter().copied());
    let (table, columns) = (tier.table(), key_columns(tier));
    let lock = format!(
        "SELECT 1 FROM {table} WHERE ({columns}) IN (SELECT * FROM {KEY_UNNEST}))
         ORDER BY {columns} FOR UPDATE"
    );
    tx.query(&lock, &locked.params()).await?;
    Ok(())
}

/// Writes the rebuilt rollups of `sorted` keys in `tier`: those in `fresh` overwritten, the
/// others (nothing left to roll up) deleted.
async fn write_rebuilt(
    tx: &Transaction<'_>,
    tier: Tier,
    sorted: Vec<&RollupKey>,
    fresh: &HashMap<RollupKey, Rollup>,
) -> Result<()> {
    let (keep, gone): (Vec<&RollupKey>, Vec<&RollupKey>) =
        sorted.into_iter().partition(|k| fresh.contains_key(*k));
    let rebuilt: Vec<(&RollupKey, Vec<u8>)> = keep
        .into_iter()
        .filter_map(|k| fresh.get(k).map(|r| (k, r.encode())))
        .collect();
    write_rollups(tx, tier, &rebuilt, "DO UPDATE SET data = excluded.data").await?;
    if !gone.is_empty() {
        let gone = KeyCols::of(gone);
        let (table, columns) = (tier.table(), key_columns(tier));
        let delete =
            format!("DELETE FROM {table} WHERE ({columns}) IN (SELECT * FROM {KEY_UNNEST}))");
        tx.execute(&delete, &gone.params()).await?;
    }
    Ok(())
}

/// Recomputes the minute rollups of `keys` from the rows (after rows were replaced), then their
/// hours from the minutes; each tier's keys are locked first, minutes before hours as every
/// fold takes them.
pub(crate) async fn rebuild_keys(tx: &Transaction<'_>, keys: &HashSet<RollupKey>) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut sorted: Vec<&RollupKey> = keys.iter().collect();
    sorted.sort();
    lock_keys(tx, Tier::Minute, &sorted).await?;
    let minutes: HashSet<(&str, i64)> = keys
        .iter()
        .map(|k| (k.workspace_id.as_str(), k.start_us))
        .collect();
    let sql = format!(
        "{} WHERE workspace_id = $1 AND created_at_us >= $2 AND created_at_us < $3",
        select()
    );
    let mut fresh: HashMap<RollupKey, Rollup> = HashMap::new();
    for (ws, minute) in minutes {
        let rows = tx
            .query(&sql, &[&ws, &minute, &(minute + MINUTE_US)])
            .await?;
        let records = rows.iter().map(from_row).collect::<Result<Vec<_>>>()?;
        fresh.extend(aggregate(
            records
                .iter()
                .filter(|r| RollupKey::of(r).is_some_and(|k| keys.contains(&k))),
        ));
    }
    write_rebuilt(tx, Tier::Minute, sorted, &fresh).await?;

    let hour_keys: HashSet<RollupKey> = keys.iter().map(RollupKey::hour).collect();
    let mut hours: Vec<&RollupKey> = hour_keys.iter().collect();
    hours.sort();
    lock_keys(tx, Tier::Hour, &hours).await?;
    let minute_columns = key_columns(Tier::Minute);
    let of_hour = format!(
        "SELECT {minute_columns}, data FROM rollups
         WHERE workspace_id = $1 AND minute_us >= $2 AND minute_us < $2 + {HOUR_US}"
    );
    let mut merged: HashMap<RollupKey, Rollup> = HashMap::new();
    let hour_starts: HashSet<(&str, i64)> = hours
        .iter()
        .map(|k| (k.workspace_id.as_str(), k.start_us))
        .collect();
    for (ws, hour) in hour_starts {
        for row in tx.query(&of_hour, &[&ws, &hour]).await? {
            let key = key_of(&row)?.hour();
            if !hour_keys.contains(&key) {
                continue;
            }
            let blob: &[u8] = row.try_get(17)?;
            fold(&mut merged, key, blob)?;
        }
    }
    write_rebuilt(tx, Tier::Hour, hours, &merged).await
}

/// Merges an encoded rollup into `into`'s rollup of `key`.
fn fold(into: &mut HashMap<RollupKey, Rollup>, key: RollupKey, blob: &[u8]) -> Result<()> {
    match into.get_mut(&key) {
        Some(r) => r.merge_encoded(blob).map_err(corrupt_rollup),
        None => {
            into.insert(key, Rollup::decode(blob).map_err(corrupt_rollup)?);
            Ok(())
        }
    }
}

/// Retention of both tiers: deletes the rollups of every minute before `minute_cutoff`, a
/// transaction per unit (as many whole hours as hold at most `batch` minute rows, at least one
/// hour; then the part of the hour holding the cutoff, whose hour rows are rebuilt from the
/// minutes it keeps), so that every transaction leaves the tiers agreeing.
///
/// Each unit first locks the hour table against writes (`SHARE ROW EXCLUSIVE`: readers go on):
/// a fold writes minutes, then hours, and one committing between this unit's deletion of
/// minutes and its deletion or rebuild of hours would leave them disagreeing. Folds wait for
/// the unit (a whole hour's rollups at most), and lose nothing.
pub(crate) async fn delete_before(
    c: &mut deadpool_postgres::ClientWrapper,
    minute_cutoff: i64,
    batch: i64,
) -> Result<()> {
    loop {
        let tx = c.transaction().await?;
        tx.batch_execute("LOCK TABLE rollups_hourly IN SHARE ROW EXCLUSIVE MODE")
            .await?;
        let oldest: Option<i64> = tx
            .query_one("SELECT min(minute_us) FROM rollups", &[])
            .await?
            .try_get(0)?;
        let Some(oldest) = oldest.filter(|m| *m < minute_cutoff) else {
            tx.execute(
                "DELETE FROM rollups_hourly WHERE hour_us < $1",
                &[&floor_hour(minute_cutoff)],
            )
            .await?;
            tx.commit().await?;
            return Ok(());
        };
        let through: Option<i64> = tx
            .query_opt(
                "SELECT minute_us FROM rollups WHERE minute_us < $1
                 ORDER BY minute_us OFFSET $2 LIMIT 1",
                &[&minute_cutoff, &(batch - 1)],
            )
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
        let first_hour_end = floor_hour(oldest).saturating_add(HOUR_US);
        let end = match through {
            Some(m) => floor_hour(m.saturating_add(MINUTE_US)).max(first_hour_end),
            None => minute_cutoff,
        }
        .min(minute_cutoff);
        tx.execute("DELETE FROM rollups WHERE minute_us < $1", &[&end])
            .await?;
        let cut_hour = floor_hour(end);
        tx.execute(
            "DELETE FROM rollups_hourly WHERE hour_us < $1",
            &[&cut_hour],
        )
        .await?;
        if cut_hour < end {
            rebuild_hour_rows(&tx, cut_hour).await?;
        }
        tx.commit().await?;
    }
}

/// Recomputes every hour row of `hour_us` (all workspaces) from the minute rows left in it.
async fn rebuild_hour_rows(tx: &Transaction<'_>, hour_us: i64) -> Result<()> {
    let minute_columns = key_columns(Tier::Minute);
    let rows = tx
        .query(
            &format!(
                "SELECT {minute_columns}, data FROM rollups
                 WHERE minute_us >= $1 AND minute_us < $2"
            ),
            &[&hour_us, &hour_us.saturating_add(HOUR_US)],
        )
        .await?;
    let mut merged: HashMap<RollupKey, Rollup> = HashMap::new();
    for row in &rows {
        let blob: &[u8] = row.try_get(17)?;
        fold(&mut merged, key_of(row)?.hour(), blob)?;
    }
    tx.execute("DELETE FROM rollups_hourly WHERE hour_us = $1", &[&hour_us])
        .await?;
    write_all(tx, Tier::Hour, merged).await
}

/// Inserts `rollups` into `tier` (keys not stored), in chunks that keep each statement's arrays
/// moderate.
async fn write_all(
    tx: &Transaction<'_>,
    tier: Tier,
    rollups: HashMap<RollupKey, Rollup>,
) -> Result<()> {
    let mut rows: Vec<(RollupKey, Vec<u8>)> =
        rollups.into_iter().map(|(k, r)| (k, r.encode())).collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    for chunk in rows.chunks(4096) {
        let refs: Vec<(&RollupKey, &[u8])> = chunk.iter().map(|(k, d)| (k, d.as_slice())).collect();
        write_rollups(tx, tier, &refs, "DO UPDATE SET data = excluded.data").await?;
    }
    Ok(())
}

/// Builds the hour tier from the minute tier, inside the migration that adds it: whatever the
/// hour tier held is replaced. Reads the minute rows in key order through a portal, a few
/// thousand at a time, and writes each workspace-hour when the next one starts, so memory stays
/// bounded by one hour's keys.
pub(crate) async fn backfill_hours(tx: &Transaction<'_>) -> Result<()> {
    tx.batch_execute("DELETE FROM rollups_hourly").await?;
    let minute_columns = key_columns(Tier::Minute);
    let stmt = tx
        .prepare(&format!(
            "SELECT {minute_columns}, data FROM rollups ORDER BY workspace_id, minute_us"
        ))
        .await?;
    let portal = tx.bind(&stmt, &[]).await?;
    let mut current: Option<(String, i64)> = None;
    let mut pending: HashMap<RollupKey, Rollup> = HashMap::new();
    loop {
        let rows = tx.query_portal(&portal, 8192).await?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            let key = key_of(row)?.hour();
            let here = (key.workspace_id.clone(), key.start_us);
            if current.as_ref() != Some(&here) {
                write_all(tx, Tier::Hour, std::mem::take(&mut pending)).await?;
                current = Some(here);
            }
            let blob: &[u8] = row.try_get(17)?;
            fold(&mut pending, key, blob)?;
        }
    }
    write_all(tx, Tier::Hour, pending).await
}
