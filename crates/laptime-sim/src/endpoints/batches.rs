//! OpenAI Batches: `POST /v1/batches`, `GET /v1/batches/{id}`, `GET /v1/batches` (paged:
//! `limit` 1 to 100, default 20, `after`), `POST /v1/batches/{id}/cancel`.
//!
//! A batch is created `validating` and runs, whole and at once, the first time it is read
//! (retrieved or listed) after that: each input line's body is answered as the sim answers that
//! endpoint when not streamed (a scripted status or error too), and the batch is `completed`
//! with `in_progress_at`, `finalizing_at` and `completed_at` all stamped then. The lines
//! answered 2xx go to an output file, the others to an error file (`purpose: batch_output`,
//! owned by the batch's owner), each line `{"id","custom_id","response":{"status_code",
//! "request_id","body"},"error":null}` in input order. An input file with a malformed line (not
//! JSON, no `custom_id`, a repeated one, a `url` other than the batch's endpoint, a method
//! other than POST) or no line makes the batch `failed` with OpenAI's `errors` instead. A
//! cancel before the first read makes it `cancelling`, and the next read `cancelled`.
//!
//! The input file must be the caller's (else OpenAI's 404 "No such File object") and have
//! purpose `batch`; `completion_window` must be `24h`.

use std::collections::HashSet;

use http::Response;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::json::{obj, J};
use crate::objects::batches::{
    Batch, BatchEndpoint, BatchStatus, BatchUsage, Counts, LineError, NewBatch, TooMany,
    MAX_BATCHES, PREFIX,
};
use crate::objects::files::Purpose;
use crate::objects::Owner;
use crate::plan::{plan_value, Call};
use crate::query;
use crate::reply::{self, Body};
use crate::script::{Finish, ResponseMeta};
use crate::server::Sim;
use crate::wire::ApiError;

use super::files::{list_object, not_found as file_not_found};
use super::{completions, embeddings, invalid, missing, moderations, object, Ctx};

/// OpenAI's limit on the requests of one batch.
const MAX_LINES: usize = 50_000;
/// The most line errors a failed batch lists.
const MAX_ERRORS: usize = 100;

pub(super) fn create(ctx: &Ctx<'_>, body: &[u8]) -> Result<String, ApiError> {
    let body = object(body)?;
    let text = |key: &'static str| {
        body.get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| missing(key))
    };
    let input_file_id = text("input_file_id")?;
    let endpoint_path = text("endpoint")?;
    let window = text("completion_window")?;
    let endpoint = BatchEndpoint::parse(&endpoint_path).ok_or_else(|| {
        let paths: Vec<&str> = BatchEndpoint::ALL.iter().map(|e| e.path()).collect();
        invalid(
            "endpoint",
            format!(
                "Invalid value for 'endpoint': '{endpoint_path}'. Supported values are: {}.",
                paths.join(", ")
            ),
        )
    })?;
    if window != "24h" {
        return Err(invalid(
            "completion_window",
            format!(
                "Invalid value for 'completion_window': '{window}'. Supported values are: '24h'."
            ),
        ));
    }
    let metadata = match body.get("metadata") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.to_string()),
        Some(_) => {
            return Err(invalid(
                "metadata",
                "Invalid type for 'metadata': expected an object.".to_owned(),
            ))
        }
    };
    let objects = ctx.sim.objects();
    let file = objects
        .files
        .get(ctx.owner, &input_file_id)
        .ok_or_else(|| file_not_found(&input_file_id).param("input_file_id"))?;
    if file.purpose != Purpose::Batch {
        return Err(invalid(
            "input_file_id",
            format!(
                "The input file {input_file_id} has purpose '{}'; a batch needs purpose 'batch'.",
                file.purpose.as_str()
            ),
        ));
    }
    let new = NewBatch {
        endpoint,
        input_file_id,
        completion_window: window,
        metadata,
    };
    let batch = objects
        .batches()
        .create(ctx.owner, new, objects.now())
        .map_err(|TooMany| {
            ApiError::invalid_request(format!(
                "The sim holds at most {MAX_BATCHES} batches; it keeps every one it made."
            ))
        })?;
    Ok(object_of(&batch).encode())
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("No batch found with id '{id}'."), None)
}

pub(super) fn get(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    let mut batches = ctx.sim.objects().batches();
    let batch = batches
        .get_mut(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    settle(ctx.sim, ctx.owner, batch);
    Ok(object_of(batch).encode())
}

pub(super) fn list(ctx: &Ctx<'_>) -> Result<String, ApiError> {
    let page_query = query::list(ctx.query, PREFIX, 20, 100)?;
    let mut batches = ctx.sim.objects().batches();
    let page = batches.list_ids(ctx.owner, &page_query);
    let mut items = Vec::with_capacity(page.items.len());
    for id in &page.items {
        if let Some(batch) = batches.get_mut(ctx.owner, id) {
            settle(ctx.sim, ctx.owner, batch);
            items.push((id.as_str(), object_of(batch)));
        }
    }
    Ok(list_object(items.into_iter(), page.has_more))
}

pub(super) fn cancel(ctx: &Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let objects = ctx.sim.objects();
    let mut batches = objects.batches();
    let batch = batches
        .get_mut(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    match batch.status {
        BatchStatus::Validating => {
            batch.status = BatchStatus::Cancelling;
            batch.cancelling_at = Some(objects.now());
        }
        BatchStatus::Cancelling | BatchStatus::Cancelled => {}
        BatchStatus::Completed | BatchStatus::Failed => {
            let message = format!(
                "Cannot cancel a batch with status '{}'.",
                batch.status.as_str()
            );
            return Err(ApiError::invalid_request(message).status(409));
        }
    }
    Ok(reply::ok(object_of(batch).encode()))
}

/// The batch object, fields in OpenAI's order.
fn object_of(b: &Batch) -> J {
    let errors = if b.errors.is_empty() {
        J::Null
    } else {
        let data: Vec<J> = b
            .errors
            .iter()
            .map(|e| obj! {"code": e.code, "line": e.line, "message": e.message.as_str(), "param": e.param})
            .collect();
        obj! {"object": "list", "data": data}
    };
    let usage = b.usage.map_or(J::Null, |u| {
        obj! {
            "input_tokens": u.input,
            "input_tokens_details": obj! {"cached_tokens": u.cached},
            "output_tokens": u.output,
            "output_tokens_details": obj! {"reasoning_tokens": u.reasoning},
            "total_tokens": u.input + u.output,
        }
    });
    obj! {
        "id": b.id.as_str(),
        "object": "batch",
        "endpoint": b.endpoint.path(),
        "errors": errors,
        "input_file_id": b.input_file_id.as_str(),
        "completion_window": b.completion_window.as_str(),
        "status": b.status.as_str(),
        "output_file_id": b.output_file_id.as_deref(),
        "error_file_id": b.error_file_id.as_deref(),
        "created_at": b.created_at,
        "in_progress_at": b.in_progress_at,
        "expires_at": b.created_at + 24 * 3600,
        "finalizing_at": b.finalizing_at,
        "completed_at": b.completed_at,
        "failed_at": b.failed_at,
        "expired_at": J::Null,
        "cancelling_at": b.cancelling_at,
        "cancelled_at": b.cancelled_at,
        "request_counts": obj! {
            "total": b.counts.total,
            "completed": b.counts.completed,
            "failed": b.counts.failed,
        },
        "metadata": b.metadata.clone().map_or(J::Null, J::Raw),
        "model": b.model.as_deref(),
        "usage": usage,
    }
}

// === Running ===

/// Moves a batch read for the first time since it was created (or cancelled) to its end.
fn settle(sim: &Sim, owner: &Owner, batch: &mut Batch) {
    let now = sim.objects().now();
    match batch.status {
        BatchStatus::Cancelling => {
            batch.status = BatchStatus::Cancelled;
            batch.cancelled_at = Some(now);
        }
        BatchStatus::Validating => match lines(sim, owner, batch) {
            Ok(lines) => run(sim, owner, batch, &lines, now),
            Err(errors) => {
                batch.status = BatchStatus::Failed;
                batch.failed_at = Some(now);
                batch.errors = errors;
            }
        },
        BatchStatus::Completed | BatchStatus::Failed | BatchStatus::Cancelled => {}
    }
}

/// One request of the input file.
struct Line {
    custom_id: String,
    body: Map<String, Value>,
}

fn line_error(
    code: &'static str,
    line: Option<usize>,
    message: &str,
    param: Option<&'static str>,
) -> LineError {
    LineError {
        code,
        line: line.map(|n| n as u64),
        message: message.to_owned(),
        param,
    }
}

/// The input file's requests, or the errors that fail the batch.
fn lines(sim: &Sim, owner: &Owner, batch: &Batch) -> Result<Vec<Line>, Vec<LineError>> {
    let Some((_, content)) = sim.objects().files.content(owner, &batch.input_file_id) else {
        let message = "The input file no longer exists.";
        return Err(vec![line_error(
            "invalid_file",
            None,
            message,
            Some("input_file_id"),
        )]);
    };
    let text = String::from_utf8_lossy(&content);
    let raw: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    if raw.is_empty() {
        return Err(vec![line_error(
            "empty_file",
            None,
            "The batch input file is empty.",
            None,
        )]);
    }
    if raw.len() > MAX_LINES {
        let message =
            format!("The batch input file has more than the maximum of {MAX_LINES} requests.");
        return Err(vec![line_error("too_many_tasks", None, &message, None)]);
    }
    let mut seen = HashSet::new();
    let (mut lines, mut errors) = (Vec::with_capacity(raw.len()), Vec::new());
    for (n, text) in raw {
        match parse_line(n, text, batch.endpoint, &mut seen) {
            Ok(line) => lines.push(line),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(lines)
    } else {
        errors.truncate(MAX_ERRORS);
        Err(errors)
    }
}

/// Line `n` of the input file, checked; `seen` holds the custom ids before it.
fn parse_line(
    n: usize,
    text: &str,
    endpoint: BatchEndpoint,
    seen: &mut HashSet<String>,
) -> Result<Line, LineError> {
    let Ok(mut line) = serde_json::from_str::<Map<String, Value>>(text) else {
        return Err(line_error(
            "invalid_json_line",
            Some(n),
            "This line is not parseable as valid JSON.",
            None,
        ));
    };
    if let Some((code, message, param)) = check(&line, endpoint) {
        return Err(line_error(code, Some(n), &message, param));
    }
    let custom_id = line
        .get("custom_id")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    if !seen.insert(custom_id.clone()) {
        let message = format!("The custom_id '{custom_id}' is used more than once in this file.");
        return Err(line_error(
            "duplicate_custom_id",
            Some(n),
            &message,
            Some("custom_id"),
        ));
    }
    let body = match line.remove("body") {
        Some(Value::Object(body)) => body,
        _ => Map::new(),
    };
    Ok(Line { custom_id, body })
}

/// What is wrong with a parsed line, if anything: its code, message and param.
fn check(
    line: &Map<String, Value>,
    endpoint: BatchEndpoint,
) -> Option<(&'static str, String, Option<&'static str>)> {
    if !line.get("custom_id").is_some_and(Value::is_string) {
        return Some((
            "missing_required_parameter",
            "Missing required parameter: 'custom_id'.".into(),
            Some("custom_id"),
        ));
    }
    if line.get("method").and_then(Value::as_str) != Some("POST") {
        return Some((
            "invalid_method",
            "The method must be 'POST'.".into(),
            Some("method"),
        ));
    }
    if line.get("url").and_then(Value::as_str) != Some(endpoint.path()) {
        let message = format!(
            "The URL provided for this request does not match the batch endpoint {}.",
            endpoint.path()
        );
        return Some(("url_mismatch", message, Some("url")));
    }
    if !line.get("body").is_some_and(Value::is_object) {
        return Some((
            "missing_required_parameter",
            "Missing required parameter: 'body'.".into(),
            Some("body"),
        ));
    }
    None
}

/// Answers every line and completes the batch with its files.
fn run(sim: &Sim, owner: &Owner, batch: &mut Batch, lines: &[Line], now: u64) {
    let suffix = batch
        .id
        .strip_prefix(PREFIX)
        .unwrap_or(&batch.id)
        .to_owned();
    let (mut output, mut failed_out) = (String::new(), String::new());
    let mut counts = Counts {
        total: lines.len() as u64,
        ..Counts::default()
    };
    let mut usage = BatchUsage::default();
    for (i, line) in lines.iter().enumerate() {
        let (status, body) = answer(sim, batch.endpoint, &line.body);
        add_usage(&mut usage, &body);
        let entry = obj! {
            "id": format!("batch_req_{suffix}_{:04}", i + 1),
            "custom_id": line.custom_id.as_str(),
            "response": obj! {
                "status_code": status,
                "request_id": format!("req_{suffix}_{:04}", i + 1),
                "body": J::Raw(body),
            },
            "error": J::Null,
        };
        let (file, count) = if (200..300).contains(&status) {
            (&mut output, &mut counts.completed)
        } else {
            (&mut failed_out, &mut counts.failed)
        };
        file.push_str(&entry.encode());
        file.push('\n');
        *count += 1;
    }
    let Some((out, err)) = store_outputs(sim, owner, &batch.id, output, failed_out, now) else {
        batch.status = BatchStatus::Failed;
        batch.failed_at = Some(now);
        let message = "The batch's output does not fit in the sim's file storage.";
        batch.errors = vec![line_error("output_too_large", None, message, None)];
        return;
    };
    batch.status = BatchStatus::Completed;
    batch.in_progress_at = Some(now);
    batch.finalizing_at = Some(now);
    batch.completed_at = Some(now);
    batch.output_file_id = out;
    batch.error_file_id = err;
    batch.counts = counts;
    batch.usage = Some(usage);
    batch.model = lines.first().and_then(|l| {
        l.body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
}

/// Stores the output and error files (those with lines), and gives their ids; `None`, and
/// nothing stored, when they do not fit.
fn store_outputs(
    sim: &Sim,
    owner: &Owner,
    batch_id: &str,
    output: String,
    errors: String,
    now: u64,
) -> Option<(Option<String>, Option<String>)> {
    let files = &sim.objects().files;
    let store = |content: String, kind: &str| {
        (!content.is_empty()).then(|| {
            let name = format!("{batch_id}_{kind}.jsonl");
            files.insert_made(owner, name, Purpose::BatchOutput, content.into(), now)
        })
    };
    let (out, err) = (store(output, "output"), store(errors, "error"));
    let fits = !matches!(out, Some(Err(_))) && !matches!(err, Some(Err(_)));
    let out = out.and_then(Result::ok).map(|m| m.id);
    let err = err.and_then(Result::ok).map(|m| m.id);
    if !fits {
        for id in out.iter().chain(err.iter()) {
            files.delete(owner, id);
        }
        return None;
    }
    Some((out, err))
}

/// The sim's non-streamed answer to one line's body: its status and JSON body.
fn answer(sim: &Sim, endpoint: BatchEndpoint, body: &Map<String, Value>) -> (u16, String) {
    let error = |e: ApiError| (e.status, obj! {"error": e.openai_object()}.encode());
    let mut whole = body.clone();
    whole.insert("stream".to_owned(), Value::Bool(false));
    let value = Value::Object(whole);
    // The line's body is the request: its size as JSON is what a script without an input
    // count reports.
    let body_bytes = value.to_string().len();
    let scripted = |dialect, meta: Option<&ResponseMeta>| {
        let call = Call {
            response: meta,
            body_bytes,
            ..Call::default()
        };
        match plan_value(dialect, &value, &call).answer {
            Err(e) => error(e),
            Ok(answer) => {
                let s = answer.schedule;
                let bytes: Vec<u8> = s.steps.iter().flat_map(|st| st.bytes.to_vec()).collect();
                let whole =
                    s.finish == Finish::Eof && serde_json::from_slice::<Value>(&bytes).is_ok();
                if whole {
                    (s.status, String::from_utf8_lossy(&bytes).into_owned())
                } else {
                    error(ApiError::scripted(500))
                }
            }
        }
    };
    let model = body.get("model").and_then(Value::as_str);
    match endpoint {
        BatchEndpoint::ChatCompletions => scripted(laptime_core::Dialect::Chat, None),
        BatchEndpoint::Responses => {
            let meta = ResponseMeta {
                id: sim.objects().responses().next_id(),
                store: false,
                ..ResponseMeta::default()
            };
            scripted(laptime_core::Dialect::Responses, Some(&meta))
        }
        BatchEndpoint::Embeddings => match model {
            None => error(ApiError::invalid_request(
                "you must provide a model parameter".to_owned(),
            )),
            Some(model) => embeddings::answer(body, model).map_or_else(error, |b| (200, b)),
        },
        BatchEndpoint::Moderations => {
            let hash = hex::encode(Sha256::digest(value.to_string()));
            moderations::answer(body, &hash[..24]).map_or_else(error, |b| (200, b))
        }
        BatchEndpoint::Completions => completions::whole(&value).unwrap_or_else(error),
    }
}

/// Adds an answer's usage (Chat's, Responses' or embeddings' names) to the batch's.
fn add_usage(total: &mut BatchUsage, body: &str) {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return;
    };
    let n = |path: &str| v.pointer(path).and_then(Value::as_u64).unwrap_or(0);
    total.input += n("/usage/prompt_tokens") + n("/usage/input_tokens");
    total.output += n("/usage/completion_tokens") + n("/usage/output_tokens");
    total.cached += n("/usage/prompt_tokens_details/cached_tokens")
        + n("/usage/input_tokens_details/cached_tokens");
    total.reasoning += n("/usage/completion_tokens_details/reasoning_tokens")
        + n("/usage/output_tokens_details/reasoning_tokens");
}
