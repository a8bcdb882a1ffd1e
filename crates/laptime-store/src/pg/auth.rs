//! Workspaces and tokens on PostgreSQL: the same rules as [`crate::auth`] and
//! [`crate::manage`] (names, groups, hashed tokens compared in constant time), checked by the
//! same code; only the SQL differs. A name two instances create at once is refused for one of
//! them by the unique index, as [`StoreError::Conflict`].

use deadpool_postgres::GenericClient;
use tokio_postgres::error::SqlState;

use crate::auth::{
    bootstrap_token, check_group, generate_token, hash_token, looks_like_token, new_key_id,
    new_workspace, principal_of, NewToken, Principal, Scope, Workspace, DEFAULT_WORKSPACE,
};
use crate::manage::TokenInfo;
use crate::{Result, StoreError};

/// A unique violation as the conflict it is; other errors as they are.
fn conflict(e: tokio_postgres::Error, what: &str) -> StoreError {
    if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
        StoreError::Conflict(what.to_string())
    } else {
        StoreError::Postgres(e)
    }
}

pub async fn find_workspace(c: &impl GenericClient, name: &str) -> Result<Option<Workspace>> {
    let row = c
        .query_opt(
            "SELECT id, name, grp FROM workspaces WHERE name = $1 OR id = $1",
            &[&name],
        )
        .await?;
    Ok(row.map(|r| Workspace {
        id: r.get(0),
        name: r.get(1),
        group: r.get(2),
    }))
}

async fn workspace(c: &impl GenericClient, name: &str) -> Result<Workspace> {
    find_workspace(c, name)
        .await?
        .ok_or_else(|| StoreError::NotFound(format!("workspace {name:?}")))
}

pub async fn create_workspace(
    c: &impl GenericClient,
    name: &str,
    now_us: i64,
) -> Result<Workspace> {
    let ws = new_workspace(name)?;
    c.execute(
        "INSERT INTO workspaces (id, name, created_at_us) VALUES ($1, $2, $3)",
        &[&ws.id, &ws.name, &now_us],
    )
    .await
    .map_err(|e| conflict(e, &format!("workspace {:?}", ws.name)))?;
    Ok(ws)
}

pub async fn set_workspace_group(
    c: &impl GenericClient,
    name: &str,
    group: Option<&str>,
) -> Result<Workspace> {
    if let Some(g) = group {
        check_group(g)?;
    }
    let mut ws = workspace(c, name).await?;
    c.execute(
        "UPDATE workspaces SET grp = $2 WHERE id = $1",
        &[&ws.id, &group],
    )
    .await?;
    ws.group = group.map(str::to_string);
    Ok(ws)
}

async fn insert_token(
    c: &impl GenericClient,
    ws: &Workspace,
    scope: Scope,
    group: Option<&str>,
    token: String,
    now_us: i64,
) -> Result<NewToken> {
    if let Some(g) = group {
        check_group(g)?;
    }
    let key_id = new_key_id();
    c.execute(
        "INSERT INTO tokens (id, workspace_id, hash, scope, created_at_us, grp)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &key_id,
            &ws.id,
            &hash_token(&token).as_slice(),
            &scope.as_str(),
            &now_us,
            &group,
        ],
    )
    .await
    .map_err(|e| conflict(e, "token"))?;
    Ok(NewToken {
        key_id,
        token,
        workspace: ws.clone(),
        scope,
    })
}

pub async fn create_token(
    c: &impl GenericClient,
    workspace_name: &str,
    scope: Scope,
    group: Option<&str>,
    now_us: i64,
) -> Result<NewToken> {
    let ws = workspace(c, workspace_name).await?;
    insert_token(c, &ws, scope, group, generate_token(), now_us).await
}

/// As [`crate::auth::bootstrap`]. Instances bootstrapping one empty database at once serialise
/// on an advisory lock, so exactly one first token is made.
pub async fn bootstrap(
    c: &mut deadpool_postgres::Object,
    given: Option<&str>,
    now_us: i64,
) -> Result<Option<NewToken>> {
    let tx = c.transaction().await?;
    tx.batch_execute(
        "SELECT pg_advisory_xact_lock(hashtext('laptime bootstrap ' || current_schema()))",
    )
    .await?;
    let tokens: i64 = tx
        .query_one("SELECT count(*) FROM tokens", &[])
        .await?
        .get(0);
    if tokens > 0 {
        return Ok(None);
    }
    let ws = match find_workspace(&tx, DEFAULT_WORKSPACE).await? {
        Some(ws) => ws,
        None => create_workspace(&tx, DEFAULT_WORKSPACE, now_us).await?,
    };
    let token = bootstrap_token(given)?;
    let made = insert_token(&tx, &ws, Scope::Admin, None, token, now_us).await?;
    tx.commit().await?;
    Ok(Some(made))
}

/// The auth epoch, as [`crate::auth::epoch`] (triggers of schema v15).
pub async fn epoch(c: &impl GenericClient) -> Result<i64> {
    let stmt = c.prepare_cached("SELECT n FROM auth_epoch").await?;
    Ok(c.query_one(&stmt, &[]).await?.try_get(0)?)
}

pub async fn authenticate(c: &impl GenericClient, token: &str) -> Result<Option<Principal>> {
    if !looks_like_token(token) {
        return Ok(None);
    }
    let hash = hash_token(token);
    let stmt = c
        .prepare_cached(
            "SELECT t.id, t.hash, t.scope, w.id, w.name, COALESCE(t.grp, w.grp),
                lw.rpm, lw.tpm, lw.concurrent, lt.rpm, lt.tpm, lt.concurrent FROM tokens t
             JOIN workspaces w ON w.id = t.workspace_id
             LEFT JOIN limits lw ON lw.workspace_id = w.id AND lw.key_id = ''
             LEFT JOIN limits lt ON lt.workspace_id = w.id AND lt.key_id = t.id
             WHERE t.hash = $1 AND t.revoked_at_us IS NULL",
        )
        .await?;
    let Some(r) = c.query_opt(&stmt, &[&hash.as_slice()]).await? else {
        return Ok(None);
    };
    let limits = [r.get(6), r.get(7), r.get(8), r.get(9), r.get(10), r.get(11)];
    principal_of(
        (
            r.get(0),
            r.get(1),
            r.get(2),
            r.get(3),
            r.get(4),
            r.get(5),
            limits,
        ),
        &hash,
    )
}

pub async fn list_workspaces(c: &impl GenericClient) -> Result<Vec<Workspace>> {
    let rows = c
        .query(
            "SELECT id, name, grp FROM workspaces ORDER BY created_at_us, id",
            &[],
        )
        .await?;
    Ok(rows
        .into_iter()
        .map(|r| Workspace {
            id: r.get(0),
            name: r.get(1),
            group: r.get(2),
        })
        .collect())
}

pub async fn list_tokens(c: &impl GenericClient, workspace_id: &str) -> Result<Vec<TokenInfo>> {
    let rows = c
        .query(
            "SELECT id, workspace_id, scope, created_at_us, revoked_at_us, grp FROM tokens
             WHERE workspace_id = $1 ORDER BY created_at_us, id",
            &[&workspace_id],
        )
        .await?;
    rows.into_iter()
        .map(|r| {
            let scope: String = r.get(2);
            Ok(TokenInfo {
                key_id: r.get(0),
                workspace_id: r.get(1),
                scope: Scope::parse(&scope)
                    .ok_or_else(|| StoreError::Corrupt(format!("scope {scope}")))?,
                created_at_us: r.get(3),
                revoked_at_us: r.get(4),
                group: r.get(5),
            })
        })
        .collect()
}

pub async fn revoke_token(
    c: &impl GenericClient,
    workspace_id: &str,
    key_id: &str,
    now_us: i64,
) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE tokens SET revoked_at_us = $3
             WHERE workspace_id = $1 AND id = $2 AND revoked_at_us IS NULL",
            &[&workspace_id, &key_id, &now_us],
        )
        .await?;
    Ok(n == 1)
}
