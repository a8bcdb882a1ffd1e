//! Serving: the axum router (every route with its declared auth), the listener with
//! `TCP_NODELAY` (HTTP/1.1 and h2c), the in-process sim, and graceful shutdown: stop accepting,
//! let streams in flight finish within a bounded drain, flush every record.
//!
//! Auth is per route: a route answers without a token only when [`unauthenticated`] lists it,
//! and that list is the constant [`UNAUTHENTICATED`] (`/healthz`, `/readyz`, the static GraphiQL
//! and dashboard pages) plus the configured extra (`/metrics` when `server.metrics_public =
//! true`). Every other route authenticates in its handler.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use laptime_core::Dialect;
use laptime_store::recorder::{Recorder, RecorderTask};
use laptime_store::Store;

use crate::auth::Authenticator;
use crate::config::{Config, Provider};
use crate::metrics::{self, Metrics};
use crate::routing::{Channel, Router};
use crate::{api, attempt, dashboard, graphql, pipeline, App};

/// Routes that always answer without a token. [`unauthenticated`] adds the configured extra.
/// `GET /graphql` is the static GraphiQL page: it holds no data, and the queries it sends are
/// `POST /graphql`, which authenticates. `GET /` and `GET /assets/*` are the dashboard's static
/// page, script and style ([`dashboard`]): they hold no data either, and the page queries
/// `POST /graphql` with the user's token.
pub const UNAUTHENTICATED: [&str; 5] = [
    "/healthz",
    "/readyz",
    "GET /graphql",
    "GET /",
    "GET /assets/*",
];

/// Every route that answers without a token under `config`: [`UNAUTHENTICATED`], plus
/// [`metrics::PATH`] when `server.metrics_public` is set. Every other route authenticates in its
/// handler.
pub fn unauthenticated(config: &Config) -> Vec<&'static str> {
    let mut routes = UNAUTHENTICATED.to_vec();
    if config.server.metrics_public {
        routes.push(metrics::PATH);
    }
    routes
}

/// A gateway ready to serve: the app, the recorder's writer and the in-process sim (if any).
pub struct Gateway {
    pub app: Arc<App>,
    recorder_task: RecorderTask,
    sim: Option<tokio::task::JoinHandle<()>>,
    retention: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl Gateway {
    /// Opens the store, starts the recorder and the in-process sim, and builds the channels.
    /// `env` reads provider keys (by the names the config gives).
    pub async fn start(
        config: Config,
        store: Store,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Gateway, StartError> {
        Self::start_with_upstream(config, store, env, None).await
    }

    /// As [`Gateway::start`], with every upstream connection opened by `memory` instead of the
    /// network when it is given (tests under paused time).
    pub async fn start_with_upstream(
        config: Config,
        store: Store,
        env: &dyn Fn(&str) -> Option<String>,
        memory: Option<crate::connect::MemoryConnect>,
    ) -> Result<Gateway, StartError> {
        let (recorder, recorder_task) = Recorder::start(&store, config.server.recorder_queue)
            .map_err(|e| StartError(format!("recorder: {e}")))?;
        let needs_sim = config
            .channels
            .iter()
            .any(|c| c.provider == Provider::Sim && c.base_url.is_none());
        let mut sim = None;
        let mut sim_base = String::new();
        if needs_sim {
            let (addr, handle) = laptime_sim::spawn_local(laptime_sim::Sim::new())
                .await
                .map_err(|e| StartError(format!("in-process sim: {e}")))?;
            sim_base = format!("http://{addr}");
            sim = Some(handle);
        }
        let channels = config
            .channels
            .iter()
            .map(|c| {
                let base = c.base_url.clone().unwrap_or_else(|| sim_base.clone());
                Arc::new(Channel::from_config(c, base, env))
            })
            .collect();
        let client = attempt::client(Duration::from_millis(config.server.connect_timeout_ms))
            .map_err(|e| StartError(e.message))?;
        let metrics = Metrics::new().map_err(|e| StartError(format!("metrics: {e}")))?;
        let config_for_caches = config.routes.clone();
        let app = Arc::new(App {
            router: Router::new(channels),
            auth: Authenticator::new(store.clone()),
            client,
            memory_upstream: memory.map(attempt::memory_client),
            recorder,
            store,
            config,
            metrics: Arc::new(metrics),
            graphql: graphql::schema(),
            caches: config_caches(&config_for_caches),
            hedge_requests: std::sync::atomic::AtomicU64::new(0),
            hedges_sent: std::sync::atomic::AtomicU64::new(0),
        });
        let retention = tokio::spawn(retention_job(app.clone()));
        Ok(Gateway {
            app,
            recorder_task,
            sim,
            retention,
        })
    }

    pub fn router(&self) -> axum::Router {
        router(self.app.clone())
    }

    /// Serves on `listener` until `shutdown` resolves, then drains streams in flight for at most
    /// the configured drain time and flushes the recorder.
    ///
    /// Connections are served by `server.threads` threads (default: one per core), each with
    /// its own single-threaded runtime accepting from the same listening socket, like the
    /// worker processes of a classic proxy: a connection, its request, its upstream call and
    /// that call's pooled connection all run on one thread. On this kind of machine a wake-up
    /// from another thread costs more than the whole relay (measured in `benchmarks/`: the
    /// added latency at concurrency 1 and the CPU per request both about halve).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let drain = Duration::from_secs(self.app.config.server.drain_s);
        let threads = match self.app.config.server.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let listener = listener.into_std()?;
        // `stop`: no new connections, let streams finish; `cut`: the drain time is over.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (cut_tx, cut_rx) = tokio::sync::watch::channel(false);
        let mut serving = Vec::with_capacity(threads);
        for i in 0..threads {
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let (listener, app) = (listener.try_clone()?, self.app.clone());
            let (stop, cut) = (stop_rx.clone(), cut_rx.clone());
            std::thread::Builder::new()
                .name(format!("laptime-serve-{i}"))
                .spawn(move || {
                    let _ = done_tx.send(serve_thread(listener, app, stop, cut));
                })?;
            serving.push(done_rx);
        }
        drop(listener);
        shutdown.await;
        tracing::info!(
            drain_s = drain.as_secs(),
            "shutting down: no new connections, draining streams in flight"
        );
        let _ = stop_tx.send(true);
        let deadline = tokio::time::Instant::now() + drain;
        for mut done in serving {
            let ended = match tokio::time::timeout_at(deadline, &mut done).await {
                Ok(ended) => ended,
                Err(_) => {
                    if !*cut_tx.borrow() {
                        tracing::warn!("drain time over; cutting the remaining streams");
                        let _ = cut_tx.send(true);
                    }
                    done.await
                }
            };
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::error!(error = %e, "server error"),
                Err(_) => tracing::error!("a serving thread ended without a result"),
            }
        }
        // Streams cut at the drain deadline record themselves as they drop; give them a moment.
        tokio::task::yield_now().await;
        if !self
            .app
            .recorder
            .shutdown(self.recorder_task, Duration::from_secs(30))
            .await
        {
            tracing::error!("the recorder did not flush in time");
        }
        self.retention.abort();
        if let Some(sim) = self.sim {
            sim.abort();
        }
        Ok(())
    }
}

/// One serving thread: its own runtime, accepting from its handle on the shared listener, until
/// `stop` (then connections finish) or `cut` (then the runtime is dropped with whatever is still
/// open: those streams end and record themselves as they drop).
fn serve_thread(
    listener: std::net::TcpListener,
    app: Arc<App>,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut cut: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let serve = axum::serve(
            axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            }),
            router(app),
        )
        .with_graceful_shutdown(async move {
            let _ = stop.wait_for(|s| *s).await;
        });
        tokio::select! {
            served = std::future::IntoFuture::into_future(serve) => served,
            _ = cut.wait_for(|c| *c) => Ok(()),
        }
    })
}

/// One response cache per route that asks for one.
fn config_caches(
    routes: &[crate::config::RouteConfig],
) -> std::collections::HashMap<String, Arc<crate::cache::ResponseCache>> {
    routes
        .iter()
        .filter_map(|r| {
            let c = r.cache.as_ref()?;
            Some((
                r.model.clone(),
                Arc::new(crate::cache::ResponseCache::new(
                    Duration::from_secs(c.ttl_s),
                    c.max_entries,
                )),
            ))
        })
        .collect()
}

/// Rows deleted per retention transaction: small, so the recorder's writer never waits long.
const RETENTION_BATCH: usize = 1_000;

/// Deletes rows older than `store.retention_days`, now and then every interval.
async fn retention_job(app: Arc<App>) {
    let every = Duration::from_secs(app.config.store.retention_interval_s);
    loop {
        let _ = run_retention(&app).await;
        tokio::time::sleep(every).await;
    }
}

/// One retention pass; returns how many requests were deleted.
pub async fn run_retention(app: &Arc<App>) -> Option<usize> {
    let days = i64::from(app.config.store.retention_days);
    let cutoff = laptime_store::now_unix_us() - days * 86_400_000_000;
    let store = app.store.clone();
    let deleted = tokio::task::spawn_blocking(move || {
        store.with_conn(|c| {
            laptime_store::records::delete_older_than_batched(c, cutoff, RETENTION_BATCH)
        })
    })
    .await;
    match deleted {
        Ok(Ok(n)) => {
            if n > 0 {
                tracing::info!(deleted = n, retention_days = days, "retention pass");
            }
            Some(n)
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "retention pass failed");
            None
        }
        Err(_) => None,
    }
}

/// The HTTP surface. Layers sit in the order a request meets them; auth is per handler so each
/// route states what it needs.
pub fn router(app: Arc<App>) -> axum::Router {
    fn proxy_route(dialect: Dialect) -> axum::routing::MethodRouter<Arc<App>> {
        post(move |State(app): State<Arc<App>>, req: Request| pipeline::proxy(app, dialect, req))
    }
    axum::Router::new()
        .route(Dialect::Chat.path(), proxy_route(Dialect::Chat))
        .route(Dialect::Responses.path(), proxy_route(Dialect::Responses))
        .route(Dialect::Messages.path(), proxy_route(Dialect::Messages))
        .route(
            "/v1/models",
            get(|State(app): State<Arc<App>>, h| api::models(app, h)),
        )
        .route(
            "/api/requests",
            get(|State(app): State<Arc<App>>, h, q| api::list(app, h, q)),
        )
        .route(
            "/api/requests/{id}",
            get(|State(app): State<Arc<App>>, h, p| api::one(app, h, p)),
        )
        .route(
            metrics::PATH,
            get(|State(app): State<Arc<App>>, h| metrics::handler(app, h)),
        )
        .route(
            "/api/usage",
            get(|State(app): State<Arc<App>>, h, q| api::usage_report(app, h, q)),
        )
        .route(
            "/graphql",
            get(graphql::graphiql)
                .post(|State(app): State<Arc<App>>, h, body| graphql::handle(app, h, body)),
        )
        // The dashboard: static files only, so no token (see UNAUTHENTICATED): the page holds
        // no data and reads `POST /graphql` with the signed-in user's token.
        .route("/", get(dashboard::index))
        .route("/assets/{file}", get(dashboard::asset))
        .route(UNAUTHENTICATED[0], get(|| async { "ok" }))
        .route(UNAUTHENTICATED[1], get(readyz))
        .with_state(app)
}

async fn readyz(State(app): State<Arc<App>>) -> axum::response::Response {
    let store = app.store.clone();
    let ok = tokio::task::spawn_blocking(move || {
        store.with_conn(|c| Ok(c.query_row("SELECT 1", [], |r| r.get::<_, i64>(0))?))
    })
    .await
    .is_ok_and(|r| r.is_ok());
    if ok {
        "ready".into_response()
    } else {
        (http::StatusCode::SERVICE_UNAVAILABLE, "store unavailable").into_response()
    }
}

/// Binds the configured listen address.
pub async fn bind(addr: &str) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
