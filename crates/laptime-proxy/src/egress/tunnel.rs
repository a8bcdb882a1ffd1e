//! The HTTP CONNECT handshake with a proxy, over a connection already open to it.
//!
//! Written here rather than taken from hyper-util's `Tunnel` connector: that one answers every
//! refusal but 407 with one `TunnelUnsuccessful` that drops the status (a 403 by the proxy's
//! policy and a 502 for an upstream it cannot reach are worth telling apart to an operator), and
//! as a connector wrapping the TCP connector it leaves no place to stamp the moment TCP was
//! connected apart from the moment the tunnel was open.

use http::HeaderValue;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest proxy answer head read; a longer one fails the tunnel.
const MAX_HEAD: usize = 16 * 1024;

/// Why a tunnel did not open.
#[derive(Debug)]
pub(crate) enum TunnelError {
    /// The proxy answered with this status instead of 2xx.
    Refused(u16),
    /// The proxy closed the connection, sent something that is not an HTTP answer, or a head
    /// too long.
    Malformed(&'static str),
    Io(std::io::Error),
}

impl std::fmt::Display for TunnelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunnelError::Refused(status) => write!(f, "the proxy answered {status} to CONNECT"),
            TunnelError::Malformed(why) => write!(f, "the proxy's answer to CONNECT {why}"),
            TunnelError::Io(e) => write!(f, "the connection to the proxy failed: {e}"),
        }
    }
}

/// Asks the proxy for a tunnel to `authority` (`host:port`), with `auth` as
/// `Proxy-Authorization`; on a 2xx answer the connection is the tunnel.
pub(crate) async fn connect(
    tcp: &mut TcpStream,
    authority: &str,
    auth: Option<&HeaderValue>,
) -> Result<(), TunnelError> {
    let mut head = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n").into_bytes();
    if let Some(auth) = auth {
        head.extend_from_slice(b"Proxy-Authorization: ");
        head.extend_from_slice(auth.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    tcp.write_all(&head).await.map_err(TunnelError::Io)?;
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = tcp.read(&mut chunk).await.map_err(TunnelError::Io)?;
        if n == 0 {
            return Err(TunnelError::Malformed("ended before its head did"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut headers);
        match answer.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = answer.code.unwrap_or(0);
                if !(200..300).contains(&status) {
                    return Err(TunnelError::Refused(status));
                }
                // The upstream speaks only after the gateway's TLS hello: any byte past the
                // head is not the upstream's.
                if len < buf.len() {
                    return Err(TunnelError::Malformed("had bytes after its head"));
                }
                return Ok(());
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            Ok(httparse::Status::Partial) => {
                return Err(TunnelError::Malformed("has a head over 16 KiB"))
            }
            Err(_) => return Err(TunnelError::Malformed("is not HTTP")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    /// A proxy that reads the CONNECT head, answers `answer` and returns what it read.
    async fn handshake(
        answer: &'static [u8],
        auth: Option<&str>,
    ) -> (Result<(), TunnelError>, String) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let proxy = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut got = Vec::new();
            let mut b = [0u8; 512];
            while !got.ends_with(b"\r\n\r\n") {
                let n = s.read(&mut b).await.unwrap();
                got.extend_from_slice(&b[..n]);
            }
            s.write_all(answer).await.unwrap();
            String::from_utf8(got).unwrap()
        });
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        let auth = auth.map(|a| HeaderValue::from_str(a).unwrap());
        let r = connect(&mut tcp, "api.example:443", auth.as_ref()).await;
        (r, proxy.await.unwrap())
    }

    #[tokio::test]
    async fn a_2xx_opens_the_tunnel_and_the_request_names_the_target_and_credentials() {
        let (r, sent) = handshake(
            b"HTTP/1.1 200 Connection established\r\n\r\n",
            Some("Basic dTpw"),
        )
        .await;
        r.unwrap();
        assert!(
            sent.starts_with("CONNECT api.example:443 HTTP/1.1\r\n"),
            "{sent}"
        );
        assert!(sent.contains("\r\nHost: api.example:443\r\n"), "{sent}");
        assert!(
            sent.contains("\r\nProxy-Authorization: Basic dTpw\r\n"),
            "{sent}"
        );
        let (r, sent) = handshake(b"HTTP/1.0 200 OK\r\n\r\n", None).await;
        r.unwrap();
        assert!(!sent.contains("Proxy-Authorization"));
    }

    #[tokio::test]
    async fn a_refusal_keeps_its_status_and_garbage_is_malformed() {
        for (answer, status) in [
            (
                &b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"[..],
                407,
            ),
            (b"HTTP/1.1 403 Forbidden\r\n\r\n", 403),
            (b"HTTP/1.1 502 Bad Gateway\r\n\r\n", 502),
        ] {
            let answer: &'static [u8] = Box::leak(answer.to_vec().into_boxed_slice());
            match handshake(answer, None).await.0 {
                Err(TunnelError::Refused(s)) => assert_eq!(s, status),
                other => panic!("{status}: {other:?}"),
            }
        }
        assert!(matches!(
            handshake(b"SSH-2.0-OpenSSH\r\n\r\n", None).await.0,
            Err(TunnelError::Malformed(_))
        ));
        assert!(matches!(
            handshake(b"HTTP/1.1 200 OK\r\n\r\nearly", None).await.0,
            Err(TunnelError::Malformed(_))
        ));
    }
}
