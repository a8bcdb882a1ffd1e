//! For tests of every crate (the `test-support` feature): a PostgreSQL store of their own on the
//! test server, in a fresh schema that is dropped when the guard goes, so tests run in parallel
//! against one database without seeing each other.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Result, StoreError};

/// The server tests use: `LAPTIME_TEST_POSTGRES_URL`, else the local one `scripts/test` starts.
pub fn postgres_url() -> String {
    std::env::var("LAPTIME_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A schema of its own on the test server; dropped (with everything in it) on drop.
#[derive(Debug)]
pub struct PgSchema {
    name: String,
    url: String,
}

impl PgSchema {
    /// Creates a fresh, empty schema.
    pub async fn create() -> Result<PgSchema> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "lt_test_{}_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed),
            crate::auth::random_hex(4)
        );
        let base = postgres_url();
        let config: tokio_postgres::Config = base.parse()?;
        let client = crate::pg::connect(&config).await?;
        client
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await?;
        let sep = if base.contains('?') { '&' } else { '?' };
        // The application name lets the guard end connections a test left open.
        let url = format!("{base}{sep}options=-c%20search_path%3D{name}&application_name={name}");
        Ok(PgSchema { name, url })
    }

    /// The store URL that works in this schema.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Drop runs on a runtime's thread, or on none: a thread of its own may block either way.
        let dropped = std::thread::spawn(move || -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let config: tokio_postgres::Config = postgres_url().parse()?;
                let client = crate::pg::connect(&config).await?;
                // A connection of the test still open (its runtime may be the thread this drop
                // blocks) would hold locks the drop waits for.
                client
                    .execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                         WHERE application_name = $1 AND pid <> pg_backend_pid()",
                        &[&name],
                    )
                    .await?;
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await?;
                Ok::<_, StoreError>(())
            })
        })
        .join();
        if !matches!(dropped, Ok(Ok(()))) {
            tracing::warn!(schema = %self.name, "test schema not dropped");
        }
    }
}
