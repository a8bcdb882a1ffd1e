//! Where each provider object a workspace created lives, on PostgreSQL, as
//! [`crate::affinity`] keeps it in SQLite.

use deadpool_postgres::GenericClient;

use crate::affinity::{kind_of, Placement};
use crate::Result;

pub async fn put(
    c: &mut deadpool_postgres::Client,
    workspace_id: &str,
    placements: &[Placement],
) -> Result<()> {
    let tx = c.transaction().await?;
    let stmt = tx
        .prepare_cached(
            "INSERT INTO affinity (workspace_id, object_id, kind, channel, key_index,
                created_at_us) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (workspace_id, object_id) DO NOTHING",
        )
        .await?;
    for p in placements {
        let key_index = p.key_index.map(|k| i32::try_from(k).unwrap_or(i32::MAX));
        tx.execute(
            &stmt,
            &[
                &workspace_id,
                &p.object_id,
                &p.kind.as_str(),
                &p.channel,
                &key_index,
                &p.created_at_us,
            ],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}

pub async fn get(
    c: &impl GenericClient,
    workspace_id: &str,
    object_id: &str,
) -> Result<Option<Placement>> {
    let row = c
        .query_opt(
            "SELECT kind, channel, key_index, created_at_us FROM affinity
             WHERE workspace_id = $1 AND object_id = $2",
            &[&workspace_id, &object_id],
        )
        .await?;
    let Some(row) = row else { return Ok(None) };
    let kind: String = row.try_get(0)?;
    let key_index: Option<i32> = row.try_get(2)?;
    Ok(Some(Placement {
        object_id: object_id.to_string(),
        kind: kind_of(&kind)?,
        channel: row.try_get(1)?,
        key_index: key_index.and_then(|k| u32::try_from(k).ok()),
        created_at_us: row.try_get(3)?,
    }))
}

pub async fn placed(
    c: &impl GenericClient,
    workspace_id: &str,
    channel: &str,
    kind: laptime_core::endpoint::ObjectKind,
    limit: u32,
) -> Result<Vec<String>> {
    let rows = c
        .query(
            "SELECT object_id FROM affinity WHERE workspace_id = $1 AND channel = $2 AND kind = $3
             ORDER BY created_at_us DESC LIMIT $4",
            &[&workspace_id, &channel, &kind.as_str(), &i64::from(limit)],
        )
        .await?;
    rows.iter()
        .map(|r| Ok(r.try_get::<_, String>(0)?))
        .collect()
}

pub async fn delete_older_than(c: &impl GenericClient, cutoff_us: i64) -> Result<usize> {
    let n = c
        .execute(
            "DELETE FROM affinity WHERE created_at_us < $1",
            &[&cutoff_us],
        )
        .await?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}
