//! Versioned migrations. `PRAGMA user_version` is the applied version; each migration runs once.
//! A column added by a later migration is NULL on older rows, which is exactly
//! "recorded before the field existed".
//!
//! A migration may carry Rust code (migration 2 backfills the rollups of existing rows). All
//! pending migrations run in one transaction: every pending SQL step first, then the Rust steps,
//! so that Rust code reads rows with today's reader against today's columns. A `step` is the
//! exception: it runs in order with the SQL (migration 19 rewrites the request rows, reading
//! them with the columns they had; see [`crate::wide`]).

use rusqlite::Connection;

use crate::{rollups, Result};

struct Migration {
    sql: &'static str,
    /// Rust run after `sql`, in order with the other migrations' SQL: it sees the columns of
    /// the migrations before it, which today's reader may not read.
    step: Option<fn(&Connection) -> Result<()>>,
    after: Option<fn(&Connection) -> Result<()>>,
    /// Whether the store has what `sql` makes already (a migration taken back and run again,
    /// as a test does, whose SQL cannot say `IF NOT EXISTS`): then `sql` is not run.
    done: Option<fn(&Connection) -> Result<bool>>,
}

const MIGRATIONS: &[Migration] = &[
    // 1: workspaces, tokens, requests, attempts.
    Migration {
        sql: V1,
        step: None,
        after: None,
        done: None,
    },
    // 2: per-minute rollups (backfilled from the rows), and the indexes the usage filters use.
    Migration {
        sql: V2,
        step: None,
        after: Some(rollups::backfill),
        done: None,
    },
    // 3: the routing group a workspace (or a single token, overriding it) uses.
    Migration {
        sql: V3,
        step: None,
        after: None,
        done: None,
    },
    // 4: the dialect of the channel that answered (translation when it differs from `dialect`).
    Migration {
        sql: V4,
        step: None,
        after: None,
        done: None,
    },
    // 5: the gateway instance that served the request.
    Migration {
        sql: V5,
        step: None,
        after: None,
        done: None,
    },
    // 6: cost, one-hour cache writes, the admission phase and the limit that refused; the
    // limits and budgets of workspaces and tokens, and what each spent per day and month.
    Migration {
        sql: V6,
        step: None,
        after: None,
        done: None,
    },
    // 7: which endpoint a request called (embeddings, files, …), its bytes in and out and the
    // channel key index; the endpoint as a rollup dimension; the channel that holds each
    // provider object (file, batch, stored response) a workspace created;
    // and when an attempt's new upstream connection was connected, tunnelled and through TLS.
    Migration {
        sql: V7,
        step: None,
        after: None,
        done: None,
    },
    // 8: the comparison dimensions as rollup dimensions (effort class, tools present, the
    // max-output and input-token buckets, region), and output tokens the gateway estimated.
    Migration {
        sql: V8,
        step: None,
        after: None,
        done: None,
    },
    // 9: each gateway instance's heartbeat (its requests in flight), for a fleet without Redis.
    Migration {
        sql: V9,
        step: None,
        after: None,
        done: None,
    },
    // 10: which in-band carrier the client was sent (noted as sent, not derived), and each
    // attempt's span id (the parent id of the `traceparent` it sent upstream).
    Migration {
        sql: V10,
        step: None,
        after: None,
        done: None,
    },
    // 11: the hour tier of the rollups (built from the minute tier), which usage reads whole
    // hours from.
    Migration {
        sql: V11,
        step: None,
        after: Some(rollups::backfill_hours),
        done: None,
    },
    // 12: one partial index of the unusual requests in place of the status, outcome and
    // classification indexes.
    Migration {
        sql: V12,
        step: None,
        after: None,
        done: None,
    },
    // 13: a request's attempts in its row (the attempts table folded into it).
    Migration {
        sql: V13,
        step: None,
        after: None,
        done: Some(attempts_folded),
    },
    // 14: the fields no query filters on packed into one value.
    Migration {
        sql: V14,
        step: None,
        after: None,
        done: Some(packed_added),
    },
    // 15: no index by time alone (rollup tiers, requests); the ids the gateway makes stored as
    // their 16 bytes (`crate::stored_id`; older builds read every id as text, and the version
    // keeps them from opening the store).
    Migration {
        sql: V15,
        step: None,
        after: None,
        done: None,
    },
    // 16: a request's model, provider, channel, group, dialect, endpoint and region stored as
    // codes of the `names` table (`crate::names`; older builds read them as text, and the
    // version keeps them from opening the store).
    Migration {
        sql: V16,
        step: None,
        after: None,
        done: None,
    },
    // 17: the rollups' names (every text dimension but the workspace) stored as codes of the
    // `names` table (`crate::rollups`; older builds read them as text, and the version keeps
    // them from opening the store).
    Migration {
        sql: "",
        step: None,
        after: Some(rollups::code_names),
        done: None,
    },
    // 18: no request index by model or by channel: a filtered log read finds its rows through
    // the rollups (`crate::guide`).
    Migration {
        sql: V18,
        step: None,
        after: None,
        done: None,
    },
    // 19: the requests rewritten with the columns queries use and the packed fields alone
    // (`crate::wide`; older builds read columns that are gone, and the version keeps them from
    // opening the store).
    Migration {
        sql: "",
        step: Some(crate::wide::rewrite),
        after: None,
        done: Some(requests_lean),
    },
    // 20: a number every change to tokens, workspaces or limits moves ([`crate::auth::epoch`]),
    // so a gateway trusts the principals it remembers for as long as the number stays.
    Migration {
        sql: V20,
        step: None,
        after: None,
        done: None,
    },
];

const V1: &str = r#"
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
"#;

/// Rollups keyed by workspace, minute and every filterable dimension ('' = absent), the encoded
/// `Rollup` as the value; clustered on the key so that a window is one range scan.
///
/// On `requests`: the newest-first scans (`ORDER BY created_at_us DESC, rowid DESC`) walk an
/// ascending index backwards, which yields exactly that order (the DESC index of v1 made SQLite
/// sort ties). One index per filter whose values can be rare (model, channel, status, outcome,
/// classification), so that "the last 50 failed requests" does not scan the workspace.
/// Provider, group, dialect and stream have few values each and are checked while scanning.
const V2: &str = r#"
    CREATE TABLE rollups (
        workspace_id TEXT NOT NULL,
        minute_us INTEGER NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification)
    ) WITHOUT ROWID;
    CREATE INDEX rollups_minute ON rollups(minute_us);
    DROP INDEX requests_workspace_created;
    CREATE INDEX requests_workspace_created ON requests(workspace_id, created_at_us);
    CREATE INDEX requests_ws_model ON requests(workspace_id, model, created_at_us);
    CREATE INDEX requests_ws_channel ON requests(workspace_id, channel, created_at_us);
    CREATE INDEX requests_ws_status ON requests(workspace_id, status, created_at_us);
    CREATE INDEX requests_ws_outcome ON requests(workspace_id, outcome, created_at_us);
    CREATE INDEX requests_ws_classification
        ON requests(workspace_id, classification, created_at_us);
"#;

const V3: &str = r#"
    ALTER TABLE workspaces ADD COLUMN grp TEXT;
    ALTER TABLE tokens ADD COLUMN grp TEXT;
"#;

const V4: &str = r#"
    ALTER TABLE requests ADD COLUMN upstream_dialect TEXT;
"#;

const V5: &str = r#"
    ALTER TABLE requests ADD COLUMN instance TEXT;
"#;

/// A limit or budget row with `key_id = ''` is the workspace's own; one naming a token is that
/// token's (tighter or not, both apply). A NULL limit is no limit. `spend` sums the costs of the
/// rows written, per workspace and token, per UTC day and month (written in the transaction
/// that writes the rows).
const V6: &str = r#"
    ALTER TABLE requests ADD COLUMN cache_write_1h_tokens INTEGER;
    ALTER TABLE requests ADD COLUMN cost_nano_usd INTEGER;
    ALTER TABLE requests ADD COLUMN cost_estimated INTEGER;
    ALTER TABLE requests ADD COLUMN admission_us INTEGER;
    ALTER TABLE requests ADD COLUMN refused_by TEXT;
    CREATE TABLE limits (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL DEFAULT '',
        rpm INTEGER,
        tpm INTEGER,
        concurrent INTEGER,
        updated_at_us INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, key_id)
    );
    CREATE TABLE budgets (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        nano_usd INTEGER NOT NULL,
        mode TEXT NOT NULL,
        updated_at_us INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, key_id, period)
    );
    CREATE TABLE spend (
        workspace_id TEXT NOT NULL,
        key_id TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        period_start_us INTEGER NOT NULL,
        nano_usd INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, key_id, period, period_start_us)
    );
"#;

/// Rows older than this migration called the model endpoints (`generation`). The rollups get the
/// endpoint in their key: SQLite cannot widen a primary key, so the table is rebuilt. `affinity`
/// names, per workspace, the channel (and key) that holds each object the workspace created, so
/// that later calls naming it go there and no other workspace can reach it. An attempt's
/// connection marks are offsets from t0 like every mark; NULL for an attempt on a pooled
/// connection, a step not taken, and rows written before.
const V7: &str = r#"
    ALTER TABLE requests ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'generation';
    ALTER TABLE requests ADD COLUMN bytes_in INTEGER;
    ALTER TABLE requests ADD COLUMN bytes_out INTEGER;
    ALTER TABLE requests ADD COLUMN key_index INTEGER;
    CREATE TABLE rollups_v7 (
        workspace_id TEXT NOT NULL,
        minute_us INTEGER NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification, endpoint)
    ) WITHOUT ROWID;
    INSERT INTO rollups_v7 SELECT workspace_id, minute_us, model, provider, channel, grp, dialect,
        stream, status, outcome, classification, 'generation', data FROM rollups;
    DROP TABLE rollups;
    ALTER TABLE rollups_v7 RENAME TO rollups;
    CREATE INDEX rollups_minute ON rollups(minute_us);
    CREATE TABLE affinity (
        workspace_id TEXT NOT NULL,
        object_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        channel TEXT NOT NULL,
        key_index INTEGER,
        created_at_us INTEGER NOT NULL,
        PRIMARY KEY (workspace_id, object_id)
    ) WITHOUT ROWID;
    CREATE INDEX affinity_created ON affinity(created_at_us);
    ALTER TABLE attempts ADD COLUMN connected_us INTEGER;
    ALTER TABLE attempts ADD COLUMN tunnel_us INTEGER;
    ALTER TABLE attempts ADD COLUMN tls_us INTEGER;
"#;

/// The rollups get the comparison dimensions of `laptime_core::compare` in their key (the table
/// is rebuilt, as in v7). Rollups written before hold `''` for them: absent, as for any field
/// recorded before it existed (they are not rebuilt from the rows, so an upgrade costs what
/// copying the rollups costs, and PostgreSQL, whose migrations are SQL only, answers the same).
/// `estimated_output_tokens`: counted by the gateway's tokenizer when the provider reported no
/// output count; kept apart from `output_tokens`.
const V8: &str = r#"
    ALTER TABLE requests ADD COLUMN estimated_output_tokens INTEGER;
    CREATE TABLE rollups_v8 (
        workspace_id TEXT NOT NULL,
        minute_us INTEGER NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        effort TEXT NOT NULL,
        tools TEXT NOT NULL,
        max_output_bucket TEXT NOT NULL,
        input_bucket TEXT NOT NULL,
        region TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification, endpoint, effort, tools, max_output_bucket,
            input_bucket, region)
    ) WITHOUT ROWID;
    INSERT INTO rollups_v8 SELECT workspace_id, minute_us, model, provider, channel, grp, dialect,
        stream, status, outcome, classification, endpoint, '', '', '', '', '', data FROM rollups;
    DROP TABLE rollups;
    ALTER TABLE rollups_v8 RENAME TO rollups;
    CREATE INDEX rollups_minute ON rollups(minute_us);
"#;

/// One row per gateway instance, replaced by its heartbeat every second (see `instances.rs`);
/// `channels` is a JSON array of `{channel, in_flight}`.
const V9: &str = r#"
    CREATE TABLE instances (
        instance TEXT PRIMARY KEY,
        in_flight INTEGER NOT NULL,
        channels TEXT NOT NULL,
        updated_at_us INTEGER NOT NULL
    );
"#;

/// `in_band`: the carrier of the timing the client got (`sse_comment`, `trailers`,
/// `sse_comment_and_trailers`, `server_timing`, `server_timing_head` or `none`), noted when it
/// was sent; NULL on older rows, whose readers derive it. `attempts.span_id`: the attempt's W3C
/// span id, 16 hex digits; NULL on older rows.
const V10: &str = r#"
    ALTER TABLE requests ADD COLUMN in_band TEXT;
    ALTER TABLE attempts ADD COLUMN span_id TEXT;
"#;

/// Rollups per hour, keyed as the minute ones with the hour's start: each row the merge of its
/// key's minute rows, kept so by every write (see `rollups.rs`).
const V11: &str = r#"
    CREATE TABLE rollups_hourly (
        workspace_id TEXT NOT NULL,
        hour_us INTEGER NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream INTEGER NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        effort TEXT NOT NULL,
        tools TEXT NOT NULL,
        max_output_bucket TEXT NOT NULL,
        input_bucket TEXT NOT NULL,
        region TEXT NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (workspace_id, hour_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification, endpoint, effort, tools, max_output_bucket,
            input_bucket, region)
    ) WITHOUT ROWID;
    CREATE INDEX rollups_hourly_hour ON rollups_hourly(hour_us);
"#;

/// The requests that are not a plain success: what a filter on a status other than 200, an
/// outcome other than `completed` or a classification other than `ok` reads, through the
/// partial index `requests_ws_unusual`. A query uses that index only when its `WHERE` holds
/// this very expression (SQLite proves a partial index usable term by term), so
/// [`crate::usage`] adds it to such filters. Since v19 the outcome and the classification are
/// numbers, 0 for `completed` and `ok` ([`crate::closed`]).
pub(crate) const UNUSUAL: &str =
    "(status IS NOT 200 OR outcome IS NOT 0 OR classification IS NOT 0)";

/// [`UNUSUAL`] as v12 to v18 stated it, with the outcome's and the classification's names
/// (numbers since v19, [`crate::closed`]).
#[cfg(test)]
const UNUSUAL_V12: &str =
    "(status IS NOT 200 OR outcome IS NOT 'completed' OR classification IS NOT 'ok')";

/// Three indexes (status, outcome, classification), each an entry per request, gave the
/// newest-first reads filtered on a rare value an index to walk; the rare values are the
/// unusual requests, a few in a hundred, so one partial index of those serves all three at
/// a few percent of the size and of the cost of each insert. A filter on the common value
/// (status 200, `completed`, `ok`) matches most rows and is found by walking the workspace's
/// time index. `IF [NOT] EXISTS`: re-running it (as a test that takes a migration back does)
/// changes nothing.
const V12: &str = r#"
    DROP INDEX IF EXISTS requests_ws_status;
    DROP INDEX IF EXISTS requests_ws_outcome;
    DROP INDEX IF EXISTS requests_ws_classification;
    CREATE INDEX IF NOT EXISTS requests_ws_unusual ON requests(workspace_id, created_at_us)
        WHERE (status IS NOT 200 OR outcome IS NOT 'completed' OR classification IS NOT 'ok');
"#;

/// The attempts table folded into its requests: each request's attempts as a JSON array in
/// idx order, one array of fields per attempt as `attempts::StoredAttempt` reads them.
const V13: &str = r#"
    ALTER TABLE requests ADD COLUMN attempts TEXT;
    UPDATE requests SET attempts = (
        SELECT json_group_array(json_array(channel, role,
            CASE WHEN won THEN json('true') ELSE json('false') END, status, error_class, start_us,
            headers_us, first_byte_us, end_us, connected_us, tunnel_us, tls_us, span_id)
            ORDER BY idx)
        FROM attempts a WHERE a.request_id = requests.request_id)
    WHERE request_id IN (SELECT request_id FROM attempts);
    DROP TABLE attempts;
"#;

/// The fields of a request that no query filters, groups or sorts on, packed into one value
/// ([`crate::packed`]) instead of a column each, as PostgreSQL's v9. Rows written before keep
/// their columns and read as they did; nothing is rewritten.
const V14: &str = r#"
    ALTER TABLE requests ADD COLUMN packed BLOB;
"#;

/// The indexes by time alone dropped, of the rollup tiers and of the requests. Every `usage`
/// and every log read is of one workspace, through an index or key that starts with it; only
/// retention walked by time across workspaces, and it now goes one workspace at a time
/// (`records::delete_older_than_batched`). In a table without rowid each entry of such an index
/// repeats the whole key: the minute tier's was 60 B per request of a 1 M load, a quarter of
/// the tier; the requests' was 19 B.
///
/// Since v15 the ids the gateway makes are stored as their 16 bytes (`crate::stored_id`):
/// `id_forms` keeps when a store that had rows moved, so that a write looks for an older text
/// row only for ids made before then.
pub(crate) const V15: &str = r#"
    DROP INDEX IF EXISTS rollups_minute;
    DROP INDEX IF EXISTS rollups_hourly_hour;
    DROP INDEX IF EXISTS requests_created;
    CREATE TABLE IF NOT EXISTS id_forms (text_ids_before_ms INTEGER NOT NULL);
    INSERT INTO id_forms
        SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)
        WHERE EXISTS (SELECT 1 FROM requests) AND NOT EXISTS (SELECT 1 FROM id_forms);
"#;

/// The names table ([`crate::names`]), and the moment from which rows hold codes when the store
/// had rows before it: the older rows keep their text until retention removes them.
pub(crate) const V16: &str = r#"
    CREATE TABLE IF NOT EXISTS names (
        code BLOB PRIMARY KEY,
        name TEXT NOT NULL UNIQUE
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS name_forms (text_before_us INTEGER NOT NULL);
    INSERT INTO name_forms
        SELECT CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)
        WHERE EXISTS (SELECT 1 FROM requests) AND NOT EXISTS (SELECT 1 FROM name_forms);
"#;

/// The request indexes by model and by channel dropped (59 B a request of a 1 M load): a
/// filtered log read walks the minutes whose rollups match its filter, and in each the
/// workspace's time index ([`crate::guide`]), as PostgreSQL's always did without such indexes.
/// The unusual rows keep their partial index (4 B a request): a filter that only they can match
/// and that names nothing is still read down it.
pub(crate) const V18: &str = r#"
    DROP INDEX IF EXISTS requests_ws_model;
    DROP INDEX IF EXISTS requests_ws_channel;
"#;

/// The auth epoch: one row whose number triggers move with every change to what a principal is
/// read from (tokens, workspaces, limits), made by any process: the gateway, the CLI, another
/// instance.
const V20: &str = r#"
    CREATE TABLE IF NOT EXISTS auth_epoch (
        only_row INTEGER PRIMARY KEY CHECK (only_row = 1),
        n INTEGER NOT NULL
    );
    INSERT OR IGNORE INTO auth_epoch (only_row, n) VALUES (1, 0);
    CREATE TRIGGER IF NOT EXISTS tokens_insert_epoch AFTER INSERT ON tokens
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS tokens_update_epoch AFTER UPDATE ON tokens
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS tokens_delete_epoch AFTER DELETE ON tokens
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS workspaces_insert_epoch AFTER INSERT ON workspaces
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS workspaces_update_epoch AFTER UPDATE ON workspaces
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS workspaces_delete_epoch AFTER DELETE ON workspaces
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS limits_insert_epoch AFTER INSERT ON limits
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS limits_update_epoch AFTER UPDATE ON limits
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
    CREATE TRIGGER IF NOT EXISTS limits_delete_epoch AFTER DELETE ON limits
        BEGIN UPDATE auth_epoch SET n = n + 1; END;
"#;

/// The columns of `requests` since v19, in the order of [`crate::records::COLUMNS`]. The names
/// are `TEXT`, as since v1: a code is a blob, which that affinity leaves as it is
/// ([`crate::names`]); so is a gateway id ([`crate::stored_id`]).
pub(crate) const REQUESTS_V19: &str = "
    request_id TEXT PRIMARY KEY,
    workspace_id TEXT,
    created_at_us INTEGER NOT NULL,
    model TEXT,
    provider TEXT,
    channel TEXT,
    grp TEXT,
    dialect TEXT NOT NULL,
    stream INTEGER NOT NULL,
    status INTEGER NOT NULL,
    outcome INTEGER NOT NULL,
    classification INTEGER NOT NULL,
    endpoint TEXT NOT NULL,
    input_tokens INTEGER,
    max_output_tokens INTEGER,
    reasoning_effort TEXT,
    tool_count INTEGER,
    region TEXT,
    key_id TEXT,
    instance TEXT,
    packed BLOB NOT NULL";

/// The indexes of `requests` since v18: by workspace and time, and of the unusual rows.
pub(crate) fn requests_indexes() -> String {
    format!(
        "CREATE INDEX requests_workspace_created ON requests(workspace_id, created_at_us);
         CREATE INDEX requests_ws_unusual ON requests(workspace_id, created_at_us)
            WHERE {UNUSUAL};"
    )
}

/// Whether the requests have only the columns of v19 already.
fn requests_lean(conn: &Connection) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT count(*) = 0 FROM pragma_table_info('requests') WHERE name = 'flags'",
        [],
        |r| r.get(0),
    )?)
}

/// Whether the packed column exists already (V14 applied).
fn packed_added(conn: &Connection) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('requests') WHERE name = 'packed'",
        [],
        |r| r.get(0),
    )?)
}

/// Whether the attempts are in the request rows already (V13 applied): in the column V13 added,
/// or packed (V14 added the column, which V19 kept alone).
fn attempts_folded(conn: &Connection) -> Result<bool> {
    Ok(conn.query_row(
        "SELECT count(*) > 0 FROM pragma_table_info('requests')
         WHERE name IN ('attempts', 'packed')",
        [],
        |r| r.get(0),
    )?)
}

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

pub fn migrate(conn: &mut Connection) -> Result<()> {
    migrate_to(conn, MIGRATIONS.len())
}

/// Applies the migrations after the database's version, up to and including `target`.
///
/// The version is read inside a write transaction: processes opening one new database at once
/// queue on SQLite's write lock (within the busy timeout), and each one after the first finds
/// the migrations applied; read before it, all of them would apply version 1.
pub(crate) fn migrate_to(conn: &mut Connection, target: usize) -> Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let current: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if current > VERSION {
        return Err(crate::StoreError::SchemaTooNew {
            found: current,
            known: VERSION,
        });
    }
    let pending = MIGRATIONS
        .get(current.max(0) as usize..target.min(MIGRATIONS.len()))
        .unwrap_or_default();
    if pending.is_empty() {
        return Ok(());
    }
    for m in pending {
        if let Some(done) = m.done {
            if done(&tx)? {
                continue;
            }
        }
        tx.execute_batch(m.sql)?;
        if let Some(step) = m.step {
            step(&tx)?;
        }
    }
    for after in pending.iter().filter_map(|m| m.after) {
        after(&tx)?;
    }
    tx.pragma_update(None, "user_version", target.min(MIGRATIONS.len()) as i64)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An empty store at `version`: its migrations' SQL and in-order steps only (their `after`
    /// steps read rows with today's reader, which needs today's columns; an empty store has
    /// nothing for them).
    pub(crate) fn empty_at(conn: &Connection, version: usize) {
        for m in &MIGRATIONS[..version] {
            conn.execute_batch(m.sql).unwrap();
            if let Some(step) = m.step {
                step(conn).unwrap();
            }
        }
        conn.pragma_update(None, "user_version", version as i64)
            .unwrap();
    }

    fn indexes(conn: &Connection) -> Vec<String> {
        indexes_of(conn, "requests")
    }

    fn indexes_of(conn: &Connection, table: &str) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 ORDER BY name")
            .unwrap();
        let names = stmt.query_map([table], |r| r.get(0)).unwrap();
        names.collect::<rusqlite::Result<_>>().unwrap()
    }

    #[test]
    fn v15_leaves_no_index_by_time_alone_and_retention_walks_the_workspace_keys() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 14);
        assert_eq!(indexes_of(&conn, "rollups"), ["rollups_minute"]);
        assert_eq!(indexes_of(&conn, "rollups_hourly"), ["rollups_hourly_hour"]);
        migrate(&mut conn).unwrap();
        assert!(indexes_of(&conn, "rollups").is_empty());
        assert!(indexes_of(&conn, "rollups_hourly").is_empty());
        assert!(!indexes(&conn).contains(&"requests_created".to_string()));
        // Retention's per-workspace reads walk a key or index, not the table.
        for (sql, via) in [
            (
                "SELECT min(minute_us) FROM rollups WHERE workspace_id = 'w'",
                "PRIMARY KEY",
            ),
            (
                "SELECT min(workspace_id) FROM rollups_hourly WHERE workspace_id > 'w'",
                "PRIMARY KEY",
            ),
            (
                "SELECT min(workspace_id) FROM requests WHERE workspace_id > 'w'",
                "requests_workspace_created",
            ),
            (
                "SELECT rowid FROM requests WHERE workspace_id IS NULL AND created_at_us < 5
                 ORDER BY created_at_us LIMIT 10",
                "requests_workspace_created (workspace_id=? AND created_at_us<?)",
            ),
        ] {
            let plan: String = conn
                .query_row(&format!("EXPLAIN QUERY PLAN {sql}"), [], |r| r.get(3))
                .unwrap();
            assert!(plan.contains(via), "{sql}: {plan}");
        }
    }

    #[test]
    fn v18_leaves_the_requests_one_index_by_workspace_and_time_and_one_of_unusual_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 17);
        for index in ["requests_ws_model", "requests_ws_channel"] {
            assert!(indexes_of(&conn, "requests").contains(&index.to_string()));
        }
        migrate(&mut conn).unwrap();
        assert_eq!(
            indexes_of(&conn, "requests"),
            [
                "requests_workspace_created",
                "requests_ws_unusual",
                "sqlite_autoindex_requests_1"
            ]
        );
    }

    #[test]
    fn v12_replaces_the_status_outcome_and_classification_indexes_with_one_of_unusual_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 11);
        let before = indexes(&conn);
        let replaced = [
            "requests_ws_status",
            "requests_ws_outcome",
            "requests_ws_classification",
        ];
        for name in replaced {
            assert!(before.iter().any(|n| n == name), "{before:?}");
        }
        migrate_to(&mut conn, 12).unwrap();
        let after = indexes(&conn);
        for name in replaced {
            assert!(!after.iter().any(|n| n == name), "{after:?}");
        }
        assert_eq!(
            after
                .iter()
                .filter(|n| !before.contains(n))
                .collect::<Vec<_>>(),
            ["requests_ws_unusual"]
        );
        assert_eq!(after.len(), before.len() - 2, "{after:?}");
        // Its condition is the one the reads state.
        let sql: String = conn
            .query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'requests_ws_unusual'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(sql.ends_with(&format!("WHERE {UNUSUAL_V12}")), "{sql}");
    }

    #[test]
    fn v15_notes_when_a_store_with_rows_moved_to_byte_ids_and_not_for_an_empty_one() {
        use crate::records::tests::sample;
        let moved = |conn: &Connection| -> Vec<i64> {
            let mut stmt = conn
                .prepare("SELECT text_ids_before_ms FROM id_forms")
                .unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.collect::<rusqlite::Result<_>>().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut empty = Connection::open(dir.path().join("empty.db")).unwrap();
        empty_at(&empty, 14);
        migrate_to(&mut empty, 15).unwrap();
        assert!(moved(&empty).is_empty());

        let mut used = Connection::open(dir.path().join("used.db")).unwrap();
        empty_at(&used, 14);
        crate::records::tests::insert_legacy_rows(&used, &[sample("a", "ws", 1)]);
        let before = crate::records::tests::now_ms();
        migrate_to(&mut used, 15).unwrap();
        let after = crate::records::tests::now_ms();
        let got = moved(&used);
        assert_eq!(got.len(), 1);
        assert!(
            (before - 1..=after + 1).contains(&got[0]),
            "{got:?} not in {before}..{after}"
        );
        // Run again (as a test that takes a migration back does), it keeps the first time.
        used.execute_batch(V15).unwrap();
        assert_eq!(moved(&used), got);
    }

    #[test]
    fn v16_notes_when_a_store_with_rows_moved_to_coded_names_and_its_rows_read_as_before() {
        use crate::records::tests::{insert_legacy_rows, now_ms, sample};
        let moment = |conn: &Connection| -> Vec<i64> {
            let mut stmt = conn
                .prepare("SELECT text_before_us FROM name_forms")
                .unwrap();
            let rows = stmt.query_map([], |r| r.get(0)).unwrap();
            rows.collect::<rusqlite::Result<_>>().unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let mut empty = Connection::open(dir.path().join("empty.db")).unwrap();
        empty_at(&empty, 15);
        migrate_to(&mut empty, 16).unwrap();
        assert!(moment(&empty).is_empty());

        let mut used = Connection::open(dir.path().join("used.db")).unwrap();
        empty_at(&used, 15);
        let old = sample("a", "ws", 1);
        insert_legacy_rows(&used, std::slice::from_ref(&old));
        let before = now_ms() * 1000;
        migrate_to(&mut used, 16).unwrap();
        let after = now_ms() * 1000;
        let got = moment(&used);
        assert_eq!(got.len(), 1);
        assert!(
            (before - 1000..=after + 1000).contains(&got[0]),
            "{got:?} not in {before}..{after}"
        );
        // Run again (as a test that takes a migration back does), it keeps the first moment.
        used.execute_batch(V16).unwrap();
        assert_eq!(moment(&used), got);
        // Until v19 rewrites the older rows with codes and clears it (`crate::wide`).
        migrate(&mut used).unwrap();
        assert_eq!(
            crate::records::get(&used, "ws", "a").unwrap().as_ref(),
            Some(&old)
        );
        assert!(moment(&used).is_empty());
    }

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

    /// Writes `rows` into an older store as its gateway did: through the column writer of
    /// builds before v14 into a scratch store, then only the columns the older store has are
    /// copied over, the attempts into the table they had before v13.
    fn write_as_older(
        conn: &Connection,
        scratch: &std::path::Path,
        rows: &[laptime_core::timeline::RequestRecord],
    ) {
        let mut s = Connection::open(scratch).unwrap();
        migrate_to(&mut s, 18).unwrap();
        crate::records::tests::insert_legacy_rows(&s, rows);
        drop(s);
        let names = |table: &str| -> Vec<String> {
            conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        let columns = names("requests").join(", ");
        // Each attempts column from the fields of a stored attempt (`attempts::StoredAttempt`).
        let fields = [
            "channel",
            "role",
            "won",
            "status",
            "error_class",
            "start_us",
            "headers_us",
            "first_byte_us",
            "end_us",
            "connected_us",
            "tunnel_us",
            "tls_us",
            "span_id",
        ];
        let attempt_columns = names("attempts");
        let values: Vec<String> = attempt_columns
            .iter()
            .map(|c| match c.as_str() {
                "request_id" => "r.request_id".to_string(),
                "idx" => "j.key".to_string(),
                f => {
                    let i = fields.iter().position(|x| *x == f).unwrap();
                    format!("j.value ->> {i}")
                }
            })
            .collect();
        conn.execute("ATTACH ?1 AS scratch", [scratch.to_str().unwrap()])
            .unwrap();
        conn.execute_batch(&format!(
            "INSERT INTO requests ({columns}) SELECT {columns} FROM scratch.requests;
             INSERT INTO attempts ({}) SELECT {}
                FROM scratch.requests r, json_each(r.attempts) j;
             DETACH scratch;",
            attempt_columns.join(", "),
            values.join(", ")
        ))
        .unwrap();
    }

    #[test]
    fn v13_moves_every_attempt_into_its_request_row_in_order() {
        use crate::records::tests::sample;
        use laptime_core::timeline::{Attempt, AttemptRole, ErrorClass};
        use std::time::Duration;

        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        empty_at(&conn, 12);
        let mut failed_over = sample("two", "ws", 2);
        failed_over.attempts.insert(
            0,
            Attempt {
                channel: "first".into(),
                role: AttemptRole::Primary,
                won: false,
                status: Some(503),
                error_class: Some(ErrorClass::UpstreamStatus5xx),
                start: Some(Duration::from_micros(10)),
                headers: Some(Duration::from_micros(900)),
                first_byte: None,
                end: Some(Duration::from_micros(950)),
                span_id: Some([7; 8]),
                ..failed_over.attempts[0].clone()
            },
        );
        let mut none = sample("none", "ws", 3);
        none.attempts.clear();
        let rows = [sample("one", "ws", 1), failed_over, none];
        write_as_older(&conn, &dir.path().join("scratch.db"), &rows);
        let stored: i64 = conn
            .query_row("SELECT count(*) FROM attempts", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, 3);
        migrate(&mut conn).unwrap();
        for want in &rows {
            let got = crate::records::get(&conn, "ws", &want.request_id)
                .unwrap()
                .unwrap();
            assert_eq!(got.attempts, want.attempts, "{}", want.request_id);
        }
        let table: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE name = 'attempts'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(table, 0, "the attempts table is gone");
    }

    #[test]
    fn upgrading_a_v1_store_backfills_rollups_and_keeps_absent_marks_absent() {
        use crate::records::tests::sample;
        use crate::usage::{usage, UsageFilter};
        use laptime_core::rollup::{Metric, Rollup};

        let dir = tempfile::tempdir().unwrap();
        let mut conn = Connection::open(dir.path().join("t.db")).unwrap();
        migrate_to(&mut conn, 1).unwrap();
        // Rows a v1 gateway wrote: two minutes, two workspaces, one row without a workspace.
        let mut rows: Vec<_> = (0..6)
            .map(|i| sample(&format!("r{i}"), "ws", 60_000_000 * (i % 2) + i))
            .collect();
        rows[3].outcome = laptime_core::timeline::Outcome::UpstreamError;
        rows[3].classification = laptime_core::slow::Classification::Failed;
        rows.push(sample("other", "ws_b", 5));
        let mut orphan = sample("orphan", "ws", 7);
        orphan.workspace_id = None;
        rows.push(orphan);
        write_as_older(&conn, &dir.path().join("scratch.db"), &rows);
        // A row from before most fields existed: only the columns v1 requires.
        conn.execute(
            "INSERT INTO requests (request_id, workspace_id, created_at_us, dialect, stream, status,
                outcome, classification, flags, event_count, text_delta_count, hedge,
                failover_count, cached, handler_done_us)
             VALUES ('bare', 'ws', 10, 'chat', 0, 200, 'completed', 'ok', '[]', 0, 0, 'none', 0,
                0, 2500)",
            [],
        )
        .unwrap();

        migrate(&mut conn).unwrap();
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, VERSION);

        let got = usage(&conn, "ws", 0, 120_000_000, &UsageFilter::default(), &[]).unwrap();
        let bare = crate::records::get(&conn, "ws", "bare").unwrap().unwrap();
        let mut want = Rollup::new();
        for r in rows[..6].iter().chain([&bare]) {
            want.add(r);
        }
        assert!(got.total.agrees_with(&want), "{:?}\n{want:?}", got.total);
        assert_eq!(got.total.requests, 7);
        assert_eq!(got.total.errors, 1);

        // The bare row reads back without marks, and the usage API counts it as a null.
        assert_eq!(bare.marks.upstream_start, None);
        assert_eq!(bare.marks.first_byte, None);
        assert_eq!(bare.tokens.output, None);
        let ttft = got.total.stats(Metric::TtftMs);
        assert_eq!((ttft.count, ttft.null_count), (6, 1));
        assert!(
            ttft.min.is_some_and(|m| m > 0.0),
            "never a 0 for the absent value"
        );
        let lat = got.total.stats(Metric::LatencyMs);
        assert_eq!((lat.count, lat.null_count, lat.min), (7, 0, Some(2.5)));

        let b = usage(&conn, "ws_b", 0, 120_000_000, &UsageFilter::default(), &[]).unwrap();
        assert_eq!(b.total.requests, 1);

        // A v1 store's rollups are backfilled from its rows after every SQL step, so they have
        // the comparison dimensions of the rows (v8 itself copies a v7 store's rollups with
        // the dimensions absent): six rows of under 256 input tokens, the bare one without a
        // count; no effort asked, no tools.
        let dims = [
            crate::usage::GroupDim::ReasoningEffort,
            crate::usage::GroupDim::ToolsPresent,
            crate::usage::GroupDim::InputBucket,
        ];
        let by = usage(&conn, "ws", 0, 120_000_000, &UsageFilter::default(), &dims).unwrap();
        let groups: Vec<(Vec<Option<&str>>, u64)> = by
            .groups
            .iter()
            .map(|(k, r)| (k.iter().map(|(_, v)| v.as_deref()).collect(), r.requests))
            .collect();
        assert_eq!(
            groups,
            vec![
                (vec![None, Some("false"), Some("<256")], 6),
                (vec![None, Some("false"), None], 1),
            ]
        );
    }
}
