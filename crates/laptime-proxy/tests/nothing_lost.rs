//! A store that cannot be written for a while loses no record: with the database locked by
//! another process for 15 s (past SQLite's 5 s busy timeout, so batches fail and are written
//! again) while requests flow over real sockets, every request a client got an answer for is
//! stored exactly once, `/readyz` says the gateway is degraded while it lasts, and the gateway
//! answered throughout (the request path never waits on the store).

pub mod common;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_locked_for_15_s_under_load_loses_no_record_and_stores_each_once() {
    let h = common::start().await;
    let blocker = h.store.connect().unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let locked_at = Instant::now();
    let mut ids = Vec::new();
    let mut readyz_while_locked = None;
    // 20 requests a second for 15 s; each is answered while the store is locked.
    while locked_at.elapsed() < Duration::from_secs(15) {
        let sent = Instant::now();
        let r = h
            .http
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(&h.token)
            .json(&json!({"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        ids.push(common::request_id(&r));
        r.bytes().await.unwrap();
        if readyz_while_locked.is_none() && locked_at.elapsed() > Duration::from_secs(12) {
            let r = h.http.get(h.url("/readyz")).send().await.unwrap();
            readyz_while_locked = Some((r.status().as_u16(), r.text().await.unwrap()));
        }
        tokio::time::sleep_until(sent + Duration::from_millis(50)).await;
    }
    // Answered while the store was locked: a request path that waited on the store would have
    // got one request through in the whole 15 s, not one every 50 ms.
    assert!(ids.len() >= 100, "{} requests answered", ids.len());
    let (status, said) = readyz_while_locked.unwrap();
    assert_eq!(status, 503);
    assert!(said.starts_with("degraded: "), "{said}");
    blocker.execute_batch("COMMIT").unwrap();
    drop(blocker);
    // Every record is written once the lock goes (the writer was waiting up to 2 s to retry).
    let wanted: HashSet<&str> = ids.iter().map(String::as_str).collect();
    assert_eq!(wanted.len(), ids.len());
    let deadline = Instant::now() + Duration::from_secs(30);
    let stored = loop {
        let stored: Vec<String> = h
            .store
            .with_conn(|c| {
                let mut q = c.prepare("SELECT request_id FROM requests")?;
                // As stored: a gateway-made id as its 16 bytes.
                let rows = q.query_map([], |r| {
                    Ok(laptime_store::stored_id::id_of(r.get_ref(0)?).unwrap_or_default())
                })?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
            .unwrap();
        let found = stored
            .iter()
            .filter(|id| wanted.contains(id.as_str()))
            .count();
        if found == ids.len() || Instant::now() > deadline {
            break stored;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let found: Vec<&String> = stored
        .iter()
        .filter(|id| wanted.contains(id.as_str()))
        .collect();
    assert_eq!(
        found.len(),
        ids.len(),
        "every answered request stored, each once"
    );
    let stats = h.app.recorder.stats();
    assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
    assert_eq!(stats.given_up.load(Ordering::Relaxed), 0);
    assert!(
        stats.failed.load(Ordering::Relaxed) > 0,
        "the lock did fail batches"
    );
    let r = h.http.get(h.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    h.stop().await;
}
