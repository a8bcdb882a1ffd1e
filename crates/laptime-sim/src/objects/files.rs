//! The file store: uploaded files and the files batches produce, their bytes in memory.
//!
//! Bounded and never evicting: at most [`MAX_FILES`] files and [`MAX_BYTES`] bytes of content
//! held at once (uploads in flight count against the bytes as they arrive, through a
//! [`Reservation`]). A file stays until its owner deletes it or the sim ends; an upload or a
//! batch output that does not fit is refused, never made room for, so no test loses a file it
//! made.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{id, lock, page, seq, ListQuery, Owner, Page, Shared};

/// The most bytes of file content held at once.
pub(crate) const MAX_BYTES: usize = 256 * 1024 * 1024;
/// The most files held at once.
pub(crate) const MAX_FILES: usize = 10_000;
/// How long a `batch` file lives at OpenAI by default (the object's `expires_at`).
const BATCH_FILE_TTL_S: u64 = 30 * 24 * 3600;

pub(crate) const PREFIX: &str = "file-";

/// What a file is for, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Purpose {
    Assistants,
    AssistantsOutput,
    Batch,
    BatchOutput,
    FineTune,
    FineTuneResults,
    Vision,
    UserData,
    Evals,
}

impl Purpose {
    /// The purposes a client may upload with (the `_output`/`-results` ones are the provider's).
    pub(crate) const UPLOADABLE: [Purpose; 6] = [
        Purpose::Assistants,
        Purpose::Batch,
        Purpose::FineTune,
        Purpose::Vision,
        Purpose::UserData,
        Purpose::Evals,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Purpose::Assistants => "assistants",
            Purpose::AssistantsOutput => "assistants_output",
            Purpose::Batch => "batch",
            Purpose::BatchOutput => "batch_output",
            Purpose::FineTune => "fine-tune",
            Purpose::FineTuneResults => "fine-tune-results",
            Purpose::Vision => "vision",
            Purpose::UserData => "user_data",
            Purpose::Evals => "evals",
        }
    }

    pub(crate) fn upload(name: &str) -> Option<Purpose> {
        Purpose::UPLOADABLE.into_iter().find(|p| p.as_str() == name)
    }

    pub(crate) fn parse(name: &str) -> Option<Purpose> {
        let all = [
            Purpose::AssistantsOutput,
            Purpose::BatchOutput,
            Purpose::FineTuneResults,
        ];
        Purpose::UPLOADABLE
            .into_iter()
            .chain(all)
            .find(|p| p.as_str() == name)
    }
}

/// A file's metadata, as its object shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileMeta {
    pub(crate) id: String,
    pub(crate) bytes: usize,
    pub(crate) created_at: u64,
    pub(crate) filename: String,
    pub(crate) purpose: Purpose,
    pub(crate) expires_at: Option<u64>,
}

struct Stored {
    owner: Owner,
    meta: FileMeta,
    content: Bytes,
}

/// Why a file could not be stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Full {
    /// Its bytes would take the store over [`MAX_BYTES`].
    Bytes,
    /// The store already holds [`MAX_FILES`] files.
    Count,
}

#[derive(Default)]
pub(crate) struct Files {
    by_seq: BTreeMap<u64, Stored>,
    last: u64,
    /// Bytes of the stored files plus those of uploads in flight.
    reserved: usize,
}

/// The store, shared with the reservations of uploads in flight.
#[derive(Default, Clone)]
pub(crate) struct FileStore(Shared<Files>);

/// Bytes counted against the store for an upload still arriving (or a file about to be
/// stored). Given back when dropped, unless the file was stored with them.
pub(crate) struct Reservation {
    files: Arc<Mutex<Files>>,
    bytes: usize,
}

impl Reservation {
    /// Counts `n` more bytes, or refuses them (and keeps what it had) when the store is full.
    pub(crate) fn grow(&mut self, n: usize) -> Result<(), Full> {
        let mut files = lock(&self.files);
        let total = files.reserved.checked_add(n).filter(|t| *t <= MAX_BYTES);
        let total = total.ok_or(Full::Bytes)?;
        files.reserved = total;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut files = lock(&self.files);
        files.reserved = files.reserved.saturating_sub(self.bytes);
    }
}

impl FileStore {
    /// An empty reservation to grow as an upload arrives.
    pub(crate) fn reserve(&self) -> Reservation {
        Reservation {
            files: self.0.clone(),
            bytes: 0,
        }
    }

    /// Stores `content` (whose bytes `reservation` already counts) as a new file of `owner`.
    pub(crate) fn insert(
        &self,
        mut reservation: Reservation,
        owner: &Owner,
        filename: String,
        purpose: Purpose,
        content: Bytes,
        now: u64,
    ) -> Result<FileMeta, Full> {
        if reservation.bytes < content.len() {
            reservation.grow(content.len() - reservation.bytes)?;
        }
        let mut files = lock(&self.0);
        if files.by_seq.len() >= MAX_FILES {
            return Err(Full::Count);
        }
        files.last += 1;
        let n = files.last;
        let expires_at = (purpose == Purpose::Batch).then_some(now + BATCH_FILE_TTL_S);
        let meta = FileMeta {
            id: id(PREFIX, n),
            bytes: content.len(),
            created_at: now,
            filename,
            purpose,
            expires_at,
        };
        // The file now holds the reserved bytes; any excess reserved is given back.
        files.reserved = files
            .reserved
            .saturating_sub(reservation.bytes)
            .saturating_add(content.len());
        reservation.bytes = 0;
        files.by_seq.insert(
            n,
            Stored {
                owner: owner.clone(),
                meta: meta.clone(),
                content,
            },
        );
        Ok(meta)
    }

    /// Stores bytes made by the sim itself (a batch's output).
    pub(crate) fn insert_made(
        &self,
        owner: &Owner,
        filename: String,
        purpose: Purpose,
        content: Bytes,
        now: u64,
    ) -> Result<FileMeta, Full> {
        self.insert(self.reserve(), owner, filename, purpose, content, now)
    }

    fn with<T>(&self, owner: &Owner, id_text: &str, f: impl FnOnce(&Stored) -> T) -> Option<T> {
        let n = seq(PREFIX, id_text)?;
        let files = lock(&self.0);
        files.by_seq.get(&n).filter(|s| s.owner == *owner).map(f)
    }

    pub(crate) fn get(&self, owner: &Owner, id_text: &str) -> Option<FileMeta> {
        self.with(owner, id_text, |s| s.meta.clone())
    }

    pub(crate) fn content(&self, owner: &Owner, id_text: &str) -> Option<(FileMeta, Bytes)> {
        self.with(owner, id_text, |s| (s.meta.clone(), s.content.clone()))
    }

    pub(crate) fn delete(&self, owner: &Owner, id_text: &str) -> Option<FileMeta> {
        let n = seq(PREFIX, id_text)?;
        let mut files = lock(&self.0);
        if files.by_seq.get(&n)?.owner != *owner {
            return None;
        }
        let gone = files.by_seq.remove(&n)?;
        files.reserved = files.reserved.saturating_sub(gone.content.len());
        Some(gone.meta)
    }

    /// The owner's files (of `purpose`, if given), paged.
    pub(crate) fn list(
        &self,
        owner: &Owner,
        purpose: Option<Purpose>,
        query: &ListQuery,
    ) -> Page<FileMeta> {
        let files = lock(&self.0);
        let mine = files
            .by_seq
            .iter()
            .filter(|(_, s)| s.owner == *owner && purpose.is_none_or(|p| s.meta.purpose == p))
            .map(|(n, s)| (*n, s.meta.clone()));
        page(mine, query)
    }

    /// Files held and the bytes they (and uploads in flight) take.
    pub(crate) fn held(&self) -> (usize, usize) {
        let files = lock(&self.0);
        (files.by_seq.len(), files.reserved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Order;

    fn all() -> ListQuery {
        ListQuery {
            after: None,
            limit: 100,
            order: Order::Asc,
        }
    }

    #[test]
    fn a_file_is_seen_only_by_its_owner() {
        let store = FileStore::default();
        let (a, b) = (Owner::key("a"), Owner::key("b"));
        let meta = store
            .insert_made(
                &a,
                "x.jsonl".into(),
                Purpose::Batch,
                Bytes::from_static(b"{}"),
                7,
            )
            .unwrap();
        assert_eq!(meta.id, "file-laptimesim0001");
        assert_eq!(meta.expires_at, Some(7 + BATCH_FILE_TTL_S));
        assert_eq!(store.get(&a, &meta.id), Some(meta.clone()));
        assert_eq!(store.get(&b, &meta.id), None);
        assert_eq!(store.delete(&b, &meta.id), None);
        assert_eq!(store.list(&b, None, &all()).items, vec![]);
        assert_eq!(store.list(&a, None, &all()).items, vec![meta.clone()]);
        assert_eq!(store.list(&a, Some(Purpose::Vision), &all()).items, vec![]);
        assert_eq!(store.delete(&a, &meta.id), Some(meta.clone()));
        assert_eq!(store.get(&a, &meta.id), None);
        assert_eq!(store.held(), (0, 0));
    }

    #[test]
    fn uploads_in_flight_count_against_the_cap_and_give_back_what_they_do_not_keep() {
        let store = FileStore::default();
        let mut first = store.reserve();
        first.grow(MAX_BYTES - 10).unwrap();
        let mut second = store.reserve();
        assert_eq!(second.grow(11), Err(Full::Bytes));
        second.grow(10).unwrap();
        drop(first);
        assert_eq!(store.held(), (0, 10));
        let content = Bytes::from_static(b"0123456789");
        store
            .insert(
                second,
                &Owner::key("a"),
                "f".into(),
                Purpose::UserData,
                content,
                1,
            )
            .unwrap();
        assert_eq!(store.held(), (1, 10));
        // A made file that does not fit is refused whole.
        let big = Bytes::from(vec![0u8; MAX_BYTES]);
        let refused = store.insert_made(&Owner::key("a"), "g".into(), Purpose::BatchOutput, big, 1);
        assert_eq!(refused, Err(Full::Bytes));
        assert_eq!(store.held(), (1, 10));
    }

    #[test]
    fn purposes_parse_by_their_openai_names() {
        assert_eq!(Purpose::upload("fine-tune"), Some(Purpose::FineTune));
        assert_eq!(Purpose::upload("batch_output"), None);
        assert_eq!(Purpose::parse("batch_output"), Some(Purpose::BatchOutput));
        assert_eq!(Purpose::parse("nope"), None);
    }
}
