//! The hand-off's rules, one failure mode each: a call that ends in time runs
//! in the caller's task; one whose caller gives up, whose caller leaks its
//! future, or whose caller is inside a poll at the deadline still runs to its
//! end, in a task of its own, and the caller is answered by the deadline.

use std::future::{poll_fn, Future};
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;
use tokio::sync::oneshot;
use tokio::task::Id;
use tokio::time::Instant;

use super::{handoff, Call, Cell, Handed};

/// `work` as a call that answers the task it ended in.
fn call(work: impl Future<Output = ()> + Send + 'static) -> Call<Option<Id>> {
    Box::pin(
        AssertUnwindSafe(async move {
            work.await;
            Ok(tokio::task::try_id())
        })
        .catch_unwind(),
    )
}

/// A call that ends when `go` is sent, and answers the task it ended in on `ended`.
fn waiting_call() -> (Call<Option<Id>>, oneshot::Sender<()>, oneshot::Receiver<Option<Id>>) {
    let (go, wait) = oneshot::channel::<()>();
    let (report, ended) = oneshot::channel();
    let call = Box::pin(
        AssertUnwindSafe(async move {
            wait.await.expect("the test sends go");
            let id = tokio::task::try_id();
            let _ = report.send(id);
            Ok(id)
        })
        .catch_unwind(),
    );
    (call, go, ended)
}

/// Runs `call` through a fresh cell.
async fn handed(call: Call<Option<Id>>, until: Instant) -> Handed<Option<Id>> {
    handoff(Cell::new(), call, until).await
}

fn poll_once<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(std::task::Waker::noop()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ends_in_time_runs_in_the_callers_task() {
    let (call, go, _ended) = waiting_call();
    let caller = tokio::spawn(async move {
        let until = Instant::now() + Duration::from_secs(5);
        let Handed::Ended(outcome) = handed(call, until).await else { panic!("ended in time") };
        (outcome.unwrap().unwrap(), tokio::task::id())
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    go.send(()).unwrap();
    let (ran_in, caller) = caller.await.unwrap();
    assert_eq!(ran_in, Some(caller), "no task of its own");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_caller_gives_up_runs_to_its_end_in_a_task_of_its_own() {
    let (call, go, ended) = waiting_call();
    let until = Instant::now() + Duration::from_secs(5);
    let gave_up = tokio::time::timeout(Duration::from_millis(20), handed(call, until)).await;
    assert!(gave_up.is_err(), "the caller stopped waiting first");
    go.send(()).expect("the call is still there to be told");
    let ran_in = tokio::time::timeout(Duration::from_secs(5), ended).await.expect("the call ended").unwrap();
    assert!(ran_in.is_some(), "it ended in a task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaked_call_is_handed_over_at_its_deadline() {
    leak_and_wait().await;
}

/// There the timer fires while the only thread parks, and the call is
/// spawned from the timer's wake.
#[tokio::test(flavor = "current_thread")]
async fn a_leaked_call_is_handed_over_at_its_deadline_on_a_current_thread_runtime() {
    leak_and_wait().await;
}

async fn leak_and_wait() {
    let (call, go, ended) = waiting_call();
    let until = Instant::now() + Duration::from_millis(50);
    let mut leaked = Box::pin(handed(call, until));
    assert!(poll_once(leaked.as_mut()).is_pending());
    std::mem::forget(leaked);
    tokio::time::sleep(Duration::from_millis(100)).await;
    go.send(()).unwrap();
    let ran_in = tokio::time::timeout(Duration::from_secs(5), ended).await.expect("the leaked call ended").unwrap();
    assert!(ran_in.is_some(), "it ended in a task of its own");
}

#[tokio::test(start_paused = true)]
async fn the_caller_is_answered_at_the_deadline() {
    let (call, _go, _ended) = waiting_call();
    let started = Instant::now();
    let outcome = handed(call, started + Duration::from_secs(2)).await;
    assert!(matches!(outcome, Handed::Late));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
}

/// The deadline passes while the caller is inside the call's poll (a store
/// that blocks in place): the timer cannot take the call then, so the caller
/// hands it over as soon as the poll returns, and it ends in its own task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_reaches_a_caller_inside_a_poll() {
    let polls = Arc::new(AtomicUsize::new(0));
    let seen = polls.clone();
    let (report, ended) = oneshot::channel();
    let mut report = Some(report);
    // The first poll sends (before the deadline is armed); the second blocks.
    let blocking = call(poll_fn(move |cx| match seen.fetch_add(1, Ordering::SeqCst) {
        0 => {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        1 => {
            tokio::task::block_in_place(|| std::thread::sleep(Duration::from_millis(300)));
            cx.waker().wake_by_ref();
            Poll::Pending
        }
        _ => {
            let _ = report.take().expect("polled once after it ended").send(tokio::task::try_id());
            Poll::Ready(())
        }
    }));
    let caller = tokio::spawn(async move {
        let started = Instant::now();
        let outcome = handed(blocking, started + Duration::from_millis(50)).await;
        (matches!(outcome, Handed::Late), started.elapsed(), tokio::task::id())
    });
    let (timed_out, waited, caller) = caller.await.unwrap();
    assert!(timed_out, "answered as past its deadline");
    assert!(waited < Duration::from_secs(2), "answered when the poll returned: {waited:?}");
    let ran_in = tokio::time::timeout(Duration::from_secs(5), ended).await.expect("the call ended").unwrap();
    assert!(ran_in.is_some_and(|id| id != caller), "in a task of its own");
    assert_eq!(polls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn the_call_knows_when_its_caller_stops_waiting() {
    // Gives up: dropped before the deadline.
    let cell = Cell::new();
    let (call, _go, _ended) = waiting_call();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(20),
        handoff(cell.clone(), call, Instant::now() + Duration::from_secs(2)),
    );
    assert!(gave_up.await.is_err());
    assert!(!cell.waiting(), "given up");
    // Leaked: the deadline passes.
    let cell = Cell::new();
    let (call, _go, _ended) = waiting_call();
    let mut leaked = Box::pin(handoff(cell.clone(), call, Instant::now() + Duration::from_secs(2)));
    assert!(poll_once(leaked.as_mut()).is_pending());
    std::mem::forget(leaked);
    assert!(cell.waiting(), "still within its deadline");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!cell.waiting(), "past its deadline");
}

#[test]
fn without_a_runtime_a_call_that_waits_is_dropped() {
    use futures_util::FutureExt as _;
    let (call, go, _ended) = waiting_call();
    let outcome = handoff(Cell::new(), call, Instant::now() + Duration::from_secs(2)).now_or_never();
    assert!(matches!(outcome, Some(Handed::NoRuntime)));
    assert!(go.is_closed(), "the call was dropped, not kept");
    let ready = handoff(Cell::new(), call_now(), Instant::now()).now_or_never();
    assert!(matches!(ready, Some(Handed::Ended(Ok(Ok(None))))), "a call that ends at once needs no runtime");
}

/// A call that ends on its first poll.
fn call_now() -> Call<Option<Id>> {
    call(async {})
}
