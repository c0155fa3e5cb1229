//! [`DeliveryPool`]: the bounded set of OS threads that run plugin workers. wasmtime calls are
//! synchronous, so a call holds a thread; but a worker with nothing to deliver holds none. A
//! worker is a task the pool runs when its queue has something for it (or a timer it set is due)
//! and that gives its thread back when it has nothing left, so the thread count follows how many
//! plugins are busy at once, up to `host.deliveryThreads`, not how many are loaded.
//!
//! Threads start when tasks are waiting and none is free, up to the limit, and end after
//! [`KEEP_ALIVE`] without work. Past the limit, ready tasks wait their turn in arrival order; a
//! busy worker gives its thread back after [`SLICE`] when others are waiting (see
//! `PluginWorker`), so one plugin's backlog does not hold a thread while others starve.

use std::collections::{BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// How long a pool thread waits for work before it ends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// How long a worker delivers before it lets a waiting worker have its thread.
pub const SLICE: Duration = Duration::from_millis(5);

/// Something the pool runs: a plugin worker.
pub(crate) trait Task: Send + Sync + 'static {
    /// Runs on a pool thread until the task has nothing left to do now.
    fn run(self: Arc<Self>);
    /// A timer the task set is due.
    fn timer(self: Arc<Self>, at: Instant);
}

/// The threads that call plugins (cheap to clone: a handle).
#[derive(Clone)]
pub struct DeliveryPool {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for DeliveryPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("DeliveryPool")
            .field("max_threads", &self.inner.max_threads)
            .field("threads", &state.threads)
            .field("waiting", &state.tasks.len())
            .finish()
    }
}

struct Inner {
    max_threads: usize,
    keep_alive: Duration,
    state: Mutex<State>,
    /// A task was queued (for idle threads).
    ready: Condvar,
    timers: Mutex<Timers>,
    /// A timer earlier than the timer thread's next was set.
    timer_set: Condvar,
}

#[derive(Default)]
struct State {
    tasks: VecDeque<Arc<dyn Task>>,
    threads: usize,
    idle: usize,
}

#[derive(Default)]
struct Timers {
    due: BinaryHeap<Timer>,
    next_seq: u64,
    /// Whether the timer thread runs.
    running: bool,
}

struct Timer {
    at: Instant,
    seq: u64,
    task: Weak<dyn Task>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}

impl Eq for Timer {}

impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timer {
    /// Earliest first in a max-heap.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl DeliveryPool {
    /// The default of `host.deliveryThreads`.
    pub const DEFAULT_THREADS: usize = 32;

    /// A pool of at most `max_threads` threads (at least one).
    pub fn new(max_threads: usize) -> Self {
        Self::with_keep_alive(max_threads, KEEP_ALIVE)
    }

    pub(crate) fn with_keep_alive(max_threads: usize, keep_alive: Duration) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_threads: max_threads.max(1),
                keep_alive,
                state: Mutex::default(),
                ready: Condvar::new(),
                timers: Mutex::default(),
                timer_set: Condvar::new(),
            }),
        }
    }

    /// The process's pool of [`Self::DEFAULT_THREADS`], for workers started without one (tests).
    pub fn shared() -> Self {
        static SHARED: OnceLock<DeliveryPool> = OnceLock::new();
        SHARED
            .get_or_init(|| Self::new(Self::DEFAULT_THREADS))
            .clone()
    }

    /// Its thread limit.
    pub fn max_threads(&self) -> usize {
        self.inner.max_threads
    }

    /// Threads it has now (busy or waiting for work).
    pub fn threads(&self) -> usize {
        self.inner.lock().threads
    }

    /// Queues `task` to run on a pool thread; starts a thread if none is free and the limit
    /// allows.
    pub(crate) fn submit(&self, task: Arc<dyn Task>) {
        let mut state = self.inner.lock();
        state.tasks.push_back(task);
        if state.tasks.len() <= state.idle {
            drop(state);
            self.inner.ready.notify_one();
            return;
        }
        if state.threads < self.inner.max_threads {
            state.threads += 1;
            drop(state);
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name("plugin-delivery".to_owned())
                .spawn(move || inner.work())
                .expect("spawn a plugin delivery thread");
        } else if state.idle > 0 {
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Whether tasks are waiting for a thread.
    pub(crate) fn has_waiting(&self) -> bool {
        !self.inner.lock().tasks.is_empty()
    }

    /// Calls `task.timer(at)` at `at` (unless the task is gone by then).
    pub(crate) fn wake_at(&self, at: Instant, task: Weak<dyn Task>) {
        let mut timers = self.inner.timers.lock().expect("pool timers lock poisoned");
        let earliest = timers.due.peek().is_none_or(|first| at < first.at);
        let seq = timers.next_seq;
        timers.next_seq += 1;
        timers.due.push(Timer { at, seq, task });
        if !timers.running {
            timers.running = true;
            drop(timers);
            let inner = self.inner.clone();
            std::thread::Builder::new()
                .name("plugin-timers".to_owned())
                .spawn(move || inner.fire_timers())
                .expect("spawn the plugin timer thread");
        } else if earliest {
            drop(timers);
            self.inner.timer_set.notify_one();
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("delivery pool lock poisoned")
    }

    /// A pool thread: runs queued tasks; ends after `keep_alive` without one.
    fn work(self: Arc<Self>) {
        let mut state = self.lock();
        loop {
            if let Some(task) = state.tasks.pop_front() {
                drop(state);
                task.run();
                state = self.lock();
                continue;
            }
            state.idle += 1;
            let (next, waited) = self
                .ready
                .wait_timeout(state, self.keep_alive)
                .expect("delivery pool lock poisoned");
            state = next;
            state.idle -= 1;
            if waited.timed_out() && state.tasks.is_empty() {
                state.threads -= 1;
                return;
            }
        }
    }

    /// The timer thread: wakes tasks at the times they asked; ends after `keep_alive` with no
    /// timer set (the next one starts it again).
    fn fire_timers(self: Arc<Self>) {
        let mut timers = self.timers.lock().expect("pool timers lock poisoned");
        loop {
            let now = Instant::now();
            match timers.due.peek() {
                Some(first) if first.at <= now => {
                    let Timer { at, task, .. } = timers.due.pop().expect("peeked");
                    drop(timers);
                    if let Some(task) = task.upgrade() {
                        task.timer(at);
                    }
                    timers = self.timers.lock().expect("pool timers lock poisoned");
                }
                Some(first) => {
                    let left = first.at - now;
                    timers = self
                        .timer_set
                        .wait_timeout(timers, left)
                        .expect("pool timers lock poisoned")
                        .0;
                }
                None => {
                    let (next, waited) = self
                        .timer_set
                        .wait_timeout(timers, self.keep_alive)
                        .expect("pool timers lock poisoned");
                    timers = next;
                    if waited.timed_out() && timers.due.is_empty() {
                        timers.running = false;
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Counts its runs, holding its thread `busy` each time.
    struct Counted {
        runs: AtomicUsize,
        busy: Duration,
        fired: Mutex<Vec<Instant>>,
    }

    impl Task for Counted {
        fn run(self: Arc<Self>) {
            std::thread::sleep(self.busy);
            self.runs.fetch_add(1, Ordering::SeqCst);
        }

        fn timer(self: Arc<Self>, at: Instant) {
            self.fired.lock().unwrap().push(at);
        }
    }

    fn counted(busy: Duration) -> Arc<Counted> {
        Arc::new(Counted {
            runs: AtomicUsize::new(0),
            busy,
            fired: Mutex::default(),
        })
    }

    fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Many tasks at once never take more threads than the limit, every task runs, and the
    /// threads end once there is no work.
    #[test]
    fn runs_every_task_on_at_most_its_limit_of_threads_then_lets_them_go() {
        let pool = DeliveryPool::with_keep_alive(3, Duration::from_millis(50));
        let tasks: Vec<_> = (0..40).map(|_| counted(Duration::from_millis(2))).collect();
        let mut most = 0;
        for task in &tasks {
            pool.submit(task.clone());
            most = most.max(pool.threads());
        }
        wait_until("every task ran", || {
            most = most.max(pool.threads());
            tasks.iter().all(|t| t.runs.load(Ordering::SeqCst) == 1)
        });
        assert_eq!(most, 3, "threads used: {most}");
        wait_until("the idle threads ended", || pool.threads() == 0);
    }

    /// A task that holds its thread does not stop the others while the limit allows another.
    #[test]
    fn a_task_holding_a_thread_does_not_hold_up_the_others() {
        let pool = DeliveryPool::with_keep_alive(2, Duration::from_millis(50));
        let slow = counted(Duration::from_secs(3));
        pool.submit(slow.clone());
        let quick: Vec<_> = (0..20).map(|_| counted(Duration::ZERO)).collect();
        for task in &quick {
            pool.submit(task.clone());
        }
        wait_until("the quick tasks ran", || {
            quick.iter().all(|t| t.runs.load(Ordering::SeqCst) == 1)
        });
        assert_eq!(
            slow.runs.load(Ordering::SeqCst),
            0,
            "the slow task still runs"
        );
    }

    /// Timers fire in time order, each once, and not for a task that is gone.
    #[test]
    fn timers_fire_in_time_order_and_skip_dropped_tasks() {
        let pool = DeliveryPool::with_keep_alive(1, Duration::from_millis(50));
        let task = counted(Duration::ZERO);
        let now = Instant::now();
        let times: Vec<Instant> = [30, 10, 20]
            .into_iter()
            .map(|ms| now + Duration::from_millis(ms))
            .collect();
        for at in &times {
            pool.wake_at(*at, Arc::downgrade(&(task.clone() as Arc<dyn Task>)));
        }
        // A task dropped before its timer is due: nothing to wake.
        let gone = Arc::downgrade(&(counted(Duration::ZERO) as Arc<dyn Task>));
        pool.wake_at(now, gone);
        wait_until("three timers fired", || {
            task.fired.lock().unwrap().len() == 3
        });
        let mut sorted = times.clone();
        sorted.sort();
        assert_eq!(*task.fired.lock().unwrap(), sorted);
        wait_until("the timer thread ended", || {
            !pool.inner.timers.lock().unwrap().running
        });
    }
}
