//! The batch writer's fast path on PostgreSQL: a batch's rows as one binary `COPY` into the
//! partitioned table (PostgreSQL routes each row to its day), then its rollups and spend, in one
//! transaction.
//!
//! `COPY` has no `ON CONFLICT`. A row whose `(request_id, created_at_us)` is stored already (a
//! retried batch whose first commit did land, a record written again to replace it), or that
//! repeats within the batch, fails the whole `COPY` on the primary key; the transaction rolls
//! back and the caller writes the batch again on the replacing path
//! ([`super::records::insert_batch`]), which stores each request once. So the primary key keeps
//! every request stored exactly once whichever path wrote it; this one only skips the per-row
//! conflict check (and the `RETURNING` list) that the common case, a batch of new requests,
//! does not need. A request a block holds is not in the key: after its `COPY` the batch asks
//! the blocks of its time, and goes the same way when one holds a request of it.

use std::collections::HashMap;

use deadpool_postgres::ClientWrapper;
use deadpool_postgres::Transaction;
use laptime_core::limit::Zone;
use laptime_core::timeline::RequestRecord;
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use super::names::NameSets;
use super::records::{values, COLUMNS};
use super::rollups::{merge_into, KeyIds};
use crate::rollups::RollupKey;
use crate::{Result, StoreError};
use laptime_core::rollup::Rollup;

/// What the fast path did with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Copied {
    /// Every row, its rollups and its spend are committed.
    Written,
    /// A row's request is stored already (as a row or in a block, see [`super::blocks`]) or
    /// repeats in the batch: nothing was written.
    Stored,
}

/// Writes `records` (each request new to the store) with their rollups (`delta`, made by
/// [`crate::rollups::aggregate`]) and spend in one transaction; [`Copied::Stored`] when one is
/// not new.
pub(super) async fn write(
    c: &mut ClientWrapper,
    records: &[RequestRecord],
    sets: &NameSets,
    keys: &KeyIds,
    delta: HashMap<RollupKey, Rollup>,
    zone: &Zone,
) -> Result<Copied> {
    let tx = c.transaction().await?;
    match copy_rows(&tx, records, sets).await {
        Ok(()) => {}
        Err(StoreError::Postgres(e)) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => {
            tx.rollback().await?;
            return Ok(Copied::Stored);
        }
        Err(e) => return Err(e),
    }
    // The insert holds its days' partitions: a day packed before shows its blocks now.
    if !super::blocks::held(&tx, records).await?.is_empty() {
        tx.rollback().await?;
        return Ok(Copied::Stored);
    }
    merge_into(&tx, delta, keys).await?;
    super::budgets::apply(&tx, &crate::budgets::delta(records, &[], zone)).await?;
    tx.commit().await?;
    Ok(Copied::Written)
}

/// Streams the rows of `records` to the server as one binary `COPY` (the server inserts while
/// the next rows are encoded); `seq` is left to its default, as on the replacing path.
async fn copy_rows(tx: &Transaction<'_>, records: &[RequestRecord], sets: &NameSets) -> Result<()> {
    let Some(first) = records.first() else {
        return Ok(());
    };
    let types: Vec<Type> = values(first, sets).iter().map(|v| v.pg_type()).collect();
    let sql = format!(
        "COPY requests ({}) FROM STDIN (FORMAT binary)",
        COLUMNS.join(", ")
    );
    let sink = tx.copy_in(&sql).await?;
    let mut writer = std::pin::pin!(BinaryCopyInWriter::new(sink, &types));
    for r in records {
        let row = values(r, sets);
        writer.as_mut().write_raw(row.iter()).await?;
    }
    writer.finish().await?;
    Ok(())
}
