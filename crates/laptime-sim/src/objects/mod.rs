//! What the sim keeps for its clients between requests: uploaded and produced files, batches and
//! stored responses, each owned by the credential that created it, each store bounded.
//!
//! Ownership is how a real provider scopes objects to an organisation or key: a request naming
//! an object created with another credential is answered as if the object did not exist. So
//! two channels on one sim with different keys behave as two providers.
//!
//! Ids are `{prefix}laptimesim{n:04}` with `n` counting from 1 per kind in one [`crate::Sim`]
//! (`file-laptimesim0001`, `batch_laptimesim0001`, `resp_laptimesim0001`): unique within a sim,
//! repeated by another sim. Timestamps are the sim's fixed epoch (`CREATED`) plus the whole
//! seconds since the sim was made, on tokio's clock.

pub(crate) mod batches;
pub(crate) mod files;
pub(crate) mod responses;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use http::HeaderMap;
use tokio::time::Instant;

use crate::wire::CREATED;

/// The credential a request carries, or none. Compared as the exact string.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Owner(Option<String>);

impl Owner {
    /// The key of `Authorization: Bearer …` (or the whole header if it is another scheme),
    /// else `api-key` (Azure), `x-api-key` (Anthropic), `x-goog-api-key` (Google); none is the
    /// anonymous owner.
    pub(crate) fn of(headers: &HeaderMap) -> Owner {
        let value = |name: &str| {
            headers
                .get(name)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let bearer = value("authorization").map(|auth| match auth.split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("bearer") => key.trim().to_owned(),
            _ => auth,
        });
        Owner(
            bearer
                .or_else(|| value("api-key"))
                .or_else(|| value("x-api-key"))
                .or_else(|| value("x-goog-api-key")),
        )
    }

    #[cfg(test)]
    pub(crate) fn key(key: &str) -> Owner {
        Owner(Some(key.to_owned()))
    }
}

/// Every store of one sim.
pub(crate) struct Objects {
    pub(crate) files: files::FileStore,
    pub(crate) batches: Mutex<batches::Batches>,
    pub(crate) responses: Mutex<responses::Responses>,
    born: Instant,
}

impl Default for Objects {
    fn default() -> Self {
        Objects {
            files: files::FileStore::default(),
            batches: Mutex::default(),
            responses: Mutex::default(),
            born: Instant::now(),
        }
    }
}

impl Objects {
    /// The Unix time the sim stamps on what it creates now.
    pub(crate) fn now(&self) -> u64 {
        CREATED + self.born.elapsed().as_secs()
    }

    pub(crate) fn batches(&self) -> MutexGuard<'_, batches::Batches> {
        lock(&self.batches)
    }

    pub(crate) fn responses(&self) -> MutexGuard<'_, responses::Responses> {
        lock(&self.responses)
    }
}

/// A poisoned lock only means a panic elsewhere; every store is left consistent between
/// statements, so keep using it.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Shared ownership of a lock, for a guard that outlives the request's borrow.
pub(crate) type Shared<T> = Arc<Mutex<T>>;

/// The id of the `n`-th object of a kind.
pub(crate) fn id(prefix: &str, n: u64) -> String {
    format!("{prefix}laptimesim{n:04}")
}

/// The number in an id made by [`id`] with `prefix`, if it is one (exactly: `…0001`, not `…1`).
pub(crate) fn seq(prefix: &str, id_text: &str) -> Option<u64> {
    let n: u64 = id_text
        .strip_prefix(prefix)?
        .strip_prefix("laptimesim")?
        .parse()
        .ok()?;
    (id(prefix, n) == id_text).then_some(n)
}

/// The order of a listing: by creation, newest first unless asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Order {
    #[default]
    Desc,
    Asc,
}

/// A page request: the items after the cursor (in the listing's order), at most `limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListQuery {
    pub(crate) after: Option<u64>,
    pub(crate) limit: usize,
    pub(crate) order: Order,
}

/// One page of a listing and whether more items follow it.
#[derive(Debug)]
pub(crate) struct Page<T> {
    pub(crate) items: Vec<T>,
    pub(crate) has_more: bool,
}

/// Pages `items` (each with its creation number, in ascending order) as `query` asks.
pub(crate) fn page<T>(
    items: impl DoubleEndedIterator<Item = (u64, T)>,
    query: &ListQuery,
) -> Page<T> {
    let ordered: Box<dyn Iterator<Item = (u64, T)>> = match query.order {
        Order::Asc => Box::new(items),
        Order::Desc => Box::new(items.rev()),
    };
    let after = query.after;
    let mut rest = ordered.filter(move |(n, _)| match (after, query.order) {
        (None, _) => true,
        (Some(a), Order::Asc) => *n > a,
        (Some(a), Order::Desc) => *n < a,
    });
    let items: Vec<T> = rest.by_ref().take(query.limit).map(|(_, t)| t).collect();
    let has_more = rest.next().is_some();
    Page { items, has_more }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn the_owner_is_the_first_credential_header_present() {
        let mut h = HeaderMap::new();
        assert_eq!(Owner::of(&h), Owner(None));
        h.insert("x-goog-api-key", HeaderValue::from_static("g"));
        assert_eq!(Owner::of(&h), Owner::key("g"));
        h.insert("x-api-key", HeaderValue::from_static("a"));
        assert_eq!(Owner::of(&h), Owner::key("a"));
        h.insert("api-key", HeaderValue::from_static("azure"));
        assert_eq!(Owner::of(&h), Owner::key("azure"));
        h.insert("authorization", HeaderValue::from_static("Bearer sk-1"));
        assert_eq!(Owner::of(&h), Owner::key("sk-1"));
        h.insert("authorization", HeaderValue::from_static("bearer  sk-2 "));
        assert_eq!(Owner::of(&h), Owner::key("sk-2"));
        h.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(Owner::of(&h), Owner::key("Basic abc"));
    }

    #[test]
    fn ids_round_trip_only_in_their_exact_form() {
        assert_eq!(id("file-", 1), "file-laptimesim0001");
        assert_eq!(id("file-", 12345), "file-laptimesim12345");
        assert_eq!(seq("file-", "file-laptimesim0001"), Some(1));
        assert_eq!(seq("file-", "file-laptimesim12345"), Some(12345));
        assert_eq!(seq("file-", "file-laptimesim1"), None);
        assert_eq!(seq("batch_", "file-laptimesim0001"), None);
        assert_eq!(seq("file-", "file-abc"), None);
    }

    #[test]
    fn pages_follow_the_order_and_the_cursor() {
        let items = || (1..=5u64).map(|n| (n, n));
        let q = |after, limit, order| ListQuery {
            after,
            limit,
            order,
        };
        let p = page(items(), &q(None, 2, Order::Desc));
        assert_eq!((p.items, p.has_more), (vec![5, 4], true));
        let p = page(items(), &q(Some(4), 2, Order::Desc));
        assert_eq!((p.items, p.has_more), (vec![3, 2], true));
        let p = page(items(), &q(Some(2), 2, Order::Desc));
        assert_eq!((p.items, p.has_more), (vec![1], false));
        let p = page(items(), &q(Some(3), 10, Order::Asc));
        assert_eq!((p.items, p.has_more), (vec![4, 5], false));
    }
}
