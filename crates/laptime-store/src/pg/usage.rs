//! The usage API's reads on PostgreSQL: the same queries as [`crate::usage`] (rollups of a
//! window's whole hours and its edge minutes, in one statement; newest requests first), over the
//! rollups and rows every instance writes, so the answer is the same whichever instance is
//! asked.

use deadpool_postgres::GenericClient;
use futures_util::TryStreamExt;
use laptime_core::timeline::RequestRecord;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::records::{from_row, select};
use crate::usage::{
    push_filter, put_value, rollup_sql, spans, window, Absent, FilterValue, Folding, GroupDim,
    NameForm, UsageFilter, UsageResult, ROLLUP_DATA,
};
use crate::{Result, StoreError};

/// A filter value as PostgreSQL binds it (`stream` is a boolean, `status` an integer).
fn bound(v: FilterValue) -> Box<dyn ToSql + Sync + Send> {
    match v {
        FilterValue::Text(t) => Box::new(t),
        FilterValue::Stream(s) => Box::new(s),
        FilterValue::Status(s) => Box::new(i32::from(s)),
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
    let (sql, filters) = rollup_sql(&spans, filter, group_by, '$', NameForm::PgRollupKeys);
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(workspace_id.to_string())];
    for s in &spans {
        values.push(Box::new(s.from_us));
        values.push(Box::new(s.to_us));
    }
    values.extend(filters.into_iter().map(bound));
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as _).collect();
    let stmt = c.prepare_cached(&sql).await?;
    // Folded as they arrive: the server reads and sends the next rows (a day of a busy
    // workspace is some 150,000 rollups) while this one is merged, rather than after.
    let rows = c.query_raw(&stmt, params).await?;
    let mut rows = std::pin::pin!(rows);
    while let Some(row) = rows.try_next().await? {
        let blob: &[u8] = row.try_get(ROLLUP_DATA)?;
        folding.add(blob, |i, dim, slot| dim_value(&row, i, dim, slot))?;
    }
    Ok(folding.finish(window))
}

/// As [`crate::usage::recent_filtered`]: newest first (ties in the newest-written order),
/// attempts included.
pub async fn recent_filtered(
    c: &impl GenericClient,
    workspace_id: &str,
    filter: &UsageFilter,
    window: Option<(i64, i64)>,
    limit: u32,
) -> Result<Vec<RequestRecord>> {
    let mut sql = format!("{} WHERE workspace_id = $1", select());
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(workspace_id.to_string())];
    if let Some((from, to)) = window {
        values.push(Box::new(from));
        values.push(Box::new(to));
        sql.push_str(" AND created_at_us >= $2 AND created_at_us < $3");
    }
    let filters = push_filter(
        filter,
        Absent::Null,
        &mut sql,
        values.len(),
        '$',
        NameForm::PgSets,
    );
    values.extend(filters.into_iter().map(bound));
    values.push(Box::new(i64::from(limit)));
    sql.push_str(&format!(
        " ORDER BY created_at_us DESC, seq DESC LIMIT ${}",
        values.len()
    ));
    let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as _).collect();
    let stmt = c.prepare_cached(&sql).await?;
    let rows = c.query(&stmt, &params).await?;
    rows.iter()
        .map(from_row)
        .collect::<Result<Vec<_>>>()
        .map_err(|e: StoreError| e)
}
