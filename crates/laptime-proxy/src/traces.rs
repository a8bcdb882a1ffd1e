//! Traces: one OTLP span per finished request (and one per upstream attempt), continuing the
//! client's W3C trace, exported off the request path. Off unless `[telemetry] otlp_endpoint` is
//! set.
//!
//! The request path only *offers* a finished record ([`Traces::offer`], from
//! `Finisher::finish`): a sampling check on the trace id and a `try_send` of a copy onto a
//! bounded queue. It never waits: a full queue drops the request's spans and counts them
//! (`laptime_otel_dropped_total{reason="queue_full"}`). One exporter task drains the queue in
//! batches, builds the spans there ([`span`]) and sends them ([`export`]); a batch the receiver
//! cannot take is tried again twice, then dropped and counted. Shutdown exports what is queued,
//! within a bound.
//!
//! Why not the OpenTelemetry SDK's tracer and `opentelemetry-otlp`: a span here is made after
//! the fact from a record that already holds every instant (wall-clock t0 plus microsecond
//! offsets) and every id (the client's trace and parent span, and the span id laptime already
//! sent upstream in `traceparent`). The SDK's tracer is built to time live spans and pick ids
//! itself, and its batch processor is a second queue whose drops `/metrics` could not show;
//! `opentelemetry-otlp` would bring a second HTTP stack (reqwest or tonic) beside the hyper and
//! rustls the gateway already has. So the OTLP messages are `opentelemetry-proto`'s types, built
//! directly and sent by [`export`] over hyper.

pub mod config;
pub mod export;
pub mod span;

use std::sync::Arc;
use std::time::Duration;

use laptime_core::timeline::RequestRecord;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::resource::v1::Resource;
use rand::RngCore;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use config::{OtlpProtocol, TelemetryConfig};
use export::{ExportError, Transport};
use span::Finished;

use crate::ingress::SpanIds;
use crate::metrics::Metrics;

/// Why spans were not exported: the `reason` of `laptime_otel_dropped_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// The queue was full when the request finished.
    QueueFull,
    /// The receiver could not be reached or refused the batch, after the retries.
    ExportFailed,
    /// The receiver accepted the batch but rejected these spans (partial success).
    Rejected,
    /// The request finished after shutdown's flush.
    ExporterStopped,
}

impl DropReason {
    pub const ALL: [DropReason; 4] = [
        DropReason::QueueFull,
        DropReason::ExportFailed,
        DropReason::Rejected,
        DropReason::ExporterStopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::ExportFailed => "export_failed",
            DropReason::Rejected => "rejected",
            DropReason::ExporterStopped => "exporter_stopped",
        }
    }
}

/// The waits before the second and third try of a batch the receiver could not take (a
/// `Retry-After` is honoured up to [`MAX_RETRY_AFTER`] instead).
const RETRY_BACKOFF: [Duration; 2] = [Duration::from_millis(250), Duration::from_secs(1)];
const MAX_RETRY_AFTER: Duration = Duration::from_secs(5);

/// The request path's handle: cheap to clone, never waits.
#[derive(Debug, Clone)]
pub struct Traces {
    tx: mpsc::Sender<Finished>,
    /// A trace is sampled when the upper 63 bits of its id's low half are below this.
    threshold: u64,
    metrics: Arc<Metrics>,
}

/// OTel's `TraceIdRatioBased` rule: the bound the trace id's low 8 bytes (shifted right once)
/// must be under, so that services sampling at the same ratio keep the same traces.
fn ratio_threshold(ratio: f64) -> u64 {
    (ratio.clamp(0.0, 1.0) * (1u64 << 63) as f64) as u64
}

/// Whether a trace is sampled at `threshold`.
fn sampled(ids: &SpanIds, threshold: u64) -> bool {
    let mut low = [0u8; 8];
    low.copy_from_slice(&ids.trace_id[8..]);
    ids.sampled && (u64::from_be_bytes(low) >> 1) < threshold
}

impl Traces {
    /// Queues the request's spans if its trace is sampled; drops and counts them if the queue
    /// is full. Called once per record, by `Finisher::finish`.
    pub fn offer(&self, record: &RequestRecord, ids: SpanIds) {
        if !sampled(&ids, self.threshold) {
            return;
        }
        let finished = Finished {
            record: record.clone(),
            ids,
        };
        if let Err(e) = self.tx.try_send(finished) {
            let (reason, f) = match e {
                mpsc::error::TrySendError::Full(f) => (DropReason::QueueFull, f),
                mpsc::error::TrySendError::Closed(f) => (DropReason::ExporterStopped, f),
            };
            self.metrics
                .count_otel_dropped(reason.as_str(), f.span_count());
        }
    }
}

/// The exporter task, stopped by [`Exporter::shutdown`].
#[derive(Debug)]
pub struct Exporter {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

/// Starts the exporter when `config` names an endpoint (validated before: an invalid one is an
/// error here too). `env` reads the headers' variable.
pub fn start(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
    instance: Option<&str>,
    metrics: Arc<Metrics>,
) -> Result<Option<(Traces, Exporter)>, String> {
    if config.otlp_endpoint.is_none() {
        return Ok(None);
    }
    let url = config
        .export_url()
        .ok_or_else(|| "telemetry.otlp_endpoint: not a valid OTLP endpoint".to_string())?;
    let headers = config.headers(env)?;
    let transport = Transport::new(
        url.clone(),
        config.otlp_protocol,
        headers,
        Duration::from_millis(config.export_timeout_ms),
    )?;
    let mut attributes: Vec<(String, String)> = instance
        .map(|i| ("service.instance.id".to_string(), i.to_string()))
        .into_iter()
        .collect();
    attributes.extend(config.resource_attributes.clone());
    let (tx, rx) = mpsc::channel(config.max_queue_size);
    let (stop, stopped) = oneshot::channel();
    for reason in DropReason::ALL {
        metrics.count_otel_dropped(reason.as_str(), 0);
    }
    let batcher = Batcher {
        rx,
        transport,
        resource: span::resource(&config.service_name, &attributes),
        max_batch: config.max_export_batch_size,
        delay: Duration::from_millis(config.schedule_delay_ms),
        metrics: metrics.clone(),
        failing: false,
    };
    let task = tokio::spawn(batcher.run(stopped));
    tracing::info!(
        endpoint = %url,
        protocol = config.otlp_protocol.as_str(),
        sampling_ratio = config.sampling_ratio,
        "exporting request spans over OTLP"
    );
    let traces = Traces {
        tx,
        threshold: ratio_threshold(config.sampling_ratio),
        metrics,
    };
    Ok(Some((traces, Exporter { stop, task })))
}

impl Exporter {
    /// Stops taking spans, exports what is queued within `within`, and ends the task; true when
    /// everything queued was sent (or dropped and counted) in time.
    pub async fn shutdown(self, within: Duration) -> bool {
        let _ = self.stop.send(());
        let mut task = self.task;
        match tokio::time::timeout(within, &mut task).await {
            Ok(_) => true,
            Err(_) => {
                task.abort();
                false
            }
        }
    }
}

/// The exporter task's state.
struct Batcher {
    rx: mpsc::Receiver<Finished>,
    transport: Transport,
    resource: Resource,
    max_batch: usize,
    delay: Duration,
    metrics: Arc<Metrics>,
    /// The last export failed (logged once per change).
    failing: bool,
}

impl Batcher {
    /// Batches until `stop` (or until every handle is gone), then exports what is queued.
    async fn run(mut self, mut stop: oneshot::Receiver<()>) {
        let mut batch = Vec::with_capacity(self.max_batch);
        let mut stopping = false;
        while !stopping {
            tokio::select! {
                biased;
                _ = &mut stop => break,
                n = self.rx.recv_many(&mut batch, self.max_batch) => if n == 0 { break },
            }
            // A batch waits at most `delay` from its first request for more.
            let deadline = Instant::now() + self.delay;
            while batch.len() < self.max_batch {
                let room = self.max_batch - batch.len();
                tokio::select! {
                    biased;
                    _ = &mut stop => { stopping = true; break }
                    r = tokio::time::timeout_at(deadline, self.rx.recv_many(&mut batch, room)) => match r {
                        Ok(n) if n > 0 => {}
                        _ => break,
                    },
                }
            }
            self.send(&mut batch).await;
        }
        // What finishes from now on is counted as `exporter_stopped`.
        self.rx.close();
        while self.rx.recv_many(&mut batch, self.max_batch).await > 0 {
            self.send(&mut batch).await;
        }
    }

    /// Builds the batch's spans and exports them, trying a transient failure again twice.
    async fn send(&mut self, batch: &mut Vec<Finished>) {
        let spans: u64 = batch.iter().map(Finished::span_count).sum();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![span::resource_spans(
                &self.resource,
                batch,
                &mut new_span_id,
            )],
        };
        batch.clear();
        let mut tries = RETRY_BACKOFF.iter();
        let result = loop {
            match self.transport.export(&request).await {
                Err(e) => match (e.retryable(), tries.next()) {
                    (Some(after), Some(backoff)) => {
                        tokio::time::sleep(after.map_or(*backoff, |a| a.min(MAX_RETRY_AFTER)))
                            .await;
                    }
                    _ => break Err(e),
                },
                ok => break ok,
            }
        };
        self.account(spans, result);
    }

    fn account(&mut self, spans: u64, result: Result<u64, ExportError>) {
        match result {
            Ok(rejected) => {
                let rejected = rejected.min(spans);
                // Drops first: whoever sees the batch exported sees its rejections too.
                if rejected > 0 {
                    self.metrics
                        .count_otel_dropped(DropReason::Rejected.as_str(), rejected);
                }
                self.metrics.count_otel_exported(spans - rejected);
                if self.failing {
                    self.failing = false;
                    tracing::info!("request spans are exported again");
                }
            }
            Err(e) => {
                self.metrics
                    .count_otel_dropped(DropReason::ExportFailed.as_str(), spans);
                if !self.failing {
                    self.failing = true;
                    tracing::warn!(error = %e, spans, "request spans could not be exported; dropped (laptime_otel_dropped_total)");
                } else {
                    tracing::debug!(error = %e, spans, "request spans dropped");
                }
            }
        }
    }
}

/// A random, non-zero span id for an attempt span.
fn new_span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        rand::thread_rng().fill_bytes(&mut id);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(trace_id: [u8; 16], sampled: bool) -> SpanIds {
        SpanIds {
            trace_id,
            span_id: [1; 8],
            parent_span_id: None,
            sampled,
        }
    }

    #[test]
    fn the_ratio_decides_by_the_trace_id_as_otel_does() {
        let low = |n: u64| {
            let mut t = [0xaa; 16];
            t[8..].copy_from_slice(&n.to_be_bytes());
            t
        };
        let all = ratio_threshold(1.0);
        let none = ratio_threshold(0.0);
        let half = ratio_threshold(0.5);
        assert!(sampled(&ids(low(u64::MAX), true), all));
        assert!(!sampled(&ids(low(0), true), none));
        // Half: the low 8 bytes (shifted) under 2^62.
        assert!(sampled(&ids(low((1 << 63) - 2), true), half));
        assert!(!sampled(&ids(low(1 << 63), true), half));
    }

    #[test]
    fn a_trace_the_client_did_not_sample_is_never_exported() {
        assert!(!sampled(&ids([7; 16], false), ratio_threshold(1.0)));
    }
}
