//! The provider endpoints besides the four dialects' model calls: which call a method and path
//! name ([`Call::of`]), what an answer reports in tokens ([`tokens_of`]), and which provider
//! objects (files, batches, stored responses) an answer names ([`objects_named`]), so that later
//! calls naming them go to the channel that holds them.
//!
//! These calls are relayed and recorded like any request (latency, first body byte, upstream
//! time, status, tokens where the provider reports them, bytes in and out) but get no in-band
//! timing: their answers are not SSE.

use serde::{Deserialize, Serialize};

use crate::usage::Tokens;
use crate::Dialect;

/// What kind of call a request was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// A model call of one of the four dialects (Chat, Responses, Messages, Gemini), with the
    /// whole timeline.
    #[default]
    Generation,
    /// OpenAI `/v1/embeddings`, Gemini `:embedContent` and `:batchEmbedContents`.
    Embeddings,
    /// OpenAI `/v1/moderations`.
    Moderations,
    /// Anthropic `/v1/messages/count_tokens`, Gemini `:countTokens`.
    CountTokens,
    /// OpenAI `/v1/images/{generations,edits,variations}`.
    Images,
    /// OpenAI `/v1/audio/speech`: a streamed binary answer.
    AudioSpeech,
    /// OpenAI `/v1/audio/transcriptions` and `/v1/audio/translations` (multipart uploads).
    AudioTranscriptions,
    /// OpenAI `/v1/files` and `/v1/files/{id}[/content]`.
    Files,
    /// OpenAI `/v1/batches` and `/v1/batches/{id}[/cancel]`.
    Batches,
    /// OpenAI `/v1/responses/{id}` (get, delete), `…/cancel` and `…/input_items`.
    StoredResponses,
}

impl Endpoint {
    pub const ALL: [Endpoint; 10] = [
        Endpoint::Generation,
        Endpoint::Embeddings,
        Endpoint::Moderations,
        Endpoint::CountTokens,
        Endpoint::Images,
        Endpoint::AudioSpeech,
        Endpoint::AudioTranscriptions,
        Endpoint::Files,
        Endpoint::Batches,
        Endpoint::StoredResponses,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Generation => "generation",
            Endpoint::Embeddings => "embeddings",
            Endpoint::Moderations => "moderations",
            Endpoint::CountTokens => "count_tokens",
            Endpoint::Images => "images",
            Endpoint::AudioSpeech => "audio_speech",
            Endpoint::AudioTranscriptions => "audio_transcriptions",
            Endpoint::Files => "files",
            Endpoint::Batches => "batches",
            Endpoint::StoredResponses => "stored_responses",
        }
    }

    pub fn parse(s: &str) -> Option<Endpoint> {
        Endpoint::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider object that lives on the channel (and key) that created it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    File,
    Batch,
    Response,
}

impl ObjectKind {
    pub const ALL: [ObjectKind; 3] = [ObjectKind::File, ObjectKind::Batch, ObjectKind::Response];

    pub fn as_str(self) -> &'static str {
        match self {
            ObjectKind::File => "file",
            ObjectKind::Batch => "batch",
            ObjectKind::Response => "response",
        }
    }

    pub fn parse(s: &str) -> Option<ObjectKind> {
        ObjectKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// How the provider names this kind in a 404 (`No such File object: file-…`).
    pub fn noun(self) -> &'static str {
        match self {
            ObjectKind::File => "File",
            ObjectKind::Batch => "Batch",
            ObjectKind::Response => "Response",
        }
    }
}

/// How the request body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body (GET, DELETE, and POSTs that take none).
    Empty,
    /// A JSON object, read whole within the body limit; its `model` routes the call.
    Json,
    /// `multipart/form-data`, read whole within the body limit (its `model` field routes it).
    Form,
    /// `multipart/form-data` streamed through to the upstream as it arrives, never held whole
    /// (file uploads, which can be large and name no model).
    Upload,
}

/// The methods the endpoints take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    Post,
    Delete,
}

impl Verb {
    fn of(method: &str) -> Option<Verb> {
        match method {
            "GET" => Some(Verb::Get),
            "POST" => Some(Verb::Post),
            "DELETE" => Some(Verb::Delete),
            _ => None,
        }
    }
}

/// One call of a provider endpoint, as its method and path name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub method: Verb,
    pub endpoint: Endpoint,
    /// Whose error shapes and auth headers the call follows.
    pub dialect: Dialect,
    pub body: BodyKind,
    /// The object the path names (`/v1/files/{id}`), which decides the channel.
    pub object: Option<(ObjectKind, String)>,
    /// A listing of objects (`GET /v1/files`): the answer keeps the caller's objects only.
    pub lists: Option<ObjectKind>,
    /// For Gemini, the model the path names (`models/{model}:embedContent`).
    pub path_model: Option<String>,
}

/// The longest object id read from a path; a longer one is no provider's.
pub const MAX_OBJECT_ID: usize = 256;

impl Call {
    /// The call a method and path name, or `None` when laptime does not serve it. `path` is
    /// the request path without the query; Gemini's `{model}:{method}` segments are matched
    /// under both `/v1beta/models/` and `/v1/models/`.
    pub fn of(method: &str, path: &str) -> Option<Call> {
        if let Some(call) = gemini_call(method, path) {
            return Some(call);
        }
        let verb = Verb::of(method)?;
        let rest = path.strip_prefix("/v1/")?;
        let segments: Vec<&str> = rest.split('/').collect();
        let openai = |endpoint, body| Call {
            method: verb,
            endpoint,
            dialect: Dialect::Chat,
            body,
            object: None,
            lists: None,
            path_model: None,
        };
        let with_object = |mut call: Call, kind: ObjectKind, id: &str| {
            object_id_ok(id).then(|| {
                call.object = Some((kind, id.to_string()));
                call
            })
        };
        match (method, segments.as_slice()) {
            ("POST", ["embeddings"]) => Some(openai(Endpoint::Embeddings, BodyKind::Json)),
            ("POST", ["moderations"]) => Some(openai(Endpoint::Moderations, BodyKind::Json)),
            ("POST", ["messages", "count_tokens"]) => Some(Call {
                dialect: Dialect::Messages,
                ..openai(Endpoint::CountTokens, BodyKind::Json)
            }),
            ("POST", ["images", "generations"]) => Some(openai(Endpoint::Images, BodyKind::Json)),
            ("POST", ["images", "edits" | "variations"]) => {
                Some(openai(Endpoint::Images, BodyKind::Form))
            }
            ("POST", ["audio", "speech"]) => Some(openai(Endpoint::AudioSpeech, BodyKind::Json)),
            ("POST", ["audio", "transcriptions" | "translations"]) => {
                Some(openai(Endpoint::AudioTranscriptions, BodyKind::Form))
            }
            ("POST", ["files"]) => Some(openai(Endpoint::Files, BodyKind::Upload)),
            ("GET", ["files"]) => Some(Call {
                lists: Some(ObjectKind::File),
                ..openai(Endpoint::Files, BodyKind::Empty)
            }),
            ("GET" | "DELETE", ["files", id]) | ("GET", ["files", id, "content"]) => with_object(
                openai(Endpoint::Files, BodyKind::Empty),
                ObjectKind::File,
                id,
            ),
            ("POST", ["batches"]) => Some(openai(Endpoint::Batches, BodyKind::Json)),
            ("GET", ["batches"]) => Some(Call {
                lists: Some(ObjectKind::Batch),
                ..openai(Endpoint::Batches, BodyKind::Empty)
            }),
            ("GET", ["batches", id]) | ("POST", ["batches", id, "cancel"]) => with_object(
                openai(Endpoint::Batches, BodyKind::Empty),
                ObjectKind::Batch,
                id,
            ),
            ("GET" | "DELETE", ["responses", id])
            | ("POST", ["responses", id, "cancel"])
            | ("GET", ["responses", id, "input_items"]) => with_object(
                Call {
                    dialect: Dialect::Responses,
                    ..openai(Endpoint::StoredResponses, BodyKind::Empty)
                },
                ObjectKind::Response,
                id,
            ),
            _ => None,
        }
    }

    /// Whether the call names no model: it goes to the group's channel for objects.
    pub fn model_less(&self) -> bool {
        self.object.is_none()
            && self.path_model.is_none()
            && matches!(self.body, BodyKind::Empty | BodyKind::Upload)
    }
}

/// Gemini's `models/{model}:embedContent | :batchEmbedContents | :countTokens`.
fn gemini_call(method: &str, path: &str) -> Option<Call> {
    let segment = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, verb) = segment.rsplit_once(':')?;
    let endpoint = match verb {
        "embedContent" | "batchEmbedContents" => Endpoint::Embeddings,
        "countTokens" => Endpoint::CountTokens,
        _ => return None,
    };
    if method != "POST" || !crate::dialect::gemini_model_ok(model) {
        return None;
    }
    Some(Call {
        method: Verb::Post,
        endpoint,
        dialect: Dialect::Gemini,
        body: BodyKind::Json,
        object: None,
        lists: None,
        path_model: Some(model.to_string()),
    })
}

/// Whether a path segment may be an object id sent upstream as it is: the characters provider
/// ids use, bounded, never a dot segment.
pub fn object_id_ok(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_OBJECT_ID
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The token counts an endpoint's whole answer reports for the work this call did: embeddings'
/// `usage.prompt_tokens` (or `input_tokens`), count_tokens' `input_tokens`, Gemini's
/// `totalTokens`, a transcription's `usage.input_tokens`/`output_tokens`, an image's `usage`.
/// Absent fields stay absent. Reading, listing or cancelling an object (a stored response, a
/// batch) reports the usage of work done before, already counted or not this call's: nothing.
pub fn tokens_of(call: &Call, body: &[u8]) -> Tokens {
    let object_call = matches!(
        call.endpoint,
        Endpoint::Files | Endpoint::Batches | Endpoint::StoredResponses
    );
    if call.method != Verb::Post || object_call {
        return Tokens::default();
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Tokens::default();
    };
    let count = |p: &str| v.pointer(p).and_then(serde_json::Value::as_u64);
    match (call.dialect, call.endpoint) {
        (Dialect::Gemini, Endpoint::CountTokens) => Tokens {
            input: count("/totalTokens"),
            ..Tokens::default()
        },
        (Dialect::Messages, Endpoint::CountTokens) => Tokens {
            input: count("/input_tokens"),
            ..Tokens::default()
        },
        _ => Tokens {
            input: count("/usage/prompt_tokens").or_else(|| count("/usage/input_tokens")),
            output: count("/usage/output_tokens").filter(|_| call.endpoint != Endpoint::Embeddings),
            ..Tokens::default()
        },
    }
}

/// The objects a successful answer of `call` names, which live on the channel that answered:
/// a created file, batch or stored response (`id`), and the files a batch refers to
/// (`input_file_id`, `output_file_id`, `error_file_id`).
pub fn objects_named(call: &Call, body: &[u8]) -> Vec<(ObjectKind, String)> {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Vec::new();
    };
    let id_of = |field: &str| {
        v.get(field)
            .and_then(serde_json::Value::as_str)
            .filter(|id| object_id_ok(id))
            .map(str::to_string)
    };
    let mut out = Vec::new();
    match call.endpoint {
        Endpoint::Files if call.lists.is_none() && v.get("object") == Some(&"file".into()) => {
            out.extend(id_of("id").map(|id| (ObjectKind::File, id)));
        }
        Endpoint::Batches if call.lists.is_none() => {
            out.extend(id_of("id").map(|id| (ObjectKind::Batch, id)));
            for field in ["input_file_id", "output_file_id", "error_file_id"] {
                out.extend(id_of(field).map(|id| (ObjectKind::File, id)));
            }
        }
        _ => {}
    }
    out
}

/// The id of a stored Responses answer (`{"object":"response","id":…}` not sent with
/// `store: false`), from a whole answer's body.
pub fn response_id(body: &[u8]) -> Option<String> {
    response_id_of(&serde_json::from_slice(body).ok()?)
}

/// [`response_id`] of a parsed response object.
pub fn response_id_of(v: &serde_json::Value) -> Option<String> {
    if v.get("object")?.as_str()? != "response" {
        return None;
    }
    if v.get("store").and_then(serde_json::Value::as_bool) == Some(false) {
        return None;
    }
    v.get("id")?
        .as_str()
        .filter(|id| object_id_ok(id))
        .map(str::to_string)
}

/// The entries of a listing (`{"object":"list","data":[{"id":…},…]}`) whose id `keep` accepts,
/// with `first_id`/`last_id` following what is kept. `None` when the body is not a listing.
pub fn filter_listing(body: &[u8], keep: &dyn Fn(&str) -> bool) -> Option<Vec<u8>> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = v.get_mut("data")?.as_array_mut()?;
    data.retain(|item| {
        item.get("id")
            .and_then(serde_json::Value::as_str)
            .is_some_and(keep)
    });
    let ids: Vec<serde_json::Value> = data
        .iter()
        .filter_map(|item| item.get("id").cloned())
        .collect();
    if let Some(obj) = v.as_object_mut() {
        if obj.contains_key("first_id") {
            obj.insert(
                "first_id".into(),
                ids.first().cloned().unwrap_or(serde_json::Value::Null),
            );
        }
        if obj.contains_key("last_id") {
            obj.insert(
                "last_id".into(),
                ids.last().cloned().unwrap_or(serde_json::Value::Null),
            );
        }
    }
    serde_json::to_vec(&v).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_endpoint_is_named_by_its_method_and_path() {
        let call = |m, p| Call::of(m, p).map(|c| (c.endpoint, c.dialect, c.body, c.object));
        assert_eq!(
            call("POST", "/v1/embeddings"),
            Some((Endpoint::Embeddings, Dialect::Chat, BodyKind::Json, None))
        );
        assert_eq!(
            call("POST", "/v1/messages/count_tokens"),
            Some((
                Endpoint::CountTokens,
                Dialect::Messages,
                BodyKind::Json,
                None
            ))
        );
        assert_eq!(
            call("POST", "/v1/audio/transcriptions").map(|c| c.2),
            Some(BodyKind::Form)
        );
        assert_eq!(
            call("POST", "/v1/files").map(|c| c.2),
            Some(BodyKind::Upload)
        );
        assert_eq!(
            call("GET", "/v1/files/file-abc/content").and_then(|c| c.3),
            Some((ObjectKind::File, "file-abc".into()))
        );
        assert_eq!(
            call("POST", "/v1/batches/batch_1/cancel").and_then(|c| c.3),
            Some((ObjectKind::Batch, "batch_1".into()))
        );
        assert_eq!(
            call("GET", "/v1/responses/resp_1/input_items").map(|c| (c.0, c.1)),
            Some((Endpoint::StoredResponses, Dialect::Responses))
        );
        let gemini = Call::of("POST", "/v1beta/models/text-embedding-004:embedContent");
        assert_eq!(
            gemini.as_ref().map(|c| (c.endpoint, c.dialect)),
            Some((Endpoint::Embeddings, Dialect::Gemini))
        );
        assert_eq!(
            gemini.and_then(|c| c.path_model).as_deref(),
            Some("text-embedding-004")
        );
        assert_eq!(
            call("POST", "/v1/models/gemini-2.5-flash:countTokens").map(|c| c.0),
            Some(Endpoint::CountTokens)
        );
        assert!(Call::of("GET", "/v1/files")
            .is_some_and(|c| c.lists == Some(ObjectKind::File) && c.model_less()));
    }

    #[test]
    fn unknown_paths_methods_and_unsafe_ids_are_not_calls() {
        for (m, p) in [
            ("GET", "/v1/embeddings"),
            ("POST", "/v1/nothing"),
            ("PUT", "/v1/files/file-1"),
            ("GET", "/v1/files/../admin"),
            ("GET", "/v1/files/a%2Fb"),
            ("POST", "/v1beta/models/m:generateContent"),
            ("POST", "/v1beta/models/../x:countTokens"),
            ("GET", "/v2/files"),
        ] {
            assert!(Call::of(m, p).is_none(), "{m} {p}");
        }
        assert!(Call::of("GET", &format!("/v1/files/{}", "a".repeat(300))).is_none());
    }

    #[test]
    fn answers_report_their_tokens_and_absent_stays_absent() {
        let emb = Call::of("POST", "/v1/embeddings").unwrap();
        let t = tokens_of(&emb, br#"{"usage":{"prompt_tokens":8,"total_tokens":8}}"#);
        assert_eq!((t.input, t.output), (Some(8), None));
        assert_eq!(tokens_of(&emb, b"{}"), Tokens::default());
        let count = Call::of("POST", "/v1/messages/count_tokens").unwrap();
        assert_eq!(tokens_of(&count, br#"{"input_tokens":42}"#).input, Some(42));
        let gem = Call::of("POST", "/v1beta/models/m:countTokens").unwrap();
        assert_eq!(tokens_of(&gem, br#"{"totalTokens":7}"#).input, Some(7));
        let tr = Call::of("POST", "/v1/audio/transcriptions").unwrap();
        let t = tokens_of(
            &tr,
            br#"{"text":"x","usage":{"input_tokens":10,"output_tokens":3}}"#,
        );
        assert_eq!((t.input, t.output), (Some(10), Some(3)));
    }

    #[test]
    fn reading_an_object_counts_no_tokens_again() {
        let usage = br#"{"id":"resp_1","object":"response","usage":{"input_tokens":10,"output_tokens":16}}"#;
        for (m, p) in [
            ("GET", "/v1/responses/resp_1"),
            ("POST", "/v1/responses/resp_1/cancel"),
            ("GET", "/v1/batches/batch_1"),
            ("POST", "/v1/batches"),
        ] {
            assert_eq!(
                tokens_of(&Call::of(m, p).unwrap(), usage),
                Tokens::default(),
                "{m} {p}"
            );
        }
    }

    #[test]
    fn created_objects_and_the_files_a_batch_names_live_on_its_channel() {
        let up = Call::of("POST", "/v1/files").unwrap();
        assert_eq!(
            objects_named(&up, br#"{"id":"file-1","object":"file","bytes":3}"#),
            [(ObjectKind::File, "file-1".to_string())]
        );
        let get = Call::of("GET", "/v1/batches/batch_1").unwrap();
        let batch = br#"{"id":"batch_1","object":"batch","input_file_id":"file-in","output_file_id":"file-out","error_file_id":null}"#;
        assert_eq!(
            objects_named(&get, batch),
            [
                (ObjectKind::Batch, "batch_1".to_string()),
                (ObjectKind::File, "file-in".to_string()),
                (ObjectKind::File, "file-out".to_string()),
            ]
        );
        let list = Call::of("GET", "/v1/files").unwrap();
        assert!(objects_named(&list, br#"{"object":"list","data":[]}"#).is_empty());
        assert_eq!(
            response_id(br#"{"id":"resp_1","object":"response","store":true}"#).as_deref(),
            Some("resp_1")
        );
        assert_eq!(
            response_id(br#"{"id":"resp_1","object":"response","store":false}"#),
            None
        );
    }

    #[test]
    fn a_listing_keeps_only_what_the_caller_owns() {
        let body = br#"{"object":"list","data":[{"id":"a"},{"id":"b"},{"id":"c"}],"first_id":"a","last_id":"c","has_more":false}"#;
        let kept = filter_listing(body, &|id| id != "a").unwrap();
        let v: serde_json::Value = serde_json::from_slice(&kept).unwrap();
        assert_eq!(v["data"].as_array().unwrap().len(), 2);
        assert_eq!(v["first_id"], "b");
        assert_eq!(v["last_id"], "c");
        assert!(filter_listing(b"[1]", &|_| true).is_none());
    }
}
