//! With `[shared] redis_url`, the p95 of the recent times to first output (which hedging and
//! the adaptive first-output deadline use) is the fleet's: an instance that has seen nothing
//! yet gets the p95 of what another instance saw, and its own samples then count beside them.
//! Two instances' channel health in one process, each sharing through its own task, against the
//! real Redis on 127.0.0.1:6379 (`LAPTIME_TEST_REDIS_URL`) under a key prefix of this test's.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::Arc;
use std::time::Duration;

use laptime_proxy::config::Config;
use laptime_proxy::live::Live;
use laptime_proxy::routing::Channel;
use tokio::time::Instant;

const CONFIG: &str = "[[channels]]\nname = \"sim\"\nprovider = \"sim\"\n\
    base_url = \"http://127.0.0.1:9\"\nmodels = [\"sim-fast\"]\n";

fn channels() -> Vec<Arc<Channel>> {
    let config = Config::from_toml(CONFIG, "test").unwrap();
    Live::build(config, &|_| None, None)
        .unwrap()
        .router
        .channels()
        .to_vec()
}

fn p95(channels: &[Arc<Channel>]) -> Option<Duration> {
    channels[0].health.of("sim-fast").first_output_p95()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_that_saw_nothing_hedges_with_the_fleets_p95() {
    let url =
        std::env::var("LAPTIME_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("lt_test_first_output_{}", std::process::id());
    let (a, b, alone) = (channels(), channels(), channels());
    let (_fleet_a, task_a) = laptime_proxy::shared::start(&url, &prefix, "a", &a).unwrap();
    let (_fleet_b, task_b) = laptime_proxy::shared::start(&url, &prefix, "b", &b).unwrap();

    // A sees 40 first outputs: 1..=40 ms; its p95 is the 38th.
    for ms in 1..=40 {
        a[0].health
            .of("sim-fast")
            .note_first_output(Duration::from_millis(ms));
    }
    assert_eq!(p95(&a), Some(Duration::from_millis(38)));
    assert_eq!(p95(&b), None, "B has no samples of its own");

    // B, which saw none, gets A's within a few sample rounds; an instance without Redis never.
    let at = Instant::now();
    while p95(&b) != Some(Duration::from_millis(38)) {
        assert!(
            at.elapsed() < Duration::from_secs(10),
            "B never had the fleet's p95: {:?}",
            p95(&b)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p95(&alone), None);

    // B's own samples count beside A's (and A's are not counted twice): 40 slow ones of
    // 1,000 ms make 80 samples, whose p95 (the 76th) is one of them.
    for _ in 0..40 {
        b[0].health
            .of("sim-fast")
            .note_first_output(Duration::from_millis(1_000));
    }
    assert_eq!(p95(&b), Some(Duration::from_millis(1_000)));
    // And A gets B's: its p95 moves from 38 ms to 1,000 ms.
    let at = Instant::now();
    while p95(&a) != Some(Duration::from_millis(1_000)) {
        assert!(
            at.elapsed() < Duration::from_secs(10),
            "A never had B's samples"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    task_a.abort();
    task_b.abort();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(format!("{prefix}:first_output"))
        .arg(format!("{prefix}:health"))
        .query_async(&mut conn)
        .await
        .unwrap();
}
