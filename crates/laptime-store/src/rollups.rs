//! Rollups in the store, in two tiers: one [`Rollup`] per workspace, minute and key (model,
//! provider, channel, group, dialect, stream, status, outcome, classification, endpoint, and the
//! comparison dimensions of [`laptime_core::compare`]: effort class, tools present, max-output and
//! input-token buckets, region), kept in the `rollups` table as an encoded BLOB; and the same per
//! hour in `rollups_hourly`, each hour row the merge of its key's minute rows, so that a usage
//! window reads its whole hours there and only its partial edge hours minute by minute (a day
//! costs 24 × keys rows plus at most 2 × 60 × keys, not 1,440 × keys).
//!
//! The comparison dimensions are in the key rather than answered from the rows, so that
//! "p95 first visible text of streamed, tool-free requests with 1k-4k input tokens" costs what
//! any usage answer costs (minutes × keys, never requests). Each is a closed set (the effort a
//! class, token counts buckets), so the keys a minute can have stay bounded whatever clients
//! send; a workload runs a handful of shapes, so a minute's keys grow by a small factor.
//! Rollups written before these dimensions existed hold `''` for them (absent).
//!
//! The recorder folds every batch into both tiers in the batch's own transaction (aggregate in
//! memory, then read-merge-write one row per key and tier), so rollups and rows never disagree,
//! and neither do the tiers: a reader sees all or none. A record that replaces an existing row
//! (same request id) cannot be subtracted from a sketch, so the minute rollups it touches are
//! rebuilt from the rows instead, and their hours from the minutes. Retention deletes whole
//! minutes, and rebuilds the hour it cuts from the minutes it keeps. Records without a
//! workspace belong to no workspace's usage and are not rolled up.
//!
//! Absent text dimensions are stored as `''` so that the primary key works (SQLite treats NULLs
//! as distinct); they read back as `None`.
//!
//! Since SQLite schema v17 the text dimensions hold the codes of [`crate::names`] as the
//! request rows do (written so, and read back as names in SQL): a minute row's names were most
//! of its key, repeated in every row of every minute. The workspace stays text, as retention
//! walks the tiers by it.

use std::collections::{HashMap, HashSet};

use laptime_core::compare::{Comparison, EffortClass, TokenBucket};
use laptime_core::rollup::Rollup;
use laptime_core::timeline::RequestRecord;
use rusqlite::types::ToSqlOutput;
use rusqlite::{params, Connection, OptionalExtension};

use crate::names::{self, Codes};
use crate::records::{self, SELECT};
use crate::{Result, StoreError};

/// One minute, in microseconds.
pub const MINUTE_US: i64 = 60_000_000;

/// The start of the minute holding `us`.
pub fn floor_minute(us: i64) -> i64 {
    us.div_euclid(MINUTE_US) * MINUTE_US
}

/// The smallest whole minute at or after `us`.
pub fn ceil_minute(us: i64) -> i64 {
    let f = floor_minute(us);
    if f == us {
        f
    } else {
        f.saturating_add(MINUTE_US)
    }
}

/// One hour, in microseconds.
pub const HOUR_US: i64 = 60 * MINUTE_US;

/// The start of the hour holding `us` (UTC hours: every zone's hours that start on the hour).
pub fn floor_hour(us: i64) -> i64 {
    us.div_euclid(HOUR_US) * HOUR_US
}

/// The smallest whole hour at or after `us`.
pub fn ceil_hour(us: i64) -> i64 {
    let f = floor_hour(us);
    if f == us {
        f
    } else {
        f.saturating_add(HOUR_US)
    }
}

/// Where a rollup row lives: the per-minute table, or the per-hour one that merges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tier {
    Minute,
    Hour,
}

impl Tier {
    pub(crate) fn table(self) -> &'static str {
        match self {
            Tier::Minute => "rollups",
            Tier::Hour => "rollups_hourly",
        }
    }

    /// The column holding the start of the row's minute or hour.
    pub(crate) fn start_column(self) -> &'static str {
        match self {
            Tier::Minute => "minute_us",
            Tier::Hour => "hour_us",
        }
    }
}

/// The key of one rollup row. Text dimensions use `""` for absent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct RollupKey {
    pub workspace_id: String,
    /// The start of the row's minute (in the hour tier: of its hour).
    pub start_us: i64,
    pub model: String,
    pub provider: String,
    pub channel: String,
    pub grp: String,
    pub dialect: String,
    pub stream: bool,
    pub status: u16,
    pub outcome: String,
    pub classification: String,
    pub endpoint: String,
    /// The comparison dimensions ([`Comparison`]); `tools` is `"true"`/`"false"`.
    pub effort: String,
    pub tools: String,
    pub max_output_bucket: String,
    pub input_bucket: String,
    pub region: String,
}

impl RollupKey {
    /// The key a record rolls up under; `None` for a record without a workspace.
    pub(crate) fn of(r: &RequestRecord) -> Option<RollupKey> {
        let KeyOf {
            workspace_id,
            start_us,
            model,
            provider,
            channel,
            grp,
            dialect,
            stream,
            status,
            outcome,
            classification,
            endpoint,
            effort,
            tools,
            max_output_bucket,
            input_bucket,
            region,
        } = KeyOf::of(r)?;
        Some(RollupKey {
            workspace_id: workspace_id.to_string(),
            start_us,
            model: model.to_string(),
            provider: provider.to_string(),
            channel: channel.to_string(),
            grp: grp.to_string(),
            dialect: dialect.to_string(),
            stream,
            status,
            outcome: outcome.to_string(),
            classification: classification.to_string(),
            endpoint: endpoint.to_string(),
            effort: effort.to_string(),
            tools: tools.to_string(),
            max_output_bucket: max_output_bucket.to_string(),
            input_bucket: input_bucket.to_string(),
            region: region.to_string(),
        })
    }

    /// Whether `r`'s key is this one, without building it ([`KeyOf`]).
    fn is_of(&self, r: &RequestRecord) -> bool {
        KeyOf::of(r).is_some_and(|k| {
            k == KeyOf {
                workspace_id: &self.workspace_id,
                start_us: self.start_us,
                model: &self.model,
                provider: &self.provider,
                channel: &self.channel,
                grp: &self.grp,
                dialect: &self.dialect,
                stream: self.stream,
                status: self.status,
                outcome: &self.outcome,
                classification: &self.classification,
                endpoint: &self.endpoint,
                effort: &self.effort,
                tools: &self.tools,
                max_output_bucket: &self.max_output_bucket,
                input_bucket: &self.input_bucket,
                region: &self.region,
            }
        })
    }

    /// The key of the hour row this minute row merges into.
    pub(crate) fn hour(&self) -> RollupKey {
        RollupKey {
            start_us: floor_hour(self.start_us),
            ..self.clone()
        }
    }

    /// The names of [`CODED`], in its order.
    fn names(&self) -> [&str; 13] {
        [
            &self.model,
            &self.provider,
            &self.channel,
            &self.grp,
            &self.dialect,
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

/// The dimensions stored as codes ([`crate::names`]): all but the stream flag and the status.
pub(crate) const CODED: [&str; 13] = [
    "model",
    "provider",
    "channel",
    "grp",
    "dialect",
    "outcome",
    "classification",
    "endpoint",
    "effort",
    "tools",
    "max_output_bucket",
    "input_bucket",
    "region",
];

/// The codes of every name of `keys`, found or given in the write transaction.
pub(crate) fn codes_of<'k>(
    conn: &Connection,
    keys: impl IntoIterator<Item = &'k RollupKey>,
) -> Result<Codes> {
    Ok(Codes::of_names(
        conn,
        keys.into_iter().flat_map(RollupKey::names),
    )?)
}

/// Minute rollups merged into the rollups of their hours, by hour key.
pub(crate) fn by_hour<'a>(
    minutes: impl IntoIterator<Item = (&'a RollupKey, &'a Rollup)>,
) -> HashMap<RollupKey, Rollup> {
    let mut out: HashMap<RollupKey, Rollup> = HashMap::new();
    for (k, r) in minutes {
        out.entry(k.hour()).or_default().merge(r);
    }
    out
}

/// A record's rollup key as borrowed text: what [`RollupKey::of`] builds, and what
/// [`RollupKey::is_of`] compares with a key built before. Both destructure or build every
/// field, so a dimension added to the key cannot be left out of either.
#[derive(PartialEq)]
struct KeyOf<'a> {
    workspace_id: &'a str,
    start_us: i64,
    model: &'a str,
    provider: &'a str,
    channel: &'a str,
    grp: &'a str,
    dialect: &'a str,
    stream: bool,
    status: u16,
    outcome: &'a str,
    classification: &'a str,
    endpoint: &'a str,
    effort: &'a str,
    tools: &'a str,
    max_output_bucket: &'a str,
    input_bucket: &'a str,
    region: &'a str,
}

impl<'a> KeyOf<'a> {
    fn of(r: &'a RequestRecord) -> Option<KeyOf<'a>> {
        let text = |v: &'a Option<String>| v.as_deref().unwrap_or_default();
        let c = Comparison::of(r);
        Some(KeyOf {
            workspace_id: r.workspace_id.as_deref()?,
            start_us: floor_minute(r.created_at_us),
            model: text(&r.model),
            provider: text(&r.provider),
            channel: text(&r.channel),
            grp: text(&r.group),
            dialect: r.dialect.as_str(),
            stream: r.stream,
            status: r.status,
            outcome: r.outcome.as_str(),
            classification: r.classification.as_str(),
            endpoint: r.exchange.endpoint.as_str(),
            effort: c.effort.map(EffortClass::as_str).unwrap_or_default(),
            tools: if c.tools_present { "true" } else { "false" },
            max_output_bucket: c.max_output.map(TokenBucket::as_str).unwrap_or_default(),
            input_bucket: c.input.map(TokenBucket::as_str).unwrap_or_default(),
            region: c.region.unwrap_or_default(),
        })
    }
}

/// Rollups of a set of records, by key. Most records of a batch share the key of the one
/// before (one model, channel and status under steady traffic), so a record is first compared
/// with that key and added to its rollup; only a record whose key differs builds its key
/// (fourteen strings) and looks it up by hash.
pub(crate) fn aggregate<'a>(
    records: impl IntoIterator<Item = &'a RequestRecord>,
) -> HashMap<RollupKey, Rollup> {
    let mut rows: Vec<(RollupKey, Rollup)> = Vec::new();
    let mut index: HashMap<RollupKey, usize> = HashMap::new();
    let mut last: Option<usize> = None;
    for r in records {
        let same = last
            .and_then(|i| rows.get_mut(i))
            .filter(|(key, _)| key.is_of(r));
        if let Some((_, rollup)) = same {
            rollup.add(r);
            continue;
        }
        last = RollupKey::of(r).map(|key| match index.get(&key) {
            Some(&i) => i,
            None => {
                index.insert(key.clone(), rows.len());
                rows.push((key, Rollup::default()));
                rows.len() - 1
            }
        });
        if let Some((_, rollup)) = last.and_then(|i| rows.get_mut(i)) {
            rollup.add(r);
        }
    }
    rows.into_iter().collect()
}

/// The key's dimensions after the workspace (`?1`) and the start (`?2`).
const DIMS_WHERE: &str = "model = ?3 AND provider = ?4
    AND channel = ?5 AND grp = ?6 AND dialect = ?7 AND stream = ?8 AND status = ?9
    AND outcome = ?10 AND classification = ?11 AND endpoint = ?12 AND effort = ?13
    AND tools = ?14 AND max_output_bucket = ?15 AND input_bucket = ?16 AND region = ?17";

/// The dimension columns, in key order after the workspace and the start.
pub(crate) const DIM_COLUMNS: &str = "model, provider, channel, grp, dialect, stream, status, \
    outcome, classification, endpoint, effort, tools, max_output_bucket, input_bucket, region";

/// `WHERE` of one row of `tier`, with the key as [`RollupKey::params`].
fn key_where(tier: Tier) -> String {
    format!(
        "workspace_id = ?1 AND {} = ?2 AND {DIMS_WHERE}",
        tier.start_column()
    )
}

impl RollupKey {
    /// The key as stored, the `?1`…`?17` parameters of [`key_where`] and of the upsert; its
    /// names as `codes` gives them.
    fn params<'a>(&'a self, codes: &'a Codes) -> [ToSqlOutput<'a>; 17] {
        let name = |n: &'a String| codes.stored(n);
        [
            ToSqlOutput::from(self.workspace_id.as_str()),
            ToSqlOutput::from(self.start_us),
            name(&self.model),
            name(&self.provider),
            name(&self.channel),
            name(&self.grp),
            name(&self.dialect),
            ToSqlOutput::from(self.stream),
            ToSqlOutput::from(self.status),
            name(&self.outcome),
            name(&self.classification),
            name(&self.endpoint),
            name(&self.effort),
            name(&self.tools),
            name(&self.max_output_bucket),
            name(&self.input_bucket),
            name(&self.region),
        ]
    }

    /// A key from a row whose first 17 columns are the workspace, the start and
    /// [`dim_names`] of the minute tier.
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RollupKey> {
        Ok(RollupKey {
            workspace_id: row.get(0)?,
            start_us: row.get(1)?,
            model: row.get(2)?,
            provider: row.get(3)?,
            channel: row.get(4)?,
            grp: row.get(5)?,
            dialect: row.get(6)?,
            stream: row.get(7)?,
            status: row.get(8)?,
            outcome: row.get(9)?,
            classification: row.get(10)?,
            endpoint: row.get(11)?,
            effort: row.get(12)?,
            tools: row.get(13)?,
            max_output_bucket: row.get(14)?,
            input_bucket: row.get(15)?,
            region: row.get(16)?,
        })
    }
}

fn corrupt(e: String) -> StoreError {
    StoreError::Corrupt(format!("rollup: {e}"))
}

/// [`DIM_COLUMNS`] of `table` read back as names.
fn dim_names(table: &str) -> String {
    DIM_COLUMNS
        .split(", ")
        .map(|col| match CODED.contains(&col) {
            true => names::resolved(table, col),
            false => col.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The stored (encoded) rollup of one key, if any.
fn stored(conn: &Connection, tier: Tier, k: &RollupKey, codes: &Codes) -> Result<Option<Vec<u8>>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT data FROM {} WHERE {}",
        tier.table(),
        key_where(tier)
    ))?;
    Ok(stmt
        .query_row(k.params(codes), |row| row.get(0))
        .optional()?)
}

/// Writes (inserts or overwrites) the rollup of one key.
fn store(conn: &Connection, tier: Tier, k: &RollupKey, r: &Rollup, codes: &Codes) -> Result<()> {
    let (table, start) = (tier.table(), tier.start_column());
    let mut stmt = conn.prepare_cached(&format!(
        "INSERT INTO {table} (workspace_id, {start}, {DIM_COLUMNS}, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)
         ON CONFLICT (workspace_id, {start}, {DIM_COLUMNS}) DO UPDATE SET data = excluded.data"
    ))?;
    let data = r.encode();
    let mut params = k.params(codes).to_vec();
    params.push(ToSqlOutput::from(data.as_slice()));
    stmt.execute(rusqlite::params_from_iter(params))?;
    Ok(())
}

fn remove(conn: &Connection, tier: Tier, k: &RollupKey, codes: &Codes) -> Result<()> {
    let mut stmt = conn.prepare_cached(&format!(
        "DELETE FROM {} WHERE {}",
        tier.table(),
        key_where(tier)
    ))?;
    stmt.execute(k.params(codes))?;
    Ok(())
}

/// Folds `delta` (minute rollups) into the stored rollups of both tiers: read, merge, write,
/// one row per key. Call inside the transaction that wrote the rows.
pub(crate) fn merge_into(conn: &Connection, delta: HashMap<RollupKey, Rollup>) -> Result<()> {
    let codes = codes_of(conn, delta.keys())?;
    let hours = by_hour(&delta);
    merge_tier(conn, Tier::Minute, delta, &codes)?;
    merge_tier(conn, Tier::Hour, hours, &codes)
}

fn merge_tier(
    conn: &Connection,
    tier: Tier,
    delta: HashMap<RollupKey, Rollup>,
    codes: &Codes,
) -> Result<()> {
    for (k, mut rollup) in delta {
        if let Some(have) = stored(conn, tier, &k, codes)? {
            rollup.merge_encoded(&have).map_err(corrupt)?;
        }
        store(conn, tier, &k, &rollup, codes)?;
    }
    Ok(())
}

/// Recomputes the rollups of `keys` from the rows (used when a row was replaced).
pub(crate) fn rebuild(conn: &Connection, keys: &HashSet<RollupKey>) -> Result<()> {
    let codes = codes_of(conn, keys)?;
    let minutes: HashSet<(&str, i64)> = keys
        .iter()
        .map(|k| (k.workspace_id.as_str(), k.start_us))
        .collect();
    let mut stmt = conn.prepare_cached(&format!(
        "{SELECT} WHERE workspace_id = ?1 AND created_at_us >= ?2 AND created_at_us < ?3"
    ))?;
    for (ws, minute) in minutes {
        let stored = names::stored(conn, ws)?;
        let rows = stmt
            .query_map(
                params![stored, minute, minute + MINUTE_US],
                records::from_row,
            )?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut fresh = aggregate(
            rows.iter()
                .filter(|r| RollupKey::of(r).is_some_and(|k| keys.contains(&k))),
        );
        for k in keys
            .iter()
            .filter(|k| k.workspace_id == ws && k.start_us == minute)
        {
            match fresh.remove(k) {
                Some(r) => store(conn, Tier::Minute, k, &r, &codes)?,
                None => remove(conn, Tier::Minute, k, &codes)?,
            }
        }
    }
    let hours: HashSet<RollupKey> = keys.iter().map(RollupKey::hour).collect();
    for k in &hours {
        rebuild_hour(conn, k, &codes)?;
    }
    Ok(())
}

/// Recomputes one hour row from its key's minute rows (removed when it has none).
fn rebuild_hour(conn: &Connection, k: &RollupKey, codes: &Codes) -> Result<()> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT data FROM rollups WHERE workspace_id = ?1 AND minute_us >= ?2
            AND minute_us < ?2 + {HOUR_US} AND {DIMS_WHERE}"
    ))?;
    let mut rows = stmt.query(k.params(codes))?;
    let mut merged: Option<Rollup> = None;
    while let Some(row) = rows.next()? {
        let blob = row
            .get_ref(0)?
            .as_blob()
            .map_err(|e| corrupt(e.to_string()))?;
        match &mut merged {
            Some(r) => r.merge_encoded(blob).map_err(corrupt)?,
            None => merged = Some(Rollup::decode(blob).map_err(corrupt)?),
        }
    }
    match merged {
        Some(r) => store(conn, Tier::Hour, k, &r, codes),
        None => remove(conn, Tier::Hour, k, codes),
    }
}

/// Recomputes the hour rows of workspace `ws` in `hour_us` from the minute rows left in it:
/// retention's step after deleting the minutes before its cutoff inside that hour.
pub(crate) fn rebuild_hour_rows(conn: &Connection, ws: &str, hour_us: i64) -> Result<()> {
    let mut merged: HashMap<RollupKey, Rollup> = HashMap::new();
    {
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT workspace_id, minute_us, {}, data FROM rollups
             WHERE workspace_id = ?1 AND minute_us >= ?2 AND minute_us < ?3",
            dim_names("rollups")
        ))?;
        let mut rows = stmt.query(params![ws, hour_us, hour_us.saturating_add(HOUR_US)])?;
        while let Some(row) = rows.next()? {
            let key = RollupKey::from_row(row)?.hour();
            let blob = row
                .get_ref(17)?
                .as_blob()
                .map_err(|e| corrupt(e.to_string()))?;
            match merged.get_mut(&key) {
                Some(r) => r.merge_encoded(blob).map_err(corrupt)?,
                None => {
                    merged.insert(key, Rollup::decode(blob).map_err(corrupt)?);
                }
            }
        }
    }
    conn.prepare_cached("DELETE FROM rollups_hourly WHERE workspace_id = ?1 AND hour_us = ?2")?
        .execute(params![ws, hour_us])?;
    let codes = codes_of(conn, merged.keys())?;
    for (k, r) in &merged {
        store(conn, Tier::Hour, k, r, &codes)?;
    }
    Ok(())
}

/// Builds the hour tier from the minute tier (the migration that adds it): whatever it held is
/// replaced, so that it is exact however the minutes came to be (another migration's backfill
/// may have folded rows into both tiers before). Streams the minute rows in key order, one
/// workspace-hour at a time, so memory stays bounded by one hour's keys.
pub(crate) fn backfill_hours(conn: &Connection) -> Result<()> {
    conn.execute("DELETE FROM rollups_hourly", [])?;
    let mut stmt = conn.prepare(&format!(
        "SELECT workspace_id, minute_us, {}, data FROM rollups
         ORDER BY workspace_id, minute_us",
        dim_names("rollups")
    ))?;
    let mut rows = stmt.query([])?;
    let mut current: Option<(String, i64)> = None;
    let mut pending: HashMap<RollupKey, Rollup> = HashMap::new();
    while let Some(row) = rows.next()? {
        let key = RollupKey::from_row(row)?.hour();
        let here = (key.workspace_id.clone(), key.start_us);
        if current.as_ref() != Some(&here) {
            store_hours(conn, &mut pending)?;
            current = Some(here);
        }
        let blob = row
            .get_ref(17)?
            .as_blob()
            .map_err(|e| corrupt(e.to_string()))?;
        match pending.get_mut(&key) {
            Some(r) => r.merge_encoded(blob).map_err(corrupt)?,
            None => {
                pending.insert(key, Rollup::decode(blob).map_err(corrupt)?);
            }
        }
    }
    store_hours(conn, &mut pending)
}

/// Writes the hour rows of `pending`, leaving it empty.
fn store_hours(conn: &Connection, pending: &mut HashMap<RollupKey, Rollup>) -> Result<()> {
    let codes = codes_of(conn, pending.keys())?;
    for (k, r) in pending.drain() {
        store(conn, Tier::Hour, &k, &r, &codes)?;
    }
    Ok(())
}

/// Stores the names of the rollups written as text before v17 as their codes, in both tiers
/// (the migration to v17; the other Rust steps, run before it, write codes already). A name
/// the table cannot take stays text, as when it is written.
pub(crate) fn code_names(conn: &Connection) -> Result<()> {
    for tier in [Tier::Minute, Tier::Hour] {
        let table = tier.table();
        let mut texts: HashSet<String> = HashSet::new();
        for col in CODED {
            let mut stmt = conn.prepare(&format!(
                "SELECT DISTINCT {col} FROM {table} WHERE typeof({col}) = 'text' AND {col} <> ''"
            ))?;
            for name in stmt.query_map([], |r| r.get::<_, String>(0))? {
                texts.insert(name?);
            }
        }
        if texts.is_empty() {
            continue;
        }
        Codes::of_names(conn, texts.iter().map(String::as_str))?;
        let set: Vec<String> = CODED
            .iter()
            .map(|col| {
                format!("{col} = COALESCE((SELECT code FROM names WHERE name = {col}), {col})")
            })
            .collect();
        conn.execute(&format!("UPDATE {table} SET {}", set.join(", ")), [])?;
    }
    Ok(())
}

/// Builds the rollups of every existing row (the migration that adds the table). Streams the
/// rows one workspace-minute at a time, so memory stays bounded by one minute's keys. Rows that
/// cannot be read are skipped and counted in the log rather than failing the migration.
pub(crate) fn backfill(conn: &Connection) -> Result<()> {
    let mut stmt = conn.prepare(&format!(
        "{SELECT} WHERE workspace_id IS NOT NULL ORDER BY workspace_id, created_at_us DESC"
    ))?;
    let mut rows = stmt.query([])?;
    let mut current: Option<(String, i64)> = None;
    let mut pending: Vec<RequestRecord> = Vec::new();
    let mut skipped = 0_u64;
    while let Some(row) = rows.next()? {
        let r = match records::from_row(row) {
            Ok(r) => r,
            Err(_) => {
                skipped += 1;
                continue;
            }
        };
        let here = (
            r.workspace_id.clone().unwrap_or_default(),
            floor_minute(r.created_at_us),
        );
        if current.as_ref() != Some(&here) {
            merge_into(conn, aggregate(&pending))?;
            pending.clear();
            current = Some(here);
        }
        pending.push(r);
    }
    merge_into(conn, aggregate(&pending))?;
    if skipped > 0 {
        tracing::warn!(
            skipped,
            "rollup backfill skipped rows it could not read; they are not in usage figures"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::usage::{usage, GroupDim, UsageFilter, UsageResult};
    use laptime_core::limit::Zone;
    use laptime_core::timeline::Outcome;

    /// Requests over two hours and a half: two models, one region, a failed one.
    fn requests() -> Vec<RequestRecord> {
        (0..150)
            .map(|i| {
                let mut r = sample(&format!("r{i}"), "ws", i * MINUTE_US + 7);
                r.model = Some(if i % 3 == 0 { "m-one" } else { "m-two" }.into());
                r.region = (i % 2 == 0).then(|| "eu-west".into());
                if i % 10 == 0 {
                    (r.status, r.outcome) = (502, Outcome::UpstreamError);
                }
                r
            })
            .collect()
    }

    #[test]
    fn aggregate_keys_every_record_by_its_own_key_in_runs_and_alternations() {
        // Runs of one key, keys alternating record by record, a minute boundary inside a run,
        // a record without a workspace (no rollup) between two of one key, every dimension
        // that the comparison with the key before reads changed once.
        let mut records = Vec::new();
        for i in 0..40 {
            let mut r = sample(&format!("a{i}"), "ws", i * 5_000_000 + 7);
            r.model = Some(
                if i < 20 || i % 2 == 0 {
                    "m-one"
                } else {
                    "m-two"
                }
                .into(),
            );
            r.status = if i % 7 == 6 { 502 } else { 200 };
            records.push(r);
        }
        let mut bare = sample("bare", "ws", 7);
        bare.workspace_id = None;
        records.insert(3, bare);
        let changes: [fn(&mut RequestRecord); 9] = [
            |r| r.workspace_id = Some("ws-2".into()),
            |r| r.provider = None,
            |r| r.channel = Some("other".into()),
            |r| r.group = Some("g".into()),
            |r| r.dialect = laptime_core::Dialect::Chat,
            |r| r.stream = false,
            |r| r.outcome = Outcome::UpstreamError,
            |r| r.classification = laptime_core::slow::Classification::Failed,
            |r| r.region = Some("eu-west".into()),
        ];
        for (i, change) in changes.iter().enumerate() {
            for j in 0..2 {
                let mut r = sample(&format!("c{i}-{j}"), "ws", 7);
                if j == 1 {
                    change(&mut r);
                }
                records.push(r);
            }
        }
        let mut expected: HashMap<RollupKey, Rollup> = HashMap::new();
        for r in &records {
            if let Some(key) = RollupKey::of(r) {
                expected.entry(key).or_default().add(r);
            }
        }
        assert!(expected.len() > 12, "{} keys", expected.len());
        assert_eq!(aggregate(&records), expected);
    }

    fn stored_store() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        crate::schema::migrate(&mut conn).unwrap();
        records::insert_batch(&mut conn, &requests(), &Zone::utc()).unwrap();
        (dir, conn)
    }

    /// The rows of both tiers holding a name (not `''`) as text, and those holding a code.
    fn forms(conn: &Connection) -> (i64, i64) {
        let (mut text, mut coded) = (0, 0);
        for table in ["rollups", "rollups_hourly"] {
            for col in CODED {
                let (t, c): (i64, i64) = conn
                    .query_row(
                        &format!(
                            "SELECT count(*) FILTER (WHERE typeof({col}) = 'text' AND {col} <> ''),
                                count(*) FILTER (WHERE typeof({col}) = 'blob') FROM {table}"
                        ),
                        [],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .unwrap();
                (text, coded) = (text + t, coded + c);
            }
        }
        (text, coded)
    }

    /// Usage answers over windows that read either tier or both, filtered and grouped by coded
    /// dimensions.
    fn answers(conn: &Connection) -> Vec<UsageResult> {
        let by = [GroupDim::Model, GroupDim::Outcome, GroupDim::Region];
        let eu = UsageFilter {
            region: Some("eu-west".into()),
            ..UsageFilter::default()
        };
        let model = UsageFilter {
            model: Some("m-one".into()),
            outcome: Some("completed".into()),
            ..UsageFilter::default()
        };
        let mut out = Vec::new();
        for (from, to) in [(0, 150 * MINUTE_US), (5 * MINUTE_US, 70 * MINUTE_US)] {
            for (filter, group) in [
                (&UsageFilter::default(), &by[..]),
                (&eu, &by[..2]),
                (&model, &[][..]),
            ] {
                out.push(usage(conn, "ws", from, to, filter, group).unwrap());
            }
        }
        out
    }

    #[test]
    fn rollup_names_are_stored_as_codes_and_usage_filters_and_groups_by_the_names() {
        let (_dir, conn) = stored_store();
        let (text, coded) = forms(&conn);
        assert_eq!(text, 0);
        assert!(coded > 0);
        let all = usage(
            &conn,
            "ws",
            0,
            150 * MINUTE_US,
            &UsageFilter::default(),
            &[GroupDim::Model],
        )
        .unwrap();
        assert_eq!(
            all.first_dim_counts(),
            [(Some("m-two".into()), 100), (Some("m-one".into()), 50)]
        );
        let answers = answers(&conn);
        // m-one and completed: i % 3 == 0 and i % 10 != 0 over 0..150 and 5..70.
        assert_eq!(answers[2].total.requests, 45);
        assert_eq!(answers[5].total.requests, 20);
        // eu-west, grouped by model and outcome: the even minutes, 75 and 32.
        assert_eq!(answers[1].total.requests, 75);
        assert_eq!(answers[4].total.requests, 32);
        assert!(answers[1]
            .groups
            .iter()
            .all(|(k, _)| k[0].1.is_some() && k[1].1.is_some()));
    }

    #[test]
    fn migration_17_codes_the_rollups_written_as_text_and_usage_answers_the_same() {
        let (_dir, mut conn) = stored_store();
        let before = answers(&conn);
        // The store as a build before v17 left it: every name in the rollups as its text.
        for table in ["rollups", "rollups_hourly"] {
            let set: Vec<String> = CODED
                .iter()
                .map(|c| format!("{c} = {}", names::resolved(table, c)))
                .collect();
            conn.execute(&format!("UPDATE {table} SET {}", set.join(", ")), [])
                .unwrap();
        }
        conn.pragma_update(None, "user_version", 16).unwrap();
        let (text, coded) = forms(&conn);
        assert!(text > 0);
        assert_eq!(coded, 0);
        crate::schema::migrate(&mut conn).unwrap();
        let (text, coded) = forms(&conn);
        assert_eq!(text, 0);
        assert!(coded > 0);
        // The same answers, up to the last bits of float sums (rows merge in another order).
        let after = answers(&conn);
        assert_eq!(after.len(), before.len());
        for (i, (a, b)) in after.iter().zip(&before).enumerate() {
            assert_eq!(a.window, b.window);
            assert!(a.total.agrees_with(&b.total), "answer {i}");
            let keys = |r: &UsageResult| r.groups.iter().map(|g| g.0.clone()).collect::<Vec<_>>();
            assert_eq!(keys(a), keys(b), "answer {i}");
            for (g, h) in a.groups.iter().zip(&b.groups) {
                assert!(g.1.agrees_with(&h.1), "answer {i} {:?}", g.0);
            }
        }
        // New requests merge into the coded rows rather than beside them.
        let rows = |conn: &Connection| -> (i64, i64) {
            conn.query_row(
                "SELECT (SELECT count(*) FROM rollups), (SELECT count(*) FROM rollups_hourly)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        let had = rows(&conn);
        // The key of r3: m-one, no region, completed.
        let mut again = sample("again", "ws", 3 * MINUTE_US + 8);
        again.model = Some("m-one".into());
        again.region = None;
        records::insert_batch(&mut conn, &[again], &Zone::utc()).unwrap();
        assert_eq!(rows(&conn), had);
    }
}
