//! `GET /healthz` (the process answers) and `GET /readyz` (records can be written: the store
//! answers in time and the recorder is keeping up). Both answer without a token: they say
//! nothing about traffic.

use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use laptime_store::recorder::RecorderHealth;
use laptime_store::Store;
use tokio::time::Instant;

use crate::ApiState;

/// The store probe answers within this or the store counts as stalled. The probe takes the
/// write lock (see `Store::ping`), which a healthy store grants within a batch write (~350 ms at
/// worst); the store's own busy timeout (5 s) is longer than a probe should hang.
pub const PROBE_BOUND: Duration = Duration::from_secs(2);

/// A probe's answer is reused for this long: `/readyz` needs no token, and a probe per request
/// would let anyone contend for the store's write lock with the recorder.
pub const PROBE_REUSE: Duration = Duration::from_secs(1);

/// What the last store probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Ready,
    /// The probe answered, with an error.
    Unavailable,
    /// The probe did not answer within [`PROBE_BOUND`].
    Stalled,
}

impl Probe {
    fn reason(self) -> Option<&'static str> {
        match self {
            Probe::Ready => None,
            Probe::Unavailable => Some("store unavailable"),
            Probe::Stalled => Some("store stalled: the database did not answer within 2 s"),
        }
    }
}

/// The store probe's state, shared by every `/readyz` call: at most one probe runs at a time (a
/// stalled one is awaited again rather than joined by more), and its answer is reused for
/// [`PROBE_REUSE`].
#[derive(Default)]
pub struct Readiness {
    state: tokio::sync::Mutex<ProbeState>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Readiness")
    }
}

#[derive(Default)]
struct ProbeState {
    last: Option<(Instant, Probe)>,
    /// A probe that has not answered yet.
    pending: Option<tokio::task::JoinHandle<bool>>,
}

impl Readiness {
    async fn probe(&self, store: &Store) -> Probe {
        let deadline = Instant::now() + PROBE_BOUND;
        let Ok(mut state) = tokio::time::timeout_at(deadline, self.state.lock()).await else {
            // Another call has been waiting on a probe for the whole bound.
            return Probe::Stalled;
        };
        if let Some((at, found)) = state.last {
            if at.elapsed() < PROBE_REUSE && state.pending.is_none() {
                return found;
            }
        }
        let mut running = match state.pending.take() {
            Some(p) => p,
            None => {
                let store = store.clone();
                tokio::spawn(async move { store.ping().await })
            }
        };
        let found = match tokio::time::timeout_at(deadline, &mut running).await {
            Ok(Ok(true)) => Probe::Ready,
            Ok(_) => Probe::Unavailable,
            Err(_) => {
                state.pending = Some(running);
                Probe::Stalled
            }
        };
        state.last = Some((Instant::now(), found));
        found
    }
}

/// `GET /healthz`.
pub async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: `ready`, or 503 with the reason: the recorder's, `degraded: …` while it keeps
/// records it cannot write yet (its last batch failed — a full disk says so —, a batch has been
/// writing too long, the queue is nearly full), or that it stopped;
/// else the store probe's (it failed, or did not answer within [`PROBE_BOUND`]). Ready again
/// as soon as a batch is written and the store answers.
pub async fn readyz(State(s): State<ApiState>) -> Response {
    let recorder = s.app.recorder.health();
    match recorder {
        RecorderHealth::Ready => {}
        // Not writing at all.
        RecorderHealth::Stopped => return unavailable(&recorder.to_string()),
        // Serving, its records kept and written again until the store takes them.
        RecorderHealth::Stalled { .. }
        | RecorderHealth::Failing { .. }
        | RecorderHealth::QueueNearlyFull { .. } => {
            return unavailable(&format!("degraded: {recorder}"))
        }
    }
    match s.readiness.probe(&s.app.store).await.reason() {
        None => "ready".into_response(),
        Some(reason) => unavailable(reason),
    }
}

fn unavailable(reason: &str) -> Response {
    (http::StatusCode::SERVICE_UNAVAILABLE, reason.to_string()).into_response()
}
