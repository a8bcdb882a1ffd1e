//! An upstream answer's reader polls its HTTP/1 connection itself: events the connection has
//! already read come out of the body one after another in the same poll (so the relay writes
//! them to the client in one write), and the connection still goes back to the pool.
#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use laptime_proxy::attempt;
use laptime_proxy::drive::UpstreamBody;
use laptime_proxy::outbody::OutBody;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EVENTS: usize = 20;

/// One chunked answer of `EVENTS` SSE events, written at once, then the terminator.
fn answer() -> Vec<u8> {
    let mut out =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for i in 0..EVENTS {
        let event = format!("data: {{\"n\":{i}}}\n\n");
        out.extend_from_slice(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes());
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// A kept-alive HTTP/1.1 upstream on 127.0.0.1 that answers every request with [`answer`] in
/// one write; counts the connections it accepted.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    // Requests without a body: each ends with its head.
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        socket.write_all(&answer()).await.unwrap();
                    }
                }
            });
        }
    });
    (url, accepted)
}

fn get(url: &str) -> http::Request<OutBody> {
    http::Request::get(url)
        .body(OutBody::Full(http_body_util::Full::new(Bytes::new())))
        .unwrap()
}

/// Frames the body gives before its first pending, polled without anything else running.
fn frames_in_one_go(body: &mut UpstreamBody) -> usize {
    let mut cx = Context::from_waker(Waker::noop());
    let mut n = 0;
    while let Poll::Ready(Some(frame)) = std::pin::Pin::new(&mut *body).poll_frame(&mut cx) {
        frame.unwrap();
        n += 1;
    }
    n
}

#[tokio::test(flavor = "current_thread")]
async fn events_already_read_come_out_in_one_poll_and_the_connection_is_pooled_again() {
    let (url, accepted) = upstream().await;
    let client = attempt::client(Duration::from_secs(5)).unwrap();

    let (parts, body) = client.request(get(&url)).await.unwrap().into_parts();
    let mut inline = UpstreamBody::new(body, &parts.extensions);
    // Every byte of the answer is in the socket before the first read of the body.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        frames_in_one_go(&mut inline),
        EVENTS,
        "every event the socket holds comes out before the body is pending"
    );
    let rest = inline.collect().await.unwrap();
    assert!(rest.to_bytes().is_empty());

    // The same connection serves the next request: the reader handed it back (the pool takes
    // a connection back from a task of its own, given a moment to run).
    tokio::time::sleep(Duration::from_millis(20)).await;
    let (parts, body) = client.request(get(&url)).await.unwrap().into_parts();
    let whole = UpstreamBody::new(body, &parts.extensions)
        .collect()
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(whole.iter().filter(|&&b| b == b'\n').count(), 2 * EVENTS);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "current_thread")]
async fn without_its_connection_a_body_gets_one_event_per_task_switch() {
    // The contrast the inline reader exists for: hyper's connection task hands over one chunk
    // at a time, so a body that does not poll the connection is pending after each.
    let (url, _) = upstream().await;
    let client = attempt::client(Duration::from_secs(5)).unwrap();
    let (_, body) = client.request(get(&url)).await.unwrap().into_parts();
    let mut handed_over = UpstreamBody::new(body, &http::Extensions::new());
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(frames_in_one_go(&mut handed_over) <= 1);
}
