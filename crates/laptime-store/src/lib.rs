//! laptime's store: where records, workspaces and tokens live.
//!
//! - [`schema`]: versioned migrations (SQLite, WAL).
//! - [`records`]: writing and reading request records with their attempts; retention.
//! - [`rollups`]: per-minute rollups (counts, tokens, percentile sketches) kept beside the rows,
//!   and their per-hour merges, written in the same transaction.
//! - [`usage`]: the usage API's reads: a window's rollup (whole hours from the hour tier),
//!   grouped and filtered, and its newest requests; [`guide`]: a filtered log read finds its
//!   rows through the minutes whose rollups match.
//! - [`auth`]: workspaces and hashed bearer tokens; [`manage`]: listing and revoking them.
//! - [`affinity`]: which channel holds each provider object (file, batch, stored response) a
//!   workspace created.
//! - [`instances`]: each gateway instance's heartbeat (its requests in flight), for a fleet
//!   without Redis.
//! - [`recorder`]: the bounded queue and batching writer that the request path hands records to
//!   without ever waiting on the store.
//! - [`Store`]: opens the database; [`access`]: everything the gateway, the API and the CLI
//!   read and write, as `Store` methods (async ones on the blocking pool), so no SQL and no
//!   connection leaves this crate.
//!
//! - [`pg`]: the same store on a shared PostgreSQL server, for a fleet of gateways
//!   (`[store] url = "postgres://…"`): one [`Store`] interface, two backends, and one
//!   conformance suite (`tests/conformance.rs`) run against both.
//!
//! The SQLite module functions take a `rusqlite::Connection`, which only this crate can get: the
//! connection itself ([`Store::with_conn`], [`Store::connect`]) is public only with the
//! `test-support` feature, which tests and benchmarks enable as a dev-dependency.

pub mod access;
pub mod affinity;
mod attempts;
pub mod auth;
pub mod budgets;
mod closed;
mod guide;
pub mod instances;
pub mod limits;
pub mod manage;
mod names;
mod packed;
pub mod pg;
pub mod recorder;
pub mod records;
pub mod rollups;
pub mod schema;
pub mod stored_id;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod usage;
mod wide;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

#[cfg(any(test, feature = "test-support"))]
pub use rusqlite::Connection;
#[cfg(not(any(test, feature = "test-support")))]
use rusqlite::Connection;

/// A store error: always the gateway's own fault (the store is the gateway's), never retryable
/// by a client.
#[derive(Debug)]
pub enum StoreError {
    Sqlite(rusqlite::Error),
    Postgres(tokio_postgres::Error),
    /// No PostgreSQL connection could be had from the pool in time.
    PoolTimeout(String),
    /// The database holds a schema newer than this build knows: a newer laptime migrated it.
    SchemaTooNew {
        found: i64,
        known: i64,
    },
    Io(std::io::Error),
    /// A value in the database that this version cannot read.
    Corrupt(String),
    /// A name or id that does not exist.
    NotFound(String),
    /// A name that exists already.
    Conflict(String),
    /// The blocking task running a store call did not finish (panicked or was cancelled).
    Unavailable(String),
}

/// A stored value this build cannot read, in either store.
pub(crate) fn corrupt(what: &str, v: &str) -> StoreError {
    StoreError::Corrupt(format!("{what}: {v}"))
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "database error: {e}"),
            StoreError::Postgres(e) => match e.as_db_error() {
                Some(db) => write!(f, "postgres error {}: {}", db.code().code(), db.message()),
                None => write!(f, "postgres error: {e}"),
            },
            StoreError::PoolTimeout(m) => write!(f, "no postgres connection: {m}"),
            StoreError::SchemaTooNew { found, known } => write!(
                f,
                "the store's schema is version {found}, newer than the {known} this laptime \
                 knows: a newer laptime migrated it; run that version (or newer)"
            ),
            StoreError::Io(e) => write!(f, "store I/O error: {e}"),
            StoreError::Corrupt(m) => write!(f, "unreadable stored value: {m}"),
            StoreError::NotFound(m) => write!(f, "not found: {m}"),
            StoreError::Conflict(m) => write!(f, "already exists: {m}"),
            StoreError::Unavailable(m) => write!(f, "store unavailable: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Sqlite(e)
    }
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        StoreError::Postgres(e)
    }
}

impl From<std::io::Error> for StoreError {
    fn from(e: std::io::Error) -> Self {
        StoreError::Io(e)
    }
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The store: the embedded SQLite file, or a PostgreSQL server shared by a fleet. Cheap to
/// clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// The zone whose calendar days and months the spend sums and budgets follow.
    budget_zone: laptime_core::limit::Zone,
}

#[derive(Clone)]
enum Backend {
    Sqlite(Arc<Inner>),
    Postgres(Arc<pg::Pg>),
}

/// Which backend a store is, for what differs between them in what an operator is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Sqlite,
    Postgres,
}

struct Inner {
    path: PathBuf,
    /// Idle read connections. The lock is held only to take or return one, never across a query.
    readers: Mutex<Vec<Connection>>,
    /// `PRAGMA max_page_count` for every connection opened from now on: a database that may
    /// not grow past this many pages answers `SQLITE_FULL` as a full disk does (tests).
    max_pages: std::sync::OnceLock<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.backend {
            Backend::Sqlite(inner) => f.debug_struct("Store").field("path", &inner.path).finish(),
            Backend::Postgres(pg) => f.debug_struct("Store").field("postgres", pg).finish(),
        }
    }
}

/// The database file name inside the data dir.
pub const DB_FILE: &str = "laptime.db";

impl Store {
    /// Opens (creating if needed) the store under `data_dir` and runs pending migrations.
    pub fn open_dir(data_dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(data_dir)?;
        Store::open(&data_dir.join(DB_FILE))
    }

    pub fn open(path: &Path) -> Result<Store> {
        let mut conn = open_connection(path)?;
        schema::migrate(&mut conn)?;
        Ok(Store {
            backend: Backend::Sqlite(Arc::new(Inner {
                path: path.to_path_buf(),
                readers: Mutex::new(vec![conn]),
                max_pages: std::sync::OnceLock::new(),
            })),
            budget_zone: laptime_core::limit::Zone::utc(),
        })
    }

    /// Connects to the PostgreSQL server at `url` and applies pending migrations (see
    /// [`pg::schema`]; safe when several instances start at once).
    pub async fn open_postgres(url: &str) -> Result<Store> {
        let pg = pg::Pg::connect(url).await?;
        Ok(Store {
            backend: Backend::Postgres(Arc::new(pg)),
            budget_zone: laptime_core::limit::Zone::utc(),
        })
    }

    /// The store with spend summed per calendar day and month of `zone` (`[budgets] zone`;
    /// UTC unless set). Every instance of a fleet must use the same zone: the sums are shared.
    pub fn with_budget_zone(mut self, zone: laptime_core::limit::Zone) -> Store {
        self.budget_zone = zone;
        self
    }

    /// The zone budget periods follow.
    pub fn budget_zone(&self) -> &laptime_core::limit::Zone {
        &self.budget_zone
    }

    pub fn kind(&self) -> BackendKind {
        match &self.backend {
            Backend::Sqlite(_) => BackendKind::Sqlite,
            Backend::Postgres(_) => BackendKind::Postgres,
        }
    }

    /// Where the store is, for an operator: the SQLite file's path, or the server and database
    /// (never a password).
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(inner) => inner.path.display().to_string(),
            Backend::Postgres(pg) => pg.location(),
        }
    }

    /// The SQLite file, for a SQLite store.
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sqlite(inner) => Some(&inner.path),
            Backend::Postgres(_) => None,
        }
    }

    pub(crate) fn postgres(&self) -> Option<&Arc<pg::Pg>> {
        match &self.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    fn sqlite(&self) -> Result<&Arc<Inner>> {
        match &self.backend {
            Backend::Sqlite(inner) => Ok(inner),
            Backend::Postgres(_) => Err(StoreError::Unavailable(
                "a SQLite connection was asked of a PostgreSQL store".into(),
            )),
        }
    }

    /// A new connection for a long-lived writer (tests and benchmarks; the recorder opens its
    /// own).
    #[cfg(any(test, feature = "test-support"))]
    pub fn connect(&self) -> Result<Connection> {
        self.open_connection()
    }

    pub(crate) fn open_connection(&self) -> Result<Connection> {
        let inner = self.sqlite()?;
        let conn = open_connection(&inner.path)?;
        if let Some(pages) = inner.max_pages.get() {
            conn.pragma_update(None, "max_page_count", pages)?;
        }
        Ok(conn)
    }

    /// Caps the database at its current size plus `spare_pages` for every connection opened
    /// after this call (the recorder's included), so writes past it fail with `SQLITE_FULL`
    /// exactly as on a full disk; rows deleted later free pages under the cap again. Returns
    /// the cap. Once per store. Tests only: a real full disk needs a real small filesystem.
    #[cfg(any(test, feature = "test-support"))]
    pub fn cap_pages(&self, spare_pages: u64) -> Result<u64> {
        let now: u64 = self.run(|c| Ok(c.query_row("PRAGMA page_count", [], |r| r.get(0))?))?;
        let cap = now + spare_pages;
        self.sqlite()?
            .max_pages
            .set(cap)
            .map_err(|_| StoreError::Conflict("the page cap is set already".into()))?;
        Ok(cap)
    }

    /// Runs `f` on a pooled connection (tests and benchmarks). Blocking.
    #[cfg(any(test, feature = "test-support"))]
    pub fn with_conn<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        self.run(f)
    }

    /// Runs `f` on a pooled connection. Blocking: async callers use the methods of [`access`].
    pub(crate) fn run<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let inner = self.sqlite()?;
        let pooled = inner
            .readers
            .lock()
            .map_err(|_| StoreError::Corrupt("reader pool poisoned".into()))?
            .pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => self.open_connection()?,
        };
        let out = f(&mut conn);
        if let Ok(mut pool) = inner.readers.lock() {
            if pool.len() < 8 {
                pool.push(conn);
            }
        }
        out
    }
}

/// WAL bytes between automatic checkpoints (~80 MB; SQLite counts them in pages).
const WAL_AUTOCHECKPOINT_BYTES: i64 = 81_920_000;

/// The page size of a store created from now on; an existing store keeps its own (a file in WAL
/// mode cannot change it). SQLite's default, 4 KiB, left a third of the minute rollups' pages
/// empty: their rows (about 300 B) grow as each batch merges into them and split pages that
/// have no room. On `usage_load`'s 10 M requests (gateway-shaped ids, schema v19) the store
/// was 3,012 MB with 4 KiB pages, 2,894 MB with 8 KiB and 2,754 MB with 16 KiB, the minute
/// tier 78, 67 and 57 B a request, and every read was faster (`usage` over 24 h 235, 218 and
/// 190 ms).
const PAGE_SIZE: i64 = 16_384;

/// How long a connection waits for another one's lock before it answers busy.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Puts the database in WAL mode, waiting as long as the busy timeout would. SQLite answers
/// the switch of a database not yet in WAL mode `SQLITE_BUSY` at once, without its busy
/// handler, while another connection holds a write lock on it: four processes opening one new
/// store at once failed so now and then under load ("database is locked"; once in about 45
/// runs of the conformance test beside the rest of the suite). Once the file is in WAL mode
/// the statement does not wait.
fn use_wal(conn: &Connection) -> Result<()> {
    const STEP: std::time::Duration = std::time::Duration::from_millis(10);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && waited < BUSY_TIMEOUT =>
            {
                std::thread::sleep(STEP);
                waited += STEP;
            }
            done => return Ok(done?),
        }
    }
}

fn open_connection(path: &Path) -> Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    // Before anything is written: it sizes the pages of a new file only.
    conn.pragma_update(None, "page_size", PAGE_SIZE)?;
    use_wal(&conn)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    // Checkpoint every ~80 MB of WAL rather than SQLite's 4 MB: each checkpoint copies pages
    // and syncs, and fewer, larger ones write each hot page (indexes keyed by random request
    // ids) once instead of many times. Measured at 1M rows (recorder, batches of 4096, 4 KiB
    // pages): 1,000 pages 20.0k, 10,000 pages 23.5k, 20,000 pages 26.2k records/s, with the
    // longest batch (the one that checkpoints) at 353 ms; 40,000 pages gained little and took
    // 462 ms.
    let page: i64 = conn.pragma_query_value(None, "page_size", |r| r.get(0))?;
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        WAL_AUTOCHECKPOINT_BYTES / page.max(512),
    )?;
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another connection writing a new database (not in WAL mode yet) while it is switched to
    /// WAL makes the switch wait for it (within the busy timeout), not fail at once as SQLite
    /// answers it.
    #[test]
    fn the_switch_to_wal_waits_for_a_writer_of_a_new_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let writer = Connection::open(&path).unwrap();
        writer
            .execute_batch("CREATE TABLE t (x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1);")
            .unwrap();
        let done = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            writer.execute_batch("COMMIT").unwrap();
        });
        let conn = open_connection(&path).unwrap();
        done.join().unwrap();
        let mode: String = conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
    }

    /// A new store gets pages of [`PAGE_SIZE`]; one made with SQLite's default keeps its own,
    /// and either checkpoints after about as many WAL bytes.
    #[test]
    fn a_new_store_has_large_pages_and_an_older_one_keeps_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let pages = |conn: &Connection| -> (i64, i64) {
            let size = conn.pragma_query_value(None, "page_size", |r| r.get(0));
            let every = conn.pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0));
            (size.unwrap(), every.unwrap())
        };
        let new = open_connection(&dir.path().join("new.db")).unwrap();
        new.execute_batch("CREATE TABLE t (x)").unwrap();
        assert_eq!(
            pages(&new),
            (PAGE_SIZE, WAL_AUTOCHECKPOINT_BYTES / PAGE_SIZE)
        );
        let old_path = dir.path().join("old.db");
        Connection::open(&old_path)
            .unwrap()
            .execute_batch("PRAGMA page_size = 4096; CREATE TABLE t (x);")
            .unwrap();
        let old = open_connection(&old_path).unwrap();
        assert_eq!(pages(&old), (4096, WAL_AUTOCHECKPOINT_BYTES / 4096));
    }
}
