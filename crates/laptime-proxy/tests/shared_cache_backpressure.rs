//! A shared response cache never holds more than 16 MiB of answers waiting for Redis: against a
//! "Redis" that accepts connections and never answers, what does not fit is not written, counted
//! on the cache and in the process-wide total `/metrics` exposes
//! (`laptime_shared_cache_dropped_total`), and once the waiting writes give up (1 s) the cache
//! takes answers again. In a file of its own: the 16 MiB are the whole process'.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use laptime_proxy::cache::{Bounds, CachedAnswer};
use laptime_proxy::shared_cache::{dropped_total, Place, SharedCache, QUEUED_BYTES};

const MIB: usize = 1024 * 1024;

fn answer(size: usize) -> CachedAnswer {
    CachedAnswer {
        status: 200,
        content_type: None,
        body: Bytes::from(vec![b'x'; size]),
        stream: false,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_past_the_waiting_bytes_are_dropped_and_counted_while_redis_is_silent() {
    // Accepts and reads nothing: every write waits for its 1 s limit.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let place = Place {
        redis_url: &url,
        key_prefix: "lt_test_backpressure",
        route: "r",
        lookup_wait: Duration::from_millis(5),
    };
    let bounds = Bounds {
        entries: 1_000,
        bytes: 64 * MIB,
        entry_bytes: 2 * MIB,
    };
    let cache = Arc::new(SharedCache::new(&place, Duration::from_secs(60), bounds).unwrap());

    let offered = QUEUED_BYTES / MIB + 4;
    for i in 0..offered {
        cache.insert([u8::try_from(i).unwrap(); 32], &answer(MIB));
    }
    // Each value is a little over 1 MiB, so at most 15 of them wait; the rest were dropped.
    let dropped = cache.dropped();
    assert!(
        dropped >= 5 && dropped < offered as u64,
        "{dropped} of {offered} dropped"
    );
    assert_eq!(dropped_total(), dropped);

    // The waiting writes give up after 1 s and free their bytes: the next answer is taken.
    let mut taken = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = cache.dropped();
        cache.insert([200; 32], &answer(MIB));
        if cache.dropped() == before {
            taken = true;
            break;
        }
        // Still full: that try was dropped and counted too; wait on.
        assert_eq!(dropped_total(), cache.dropped());
    }
    assert!(taken, "the queue never drained");
    held.abort();
}
