//! Affinity: which channel (and key) holds each provider object a workspace created — a file,
//! a batch, a stored response — so that every later call naming it goes there, and a workspace
//! reaches only its own objects (another workspace's id answers like an unknown one).
//!
//! Placements are kept in the store (ids only, deleted by retention) so that every instance of
//! a fleet and every restart knows them, and in a bounded memory map in front of it: this
//! instance routes by a placement at once, even while its write is on the way. Writes leave the
//! request path: each goes to the store on a task of its own, retried a few times. A lookup
//! that misses memory reads the store (like a token lookup), within a bounded wait.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use laptime_core::endpoint::ObjectKind;
use laptime_store::affinity::Placement;
use laptime_store::Store;

/// Placements remembered in memory (the store holds them all).
const REMEMBERED: usize = 100_000;
/// How long a lookup waits for the store.
const LOOKUP_WAIT: Duration = Duration::from_secs(2);
/// Tries of one placement write before it is given up (and logged).
const WRITE_TRIES: u32 = 5;
/// Writes talking to the store at once; the others wait their turn.
const WRITES_IN_FLIGHT: usize = 64;

/// Why a placement could not be looked up.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl Unavailable {
    /// The gateway's own error for a call naming `id` that could not be routed: its fault.
    pub fn error(&self, id: &str) -> crate::respond::GatewayError {
        crate::respond::GatewayError::new(
            laptime_core::timeline::ErrorClass::Internal,
            format!("where {id} lives could not be read: {}", self.0),
        )
    }
}

pub struct Affinity {
    store: Store,
    memory: Mutex<Memory>,
    writes: std::sync::Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for Affinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Affinity").finish_non_exhaustive()
    }
}

/// The newest placements, oldest dropped first.
#[derive(Default)]
struct Memory {
    by_key: HashMap<(String, String), Placement>,
    order: VecDeque<(String, String)>,
}

impl Memory {
    fn insert(&mut self, workspace_id: &str, p: Placement) {
        let key = (workspace_id.to_string(), p.object_id.clone());
        if self.by_key.contains_key(&key) {
            // Ids never move: the first placement stands, as in the store.
            return;
        }
        if self.order.len() == REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.by_key.remove(&old);
            }
        }
        self.order.push_back(key.clone());
        self.by_key.insert(key, p);
    }
}

impl Affinity {
    pub fn new(store: Store) -> Self {
        Affinity {
            store,
            memory: Mutex::new(Memory::default()),
            writes: std::sync::Arc::new(tokio::sync::Semaphore::new(WRITES_IN_FLIGHT)),
        }
    }

    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers where objects `workspace_id` just created live: in memory now, in the store
    /// from a task of its own (the request never waits for it).
    pub fn remember(&self, workspace_id: &str, placements: Vec<Placement>) {
        if placements.is_empty() {
            return;
        }
        {
            let mut memory = self.memory();
            for p in &placements {
                memory.insert(workspace_id, p.clone());
            }
        }
        let store = self.store.clone();
        let writes = self.writes.clone();
        let ws = workspace_id.to_string();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            // Bounded: at most WRITES_IN_FLIGHT writes talk to the store at once.
            let Ok(_permit) = writes.acquire_owned().await else {
                return;
            };
            let mut wait = Duration::from_millis(100);
            for attempt in 1..=WRITE_TRIES {
                match store.put_placements(&ws, placements.clone()).await {
                    Ok(()) => return,
                    Err(e) if attempt == WRITE_TRIES => {
                        tracing::error!(error = %e, objects = placements.len(), "object placements not stored: only this instance knows them until it restarts");
                    }
                    Err(_) => {
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                }
            }
        });
    }

    /// Where `object_id` lives, if `workspace_id` created it.
    pub async fn find(
        &self,
        workspace_id: &str,
        object_id: &str,
    ) -> Result<Option<Placement>, Unavailable> {
        let key = (workspace_id.to_string(), object_id.to_string());
        if let Some(p) = self.memory().by_key.get(&key) {
            return Ok(Some(p.clone()));
        }
        let found =
            tokio::time::timeout(LOOKUP_WAIT, self.store.placement(workspace_id, object_id))
                .await
                .map_err(|_| Unavailable("the store did not answer in time".into()))?
                .map_err(|e| Unavailable(e.to_string()))?;
        if let Some(p) = &found {
            self.memory().insert(workspace_id, p.clone());
        }
        Ok(found)
    }

    /// The ids of the objects of `kind` `workspace_id` created on `channel` (newest first, at
    /// most `limit`), with those only this instance knows yet.
    pub async fn placed(
        &self,
        workspace_id: &str,
        channel: &str,
        kind: ObjectKind,
        limit: u32,
    ) -> Result<std::collections::HashSet<String>, Unavailable> {
        let stored = tokio::time::timeout(
            LOOKUP_WAIT,
            self.store.placed(workspace_id, channel, kind, limit),
        )
        .await
        .map_err(|_| Unavailable("the store did not answer in time".into()))?
        .map_err(|e| Unavailable(e.to_string()))?;
        let mut ids: std::collections::HashSet<String> = stored.into_iter().collect();
        let memory = self.memory();
        ids.extend(
            memory
                .by_key
                .iter()
                .filter(|((ws, _), p)| ws == workspace_id && p.channel == channel && p.kind == kind)
                .map(|((_, id), _)| id.clone()),
        );
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(id: &str, channel: &str) -> Placement {
        Placement {
            object_id: id.into(),
            kind: ObjectKind::File,
            channel: channel.into(),
            key_index: None,
            created_at_us: 1,
        }
    }

    #[tokio::test]
    async fn a_placement_is_found_at_once_and_by_a_second_instance_once_stored() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open_dir(dir.path()).unwrap();
        let a = Affinity::new(store.clone());
        a.remember("ws", vec![place("file-1", "ch")]);
        assert_eq!(a.find("ws", "file-1").await.unwrap().unwrap().channel, "ch");
        assert!(a.find("other", "file-1").await.unwrap().is_none());
        // Another instance on the same store finds it once the write landed.
        let b = Affinity::new(store);
        let mut found = None;
        for _ in 0..100 {
            found = b.find("ws", "file-1").await.unwrap();
            if found.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(found.unwrap().channel, "ch");
        let listed = b.placed("ws", "ch", ObjectKind::File, 10).await.unwrap();
        assert!(listed.contains("file-1"));
    }

    #[test]
    fn memory_keeps_the_first_placement_and_drops_the_oldest_past_its_bound() {
        let mut m = Memory::default();
        m.insert("ws", place("a", "one"));
        m.insert("ws", place("a", "two"));
        assert_eq!(
            m.by_key[&("ws".to_string(), "a".to_string())].channel,
            "one"
        );
        for i in 0..REMEMBERED {
            m.insert("ws", place(&format!("f{i}"), "c"));
        }
        assert_eq!(m.by_key.len(), REMEMBERED);
        assert!(!m.by_key.contains_key(&("ws".to_string(), "a".to_string())));
    }
}
