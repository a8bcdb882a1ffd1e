//! Serving: starting a gateway (store, recorder, channels, retention), serving a router built
//! by the caller on the listener with `TCP_NODELAY` (HTTP/1.1 and h2c), and graceful shutdown:
//! stop accepting, let streams in flight finish within a bounded drain, flush every record.
//!
//! The routes, and the one auth layer over them, are `laptime_api::routes`'; the embedded sim
//! is started by the binary (a `sim` channel without a `base_url` gets its address there).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use laptime_store::recorder::{Recorder, RecorderTask};
use laptime_store::Store;

use crate::auth::Authenticator;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::{attempt, App};

/// A gateway ready to serve: the app, the recorder's writer and the retention job.
pub struct Gateway {
    pub app: Arc<App>,
    recorder_task: RecorderTask,
    retention: tokio::task::JoinHandle<()>,
    /// Writes the in-flight journal (absent with `inflight_snapshot_ms = 0`).
    journal: Option<crate::inflight::JournalWriter>,
    /// Applies the fleet's channel health (absent without `[shared] redis_url`).
    shared: Option<tokio::task::JoinHandle<()>>,
    /// Exports request spans (absent without `[telemetry] otlp_endpoint`).
    traces: Option<crate::traces::Exporter>,
    /// Publishes this instance's heartbeat, and where to.
    heartbeat: (tokio::task::JoinHandle<()>, crate::heartbeat::Via),
}

/// Requests the in-flight registry tracks at once besides the records queued for the store
/// (each entry is about a kilobyte): far more than the connections a gateway serves at once.
pub const INFLIGHT_REQUESTS: usize = 65_536;

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
    /// Starts the recorder and the retention job and builds the channels. `env` reads provider
    /// keys (by the names the config gives). Every channel needs its `base_url` by now: the
    /// binary fills in the embedded sim's for a `sim` channel without one.
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
        // The tokenizer that counts Chat streams sent without usage (and admission's input
        // estimate) loads in the background (its pattern compiles in milliseconds), so that no
        // stream waits for it.
        tokio::task::spawn_blocking(laptime_core::estimate::warm);
        // Spend is summed per day and month of the configured zone, by the recorder's writes.
        let store = store.with_budget_zone(config.budgets.zone().map_err(StartError)?);
        let egress = crate::egress::Egress::build(&config.channels, env)
            .map_err(|errs| StartError(format!("egress: {}", errs.join("; "))))?;
        let live = crate::live::Live::build(config.clone(), env, None)
            .map_err(|errs| StartError(errs.join("; ")))?;
        let (fleet, shared) = match &config.shared.redis_url {
            Some(url) => {
                let instance = crate::heartbeat::Instances::new(config.server.instance.as_deref());
                let (fleet, task) = crate::shared::start(
                    url,
                    &config.shared.key_prefix,
                    instance.name(),
                    live.router.channels(),
                )
                .map_err(StartError)?;
                (Some(fleet), Some(task))
            }
            None => (None, None),
        };
        // A queued record stays in the registry until it is written, and the writer may hold a
        // batch beside a full queue.
        let inflight_capacity = config.server.recorder_queue
            + laptime_store::recorder::max_batch(&store)
            + INFLIGHT_REQUESTS;
        // Beside the SQLite file; with a shared store, in this instance's own data dir.
        let journal_path = match store.path() {
            Some(db) => crate::inflight::journal_path(db),
            None => {
                std::fs::create_dir_all(&config.server.data_dir).map_err(|e| {
                    StartError(format!(
                        "data dir {}: {e}",
                        config.server.data_dir.display()
                    ))
                })?;
                config.server.data_dir.join(crate::inflight::JOURNAL_FILE)
            }
        };
        // Before the recorder starts and before anything is served: what a crash left in flight.
        match crate::inflight::recover(&store, &journal_path, inflight_capacity, &config.thresholds)
            .await
            .map_err(StartError)?
        {
            Some(r) => tracing::info!(
                crashed = r.crashed,
                finished = r.finished,
                already_stored = r.already_stored,
                unreadable = r.unreadable,
                "recovered {} requests from the in-flight journal: {} recorded gateway_crashed, {} finished records written",
                r.crashed + r.finished,
                r.crashed,
                r.finished
            ),
            None => tracing::debug!("no in-flight journal: the last run shut down cleanly"),
        }
        let inflight = crate::inflight::Inflight::new(inflight_capacity);
        let told = inflight.clone();
        let (recorder, recorder_task) = Recorder::start_with(
            &store,
            config.server.recorder_queue,
            Some(Box::new(move |batch| told.written(batch))),
        )
        .map_err(|e| StartError(format!("recorder: {e}")))?;
        let journal = match config.server.inflight_snapshot_ms {
            0 => None,
            ms => Some(
                crate::inflight::JournalWriter::start(
                    inflight.clone(),
                    journal_path,
                    Duration::from_millis(ms),
                )
                .map_err(|e| StartError(format!("in-flight journal: {e}")))?,
            ),
        };
        let metrics =
            Metrics::new(config.named_models()).map_err(|e| StartError(format!("metrics: {e}")))?;
        let limiter = match &config.shared.redis_url {
            Some(url) => crate::limits::Limiter::new().with_shared(
                Arc::new(
                    crate::shared_limits::SharedWindows::new(url, &config.shared.key_prefix)
                        .map_err(StartError)?,
                ),
                metrics.limits_shared_fallback(),
            ),
            None => crate::limits::Limiter::new(),
        };
        let body_budget = crate::budget::BodyBudget::new(config.server.body_budget_bytes);
        let fd_limit = crate::listen::raise_fd_limit();
        let max_connections = match config.server.max_connections {
            0 => crate::listen::default_max_connections(fd_limit),
            n => n,
        };
        tracing::debug!(max_connections, fd_limit, "client connection cap");
        let connections = crate::listen::Connections::new(max_connections);
        let metrics = Arc::new(metrics);
        let (traces, traces_exporter) = crate::traces::start(
            &config.telemetry,
            env,
            config.server.instance.as_deref(),
            metrics.clone(),
        )
        .map_err(StartError)?
        .unzip();
        let affinity = Arc::new(crate::affinity::Affinity::new(store.clone()));
        let sinks = Arc::new(crate::record::Sinks {
            recorder: recorder.clone(),
            metrics: Some(metrics.clone()),
            unauthenticated: Some(Arc::new(crate::record::RowSample::new(
                crate::record::UNAUTHENTICATED_ROWS_PER_S,
            ))),
            affinity: Some(affinity.clone()),
            traces,
        });
        let app = Arc::new(App {
            live: std::sync::RwLock::new(Arc::new(live)),
            reload_source: std::sync::OnceLock::new(),
            reloading: tokio::sync::Mutex::new(()),
            fleet,
            auth: Arc::new(Authenticator::new(store.clone())),
            affinity,
            egress,
            memory_upstream: memory.map(attempt::memory_client),
            recorder,
            inflight,
            store,
            metrics,
            body_budget,
            connections,
            drain_over: tokio::sync::watch::Sender::new(false),
            sinks,
            hedge_requests: std::sync::atomic::AtomicU64::new(0),
            hedges_sent: std::sync::atomic::AtomicU64::new(0),
            limiter: Arc::new(limiter),
            budgets: crate::budgets::BudgetBook::new(),
            instances: crate::heartbeat::Instances::new(config.server.instance.as_deref()),
        });
        let via = crate::heartbeat::Via::of(&config.shared).map_err(StartError)?;
        let heartbeat = (
            tokio::spawn(crate::heartbeat::run(Arc::downgrade(&app), via.clone())),
            via,
        );
        if let Err(e) = refresh_budgets(&app).await {
            tracing::warn!(error = %e, "budgets could not be read at start; retrying every second");
        }
        let retention = tokio::spawn(retention_job(app.clone()));
        tokio::spawn(budget_job(Arc::downgrade(&app)));
        tokio::spawn(crate::auth::watch_epoch(Arc::downgrade(&app.auth)));
        Ok(Gateway {
            app,
            recorder_task,
            retention,
            journal,
            shared,
            traces: traces_exporter,
            heartbeat,
        })
    }

    /// Serves `router` (every serving thread gets a clone) on `listener` until `shutdown` resolves, then drains streams in flight for at most
    /// the configured drain time and flushes the recorder. The dialects' model calls are
    /// answered by [`crate::pipeline::proxy`] without the router ([`crate::listen::Front`]):
    /// `router` is to send them there too (`laptime_api::router` does).
    ///
    /// Connections are served by `server.threads` threads (default: one per core), each with
    /// its own single-threaded runtime accepting from the same listening socket, like the
    /// worker processes of a classic proxy: a connection, its request, its upstream call and
    /// that call's pooled connection all run on one thread. On this kind of machine a wake-up
    /// from another thread costs more than the whole relay (measured in `benchmarks/`: the
    /// added latency at concurrency 1 and the CPU per request both about halve). A thread that
    /// serves more connections than another hands new ones over ([`crate::spread`]), once
    /// per connection.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        router: axum::Router,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        // Read once: `[server]` is restart-only, a reload keeps it as it is.
        let server = self.app.live().config.server.clone();
        let drain = Duration::from_secs(server.drain_s);
        let threads = match server.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let listener = listener.into_std()?;
        // `stop`: no new connections, let streams finish; `cut`: the drain time is over.
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let (cut_tx, cut_rx) = tokio::sync::watch::channel(false);
        let mut serving = Vec::with_capacity(threads);
        let head_timeout = Duration::from_millis(server.header_read_timeout_ms);
        let protocols = Arc::new(crate::listen::builder(head_timeout));
        let (spread, inboxes) = crate::spread::Spread::new(threads);
        for (i, inbox) in inboxes.into_iter().enumerate() {
            let (done_tx, done_rx) = tokio::sync::oneshot::channel();
            let thread = Serving {
                listener: listener.try_clone()?,
                spread: spread.clone(),
                me: i,
                inbox,
                front: crate::listen::Front {
                    router: router.clone(),
                    app: Some(self.app.clone()),
                },
                connections: self.app.connections.clone(),
                protocols: protocols.clone(),
            };
            let (stop, cut) = (stop_rx.clone(), cut_rx.clone());
            std::thread::Builder::new()
                .name(format!("laptime-serve-{i}"))
                .spawn(move || {
                    let _ = done_tx.send(serve_thread(thread, stop, cut));
                })?;
            serving.push(done_rx);
        }
        drop(listener);
        shutdown.await;
        let running = self.app.inflight.running();
        tracing::info!(
            drain_s = drain.as_secs(),
            requests_in_flight = running.requests,
            streams_in_flight = running.streams,
            "shutting down: no new connections, draining {} streams in flight",
            running.streams
        );
        let _ = stop_tx.send(true);
        let deadline = tokio::time::Instant::now() + drain;
        for mut done in serving {
            let ended = match tokio::time::timeout_at(deadline, &mut done).await {
                Ok(ended) => ended,
                Err(_) => {
                    if !*self.app.drain_over.borrow() {
                        tracing::warn!("drain time over; ending the remaining streams");
                        self.app.drain_over.send_replace(true);
                    }
                    // Streams tell their clients and record themselves; then what is left goes.
                    let told = tokio::time::Instant::now() + DRAIN_OVER_GRACE;
                    match tokio::time::timeout_at(told, &mut done).await {
                        Ok(ended) => ended,
                        Err(_) => {
                            if !*cut_tx.borrow() {
                                let _ = cut_tx.send(true);
                            }
                            done.await
                        }
                    }
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
        let cut = self.app.metrics.cut_by_shutdown();
        tracing::info!(
            streams_in_flight = running.streams,
            cut_at_drain_deadline = cut,
            "drained: {} of {} streams in flight at shutdown were cut at the drain deadline",
            cut,
            running.streams
        );
        let flushed = self
            .app
            .recorder
            .shutdown(self.recorder_task, Duration::from_secs(30))
            .await;
        if !flushed {
            tracing::error!("the recorder did not flush in time");
        }
        // Every request is finished by now: what is queued for the OTLP receiver goes out.
        if let Some(exporter) = self.traces {
            if !exporter.shutdown(TRACES_FLUSH).await {
                tracing::warn!("request spans still queued at shutdown were not all exported");
            }
        }
        // Flushed, every record is in the store (or counted as dropped): a clean shutdown
        // leaves no journal, so the next start recovers nothing.
        if let Some(journal) = self.journal {
            let _ = tokio::task::spawn_blocking(move || journal.stop(!flushed)).await;
        }
        self.retention.abort();
        if let Some(task) = self.shared {
            task.abort();
        }
        let (beating, via) = self.heartbeat;
        beating.abort();
        crate::heartbeat::forget(&self.app, &via).await;
        Ok(())
    }
}

/// What one serving thread serves with.
struct Serving {
    listener: std::net::TcpListener,
    spread: Arc<crate::spread::Spread>,
    me: usize,
    inbox: crate::spread::Inbox,
    front: crate::listen::Front,
    connections: Arc<crate::listen::Connections>,
    protocols: Arc<crate::listen::Protocols>,
}

/// At shutdown: how long the spans still queued have to reach the OTLP receiver.
const TRACES_FLUSH: Duration = Duration::from_secs(5);

/// After the drain time: how long streams still open have to send their error event.
const DRAIN_OVER_GRACE: Duration = Duration::from_millis(500);

/// One serving thread: its own runtime, accepting from its handle on the shared listener, until
/// `stop` (then connections finish) or `cut` (then the runtime is dropped with whatever is still
/// open: those streams end and record themselves as they drop).
fn serve_thread(
    serving: Serving,
    stop: tokio::sync::watch::Receiver<bool>,
    mut cut: tokio::sync::watch::Receiver<bool>,
) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        tokio::spawn(timer_floor());
        serving.listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(serving.listener)?;
        let accepting = crate::listen::Accepting {
            listener,
            spread: serving.spread,
            me: serving.me,
            inbox: serving.inbox,
        };
        let accepting = crate::listen::accept_until_stopped(
            accepting,
            serving.front,
            serving.connections,
            serving.protocols,
            stop,
        );
        tokio::select! {
            () = accepting => {}
            _ = cut.wait_for(|c| *c) => {}
        }
        Ok(())
    })
}

/// How far ahead a serving thread always holds a timer ([`timer_floor`]).
const TIMER_FLOOR: Duration = Duration::from_secs(1);

/// Keeps a timer pending at most [`TIMER_FLOOR`] ahead, for the life of a serving thread.
///
/// tokio's timer wakes its own driver (a write to its eventfd, then one more `epoll_wait`)
/// whenever a new timer is due before every timer the thread parked with, even when that
/// thread is the one running. Every request starts one (the attempt's head timeout, seconds
/// ahead), and with nothing else pending each paid those two system calls on its way
/// upstream (`strace` of the gateway at one request at a time). With this timer pending, a
/// new timer further ahead than it never wakes the driver; the thread wakes once a second.
async fn timer_floor() {
    loop {
        tokio::time::sleep(TIMER_FLOOR).await;
    }
}

/// Rows deleted per retention transaction: small, so the recorder's writer never waits long.
const RETENTION_BATCH: usize = 1_000;

/// Re-reads the budgets and their spend every second while the gateway lives.
async fn budget_job(app: std::sync::Weak<App>) {
    let mut failing = false;
    loop {
        tokio::time::sleep(crate::budgets::REFRESH).await;
        let Some(app) = app.upgrade() else { return };
        match refresh_budgets(&app).await {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("budgets are read again");
            }
            Ok(()) => {}
            // Said once per change: the store's own failures are logged where they happen.
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "budgets could not be read; the last read ones apply");
            }
            Err(_) => {}
        }
    }
}

/// One read of the budgets and their spend.
pub async fn refresh_budgets(app: &App) -> laptime_store::Result<()> {
    app.budgets
        .refresh(&app.store, crate::clock::now_unix_us(), &app.metrics)
        .await
}

/// Deletes rows older than `store.retention_days`, now and then every interval.
async fn retention_job(app: Arc<App>) {
    let every = Duration::from_secs(app.live().config.store.retention_interval_s);
    loop {
        let _ = run_retention(&app).await;
        tokio::time::sleep(every).await;
    }
}

/// One retention pass; returns how many requests were deleted. Spend sums of periods before the
/// previous one go too (budgets read only the current one).
pub async fn run_retention(app: &Arc<App>) -> Option<usize> {
    let days = i64::from(app.live().config.store.retention_days);
    let now = crate::clock::now_unix_us();
    match app.store.prune_spend(now).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(deleted = n, "retention pass: spend sums of past periods"),
        Err(e) => tracing::error!(error = %e, "retention pass over spend sums failed"),
    }
    let cutoff = now - days * 86_400_000_000;
    let deleted = app.store.delete_older_than(cutoff, RETENTION_BATCH).await;
    pack_one_finished_day(app, now).await;
    match deleted {
        Ok(n) => {
            if n > 0 {
                tracing::info!(deleted = n, retention_days = days, "retention pass");
            }
            Some(n)
        }
        Err(e) => {
            tracing::error!(error = %e, "retention pass failed");
            None
        }
    }
}

/// Packs the requests of one finished day into blocks (PostgreSQL; see
/// `laptime_store::pg::compact`), and says what it saved.
async fn pack_one_finished_day(app: &Arc<App>, now: i64) {
    match app.store.pack_one_finished_day(now).await {
        Ok(None) => {}
        Ok(Some(p)) => tracing::info!(
            partition = %p.partition,
            requests = p.requests,
            blocks = p.blocks,
            partition_mb_before = p.before_bytes / 1_000_000,
            partition_mb_after = p.after_bytes / 1_000_000,
            rewritten = p.rewritten,
            took_ms = p.took.as_millis() as u64,
            "retention pass: a finished day's requests packed into blocks"
        ),
        Err(e) => tracing::warn!(error = %e, "packing a finished day's requests failed"),
    }
}

/// The accept queue asked of the kernel. std's (and so tokio's) `bind` asks for 128: a thousand
/// clients connecting at once overflow it, and the overflow waits out a 1 s SYN retry. The
/// kernel caps it at `net.core.somaxconn` (4096 by default since Linux 5.4).
pub const LISTEN_BACKLOG: u32 = 4096;

/// Binds the configured listen address with [`LISTEN_BACKLOG`], trying each address the name
/// resolves to.
pub async fn bind(addr: &str) -> std::io::Result<(tokio::net::TcpListener, SocketAddr)> {
    let mut last = None;
    for candidate in tokio::net::lookup_host(addr).await? {
        match listen_on(candidate) {
            Ok(listener) => {
                let local = listener.local_addr()?;
                return Ok((listener, local));
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolves to nothing",
        )
    }))
}

fn listen_on(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As std does: a restarted gateway can bind while the old one's connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}
