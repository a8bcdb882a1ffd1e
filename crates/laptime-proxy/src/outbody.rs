//! The body of an upstream request: bytes the gateway holds (a model call's body, read whole and
//! perhaps translated), or a client's upload streamed through as it arrives (a file upload
//! never held whole: memory stays bounded by the frames in flight), counted and capped at the
//! body limit on the way.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a request sends upstream.
pub enum OutBody {
    Full(Full<Bytes>),
    Upload(Upload),
}

impl std::fmt::Debug for OutBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OutBody::Full(_) => f.write_str("OutBody::Full"),
            OutBody::Upload(_) => f.write_str("OutBody::Upload"),
        }
    }
}

impl OutBody {
    pub fn full(bytes: Bytes) -> Self {
        OutBody::Full(Full::new(bytes))
    }

    pub fn empty() -> Self {
        OutBody::full(Bytes::new())
    }
}

impl From<Bytes> for OutBody {
    fn from(bytes: Bytes) -> Self {
        OutBody::full(bytes)
    }
}

/// A client's body relayed frame by frame: the bytes that went through are counted in `sent`
/// (shared, so the record can read them after the body is gone), and a body over `max` bytes
/// fails, which breaks the upstream call.
pub struct Upload {
    inner: axum::body::Body,
    sent: Arc<AtomicU64>,
    max: u64,
}

impl Upload {
    pub fn new(inner: axum::body::Body, max: u64) -> (Self, Arc<AtomicU64>) {
        let sent = Arc::new(AtomicU64::new(0));
        let upload = Upload {
            inner,
            sent: sent.clone(),
            max,
        };
        (upload, sent)
    }
}

/// An upload went over the body limit on its way through.
#[derive(Debug)]
pub struct UploadTooLarge(pub u64);

impl std::fmt::Display for UploadTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the upload is over the {}-byte limit", self.0)
    }
}

impl std::error::Error for UploadTooLarge {}

impl Body for OutBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            OutBody::Full(full) => Pin::new(full)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(|never| match never {}))),
            OutBody::Upload(up) => {
                let polled = std::task::ready!(Pin::new(&mut up.inner).poll_frame(cx));
                Poll::Ready(polled.map(|r| {
                    let frame = r.map_err(BoxError::from)?;
                    if let Some(data) = frame.data_ref() {
                        let total = up.sent.fetch_add(data.len() as u64, Ordering::Relaxed)
                            + data.len() as u64;
                        if total > up.max {
                            return Err(Box::new(UploadTooLarge(up.max)) as BoxError);
                        }
                    }
                    Ok(frame)
                }))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            OutBody::Full(full) => full.is_end_stream(),
            OutBody::Upload(up) => up.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            OutBody::Full(full) => full.size_hint(),
            OutBody::Upload(up) => up.inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn an_upload_is_counted_as_it_passes_and_fails_over_its_limit() {
        let chunks = || {
            let parts: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from_static(b"abcd")),
                Ok(Bytes::from_static(b"ef")),
            ];
            futures_util::stream::iter(parts)
        };
        let body = axum::body::Body::from_stream(chunks());
        let (up, sent) = Upload::new(body, 6);
        let got = OutBody::Upload(up).collect().await.unwrap().to_bytes();
        assert_eq!(&got[..], b"abcdef");
        assert_eq!(sent.load(Ordering::Relaxed), 6);

        let body = axum::body::Body::from_stream(chunks());
        let (up, sent) = Upload::new(body, 5);
        let err = OutBody::Upload(up).collect().await.unwrap_err();
        assert!(err.is::<UploadTooLarge>(), "{err}");
        assert_eq!(sent.load(Ordering::Relaxed), 6);
    }
}
