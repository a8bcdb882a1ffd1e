//! Versioned migrations. `PRAGMA user_version` is the applied version; each migration runs once,
//! in a transaction. A column added by a later migration is NULL on older rows, which is exactly
//! "recorded before the field existed".

use rusqlite::Connection;

use crate::Result;

const MIGRATIONS: &[&str] = &[
    // 1: workspaces, tokens, requests, attempts.
    r#"
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at_us INTEGER NOT NULL
    );
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        hash BLOB NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        created_at_us INTEGER NOT NULL,
        revoked_at_us INTEGER
    );
    CREATE TABLE requests (
        request_id TEXT PRIMARY KEY,
        workspace_id TEXT,
        key_id TEXT,
        created_at_us INTEGER NOT NULL,
        model TEXT,
        provider TEXT,
        channel TEXT,
        grp TEXT,
        dialect TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        timeout_kind TEXT,
        error_class TEXT,
        classification TEXT NOT NULL,
        flags TEXT NOT NULL,
        auth_us INTEGER,
        body_read_us INTEGER,
        distribution_us INTEGER,
        upstream_start_us INTEGER,
        upstream_headers_us INTEGER,
        first_byte_us INTEGER,
        first_event_us INTEGER,
        first_effective_us INTEGER,
        first_visible_us INTEGER,
        last_effective_us INTEGER,
        upstream_done_us INTEGER,
        handler_done_us INTEGER,
        input_tokens INTEGER,
        output_tokens INTEGER,
        cache_read_tokens INTEGER,
        cache_write_tokens INTEGER,
        reasoning_tokens INTEGER,
        event_count INTEGER NOT NULL,
        text_delta_count INTEGER NOT NULL,
        channel_inflight INTEGER,
        hedge TEXT NOT NULL,
        failover_count INTEGER NOT NULL,
        cached INTEGER NOT NULL,
        max_output_tokens INTEGER,
        reasoning_effort TEXT,
        tool_count INTEGER,
        tool_choice TEXT,
        response_format TEXT,
        temperature REAL,
        top_p REAL,
        region TEXT,
        trace_id TEXT
    );
    CREATE INDEX requests_workspace_created ON requests(workspace_id, created_at_us DESC);
    CREATE INDEX requests_created ON requests(created_at_us);
    CREATE TABLE attempts (
        request_id TEXT NOT NULL REFERENCES requests(request_id) ON DELETE CASCADE,
        idx INTEGER NOT NULL,
        channel TEXT NOT NULL,
        role TEXT NOT NULL,
        won INTEGER NOT NULL,
        status INTEGER,
        error_class TEXT,
        start_us INTEGER,
        headers_us INTEGER,
        first_byte_us INTEGER,
        end_us INTEGER,
        PRIMARY KEY (request_id, idx)
    );
    "#,
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

pub fn migrate(conn: &mut Connection) -> Result<()> {
    let current: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current.max(0) as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        migrate(&mut conn).unwrap();
        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, VERSION);
    }
}
