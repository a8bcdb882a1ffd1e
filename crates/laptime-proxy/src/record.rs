//! Record: what the request path learns about one request, and the single place where it
//! becomes a [`RequestRecord`], is observed into the metrics and is handed to the recorder.
//! `Finisher::finish` consumes the finisher, so a request is recorded exactly once.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use laptime_core::cost::{estimate_input_tokens, Billed, PriceTable};
use laptime_core::observe::StreamSummary;
use laptime_core::slow::{self, Flag, Thresholds};
use laptime_core::timeline::{
    self, Attempt, DeadlineKind, ErrorClass, Exchange, Hedge, InBandCarrier, Marks, Outcome,
    RequestRecord, RequestShape,
};
use laptime_core::usage::Tokens;
use laptime_core::Dialect;
use laptime_store::recorder::Recorder;
use tokio::time::Instant;

use crate::metrics::Metrics;
use crate::routing::InflightGuard;

/// Everything known about a request while it is in flight.
#[derive(Debug)]
pub struct Pending {
    /// t0: the gateway has the request head.
    pub t0: Instant,
    pub created_at_us: i64,
    pub request_id: String,
    pub dialect: Dialect,
    /// The dialect of the channel called last (the answering one once an attempt won).
    pub upstream_dialect: Option<Dialect>,
    pub workspace_id: Option<String>,
    pub key_id: Option<String>,
    pub model: Option<String>,
    pub provider: Option<String>,
    pub channel: Option<String>,
    pub group: Option<String>,
    pub stream: bool,
    pub shape: RequestShape,
    pub region: Option<String>,
    pub instance: Option<String>,
    pub trace_id: Option<String>,
    pub marks: Marks,
    pub channel_inflight: Option<u32>,
    pub attempts: Vec<Attempt>,
    pub hedge: Hedge,
    /// Answered from the gateway's response cache.
    pub cached: bool,
    /// Client fields a translation left out on purpose (hints the upstream has no use for),
    /// told to the client in `x-laptime-translation-omitted`.
    pub translation_omitted: Vec<String>,
    /// Relayed without observation (`[server] observe = false`): stream marks are absent.
    pub unobserved: bool,
    /// The answer was cut and another channel continued it.
    pub continued: bool,
    /// The request body's size, for estimating its input tokens where the provider reports
    /// none (not stored).
    pub body_bytes: Option<usize>,
    /// The limit or budget that refused the request.
    pub refused_by: Option<laptime_core::limit::Limit>,
    /// Admitted while a soft budget was spent.
    pub over_budget: bool,
    /// The input tokens admission estimated with the tokenizer (only under a tokens-per-minute
    /// limit); the settlement of a request without usage uses it, as admission charged it.
    pub admitted_input_tokens: Option<u64>,
    /// The request's hold on its rate limits (a place in flight, the token estimate to
    /// settle), released when the request is recorded.
    pub admission: Option<crate::limits::Ticket>,
    /// The request's entry in the gateway's in-flight registry (absent when the registry was
    /// full, or for a pending record built alone, in tests).
    pub inflight: Option<crate::inflight::Slot>,
    /// The endpoint called, the answer's bytes relayed and the channel key used (the request's
    /// bytes are `body_bytes`).
    pub exchange: Exchange,
    /// Provider objects the answer created or named, which live on the answering channel (and
    /// key): remembered when the request is recorded.
    pub objects: Vec<(laptime_core::endpoint::ObjectKind, String)>,
    /// The gateway's span for the request and the client's span above it, for trace export
    /// (not stored: the record keeps the trace id only).
    pub span: Option<crate::ingress::SpanIds>,
    /// What the client has been sent of the timing in-band so far: noted where the bytes are
    /// handed to its connection (the comment, the trailers, `Server-Timing`).
    pub in_band: InBandCarrier,
}

impl Pending {
    pub fn new(t0: Instant, created_at_us: i64, request_id: String, dialect: Dialect) -> Self {
        Pending {
            t0,
            created_at_us,
            request_id,
            dialect,
            upstream_dialect: None,
            workspace_id: None,
            key_id: None,
            model: None,
            provider: None,
            channel: None,
            group: None,
            stream: false,
            shape: RequestShape::default(),
            region: None,
            instance: None,
            trace_id: None,
            marks: Marks::default(),
            channel_inflight: None,
            attempts: Vec::new(),
            hedge: Hedge::None,
            cached: false,
            translation_omitted: Vec::new(),
            unobserved: false,
            continued: false,
            body_bytes: None,
            refused_by: None,
            over_budget: false,
            admitted_input_tokens: None,
            admission: None,
            inflight: None,
            exchange: Exchange::default(),
            objects: Vec::new(),
            span: None,
            in_band: InBandCarrier::NotSent,
        }
    }

    /// The exchange as recorded: with the request body's size.
    pub fn exchange(&self) -> Exchange {
        Exchange {
            bytes_in: self.body_bytes.map(|n| n as u64),
            ..self.exchange
        }
    }

    /// Unix seconds of the request's arrival (Chat `created`, Responses `created_at`).
    pub fn created_s(&self) -> u64 {
        u64::try_from(self.created_at_us / 1_000_000).unwrap_or_default()
    }

    /// Shows what is known now in the in-flight registry: called at the end of each phase and
    /// at each attempt's dispatch and head, never per event.
    pub fn publish(&self) {
        if let Some(slot) = &self.inflight {
            slot.sync(self);
        }
    }

    /// Offset of `at` from t0.
    pub fn offset(&self, at: Instant) -> Duration {
        timeline::offset(at.saturating_duration_since(self.t0))
    }

    /// A phase duration from `from` to now, at the store's microsecond precision.
    pub fn since(&self, from: Instant) -> Duration {
        timeline::offset(Instant::now().saturating_duration_since(from))
    }
}

/// How a request ended, as the respond stage saw it.
#[derive(Debug, Clone, Copy)]
pub struct Ending {
    pub status: u16,
    pub outcome: Outcome,
    pub error_class: Option<ErrorClass>,
    /// Which deadline fired, for `Outcome::Timeout`.
    pub timeout_kind: Option<DeadlineKind>,
    /// What the upstream body showed (marks from `first_byte` on, tokens, counts); `None` when
    /// no upstream body was read.
    pub stream: Option<StreamSummary>,
}

impl Ending {
    pub fn rejected(status: u16, class: ErrorClass) -> Self {
        Ending {
            status,
            outcome: Outcome::Rejected,
            error_class: Some(class),
            timeout_kind: None,
            stream: None,
        }
    }
}

/// Carries a request to its record. Dropping it without `finish` records nothing, so every path
/// ends in `finish`.
///
/// The pending record is boxed: a finisher is moved into and kept by several nested futures
/// (the handler, the answer, the observed body), and rustc's async layouts keep a slot for it in
/// each (`-Zprint-type-sizes`: 1,240 bytes a slot, three of them while a request waits on its
/// upstream); boxed, each slot is 168 bytes.
#[derive(Debug)]
pub struct Finisher {
    pub pending: Box<Pending>,
    /// Shared by every request of the gateway ([`App::sinks`](crate::App::sinks)).
    sinks: Arc<Sinks>,
    thresholds: Thresholds,
    /// Held so the channel counts this request in flight until it is done.
    _inflight: Option<InflightGuard>,
    /// What requests cost (absent in tests that build a finisher alone: every billed request
    /// is then unpriced).
    prices: Option<Arc<PriceTable>>,
}

/// Where finished records go. One per gateway, which each request holds by one reference: a
/// reference to each of them was a count that every serving thread moved twice per request
/// (benchmarks/README, item 17).
#[derive(Debug, Clone)]
pub struct Sinks {
    pub recorder: Recorder,
    /// Observes the finished record (absent in tests that build a finisher alone).
    pub metrics: Option<Arc<Metrics>>,
    /// Rows of requests without a principal are sampled: anyone who can reach the port makes
    /// them (and no workspace can read them).
    pub unauthenticated: Option<Arc<RowSample>>,
    /// Where the objects an answer names are remembered.
    pub affinity: Option<Arc<crate::affinity::Affinity>>,
    /// Exports the request's spans (absent without `[telemetry] otlp_endpoint`).
    pub traces: Option<crate::traces::Traces>,
}

impl Sinks {
    /// The recorder alone.
    pub fn new(recorder: Recorder) -> Sinks {
        Sinks {
            recorder,
            metrics: None,
            unauthenticated: None,
            affinity: None,
            traces: None,
        }
    }
}

/// Requests without a principal (unauthenticated refusals) given a row at most, per second;
/// every one is counted in the metrics (`laptime_requests_total{status="401"}`), the others are
/// not stored (`laptime_records_sampled_out_total`).
pub const UNAUTHENTICATED_ROWS_PER_S: u32 = 10;

/// At most `per_s` rows in each second (of tokio time, from the sampler's start).
#[derive(Debug)]
pub struct RowSample {
    origin: Instant,
    per_s: u32,
    /// (second, rows given in it).
    window: Mutex<(u64, u32)>,
}

impl RowSample {
    pub fn new(per_s: u32) -> Self {
        RowSample {
            origin: Instant::now(),
            per_s,
            window: Mutex::new((0, 0)),
        }
    }

    /// Whether a request at `at` gets its row.
    pub fn admit(&self, at: Instant) -> bool {
        let second = at.saturating_duration_since(self.origin).as_secs();
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        if w.0 != second {
            *w = (second, 0);
        }
        w.1 += 1;
        w.1 <= self.per_s
    }
}

impl Finisher {
    pub fn new(pending: Pending, recorder: Recorder, thresholds: Thresholds) -> Self {
        Finisher::sharing(pending, Arc::new(Sinks::new(recorder)), thresholds)
    }

    /// A finisher whose record goes to the gateway's `sinks`.
    pub fn sharing(pending: Pending, sinks: Arc<Sinks>, thresholds: Thresholds) -> Self {
        Finisher {
            pending: Box::new(pending),
            sinks,
            thresholds,
            _inflight: None,
            prices: None,
        }
    }

    /// Remembers the objects the answer names in `affinity` when the request is finished.
    pub fn with_affinity(mut self, affinity: Arc<crate::affinity::Affinity>) -> Self {
        Arc::make_mut(&mut self.sinks).affinity = Some(affinity);
        self
    }

    /// Costs the record with `prices` when it is finished.
    pub fn with_prices(mut self, prices: Arc<PriceTable>) -> Self {
        self.prices = Some(prices);
        self
    }

    /// Samples the row if this request turns out to be an unauthenticated refusal.
    pub fn with_unauthenticated_sample(mut self, sample: Arc<RowSample>) -> Self {
        Arc::make_mut(&mut self.sinks).unauthenticated = Some(sample);
        self
    }

    /// Observes the record into `metrics` when it is finished.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        Arc::make_mut(&mut self.sinks).metrics = Some(metrics);
        self
    }

    /// Offers the record's spans to `traces` when it is finished (never waits).
    pub fn with_traces(mut self, traces: Option<crate::traces::Traces>) -> Self {
        Arc::make_mut(&mut self.sinks).traces = traces;
        self
    }

    pub fn hold_inflight(&mut self, guard: InflightGuard) {
        self._inflight = Some(guard);
    }

    /// Stamps t7 now, builds the record and queues it. The in-flight registry keeps the
    /// record from here until the recorder has written it.
    pub fn finish(mut self, ending: Ending) {
        let handler_done = self.pending.since(self.pending.t0);
        self.place_objects(&ending);
        let t0 = self.pending.t0;
        let slot = self.pending.inflight.take();
        let prices = self.prices.as_deref().unwrap_or(&NO_PRICES);
        let admission = self.pending.admission.take();
        let input_estimate = self
            .pending
            .admitted_input_tokens
            .or(self.pending.body_bytes.map(estimate_input_tokens));
        let span = self.pending.span.take();
        let record = build(
            *self.pending,
            ending,
            handler_done,
            (&self.thresholds, prices),
        );
        if let Some(ticket) = admission {
            let used = match laptime_core::cost::billed(&record, input_estimate) {
                Billed::Nothing => 0,
                Billed::Tokens { tokens, .. } => tokens
                    .input
                    .unwrap_or(0)
                    .saturating_add(tokens.output.unwrap_or(0)),
            };
            ticket.settle(used, t0 + handler_done);
        }
        let sinks = &*self.sinks;
        if let Some(m) = &sinks.metrics {
            m.observe(&record);
        }
        // Keyed on the missing workspace, not the 401: a caller who leaves before reading its
        // refusal is sampled too.
        let sampled_out = record.workspace_id.is_none()
            && sinks.unauthenticated.as_ref().is_some_and(|s| !s.admit(t0));
        if sampled_out {
            if let Some(m) = &sinks.metrics {
                m.count_sampled_out();
            }
            return;
        }
        if let (Some(traces), Some(span)) = (&sinks.traces, span) {
            traces.offer(&record, span);
        }
        // Handed over before it is queued: the recorder may write it at once.
        let handed = slot.map(|s| s.finished(&record));
        if !sinks.recorder.record(record) {
            if let Some(h) = handed {
                h.not_queued();
            }
        }
    }
}

impl Finisher {
    /// The objects a successful answer named live on its channel (and key): remembered for the
    /// calls that will name them.
    fn place_objects(&mut self, ending: &Ending) {
        let p = &mut self.pending;
        let objects = std::mem::take(&mut p.objects);
        let (Some(affinity), Some(ws), Some(channel)) =
            (&self.sinks.affinity, &p.workspace_id, &p.channel)
        else {
            return;
        };
        if objects.is_empty() || !(200..300).contains(&ending.status) {
            return;
        }
        let placements = objects
            .into_iter()
            .map(|(kind, object_id)| laptime_store::affinity::Placement {
                object_id,
                kind,
                channel: channel.clone(),
                key_index: p.exchange.key_index,
                created_at_us: p.created_at_us,
            })
            .collect();
        affinity.remember(ws, placements);
    }
}

static NO_PRICES: PriceTable = PriceTable::EMPTY;

/// Pure assembly of the record from what the request path gathered, costed at `prices`.
pub fn build(
    p: Pending,
    ending: Ending,
    handler_done: Duration,
    (thresholds, prices): (&Thresholds, &PriceTable),
) -> RequestRecord {
    let exchange = p.exchange();
    let mut marks = p.marks;
    let mut tokens = Tokens::default();
    let mut event_count = 0;
    let mut text_delta_count = 0;
    let mut no_terminal_sentinel = false;
    if let Some(s) = ending.stream {
        no_terminal_sentinel = s.no_terminal_sentinel;
        marks.first_byte = s.marks.first_byte;
        marks.first_event = s.marks.first_event;
        marks.first_effective = s.marks.first_effective;
        marks.first_visible = s.marks.first_visible;
        marks.last_effective = s.marks.last_effective;
        marks.upstream_done = s.marks.upstream_done;
        tokens = s.tokens;
        event_count = s.event_count;
        text_delta_count = s.text_delta_count;
    }
    marks.handler_done = Some(handler_done);
    let mut attempts = p.attempts;
    if let Some(winner) = attempts.iter_mut().rev().find(|a| a.won) {
        // A continuation's own first byte is its own; the request's is the first attempt's.
        if winner.role != laptime_core::timeline::AttemptRole::Continuation {
            winner.first_byte = marks.first_byte;
        }
        if marks.upstream_done.is_some() {
            winner.end = marks.upstream_done;
        }
        if winner.error_class.is_none() && ending.outcome != Outcome::ClientCancelled {
            winner.error_class = ending.error_class;
        }
    }
    // Failed attempts before the one that answered; without a winner, all but the last failed
    // before the final failure.
    let failover_count = match attempts.iter().position(|a| a.won) {
        // A hedging race's loser did not fail: only failed attempts count.
        Some(w) => attempts[..w]
            .iter()
            .filter(|a| a.error_class.is_some())
            .count(),
        None => attempts.len().saturating_sub(1),
    } as u32;
    let (classification, mut flags) = slow::classify(
        &marks,
        tokens.output_for_speed(),
        ending.outcome,
        thresholds,
    );
    if p.unobserved {
        flags.push(Flag::Unobserved);
    }
    if p.continued {
        flags.push(Flag::Continued);
    }
    if no_terminal_sentinel {
        flags.push(Flag::NoTerminalSentinel);
    }
    if p.over_budget {
        flags.push(Flag::OverBudget);
    }
    let input_estimate = p.body_bytes.map(estimate_input_tokens);
    let mut record = RequestRecord {
        request_id: p.request_id,
        workspace_id: p.workspace_id,
        key_id: p.key_id,
        created_at_us: p.created_at_us,
        model: p.model,
        provider: p.provider,
        channel: p.channel,
        group: p.group,
        dialect: p.dialect,
        upstream_dialect: p.upstream_dialect,
        stream: p.stream,
        status: ending.status,
        outcome: ending.outcome,
        timeout_kind: ending.timeout_kind,
        error_class: ending.error_class,
        classification,
        flags,
        marks,
        tokens,
        event_count,
        text_delta_count,
        channel_inflight: p.channel_inflight,
        attempts,
        hedge: p.hedge,
        failover_count,
        cached: p.cached,
        shape: p.shape,
        region: p.region,
        instance: p.instance,
        trace_id: p.trace_id,
        cost: None,
        refused_by: p.refused_by,
        exchange,
        in_band: Some(p.in_band),
    };
    record.cost = prices.cost_of(&record, input_estimate);
    record
}
