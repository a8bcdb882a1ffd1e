//! The log: to stderr, filtered by `RUST_LOG` (default `info`), as text (ANSI colours only when
//! stderr is a terminal and `NO_COLOR` is not set) or as one JSON object per line
//! (`--log-format json`, for collectors).

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message and the
    /// event's fields).
    Json,
}

/// Installs the process's log subscriber.
pub(crate) fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => builder.with_ansi(colours()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Colours only for a person at a terminal: never into a pipe or a file, nor with `NO_COLOR`.
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}
