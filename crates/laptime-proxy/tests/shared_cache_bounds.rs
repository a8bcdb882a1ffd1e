//! A shared response cache bounds what it writes to Redis by the route's own figures, not by
//! Redis' `maxmemory`: past `max_entries` or `max_bytes` the entries that expire first go, and
//! an answer over `max_entry_bytes` is never written. Against the real Redis on 127.0.0.1:6379
//! (`LAPTIME_TEST_REDIS_URL`), under a key prefix of this test's own.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use laptime_proxy::cache::{Bounds, CachedAnswer};
use laptime_proxy::shared_cache::{Place, SharedCache};
use tokio::time::Instant;

fn answer(size: usize) -> CachedAnswer {
    CachedAnswer {
        status: 200,
        content_type: Some("application/json".into()),
        body: Bytes::from(vec![b'x'; size]),
        stream: false,
    }
}

/// Stores `key` and waits (at most 5 s) until it reads back.
async fn stored(cache: &Arc<SharedCache>, key: [u8; 32], size: usize) {
    cache.insert(key, &answer(size));
    let at = Instant::now();
    while cache.get(&key).await.is_none() {
        assert!(
            at.elapsed() < Duration::from_secs(5),
            "{key:?} never stored"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn held(conn: &mut redis::aio::MultiplexedConnection, prefix: &str) -> (i64, i64) {
    let entries: i64 = redis::cmd("ZCARD")
        .arg(format!("{prefix}:cache:r:index"))
        .query_async(conn)
        .await
        .unwrap();
    let bytes: Option<i64> = redis::cmd("GET")
        .arg(format!("{prefix}:cache:r:bytes"))
        .query_async(conn)
        .await
        .unwrap();
    (entries, bytes.unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_and_bytes_in_redis_stay_within_the_routes_bounds() {
    let url =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("lt_test_cache_bounds_{}", std::process::id());
    let place = Place {
        redis_url: &url,
        key_prefix: &prefix,
        route: "r",
        lookup_wait: Duration::from_millis(200),
    };
    let bounds = Bounds {
        entries: 3,
        bytes: 10_000,
        entry_bytes: 4_000,
    };
    let cache = Arc::new(SharedCache::new(&place, Duration::from_secs(60), bounds).unwrap());
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();

    // Five small answers: only the newest three stay.
    for i in 0..5u8 {
        stored(&cache, [i; 32], 1_000).await;
    }
    assert!(cache.get(&[0; 32]).await.is_none() && cache.get(&[1; 32]).await.is_none());
    for i in 2..5u8 {
        assert_eq!(cache.get(&[i; 32]).await, Some(answer(1_000)));
    }
    let (entries, bytes) = held(&mut conn, &prefix).await;
    assert_eq!(entries, 3);
    // Each value is the body and its 5 + 16 bytes of status, stream and content type.
    assert_eq!(bytes, 3 * 1_021);

    // Three of 3,500 bytes: never more than 10,000 bytes held, so two of them at most.
    for i in 10..13u8 {
        stored(&cache, [i; 32], 3_500).await;
        let (_, bytes) = held(&mut conn, &prefix).await;
        assert!(bytes <= 10_000, "{bytes} bytes held");
    }
    assert_eq!(held(&mut conn, &prefix).await, (2, 2 * 3_521));

    // Over the entry cap: not written at all.
    cache.insert([20; 32], &answer(4_001));
    stored(&cache, [21; 32], 10).await;
    assert!(cache.get(&[20; 32]).await.is_none());
    assert_eq!(cache.dropped(), 0);

    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}:*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(keys)
        .query_async(&mut conn)
        .await
        .unwrap();
}
