//! The store's surface for the gateway, the API and the CLI: every read and write they make, as
//! [`Store`] methods, each answered by the store's backend. On SQLite they run on tokio's
//! blocking pool (SQLite calls block); the one exception is [`Store::authenticate`], which is on
//! every proxied request and runs inline (see there). On PostgreSQL they are queries on a pooled
//! connection. Times come in as arguments: the wall clock is the caller's.

use laptime_core::endpoint::ObjectKind;
use laptime_core::limit::{BudgetMode, Limits, Period};
use laptime_core::timeline::RequestRecord;

use crate::affinity::{self, Placement};
use crate::auth::{self, NewToken, Principal, Scope, Workspace};
use crate::budgets::BudgetRow;
use crate::instances;
use crate::limits::LimitRow;
use crate::manage::{self, TokenInfo};
use crate::records;
use crate::usage::{self, GroupDim, UsageFilter, UsageResult};
use crate::{pg, Backend, Connection, Result, Store, StoreError};

impl Store {
    /// Runs `f` on a pooled connection on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.run(f))
            .await
            .map_err(|e| StoreError::Unavailable(e.to_string()))?
    }

    /// Looks a presented token up: its principal, or `None` for an unknown, malformed or
    /// revoked token. On SQLite inline, not on the blocking pool, on purpose: it is one indexed
    /// read of a WAL database (readers never wait for the writer) on a pooled connection, while a
    /// hand-off to the blocking pool costs two thread wake-ups per request (measured in
    /// `benchmarks/`).
    pub async fn authenticate(&self, token: &str) -> Result<Option<Principal>> {
        match &self.backend {
            Backend::Sqlite(_) => self.run(|c| auth::authenticate(c, token)),
            Backend::Postgres(pg) => {
                pg.with(async |c| pg::auth::authenticate(c, token).await)
                    .await
            }
        }
    }

    /// The auth epoch ([`auth::epoch`]): unchanged means no token, workspace or limit changed
    /// since it was last read, by this process or any other. Off the request path (the gateway
    /// polls it), so on the blocking pool.
    pub async fn auth_epoch(&self) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(_) => self.blocking(|c| auth::epoch(c)).await,
            Backend::Postgres(pg) => pg.with(async |c| pg::auth::epoch(c).await).await,
        }
    }

    /// Whether the database can be written (for `/readyz`): takes the write lock, reads the
    /// schema version and rolls back, writing nothing. `SELECT 1` would not touch the file at
    /// all, and a read never waits in WAL mode, so neither would see another process holding
    /// the database, which stalls every record the gateway writes. Waits at most the busy
    /// timeout; `/readyz` bounds it tighter.
    pub async fn ping(&self) -> bool {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| Ok(c.query_one("SELECT 1", &[]).await?))
                .await
                .is_ok();
        }
        self.blocking(|c| {
            // Dropped without commit: rolled back, so the pooled connection comes back clean.
            let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
            Ok(tx.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))?)
        })
        .await
        .is_ok()
    }

    /// The schema version the store is at (this build's [`Store::known_schema_version`] once
    /// opened).
    pub async fn schema_version(&self) -> Result<i64> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.with(async |c| pg::schema::applied(c).await).await;
        }
        self.blocking(|c| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?))
            .await
    }

    /// The schema version this build writes, in this store's backend.
    pub fn known_schema_version(&self) -> i64 {
        match &self.backend {
            Backend::Sqlite(_) => crate::schema::VERSION,
            Backend::Postgres(_) => pg::schema::VERSION,
        }
    }

    /// On a store with no tokens: the default workspace and its first admin token (see
    /// [`auth::bootstrap`]).
    pub async fn bootstrap(&self, given: Option<String>, now_us: i64) -> Result<Option<NewToken>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::auth::bootstrap(c, given.as_deref(), now_us).await)
                .await;
        }
        self.blocking(move |c| auth::bootstrap(c, given.as_deref(), now_us))
            .await
    }

    /// A workspace by name or id.
    pub async fn find_workspace(&self, name_or_id: &str) -> Result<Option<Workspace>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::auth::find_workspace(c, name_or_id).await)
                .await;
        }
        let name = name_or_id.to_string();
        self.blocking(move |c| auth::find_workspace(c, &name)).await
    }

    /// A workspace by name or id, or [`StoreError::NotFound`].
    pub async fn workspace(&self, name_or_id: &str) -> Result<Workspace> {
        self.find_workspace(name_or_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("workspace {name_or_id:?}")))
    }

    pub async fn list_workspaces(&self) -> Result<Vec<Workspace>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.with(async |c| pg::auth::list_workspaces(c).await).await;
        }
        self.blocking(|c| manage::list_workspaces(c)).await
    }

    /// Creates a workspace at `now_us`, in `group` when given, in one call.
    pub async fn create_workspace(
        &self,
        name: &str,
        group: Option<String>,
        now_us: i64,
    ) -> Result<Workspace> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| {
                    let tx = c.transaction().await?;
                    let ws = pg::auth::create_workspace(&tx, name, now_us).await?;
                    let ws = match group {
                        Some(g) => pg::auth::set_workspace_group(&tx, &ws.id, Some(&g)).await?,
                        None => ws,
                    };
                    tx.commit().await?;
                    Ok(ws)
                })
                .await;
        }
        let name = name.to_string();
        self.blocking(move |c| {
            let ws = auth::create_workspace(c, &name, now_us)?;
            match group {
                Some(g) => auth::set_workspace_group(c, &ws.id, Some(&g)),
                None => Ok(ws),
            }
        })
        .await
    }

    /// Sets (or, with `None`, clears) a workspace's routing group.
    pub async fn set_workspace_group(
        &self,
        workspace: &str,
        group: Option<String>,
    ) -> Result<Workspace> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::auth::set_workspace_group(c, workspace, group.as_deref()).await)
                .await;
        }
        let workspace = workspace.to_string();
        self.blocking(move |c| auth::set_workspace_group(c, &workspace, group.as_deref()))
            .await
    }

    /// Creates a token at `now_us`, with its own routing group when given.
    pub async fn create_token(
        &self,
        workspace: &str,
        scope: Scope,
        group: Option<String>,
        now_us: i64,
    ) -> Result<NewToken> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| {
                    pg::auth::create_token(c, workspace, scope, group.as_deref(), now_us).await
                })
                .await;
        }
        let workspace = workspace.to_string();
        self.blocking(move |c| {
            auth::create_group_token(c, &workspace, scope, group.as_deref(), now_us)
        })
        .await
    }

    /// The tokens of a workspace (never their values).
    pub async fn list_tokens(&self, workspace_id: &str) -> Result<Vec<TokenInfo>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::auth::list_tokens(c, workspace_id).await)
                .await;
        }
        let ws = workspace_id.to_string();
        self.blocking(move |c| manage::list_tokens(c, &ws)).await
    }

    /// Revokes a live token of a workspace at `now_us`; `false` when there is none.
    pub async fn revoke_token(
        &self,
        workspace_id: &str,
        key_id: &str,
        now_us: i64,
    ) -> Result<bool> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::auth::revoke_token(c, workspace_id, key_id, now_us).await)
                .await;
        }
        let (ws, key) = (workspace_id.to_string(), key_id.to_string());
        self.blocking(move |c| manage::revoke_token(c, &ws, &key, now_us))
            .await
    }

    /// Sets the rate limits of a workspace (`key_id` `None`) or of one of its tokens at
    /// `now_us`; `Limits::default()` removes them. A token of another workspace is not found.
    pub async fn set_limits(
        &self,
        workspace_id: &str,
        key_id: Option<&str>,
        limits: Limits,
        now_us: i64,
    ) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::limits::set(c, workspace_id, key_id, limits, now_us).await)
                .await;
        }
        let (ws, key) = (workspace_id.to_string(), key_id.map(str::to_string));
        self.blocking(move |c| crate::limits::set(c, &ws, key.as_deref(), limits, now_us))
            .await
    }

    /// Sets (with `None`, removes) the budget of `period` of a workspace (`key_id` `None`) or
    /// of one of its tokens, at `now_us`.
    pub async fn set_budget(
        &self,
        workspace_id: &str,
        key_id: Option<&str>,
        period: Period,
        budget: Option<(u64, BudgetMode)>,
        now_us: i64,
    ) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| {
                    pg::budgets::set(c, workspace_id, key_id, period, budget, now_us).await
                })
                .await;
        }
        let (ws, key) = (workspace_id.to_string(), key_id.map(str::to_string));
        self.blocking(move |c| crate::budgets::set(c, &ws, key.as_deref(), period, budget, now_us))
            .await
    }

    /// Every budget of one workspace (and its tokens), or of all, with what was spent in its
    /// period holding `now_us`.
    pub async fn list_budgets(
        &self,
        workspace_id: Option<&str>,
        now_us: i64,
    ) -> Result<Vec<BudgetRow>> {
        let zone = self.budget_zone.clone();
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::budgets::list(c, workspace_id, now_us, &zone).await)
                .await;
        }
        let ws = workspace_id.map(str::to_string);
        self.blocking(move |c| crate::budgets::list(c, ws.as_deref(), now_us, &zone))
            .await
    }

    /// What every workspace and token (of one workspace, or all) spent in the day and month
    /// holding `now_us`, budget or not (see [`crate::budgets::spend`]).
    pub async fn list_spend(
        &self,
        workspace_id: Option<&str>,
        now_us: i64,
    ) -> Result<Vec<crate::budgets::SpendRow>> {
        let zone = self.budget_zone.clone();
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::budgets::spend(c, workspace_id, now_us, &zone).await)
                .await;
        }
        let ws = workspace_id.map(str::to_string);
        self.blocking(move |c| crate::budgets::spend(c, ws.as_deref(), now_us, &zone))
            .await
    }

    /// Retention of the spend sums: deletes those of periods before the previous one (see
    /// [`crate::budgets::prune`]); returns how many went.
    pub async fn prune_spend(&self, now_us: i64) -> Result<usize> {
        let zone = self.budget_zone.clone();
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::budgets::prune(c, now_us, &zone).await)
                .await;
        }
        self.blocking(move |c| crate::budgets::prune(c, now_us, &zone))
            .await
    }

    /// The stored limits of one workspace (and its tokens), or of every workspace.
    pub async fn list_limits(&self, workspace_id: Option<&str>) -> Result<Vec<LimitRow>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::limits::list(c, workspace_id).await)
                .await;
        }
        let ws = workspace_id.map(str::to_string);
        self.blocking(move |c| crate::limits::list(c, ws.as_deref()))
            .await
    }

    /// Writes the records not stored yet, leaving stored ones untouched (see
    /// [`records::insert_absent`]); the ids written.
    pub async fn insert_absent(&self, records: Vec<RequestRecord>) -> Result<Vec<String>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.insert_absent(&records, &self.budget_zone).await;
        }
        let zone = self.budget_zone.clone();
        self.blocking(move |c| records::insert_absent(c, &records, &zone))
            .await
    }

    /// Writes a batch of records with their rollups in one transaction, as the recorder does
    /// (see [`records::insert_batch`]): for imports, tests and benchmarks. The gateway hands
    /// its records to the [`crate::recorder`] instead.
    pub async fn insert_batch(&self, records: Vec<RequestRecord>) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.insert_batch(&records, &self.budget_zone).await;
        }
        let zone = self.budget_zone.clone();
        self.blocking(move |c| records::insert_batch(c, &records, &zone))
            .await
    }

    /// One record of a workspace (`None` also for another workspace's id).
    pub async fn record(
        &self,
        workspace_id: &str,
        request_id: &str,
    ) -> Result<Option<RequestRecord>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::records::get(c, workspace_id, request_id).await)
                .await;
        }
        let (ws, id) = (workspace_id.to_string(), request_id.to_string());
        self.blocking(move |c| records::get(c, &ws, &id)).await
    }

    /// The newest records of a workspace matching `filter` (see [`usage::recent_filtered`]).
    pub async fn recent(
        &self,
        workspace_id: &str,
        filter: UsageFilter,
        window: Option<(i64, i64)>,
        limit: u32,
    ) -> Result<Vec<RequestRecord>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| {
                    if filter == UsageFilter::default() {
                        return pg::usage::recent_filtered(c, workspace_id, &filter, window, limit)
                            .await;
                    }
                    let tx = c
                        .build_transaction()
                        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                        .read_only(true)
                        .start()
                        .await?;
                    let rows =
                        pg::usage::recent_filtered(&tx, workspace_id, &filter, window, limit)
                            .await?;
                    tx.commit().await?;
                    Ok(rows)
                })
                .await;
        }
        let ws = workspace_id.to_string();
        self.blocking(move |c| usage::recent_filtered(c, &ws, &filter, window, limit))
            .await
    }

    /// Usage of a workspace over `[from_us, to_us)` (see [`usage::usage`]).
    pub async fn usage(
        &self,
        workspace_id: &str,
        (from_us, to_us): (i64, i64),
        filter: UsageFilter,
        group_by: Vec<GroupDim>,
    ) -> Result<UsageResult> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| {
                    pg::usage::usage(c, workspace_id, (from_us, to_us), &filter, &group_by).await
                })
                .await;
        }
        let ws = workspace_id.to_string();
        self.blocking(move |c| usage::usage(c, &ws, from_us, to_us, &filter, &group_by))
            .await
    }

    /// Retention: deletes records older than `cutoff_us` in transactions of at most `batch`
    /// rows (see [`records::delete_older_than_batched`]), and the object placements made before
    /// it; returns how many records went.
    pub async fn delete_older_than(&self, cutoff_us: i64, batch: usize) -> Result<usize> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.delete_older_than(cutoff_us, batch).await;
        }
        self.blocking(move |c| {
            let n = records::delete_older_than_batched(c, cutoff_us, batch)?;
            affinity::delete_older_than(c, cutoff_us)?;
            Ok(n)
        })
        .await
    }

    /// Packs the requests of one day that has ended into blocks (see [`pg::compact`]); `None`
    /// when no day is due. PostgreSQL only: SQLite met the size target without it.
    pub async fn pack_one_finished_day(&self, now_us: i64) -> Result<Option<pg::compact::Packed>> {
        match &self.backend {
            Backend::Postgres(pg) => pg.pack_one_finished_day(now_us).await,
            Backend::Sqlite(_) => Ok(None),
        }
    }

    /// Remembers which channel holds objects `workspace_id` created (see [`affinity::put`]).
    pub async fn put_placements(
        &self,
        workspace_id: &str,
        placements: Vec<Placement>,
    ) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::affinity::put(c, workspace_id, &placements).await)
                .await;
        }
        let ws = workspace_id.to_string();
        self.blocking(move |c| affinity::put(c, &ws, &placements))
            .await
    }

    /// The objects of `kind` `workspace_id` created on `channel` (see [`affinity::placed`]).
    pub async fn placed(
        &self,
        workspace_id: &str,
        channel: &str,
        kind: ObjectKind,
        limit: u32,
    ) -> Result<Vec<String>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::affinity::placed(c, workspace_id, channel, kind, limit).await)
                .await;
        }
        let (ws, ch) = (workspace_id.to_string(), channel.to_string());
        self.blocking(move |c| affinity::placed(c, &ws, &ch, kind, limit))
            .await
    }

    /// Where `object_id` lives, if `workspace_id` created it.
    pub async fn placement(
        &self,
        workspace_id: &str,
        object_id: &str,
    ) -> Result<Option<Placement>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::affinity::get(c, workspace_id, object_id).await)
                .await;
        }
        let (ws, id) = (workspace_id.to_string(), object_id.to_string());
        self.blocking(move |c| affinity::get(c, &ws, &id)).await
    }
}

impl Store {
    /// Replaces this instance's heartbeat (see [`instances::put`]).
    pub async fn put_heartbeat(&self, beat: laptime_core::fleet::Heartbeat) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg.with(async |c| pg::instances::put(c, &beat).await).await;
        }
        self.blocking(move |c| instances::put(c, &beat)).await
    }

    /// The heartbeats written at or after `since_us`, by instance name.
    pub async fn heartbeats_since(
        &self,
        since_us: i64,
    ) -> Result<Vec<laptime_core::fleet::Heartbeat>> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::instances::since(c, since_us).await)
                .await;
        }
        self.blocking(move |c| instances::since(c, since_us)).await
    }

    /// Removes an instance's heartbeat (it is shutting down).
    pub async fn forget_heartbeat(&self, instance: &str) -> Result<()> {
        if let Backend::Postgres(pg) = &self.backend {
            return pg
                .with(async |c| pg::instances::forget(c, instance).await)
                .await;
        }
        let instance = instance.to_string();
        self.blocking(move |c| instances::forget(c, &instance))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_700_000_000_000_000;

    #[tokio::test]
    async fn workspaces_and_tokens_round_trip_through_the_async_surface() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        assert!(store.ping().await);
        let admin = store.bootstrap(None, NOW).await.unwrap().unwrap();
        assert!(store.bootstrap(None, NOW).await.unwrap().is_none());
        let ws = store
            .create_workspace("team", Some("batch".into()), NOW)
            .await
            .unwrap();
        assert_eq!(ws.group.as_deref(), Some("batch"));
        let t = store
            .create_token("team", Scope::Read, None, NOW)
            .await
            .unwrap();
        let p = store.authenticate(&t.token).await.unwrap().unwrap();
        assert_eq!(
            (p.workspace_id.as_str(), p.scope),
            (ws.id.as_str(), Scope::Read)
        );
        assert!(store.authenticate(&admin.token).await.unwrap().is_some());
        assert_eq!(store.list_tokens(&ws.id).await.unwrap().len(), 1);
        assert!(store
            .revoke_token(&ws.id, &t.key_id, NOW + 1)
            .await
            .unwrap());
        assert!(store.authenticate(&t.token).await.unwrap().is_none());
        assert!(matches!(
            store.workspace("nope").await,
            Err(StoreError::NotFound(_))
        ));
        assert_eq!(store.list_workspaces().await.unwrap().len(), 2);
        assert!(store
            .recent(&ws.id, UsageFilter::default(), None, 10)
            .await
            .unwrap()
            .is_empty());
        assert_eq!(store.record(&ws.id, "req_x").await.unwrap(), None);
        assert_eq!(store.delete_older_than(NOW, 100).await.unwrap(), 0);
    }
}
