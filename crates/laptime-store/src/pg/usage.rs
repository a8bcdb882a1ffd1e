//! The usage API's reads on PostgreSQL: the same queries as [`crate::usage`] (rollups of a
//! window's whole hours and its edge minutes, in one statement; newest requests first), over the
//! rollups and rows every instance writes, so the answer is the same whichever instance is
//! asked.

use std::collections::HashMap;

use deadpool_postgres::GenericClient;
use futures_util::TryStreamExt;
use laptime_core::timeline::RequestRecord;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::records::{from_row, select_list, SEQ};
use super::rollups::FOLDED_BEFORE;
use crate::rollups::{floor_hour, Tier, HOUR_US};
use crate::usage::{
    push_filter, put_value, spans, window, Absent, FilterValue, Folding, GroupDim, NameForm, Span,
    UsageFilter, UsageResult, ROLLUP_DATA,
};
use crate::{guide, Result, StoreError};

/// A filter value as PostgreSQL binds it (`stream` is a boolean, `status` an integer).
fn bound(v: FilterValue) -> Box<dyn ToSql + Sync + Send> {
    match v {
        FilterValue::Text(t) => Box::new(t),
        FilterValue::Stream(s) => Box::new(s),
        FilterValue::Status(s) => Box::new(i32::from(s)),
        // A closed set's number, in a `smallint` column.
        FilterValue::Number(n) => Box::new(i16::try_from(n).unwrap_or(-1)),
    }
}

fn dim_value(row: &Row, i: usize, dim: GroupDim, slot: &mut Option<String>) -> Result<()> {
    match dim {
        GroupDim::Stream => {
            let stream: bool = row.try_get(i)?;
            put_value(slot, if stream { "true" } else { "false" });
        }
        GroupDim::Status => put_value(slot, &row.try_get::<_, i32>(i)?.to_string()),
        _ => put_value(slot, row.try_get::<_, &str>(i)?),
    }
    Ok(())
}

/// The ids of the rollup keys `filter` matches (every filter is of key dimensions); `None`
/// when it sets none and every key matches.
async fn matching_keys(c: &impl GenericClient, filter: &UsageFilter) -> Result<Option<Vec<i32>>> {
    let mut conds = String::new();
    let values = push_filter(filter, Absent::Empty, &mut conds, 0, '$', NameForm::Text);
    if conds.is_empty() {
        return Ok(None);
    }
    let values: Vec<Box<dyn ToSql + Sync + Send>> = values.into_iter().map(bound).collect();
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as _).collect();
    let stmt = c
        .prepare_cached(&format!("SELECT id FROM rollup_keys WHERE TRUE{conds}"))
        .await?;
    let rows = c.query(&stmt, &params).await?;
    Ok(Some(
        rows.iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<_, _>>()?,
    ))
}

/// The statement reading `columns` of the rollups of `spans` (as [`crate::usage`]'s for SQLite:
/// parameter 1 the workspace, then each span's bounds), one `SELECT` per span joined by `join`
/// (`UNION ALL` for one snapshot of every row, `UNION` for distinct values). `columns` names
/// them for the table read; an hour span reads the hour tier before [`FOLDED_BEFORE`] and the
/// minute tier from it on (the hours not folded yet), in the same statement.
///
/// Rows of the `keys` a filter matches are picked by a constant array, which the server hashes
/// once. `+ 0` keeps it out of the primary key's index condition, where a scan of the span per
/// key (422 keys for one model's day) took 0.3 s; a semi-join with `rollup_keys` was planned
/// so too whenever the tables' statistics were missing.
fn rollup_sql(
    spans: &[Span],
    columns: impl Fn(Tier) -> String,
    join: &str,
    keys: Option<&[i32]>,
) -> String {
    let filtered = match keys {
        Some(ids) => {
            let ids: Vec<String> = ids.iter().map(i32::to_string).collect();
            format!(" AND (key_id + 0) = ANY('{{{}}}'::int4[])", ids.join(","))
        }
        None => String::new(),
    };
    let select = |tier: Tier, i: usize, folded: &str| {
        let start = tier.start_column();
        format!(
            "SELECT {} FROM {} WHERE workspace_id = $1 AND {start} >= ${} \
             AND {start} < ${}{folded}{filtered}",
            columns(tier),
            tier.table(),
            2 + 2 * i,
            3 + 2 * i
        )
    };
    let mut parts = Vec::new();
    for (i, s) in spans.iter().enumerate() {
        match s.tier {
            Tier::Minute => parts.push(select(Tier::Minute, i, "")),
            Tier::Hour => {
                parts.push(select(
                    Tier::Hour,
                    i,
                    &format!(" AND hour_us < {FOLDED_BEFORE}"),
                ));
                parts.push(select(
                    Tier::Minute,
                    i,
                    &format!(" AND minute_us >= {FOLDED_BEFORE}"),
                ));
            }
        }
    }
    parts.join(join)
}

/// The statement `sql`, planned once when its text names keys (the statement cache would grow
/// with every set of them), else from the cache.
async fn statement(
    c: &impl GenericClient,
    sql: &str,
    keys: Option<&[i32]>,
) -> Result<tokio_postgres::Statement> {
    Ok(match keys {
        Some(_) => c.prepare(sql).await?,
        None => c.prepare_cached(sql).await?,
    })
}

/// Up to how many keys a grouping reads every key at once; past it, only those of the window.
const ALL_KEYS: i64 = 16_384;

/// The grouped dimensions of the keys of the rollups `spans` read (`id`, then `group_by`), by
/// id: read once per key rather than joined to each row, which cost a day of 1 M requests 0.1 s
/// (48,000 lookups). Every key while there are at most [`ALL_KEYS`] (4,526 keys took a few
/// milliseconds); else those of the window's rows, a pass over them (some 50 ms for a day of
/// 1 M requests).
async fn group_keys(
    c: &impl GenericClient,
    spans: &[Span],
    group_by: &[GroupDim],
    keys: Option<&[i32]>,
    params: &[&(dyn ToSql + Sync)],
) -> Result<HashMap<i32, Row>> {
    let columns = group_by
        .iter()
        .map(|d| d.column())
        .collect::<Vec<_>>()
        .join(", ");
    let all = format!(
        "SELECT id, {columns} FROM rollup_keys LIMIT {}",
        ALL_KEYS + 1
    );
    let mut rows = c.query(&c.prepare_cached(&all).await?, &[]).await?;
    if rows.len() as i64 > ALL_KEYS {
        let sql = format!(
            "SELECT id, {columns} FROM rollup_keys WHERE id IN ({})",
            rollup_sql(spans, |_| "key_id".into(), " UNION ", keys)
        );
        rows = c.query(&statement(c, &sql, keys).await?, params).await?;
    }
    rows.into_iter()
        .map(|row| Ok((row.try_get(0)?, row)))
        .collect()
}

/// Folds the rows whose key was written after [`group_keys`] read the keys (between the two
/// statements), reading those keys now.
async fn fold_late(
    c: &impl GenericClient,
    folding: &mut Folding<'_>,
    group_by: &[GroupDim],
    mut dims: HashMap<i32, Row>,
    late: Vec<(i32, Vec<u8>)>,
) -> Result<()> {
    if late.is_empty() {
        return Ok(());
    }
    let ids: Vec<i32> = late.iter().map(|(id, _)| *id).collect();
    let columns: Vec<&str> = group_by.iter().map(|d| d.column()).collect();
    let sql = format!(
        "SELECT id, {} FROM rollup_keys WHERE id = ANY($1)",
        columns.join(", ")
    );
    for row in c.query(&sql, &[&ids]).await? {
        dims.insert(row.try_get(0)?, row);
    }
    for (id, blob) in &late {
        let key = dims.get(id).ok_or_else(|| {
            StoreError::Corrupt(format!("rollups refer to key {id}, which is not stored"))
        })?;
        folding.add(blob, |i, dim, slot| dim_value(key, i, dim, slot))?;
    }
    Ok(())
}

/// As [`crate::usage::usage`].
pub async fn usage(
    c: &impl GenericClient,
    workspace_id: &str,
    (from_us, to_us): (i64, i64),
    filter: &UsageFilter,
    group_by: &[GroupDim],
) -> Result<UsageResult> {
    let window = window(from_us, to_us);
    let spans = spans(&window);
    let mut folding = Folding::new(group_by);
    if spans.is_empty() {
        return Ok(folding.finish(window));
    }
    let keys = matching_keys(c, filter).await?;
    let keys = keys.as_deref();
    if keys.is_some_and(<[i32]>::is_empty) {
        return Ok(folding.finish(window));
    }
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(workspace_id.to_string())];
    for s in &spans {
        values.push(Box::new(s.from_us));
        values.push(Box::new(s.to_us));
    }
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as _).collect();
    let grouped = !group_by.is_empty();
    let dims = match grouped {
        true => group_keys(c, &spans, group_by, keys, &params).await?,
        false => HashMap::new(),
    };
    let columns = if grouped { "data, key_id" } else { "data" };
    let mut late: Vec<(i32, Vec<u8>)> = Vec::new();
    let sql = rollup_sql(&spans, |_| columns.into(), " UNION ALL ", keys);
    let stmt = statement(c, &sql, keys).await?;
    // Folded as they arrive: the server reads and sends the next rows (a day of a busy
    // workspace is some 150,000 rollups) while this one is merged, rather than after.
    let rows = c.query_raw(&stmt, params.iter().copied()).await?;
    let mut rows = std::pin::pin!(rows);
    while let Some(row) = rows.try_next().await? {
        let blob: &[u8] = row.try_get(ROLLUP_DATA)?;
        if !grouped {
            folding.add(blob, |_, _, _| Ok(()))?;
            continue;
        }
        let id: i32 = row.try_get(ROLLUP_DATA + 1)?;
        match dims.get(&id) {
            Some(key) => folding.add(blob, |i, dim, slot| dim_value(key, i, dim, slot))?,
            // Written between the two statements: folded once the stream is read.
            None => late.push((id, blob.to_vec())),
        }
    }
    fold_late(c, &mut folding, group_by, dims, late).await?;
    Ok(folding.finish(window))
}

/// The newest hour start in `[$2, $3)` with a rollup of workspace `$1`: of the hour tier
/// before [`FOLDED_BEFORE`], of the minute tier from it on.
fn newest_hour_sql() -> String {
    format!(
        "SELECT GREATEST(
            (SELECT max(hour_us) FROM rollups_hourly WHERE workspace_id = $1
                AND hour_us >= $2 AND hour_us < $3 AND hour_us < {FOLDED_BEFORE}),
            (SELECT max(minute_us) / {HOUR_US} * {HOUR_US} FROM rollups WHERE workspace_id = $1
                AND minute_us >= $2 AND minute_us < $3 AND minute_us >= {FOLDED_BEFORE}))"
    )
}

/// As [`crate::usage::recent_filtered`]: newest first (ties in the newest-written order),
/// attempts included; under a filter, through the minutes whose rollups match it
/// ([`crate::guide`]). `c` should be a repeatable-read transaction then, so that the keys, the
/// minutes and the rows are of one moment.
pub async fn recent_filtered(
    c: &impl GenericClient,
    workspace_id: &str,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
) -> Result<Vec<RequestRecord>> {
    let mut out = Vec::new();
    if limit == 0 {
        return Ok(out);
    }
    let Some(keys) = matching_keys(c, filter).await? else {
        recent_rows(c, workspace_id, filter, window, limit, &mut out).await?;
        return Ok(out);
    };
    if keys.is_empty() {
        return Ok(out);
    }
    let mut rest = Some(window.unwrap_or((i64::MIN, i64::MAX)));
    let mut rows = Some(guide::PROBE_ROWS);
    let probe = format!(
        "SELECT created_at_us FROM requests WHERE created_at_us >= $2 AND created_at_us < $3{} \
         ORDER BY created_at_us DESC, seq DESC LIMIT 1 OFFSET $4",
        super::names::code_equals("workspace_id", "$1")
    );
    while let (Some(window), Some(look)) = (rest, rows) {
        let boundary: Option<i64> = c
            .query_opt(&probe, &[&workspace_id, &window.0, &window.1, &(look - 1)])
            .await?
            .map(|r| r.try_get(0))
            .transpose()?;
        let in_blocks = super::blocks::probe(c, workspace_id, window, look).await?;
        let (probed, left) = guide::probe(window, boundary.max(in_blocks));
        let before = out.len();
        recent_rows(
            c,
            workspace_id,
            filter,
            Some(probed),
            limit - before as u32,
            &mut out,
        )
        .await?;
        rest = left.filter(|_| out.len() < limit as usize);
        rows = guide::next_probe(
            look,
            (out.len() - before) as i64,
            limit as i64 - out.len() as i64,
        );
    }
    if let Some(rest) = rest {
        walk(c, workspace_id, &keys, filter, rest, limit, &mut out).await?;
    }
    Ok(out)
}

/// Appends to `out` the newest records of a workspace that match `filter` (whose rollup keys
/// are `keys`) within `window`, until it holds `limit`, through the minutes whose rollups match
/// ([`crate::guide`]).
async fn walk(
    c: &impl GenericClient,
    workspace_id: &str,
    keys: &[i32],
    filter: &UsageFilter,
    window: (i64, i64),
    limit: u32,
    out: &mut Vec<RequestRecord>,
) -> Result<()> {
    let (first, end) = guide::minute_bounds(window);
    let newest: Option<i64> = c
        .query_one(
            &newest_hour_sql(),
            &[&workspace_id, &floor_hour(first), &end],
        )
        .await?
        .try_get(0)?;
    let Some(newest) = newest else {
        return Ok(());
    };
    // The hours with a matching rollup (those not folded yet through their minutes), and the
    // minutes with one.
    let starts_sql = |tier: Tier| {
        let span = [Span {
            tier,
            from_us: first,
            to_us: end,
        }];
        let columns = |table: Tier| match (tier, table) {
            (Tier::Minute, _) => "DISTINCT minute_us AS start".to_string(),
            (Tier::Hour, Tier::Hour) => "hour_us AS start".to_string(),
            (Tier::Hour, Tier::Minute) => format!("minute_us - minute_us % {HOUR_US} AS start"),
        };
        format!(
            "{} ORDER BY start DESC",
            rollup_sql(&span, columns, " UNION ", Some(keys))
        )
    };
    let hours_stmt = statement(c, &starts_sql(Tier::Hour), Some(keys)).await?;
    let minutes_stmt = statement(c, &starts_sql(Tier::Minute), Some(keys)).await?;
    let starts = |stmt, (a, b): (i64, i64)| async move {
        c.query(stmt, &[&workspace_id, &a, &b])
            .await?
            .iter()
            .map(|r| r.try_get(0))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(StoreError::from)
    };
    for slice in guide::hour_slices((first, end.min(newest + HOUR_US))) {
        for hour in starts(&hours_stmt, slice).await? {
            for minutes in guide::minute_slices(hour, (first, end)) {
                for run in guide::runs(&starts(&minutes_stmt, minutes).await?, window) {
                    let left = limit.saturating_sub(u32::try_from(out.len()).unwrap_or(u32::MAX));
                    recent_rows(c, workspace_id, filter, Some(run), left, out).await?;
                    if out.len() >= limit as usize {
                        return Ok(());
                    }
                }
            }
        }
    }
    Ok(())
}

/// Appends the newest records of a workspace matching `filter` within `window` to `out`, at
/// most `limit`: those of rows, walking the workspace's index newest first, merged with those
/// of blocks ([`super::blocks::recent`]) that could be newer than the `limit`-th row.
async fn recent_rows(
    c: &impl GenericClient,
    workspace_id: &str,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
    out: &mut Vec<RequestRecord>,
) -> Result<()> {
    let (from, to) = window.unwrap_or((i64::MIN, i64::MAX));
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![
        Box::new(workspace_id.to_string()),
        Box::new(from),
        Box::new(to),
    ];
    let mut conditions = String::from(" AND created_at_us >= $2 AND created_at_us < $3");
    let filters = push_filter(
        filter,
        Absent::Null,
        &mut conditions,
        values.len(),
        '$',
        NameForm::PgSets,
    );
    values.extend(filters.into_iter().map(bound));
    let sql = format!(
        "SELECT {}, requests.seq, {} FROM requests WHERE true{}{} \
         ORDER BY created_at_us DESC, seq DESC LIMIT ${}",
        select_list(),
        super::blocks::NEWEST_END,
        super::names::code_equals("workspace_id", "$1"),
        conditions,
        values.len() + 1
    );
    let stmt = c.prepare_cached(&sql).await?;
    let mut found = Vec::new();
    let mut newest_block_end = None;
    {
        let limit = i64::from(limit);
        let mut params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as _).collect();
        params.push(&limit);
        for row in c.query(&stmt, &params).await? {
            found.push((from_row(&row)?, row.try_get::<_, i64>(SEQ)?));
            newest_block_end = Some(row.try_get::<_, Option<i64>>(SEQ + 1)?);
        }
    }
    // Blocks that end before the `limit`-th row hold nothing the answer keeps.
    let reach = match limit.checked_sub(1).and_then(|i| found.get(i as usize)) {
        Some((r, _)) => from.max(r.created_at_us),
        None => from,
    };
    // Known from the rows' statement: the workspace has no block, or none reaching that far
    // (the newest ends before the `limit`-th row). Asking the blocks anyway cost the log's
    // newest 50 of the current day a round trip: 0.68 → 0.96 ms at 1 M.
    let unreached =
        |end: Option<i64>| end.is_none_or(|end| found.len() == limit as usize && end < reach);
    if newest_block_end.is_some_and(unreached) {
        out.extend(found.into_iter().map(|(r, _)| r));
        return Ok(());
    }
    let q = super::blocks::Query {
        conditions: &conditions,
        values: &values,
        window: (reach, to),
        limit,
    };
    super::blocks::recent(c, &q, &mut found).await?;
    found.sort_by_key(|(r, seq)| std::cmp::Reverse((r.created_at_us, *seq)));
    out.extend(found.into_iter().take(limit as usize).map(|(r, _)| r));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::tests::sample;
    use crate::rollups::MINUTE_US;
    use laptime_core::limit::Zone;

    /// A row whose key was written after the keys were read (between the two statements of a
    /// grouped read) is folded under its key's dimensions once its key is read; a key that is
    /// not stored is an error, never a row left out.
    #[tokio::test]
    async fn rows_whose_key_came_late_are_folded_under_their_key() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let pg = super::super::Pg::connect(schema.url()).await.unwrap();
        let day = 20_000 * super::super::records::DAY_US;
        let mut r = sample("late", "ws", day + MINUTE_US);
        r.model = Some("m-late".into());
        pg.insert_batch(&[r], &Zone::utc()).await.unwrap();
        let c = pg.client().await.unwrap();
        let row = c
            .query_one("SELECT key_id, data FROM rollups", &[])
            .await
            .unwrap();
        let (id, blob): (i32, Vec<u8>) = (row.get(0), row.get(1));

        let by = [GroupDim::Model];
        let mut folding = Folding::new(&by);
        fold_late(
            &c,
            &mut folding,
            &by,
            HashMap::new(),
            vec![(id, blob.clone())],
        )
        .await
        .unwrap();
        let got = folding.finish(window(day, day + 2 * MINUTE_US));
        assert_eq!(got.first_dim_counts(), [(Some("m-late".to_string()), 1)]);

        let mut folding = Folding::new(&by);
        let missing = fold_late(&c, &mut folding, &by, HashMap::new(), vec![(id + 1, blob)]).await;
        assert!(
            matches!(missing, Err(StoreError::Corrupt(_))),
            "{missing:?}"
        );
    }
}
