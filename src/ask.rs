//! A closure that a caller's task borrows, reached from another thread only
//! by message: the thread sends the rows and the clock, the caller runs its
//! closure on them in its own task and sends the answer back. The thread
//! never holds the closure, so a caller that is gone (its future dropped, or
//! leaked and never polled again) answers nothing, and nothing it borrows is
//! reached. The guard asks a caller's `apply` this way (`guard/ask.rs`), and
//! SQLite's writer a count's `decide` (`store/database/sqlite/ask.rs`).

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::Millis;

/// One question: rows (entries, or stored rows) and the clock, and where
/// the answer goes.
pub(crate) struct Question<T, A> {
    pub(crate) rows: Vec<Option<T>>,
    pub(crate) now: Millis,
    reply: SyncSender<A>,
}

impl<T, A> Question<T, A> {
    /// Sends the answer; a thread that stopped waiting gets nothing.
    pub(crate) fn answer(self, answer: A) {
        let _ = self.reply.send(answer);
    }
}

/// Where the thread sends one call's questions.
pub(crate) type Asks<T, A> = mpsc::Sender<Question<T, A>>;
/// Where the caller receives them, in its own task.
pub(crate) type Asked<T, A> = mpsc::Receiver<Question<T, A>>;

/// A channel for one call's questions, asked one at a time.
pub(crate) fn channel<T, A>() -> (Asks<T, A>, Asked<T, A>) {
    mpsc::channel(1)
}

/// Sends `rows` and `now` to the caller; `None` when the caller is gone.
pub(crate) fn ask<T: Clone, A>(asks: &Asks<T, A>, rows: &[Option<T>], now: Millis) -> Option<Answer<A>> {
    let (reply, replied) = sync_channel(1);
    asks.try_send(Question { rows: rows.to_vec(), now, reply }).ok()?;
    Some(Answer(replied))
}

/// The answer to a question sent, waited for on the asking thread.
pub(crate) struct Answer<A>(Receiver<A>);

impl<A> Answer<A> {
    /// The caller's answer, or `None` when it is gone or silent until
    /// `until`. Blocks the thread: first spinning for `spin`, then yielding
    /// it until `linger` (a caller that waits answers within microseconds,
    /// and a parked thread takes longer than that to wake), then asleep.
    pub(crate) fn wait(self, until: Instant, spin: Duration, linger: Duration) -> Option<A> {
        let start = Instant::now();
        while start.elapsed() < linger {
            match self.0.try_recv() {
                Ok(answer) => return Some(answer),
                Err(TryRecvError::Disconnected) => return None,
                Err(TryRecvError::Empty) if start.elapsed() < spin => std::hint::spin_loop(),
                Err(TryRecvError::Empty) => std::thread::yield_now(),
            }
        }
        self.0.recv_timeout(until.saturating_duration_since(Instant::now())).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_caller_answers_and_a_caller_gone_answers_nothing() {
        let (asks, mut asked) = channel::<u8, usize>();
        let until = Instant::now() + Duration::from_secs(2);
        let thread = std::thread::spawn(move || {
            let answered = ask(&asks, &[Some(1), None], 7).unwrap().wait(until, Duration::ZERO, Duration::ZERO);
            (answered, asks)
        });
        let q = asked.recv().await.unwrap();
        let sum = q.rows.len() + usize::try_from(q.now).unwrap();
        q.answer(sum);
        let (answered, asks) = thread.join().unwrap();
        assert_eq!(answered, Some(9));
        drop(asked);
        assert!(ask(&asks, &[Some(1)], 7).is_none(), "a caller gone is not asked");
    }

    #[test]
    fn a_silent_caller_is_waited_for_until_the_deadline_only() {
        let (asks, _asked) = channel::<u8, u8>();
        let answer = ask(&asks, &[None], 0).unwrap();
        let start = Instant::now();
        let until = start + Duration::from_millis(50);
        assert_eq!(answer.wait(until, Duration::from_micros(10), Duration::from_micros(100)), None);
        assert!(start.elapsed() >= Duration::from_millis(50));
    }
}
