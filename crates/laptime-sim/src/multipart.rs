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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::files::FileStore;
    use futures_util::stream;

    const CT: &str = "multipart/form-data; boundary=XyZ";

    fn body(file: &[u8]) -> Vec<u8> {
        let mut b =
            b"--XyZ\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n".to_vec();
        b.extend_from_slice(
            b"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n",
        );
        b.extend_from_slice(file);
        b.extend_from_slice(b"\r\n--XyZ--\r\n");
        b
    }

    /// The body in pieces of `size` bytes, as a socket might deliver it.
    fn pieces(b: &[u8], size: usize) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        let owned: Vec<Result<Bytes, std::io::Error>> = b
            .chunks(size)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        stream::iter(owned)
    }

    #[tokio::test]
    async fn a_form_split_anywhere_is_read_whole_and_the_file_counted_against_the_store() {
        let store = FileStore::default();
        let file: Vec<u8> = (0..5000u32).map(|i| (i % 7) as u8).collect();
        for size in [1, 7, 4096] {
            let sink = Sink::Keep(store.reserve());
            let (form, sink) = read(Some(CT), pieces(&body(&file), size), sink)
                .await
                .unwrap();
            assert_eq!(form.field("purpose"), Some("batch"));
            let part = form.file.unwrap();
            assert_eq!((part.filename.as_str(), part.bytes), ("in.jsonl", 5000));
            assert_eq!(part.kept.unwrap().as_ref(), file.as_slice());
            assert_eq!(store.held(), (0, 5000), "reserved while the sink lives");
            drop(sink);
            assert_eq!(store.held(), (0, 0));
        }
    }

    #[tokio::test]
    async fn a_counted_file_over_its_limit_or_a_body_that_is_no_form_is_refused() {
        let big = vec![1u8; 100];
        let sink = Sink::Count { limit: 99 };
        let err = read(Some(CT), pieces(&body(&big), 16), sink)
            .await
            .err()
            .unwrap();
        assert!(matches!(err, FormError::TooLarge));
        assert_eq!(err.api_error("The file").status, 413);
        let sink = Sink::Count { limit: 100 };
        let (form, _) = read(Some(CT), pieces(&body(&big), 16), sink).await.unwrap();
        assert_eq!(form.file.unwrap().kept, None, "counted, not kept");
        let err = read(
            Some("application/json"),
            pieces(b"{}", 2),
            Sink::Count { limit: 1 },
        )
        .await
        .err()
        .unwrap();
        assert!(matches!(err, FormError::Invalid(_)));
        let truncated = &body(&big)[..50];
        let err = read(Some(CT), pieces(truncated, 8), Sink::Count { limit: 1000 })
            .await
            .err()
            .unwrap();
        assert_eq!(err.api_error("The file").status, 400);
    }
}
