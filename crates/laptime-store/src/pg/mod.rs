//! The store on a shared PostgreSQL server: what a fleet of gateways uses instead of the
//! embedded SQLite file. Same interface ([`crate::Store`]), same meanings, same answers: the
//! conformance suite (`tests/conformance.rs`) runs every test against both backends.
//!
//! - [`schema`]: versioned migrations under an advisory lock (instances starting at once apply
//!   them once); a schema newer than this build is refused.
//! - [`records`]: request rows in daily partitions (retention drops whole partitions), written
//!   with their rollups in one transaction per batch (a binary `COPY` of the rows, see `copy`);
//!   reads.
//! - [`rollups`]: the shared rollups, per minute and per hour, folded into by every batch.
//! - [`usage`]: the usage API's reads from the shared rollups (whole hours from the hour tier).
//! - [`auth`]: workspaces and hashed tokens.
//! - [`blocks`]: finished days' requests as blocks of 512 per workspace, read with the rows.
//! - [`compact`]: a finished day packed into blocks, once, its partition rewritten.
//!
//! Reads take a connection from a bounded pool (deadpool) and never wait longer than
//! [`POOL_WAIT`] for one; the recorder writes on its own connection (see
//! [`crate::recorder`]), so reads never queue behind a batch. A connection goes back to the
//! pool only when the operation it was lent for finished (see [`Pg::with`]).

pub mod affinity;
pub mod auth;
mod blocks;
pub mod budgets;
pub mod compact;
mod copy;
pub mod instances;
pub mod limits;
pub(crate) mod names;
pub mod records;
pub mod rollups;
pub mod schema;
pub mod usage;

use std::str::FromStr;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::{Config, NoTls};

use crate::{Result, StoreError};

/// Connections the read pool holds at most.
const POOL_SIZE: usize = 16;

/// How long a read waits for a pooled connection (or for a new one to connect).
pub const POOL_WAIT: Duration = Duration::from_secs(5);

/// The connection to a PostgreSQL store: its read pool and how to open more connections.
pub struct Pg {
    pool: Pool,
    config: Config,
    /// The partitions this pool's writes (a journal replay, a test's batch) made; the
    /// recorder's writer keeps its own.
    partitions: tokio::sync::Mutex<records::Partitions>,
}

impl std::fmt::Debug for Pg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.location())
    }
}

impl Pg {
    /// Parses `url` (a `postgres://` URL or a key=value string), connects, and migrates.
    pub async fn connect(url: &str) -> Result<Pg> {
        let config = Config::from_str(url)?;
        let pool = pool(&config, POOL_SIZE)?;
        let mut migrator = pooled(&pool).await?;
        schema::migrate(&mut migrator).await?;
        drop(migrator);
        Ok(Pg {
            pool,
            config,
            partitions: tokio::sync::Mutex::new(records::Partitions::default()),
        })
    }

    /// The server, port and database, for an operator (never the password).
    pub fn location(&self) -> String {
        location(&self.config)
    }

    /// A pooled connection, returned to the pool when dropped whatever it is doing: for
    /// this module's tests. Everything else goes through [`Pg::with`].
    async fn client(&self) -> Result<Object> {
        pooled(&self.pool).await
    }

    /// Runs `op` on a pooled connection, which goes back to the pool when `op` has finished.
    /// If the future is dropped before (its caller timed out or went away), the connection may
    /// still be running a statement on the server: back in the pool, it would make the next
    /// caller wait behind that statement (behind a lock, for as long as it is held). So it is
    /// taken out of the pool, its statement cancelled, and closed (see [`Lease`]).
    pub(crate) async fn with<T>(
        &self,
        op: impl AsyncFnOnce(&mut Object) -> Result<T>,
    ) -> Result<T> {
        let mut lease = Lease(None);
        let out = op(lease.0.insert(self.client().await?)).await;
        // Finished: back to the pool.
        lease.0 = None;
        out
    }

    /// A pool of one connection, for the recorder's writer: made on its own runtime when
    /// first used.
    pub(crate) fn writer_pool(&self) -> Result<Pool> {
        pool(&self.config, 1)
    }

    /// Writes a batch as the recorder does (see [`records::insert_batch`]).
    pub(crate) async fn insert_batch(
        &self,
        batch: &[laptime_core::timeline::RequestRecord],
        zone: &laptime_core::limit::Zone,
    ) -> Result<()> {
        let mut known = self.partitions.lock().await;
        self.with(async |c| records::insert_batch(c, &mut known, batch, zone).await)
            .await
    }

    /// See [`records::insert_absent`].
    pub(crate) async fn insert_absent(
        &self,
        batch: &[laptime_core::timeline::RequestRecord],
        zone: &laptime_core::limit::Zone,
    ) -> Result<Vec<String>> {
        let mut known = self.partitions.lock().await;
        self.with(async |c| records::insert_absent(c, &mut known, batch, zone).await)
            .await
    }

    /// Retention (see [`records::delete_older_than`]); the partitions dropped are forgotten.
    pub(crate) async fn delete_older_than(&self, cutoff_us: i64, batch: usize) -> Result<usize> {
        self.with(async |c| {
            let n = records::delete_older_than(c, cutoff_us, batch).await?;
            self.partitions.lock().await.forget();
            affinity::delete_older_than(c, cutoff_us).await?;
            Ok(n)
        })
        .await
    }

    /// See [`compact::pack_one_finished_day`].
    pub(crate) async fn pack_one_finished_day(
        &self,
        now_us: i64,
    ) -> Result<Option<compact::Packed>> {
        self.with(async |c| compact::pack_one_finished_day(c, now_us, compact::PASS_LIMIT).await)
            .await
    }
}

/// A connection lent by [`Pg::with`]: still held when dropped means its operation did not
/// finish, so the connection leaves the pool for good and the statement it may be running is
/// cancelled (a cancel request on a connection of its own, as PostgreSQL's protocol has it).
/// Closing alone would not stop the statement: the server notices a closed client only when
/// the statement next writes to it.
struct Lease(Option<Object>);

impl Drop for Lease {
    fn drop(&mut self) {
        let Some(object) = self.0.take() else {
            return;
        };
        let client = Object::take(object);
        let cancel = client.cancel_token();
        drop(client);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = cancel.cancel_query(NoTls).await {
                    tracing::debug!(error = %e, "cancelling an abandoned statement");
                }
            });
        }
    }
}

/// A pool of at most `size` connections to `config`, connecting when first asked.
fn pool(config: &Config, size: usize) -> Result<Pool> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            // A connection the server closed (a restart) is noticed by its task ending; no
            // round trip per checkout.
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(POOL_WAIT))
        .create_timeout(Some(POOL_WAIT))
        .recycle_timeout(Some(POOL_WAIT))
        .build()
        .map_err(|e| StoreError::PoolTimeout(e.to_string()))
}

/// A connection from `pool`.
pub(crate) async fn pooled(pool: &Pool) -> Result<Object> {
    pool.get().await.map_err(|e| match e {
        deadpool_postgres::PoolError::Backend(e) => StoreError::Postgres(e),
        other => StoreError::PoolTimeout(other.to_string()),
    })
}

/// Opens one connection on the current runtime; its I/O runs as a task of that runtime and
/// ends when the client is dropped or the server closes it. Only the test schemas use it (the
/// stores go through their pools).
#[cfg(any(test, feature = "test-support"))]
pub(crate) async fn connect(config: &Config) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio::time::timeout(POOL_WAIT, config.connect(NoTls))
        .await
        .map_err(|_| StoreError::PoolTimeout(format!("connecting to {}", location(config))))??;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection ended");
        }
    });
    Ok(client)
}

fn location(config: &Config) -> String {
    let host = config
        .get_hosts()
        .first()
        .map(|h| match h {
            tokio_postgres::config::Host::Tcp(name) => name.clone(),
            tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .unwrap_or_else(|| "localhost".into());
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("(default database)");
    format!("postgres://{host}:{port}/{db}")
}

/// Whether `url` can name a PostgreSQL store: a `postgres://` or `postgresql://` URL that
/// parses; why not otherwise.
pub fn check_url(url: &str) -> std::result::Result<(), String> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err("must be a postgres:// or postgresql:// URL".into());
    }
    Config::from_str(url)
        .map(|_| ())
        .map_err(|e| format!("{}: {e}", redacted(url)))
}

/// `url` with its password (if any) replaced by `***`, for logs, errors and `check-config`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows_and_a_bad_url_says_why() {
        assert_eq!(
            redacted("postgres://app:s3cret@db.internal:5432/laptime?sslmode=disable"),
            "postgres://app:***@db.internal:5432/laptime?sslmode=disable"
        );
        assert_eq!(
            redacted("postgres://app@db/laptime"),
            "postgres://app@db/laptime"
        );
        assert!(check_url("postgres://app:pw@127.0.0.1/laptime").is_ok());
        assert!(check_url("mysql://x").is_err());
        let bad = check_url("postgres://app:pw@127.0.0.1:notaport/db").unwrap_err();
        assert!(!bad.contains("pw@"), "{bad}");
    }

    /// A read dropped while its statement waits (here on a lock another session holds) does
    /// not go back to the pool: the next read is answered at once, not behind it, and the
    /// abandoned statement is cancelled on the server rather than left waiting.
    #[tokio::test]
    async fn a_read_dropped_mid_statement_neither_delays_the_next_nor_keeps_running() {
        let schema = crate::testing::PgSchema::create().await.unwrap();
        let pg = Pg::connect(schema.url()).await.unwrap();
        let locker = connect(&Config::from_str(schema.url()).unwrap())
            .await
            .unwrap();
        locker
            .batch_execute("BEGIN; LOCK TABLE auth_epoch IN ACCESS EXCLUSIVE MODE")
            .await
            .unwrap();
        let locker_pid: i32 = locker
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let blocked = "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))";

        let read = pg.with(async |c| auth::epoch(c).await);
        let abandoned = tokio::time::timeout(Duration::from_millis(300), read).await;
        assert!(
            abandoned.is_err(),
            "the read waits on the lock until dropped"
        );

        // The pool's one connection was the abandoned read's: given back, this would wait
        // behind the lock.
        let next = pg.with(async |c| Ok(c.query_one("SELECT 41 + 1", &[]).await?.get::<_, i32>(0)));
        let answered = tokio::time::timeout(Duration::from_secs(5), next).await;
        assert_eq!(answered.expect("answered, not queued").unwrap(), 42);

        let since = tokio::time::Instant::now();
        loop {
            let waiting: i64 = locker
                .query_one(blocked, &[&locker_pid])
                .await
                .unwrap()
                .get(0);
            if waiting == 0 {
                break;
            }
            assert!(
                since.elapsed() < Duration::from_secs(5),
                "the abandoned statement still waits on the lock"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        locker.batch_execute("COMMIT").await.unwrap();
    }
}
