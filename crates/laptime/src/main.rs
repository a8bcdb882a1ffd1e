//! The `laptime` binary: a thin command line over the proxy, the store and the sim.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use laptime_api::reports::{FilterInput, RollupOut, UsageReport, WindowInput};
use laptime_core::views::RequestLogView;
use laptime_proxy::clock::now_unix_us;
use laptime_proxy::config::{Config, Provider, ReadConfig, DEFAULT_GROUP};
use laptime_proxy::server::{bind, Gateway};
use laptime_store::auth::{self, Scope};
use laptime_store::{usage, Store};

use laptime_bench as bench;

mod logs;
mod reload;

#[derive(Parser)]
#[command(
    name = "laptime",
    version,
    about = "An AI API gateway that records an honest latency timeline for every request"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (with no config: the embedded default, SQLite and an in-process sim).
    /// SIGHUP (or `laptime reload`) reads the config file again: channels, routes, prices,
    /// thresholds and limits apply to new requests; `[server]`, `[store]`, `[shared]` and
    /// `[telemetry]` need a restart.
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        listen: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How log lines (on stderr) are written: `text`, or `json` (one object per line).
        #[arg(long, value_enum, default_value_t = logs::LogFormat::Text)]
        log_format: logs::LogFormat,
    },
    /// Make a running gateway read its config file again (as SIGHUP does), through its
    /// `POST /api/admin/reload`; prints what changed and what needs a restart. A file that
    /// fails validation is refused whole (exit status 1) and the gateway keeps its config.
    Reload {
        /// The gateway's base URL (default: from the config's `server.listen`, as `serve`
        /// finds it: --config, `LAPTIME_LISTEN`).
        #[arg(long)]
        url: Option<String>,
        /// An admin token (or env LAPTIME_TOKEN).
        #[arg(long, env = "LAPTIME_TOKEN", hide_env_values = true)]
        token: String,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run the simulated upstream on its own.
    Sim {
        #[arg(long, default_value = "127.0.0.1:9090")]
        listen: String,
    },
    /// Manage workspaces.
    Workspace {
        #[command(subcommand)]
        command: WorkspaceCommand,
    },
    /// Manage tokens.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Print recent requests of a workspace as a table (from an existing store only: a
    /// directory without one is named and left as it is).
    #[command(after_help = REQUESTS_LEGEND)]
    Requests {
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[arg(long, default_value = auth::DEFAULT_WORKSPACE)]
        workspace: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the usage rollup of a window as a table (p50/p95/p99 per milestone; from an
    /// existing store only).
    #[command(after_help = USAGE_LEGEND)]
    Usage {
        /// The window, e.g. 15m, 1h, 7d.
        #[arg(long, default_value = "1h")]
        last: String,
        /// Group by a dimension: model, provider, channel, group, dialect, stream, status, outcome, classification, endpoint, reasoning_effort, tools_present, max_output_bucket, input_bucket, region.
        #[arg(long)]
        by: Option<String>,
        /// Only requests with this value (repeatable; an empty value asks for requests without
        /// one), e.g. `--where stream=true --where input_bucket=1k-4k`. Buckets: <256, 256-1k,
        /// 1k-4k, 4k-16k, 16k-64k, 64k+ (tokens, 1k = 1,024); efforts: none, minimal, low,
        /// medium, high, xhigh, max, budget, other.
        #[arg(long = "where", value_name = "DIMENSION=VALUE")]
        filters: Vec<String>,
        #[arg(long, default_value = auth::DEFAULT_WORKSPACE)]
        workspace: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the GraphQL schema (SDL) of the usage API.
    GraphqlSchema,
    /// Print each channel of a running gateway: in flight, circuit state, error rate, p95s.
    Channels {
        /// The gateway's base URL; default: the listen address `serve` would use with the same
        /// --config and environment (`LAPTIME_LISTEN`), http://127.0.0.1:8080 without either.
        #[arg(long)]
        url: Option<String>,
        #[arg(long)]
        config: Option<PathBuf>,
        /// A read or admin token (or env LAPTIME_TOKEN).
        #[arg(long, env = "LAPTIME_TOKEN", hide_env_values = true)]
        token: String,
        #[arg(long, default_value = auth::DEFAULT_WORKSPACE)]
        workspace: String,
    },
    /// Apply the store's pending migrations (safe while other instances start or run) and
    /// print its schema version. `laptime serve` applies them too; this runs them ahead of a
    /// rolling upgrade.
    Migrate {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Rate limits of workspaces and tokens: set, show, reset.
    Limits {
        #[command(subcommand)]
        command: LimitsCommand,
    },
    /// Budgets of workspaces and tokens: set, show, reset.
    Budget {
        #[command(subcommand)]
        command: BudgetCommand,
    },
    /// Prices: `laptime prices check` lists the models of recent requests whose cost is unknown
    /// (no `[[prices]]` entry covers them).
    Prices {
        #[command(subcommand)]
        command: PricesCommand,
    },
    /// Validate a config and print the effective configuration (secrets are env names only).
    CheckConfig {
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Load-test an OpenAI- or Anthropic-compatible endpoint and report each request's
    /// client-side timeline (same definitions as the gateway), with an A/B compare mode.
    Bench(Box<bench::BenchArgs>),
}

/// A limit on the command line: a number of at least 1, or `none` (no limit).
#[derive(Debug, Clone, Copy)]
struct LimitArg(Option<u64>);

fn limit_arg(s: &str) -> Result<LimitArg, String> {
    match s {
        "none" => Ok(LimitArg(None)),
        _ => match s.parse::<u64>() {
            Ok(n) if n > 0 => Ok(LimitArg(Some(n))),
            _ => Err(format!("{s:?} is not a number of at least 1, nor `none`")),
        },
    }
}

#[derive(Subcommand)]
enum LimitsCommand {
    /// Sets limits of a workspace, or with --token of one of its tokens; a limit not given
    /// keeps its value, `none` removes it. Running gateways apply it within a second.
    Set {
        #[arg(long)]
        workspace: String,
        /// A token's key id (`laptime token list`, or the GraphQL `tokens` query).
        #[arg(long)]
        token: Option<String>,
        /// Requests per minute.
        #[arg(long, value_parser = limit_arg)]
        rpm: Option<LimitArg>,
        /// Tokens (input and output) per minute.
        #[arg(long, value_parser = limit_arg)]
        tpm: Option<LimitArg>,
        /// Requests in flight at once.
        #[arg(long, value_parser = limit_arg)]
        concurrent: Option<LimitArg>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Prints the limits of one workspace (and its tokens), or of all.
    Show {
        #[arg(long)]
        workspace: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Removes every limit of a workspace, or with --token of one of its tokens.
    Reset {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        token: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum BudgetCommand {
    /// Sets the budget of a period (UTC day or month) of a workspace, or with --token of one of
    /// its tokens. `soft` flags requests once it is spent; `hard` refuses them (429) until the
    /// period ends. Running gateways apply it within a second.
    Set {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        token: Option<String>,
        #[arg(long)]
        usd: f64,
        #[arg(long, value_parser = ["day", "month"])]
        period: String,
        #[arg(long, value_parser = ["soft", "hard"], default_value = "hard")]
        mode: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Prints the budgets of one workspace (and its tokens), or of all, with this period's spend.
    Show {
        #[arg(long)]
        workspace: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Removes the budget of a period (both when --period is not given).
    Reset {
        #[arg(long)]
        workspace: String,
        #[arg(long)]
        token: Option<String>,
        #[arg(long, value_parser = ["day", "month"])]
        period: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum PricesCommand {
    /// Lists every model seen in the request log (all workspaces, over the window) with billed
    /// requests no price covers; exits with status 1 when there is one.
    Check {
        /// The window, e.g. 1h, 7d, 30d.
        #[arg(long, default_value = "30d")]
        last: String,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum WorkspaceCommand {
    Create {
        name: String,
        /// The channel group its requests use (default: `default`).
        #[arg(long)]
        group: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Routes a workspace's requests to a channel group; without GROUP, back to `default`.
    SetGroup {
        workspace: String,
        group: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    Create {
        #[arg(long)]
        workspace: String,
        #[arg(long, value_parser = ["proxy", "read", "admin"])]
        scope: String,
        /// A channel group for this token's calls, overriding its workspace's.
        #[arg(long)]
        group: Option<String>,
        #[arg(long)]
        data_dir: Option<PathBuf>,
        #[arg(long)]
        config: Option<PathBuf>,
    },
}

/// The columns of `laptime requests`.
const REQUESTS_LEGEND: &str =
    "Columns (milliseconds from the request's arrival unless named; `-` = did not happen):
  request_id      the id every response carries in x-laptime-request-id
  dialect         the API the client called: chat, responses, messages, gemini
  model           the model the client asked for
  outcome         completed, incomplete, upstream_error, upstream_closed_early, client_cancelled,
                  timeout, rate_limited, rejected, cache_hit, gateway_shutdown, gateway_crashed
  status          the HTTP status the client got
  hdrs_ms         upstream headers, from the winning attempt's dispatch (upstream_headers_ms)
  first_ms        first effective output: text, reasoning or tool arguments (first_response_ms)
  text_ms         first visible text (first_text_delta_ms)
  total_ms        the gateway done relaying (total_handler_ms)
  tok/s           output tokens per second from first visible text to upstream done
                  (visible_output_tps)
  classification  the first slow stage (thresholds in [thresholds], docs/config.md), ok, or failed";

/// The columns of `laptime usage`.
const USAGE_LEGEND: &str =
    "Per group: requests, errors (outcomes that are not a success) and their rate, cache hits,
failed attempts before an answer (failovers), tokens. Then one row per figure:
  metric   upstream_headers_ms (from the attempt's dispatch), first_sse_event_ms, first_response_ms
           (first effective output), first_text_delta_ms, upstream_done_ms, total_handler_ms
           (from the request's arrival), ttft_ms (first body byte) and upstream_ms (upstream done),
           both from the winning attempt's dispatch; visible_output_tps (tokens/s, the
           provider's output counts only) and estimated_visible_output_tps (tokens/s over the
           gateway's estimate of the output, where the provider counted none)
  p50 p95 p99  nearest-rank percentiles over per-minute rollups (within 1 % of exact)
  n        requests that had the figure
  nulls    requests without it (left out of the percentiles, never counted as 0)";

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The config a command runs on, with its problems still to report: the file's (one without
/// `[[channels]]` keeps the embedded default's channels), else the embedded default; the
/// environment's overrides applied.
fn read_config(path: Option<&Path>) -> Result<ReadConfig, String> {
    let mut read = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let mut read = ReadConfig::parse(&text, &p.display().to_string());
            read.keep_default_channels(&env);
            read
        }
        None => ReadConfig::whole(Config::embedded_default(&env)),
    };
    read.config.apply_env(&env);
    Ok(read)
}

/// The config of a command that does not serve: the text must read, its values are not judged.
fn load_config(path: Option<&Path>) -> Result<Config, String> {
    read_config(path)?.parsed().map_err(|e| e.to_string())
}

/// The configured store: PostgreSQL when `[store] url` (or `LAPTIME_STORE_URL`) names one,
/// else the SQLite file in the data dir (`dir` when given, else the configured one).
async fn open_configured(cfg: &Config, dir: Option<PathBuf>) -> Result<Store, String> {
    let zone = cfg.budgets.zone()?;
    if let Some(url) = &cfg.store.url {
        let store = Store::open_postgres(url).await.map_err(|e| {
            format!(
                "opening the store at {}: {e}",
                laptime_store::pg::redacted(url)
            )
        })?;
        return Ok(store.with_budget_zone(zone));
    }
    let dir = dir.unwrap_or_else(|| cfg.server.data_dir.clone());
    let store = Store::open_dir(&dir)
        .map_err(|e| format!("opening the store in {}: {e}", dir.display()))?;
    Ok(store.with_budget_zone(zone))
}

async fn open_store(config: Option<&Path>, data_dir: Option<PathBuf>) -> Result<Store, String> {
    open_configured(&load_config(config)?, data_dir).await
}

/// The store a read-only command reads: one that exists, never a new empty one (which would
/// answer "no requests" about a directory that was never the gateway's). A PostgreSQL store is
/// shared and exists by definition once reachable.
async fn open_existing_store(
    config: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> Result<Store, String> {
    let cfg = load_config(config)?;
    if cfg.store.url.is_none() {
        let dir = data_dir
            .clone()
            .unwrap_or_else(|| cfg.server.data_dir.clone());
        let file = dir.join(laptime_store::DB_FILE);
        if !file.is_file() {
            return Err(format!(
                "no store at {}: run `laptime serve` with this data directory first, or name \
                 the gateway's with --data-dir or --config",
                file.display()
            ));
        }
    }
    open_configured(&cfg, data_dir).await
}

/// Refuses a group no configured channel is in: requests routed there would find no channel.
fn check_group(config: Option<&Path>, group: Option<&str>) -> Result<(), String> {
    let Some(group) = group else { return Ok(()) };
    if load_config(config)?.groups().contains(&group) {
        return Ok(());
    }
    Err(format!(
        "no channel in the configuration is in group {group:?} (pass the gateway's --config)"
    ))
}

/// The machine's host name (Linux's, else `HOSTNAME`), for the default instance name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| env("HOSTNAME"))
        .unwrap_or_else(|| "localhost".into())
}

fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
}

/// jemalloc rather than glibc's malloc: glibc kept what a burst of streams had freed (RSS stayed
/// at its peak and grew with each burst), and cost more CPU per request (benchmarks/README.md,
/// issue 16).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // Its background thread gives freed pages back after about ten seconds, also when the
    // gateway has gone idle and allocates nothing that would trigger it. Without the thread
    // (should the platform refuse it) pages are still given back, only later.
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    let cli = Cli::parse();
    logs::init(match &cli.command {
        Command::Serve { log_format, .. } => *log_format,
        _ => logs::LogFormat::Text,
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut stderr = std::io::stderr().lock();
            let _ = writeln!(stderr, "laptime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve {
            config,
            listen,
            data_dir,
            log_format: _,
        } => {
            let mut read = read_config(config.as_deref())?;
            if let Some(l) = &listen {
                read.config.server.listen.clone_from(l);
            }
            if let Some(d) = &data_dir {
                read.config.server.data_dir.clone_from(d);
            }
            let cfg = read.validate(&env).map_err(|e| e.to_string())?;
            let source = reload::FileSource {
                path: config,
                listen,
                data_dir,
                sim: None,
            };
            let rt = runtime()?;
            let served = rt.block_on(serve(cfg, source));
            // Dropping a runtime waits for its blocking tasks without bound (a store call stuck
            // on a locked database, after a forced exit); everything that matters is done.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            served
        }
        Command::Sim { listen } => runtime()?.block_on(async move {
            let (listener, addr) = bind(&listen)
                .await
                .map_err(|e| format!("binding {listen}: {e}"))?;
            let shutdown = shutdown_signal();
            tracing::info!(%addr, "sim listening");
            out(&format!("laptime sim listening on http://{addr}"));
            laptime_sim::serve(listener, laptime_sim::Sim::new(), shutdown)
                .await
                .map_err(|e| e.to_string())
        }),
        Command::Workspace {
            command:
                WorkspaceCommand::Create {
                    name,
                    group,
                    data_dir,
                    config,
                },
        } => {
            check_group(config.as_deref(), group.as_deref())?;
            let ws = runtime()?.block_on(async {
                let store = open_store(config.as_deref(), data_dir).await?;
                store
                    .create_workspace(&name, group, now_unix_us())
                    .await
                    .map_err(|e| e.to_string())
            })?;
            out(&format!(
                "workspace {} created (id {}, group {})",
                ws.name,
                ws.id,
                ws.group.as_deref().unwrap_or(DEFAULT_GROUP)
            ));
            Ok(())
        }
        Command::Workspace {
            command:
                WorkspaceCommand::SetGroup {
                    workspace,
                    group,
                    data_dir,
                    config,
                },
        } => {
            check_group(config.as_deref(), group.as_deref())?;
            let ws = runtime()?.block_on(async {
                let store = open_store(config.as_deref(), data_dir).await?;
                store
                    .set_workspace_group(&workspace, group)
                    .await
                    .map_err(|e| e.to_string())
            })?;
            out(&format!(
                "workspace {} now uses group {}",
                ws.name,
                ws.group.as_deref().unwrap_or(DEFAULT_GROUP)
            ));
            Ok(())
        }
        Command::Token {
            command:
                TokenCommand::Create {
                    workspace,
                    scope,
                    group,
                    data_dir,
                    config,
                },
        } => {
            check_group(config.as_deref(), group.as_deref())?;
            let scope = Scope::parse(&scope).ok_or("scope must be proxy, read or admin")?;
            let t = runtime()?.block_on(async {
                let store = open_store(config.as_deref(), data_dir).await?;
                store
                    .create_token(&workspace, scope, group, now_unix_us())
                    .await
                    .map_err(|e| e.to_string())
            })?;
            out(&format!(
                "{} token for workspace {} (key id {}); shown once, store it now:\n{}",
                t.scope.as_str(),
                t.workspace.name,
                t.key_id,
                t.token
            ));
            Ok(())
        }
        Command::Requests {
            limit,
            workspace,
            data_dir,
            config,
        } => {
            let rows = runtime()?.block_on(async {
                let store = open_existing_store(config.as_deref(), data_dir).await?;
                let read = async {
                    let ws = store.workspace(&workspace).await?;
                    let all = usage::UsageFilter::default();
                    store.recent(&ws.id, all, None, limit.clamp(1, 500)).await
                };
                read.await.map_err(|e| e.to_string())
            })?;
            let reading = laptime_api::reports::reading(&load_config(config.as_deref())?);
            out(&requests_table(
                &rows
                    .iter()
                    .map(|r| RequestLogView::new(r, &reading))
                    .collect::<Vec<_>>(),
            ));
            Ok(())
        }
        Command::Usage {
            last,
            by,
            filters,
            workspace,
            data_dir,
            config,
        } => {
            let dims = match by.as_deref() {
                None => Vec::new(),
                Some(b) => vec![usage::GroupDim::parse(b)
                    .ok_or_else(|| format!("--by: {b:?} is not a dimension"))?],
            };
            let window = WindowInput {
                last: Some(last),
                from: None,
                to: None,
            };
            let (from, to) = window.resolve(now_unix_us())?;
            let filter = usage_filter(&filters)?;
            let result = runtime()?.block_on(async {
                let store = open_existing_store(config.as_deref(), data_dir).await?;
                let read = async {
                    let ws = store.workspace(&workspace).await?;
                    store.usage(&ws.id, (from, to), filter.clone(), dims).await
                };
                read.await.map_err(|e| e.to_string())
            })?;
            out(&usage_table(&UsageReport::new(&result, &filter)));
            Ok(())
        }
        Command::GraphqlSchema => {
            out(&laptime_api::graphql::sdl());
            Ok(())
        }
        Command::Channels {
            url,
            config,
            token,
            workspace,
        } => {
            let url = match url {
                Some(url) => url,
                None => gateway_url(&load_config(config.as_deref())?.server.listen),
            };
            runtime()?.block_on(channels(url, token, workspace))
        }
        Command::Reload { url, token, config } => {
            let url = match url {
                Some(u) => u,
                None => gateway_url(&load_config(config.as_deref())?.server.listen),
            };
            out(&runtime()?.block_on(reload::request(&url, &token))?);
            Ok(())
        }
        Command::Migrate { config, data_dir } => runtime()?.block_on(async {
            let store = open_store(config.as_deref(), data_dir).await?;
            let version = store.schema_version().await.map_err(|e| e.to_string())?;
            out(&format!(
                "store {} is at schema version {version} (this laptime's)",
                store.location()
            ));
            Ok(())
        }),
        Command::Limits { command } => runtime()?.block_on(limits_command(command)),
        Command::Budget { command } => runtime()?.block_on(budget_command(command)),
        Command::Prices {
            command:
                PricesCommand::Check {
                    last,
                    data_dir,
                    config,
                },
        } => prices_check(&last, config.as_deref(), data_dir),
        Command::CheckConfig { config } => {
            let cfg = read_config(config.as_deref())?
                .validate(&env)
                .map_err(|e| e.to_string())?;
            out(&cfg.effective().to_toml());
            Ok(())
        }
        Command::Bench(args) => runtime()?.block_on(bench::run(*args)),
    }
}

/// What a `show` lists: the id of the workspace asked for (every one when `None`), and each
/// workspace's name by id, to print names rather than ids.
async fn listing_scope(
    store: &Store,
    workspace: Option<String>,
) -> Result<(Option<String>, std::collections::HashMap<String, String>), String> {
    let e = |e: laptime_store::StoreError| e.to_string();
    let ws = match workspace {
        Some(w) => Some(store.workspace(&w).await.map_err(e)?.id),
        None => None,
    };
    let names = store
        .list_workspaces()
        .await
        .map_err(e)?
        .into_iter()
        .map(|w| (w.id, w.name))
        .collect();
    Ok((ws, names))
}

/// `laptime limits set | show | reset`.
async fn limits_command(command: LimitsCommand) -> Result<(), String> {
    use laptime_core::limit::Limits;
    let e = |e: laptime_store::StoreError| e.to_string();
    match command {
        LimitsCommand::Set {
            workspace,
            token,
            rpm,
            tpm,
            concurrent,
            data_dir,
            config,
        } => {
            let store = open_store(config.as_deref(), data_dir).await?;
            let ws = store.workspace(&workspace).await.map_err(e)?;
            let current = store
                .list_limits(Some(&ws.id))
                .await
                .map_err(e)?
                .into_iter()
                .find(|r| r.key_id == token)
                .map(|r| r.limits)
                .unwrap_or_default();
            let given = |arg: Option<LimitArg>, now: Option<u64>| arg.map_or(now, |a| a.0);
            let limits = Limits {
                rpm: given(rpm, current.rpm),
                tpm: given(tpm, current.tpm),
                concurrent: given(concurrent, current.concurrent),
            };
            store
                .set_limits(&ws.id, token.as_deref(), limits, now_unix_us())
                .await
                .map_err(e)?;
            out(&limits_line(&ws.name, token.as_deref(), &limits));
            Ok(())
        }
        LimitsCommand::Show {
            workspace,
            data_dir,
            config,
        } => {
            let store = open_existing_store(config.as_deref(), data_dir).await?;
            let (ws, names) = listing_scope(&store, workspace).await?;
            let rows = store.list_limits(ws.as_deref()).await.map_err(e)?;
            if rows.is_empty() {
                out("no limits are set");
            }
            for r in rows {
                let name = names.get(&r.workspace_id).unwrap_or(&r.workspace_id);
                out(&limits_line(name, r.key_id.as_deref(), &r.limits));
            }
            print_spend(&store, ws.as_deref(), &names).await
        }
        LimitsCommand::Reset {
            workspace,
            token,
            data_dir,
            config,
        } => {
            let store = open_store(config.as_deref(), data_dir).await?;
            let ws = store.workspace(&workspace).await.map_err(e)?;
            store
                .set_limits(&ws.id, token.as_deref(), Limits::default(), now_unix_us())
                .await
                .map_err(e)?;
            out(&limits_line(&ws.name, token.as_deref(), &Limits::default()));
            Ok(())
        }
    }
}

/// `laptime budget set | show | reset`.
async fn budget_command(command: BudgetCommand) -> Result<(), String> {
    use laptime_core::limit::{BudgetMode, Period};
    let e = |e: laptime_store::StoreError| e.to_string();
    let period_of = |p: &str| Period::parse(p).ok_or_else(|| format!("--period: {p:?}"));
    match command {
        BudgetCommand::Set {
            workspace,
            token,
            usd,
            period,
            mode,
            data_dir,
            config,
        } => {
            if !usd.is_finite() || usd < 0.0 {
                return Err(format!("--usd: {usd} is not a number of USD ≥ 0"));
            }
            let period = period_of(&period)?;
            let mode = BudgetMode::parse(&mode).ok_or_else(|| format!("--mode: {mode:?}"))?;
            let store = open_store(config.as_deref(), data_dir).await?;
            let ws = store.workspace(&workspace).await.map_err(e)?;
            let nano = (usd * 1e9).round() as u64;
            store
                .set_budget(
                    &ws.id,
                    token.as_deref(),
                    period,
                    Some((nano, mode)),
                    now_unix_us(),
                )
                .await
                .map_err(e)?;
            out(&format!(
                "workspace {}{}: {} budget ${usd} ({})",
                ws.name,
                token.map(|t| format!(" token {t}")).unwrap_or_default(),
                period.as_str(),
                mode.as_str()
            ));
            Ok(())
        }
        BudgetCommand::Show {
            workspace,
            data_dir,
            config,
        } => {
            let store = open_existing_store(config.as_deref(), data_dir).await?;
            let (ws, names) = listing_scope(&store, workspace).await?;
            let rows = store
                .list_budgets(ws.as_deref(), now_unix_us())
                .await
                .map_err(e)?;
            if rows.is_empty() {
                out("no budgets are set");
            }
            let zone = store.budget_zone().name().to_string();
            for r in rows {
                let name = names.get(&r.workspace_id).unwrap_or(&r.workspace_id);
                out(&format!(
                    "workspace {name}{}: {} budget ${:.6} ({}), spent ${:.6}, resets {} ({zone})",
                    r.key_id.map(|t| format!(" token {t}")).unwrap_or_default(),
                    r.budget.period.as_str(),
                    laptime_core::cost::nano_to_usd(r.budget.nano_usd),
                    r.budget.mode.as_str(),
                    laptime_core::cost::nano_to_usd(r.spent_nano_usd),
                    laptime_core::views::rfc3339(r.resets_at_us)
                ));
            }
            print_spend(&store, ws.as_deref(), &names).await
        }
        BudgetCommand::Reset {
            workspace,
            token,
            period,
            data_dir,
            config,
        } => {
            let periods = match period {
                Some(p) => vec![period_of(&p)?],
                None => Period::ALL.to_vec(),
            };
            let store = open_store(config.as_deref(), data_dir).await?;
            let ws = store.workspace(&workspace).await.map_err(e)?;
            for p in periods {
                store
                    .set_budget(&ws.id, token.as_deref(), p, None, now_unix_us())
                    .await
                    .map_err(e)?;
                out(&format!(
                    "workspace {}: {} budget removed",
                    ws.name,
                    p.as_str()
                ));
            }
            Ok(())
        }
    }
}

/// What every workspace and token spent today and this month (in the budget zone), budget or
/// not: one line each, the workspace's whole first.
async fn print_spend(
    store: &Store,
    workspace_id: Option<&str>,
    names: &std::collections::HashMap<String, String>,
) -> Result<(), String> {
    let rows = store
        .list_spend(workspace_id, now_unix_us())
        .await
        .map_err(|e| e.to_string())?;
    let zone = store.budget_zone().name();
    if rows.is_empty() {
        out(&format!("no spend today or this month ({zone})"));
    }
    for r in rows {
        let name = names.get(&r.workspace_id).unwrap_or(&r.workspace_id);
        out(&format!(
            "workspace {name}{}: spent ${:.6} today, ${:.6} this month ({zone})",
            r.key_id.map(|t| format!(" token {t}")).unwrap_or_default(),
            laptime_core::cost::nano_to_usd(r.day_nano_usd),
            laptime_core::cost::nano_to_usd(r.month_nano_usd),
        ));
    }
    Ok(())
}

fn limits_line(workspace: &str, token: Option<&str>, l: &laptime_core::limit::Limits) -> String {
    let v = |n: Option<u64>| n.map_or("none".to_string(), |n| n.to_string());
    format!(
        "workspace {workspace}{}: rpm {} tpm {} concurrent {}",
        token.map(|t| format!(" token {t}")).unwrap_or_default(),
        v(l.rpm),
        v(l.tpm),
        v(l.concurrent)
    )
}

/// `laptime prices check`: models with billed requests and no price, over every workspace.
fn prices_check(
    last: &str,
    config: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> Result<(), String> {
    let cfg = load_config(config)?;
    let prices = cfg.price_table().map_err(|e| e.join("; "))?;
    let window = WindowInput {
        last: Some(last.to_string()),
        from: None,
        to: None,
    };
    let (from, to) = window.resolve(now_unix_us())?;
    let unpriced = runtime()?.block_on(async {
        let store = open_existing_store(config, data_dir).await?;
        let read = async {
            let mut by_model: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
            for ws in store.list_workspaces().await? {
                let all = usage::UsageFilter::default();
                let result = store
                    .usage(&ws.id, (from, to), all, vec![usage::GroupDim::Model])
                    .await?;
                for (key, rollup) in result.groups {
                    let model = key.first().and_then(|(_, v)| v.clone());
                    let Some(model) = model else { continue };
                    let entry = by_model.entry(model).or_default();
                    entry.0 += rollup.requests;
                    entry.1 += rollup.cost_unpriced;
                }
            }
            laptime_store::Result::Ok(by_model)
        };
        read.await.map_err(|e| e.to_string())
    })?;
    let missing: Vec<_> = unpriced
        .into_iter()
        .filter(|(model, (_, unpriced))| *unpriced > 0 || !prices.prices_model(model))
        .collect();
    if missing.is_empty() {
        out(&format!("every model seen in the last {last} has a price"));
        return Ok(());
    }
    let mut table = format!("{:<40} {:>10} {:>10}\n", "model", "requests", "unpriced");
    for (model, (requests, unpriced)) in &missing {
        table.push_str(&format!("{model:<40} {requests:>10} {unpriced:>10}\n"));
    }
    out(table.trim_end());
    Err(format!(
        "{} model(s) seen in the last {last} without a price: add [[prices]] entries",
        missing.len()
    ))
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "-".into())
}

fn requests_table(rows: &[RequestLogView]) -> String {
    let mut s = format!(
        "{:<36} {:<10} {:<14} {:<22} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n",
        "request_id",
        "dialect",
        "model",
        "outcome",
        "status",
        "hdrs_ms",
        "first_ms",
        "text_ms",
        "total_ms",
        "tok/s",
        "classification"
    );
    for r in rows {
        let t = &r.other.timing;
        s.push_str(&format!(
            "{:<36} {:<10} {:<14} {:<22} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}  {}\n",
            r.request_id,
            r.dialect,
            r.model.as_deref().unwrap_or("-"),
            r.outcome,
            r.status,
            fmt_ms(t.upstream_headers_ms),
            fmt_ms(t.first_response_ms),
            fmt_ms(t.first_text_delta_ms),
            fmt_ms(t.total_handler_ms),
            fmt_ms(t.visible_output_tps),
            r.classification
        ));
    }
    s
}

fn usage_table(u: &UsageReport) -> String {
    let mut s = format!(
        "window {} .. {}\n{}\n\n",
        u.window.from, u.window.to, u.percentile_method
    );
    let mut section = |title: &str, r: &RollupOut| {
        s.push_str(&format!(
            "{title}: {} requests, {} errors ({}), {} cache hits, {} failovers, tokens in {} out {} (cache read {}, write {})\n",
            r.request_count,
            r.error_count,
            r.error_rate.map(|e| format!("{:.1}%", e * 100.0)).unwrap_or_else(|| "-".into()),
            r.cache_hit_count,
            r.failover_total,
            r.input_tokens,
            r.output_tokens,
            r.cache_read_tokens,
            r.cache_write_tokens
        ));
        s.push_str(&format!(
            "  {:<28} {:>10} {:>10} {:>10} {:>8} {:>6}\n",
            "metric", "p50", "p95", "p99", "n", "nulls"
        ));
        for (name, m) in [
            ("upstream_headers_ms", &r.upstream_headers_ms),
            ("first_sse_event_ms", &r.first_sse_event_ms),
            ("first_response_ms", &r.first_response_ms),
            ("first_text_delta_ms", &r.first_text_delta_ms),
            ("upstream_done_ms", &r.upstream_done_ms),
            ("total_handler_ms", &r.total_handler_ms),
            ("ttft_ms", &r.ttft_ms),
            ("upstream_ms", &r.upstream_ms),
            ("visible_output_tps", &r.visible_output_tps),
            (
                "estimated_visible_output_tps",
                &r.estimated_visible_output_tps,
            ),
        ] {
            s.push_str(&format!(
                "  {:<28} {:>10} {:>10} {:>10} {:>8} {:>6}\n",
                name,
                fmt_ms(m.p50),
                fmt_ms(m.p95),
                fmt_ms(m.p99),
                m.count,
                m.null_count
            ));
        }
    };
    section(&u.population.description, &u.rollup);
    for g in &u.groups {
        section(&g.population.description, &g.rollup);
    }
    s
}

/// The URL a local client reaches a gateway listening on `listen` at (an unspecified address
/// such as 0.0.0.0 is reached on loopback).
fn gateway_url(listen: &str) -> String {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => {
            let ip: std::net::IpAddr = if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            };
            format!("http://{}", std::net::SocketAddr::new(ip, addr.port()))
        }
        _ => format!("http://{listen}"),
    }
}

/// `usage --where DIMENSION=VALUE …` as the usage API's filter (the same names and checks).
fn usage_filter(pairs: &[String]) -> Result<usage::UsageFilter, String> {
    let mut f = FilterInput::default();
    for pair in pairs {
        let (dim, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("--where: {pair:?} is not DIMENSION=VALUE"))?;
        let value = value.to_string();
        let flag = |v: &str| match v {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(format!("--where {dim}: {v:?} is not true or false")),
        };
        match usage::GroupDim::parse(dim) {
            Some(usage::GroupDim::Model) => f.model = Some(value),
            Some(usage::GroupDim::Provider) => f.provider = Some(value),
            Some(usage::GroupDim::Channel) => f.channel = Some(value),
            Some(usage::GroupDim::Group) => f.group = Some(value),
            Some(usage::GroupDim::Dialect) => f.dialect = Some(value),
            Some(usage::GroupDim::Stream) => f.stream = Some(flag(&value)?),
            Some(usage::GroupDim::Status) => {
                f.status = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--where status: {value:?} is not a status"))?,
                )
            }
            Some(usage::GroupDim::Outcome) => f.outcome = Some(value),
            Some(usage::GroupDim::Classification) => f.classification = Some(value),
            Some(usage::GroupDim::Endpoint) => f.endpoint = Some(value),
            Some(usage::GroupDim::ReasoningEffort) => f.reasoning_effort = Some(value),
            Some(usage::GroupDim::ToolsPresent) => f.tools_present = Some(flag(&value)?),
            Some(usage::GroupDim::MaxOutputBucket) => f.max_output_bucket = Some(value),
            Some(usage::GroupDim::InputBucket) => f.input_bucket = Some(value),
            Some(usage::GroupDim::Region) => f.region = Some(value),
            None => return Err(format!("--where: {dim:?} is not a dimension")),
        }
    }
    usage::UsageFilter::try_from(f).map_err(|e| format!("--where {e}"))
}

/// Asks a running gateway for its channels (live state) and their last-15-minute usage.
async fn channels(url: String, token: String, workspace: String) -> Result<(), String> {
    use http_body_util::BodyExt;
    let query = serde_json::json!({
        "query": "query($ws: ID!) { channels { name provider group inflight circuit }
            instances { instance inFlight ageMs channels { name inFlight } }
            usage(workspaceId: $ws, window: {last: \"15m\"}, groupBy: [CHANNEL]) {
              groups { key { value } rollup { requestCount errorRate upstreamHeadersMs { p95 } firstTextDeltaMs { p95 } latencyMs { p95 } } } } }",
        "variables": {"ws": workspace},
    });
    let client = bench::client::client(std::time::Duration::from_secs(5))?;
    let req = http::Request::post(format!("{}/graphql", url.trim_end_matches('/')))
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(laptime_proxy::outbody::OutBody::full(bytes::Bytes::from(
            query.to_string(),
        )))
        .map_err(|e| format!("bad URL {url}: {e}"))?;
    let resp = client
        .request(req)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = resp.status();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{url}: {e}"))?
        .to_bytes();
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not a GraphQL answer ({e})"))?;
    if let Some(message) = v["errors"][0]["message"].as_str() {
        return Err(format!("{url} ({status}): {message}"));
    }
    let groups = v["data"]["usage"]["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut s = format!(
        "{:<20} {:<10} {:<10} {:>9} {:<10} {:>9} {:>10} {:>12} {:>12} {:>12}\n",
        "channel",
        "provider",
        "group",
        "inflight",
        "circuit",
        "requests",
        "errors",
        "p95 headers",
        "p95 text",
        "p95 total"
    );
    let ms = |v: &serde_json::Value| {
        v.as_f64()
            .map(|v| format!("{v:.1}"))
            .unwrap_or_else(|| "-".into())
    };
    for c in v["data"]["channels"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let name = c["name"].as_str().unwrap_or("-");
        let g = groups
            .iter()
            .find(|g| g["key"][0]["value"].as_str() == Some(name));
        let r = g.map(|g| &g["rollup"]);
        s.push_str(&format!(
            "{:<20} {:<10} {:<10} {:>9} {:<10} {:>9} {:>10} {:>12} {:>12} {:>12}\n",
            name,
            c["provider"].as_str().unwrap_or("-"),
            c["group"].as_str().unwrap_or("-"),
            c["inflight"],
            c["circuit"].as_str().unwrap_or("-"),
            r.map(|r| r["requestCount"].to_string())
                .unwrap_or_else(|| "0".into()),
            r.and_then(|r| r["errorRate"].as_f64())
                .map(|e| format!("{:.1}%", e * 100.0))
                .unwrap_or_else(|| "-".into()),
            r.map(|r| ms(&r["upstreamHeadersMs"]["p95"]))
                .unwrap_or_else(|| "-".into()),
            r.map(|r| ms(&r["firstTextDeltaMs"]["p95"]))
                .unwrap_or_else(|| "-".into()),
            r.map(|r| ms(&r["latencyMs"]["p95"]))
                .unwrap_or_else(|| "-".into()),
        ));
    }
    s.push_str(&instances_section(&v["data"]["instances"]));
    out(&s);
    Ok(())
}

/// The fleet's instances (each one's requests in flight, per channel), as `laptime channels`
/// prints them after the channels.
fn instances_section(instances: &serde_json::Value) -> String {
    let mut s = format!(
        "\n{:<28} {:>9} {:>8}  {}\n",
        "instance", "inflight", "age", "inflight per channel"
    );
    for i in instances.as_array().cloned().unwrap_or_default() {
        let channels: Vec<String> = i["channels"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|c| format!("{}={}", c["name"].as_str().unwrap_or("-"), c["inFlight"]))
            .collect();
        s.push_str(&format!(
            "{:<28} {:>9} {:>8}  {}\n",
            i["instance"].as_str().unwrap_or("-"),
            i["inFlight"],
            i["ageMs"]
                .as_f64()
                .map(|ms| format!("{:.1}s", ms / 1000.0))
                .unwrap_or_else(|| "-".into()),
            channels.join(" ")
        ));
    }
    s
}

async fn serve(mut cfg: Config, mut source: reload::FileSource) -> Result<(), String> {
    let store = open_configured(&cfg, None).await?;
    // Bind before making the first token, so a start that cannot listen prints no token.
    let listen = cfg.server.listen.clone();
    let (listener, addr) = bind(&listen)
        .await
        .map_err(|e| format!("binding {listen}: {e}"))?;
    if cfg.server.instance.is_none() {
        cfg.server.instance = Some(format!("{}:{}", host_name(), addr.port()));
    }
    let bootstrap = env("LAPTIME_BOOTSTRAP_TOKEN");
    match store
        .bootstrap(bootstrap.clone(), now_unix_us())
        .await
        .map_err(|e| e.to_string())?
    {
        Some(t) if bootstrap.is_some() => {
            tracing::info!(key_id = %t.key_id, "LAPTIME_BOOTSTRAP_TOKEN installed as the admin token");
        }
        Some(t) => out(&format!(
            "First start: admin token for workspace {} (shown once, store it now):\n{}",
            t.workspace.name, t.token
        )),
        None => {}
    }
    let sim = start_embedded_sim(&mut cfg).await?;
    source.sim = sim.as_ref().map(|(_, url)| url.clone());
    let gateway = Gateway::start(cfg, store, &env)
        .await
        .map_err(|e| e.to_string())?;
    gateway.app.set_reload_source(Box::new(source));
    reload::on_sighup(gateway.app.clone());
    let router = laptime_api::router(gateway.app.clone());
    let app = gateway.app.clone();
    let signals = count_signals();
    let first = wait_signals(signals.clone(), 1);
    tracing::info!(%addr, "laptime listening");
    out(&format!("laptime listening on http://{addr}"));
    let mut served = Box::pin(gateway.serve(listener, router, first));
    let second = tokio::select! {
        served = &mut served => Some(served.map_err(|e| e.to_string())),
        () = wait_signals(signals, 2) => None,
    };
    let Some(served) = second else {
        let why = forced_exit(&app).await;
        // Dropping the server would stop the serving threads' runtimes, and each stream still
        // open would record itself as cancelled by its client. Kept alive until the process
        // ends, they stay in the in-flight journal, which the next start records as cut by
        // the gateway (`gateway_crashed`).
        std::mem::forget(served);
        return Err(why);
    };
    if let Some((sim, _)) = sim {
        sim.abort();
    }
    served
}

/// How long a forced exit waits for the records already queued: long enough for a healthy
/// store (a batch takes well under a second), short enough that the operator who asked twice
/// is not kept waiting by a stalled one.
const FORCED_FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// A second SIGINT/SIGTERM during the drain: the operator wants out now. What is queued is
/// flushed if the store is quick; streams still in flight are cut by the exit and stay in the
/// in-flight journal, which the next start records.
async fn forced_exit(app: &laptime_proxy::App) -> String {
    let queued = app.recorder.queue_depth();
    let running = app.inflight.running();
    tracing::error!(
        queued_records = queued,
        requests_in_flight = running.requests,
        streams_in_flight = running.streams,
        "second signal during the drain: forcing the exit, {} streams in flight are cut",
        running.streams
    );
    if app.recorder.flush(FORCED_FLUSH).await {
        tracing::info!(
            records = queued,
            "queued records flushed before the forced exit"
        );
    } else {
        tracing::error!(
            queued_records = app.recorder.queue_depth(),
            "queued records not flushed within {} s; exiting without them",
            FORCED_FLUSH.as_secs()
        );
    }
    "forced exit: a second signal arrived during the graceful drain".into()
}

/// Counts SIGINT and SIGTERM from now on: the handlers are installed when this is called (not
/// when a future is first polled), so a signal right after "listening" is printed is not lost.
/// The first starts the graceful drain, a second forces the exit.
fn count_signals() -> tokio::sync::watch::Receiver<u32> {
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        tokio::spawn(async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => loop {
                    tokio::select! {
                        _ = term.recv() => {},
                        _ = int.recv() => {},
                    }
                    tx.send_modify(|n| *n += 1);
                },
                _ => loop {
                    if tokio::signal::ctrl_c().await.is_err() {
                        break;
                    }
                    tx.send_modify(|n| *n += 1);
                },
            }
        });
    }
    #[cfg(not(unix))]
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            tx.send_modify(|n| *n += 1);
        }
    });
    rx
}

/// Resolves once `n` signals have arrived (never, when no handler could be installed).
async fn wait_signals(mut signals: tokio::sync::watch::Receiver<u32>, n: u32) {
    if signals.wait_for(|seen| *seen >= n).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Starts the in-process sim when a `sim` channel has no `base_url` (the embedded default's
/// offline channel), and points those channels at it; its task and base URL.
async fn start_embedded_sim(
    cfg: &mut Config,
) -> Result<Option<(tokio::task::JoinHandle<()>, String)>, String> {
    let needs_sim = cfg
        .channels
        .iter()
        .any(|c| c.provider == Provider::Sim && c.base_url.is_none());
    if !needs_sim {
        return Ok(None);
    }
    let (addr, handle) = laptime_sim::spawn_local(laptime_sim::Sim::new())
        .await
        .map_err(|e| format!("in-process sim: {e}"))?;
    let url = format!("http://{addr}");
    for c in &mut cfg.channels {
        if c.provider == Provider::Sim && c.base_url.is_none() {
            reload::point_at_sim(c, &url);
        }
    }
    Ok(Some((handle, url)))
}

/// SIGINT or SIGTERM. The handlers are installed when this is called (not when the future is
/// first polled), so a signal that arrives right after "listening" is printed is not lost.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {},
                        _ = int.recv() => {},
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
