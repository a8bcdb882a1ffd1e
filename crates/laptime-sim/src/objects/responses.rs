//! Stored Responses: the final response object of every `POST /v1/responses` answered with
//! `store` not false, and its input items, by id and owner.
//!
//! Bounded as a cache, as the brief of a provider's store is: at most [`MAX_RESPONSES`]
//! responses and [`MAX_BYTES`] bytes of their JSON; storing one more forgets the least
//! recently used (stored, read, or named as `previous_response_id`) first. A single response
//! larger than the byte cap is not stored.
//!
//! A background response (`background: true`, not streamed) is stored queued: the first read
//! of it finds it completed, and a cancel before that cancels it.

use std::collections::{BTreeMap, HashMap};

use super::{id, Owner};

pub(crate) const MAX_RESPONSES: usize = 1000;
pub(crate) const MAX_BYTES: usize = 64 * 1024 * 1024;
pub(crate) const PREFIX: &str = "resp_";

/// A response to remember.
pub(crate) struct NewResponse {
    pub(crate) id: String,
    pub(crate) owner: Owner,
    /// The final response object.
    pub(crate) object: String,
    /// For a background response: the object it becomes if cancelled while queued.
    pub(crate) cancelled: Option<String>,
    /// Each input item, encoded.
    pub(crate) input_items: Vec<String>,
}

/// Where a stored response is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Answered in the foreground, or a background one that has been read.
    Done,
    /// A background response nobody has read yet.
    Queued,
    /// A background response cancelled while queued.
    Cancelled,
}

struct Entry {
    owner: Owner,
    object: String,
    cancelled: Option<String>,
    input_items: Vec<String>,
    state: State,
    tick: u64,
}

impl Entry {
    fn size(&self) -> usize {
        self.object.len()
            + self.cancelled.as_ref().map_or(0, String::len)
            + self.input_items.iter().map(String::len).sum::<usize>()
    }

    fn current(&self) -> &str {
        match (self.state, &self.cancelled) {
            (State::Cancelled, Some(cancelled)) => cancelled,
            _ => &self.object,
        }
    }
}

/// Why a response cannot be cancelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NotBackground;

#[derive(Default)]
pub(crate) struct Responses {
    entries: HashMap<String, Entry>,
    /// Use order: the least recently used entry has the smallest tick.
    lru: BTreeMap<u64, String>,
    tick: u64,
    bytes: usize,
    last: u64,
}

impl Responses {
    /// The id of the next response answered (stored or not).
    pub(crate) fn next_id(&mut self) -> String {
        self.last += 1;
        id(PREFIX, self.last)
    }

    pub(crate) fn insert(&mut self, new: NewResponse) {
        let background = new.cancelled.is_some();
        let entry = Entry {
            owner: new.owner,
            object: new.object,
            cancelled: new.cancelled,
            input_items: new.input_items,
            state: if background {
                State::Queued
            } else {
                State::Done
            },
            tick: 0,
        };
        let size = entry.size();
        if size > MAX_BYTES {
            return;
        }
        self.remove(&new.id);
        while self.entries.len() >= MAX_RESPONSES || self.bytes + size > MAX_BYTES {
            let Some((_, oldest)) = self.lru.pop_first() else {
                break;
            };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.bytes -= gone.size();
            }
        }
        self.bytes += size;
        self.entries.insert(new.id.clone(), entry);
        self.touch(&new.id);
    }

    /// The entry if `owner` has it, marked as just used.
    fn find(&mut self, owner: &Owner, id_text: &str) -> Option<&mut Entry> {
        if self.entries.get(id_text)?.owner != *owner {
            return None;
        }
        self.touch(id_text);
        self.entries.get_mut(id_text)
    }

    fn touch(&mut self, id_text: &str) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(entry) = self.entries.get_mut(id_text) {
            self.lru.remove(&entry.tick);
            entry.tick = tick;
            self.lru.insert(tick, id_text.to_owned());
        }
    }

    fn remove(&mut self, id_text: &str) -> bool {
        match self.entries.remove(id_text) {
            Some(gone) => {
                self.lru.remove(&gone.tick);
                self.bytes -= gone.size();
                true
            }
            None => false,
        }
    }

    /// Whether `owner` has the response (what `previous_response_id` needs).
    pub(crate) fn has(&mut self, owner: &Owner, id_text: &str) -> bool {
        self.find(owner, id_text).is_some()
    }

    /// The response object as it stands; a queued background response completes here.
    pub(crate) fn read(&mut self, owner: &Owner, id_text: &str) -> Option<String> {
        let entry = self.find(owner, id_text)?;
        if entry.state == State::Queued {
            entry.state = State::Done;
        }
        Some(entry.current().to_owned())
    }

    pub(crate) fn input_items(&mut self, owner: &Owner, id_text: &str) -> Option<Vec<String>> {
        self.find(owner, id_text).map(|e| e.input_items.clone())
    }

    pub(crate) fn delete(&mut self, owner: &Owner, id_text: &str) -> bool {
        self.find(owner, id_text).is_some() && self.remove(id_text)
    }

    /// Cancels a queued background response; one already finished (or cancelled) is answered
    /// as it is. `None` when the owner has no such response.
    pub(crate) fn cancel(
        &mut self,
        owner: &Owner,
        id_text: &str,
    ) -> Option<Result<String, NotBackground>> {
        let entry = self.find(owner, id_text)?;
        if entry.cancelled.is_none() {
            return Some(Err(NotBackground));
        }
        if entry.state == State::Queued {
            entry.state = State::Cancelled;
        }
        Some(Ok(entry.current().to_owned()))
    }

    /// Responses held and the bytes of their JSON.
    pub(crate) fn held(&self) -> (usize, usize) {
        (self.entries.len(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(store: &mut Responses, owner: &str, cancelled: Option<&str>) -> String {
        let id = store.next_id();
        store.insert(NewResponse {
            id: id.clone(),
            owner: Owner::key(owner),
            object: format!("{{\"id\":\"{id}\",\"status\":\"completed\"}}"),
            cancelled: cancelled.map(str::to_owned),
            input_items: vec!["{}".to_owned()],
        });
        id
    }

    #[test]
    fn a_response_is_found_only_by_its_owner() {
        let mut s = Responses::default();
        let id = new(&mut s, "a", None);
        assert_eq!(id, "resp_laptimesim0001");
        assert!(s.has(&Owner::key("a"), &id));
        assert!(!s.has(&Owner::key("b"), &id));
        assert_eq!(s.read(&Owner::key("b"), &id), None);
        assert!(!s.delete(&Owner::key("b"), &id));
        assert!(s.delete(&Owner::key("a"), &id));
        assert!(!s.has(&Owner::key("a"), &id));
        assert_eq!(s.held(), (0, 0));
    }

    #[test]
    fn the_least_recently_used_goes_first_when_full() {
        let mut s = Responses::default();
        let first = new(&mut s, "a", None);
        let second = new(&mut s, "a", None);
        for _ in 2..MAX_RESPONSES {
            new(&mut s, "a", None);
        }
        // Reading the first makes the second the least recently used.
        assert!(s.read(&Owner::key("a"), &first).is_some());
        new(&mut s, "a", None);
        assert_eq!(s.held().0, MAX_RESPONSES);
        assert!(s.has(&Owner::key("a"), &first));
        assert!(!s.has(&Owner::key("a"), &second));
    }

    #[test]
    fn only_a_queued_background_response_is_cancelled_and_a_read_completes_it() {
        let mut s = Responses::default();
        let a = Owner::key("a");
        let fg = new(&mut s, "a", None);
        assert_eq!(s.cancel(&a, &fg), Some(Err(NotBackground)));
        let bg = new(&mut s, "a", Some("cancelled!"));
        assert_eq!(s.cancel(&a, &bg), Some(Ok("cancelled!".to_owned())));
        assert_eq!(s.read(&a, &bg).as_deref(), Some("cancelled!"));
        let bg2 = new(&mut s, "a", Some("cancelled!"));
        assert!(s.read(&a, &bg2).unwrap().contains("completed"));
        assert!(s.cancel(&a, &bg2).unwrap().unwrap().contains("completed"));
        assert_eq!(s.cancel(&Owner::key("b"), &bg2), None);
    }
}
