//! laptime-sim: a faithful fake of an LLM provider, for a gateway to use as its upstream.
//!
//! It speaks OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and Google Gemini
//! (`/v1beta/models/{model}:generateContent|:streamGenerateContent?alt=sse`) byte for byte
//! (event names, JSON fields, first chunks, endings, usage placement as the real streams have
//! them) and plays each answer on a script: when the head comes, when the first event, the
//! first effective output, the first text and the terminal come, and how the answer ends
//! (normally, cut by the token limit or the content filter, with an in-band error, a clean close, a TCP reset, a
//! stall, or an HTTP error status, also after only part of its text) and whether it continues
//! an assistant prefill the request ends with.
//!
//! Layout, from the script to the socket:
//! - [`script`]: the [`Script`] type, the named [`preset`]s (the DESIGN's seed traces
//!   `sim-trace-a|b|c` and `sim-fast`, and the translation-test scenarios `sim-reasoning`,
//!   `sim-tool-call`, `sim-parallel-tools`, `sim-max-tokens`, `sim-rate-limited`, `sim-context-length`,
//!   `sim-content-filter`, `sim-overloaded-in-band`, `sim-echo`, and for continuing a cut
//!   answer `sim-long`, `sim-cut-after-40`, `sim-stall-after-20`, `sim-prefill-refused`), and
//!   [`schedule`], which turns a script into the exact bytes and instants of one response
//!   ([`schedule_with_prefill`] for a request ending with an assistant prefill, continued or
//!   refused; [`canonical_text`] is the whole text a script answers with). Pure: no tokio, no
//!   clock.
//! - `prefill`: the assistant prefill a request ends with, read in each dialect's way.
//! - `echo`: the summary of a request that `sim-echo` answers with (format in its doc).
//! - `wire`: the bytes of each dialect (streamed events, non-streamed bodies, error bodies).
//!   Pure.
//! - `json`: an ordered JSON builder, so fields come out in the providers' order.
//! - [`server`]: the HTTP server (HTTP/1.1 and h2c) that plays schedules against the clock,
//!   with `/sim/stats` (counters, and the objects and bytes held) and `/sim/requests` (the
//!   last 100 requests: method, path and query, credential headers, content type, body size
//!   and SHA-256) for tests and `/sim/timing` for benchmarks.
//! - `clock`: sub-millisecond waits (tokio's timer, then a high-resolution thread for the last
//!   stretch) and the histogram of the sim's own lateness.
//!
//! - `endpoints`: every other provider endpoint, served as the providers serve them:
//!   OpenAI `POST /v1/embeddings` (float or base64 unit vectors), `/v1/moderations`,
//!   `/v1/images/generations` (a tiny PNG), `/v1/audio/speech` (audio streamed in frames),
//!   `/v1/audio/transcriptions` and `/translations` (multipart), `/v1/completions` (legacy), Files
//!   (`/v1/files…`), Batches (`/v1/batches…`, run at their first read), stored Responses
//!   (`GET|DELETE /v1/responses/{id}`, `/cancel`, `/input_items`), `GET /v1/models/{id}`;
//!   Anthropic `POST /v1/messages/count_tokens`; Gemini `:embedContent`,
//!   `:batchEmbedContents`, `:countTokens` (under `/v1beta/models/` and `/v1/models/`).
//! - `azure`: Azure OpenAI's URLs (`/openai/deployments/{d}/…?api-version=…`,
//!   `/openai/{files|batches|responses}…`, `/openai/v1/…`) served as the OpenAI paths.
//! - `objects`: what clients make (files, batches, stored responses), each owned by the
//!   credential that made it (`Authorization: Bearer`, `api-key`, `x-api-key`,
//!   `x-goog-api-key`, or none): another credential gets the provider's 404, so two keys on
//!   one sim are two providers. Every store is bounded.
//! - `tokens`: the one counting rule (⌈UTF-8 bytes / 4⌉ per string) where no script says.
//! - `handle`, `route`, `plan`, `multipart`: one request's path through the server: URL,
//!   route, body (uploads read as they arrive), log, script, answer.
//!
//! A request picks its script with a top-level `"laptime_sim": {…}` object (any [`Script`]
//! fields), or by naming a preset as its `model` (the only way through a translating gateway,
//! which does not carry `laptime_sim` across dialects). Every Responses answer has its own id
//! (`resp_laptimesim0001`, `…0002`, … per sim), the one its store entry has.

pub mod script;
pub mod server;

mod azure;
mod clock;
mod echo;
mod endpoints;
mod handle;
mod json;
mod multipart;
mod objects;
mod plan;
mod prefill;
mod query;
mod reply;
mod route;
#[cfg(test)]
mod testkit;
mod tokens;
mod vectors;
mod wire;

pub use script::{
    canonical_text, preset, schedule, schedule_with_prefill, EffectiveKind, End, Finish,
    FirstEffective, PrefillMode, Refusal, Schedule, Script, Step, UsageSpec, PRESET_NAMES,
};
pub use server::{serve, spawn_local, Sim, SimRequest, SimStats};
