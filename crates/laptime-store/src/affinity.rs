//! Which channel holds each provider object a workspace created (a file, a batch, a stored
//! response): ids only, never content. Later calls naming the object go to that channel and key,
//! and a workspace can name only its own objects. Rows older than the retention window are
//! deleted with the requests.

use laptime_core::endpoint::ObjectKind;
use rusqlite::{params, Connection, OptionalExtension};

use crate::{Result, StoreError};

/// Where one object lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub object_id: String,
    pub kind: ObjectKind,
    pub channel: String,
    /// The key of the channel's `api_key_envs` that created it (absent: the channel's one key).
    pub key_index: Option<u32>,
    pub created_at_us: i64,
}

pub(crate) fn kind_of(s: &str) -> Result<ObjectKind> {
    ObjectKind::parse(s).ok_or_else(|| StoreError::Corrupt(format!("object kind: {s}")))
}

/// Remembers where objects live; an object already placed keeps its first placement (ids are
/// the provider's and never move).
pub fn put(conn: &mut Connection, workspace_id: &str, placements: &[Placement]) -> Result<()> {
    let tx = conn.transaction()?;
    {
        let mut stmt = tx.prepare_cached(
            "INSERT INTO affinity (workspace_id, object_id, kind, channel, key_index,
                created_at_us) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (workspace_id, object_id) DO NOTHING",
        )?;
        for p in placements {
            stmt.execute(params![
                workspace_id,
                p.object_id,
                p.kind.as_str(),
                p.channel,
                p.key_index,
                p.created_at_us
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Where `object_id` lives, if `workspace_id` created it.
pub fn get(conn: &Connection, workspace_id: &str, object_id: &str) -> Result<Option<Placement>> {
    let mut stmt = conn.prepare_cached(
        "SELECT kind, channel, key_index, created_at_us FROM affinity
         WHERE workspace_id = ?1 AND object_id = ?2",
    )?;
    let row = stmt
        .query_row([workspace_id, object_id], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<u32>>(2)?,
                r.get::<_, i64>(3)?,
            ))
        })
        .optional()?;
    row.map(|(kind, channel, key_index, created_at_us)| {
        Ok(Placement {
            object_id: object_id.to_string(),
            kind: kind_of(&kind)?,
            channel,
            key_index,
            created_at_us,
        })
    })
    .transpose()
}

/// The ids of the objects of `kind` that `workspace_id` created on `channel`, newest first, at
/// most `limit` (a listing shows the workspace its own objects only).
pub fn placed(
    conn: &Connection,
    workspace_id: &str,
    channel: &str,
    kind: ObjectKind,
    limit: u32,
) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(
        "SELECT object_id FROM affinity WHERE workspace_id = ?1 AND channel = ?2 AND kind = ?3
         ORDER BY created_at_us DESC LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![workspace_id, channel, kind.as_str(), limit], |r| {
        r.get::<_, String>(0)
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deletes placements made before `cutoff_us`; how many went.
pub fn delete_older_than(conn: &Connection, cutoff_us: i64) -> Result<usize> {
    Ok(conn.execute("DELETE FROM affinity WHERE created_at_us < ?1", [cutoff_us])?)
}
