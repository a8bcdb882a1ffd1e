//! The batch store: each batch's state, timestamps, counts and produced files, by owner.
//!
//! At most [`MAX_BATCHES`] batches are held; creating one more is refused (a batch is never
//! forgotten behind a test's back). How a batch runs is the endpoint's business
//! (`endpoints::batches`); this module only keeps it.

use std::collections::BTreeMap;

use super::{id, page, seq, ListQuery, Owner, Page};

pub(crate) const MAX_BATCHES: usize = 1000;
pub(crate) const PREFIX: &str = "batch_";

/// The endpoints a batch may run, as OpenAI lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchEndpoint {
    Responses,
    ChatCompletions,
    Completions,
    Embeddings,
    Moderations,
}

impl BatchEndpoint {
    pub(crate) const ALL: [BatchEndpoint; 5] = [
        BatchEndpoint::Responses,
        BatchEndpoint::ChatCompletions,
        BatchEndpoint::Completions,
        BatchEndpoint::Embeddings,
        BatchEndpoint::Moderations,
    ];

    pub(crate) fn path(self) -> &'static str {
        match self {
            BatchEndpoint::Responses => "/v1/responses",
            BatchEndpoint::ChatCompletions => "/v1/chat/completions",
            BatchEndpoint::Completions => "/v1/completions",
            BatchEndpoint::Embeddings => "/v1/embeddings",
            BatchEndpoint::Moderations => "/v1/moderations",
        }
    }

    pub(crate) fn parse(path: &str) -> Option<BatchEndpoint> {
        BatchEndpoint::ALL.into_iter().find(|e| e.path() == path)
    }
}

/// A batch's status, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchStatus {
    Validating,
    Failed,
    Completed,
    Cancelling,
    Cancelled,
}

impl BatchStatus {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BatchStatus::Validating => "validating",
            BatchStatus::Failed => "failed",
            BatchStatus::Completed => "completed",
            BatchStatus::Cancelling => "cancelling",
            BatchStatus::Cancelled => "cancelled",
        }
    }
}

/// `request_counts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Counts {
    pub(crate) total: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
}

/// The batch's `usage`, summed over its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct BatchUsage {
    pub(crate) input: u64,
    pub(crate) cached: u64,
    pub(crate) output: u64,
    pub(crate) reasoning: u64,
}

/// One entry of a failed batch's `errors.data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineError {
    pub(crate) code: &'static str,
    pub(crate) line: Option<u64>,
    pub(crate) message: String,
    pub(crate) param: Option<&'static str>,
}

/// Everything a batch object shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    pub(crate) id: String,
    pub(crate) endpoint: BatchEndpoint,
    pub(crate) input_file_id: String,
    pub(crate) completion_window: String,
    /// The request's `metadata` object, encoded (or none).
    pub(crate) metadata: Option<String>,
    pub(crate) created_at: u64,
    pub(crate) status: BatchStatus,
    pub(crate) in_progress_at: Option<u64>,
    pub(crate) finalizing_at: Option<u64>,
    pub(crate) completed_at: Option<u64>,
    pub(crate) failed_at: Option<u64>,
    pub(crate) cancelling_at: Option<u64>,
    pub(crate) cancelled_at: Option<u64>,
    pub(crate) output_file_id: Option<String>,
    pub(crate) error_file_id: Option<String>,
    pub(crate) counts: Counts,
    pub(crate) usage: Option<BatchUsage>,
    pub(crate) model: Option<String>,
    pub(crate) errors: Vec<LineError>,
}

/// What a new batch is made of.
pub(crate) struct NewBatch {
    pub(crate) endpoint: BatchEndpoint,
    pub(crate) input_file_id: String,
    pub(crate) completion_window: String,
    pub(crate) metadata: Option<String>,
}

/// The store already holds [`MAX_BATCHES`] batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooMany;

#[derive(Default)]
pub(crate) struct Batches {
    by_seq: BTreeMap<u64, (Owner, Batch)>,
    last: u64,
}

impl Batches {
    /// A new batch of `owner`, `validating`.
    pub(crate) fn create(
        &mut self,
        owner: &Owner,
        new: NewBatch,
        now: u64,
    ) -> Result<Batch, TooMany> {
        if self.by_seq.len() >= MAX_BATCHES {
            return Err(TooMany);
        }
        self.last += 1;
        let batch = Batch {
            id: id(PREFIX, self.last),
            endpoint: new.endpoint,
            input_file_id: new.input_file_id,
            completion_window: new.completion_window,
            metadata: new.metadata,
            created_at: now,
            status: BatchStatus::Validating,
            in_progress_at: None,
            finalizing_at: None,
            completed_at: None,
            failed_at: None,
            cancelling_at: None,
            cancelled_at: None,
            output_file_id: None,
            error_file_id: None,
            counts: Counts::default(),
            usage: None,
            model: None,
            errors: Vec::new(),
        };
        self.by_seq
            .insert(self.last, (owner.clone(), batch.clone()));
        Ok(batch)
    }

    /// The owner's batch, to read or move along.
    pub(crate) fn get_mut(&mut self, owner: &Owner, id_text: &str) -> Option<&mut Batch> {
        let n = seq(PREFIX, id_text)?;
        match self.by_seq.get_mut(&n) {
            Some((o, batch)) if o == owner => Some(batch),
            _ => None,
        }
    }

    /// The ids of the owner's batches, paged.
    pub(crate) fn list_ids(&self, owner: &Owner, query: &ListQuery) -> Page<String> {
        let mine = self
            .by_seq
            .iter()
            .filter(|(_, (o, _))| o == owner)
            .map(|(n, (_, b))| (*n, b.id.clone()));
        page(mine, query)
    }

    pub(crate) fn held(&self) -> usize {
        self.by_seq.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::Order;

    fn new() -> NewBatch {
        NewBatch {
            endpoint: BatchEndpoint::ChatCompletions,
            input_file_id: "file-laptimesim0001".into(),
            completion_window: "24h".into(),
            metadata: None,
        }
    }

    #[test]
    fn a_batch_is_found_and_listed_only_for_its_owner() {
        let mut s = Batches::default();
        let (a, b) = (Owner::key("a"), Owner::key("b"));
        let batch = s.create(&a, new(), 5).unwrap();
        assert_eq!(batch.id, "batch_laptimesim0001");
        assert_eq!(batch.status, BatchStatus::Validating);
        assert!(s.get_mut(&a, &batch.id).is_some());
        assert!(s.get_mut(&b, &batch.id).is_none());
        let q = ListQuery {
            after: None,
            limit: 20,
            order: Order::Desc,
        };
        assert_eq!(s.list_ids(&a, &q).items, vec![batch.id.clone()]);
        assert!(s.list_ids(&b, &q).items.is_empty());
    }

    #[test]
    fn the_store_refuses_past_its_cap() {
        let mut s = Batches::default();
        for _ in 0..MAX_BATCHES {
            s.create(&Owner::key("a"), new(), 0).unwrap();
        }
        assert_eq!(s.create(&Owner::key("a"), new(), 0), Err(TooMany));
        assert_eq!(s.held(), MAX_BATCHES);
    }

    #[test]
    fn endpoints_parse_by_path() {
        assert_eq!(
            BatchEndpoint::parse("/v1/embeddings"),
            Some(BatchEndpoint::Embeddings)
        );
        assert_eq!(BatchEndpoint::parse("/v1/images/generations"), None);
    }
}
