//! PostgreSQL migrations: versioned, each applied once, all pending ones in one transaction that
//! first takes a transaction-level advisory lock, so that instances starting at once on an
//! empty database queue behind the first and find the work done. The applied versions are rows
//! of `laptime_schema`; a database whose newest version is past this build's is refused with
//! [`StoreError::SchemaTooNew`].
//!
//! The lock key is derived from the schema in use, so that databases (or schemas) of separate
//! fleets on one server never wait for each other.

use deadpool_postgres::{ClientWrapper, Transaction};

use crate::{Result, StoreError};

/// One migration: its SQL, the Rust step it runs right after that SQL (in order with the other
/// migrations' SQL), then what Rust code it runs after every pending migration's SQL (so that
/// the code reads and writes today's tables).
struct Migration {
    sql: &'static str,
    step: Option<Step>,
    after: Option<After>,
}

/// The Rust steps a migration takes in order with the SQL.
#[derive(Clone, Copy)]
enum Step {
    /// v13: request ids as bytes, workspaces as codes, outcomes and classifications as numbers.
    LeanRequests,
}

impl Step {
    async fn run(self, tx: &Transaction<'_>) -> Result<()> {
        match self {
            Step::LeanRequests => lean_requests(tx).await,
        }
    }
}

/// The Rust steps a migration can take.
#[derive(Clone, Copy)]
enum After {
    /// Build the hour tier of the rollups from the minute tier.
    BackfillHourRollups,
}

impl After {
    async fn run(self, tx: &Transaction<'_>) -> Result<()> {
        match self {
            After::BackfillHourRollups => super::rollups::backfill_hours(tx).await,
        }
    }
}

const fn sql(sql: &'static str) -> Migration {
    Migration {
        sql,
        step: None,
        after: None,
    }
}

/// Each migration, in order; version N is `MIGRATIONS[N - 1]`.
const MIGRATIONS: &[Migration] = &[
    sql(V1),
    sql(V2),
    sql(V3),
    sql(V4),
    sql(V5),
    sql(V6),
    Migration {
        sql: V7,
        step: None,
        after: Some(After::BackfillHourRollups),
    },
    sql(V8),
    sql(V9),
    sql(V10),
    sql(V11),
    sql(V12),
    Migration {
        sql: V13,
        step: Some(Step::LeanRequests),
        after: None,
    },
    sql(V14),
    sql(V15),
    sql(V16),
];

/// The schema version this build writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Workspaces and tokens as in SQLite. Requests are partitioned by day of `created_at_us`
/// (partitions are made by the writer as days arrive, see [`super::records`]), with their
/// attempts inline as a compact JSON array: they are only ever read with their request, and a
/// second table would cost an index as large as the rows. `seq` orders requests that share a
/// microsecond newest-first, as SQLite's rowid does. Rollups are keyed as in SQLite and shared
/// by every instance.
const V1: &str = r#"
    CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at_us BIGINT NOT NULL,
        grp TEXT
    );
    CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        hash BYTEA NOT NULL UNIQUE,
        scope TEXT NOT NULL,
        created_at_us BIGINT NOT NULL,
        revoked_at_us BIGINT,
        grp TEXT
    );
    CREATE SEQUENCE requests_seq;
    CREATE TABLE requests (
        request_id TEXT NOT NULL,
        created_at_us BIGINT NOT NULL,
        seq BIGINT NOT NULL DEFAULT nextval('requests_seq'),
        workspace_id TEXT,
        key_id TEXT,
        model TEXT,
        provider TEXT,
        channel TEXT,
        grp TEXT,
        dialect TEXT NOT NULL,
        upstream_dialect TEXT,
        stream BOOLEAN NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        timeout_kind TEXT,
        error_class TEXT,
        classification TEXT NOT NULL,
        flags TEXT NOT NULL,
        auth_us BIGINT,
        body_read_us BIGINT,
        distribution_us BIGINT,
        upstream_start_us BIGINT,
        upstream_headers_us BIGINT,
        first_byte_us BIGINT,
        first_event_us BIGINT,
        first_effective_us BIGINT,
        first_visible_us BIGINT,
        last_effective_us BIGINT,
        upstream_done_us BIGINT,
        handler_done_us BIGINT,
        input_tokens BIGINT,
        output_tokens BIGINT,
        cache_read_tokens BIGINT,
        cache_write_tokens BIGINT,
        reasoning_tokens BIGINT,
        event_count BIGINT NOT NULL,
        text_delta_count BIGINT NOT NULL,
        channel_inflight BIGINT,
        hedge TEXT NOT NULL,
        failover_count BIGINT NOT NULL,
        cached BOOLEAN NOT NULL,
        max_output_tokens BIGINT,
        reasoning_effort TEXT,
        tool_count BIGINT,
        tool_choice TEXT,
        response_format TEXT,
        temperature DOUBLE PRECISION,
        top_p DOUBLE PRECISION,
        region TEXT,
        trace_id TEXT,
        instance TEXT,
        attempts TEXT NOT NULL,
        PRIMARY KEY (request_id, created_at_us)
    ) PARTITION BY RANGE (created_at_us);
    CREATE INDEX requests_workspace_created ON requests (workspace_id, created_at_us, seq);
    CREATE TABLE rollups (
        workspace_id TEXT NOT NULL,
        minute_us BIGINT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream BOOLEAN NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification)
    );
    CREATE INDEX rollups_minute ON rollups (minute_us);
"#;

/// The advisory lock key of migrations in the current schema.
/// Cost, one-hour cache writes, the admission phase and the limit that refused (added to the
/// partitioned parent, so to every day); the limits, budgets and spend of workspaces and tokens,
/// as in SQLite.
const V2: &str = r#"
    ALTER TABLE requests ADD COLUMN cache_write_1h_tokens BIGINT;
    ALTER TABLE requests ADD COLUMN cost_nano_usd BIGINT;
    ALTER TABLE requests ADD COLUMN cost_estimated BOOLEAN;
    ALTER TABLE requests ADD COLUMN admission_us BIGINT;
    ALTER TABLE requests ADD COLUMN refused_by TEXT;
    CREATE TABLE limits (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL DEFAULT '',
        rpm BIGINT,
        tpm BIGINT,
        concurrent BIGINT,
        updated_at_us BIGINT NOT NULL,
        PRIMARY KEY (workspace_id, key_id)
    );
    CREATE TABLE budgets (
        workspace_id TEXT NOT NULL REFERENCES workspaces(id),
        key_id TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        nano_usd BIGINT NOT NULL,
        mode TEXT NOT NULL,
        updated_at_us BIGINT NOT NULL,
        PRIMARY KEY (workspace_id, key_id, period)
    );
    CREATE TABLE spend (
        workspace_id TEXT NOT NULL,
        key_id TEXT NOT NULL DEFAULT '',
        period TEXT NOT NULL,
        period_start_us BIGINT NOT NULL,
        nano_usd BIGINT NOT NULL,
        PRIMARY KEY (workspace_id, key_id, period, period_start_us)
    );
"#;

/// The endpoint a request called (older rows: the model endpoints), its bytes in and out and
/// the channel key index; the endpoint as a rollup dimension; and `affinity`, the channel (and
/// key) that holds each provider object a workspace created, as in SQLite.
const V3: &str = r#"
    ALTER TABLE requests ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'generation';
    ALTER TABLE requests ADD COLUMN bytes_in BIGINT;
    ALTER TABLE requests ADD COLUMN bytes_out BIGINT;
    ALTER TABLE requests ADD COLUMN key_index INTEGER;
    ALTER TABLE rollups ADD COLUMN endpoint TEXT NOT NULL DEFAULT 'generation';
    ALTER TABLE rollups DROP CONSTRAINT rollups_pkey;
    ALTER TABLE rollups ADD PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp,
        dialect, stream, status, outcome, classification, endpoint);
    CREATE TABLE affinity (
        workspace_id TEXT NOT NULL,
        object_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        channel TEXT NOT NULL,
        key_index INTEGER,
        created_at_us BIGINT NOT NULL,
        PRIMARY KEY (workspace_id, object_id)
    );
    CREATE INDEX affinity_created ON affinity (created_at_us);
"#;

/// The comparison dimensions as rollup dimensions, and output tokens the gateway estimated, as
/// in SQLite's v8 (older rollups hold `''` for the new dimensions: absent).
const V4: &str = r#"
    ALTER TABLE requests ADD COLUMN estimated_output_tokens BIGINT;
    ALTER TABLE rollups ADD COLUMN effort TEXT NOT NULL DEFAULT '';
    ALTER TABLE rollups ADD COLUMN tools TEXT NOT NULL DEFAULT '';
    ALTER TABLE rollups ADD COLUMN max_output_bucket TEXT NOT NULL DEFAULT '';
    ALTER TABLE rollups ADD COLUMN input_bucket TEXT NOT NULL DEFAULT '';
    ALTER TABLE rollups ADD COLUMN region TEXT NOT NULL DEFAULT '';
    ALTER TABLE rollups DROP CONSTRAINT rollups_pkey;
    ALTER TABLE rollups ADD PRIMARY KEY (workspace_id, minute_us, model, provider, channel, grp,
        dialect, stream, status, outcome, classification, endpoint, effort, tools,
        max_output_bucket, input_bucket, region);
"#;

/// Each gateway instance's heartbeat, as in SQLite's v9.
const V5: &str = r#"
    CREATE TABLE instances (
        instance TEXT PRIMARY KEY,
        in_flight BIGINT NOT NULL,
        channels TEXT NOT NULL,
        updated_at_us BIGINT NOT NULL
    );
"#;

/// The carrier of the timing the client got, noted when it was sent, as in SQLite's v10 (older
/// rows: NULL, read by derivation). Attempts' span ids live in the `attempts` JSON, which
/// needs no column.
const V6: &str = r#"
    ALTER TABLE requests ADD COLUMN in_band TEXT;
"#;

/// The hour tier of the rollups, as in SQLite's v11: keyed as the minute tier with the hour's
/// start, each row the merge of its key's minute rows (built from them by the Rust step).
const V7: &str = r#"
    CREATE TABLE rollups_hourly (
        workspace_id TEXT NOT NULL,
        hour_us BIGINT NOT NULL,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream BOOLEAN NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        effort TEXT NOT NULL,
        tools TEXT NOT NULL,
        max_output_bucket TEXT NOT NULL,
        input_bucket TEXT NOT NULL,
        region TEXT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (workspace_id, hour_us, model, provider, channel, grp, dialect, stream,
            status, outcome, classification, endpoint, effort, tools, max_output_bucket,
            input_bucket, region)
    );
    CREATE INDEX rollups_hourly_hour ON rollups_hourly (hour_us);
"#;

/// Half of each new page of the hour tier left free. Every batch rewrites the hour rows it
/// touches; with room on their page those updates are HOT (no new index entries, and the page
/// prunes its dead versions itself when next read), so the tier stays near its live size
/// between vacuums. Measured with autovacuum off, 1 M requests: 78,652 of 86,713 hour-row
/// updates HOT (18,981 before), 8,296 dead versions left (79,389), the table 60 MB (85 MB).
/// The minute tier is not: its rows are rarely updated (7,000 of 400,000), and free room
/// there made it 25 % larger.
const V8: &str = r#"
    ALTER TABLE rollups_hourly SET (fillfactor = 50);
"#;

/// The fields of a request that no query filters, groups or sorts on, packed into one value
/// ([`crate::packed`]) instead of a column each: a request's row goes from about 540 to about
/// 250 bytes. Rows written before keep their columns and no packed value, and read as they
/// did; new rows leave those columns NULL (hence no longer `NOT NULL`), which costs a bit of
/// the row's null map each. Nothing is rewritten: retention drops the older rows with their
/// days.
const V9: &str = r#"
    ALTER TABLE requests ADD COLUMN IF NOT EXISTS packed BYTEA;
    ALTER TABLE requests ALTER COLUMN flags DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN event_count DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN text_delta_count DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN hedge DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN failover_count DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN cached DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN attempts DROP NOT NULL;
"#;

/// No table changes: from this version on, instances write rollups in the encoding's version 5
/// (a sketch's floats as whole microseconds, `laptime_core::rollup`), which older builds
/// cannot decode, so the version keeps them from starting on a store that may hold such rows.
const V10: &str = r#"
    COMMENT ON TABLE rollups IS 'data: laptime rollup encoding, version 5 since schema 10';
    COMMENT ON TABLE rollups_hourly IS 'data: laptime rollup encoding, version 5 since schema 10';
"#;

/// A request's names (model, provider, channel, group, dialect, endpoint, region) as one set
/// of `name_sets`, which a new row refers to instead of holding them ([`super::names`]). Older
/// rows keep their text; `name_set` is NULL there.
const V11: &str = r#"
    CREATE TABLE IF NOT EXISTS name_sets (
        id INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        s_model TEXT,
        s_provider TEXT,
        s_channel TEXT,
        s_grp TEXT,
        s_dialect TEXT,
        s_endpoint TEXT,
        s_region TEXT
    );
    ALTER TABLE requests ADD COLUMN IF NOT EXISTS name_set INTEGER;
    ALTER TABLE requests ALTER COLUMN dialect DROP NOT NULL;
    ALTER TABLE requests ALTER COLUMN endpoint DROP NOT NULL;
"#;

/// Each rollup row's fifteen dimensions as the id of one row of `rollup_keys`
/// ([`super::rollups::KeyIds`]): a row's place is (workspace, start, key id), in the table and
/// in its primary key, where the text of the fifteen was most of both. Both tiers are rebuilt
/// here, with their indexes, storage setting and comment; their rows are bounded by minutes
/// and keys, not by requests.
const V12: &str = r#"
    CREATE TABLE rollup_keys (
        id INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        model TEXT NOT NULL,
        provider TEXT NOT NULL,
        channel TEXT NOT NULL,
        grp TEXT NOT NULL,
        dialect TEXT NOT NULL,
        stream BOOLEAN NOT NULL,
        status INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        classification TEXT NOT NULL,
        endpoint TEXT NOT NULL,
        effort TEXT NOT NULL,
        tools TEXT NOT NULL,
        max_output_bucket TEXT NOT NULL,
        input_bucket TEXT NOT NULL,
        region TEXT NOT NULL,
        UNIQUE (model, provider, channel, grp, dialect, stream, status, outcome,
            classification, endpoint, effort, tools, max_output_bucket, input_bucket, region)
    );
    INSERT INTO rollup_keys (model, provider, channel, grp, dialect, stream, status, outcome,
            classification, endpoint, effort, tools, max_output_bucket, input_bucket, region)
        SELECT model, provider, channel, grp, dialect, stream, status, outcome, classification,
            endpoint, effort, tools, max_output_bucket, input_bucket, region FROM rollups
        UNION SELECT model, provider, channel, grp, dialect, stream, status, outcome,
            classification, endpoint, effort, tools, max_output_bucket, input_bucket, region
            FROM rollups_hourly ORDER BY 1, 2, 3;
    CREATE TABLE rollups_by_key (
        workspace_id TEXT NOT NULL,
        minute_us BIGINT NOT NULL,
        key_id INTEGER NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (workspace_id, minute_us, key_id)
    );
    INSERT INTO rollups_by_key
        SELECT r.workspace_id, r.minute_us, k.id, r.data FROM rollups r JOIN rollup_keys k
        USING (model, provider, channel, grp, dialect, stream, status, outcome,
            classification, endpoint, effort, tools, max_output_bucket, input_bucket, region);
    DROP TABLE rollups;
    ALTER TABLE rollups_by_key RENAME TO rollups;
    ALTER INDEX rollups_by_key_pkey RENAME TO rollups_pkey;
    CREATE INDEX rollups_minute ON rollups (minute_us);
    CREATE TABLE rollups_hourly_by_key (
        workspace_id TEXT NOT NULL,
        hour_us BIGINT NOT NULL,
        key_id INTEGER NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (workspace_id, hour_us, key_id)
    ) WITH (fillfactor = 50);
    INSERT INTO rollups_hourly_by_key
        SELECT r.workspace_id, r.hour_us, k.id, r.data FROM rollups_hourly r JOIN rollup_keys k
        USING (model, provider, channel, grp, dialect, stream, status, outcome,
            classification, endpoint, effort, tools, max_output_bucket, input_bucket, region);
    DROP TABLE rollups_hourly;
    ALTER TABLE rollups_hourly_by_key RENAME TO rollups_hourly;
    ALTER INDEX rollups_hourly_by_key_pkey RENAME TO rollups_hourly_pkey;
    CREATE INDEX rollups_hourly_hour ON rollups_hourly (hour_us);
    COMMENT ON TABLE rollups IS 'data: laptime rollup encoding, version 5 since schema 10';
    COMMENT ON TABLE rollups_hourly IS 'data: laptime rollup encoding, version 5 since schema 10';
"#;

/// Every request row leaner (with the ids the gateway makes, 284 → 210 bytes a request, its
/// primary key and workspace index 18 bytes each), older rows rewritten by [`lean_requests`]:
/// - the id as bytes ([`crate::stored_id::pg_key`]): 17 bytes for an id the gateway made,
///   instead of 36;
/// - the workspace as a code of `names` ([`super::names`]), 4 bytes instead of about 20;
/// - the outcome and classification as the numbers of [`crate::closed`];
/// - the key id and instance as codes in `key_code` and `instance_code`, out of the packed
///   value. Older rows keep them in their packed value (or pre-v9 columns), where moving them
///   would need every packed value decoded; a reader takes either.
const V13: &str = r#"
    CREATE TABLE IF NOT EXISTS names (
        id INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        value TEXT NOT NULL UNIQUE
    );
    ALTER TABLE requests ADD COLUMN IF NOT EXISTS key_code INTEGER,
        ADD COLUMN IF NOT EXISTS instance_code INTEGER;
"#;

/// Hours folded into the hour tier once, when they close ([`super::rollups::fold_closed_hours`]),
/// instead of every batch rewriting the hour rows it touches: `folded_before_us` is the hour
/// before which the hour tier is whole (kept by the batches of late records), from which on
/// readers take the minute tier. Every hour before the server's current one is whole, so the
/// mark starts there; the current hour's rows are left to its fold, which writes them anew (a
/// store taken back to an older version and migrated again keeps its mark). The hour tier
/// keeps v8's room for rewrites: records written long after their hour (an import, a recorder
/// catching up) still rewrite its rows.
///
/// The minute tier's new pages keep 15 % free: in real time a minute row is rewritten by every
/// batch of its minute, and with room on its page the rewrite is HOT (no index entry, the old
/// version pruned in place). `usage_load --rate 1000`, 120 s, autovacuum off: the minute tier
/// 128 B per request with full pages, 68 B with 15 % free (70 % full: 50 B; 96 % of its
/// updates HOT). Loads spread over a day, each minute written by about one batch, pay for the
/// room: at 1 M requests 110 B, 129 B and 156 B.
const V14: &str = r#"
    CREATE TABLE IF NOT EXISTS hour_folds (
        only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
        folded_before_us BIGINT NOT NULL
    );
    INSERT INTO hour_folds (folded_before_us)
        SELECT floor(extract(epoch FROM now()) / 3600)::int8 * 3600000000
        WHERE NOT EXISTS (SELECT 1 FROM hour_folds);
    ALTER TABLE rollups SET (fillfactor = 85);
"#;

/// The auth epoch, as SQLite's v20: one row that a statement trigger on tokens, workspaces and
/// limits moves with every change, whichever instance or tool makes it. The function keeps the
/// schema it was made in, so a change made with another `search_path` moves this schema's row.
/// A row, not a sequence: a sequence moves before the change commits, and a gateway that read
/// it then and looked a token up before the commit would keep the old principal with nothing
/// left to move; the row's new number is seen with the change, at its commit.
const V15: &str = r#"
    CREATE TABLE IF NOT EXISTS auth_epoch (
        only_row BOOLEAN PRIMARY KEY DEFAULT true CHECK (only_row),
        n BIGINT NOT NULL
    );
    INSERT INTO auth_epoch (n) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM auth_epoch);
    CREATE OR REPLACE FUNCTION auth_epoch_moves() RETURNS trigger LANGUAGE plpgsql
        SET search_path FROM CURRENT
        AS $$ BEGIN UPDATE auth_epoch SET n = n + 1; RETURN NULL; END $$;
    DROP TRIGGER IF EXISTS tokens_auth_epoch ON tokens;
    CREATE TRIGGER tokens_auth_epoch AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON tokens
        FOR EACH STATEMENT EXECUTE FUNCTION auth_epoch_moves();
    DROP TRIGGER IF EXISTS workspaces_auth_epoch ON workspaces;
    CREATE TRIGGER workspaces_auth_epoch AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE
        ON workspaces FOR EACH STATEMENT EXECUTE FUNCTION auth_epoch_moves();
    DROP TRIGGER IF EXISTS limits_auth_epoch ON limits;
    CREATE TRIGGER limits_auth_epoch AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON limits
        FOR EACH STATEMENT EXECUTE FUNCTION auth_epoch_moves();
"#;

/// Finished days of the request log as blocks ([`super::blocks`]): a row per 512 requests of a
/// workspace, each column of a request row as an array (but the workspace, the block's own),
/// with `seq`, and the first and last request's order to find a block by. Not partitioned: a
/// day is a few hundred blocks to a few thousand, which retention deletes as cheaply as it
/// would drop them. The primary key serves the log's reads (a workspace's blocks newest
/// first), `last_us` the writers' and retention's (the blocks that reach a time).
const V16: &str = r#"
    CREATE TABLE IF NOT EXISTS request_blocks (
        workspace_id INTEGER NOT NULL,
        first_us BIGINT NOT NULL,
        first_seq BIGINT NOT NULL,
        last_us BIGINT NOT NULL,
        n INTEGER NOT NULL,
        request_id BYTEA[] NOT NULL,
        created_at_us BIGINT[] NOT NULL,
        model TEXT[] NOT NULL,
        provider TEXT[] NOT NULL,
        channel TEXT[] NOT NULL,
        grp TEXT[] NOT NULL,
        dialect TEXT[] NOT NULL,
        stream BOOLEAN[] NOT NULL,
        status INTEGER[] NOT NULL,
        outcome SMALLINT[] NOT NULL,
        classification SMALLINT[] NOT NULL,
        endpoint TEXT[] NOT NULL,
        input_tokens BIGINT[] NOT NULL,
        max_output_tokens BIGINT[] NOT NULL,
        reasoning_effort TEXT[] NOT NULL,
        tool_count BIGINT[] NOT NULL,
        region TEXT[] NOT NULL,
        packed BYTEA[] NOT NULL,
        name_set INTEGER[] NOT NULL,
        key_code INTEGER[] NOT NULL,
        instance_code INTEGER[] NOT NULL,
        seq BIGINT[] NOT NULL,
        PRIMARY KEY (workspace_id, first_us, first_seq)
    );
    CREATE INDEX IF NOT EXISTS request_blocks_last ON request_blocks (last_us);
"#;

/// The SQL that rewrites every request row into v13's forms: one `ALTER TABLE`, so one rewrite
/// of each partition and one rebuild of each index. The numbers come from [`crate::closed`], so
/// that they are the ones new rows get. A column is changed only while it holds text: a test
/// that takes versions back and migrates again finds them changed (empty SQL). The table is
/// analyzed after.
async fn lean_requests(tx: &Transaction<'_>) -> Result<()> {
    let text: Vec<String> = tx
        .query(
            "SELECT column_name::text FROM information_schema.columns
             WHERE table_schema = current_schema() AND table_name = 'requests'
               AND data_type = 'text'",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<std::result::Result<_, _>>()?;
    let text = |col: &str| text.iter().any(|t| t == col);
    let mut changes = Vec::new();
    let mut sql = String::new();
    if text("request_id") {
        sql.push_str(
            r"CREATE OR REPLACE FUNCTION pg_temp.laptime_id(t text) RETURNS bytea
                LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN t ~ '^req_[0-9a-f]{32}$'
                    THEN '\x00'::bytea || decode(substr(t, 5), 'hex')
                    ELSE convert_to(t, 'UTF8') END $$;",
        );
        changes.push(
            "ALTER COLUMN request_id TYPE bytea USING pg_temp.laptime_id(request_id)".to_string(),
        );
    }
    if text("workspace_id") {
        sql.push_str(
            "INSERT INTO names (value) SELECT DISTINCT workspace_id FROM requests
                WHERE workspace_id IS NOT NULL ORDER BY 1 ON CONFLICT (value) DO NOTHING;
             CREATE OR REPLACE FUNCTION pg_temp.laptime_code(t text) RETURNS integer
                LANGUAGE sql STABLE AS $$ SELECT id FROM names WHERE value = t $$;",
        );
        changes.push(
            "ALTER COLUMN workspace_id TYPE integer USING pg_temp.laptime_code(workspace_id)"
                .to_string(),
        );
    }
    if text("outcome") {
        let pairs = laptime_core::timeline::Outcome::ALL
            .into_iter()
            .map(|o| (o.as_str(), crate::closed::outcome_code(o)));
        changes.push(to_number("outcome", pairs));
    }
    if text("classification") {
        let pairs = crate::closed::all_classifications()
            .map(|c| (c.as_str(), crate::closed::classification_code(c)));
        changes.push(to_number("classification", pairs));
    }
    if changes.is_empty() {
        return Ok(());
    }
    // The rewrite drops the changed columns' statistics; without them (autovacuum off, or not
    // yet come), filtered log reads planned a scan: 1.3 s instead of 20 ms at 1 M.
    sql.push_str(&format!(
        "ALTER TABLE requests {}; ANALYZE requests;",
        changes.join(", ")
    ));
    tx.batch_execute(&sql).await?;
    Ok(())
}

/// The change of column `col` from the names of a closed set to their numbers.
fn to_number<'a>(col: &str, pairs: impl Iterator<Item = (&'a str, i64)>) -> String {
    let arms: Vec<String> = pairs
        .map(|(name, n)| format!("WHEN '{name}' THEN {n}"))
        .collect();
    format!(
        "ALTER COLUMN {col} TYPE smallint USING CASE {col} {} END",
        arms.join(" ")
    )
}

const LOCK: &str = "SELECT pg_advisory_xact_lock(hashtext('laptime migrate ' || current_schema()))";

/// The newest applied version (0 for an empty database).
pub async fn applied(client: &impl deadpool_postgres::GenericClient) -> Result<i64> {
    let exists: bool = client
        .query_one("SELECT to_regclass('laptime_schema') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let row = client
        .query_one("SELECT COALESCE(max(version), 0) FROM laptime_schema", &[])
        .await?;
    Ok(row.get(0))
}

/// Applies every pending migration; returns the versions applied (empty when none was due).
pub async fn migrate(client: &mut ClientWrapper) -> Result<Vec<i64>> {
    migrate_to(client, VERSION).await
}

pub(crate) async fn migrate_to(client: &mut ClientWrapper, target: i64) -> Result<Vec<i64>> {
    let tx = client.transaction().await?;
    tx.batch_execute(LOCK).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS laptime_schema (
            version BIGINT PRIMARY KEY,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
        )",
    )
    .await?;
    let current: i64 = tx
        .query_one("SELECT COALESCE(max(version), 0) FROM laptime_schema", &[])
        .await?
        .get(0);
    if current > VERSION {
        tx.rollback().await?;
        return Err(StoreError::SchemaTooNew {
            found: current,
            known: VERSION,
        });
    }
    let mut done = Vec::new();
    let mut after = Vec::new();
    for version in current + 1..=target.min(VERSION) {
        let Some(m) = usize::try_from(version - 1)
            .ok()
            .and_then(|i| MIGRATIONS.get(i))
        else {
            break;
        };
        tx.batch_execute(m.sql).await?;
        if let Some(step) = m.step {
            step.run(&tx).await?;
        }
        tx.execute(
            "INSERT INTO laptime_schema (version) VALUES ($1)",
            &[&version],
        )
        .await?;
        after.extend(m.after);
        done.push(version);
    }
    for step in after {
        step.run(&tx).await?;
    }
    tx.commit().await?;
    if !done.is_empty() {
        tracing::info!(versions = ?done, "store migrated");
    }
    Ok(done)
}
