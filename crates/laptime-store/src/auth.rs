//! Workspaces and bearer tokens. A token is `lt_` + 256 random bits (hex), shown once and stored
//! only as its SHA-256; lookups compare hashes in constant time.

use laptime_core::limit::Applicable;
use rand::RngCore;
use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{Result, StoreError};

pub const TOKEN_PREFIX: &str = "lt_";
/// The workspace every embedded default starts with.
pub const DEFAULT_WORKSPACE: &str = "default";

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Call models.
    Proxy,
    /// Read its own workspace's records.
    Read,
    /// Manage, and everything the others may.
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Proxy => "proxy",
            Scope::Read => "read",
            Scope::Admin => "admin",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        [Scope::Proxy, Scope::Read, Scope::Admin]
            .into_iter()
            .find(|v| v.as_str() == s)
    }

    /// Whether a token of this scope may act with `needed`.
    pub fn allows(self, needed: Scope) -> bool {
        self == Scope::Admin || self == needed
    }
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub workspace_id: String,
    pub workspace_name: String,
    pub key_id: String,
    pub scope: Scope,
    /// The routing group chosen for the token, else for its workspace; `None` is the default.
    pub group: Option<String>,
    /// The rate limits of its workspace and of the token itself.
    pub limits: Applicable,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub id: String,
    pub name: String,
    /// The routing group its requests use; `None` is the default group.
    pub group: Option<String>,
}

/// A new token: the plaintext exists only here, to be shown once.
#[derive(Debug)]
pub struct NewToken {
    pub key_id: String,
    pub token: String,
    pub workspace: Workspace,
    pub scope: Scope,
}

pub(crate) fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut buf);
    hex::encode(buf)
}

pub fn hash_token(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether a string has the shape of a laptime token (checked before any lookup).
pub fn looks_like_token(token: &str) -> bool {
    token
        .strip_prefix(TOKEN_PREFIX)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub fn generate_token() -> String {
    format!("{TOKEN_PREFIX}{}", random_hex(32))
}

/// Creates a workspace; `now_us` is its creation time (unix microseconds).
pub fn create_workspace(conn: &Connection, name: &str, now_us: i64) -> Result<Workspace> {
    let ws = new_workspace(name)?;
    if find_workspace(conn, &ws.name)?.is_some() {
        return Err(StoreError::Conflict(format!("workspace {:?}", ws.name)));
    }
    conn.execute(
        "INSERT INTO workspaces (id, name, created_at_us) VALUES (?1, ?2, ?3)",
        params![ws.id, ws.name, now_us],
    )?;
    Ok(ws)
}

/// A new workspace named `name` (trimmed, 1 to 64 characters) with a fresh id, not stored yet.
pub(crate) fn new_workspace(name: &str) -> Result<Workspace> {
    let name = name.trim();
    if name.is_empty() || name.len() > 64 {
        return Err(StoreError::Conflict(
            "workspace name must be 1 to 64 characters".into(),
        ));
    }
    Ok(Workspace {
        id: format!("ws_{}", random_hex(8)),
        name: name.to_string(),
        group: None,
    })
}

/// A fresh token id.
pub(crate) fn new_key_id() -> String {
    format!("key_{}", random_hex(8))
}

/// The first admin token: `given` when it looks like a token, else a generated one.
pub(crate) fn bootstrap_token(given: Option<&str>) -> Result<String> {
    match given {
        Some(t) if looks_like_token(t) => Ok(t.to_string()),
        Some(_) => Err(StoreError::Conflict(
            "LAPTIME_BOOTSTRAP_TOKEN must be lt_ followed by 64 hex characters".into(),
        )),
        None => Ok(generate_token()),
    }
}

pub fn find_workspace(conn: &Connection, name: &str) -> Result<Option<Workspace>> {
    Ok(conn
        .query_row(
            "SELECT id, name, grp FROM workspaces WHERE name = ?1 OR id = ?1",
            [name],
            |r| {
                Ok(Workspace {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    group: r.get(2)?,
                })
            },
        )
        .optional()?)
}

/// A group name: 1 to 64 of `A-Z a-z 0-9 _ . -` (it appears in metrics labels and configs).
pub fn check_group(group: &str) -> Result<()> {
    let ok = !group.is_empty()
        && group.len() <= 64
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(StoreError::Conflict(format!(
            "group {group:?} must be 1 to 64 of A-Z a-z 0-9 _ . -"
        )))
    }
}

/// Sets (or, with `None`, clears) the routing group of a workspace (by name or id).
pub fn set_workspace_group(
    conn: &Connection,
    workspace: &str,
    group: Option<&str>,
) -> Result<Workspace> {
    if let Some(g) = group {
        check_group(g)?;
    }
    let mut ws = find_workspace(conn, workspace)?
        .ok_or_else(|| StoreError::NotFound(format!("workspace {workspace:?}")))?;
    conn.execute(
        "UPDATE workspaces SET grp = ?2 WHERE id = ?1",
        params![ws.id, group],
    )?;
    ws.group = group.map(str::to_string);
    Ok(ws)
}

fn insert_token(
    conn: &Connection,
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
    conn.execute(
        "INSERT INTO tokens (id, workspace_id, hash, scope, created_at_us, grp) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![key_id, ws.id, hash_token(&token).as_slice(), scope.as_str(), now_us, group],
    )?;
    Ok(NewToken {
        key_id,
        token,
        workspace: ws.clone(),
        scope,
    })
}

/// Creates a token in a workspace (by name or id) at `now_us`.
pub fn create_token(
    conn: &Connection,
    workspace: &str,
    scope: Scope,
    now_us: i64,
) -> Result<NewToken> {
    create_group_token(conn, workspace, scope, None, now_us)
}

/// Creates a token whose requests use `group` instead of its workspace's group.
pub fn create_group_token(
    conn: &Connection,
    workspace: &str,
    scope: Scope,
    group: Option<&str>,
    now_us: i64,
) -> Result<NewToken> {
    let ws = find_workspace(conn, workspace)?
        .ok_or_else(|| StoreError::NotFound(format!("workspace {workspace:?}")))?;
    insert_token(conn, &ws, scope, group, generate_token(), now_us)
}

pub fn token_count(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT count(*) FROM tokens", [], |r| r.get(0))?)
}

/// On a store with no tokens: makes the default workspace and its first admin token, from
/// `bootstrap` when given (it must look like a token), else generated. Returns the new token, or
/// `None` when tokens already exist.
pub fn bootstrap(
    conn: &Connection,
    bootstrap: Option<&str>,
    now_us: i64,
) -> Result<Option<NewToken>> {
    if token_count(conn)? > 0 {
        return Ok(None);
    }
    let ws = match find_workspace(conn, DEFAULT_WORKSPACE)? {
        Some(ws) => ws,
        None => create_workspace(conn, DEFAULT_WORKSPACE, now_us)?,
    };
    let token = bootstrap_token(bootstrap)?;
    insert_token(conn, &ws, Scope::Admin, None, token, now_us).map(Some)
}

/// The auth epoch: a number that moves with every change to tokens, workspaces or limits, made
/// by any process (triggers of schema v20). While it stays, every principal read from the store
/// is still what [`authenticate`] would read.
pub fn epoch(conn: &Connection) -> Result<i64> {
    Ok(conn.query_row("SELECT n FROM auth_epoch", [], |r| r.get(0))?)
}

/// Looks a presented token up. Unknown, malformed and revoked tokens are all `None`.
pub fn authenticate(conn: &Connection, token: &str) -> Result<Option<Principal>> {
    if !looks_like_token(token) {
        return Ok(None);
    }
    let hash = hash_token(token);
    let row = conn
        .query_row(
            "SELECT t.id, t.hash, t.scope, w.id, w.name, COALESCE(t.grp, w.grp),
                lw.rpm, lw.tpm, lw.concurrent, lt.rpm, lt.tpm, lt.concurrent FROM tokens t
             JOIN workspaces w ON w.id = t.workspace_id
             LEFT JOIN limits lw ON lw.workspace_id = w.id AND lw.key_id = ''
             LEFT JOIN limits lt ON lt.workspace_id = w.id AND lt.key_id = t.id
             WHERE t.hash = ?1 AND t.revoked_at_us IS NULL",
            [hash.as_slice()],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, String>(4)?,
                    r.get::<_, Option<String>>(5)?,
                    [
                        r.get::<_, Option<i64>>(6)?,
                        r.get::<_, Option<i64>>(7)?,
                        r.get::<_, Option<i64>>(8)?,
                        r.get::<_, Option<i64>>(9)?,
                        r.get::<_, Option<i64>>(10)?,
                        r.get::<_, Option<i64>>(11)?,
                    ],
                ))
            },
        )
        .optional()?;
    row.map(|row| principal_of(row, &hash))
        .transpose()
        .map(Option::flatten)
}

/// A token row found by its hash (key id, stored hash, scope, workspace id and name, group,
/// the workspace's and the token's limits): its principal, once the stored hash is compared
/// again in constant time.
pub(crate) type TokenRow = (
    String,
    Vec<u8>,
    String,
    String,
    String,
    Option<String>,
    [Option<i64>; 6],
);

pub(crate) fn principal_of(row: TokenRow, hash: &[u8; 32]) -> Result<Option<Principal>> {
    let (key_id, stored, scope, workspace_id, workspace_name, group, limits) = row;
    if !bool::from(stored.as_slice().ct_eq(hash.as_slice())) {
        return Ok(None);
    }
    let scope =
        Scope::parse(&scope).ok_or_else(|| StoreError::Corrupt(format!("scope {scope}")))?;
    Ok(Some(Principal {
        workspace_id,
        workspace_name,
        key_id,
        scope,
        group,
        limits: Applicable::from_stored(limits),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000_000;
    use crate::Store;

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        (dir, store)
    }

    #[test]
    fn tokens_are_prefixed_256_bit_and_stored_only_as_hash() {
        let (_d, store) = store();
        let t = store
            .with_conn(|c| {
                create_workspace(c, "team", NOW)?;
                create_token(c, "team", Scope::Proxy, NOW)
            })
            .unwrap();
        assert!(looks_like_token(&t.token));
        let stored: Vec<u8> = store
            .with_conn(|c| Ok(c.query_row("SELECT hash FROM tokens", [], |r| r.get(0))?))
            .unwrap();
        assert_eq!(stored, hash_token(&t.token).to_vec());
        let raw = std::fs::read(store.path().unwrap()).unwrap();
        assert!(!raw.windows(t.token.len()).any(|w| w == t.token.as_bytes()));
    }

    #[test]
    fn a_tokens_group_overrides_its_workspaces_and_bad_names_are_refused() {
        let (_d, store) = store();
        store
            .with_conn(|c| {
                create_workspace(c, "team", NOW)?;
                let plain = create_token(c, "team", Scope::Proxy, NOW)?;
                let own = create_group_token(c, "team", Scope::Proxy, Some("batch"), NOW)?;
                assert_eq!(authenticate(c, &plain.token)?.unwrap().group, None);
                set_workspace_group(c, "team", Some("premium"))?;
                let p = authenticate(c, &plain.token)?.unwrap();
                assert_eq!(p.group.as_deref(), Some("premium"));
                let o = authenticate(c, &own.token)?.unwrap();
                assert_eq!(o.group.as_deref(), Some("batch"));
                assert_eq!(
                    find_workspace(c, "team")?.unwrap().group.as_deref(),
                    Some("premium")
                );
                set_workspace_group(c, "team", None)?;
                assert_eq!(authenticate(c, &plain.token)?.unwrap().group, None);
                for bad in ["", "a b", "x/y", &"g".repeat(65)] {
                    assert!(
                        set_workspace_group(c, "team", Some(bad)).is_err(),
                        "{bad:?}"
                    );
                    assert!(create_group_token(c, "team", Scope::Read, Some(bad), NOW).is_err());
                }
                assert!(set_workspace_group(c, "nobody", Some("x")).is_err());
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn authenticate_finds_the_principal_and_refuses_others() {
        let (_d, store) = store();
        let t = store
            .with_conn(|c| {
                create_workspace(c, "team", NOW)?;
                create_token(c, "team", Scope::Read, NOW)
            })
            .unwrap();
        let p = store
            .with_conn(|c| authenticate(c, &t.token))
            .unwrap()
            .unwrap();
        assert_eq!(p.workspace_name, "team");
        assert_eq!(p.scope, Scope::Read);
        assert!(store
            .with_conn(|c| authenticate(c, &generate_token()))
            .unwrap()
            .is_none());
        assert!(store
            .with_conn(|c| authenticate(c, "nope"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn bootstrap_uses_the_given_token_once() {
        let (_d, store) = store();
        let given = generate_token();
        let first = store
            .with_conn(|c| bootstrap(c, Some(&given), NOW))
            .unwrap()
            .unwrap();
        assert_eq!(first.token, given);
        assert_eq!(first.scope, Scope::Admin);
        assert!(store
            .with_conn(|c| bootstrap(c, None, NOW))
            .unwrap()
            .is_none());
    }

    #[test]
    fn bootstrap_rejects_a_malformed_token() {
        let (_d, store) = store();
        assert!(store
            .with_conn(|c| bootstrap(c, Some("secret"), NOW))
            .is_err());
    }

    #[test]
    fn scopes_admin_allows_everything_others_only_themselves() {
        assert!(Scope::Admin.allows(Scope::Proxy));
        assert!(Scope::Proxy.allows(Scope::Proxy));
        assert!(!Scope::Proxy.allows(Scope::Read));
        assert!(!Scope::Read.allows(Scope::Proxy));
    }
}
