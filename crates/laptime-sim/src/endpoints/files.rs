//! OpenAI Files: `POST /v1/files` (multipart `purpose` and `file`, the bytes read as they
//! arrive into the store), `GET /v1/files` (paged: `purpose`, `limit` 1 to 10 000, default
//! 10 000, `order`, `after`), `GET /v1/files/{id}`, `GET /v1/files/{id}/content` (the bytes as
//! uploaded, `application/octet-stream`), `DELETE /v1/files/{id}`.
//!
//! A file belongs to the credential that uploaded it (or to the batch owner that produced it);
//! another credential's requests get OpenAI's 404 "No such File object". Store limits are in
//! [`crate::objects::files`]: an upload that does not fit is a 413.

use bytes::Bytes;
use futures_util::Stream;
use http::{Response, StatusCode};

use crate::json::{obj, J};
use crate::multipart::{self, Sink};
use crate::objects::files::{FileMeta, Full, Purpose, MAX_FILES, PREFIX};
use crate::query;
use crate::reply::{self, Body};
use crate::wire::ApiError;

use super::{invalid, missing, Ctx};

const MAX_LIST: usize = 10_000;

/// The file object.
pub(crate) fn object(meta: &FileMeta) -> J {
    obj! {
        "id": meta.id.as_str(),
        "bytes": meta.bytes,
        "created_at": meta.created_at,
        "filename": meta.filename.as_str(),
        "object": "file",
        "purpose": meta.purpose.as_str(),
        "status": "processed",
        "expires_at": meta.expires_at,
        "status_details": J::Null,
    }
}

/// OpenAI's 404 for a file the caller does not have.
pub(crate) fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!("No such File object: {id}"), Some("id"))
}

/// OpenAI's words for a store that cannot take a file.
pub(crate) fn full(full: Full) -> ApiError {
    match full {
        Full::Bytes => ApiError::invalid_request(
            "The file is too large: the sim's file storage (256 MiB) is full.".to_owned(),
        )
        .param("file")
        .status(413),
        Full::Count => ApiError::invalid_request(format!(
            "The sim holds at most {MAX_FILES} files; delete some before uploading more."
        )),
    }
}

pub(super) async fn upload<S, E>(ctx: &Ctx<'_>, body: S) -> Result<Response<Body>, ApiError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let store = &ctx.sim.objects().files;
    let content_type = ctx
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok());
    let (form, sink) = multipart::read(content_type, body, Sink::Keep(store.reserve()))
        .await
        .map_err(|e| e.api_error("The file"))?;
    let purpose = form.field("purpose").ok_or_else(|| missing("purpose"))?;
    let purpose = Purpose::upload(purpose).ok_or_else(|| {
        let names: Vec<String> = Purpose::UPLOADABLE
            .iter()
            .map(|p| format!("'{}'", p.as_str()))
            .collect();
        invalid(
            "purpose",
            format!(
                "'{purpose}' is not one of [{}] - 'purpose'",
                names.join(", ")
            ),
        )
    })?;
    let file = form.file.ok_or_else(|| missing("file"))?;
    if purpose == Purpose::Batch && !file.filename.ends_with(".jsonl") {
        return Err(ApiError::invalid_request(
            "Invalid file format for Batch API. Must be .jsonl".to_owned(),
        ));
    }
    let (Sink::Keep(reservation), Some(content)) = (sink, file.kept) else {
        return Err(ApiError::scripted(500));
    };
    let now = ctx.sim.objects().now();
    let meta = store
        .insert(reservation, ctx.owner, file.filename, purpose, content, now)
        .map_err(full)?;
    Ok(reply::ok(object(&meta).encode()))
}

pub(super) fn list(ctx: &Ctx<'_>) -> Result<String, ApiError> {
    let purpose = match query::get(ctx.query, "purpose") {
        None => None,
        Some(name) => Some(Purpose::parse(&name).ok_or_else(|| {
            invalid("purpose", format!("Invalid value for 'purpose': '{name}'."))
        })?),
    };
    let page_query = query::list(ctx.query, PREFIX, MAX_LIST, MAX_LIST)?;
    let page = ctx
        .sim
        .objects()
        .files
        .list(ctx.owner, purpose, &page_query);
    Ok(list_object(
        page.items.iter().map(|m| (m.id.as_str(), object(m))),
        page.has_more,
    ))
}

/// OpenAI's cursor page: `{"object":"list","data","first_id","last_id","has_more"}`.
pub(crate) fn list_object<'a>(items: impl Iterator<Item = (&'a str, J)>, has_more: bool) -> String {
    let (ids, data): (Vec<&str>, Vec<J>) = items.unzip();
    obj! {
        "object": "list",
        "data": data,
        "first_id": ids.first().copied(),
        "last_id": ids.last().copied(),
        "has_more": has_more,
    }
    .encode()
}

pub(super) fn get(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    let meta = ctx
        .sim
        .objects()
        .files
        .get(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    Ok(object(&meta).encode())
}

pub(super) fn content(ctx: &Ctx<'_>, id: &str) -> Result<Response<Body>, ApiError> {
    let (_, content) = ctx
        .sim
        .objects()
        .files
        .content(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    Ok(reply::bytes(
        StatusCode::OK,
        "application/octet-stream",
        content,
    ))
}

pub(super) fn delete(ctx: &Ctx<'_>, id: &str) -> Result<String, ApiError> {
    let meta = ctx
        .sim
        .objects()
        .files
        .delete(ctx.owner, id)
        .ok_or_else(|| not_found(id))?;
    Ok(obj! {"id": meta.id.as_str(), "object": "file", "deleted": true}.encode())
}
