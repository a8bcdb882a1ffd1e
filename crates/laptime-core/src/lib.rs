//! The pure core of laptime: everything that decides what a number means, with no I/O.
//!
//! Layout, in the order a streamed byte meets it:
//! - [`dialect`]: which of the four wire formats a request speaks.
//! - [`endpoint`]: the provider's other endpoints (embeddings, files, batches, …): which call a
//!   path names, the tokens its answer reports, the objects it creates.
//! - [`sse`]: the incremental SSE scanner (WHATWG framing, any split of the bytes).
//! - [`classify`]: per-dialect classification of one SSE event (heartbeat, envelope, effective,
//!   usage, terminal) and of a whole non-streamed body.
//! - `wire`: borrowed JSON helpers and each dialect's usage shape, read alike by [`classify`]
//!   and [`translate`]'s decoders.
//! - [`usage`]: token counts, last value per field wins, normalised across dialects.
//! - [`estimate`]: output tokens counted with a tokenizer for streams whose upstream reports
//!   none, holding at most a few hundred bytes of text.
//! - [`observe`]: the stream observer that turns bytes-at-instants into marks, counts and the
//!   place where the in-band timing comment goes.
//! - [`relay`]: which observed bytes go to the client now and which wait for their event to
//!   complete, with the comment placed before the terminal frame.
//! - [`timeline`]: marks as offsets from t0, outcomes, attempts and the finished record.
//! - [`slow`]: the slow-request classifier (which stage was slow).
//! - [`circuit`]: a channel's circuit breaker (closed, open, half-open).
//! - [`views`]: the two vocabularies a record is read in (`other.timing` and the usage API), and
//!   the in-band timing line.
//! - [`translate`]: the hub that carries a request and its answer between two dialects.
//! - [`cost`]: prices in force at an instant, the tokens a provider billed, and their cost.
//! - [`limit`]: the limits a token or workspace may have and the windows that count against them.
//! - [`fleet`]: what the instances of a fleet publish to each other (in-flight heartbeats) and
//!   the p95 of their pooled times to first output.
//! - [`compare`]: the request-shape dimensions usage compares like with like by (token
//!   buckets, effort class, tools present).
//! - [`rollup`]: mergeable summaries of many records (counts, token sums, log-bucketed percentile
//!   sketches) that the usage API answers from.
//! - [`varint`]: the integer encoding of stored rollups and of a request's packed fields.
//!
//! Time enters this crate only as `Duration` offsets handed in by the edges, so every rule here is
//! testable without a clock.

pub mod circuit;
pub mod classify;
pub mod compare;
pub mod cost;
pub mod dialect;
pub mod endpoint;
pub mod estimate;
pub mod fleet;
pub mod limit;
pub mod observe;
pub mod relay;
pub mod rollup;
pub mod slow;
pub mod sse;
pub mod timeline;
pub mod translate;
pub mod usage;
pub mod varint;
pub mod views;
mod wire;

pub use dialect::{Dialect, GeminiMethod};
