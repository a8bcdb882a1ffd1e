//! Spreads client connections evenly over the serving threads.
//!
//! Every serving thread accepts from the one listening socket. The kernel wakes each of them
//! for a new connection, and the first awake takes every connection queued by then, so how
//! connections opened together split over the threads was left to chance: in one `wrk` run
//! (32 connections) one serving thread had every `perf` sample and the other none. So a
//! thread that already serves more connections than another by more than [`SLACK`] hands the
//! one it just accepted to the thread with the fewest, over a channel; that thread takes the
//! socket into its own runtime. A connection never moves again once served, so a hand-off
//! costs one wake-up of the other thread per connection, not per request.
//!
//! Not `SO_REUSEPORT` (one listening socket per thread, the kernel hashing connections over
//! them): with it, a second gateway started on the same address would bind as well and
//! silently take part of the traffic, where it fails with "address in use" instead.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;

use crate::listen::Admitted;

/// How many more connections than the least busy thread a thread keeps before handing new
/// ones on: a hand-off costs a wake-up, a connection or two of imbalance costs nothing.
pub const SLACK: usize = 1;

/// The serving threads' open connections, and a way to hand each a new one.
#[derive(Debug)]
pub struct Spread {
    lanes: Vec<Lane>,
}

#[derive(Debug)]
struct Lane {
    open: AtomicUsize,
    inbox: mpsc::UnboundedSender<Handed>,
}

/// What one serving thread receives its handed connections on.
pub type Inbox = mpsc::UnboundedReceiver<Handed>;

/// An accepted connection on its way to another serving thread. The channel holds no more of
/// them than the connection cap lets exist: each carries its [`Admitted`] place.
#[derive(Debug)]
pub struct Handed {
    pub tcp: std::net::TcpStream,
    pub admitted: Admitted,
    pub counted: Counted,
}

/// One connection counted on a serving thread until it is dropped.
#[derive(Debug)]
pub struct Counted {
    spread: Arc<Spread>,
    thread: usize,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(lane) = self.spread.lanes.get(self.thread) {
            lane.open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Where a connection just accepted is served.
#[derive(Debug)]
pub enum Place {
    /// On the thread that accepted it.
    Here(Counted),
    /// On another thread: hand it over with [`Spread::hand`].
    There(Counted),
}

impl Spread {
    /// Spread over `threads` serving threads; one inbox for each, in thread order.
    pub fn new(threads: usize) -> (Arc<Spread>, Vec<Inbox>) {
        let (lanes, inboxes) = (0..threads.max(1))
            .map(|_| {
                let (tx, rx) = mpsc::unbounded_channel();
                let lane = Lane {
                    open: AtomicUsize::new(0),
                    inbox: tx,
                };
                (lane, rx)
            })
            .unzip();
        (Arc::new(Spread { lanes }), inboxes)
    }

    /// Counts a connection accepted by thread `me` where it should be served.
    pub fn place(self: &Arc<Self>, me: usize) -> Place {
        let to = choose(&self.open(), me);
        let counted = self.count(to);
        if to == me {
            Place::Here(counted)
        } else {
            Place::There(counted)
        }
    }

    /// Sends `handed` to the thread it was counted on; gives it back when that thread no
    /// longer takes connections (it is stopping), counted on `me` instead.
    pub fn hand(self: &Arc<Self>, mut handed: Handed, me: usize) -> Result<(), Handed> {
        let Some(lane) = self.lanes.get(handed.counted.thread) else {
            handed.counted = self.count(me);
            return Err(handed);
        };
        lane.inbox.send(handed).map_err(|back| {
            let mut handed = back.0;
            handed.counted = self.count(me);
            handed
        })
    }

    fn count(self: &Arc<Self>, thread: usize) -> Counted {
        if let Some(lane) = self.lanes.get(thread) {
            lane.open.fetch_add(1, Ordering::Relaxed);
        }
        Counted {
            spread: self.clone(),
            thread,
        }
    }

    /// Connections each thread serves now, in thread order.
    pub fn open(&self) -> Vec<usize> {
        self.lanes
            .iter()
            .map(|l| l.open.load(Ordering::Relaxed))
            .collect()
    }
}

/// The thread a connection accepted by `me` goes to, given each thread's open connections:
/// `me` unless it serves more than [`SLACK`] above the least busy (the first of those).
fn choose(open: &[usize], me: usize) -> usize {
    let mine = open.get(me).copied().unwrap_or(0);
    match open.iter().enumerate().min_by_key(|(_, n)| **n) {
        Some((least, n)) if mine > n + SLACK => least,
        _ => me,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_connections_until_it_has_more_than_the_slack_above_the_least_busy() {
        assert_eq!(choose(&[0, 0], 0), 0);
        assert_eq!(choose(&[1, 0], 0), 0);
        assert_eq!(choose(&[2, 0], 0), 1);
        assert_eq!(choose(&[5, 3, 9], 2), 1);
        assert_eq!(choose(&[5, 4, 5], 2), 2);
        assert_eq!(choose(&[7], 0), 0);
    }

    #[test]
    fn connections_accepted_by_one_thread_end_up_even() {
        let (spread, _inboxes) = Spread::new(2);
        let mut held = Vec::new();
        let mut there = 0;
        for _ in 0..32 {
            match spread.place(0) {
                Place::Here(c) => held.push(c),
                Place::There(c) => {
                    there += 1;
                    held.push(c);
                }
            }
        }
        let open = spread.open();
        assert_eq!(open.iter().sum::<usize>(), 32);
        assert!(open[0].abs_diff(open[1]) <= SLACK + 1, "{open:?}");
        assert_eq!(there, open[1]);
        held.truncate(10);
        assert_eq!(
            spread.open().iter().sum::<usize>(),
            10,
            "dropped ones are uncounted"
        );
    }

    #[tokio::test]
    async fn a_connection_handed_to_a_stopped_thread_comes_back_counted_on_the_sender() {
        let (spread, mut inboxes) = Spread::new(2);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = crate::listen::Connections::new(4);
        let handed = |counted| Handed {
            tcp: std::net::TcpStream::connect(addr).unwrap(),
            admitted: connections.admit().unwrap(),
            counted,
        };
        // Thread 0 already serves two, so the third goes to thread 1.
        let (a, b) = (spread.count(0), spread.count(0));
        let Place::There(to_1) = spread.place(0) else {
            panic!("expected a hand-off, open {:?}", spread.open());
        };
        assert!(spread.hand(handed(to_1), 0).is_ok());
        let got = inboxes[1].recv().await.unwrap();
        assert_eq!(spread.open(), vec![2, 1]);
        drop(got);
        // Thread 1 stops: its inbox is gone, and the connection is served by thread 0.
        drop(inboxes.pop());
        let Place::There(to_1) = spread.place(0) else {
            panic!("expected a hand-off, open {:?}", spread.open());
        };
        let back = spread.hand(handed(to_1), 0).unwrap_err();
        assert_eq!(back.counted.thread, 0);
        assert_eq!(spread.open(), vec![3, 0]);
        drop((a, b, back));
        assert_eq!(spread.open(), vec![0, 0]);
    }
}
