//! The gateway's listener holds a burst of connections that arrive before it accepts any: with
//! std's backlog of 128 the rest of such a burst waits out SYN retries (1 s, then 3 s, …).

use std::time::Duration;

use laptime_proxy::server::bind;

/// More than std's 128, fewer than a default `ulimit -n` of 1024 leaves room for.
const BURST: usize = 500;

#[tokio::test]
async fn a_burst_of_connections_is_queued_before_the_first_accept() {
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        somaxconn > BURST,
        "net.core.somaxconn is {somaxconn}; raise it (see README)"
    );
    let (listener, addr) = bind("127.0.0.1:0").await.unwrap();
    let mut connects = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        connects.spawn(tokio::net::TcpStream::connect(addr));
    }
    // Nothing is accepted yet: every handshake must complete into the accept queue. A dropped
    // SYN would hold its connect for at least the 1 s retry, past this bound.
    let held = tokio::time::timeout(Duration::from_millis(900), async {
        let mut streams = Vec::new();
        while let Some(done) = connects.join_next().await {
            streams.push(done.unwrap().unwrap());
        }
        streams
    })
    .await
    .expect("some connections waited for a SYN retry: the accept queue overflowed");
    assert_eq!(held.len(), BURST);
    let mut accepted = 0;
    while accepted < BURST {
        listener.accept().await.unwrap();
        accepted += 1;
    }
}

#[tokio::test]
async fn a_host_name_binds_to_an_address_it_resolves_to() {
    let (_listener, addr) = bind("localhost:0").await.unwrap();
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);
}
