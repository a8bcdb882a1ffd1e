//! Rollups on PostgreSQL, in the two tiers of [`crate::rollups`] (per minute in `rollups`, per
//! hour in `rollups_hourly`, each hour row the merge of its key's minute rows), shared by every
//! instance: folded into in the transaction that writes the rows, rebuilt where a replaced row
//! cannot be subtracted, cut by retention, and the hour tier built once from the minutes by the
//! migration that adds it.
//!
//! Rollups are read-merge-written as in SQLite, but by many instances at once: new keys are
//! inserted outright, existing ones are locked (`FOR UPDATE`, in the order of their places, the
//! minute tier before the hour tier) before they are merged, so two instances folding into one
//! minute never lose each other's requests and never deadlock on each other.
//!
//! Since schema v12 a row holds its key's fifteen dimensions as the id of one row of
//! `rollup_keys` ([`KeyIds`]): its place is (workspace, start, key id), and readers take the
//! dimensions from there.
//!
//! Since schema v14 an hour is folded into the hour tier once, when it has closed
//! ([`fold_closed_hours`]), not by every batch: PostgreSQL keeps the old version of every row it
//! rewrites and logs the new one in full, and an hour row (1–2.4 KB) rewritten by each batch of
//! its hour made most of the WAL and the dead space of a real-time load. `hour_folds` holds the
//! hour before which the tier is whole: batches fold their late records into those hours as
//! before, and readers take the minute tier from it on ([`FOLDED_BEFORE`]).

use std::collections::{HashMap, HashSet};

use deadpool_postgres::Transaction;
use laptime_core::rollup::Rollup;
use laptime_core::timeline::RequestRecord;
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;
use tokio_postgres::Row;

use super::records::{from_row, select};
use crate::corrupt;
use crate::rollups::{
    aggregate, by_hour, floor_hour, RollupKey, Tier, DIM_COLUMNS, HOUR_US, MINUTE_US,
};
use crate::{Result, StoreError};

/// The dimensions of rollup keys, as `UNNEST` parameters `$1`…`$15` in
/// [`crate::rollups::DIM_COLUMNS`] order.
struct DimCols {
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

const DIM_UNNEST: &str = "UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
    $6::bool[], $7::int4[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], \
    $13::text[], $14::text[], $15::text[])";

impl DimCols {
    fn of<'a>(keys: impl IntoIterator<Item = &'a RollupKey>) -> DimCols {
        let mut c = DimCols {
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

/// A key's dimensions alone (no workspace, no start): what a row of `rollup_keys` holds.
fn dims(k: &RollupKey) -> RollupKey {
    RollupKey {
        workspace_id: String::new(),
        start_us: 0,
        ..k.clone()
    }
}

/// The ids of rollup keys' dimensions in `rollup_keys` (schema v12): a rollup row holds its
/// workspace, its start and this id, 4 bytes for the 15 dimensions' text, in the row and in its
/// primary key. A deployment has few such sets (its models times channels, outcomes, …), each
/// in at least one rollup row, so the table is never larger than the rollups.
pub(crate) struct KeyIds {
    ids: HashMap<RollupKey, i32>,
}

impl KeyIds {
    /// Finds the id of the dimensions of each of `keys`, adding those missing. Added in one
    /// order by every instance, so two adding at once never wait on each other in a cycle; a
    /// set another instance is adding is waited for, and found by the second look.
    pub(crate) async fn of<'a>(
        c: &impl GenericClient,
        keys: impl IntoIterator<Item = &'a RollupKey>,
    ) -> Result<KeyIds> {
        let mut wanted: Vec<RollupKey> = keys
            .into_iter()
            .map(dims)
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        wanted.sort();
        let mut ids = KeyIds {
            ids: HashMap::new(),
        };
        if wanted.is_empty() {
            return Ok(ids);
        }
        let find = format!(
            "SELECT id, {DIM_COLUMNS} FROM rollup_keys WHERE ({DIM_COLUMNS}) IN
                (SELECT * FROM {DIM_UNNEST})"
        );
        ids.take(&c.query(&find, &DimCols::of(&wanted).params()).await?)?;
        for sql in [
            format!(
                "INSERT INTO rollup_keys ({DIM_COLUMNS}) SELECT * FROM {DIM_UNNEST}
                 ON CONFLICT DO NOTHING RETURNING id, {DIM_COLUMNS}"
            ),
            find,
        ] {
            let missing: Vec<&RollupKey> =
                wanted.iter().filter(|k| !ids.ids.contains_key(k)).collect();
            if missing.is_empty() {
                return Ok(ids);
            }
            ids.take(&c.query(&sql, &DimCols::of(missing).params()).await?)?;
        }
        match wanted.iter().all(|k| ids.ids.contains_key(k)) {
            true => Ok(ids),
            false => Err(StoreError::Corrupt(
                "a rollup key added is not found".to_string(),
            )),
        }
    }

    fn take(&mut self, rows: &[Row]) -> Result<()> {
        for row in rows {
            self.ids.insert(dims_of(row, 1)?, row.try_get(0)?);
        }
        Ok(())
    }

    /// The id of `k`'s dimensions, which [`KeyIds::of`] found.
    fn id(&self, k: &RollupKey) -> Result<i32> {
        self.ids
            .get(&dims(k))
            .copied()
            .ok_or_else(|| StoreError::Corrupt("a rollup key without its id".to_string()))
    }

    /// Where `k`'s row is: its workspace, start and key id.
    fn place(&self, k: &RollupKey) -> Result<Place> {
        Ok((k.workspace_id.clone(), k.start_us, self.id(k)?))
    }
}

/// A rollup row's primary key: workspace, start of its minute or hour, key id.
type Place = (String, i64, i32);

/// The columns of [`Place`] in `tier`.
fn place_columns(tier: Tier) -> String {
    format!("workspace_id, {}, key_id", tier.start_column())
}

/// Places as `UNNEST` parameters `$1`…`$3`.
struct PlaceCols {
    workspace_id: Vec<String>,
    start_us: Vec<i64>,
    key_id: Vec<i32>,
}

const PLACE_UNNEST: &str = "UNNEST($1::text[], $2::int8[], $3::int4[])";

impl PlaceCols {
    fn of<'a>(places: impl IntoIterator<Item = &'a Place>) -> PlaceCols {
        let mut c = PlaceCols {
            workspace_id: Vec::new(),
            start_us: Vec::new(),
            key_id: Vec::new(),
        };
        for (ws, start, id) in places {
            c.workspace_id.push(ws.clone());
            c.start_us.push(*start);
            c.key_id.push(*id);
        }
        c
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        vec![&self.workspace_id, &self.start_us, &self.key_id]
    }
}

fn place_of(row: &Row) -> Result<Place> {
    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
}

/// The rows of `tier` with their keys' dimensions: the first 17 columns the key ([`key_of`]),
/// the 18th the encoded rollup.
fn keyed_select(tier: Tier) -> String {
    let (table, start) = (tier.table(), tier.start_column());
    format!(
        "SELECT {table}.workspace_id, {table}.{start}, {DIM_COLUMNS}, {table}.data FROM {table}
         JOIN rollup_keys ON rollup_keys.id = {table}.key_id"
    )
}

/// A key's dimensions, read from 15 columns from `at` (in [`DIM_COLUMNS`] order).
fn dims_of(row: &Row, at: usize) -> Result<RollupKey> {
    let status: i32 = row.try_get(at + 6)?;
    Ok(RollupKey {
        workspace_id: String::new(),
        start_us: 0,
        model: row.try_get(at)?,
        provider: row.try_get(at + 1)?,
        channel: row.try_get(at + 2)?,
        grp: row.try_get(at + 3)?,
        dialect: row.try_get(at + 4)?,
        stream: row.try_get(at + 5)?,
        status: u16::try_from(status).map_err(|_| corrupt("status", &status.to_string()))?,
        outcome: row.try_get(at + 7)?,
        classification: row.try_get(at + 8)?,
        endpoint: row.try_get(at + 9)?,
        effort: row.try_get(at + 10)?,
        tools: row.try_get(at + 11)?,
        max_output_bucket: row.try_get(at + 12)?,
        input_bucket: row.try_get(at + 13)?,
        region: row.try_get(at + 14)?,
    })
}

/// A rollup row's key, read from the first 17 columns of [`keyed_select`].
fn key_of(row: &Row) -> Result<RollupKey> {
    Ok(RollupKey {
        workspace_id: row.try_get(0)?,
        start_us: row.try_get(1)?,
        ..dims_of(row, 2)?
    })
}

fn corrupt_rollup(e: String) -> StoreError {
    StoreError::Corrupt(format!("rollup: {e}"))
}

/// Writes `(place, encoded rollup)` rows of `tier`: inserts, or with a `DO UPDATE` conflict
/// overwrites existing places; returns the places written.
async fn write_rollups<D: AsRef<[u8]>>(
    tx: &Transaction<'_>,
    tier: Tier,
    rows: &[(Place, D)],
    conflict: &str,
) -> Result<Vec<Place>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let places = PlaceCols::of(rows.iter().map(|(p, _)| p));
    let data: Vec<&[u8]> = rows.iter().map(|(_, d)| d.as_ref()).collect();
    let mut params = places.params();
    params.push(&data);
    let (table, columns) = (tier.table(), place_columns(tier));
    let sql = format!(
        "INSERT INTO {table} ({columns}, data) SELECT * FROM UNNEST($1::text[], $2::int8[],
            $3::int4[], $4::bytea[])
         ON CONFLICT ({columns}) {conflict} RETURNING {columns}"
    );
    let stmt = tx.prepare_cached(&sql).await?;
    tx.query(&stmt, &params)
        .await?
        .iter()
        .map(place_of)
        .collect()
}

/// The ids of the rollup keys `records` will be folded under, added where missing before the
/// transaction that folds them, so that it never waits on another instance adding one.
pub(crate) async fn key_ids(c: &impl GenericClient, records: &[RequestRecord]) -> Result<KeyIds> {
    let keys: Vec<RollupKey> = records.iter().filter_map(RollupKey::of).collect();
    KeyIds::of(c, &keys).await
}

/// The hour before which the hour tier is whole, as an SQL expression: readers take the hour
/// rows before it and the minute rows from it on, in one statement (one snapshot of both).
pub(crate) const FOLDED_BEFORE: &str = "(SELECT folded_before_us FROM hour_folds)";

/// The hour before which the hour tier is whole, share-locked until `tx` ends: a fold of the
/// hours after it ([`fold_closed_hours`]) waits for `tx`, and `tx` for a fold under way.
async fn folded_before(tx: &Transaction<'_>) -> Result<i64> {
    let row = tx
        .query_one("SELECT folded_before_us FROM hour_folds FOR SHARE", &[])
        .await?;
    Ok(row.try_get(0)?)
}

/// Folds `delta` (minute rollups of records whose keys `ids` holds, [`key_ids`]) into the
/// stored rollups, inside the transaction that wrote its rows: into the minute tier, and into
/// the hour tier where the hour is folded already (a late record's).
pub(crate) async fn merge_into(
    tx: &Transaction<'_>,
    delta: HashMap<RollupKey, Rollup>,
    ids: &KeyIds,
) -> Result<()> {
    let folded = folded_before(tx).await?;
    let hours = by_hour(delta.iter().filter(|(k, _)| k.start_us < folded));
    merge_tier(tx, Tier::Minute, delta, ids).await?;
    merge_tier(tx, Tier::Hour, hours, ids).await
}

/// Folds into the hour tier the next closed hour after those folded (all of them, at most one
/// with minute rows: a call's work stays one hour's rollups), if it starts before `before_us`;
/// returns the hour before which the tier is whole now. Any instance may call it: the first
/// takes `hour_folds` for update, waiting for the batches under way (they share-lock it), and
/// the others then find the work done.
pub(crate) async fn fold_closed_hours(
    c: &mut deadpool_postgres::ClientWrapper,
    before_us: i64,
) -> Result<i64> {
    let before_us = floor_hour(before_us);
    let tx = c.transaction().await?;
    let folded: i64 = tx
        .query_one("SELECT folded_before_us FROM hour_folds FOR UPDATE", &[])
        .await?
        .try_get(0)?;
    if folded >= before_us {
        tx.commit().await?;
        return Ok(folded);
    }
    let next: Option<i64> = tx
        .query_one(
            "SELECT min(minute_us) FROM rollups WHERE minute_us >= $1 AND minute_us < $2",
            &[&folded, &before_us],
        )
        .await?
        .try_get(0)?;
    let now_folded = match next {
        Some(minute) => {
            rebuild_hour_rows(&tx, floor_hour(minute)).await?;
            floor_hour(minute) + HOUR_US
        }
        None => before_us,
    };
    tx.execute(
        "UPDATE hour_folds SET folded_before_us = $1",
        &[&now_folded],
    )
    .await?;
    tx.commit().await?;
    Ok(now_folded)
}

/// `rollups` by their place, in place order: the order every instance locks rows in.
fn placed(
    rollups: impl IntoIterator<Item = (RollupKey, Rollup)>,
    ids: &KeyIds,
) -> Result<Vec<(Place, Rollup)>> {
    let mut out = rollups
        .into_iter()
        .map(|(k, r)| Ok((ids.place(&k)?, r)))
        .collect::<Result<Vec<_>>>()?;
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

async fn merge_tier(
    tx: &Transaction<'_>,
    tier: Tier,
    delta: HashMap<RollupKey, Rollup>,
    ids: &KeyIds,
) -> Result<()> {
    if delta.is_empty() {
        return Ok(());
    }
    let delta = placed(delta, ids)?;
    // Keys no instance has written yet: inserted as they are.
    let encoded: Vec<(Place, Vec<u8>)> =
        delta.iter().map(|(p, r)| (p.clone(), r.encode())).collect();
    let inserted: HashSet<Place> = write_rollups(tx, tier, &encoded, "DO NOTHING")
        .await?
        .into_iter()
        .collect();
    let mut rest: Vec<(Place, Rollup)> = delta
        .into_iter()
        .filter(|(p, _)| !inserted.contains(p))
        .collect();
    if rest.is_empty() {
        return Ok(());
    }
    // The others: locked in place order (instances folding into one minute queue, never
    // deadlock on each other), merged with what is stored, written back.
    let places = PlaceCols::of(rest.iter().map(|(p, _)| p));
    let (table, columns) = (tier.table(), place_columns(tier));
    let sql = format!(
        "SELECT {columns}, data FROM {table} WHERE ({columns}) IN
            (SELECT * FROM {PLACE_UNNEST}) ORDER BY {columns} FOR UPDATE"
    );
    let stmt = tx.prepare_cached(&sql).await?;
    let mut stored: HashMap<Place, Vec<u8>> = HashMap::new();
    for row in tx.query(&stmt, &places.params()).await? {
        stored.insert(place_of(&row)?, row.try_get(3)?);
    }
    for (p, r) in &mut rest {
        if let Some(have) = stored.get(p) {
            r.merge_encoded(have).map_err(corrupt_rollup)?;
        }
    }
    let merged: Vec<(Place, Vec<u8>)> = rest.into_iter().map(|(p, r)| (p, r.encode())).collect();
    write_rollups(tx, tier, &merged, "DO UPDATE SET data = excluded.data").await?;
    Ok(())
}

/// Locks the rows of `sorted` places in `tier` (made empty where missing), in place order, so
/// that a concurrent fold waits and then merges into the rebuilt value.
async fn lock_places(tx: &Transaction<'_>, tier: Tier, sorted: &[Place]) -> Result<()> {
    let empty = Rollup::new().encode();
    let placeholders: Vec<(Place, &[u8])> = sorted
        .iter()
        .map(|p| (p.clone(), empty.as_slice()))
        .collect();
    write_rollups(tx, tier, &placeholders, "DO NOTHING").await?;
    let locked = PlaceCols::of(sorted);
    let (table, columns) = (tier.table(), place_columns(tier));
    let lock = format!(
        "SELECT 1 FROM {table} WHERE ({columns}) IN (SELECT * FROM {PLACE_UNNEST})
         ORDER BY {columns} FOR UPDATE"
    );
    tx.query(&lock, &locked.params()).await?;
    Ok(())
}

/// The places of `keys`, sorted, and each key by its place.
fn places_of<'a>(
    keys: impl IntoIterator<Item = &'a RollupKey>,
    ids: &KeyIds,
) -> Result<(Vec<Place>, HashMap<Place, &'a RollupKey>)> {
    let by_place = keys
        .into_iter()
        .map(|k| Ok((ids.place(k)?, k)))
        .collect::<Result<HashMap<_, _>>>()?;
    let mut sorted: Vec<Place> = by_place.keys().cloned().collect();
    sorted.sort();
    Ok((sorted, by_place))
}

/// Writes the rebuilt rollups of the `sorted` places in `tier`: those whose key is in `fresh`
/// overwritten, the others (nothing left to roll up) deleted.
async fn write_rebuilt(
    tx: &Transaction<'_>,
    tier: Tier,
    sorted: Vec<Place>,
    keys: &HashMap<Place, &RollupKey>,
    fresh: &HashMap<RollupKey, Rollup>,
) -> Result<()> {
    let mut rebuilt: Vec<(Place, Vec<u8>)> = Vec::new();
    let mut gone: Vec<Place> = Vec::new();
    for p in sorted {
        match keys.get(&p).and_then(|k| fresh.get(*k)) {
            Some(r) => rebuilt.push((p, r.encode())),
            None => gone.push(p),
        }
    }
    write_rollups(tx, tier, &rebuilt, "DO UPDATE SET data = excluded.data").await?;
    if !gone.is_empty() {
        let gone = PlaceCols::of(&gone);
        let (table, columns) = (tier.table(), place_columns(tier));
        let delete =
            format!("DELETE FROM {table} WHERE ({columns}) IN (SELECT * FROM {PLACE_UNNEST})");
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
    let ids = KeyIds::of(&**tx, keys).await?;
    let (sorted, by_place) = places_of(keys, &ids)?;
    lock_places(tx, Tier::Minute, &sorted).await?;
    let minutes: HashSet<(&str, i64)> = keys
        .iter()
        .map(|k| (k.workspace_id.as_str(), k.start_us))
        .collect();
    let sql = format!(
        "{} WHERE created_at_us >= $2 AND created_at_us < $3{}",
        select(),
        super::names::code_equals("workspace_id", "$1")
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
    write_rebuilt(tx, Tier::Minute, sorted, &by_place, &fresh).await?;
    // Hours not folded yet are read from the minutes just rebuilt.
    let folded = folded_before(tx).await?;
    let hour_keys: HashSet<RollupKey> = keys
        .iter()
        .map(RollupKey::hour)
        .filter(|k| k.start_us < folded)
        .collect();
    let (hours, hour_by_place) = places_of(&hour_keys, &ids)?;
    lock_places(tx, Tier::Hour, &hours).await?;
    let of_hour = format!(
        "{} WHERE rollups.workspace_id = $1 AND rollups.minute_us >= $2
            AND rollups.minute_us < $2 + {HOUR_US}",
        keyed_select(Tier::Minute)
    );
    let mut merged: HashMap<RollupKey, Rollup> = HashMap::new();
    let hour_starts: HashSet<(&str, i64)> = hour_keys
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
    write_rebuilt(tx, Tier::Hour, hours, &hour_by_place, &merged).await
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
        // An hour not folded yet has no rows to rebuild: its fold reads the minutes left.
        let folded: i64 = tx
            .query_one("SELECT folded_before_us FROM hour_folds", &[])
            .await?
            .try_get(0)?;
        if cut_hour < end && cut_hour < folded {
            rebuild_hour_rows(&tx, cut_hour).await?;
        }
        tx.commit().await?;
    }
}

/// Recomputes every hour row of `hour_us` (all workspaces) from the minute rows left in it.
async fn rebuild_hour_rows(tx: &Transaction<'_>, hour_us: i64) -> Result<()> {
    let rows = tx
        .query(
            &format!(
                "{} WHERE rollups.minute_us >= $1 AND rollups.minute_us < $2",
                keyed_select(Tier::Minute)
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
    let ids = KeyIds::of(&**tx, rollups.keys()).await?;
    let rows: Vec<(Place, Vec<u8>)> = placed(rollups, &ids)?
        .into_iter()
        .map(|(p, r)| (p, r.encode()))
        .collect();
    for chunk in rows.chunks(4096) {
        write_rollups(tx, tier, chunk, "DO UPDATE SET data = excluded.data").await?;
    }
    Ok(())
}

/// Builds the hour tier from the minute tier, inside the migration that adds it: whatever the
/// hour tier held is replaced. Reads the minute rows in key order through a portal, a few
/// thousand at a time, and writes each workspace-hour when the next one starts, so memory stays
/// bounded by one hour's keys.
pub(crate) async fn backfill_hours(tx: &Transaction<'_>) -> Result<()> {
    tx.batch_execute("DELETE FROM rollups_hourly").await?;
    let stmt = tx
        .prepare(&format!(
            "{} ORDER BY rollups.workspace_id, rollups.minute_us",
            keyed_select(Tier::Minute)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::usage::{GroupDim, UsageFilter};
    use crate::Store;
    use laptime_core::rollup::Metric;

    fn requests(prefix: &str, models: &[&str]) -> Vec<RequestRecord> {
        let day = 20_000 * super::super::records::DAY_US;
        (0..120)
            .map(|i| {
                let mut r = sample(&format!("{prefix}{i}"), "ws", day + i * MINUTE_US / 2);
                r.model = Some(models[i as usize % models.len()].to_string());
                r
            })
            .collect()
    }

    /// A new store whose hour tier is whole before `at` only, and a connection to it.
    async fn store_whole_before(
        at: i64,
    ) -> (crate::testing::PgSchema, Store, deadpool_postgres::Object) {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let store = Store::open_postgres(schema.url()).await.unwrap();
        let c = store.postgres().unwrap().client().await.unwrap();
        c.execute("UPDATE hour_folds SET folded_before_us = $1", &[&at])
            .await
            .unwrap();
        (schema, store, c)
    }

    /// An hour is folded into the hour tier once, when a writer finds it closed; until then
    /// `usage` and the filtered log read its minutes, and give the same answers before and
    /// after. A late record of a folded hour goes into its hour row at once.
    #[tokio::test]
    async fn hours_are_folded_once_closed_and_every_read_agrees_before_and_after() {
        let day = 20_000 * super::super::records::DAY_US;
        // Every hour from `day` on is still to fold, as if the store were written in real time.
        let (_schema, store, mut c) = store_whole_before(day).await;
        let pg = store.postgres().unwrap().clone();
        // 120 requests in the first hour; none in the second; in the third 3,000 of another
        // model, more than the filtered log's first looks take, so that it walks the rollups
        // to find the first hour's.
        let mut records = requests("a", &["m-1", "m-2"]);
        records.extend((0..3_000).map(|i| {
            let mut r = sample(&format!("c{i}"), "ws", day + 2 * HOUR_US + i * 1_200_000);
            r.model = Some("m-3".into());
            r
        }));
        store.insert_batch(records).await.unwrap();
        let q = pg.client().await.unwrap();
        let count = |sql: &'static str| {
            let q = &q;
            async move { q.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
        };
        assert_eq!(count("SELECT count(*) FROM rollups_hourly").await, 0);

        let window = (day, day + 3 * HOUR_US);
        let model = |m: &str| UsageFilter {
            model: Some(m.into()),
            ..UsageFilter::default()
        };
        let reads = || async {
            let usage = store
                .usage("ws", window, UsageFilter::default(), vec![GroupDim::Model])
                .await
                .unwrap();
            let total = (
                usage.total.requests,
                usage.total.sketch(Metric::LatencyMs).count(),
            );
            let mut groups = usage.first_dim_counts();
            groups.sort();
            let recent: Vec<String> = store
                .recent("ws", model("m-1"), Some(window), 200)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.request_id)
                .collect();
            let newest = store
                .recent("ws", model("m-3"), Some(window), 5)
                .await
                .unwrap();
            (total, groups, recent, newest.len())
        };
        let before = reads().await;
        assert_eq!(before.0, (3_120, 3_120));
        assert_eq!(
            before.1,
            [
                (Some("m-1".to_string()), 60),
                (Some("m-2".to_string()), 60),
                (Some("m-3".to_string()), 3_000)
            ]
        );
        assert_eq!(before.2.len(), 60);
        assert_eq!(before.3, 5);

        // A call folds the first hour with minutes; the next passes the empty second hour and
        // folds the third; then there is nothing before the bound to fold.
        let bound = day + 4 * HOUR_US;
        assert_eq!(
            fold_closed_hours(&mut c, bound).await.unwrap(),
            day + HOUR_US
        );
        assert_eq!(count("SELECT count(*) FROM rollups_hourly").await, 2);
        assert_eq!(reads().await, before);
        assert_eq!(
            fold_closed_hours(&mut c, bound).await.unwrap(),
            day + 3 * HOUR_US
        );
        assert_eq!(fold_closed_hours(&mut c, bound).await.unwrap(), bound);
        assert_eq!(fold_closed_hours(&mut c, bound).await.unwrap(), bound);
        assert_eq!(count("SELECT count(*) FROM rollups_hourly").await, 3);
        // Read from the hour rows now (the whole window is of folded hours): the same.
        assert_eq!(reads().await, before);

        // A late request of the folded first hour goes straight into its hour row.
        let mut late = sample("late", "ws", day + 10 * MINUTE_US);
        late.model = Some("m-1".into());
        store.insert_batch(vec![late]).await.unwrap();
        assert_eq!(count("SELECT count(*) FROM rollups_hourly").await, 3);
        let after = reads().await;
        assert_eq!(after.0, (3_121, 3_121));
        assert_eq!(after.2.len(), 61);
    }

    /// Retention that cuts an hour not folded yet leaves it to its fold, which folds the
    /// minutes left; an hour folded already has its rows rebuilt from them at once.
    #[tokio::test]
    async fn retention_inside_an_hour_not_folded_yet_leaves_the_fold_its_remaining_minutes() {
        let day = 20_000 * super::super::records::DAY_US;
        let (_schema, store, mut c) = store_whole_before(day + HOUR_US).await;
        // 120 requests, one each 30 s, in each of the first two hours: the first is folded
        // (its rows are written at once), the second not yet.
        let mut records = requests("a", &["m-1"]);
        records.extend(requests("b", &["m-1"]).into_iter().map(|mut r| {
            r.created_at_us += HOUR_US;
            r
        }));
        store.insert_batch(records).await.unwrap();
        let total = |from: i64| {
            let store = &store;
            async move {
                let window = (from, day + 2 * HOUR_US);
                let u = store.usage("ws", window, UsageFilter::default(), vec![]);
                u.await.unwrap().total.requests
            }
        };
        assert_eq!(total(day).await, 240);
        // Cut at 30 minutes into the second hour: the first hour goes, half the second stays.
        let deleted = store
            .delete_older_than(day + HOUR_US + 30 * MINUTE_US, 1_000)
            .await
            .unwrap();
        assert_eq!(deleted, 180);
        assert_eq!(total(day).await, 60);
        assert_eq!(
            fold_closed_hours(&mut c, day + 2 * HOUR_US).await.unwrap(),
            day + 2 * HOUR_US
        );
        let hour_rows: i64 = c
            .query_one("SELECT count(*) FROM rollups_hourly", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(hour_rows, 1);
        assert_eq!(total(day).await, 60);
        assert_eq!(total(day + HOUR_US).await, 60);
    }

    /// Rollup rows hold a key id in place of their dimensions; instances adding the same new
    /// keys at once share one row per key, and usage reads the dimensions back.
    #[tokio::test]
    async fn rollup_rows_refer_to_one_key_row_per_dimensions_shared_by_instances() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let a = Store::open_postgres(schema.url()).await.unwrap();
        let b = Store::open_postgres(schema.url()).await.unwrap();
        let (ra, rb) = (
            requests("a", &["m-1", "m-2"]),
            requests("b", &["m-2", "m-3"]),
        );
        let (wa, wb) = tokio::join!(a.insert_batch(ra.clone()), b.insert_batch(rb.clone()));
        wa.unwrap();
        wb.unwrap();
        let config: tokio_postgres::Config = schema.url().parse().unwrap();
        let client = crate::pg::connect(&config).await.unwrap();
        let count = |sql: &'static str| {
            let client = &client;
            async move { client.query_one(sql, &[]).await.unwrap().get::<_, i64>(0) }
        };
        // One key row per distinct dimensions (the models; the rest is alike), none repeated.
        assert_eq!(count("SELECT count(*) FROM rollup_keys").await, 3);
        let columns: Vec<String> = client
            .query(
                "SELECT column_name::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = 'rollups'
                 ORDER BY ordinal_position",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(columns, ["workspace_id", "minute_us", "key_id", "data"]);
        assert_eq!(
            count("SELECT count(*) FROM rollups WHERE key_id NOT IN (SELECT id FROM rollup_keys)")
                .await,
            0
        );
        let day = 20_000 * super::super::records::DAY_US;
        let window = (day, day + 2 * HOUR_US);
        let all = a
            .usage("ws", window, UsageFilter::default(), vec![GroupDim::Model])
            .await
            .unwrap();
        assert_eq!(
            all.first_dim_counts(),
            [
                (Some("m-2".into()), 120),
                (Some("m-1".into()), 60),
                (Some("m-3".into()), 60)
            ]
        );
        let one = UsageFilter {
            model: Some("m-3".into()),
            ..UsageFilter::default()
        };
        let got = b.usage("ws", window, one.clone(), vec![]).await.unwrap();
        assert_eq!(got.total.requests, 60);
        // Past the keys a grouping reads at once, it reads those of the window's rows.
        client
            .batch_execute(
                "INSERT INTO rollup_keys (model, provider, channel, grp, dialect, stream, status,
                    outcome, classification, endpoint, effort, tools, max_output_bucket,
                    input_bucket, region)
                 SELECT 'unused-' || g, '', '', '', '', false, 200, '', '', '', '', '', '', '', ''
                 FROM generate_series(1, 16384) g",
            )
            .await
            .unwrap();
        let again = a
            .usage("ws", window, UsageFilter::default(), vec![GroupDim::Model])
            .await
            .unwrap();
        assert_eq!(again.first_dim_counts(), all.first_dim_counts());
        let by_model = b
            .usage("ws", window, one, vec![GroupDim::Model])
            .await
            .unwrap();
        assert_eq!(by_model.first_dim_counts(), [(Some("m-3".into()), 60)]);
    }
}
