//! Waiting for a scripted instant, and how late the sim actually was.
//!
//! tokio's timer has millisecond ticks and rounds every deadline up, so a frame due at 50 ms
//! leaves at 50–52 ms: fine for a fake provider, too coarse to check a gateway's marks against
//! the script. With `LAPTIME_SIM_TIMER=fine` in its environment, [`sleep_to`] waits on tokio
//! until [`COARSE_MARGIN`] before the deadline, then hands the last stretch to one thread that
//! sleeps with the kernel's high-resolution timer (a futex timeout) and wakes every task that
//! is due: ~0.1 ms late instead of ~1 ms. Nothing spins, and a deadline already passed costs
//! nothing, but every frame is then handed to tokio's workers from another thread: measured
//! at 1,000 paced streams (20 frames each per second) the sim used ~1.5× the CPU of tokio's
//! timer alone, which is why it is opt-in (benchmarks/accuracy turns it on).
//!
//! [`Lateness`] keeps a histogram of how late each timed send was (actual − scripted, at the
//! moment the frame is handed to hyper), served as `GET /sim/timing`, so that a benchmark can
//! tell the sim's own lateness from the gateway's.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use crate::json::{obj, J};

/// How long before a deadline the tokio timer hands over to the fine thread: tokio fires up
/// to ~2 ms after the instant asked, so asking 2 ms early nearly always lands before the
/// deadline.
const COARSE_MARGIN: Duration = Duration::from_millis(2);
/// How long the fine thread sleeps with nothing to do (a registration wakes it sooner).
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// Waits until `deadline` (tokio's clock): on tokio's timer, or finely when
/// `LAPTIME_SIM_TIMER=fine`.
pub(crate) async fn sleep_to(deadline: Instant) {
    if Instant::now() >= deadline {
        return;
    }
    if precise() {
        fine_sleep_to(deadline).await;
    } else {
        tokio::time::sleep_until(deadline).await;
    }
}

/// Waits until `deadline`, to within the kernel timer's slack (~0.1 ms).
async fn fine_sleep_to(deadline: Instant) {
    let now = Instant::now();
    if now >= deadline {
        return;
    }
    if deadline - now > COARSE_MARGIN {
        tokio::time::sleep_until(deadline - COARSE_MARGIN).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        FineSleep { left, slot: None }.await;
    }
    // The fine thread waits in real time; a paused test clock has not moved meanwhile, so the
    // last step (if any) is taken on tokio's clock, which keeps paused-time tests exact.
    if Instant::now() < deadline {
        tokio::time::sleep_until(deadline).await;
    }
}

fn precise() -> bool {
    static PRECISE: OnceLock<bool> = OnceLock::new();
    *PRECISE.get_or_init(|| std::env::var("LAPTIME_SIM_TIMER").is_ok_and(|v| v == "fine"))
}

// === The fine thread ===

/// Shared between one waiting future and the thread.
#[derive(Default)]
struct Slot {
    /// (fired, waker to call when it fires)
    state: Mutex<(bool, Option<Waker>)>,
}

impl Slot {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, Option<Waker>)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A registration, turned into a real-time deadline by the thread (tokio's clock may be paused
/// in tests; the thread has no runtime, so its clock is always the real one).
struct Pending {
    left: Duration,
    at: Instant,
    slot: Arc<Slot>,
}

struct Due {
    at: Instant,
    seq: u64,
    slot: Arc<Slot>,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    heap: BinaryHeap<Reverse<Due>>,
    seq: u64,
    /// When the thread is asleep, the instant it will wake by itself; `None` while it is
    /// awake (it looks at `pending` before it sleeps again). A registration due after that
    /// instant needs no wake-up call: most do not, which saves a futex call per frame.
    sleeping_until: Option<Instant>,
}

struct Timer {
    queue: Mutex<Queue>,
    wake: Condvar,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<&'static Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        }));
        let spawned = std::thread::Builder::new()
            .name("laptime-sim-timer".into())
            .spawn(move || run(t));
        if let Err(e) = spawned {
            // Without the thread, waits still end: sleep_to finishes on tokio's timer.
            tracing::warn!(error = %e, "could not start the sim's fine timer thread");
        }
        t
    })
}

fn run(t: &Timer) {
    let mut due_now = Vec::new();
    let mut q = t.queue.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        // No runtime on this thread: tokio's Instant is the real clock here.
        let now = Instant::now();
        for p in std::mem::take(&mut q.pending) {
            // Counted from the registration (real time), or from now when the registering
            // task's clock was a paused test clock ahead of the real one.
            let at = p.at.min(now) + p.left;
            q.seq += 1;
            let seq = q.seq;
            q.heap.push(Reverse(Due {
                at,
                seq,
                slot: p.slot,
            }));
        }
        while q.heap.peek().is_some_and(|Reverse(d)| d.at <= now) {
            if let Some(Reverse(d)) = q.heap.pop() {
                due_now.push(d.slot);
            }
        }
        if !due_now.is_empty() {
            drop(q);
            for slot in due_now.drain(..) {
                let waker = {
                    let mut s = slot.lock();
                    s.0 = true;
                    s.1.take()
                };
                if let Some(w) = waker {
                    w.wake();
                }
            }
            q = t.queue.lock().unwrap_or_else(PoisonError::into_inner);
            continue;
        }
        let wait = q
            .heap
            .peek()
            .map_or(IDLE_WAIT, |Reverse(d)| d.at.saturating_duration_since(now));
        q.sleeping_until = Some(now + wait);
        q = t
            .wake
            .wait_timeout(q, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
        q.sleeping_until = None;
    }
}

/// Resolves once the fine thread has seen `left` pass.
struct FineSleep {
    left: Duration,
    slot: Option<Arc<Slot>>,
}

impl Future for FineSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(slot) = &self.slot {
            let mut s = slot.lock();
            if s.0 {
                return Poll::Ready(());
            }
            if !s.1.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                s.1 = Some(cx.waker().clone());
            }
            return Poll::Pending;
        }
        let slot = Arc::new(Slot::default());
        slot.lock().1 = Some(cx.waker().clone());
        let t = timer();
        // Real time outside a paused test; in one, `run` clamps it and sleep_to finishes on
        // tokio's clock anyway.
        let at = Instant::now();
        let notify = {
            let mut q = t.queue.lock().unwrap_or_else(PoisonError::into_inner);
            q.pending.push(Pending {
                left: self.left,
                at,
                slot: slot.clone(),
            });
            q.sleeping_until.is_some_and(|until| at + self.left < until)
        };
        if notify {
            t.wake.notify_one();
        }
        self.slot = Some(slot);
        Poll::Pending
    }
}

// === Lateness ===

/// Histogram resolution and range: 10 µs buckets up to 50 ms, then one overflow bucket.
const BUCKET_US: u64 = 10;
const BUCKETS: usize = 5000;

/// How late timed sends were: actual − scripted, for the response head and for body frames.
pub(crate) struct Lateness {
    head: Histogram,
    frame: Histogram,
}

struct Histogram {
    counts: Vec<AtomicU64>,
    max_us: AtomicU64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            counts: (0..=BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            max_us: AtomicU64::new(0),
        }
    }

    fn add(&self, late: Duration) {
        let us = u64::try_from(late.as_micros()).unwrap_or(u64::MAX);
        let i = usize::try_from(us / BUCKET_US).map_or(BUCKETS, |i| i.min(BUCKETS));
        if let Some(c) = self.counts.get(i) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.max_us.fetch_max(us, Ordering::Relaxed);
    }

    /// n, percentiles (upper edge of the bucket holding the rank, in ms), max, and the
    /// non-empty buckets (index → count) so a client can subtract two snapshots.
    fn json(&self) -> J {
        let counts: Vec<u64> = self
            .counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let n: u64 = counts.iter().sum();
        let pct = |p: f64| -> Option<f64> {
            if n == 0 {
                return None;
            }
            let rank = ((p / 100.0) * n as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return Some(((i as u64 + 1) * BUCKET_US) as f64 / 1000.0);
                }
            }
            None
        };
        let buckets: Vec<J> = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| J::Arr(vec![J::from(i as u64), J::from(*c)]))
            .collect();
        obj! {
            "n": n,
            "p50_ms": pct(50.0),
            "p99_ms": pct(99.0),
            "p999_ms": pct(99.9),
            "max_ms": (n > 0).then(|| self.max_us.load(Ordering::Relaxed) as f64 / 1000.0),
            "buckets": buckets,
        }
    }
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness {
            head: Histogram::new(),
            frame: Histogram::new(),
        }
    }
}

impl Lateness {
    /// A head that was scripted for `due` went out now (only scripted delays are counted:
    /// a head due at the arrival itself measures request parsing, not the timer).
    pub(crate) fn head(&self, due: Instant, scripted: Duration) {
        if !scripted.is_zero() {
            self.head.add(Instant::now().saturating_duration_since(due));
        }
    }

    pub(crate) fn frame(&self, due: Instant, scripted: Duration) {
        if !scripted.is_zero() {
            self.frame
                .add(Instant::now().saturating_duration_since(due));
        }
    }

    /// `GET /sim/timing`.
    pub(crate) fn json(&self) -> String {
        obj! {
            "timer": if precise() { "fine" } else { "tokio" },
            "definition": "actual minus scripted send time, at the moment the head or frame is handed to hyper, for sends scripted after the request's arrival; percentiles are the upper edge of a 10 us bucket",
            "bucket_us": BUCKET_US,
            "head": self.head.json(),
            "frame": self.frame.json(),
        }
        .encode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // How late the fine timer wakes is a figure of the machine's load, measured by
    // `benchmarks/accuracy` (the sim's own lateness); a test can only hold that it is never early.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fine_waits_are_never_early() {
        for i in 0..40u64 {
            let due = Instant::now() + Duration::from_micros(3_000 + 137 * i);
            fine_sleep_to(due).await;
            let now = Instant::now();
            assert!(now >= due, "woke {:?} early", due - now);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_stays_exact() {
        let start = Instant::now();
        fine_sleep_to(start + Duration::from_millis(50)).await;
        assert_eq!(Instant::now() - start, Duration::from_millis(50));
    }

    #[test]
    fn histogram_percentiles_are_bucket_edges() {
        let h = Histogram::new();
        for us in [5, 15, 25, 35] {
            h.add(Duration::from_micros(us));
        }
        let j = h.json().encode();
        assert!(j.contains("\"n\":4"), "{j}");
        assert!(j.contains("\"p50_ms\":0.02"), "{j}");
        assert!(j.contains("\"max_ms\":0.035"), "{j}");
    }
}
