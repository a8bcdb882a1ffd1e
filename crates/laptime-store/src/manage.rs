//! Managing workspaces and tokens: listing and revoking. Creating lives in [`crate::auth`].

use rusqlite::{params, Connection};

use crate::auth::{Scope, Workspace};
use crate::{Result, StoreError};

/// A token as an admin sees it: never the token itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub key_id: String,
    pub workspace_id: String,
    pub scope: Scope,
    /// The token's own routing group, overriding its workspace's.
    pub group: Option<String>,
    pub created_at_us: i64,
    pub revoked_at_us: Option<i64>,
}

pub fn list_workspaces(conn: &Connection) -> Result<Vec<Workspace>> {
    let mut stmt =
        conn.prepare_cached("SELECT id, name, grp FROM workspaces ORDER BY created_at_us, id")?;
    let rows = stmt.query_map([], |r| {
        Ok(Workspace {
            id: r.get(0)?,
            name: r.get(1)?,
            group: r.get(2)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

pub fn list_tokens(conn: &Connection, workspace_id: &str) -> Result<Vec<TokenInfo>> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, workspace_id, scope, created_at_us, revoked_at_us, grp FROM tokens
         WHERE workspace_id = ?1 ORDER BY created_at_us, id",
    )?;
    let rows = stmt.query_map([workspace_id], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, Option<i64>>(4)?,
            r.get::<_, Option<String>>(5)?,
        ))
    })?;
    rows.map(|row| {
        let (key_id, workspace_id, scope, created_at_us, revoked_at_us, group) = row?;
        let scope =
            Scope::parse(&scope).ok_or_else(|| StoreError::Corrupt(format!("scope {scope}")))?;
        Ok(TokenInfo {
            key_id,
            workspace_id,
            scope,
            group,
            created_at_us,
            revoked_at_us,
        })
    })
    .collect()
}

/// Revokes a token of a workspace at `now_us`. `false` when the workspace has no such live token.
pub fn revoke_token(
    conn: &Connection,
    workspace_id: &str,
    key_id: &str,
    now_us: i64,
) -> Result<bool> {
    let n = conn.execute(
        "UPDATE tokens SET revoked_at_us = ?3 WHERE workspace_id = ?1 AND id = ?2 AND revoked_at_us IS NULL",
        params![workspace_id, key_id, now_us],
    )?;
    Ok(n == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000_000;
    use crate::auth::{authenticate, create_token, create_workspace};
    use crate::Store;

    #[test]
    fn a_revoked_token_no_longer_authenticates_and_only_its_workspace_can_revoke_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        store
            .with_conn(|c| {
                let a = create_workspace(c, "a", NOW)?;
                let b = create_workspace(c, "b", NOW)?;
                let t = create_token(c, "a", Scope::Read, NOW)?;
                assert!(!revoke_token(c, &b.id, &t.key_id, NOW)?);
                assert!(authenticate(c, &t.token)?.is_some());
                assert!(revoke_token(c, &a.id, &t.key_id, NOW)?);
                assert!(!revoke_token(c, &a.id, &t.key_id, NOW)?);
                assert!(authenticate(c, &t.token)?.is_none());
                let listed = list_tokens(c, &a.id)?;
                assert_eq!(listed.len(), 1);
                assert!(listed[0].revoked_at_us.is_some());
                assert_eq!(list_workspaces(c)?.len(), 2);
                Ok(())
            })
            .unwrap();
    }
}
