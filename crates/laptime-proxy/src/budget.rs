//! The byte budget for request bodies in flight, and reading one body within it: a declared
//! length over the limit is refused before a byte is read, and every byte held counts against
//! one budget shared by all requests until the request is done.
//!
//! A body is held for the whole request (failover and hedging resend it), so the budget is what
//! bounds the memory clients can make the gateway hold with uploads.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The shared budget: one permit per byte.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
}

/// Bytes of the budget held by one request's body; returned when dropped.
#[derive(Debug, Default)]
pub struct Held(Option<OwnedSemaphorePermit>);

/// Why a body was not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Over `max_body_bytes` (declared or as read): the client's fault.
    TooLarge { limit: usize },
    /// The budget is spent by other requests in flight: retry soon.
    BudgetFull,
    /// The body broke while being read.
    Unreadable,
}

impl BodyBudget {
    pub fn new(total_bytes: usize) -> Self {
        BodyBudget {
            bytes: Arc::new(Semaphore::new(total_bytes.min(Semaphore::MAX_PERMITS))),
        }
    }

    /// Bytes not held by any body now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Adds `n` bytes to what `held` holds (a body the request derived from the client's: a
    /// translation, a spliced model name), or refuses when the budget is spent.
    pub fn take(&self, n: usize, held: &mut Held) -> Result<(), Refusal> {
        if n == 0 {
            return Ok(());
        }
        let n = u32::try_from(n).map_err(|_| Refusal::BudgetFull)?;
        let permit = self
            .bytes
            .clone()
            .try_acquire_many_owned(n)
            .map_err(|_| Refusal::BudgetFull)?;
        match &mut held.0 {
            Some(p) => p.merge(permit),
            None => held.0 = Some(permit),
        }
        Ok(())
    }

    /// Reads `body` whole, at most `limit` bytes. A declared length (`Content-Length`) is taken
    /// from the budget before reading; a body without one takes its bytes as they arrive.
    pub async fn read<B>(&self, body: B, limit: usize) -> Result<(Bytes, Held), Refusal>
    where
        B: http_body::Body<Data = Bytes> + Unpin,
    {
        let declared = body
            .size_hint()
            .exact()
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
        let mut held = Held(None);
        if let Some(n) = declared {
            if n > limit {
                return Err(Refusal::TooLarge { limit });
            }
            self.take(n, &mut held)?;
        }
        let mut body = body;
        let mut buf = BytesMut::with_capacity(declared.unwrap_or(0));
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| Refusal::Unreadable)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            if buf.len() + data.len() > limit {
                return Err(Refusal::TooLarge { limit });
            }
            let grown = (buf.len() + data.len()).saturating_sub(held.bytes());
            self.take(grown, &mut held)?;
            buf.extend_from_slice(&data);
        }
        Ok((buf.freeze(), held))
    }
}

impl Held {
    fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.num_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use http_body_util::Full;

    /// A body of chunks without a declared length (as a chunked upload arrives).
    struct Chunked(VecDeque<Bytes>);

    impl http_body::Body for Chunked {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(http_body::Frame::data(b))))
        }
    }

    fn chunked(parts: &[&'static [u8]]) -> Chunked {
        Chunked(parts.iter().map(|p| Bytes::from_static(p)).collect())
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_refused_before_reading() {
        let budget = BodyBudget::new(1000);
        let refused = budget.read(Full::new(Bytes::from(vec![0; 101])), 100).await;
        assert_eq!(refused.unwrap_err(), Refusal::TooLarge { limit: 100 });
        assert_eq!(budget.available(), 1000);
    }

    #[tokio::test]
    async fn bodies_hold_their_bytes_until_dropped_and_a_full_budget_refuses() {
        let budget = BodyBudget::new(100);
        let (a, held_a) = budget
            .read(Full::new(Bytes::from(vec![1; 60])), 80)
            .await
            .unwrap();
        assert_eq!((a.len(), budget.available()), (60, 40));
        let refused = budget.read(Full::new(Bytes::from(vec![1; 50])), 80).await;
        assert_eq!(refused.unwrap_err(), Refusal::BudgetFull);
        assert_eq!(budget.available(), 40, "a refusal holds nothing");
        // Without a declared length the bytes are taken as they arrive.
        let (b, held_b) = budget.read(chunked(&[b"abc", b"defg"]), 80).await.unwrap();
        assert_eq!((&b[..], budget.available()), (&b"abcdefg"[..], 33));
        let over = budget.read(chunked(&[&[0; 30], &[0; 30]]), 80).await;
        assert_eq!(over.unwrap_err(), Refusal::BudgetFull);
        let too_long = budget.read(chunked(&[&[0; 20], &[0; 20]]), 30).await;
        assert_eq!(too_long.unwrap_err(), Refusal::TooLarge { limit: 30 });
        assert_eq!(budget.available(), 33);
        drop((held_a, held_b));
        assert_eq!(budget.available(), 100);
    }
}
