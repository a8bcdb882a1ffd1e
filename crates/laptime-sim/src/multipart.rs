//! `multipart/form-data` request bodies (file uploads, audio to transcribe), read as they
//! arrive: the text fields kept (each bounded), the `file` field's bytes either kept against
//! the file store's cap or only counted, so memory never holds more than the store allows.

use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};

use crate::objects::files::Reservation;
use crate::objects::lock;
use crate::wire::ApiError;

/// The most bytes of one text field.
const MAX_TEXT_FIELD: u64 = 1024 * 1024;
/// The most fields of one form.
const MAX_FIELDS: usize = 100;

/// What passed through a body stream: its length and SHA-256, for the request log.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) bytes: u64,
    hasher: Sha256,
}

impl Tally {
    pub(crate) fn sha256_hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}

pub(crate) type SharedTally = Arc<Mutex<Tally>>;

/// `body` with every chunk counted and hashed into `tally` as it passes.
pub(crate) fn tallied<S, E>(body: S, tally: SharedTally) -> impl Stream<Item = Result<Bytes, E>>
where
    S: Stream<Item = Result<Bytes, E>>,
{
    body.inspect(move |chunk| {
        if let Ok(chunk) = chunk {
            let mut t = lock(&tally);
            t.bytes += chunk.len() as u64;
            t.hasher.update(chunk);
        }
    })
}

/// Where the `file` field's bytes go.
pub(crate) enum Sink {
    /// Kept, each chunk counted against the file store first.
    Keep(Reservation),
    /// Counted only, up to `limit` bytes.
    Count { limit: u64 },
}

/// The `file` field of a form.
pub(crate) struct FilePart {
    pub(crate) filename: String,
    pub(crate) bytes: u64,
    /// The bytes, for [`Sink::Keep`] (its reservation counts them).
    pub(crate) kept: Option<Bytes>,
}

/// A form read whole.
pub(crate) struct Form {
    pub(crate) fields: Vec<(String, String)>,
    pub(crate) file: Option<FilePart>,
}

impl Form {
    /// The first text field named `name`.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why a form could not be read.
#[derive(Debug)]
pub(crate) enum FormError {
    /// Not `multipart/form-data` with a boundary, or not well formed.
    Invalid(String),
    /// The file is larger than the sink takes.
    TooLarge,
}

impl FormError {
    /// OpenAI's words for it.
    pub(crate) fn api_error(&self, what: &str) -> ApiError {
        match self {
            FormError::Invalid(why) => {
                ApiError::invalid_request(format!("Could not parse multipart form: {why}"))
            }
            FormError::TooLarge => ApiError::invalid_request(format!(
                "{what} is too large: it does not fit in the sim's file storage."
            ))
            .status(413),
        }
    }
}

/// Reads the form of `content_type` from `body`, the `file` field into `sink`, and gives the
/// sink back (a kept file's reservation goes to the store with its bytes).
pub(crate) async fn read<S, E>(
    content_type: Option<&str>,
    body: S,
    mut sink: Sink,
) -> Result<(Form, Sink), FormError>
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>> + 'static,
{
    let boundary = content_type
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or_else(|| {
            FormError::Invalid(
                "the Content-Type must be multipart/form-data with a boundary".into(),
            )
        })?;
    let limits = multer::SizeLimit::new()
        .per_field(MAX_TEXT_FIELD)
        .for_field("file", u64::MAX);
    let constraints = multer::Constraints::new().size_limit(limits);
    let mut multipart = multer::Multipart::with_constraints(body, boundary, constraints);
    let mut form = Form {
        fields: Vec::new(),
        file: None,
    };
    let mut count = 0;
    while let Some(mut field) = multipart.next_field().await.map_err(invalid)? {
        count += 1;
        if count > MAX_FIELDS {
            return Err(FormError::Invalid(format!("more than {MAX_FIELDS} fields")));
        }
        let name = field.name().unwrap_or("").to_owned();
        if name == "file" && form.file.is_none() {
            let filename = field.file_name().unwrap_or("file").to_owned();
            let mut bytes = 0u64;
            let mut kept = BytesMut::new();
            while let Some(chunk) = field.chunk().await.map_err(invalid)? {
                bytes += chunk.len() as u64;
                match &mut sink {
                    Sink::Keep(reservation) => {
                        reservation
                            .grow(chunk.len())
                            .map_err(|_| FormError::TooLarge)?;
                        kept.extend_from_slice(&chunk);
                    }
                    Sink::Count { limit } if bytes > *limit => return Err(FormError::TooLarge),
                    Sink::Count { .. } => {}
                }
            }
            let kept = matches!(sink, Sink::Keep(_)).then(|| kept.freeze());
            form.file = Some(FilePart {
                filename,
                bytes,
                kept,
            });
        } else if field.file_name().is_some() {
            // Another file part: read through, kept nowhere.
            while field.chunk().await.map_err(invalid)?.is_some() {}
        } else {
            let text = field.text().await.map_err(invalid)?;
            form.fields.push((name, text));
        }
    }
    Ok((form, sink))
}

fn invalid(e: multer::Error) -> FormError {
    match e {
        multer::Error::FieldSizeExceeded { field_name, .. } => FormError::Invalid(format!(
            "the field {} is longer than {MAX_TEXT_FIELD} bytes",
            field_name.unwrap_or_default()
        )),
        other => FormError::Invalid(other.to_string()),
    }
}
