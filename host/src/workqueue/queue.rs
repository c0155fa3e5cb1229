//! [`WorkQueue`]: client-go's rate-limiting, delaying work queue of keys, on a [`Clock`].
//!
//! It is a plain data structure: the owner locks it and wakes its consumer. A key is in at most
//! one of three places: *ready* (in `queue`, also in `dirty`), *processing* (handed out by
//! [`WorkQueue::get`], not yet [`WorkQueue::done`]; it may be in `dirty` as well, meaning it
//! must run again), or *waiting* (scheduled for later by [`WorkQueue::add_after`]).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::Clock;
use super::limiter::{RateLimiter, RateLimits};

/// A deduplicating, rate-limited queue of keys.
#[derive(Debug)]
pub struct WorkQueue<K> {
    clock: Arc<dyn Clock>,
    limiter: RateLimiter<K>,
    /// Ready keys in order.
    queue: VecDeque<K>,
    /// Keys that need processing: ready ones, and processing ones added again.
    dirty: HashSet<K>,
    /// Keys handed out and not yet done.
    processing: HashSet<K>,
    /// When each dirty key was first added since it was last handed out.
    dirty_since: HashMap<K, Instant>,
    /// Scheduled keys by time (ties in scheduling order); entries whose time is no longer the
    /// key's in `waiting_for` are stale and skipped.
    waiting: BinaryHeap<Reverse<(Instant, u64, K)>>,
    /// The time each scheduled key is due.
    waiting_for: HashMap<K, Instant>,
    next_seq: u64,
    /// Rate-limited re-adds since the queue was made.
    retries: u64,
}

/// A snapshot of a queue, for `/status` and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Keys ready to be handed out.
    pub depth: usize,
    /// Keys scheduled for later (a backoff or a requeue-after).
    pub waiting: usize,
    /// Scheduled keys that have failed at least once since they last succeeded.
    pub in_backoff: usize,
    /// Keys handed out and not yet done.
    pub processing: usize,
    /// Rate-limited re-adds (retries after a failure) since the queue was made.
    pub retries: u64,
    /// How long the longest-ready key has waited to be handed out.
    pub oldest_ready: Option<Duration>,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// An empty queue on `clock`, rate limited by `limits`.
    pub fn new(clock: Arc<dyn Clock>, limits: RateLimits) -> Self {
        Self {
            clock,
            limiter: RateLimiter::new(limits),
            queue: VecDeque::new(),
            dirty: HashSet::new(),
            processing: HashSet::new(),
            dirty_since: HashMap::new(),
            waiting: BinaryHeap::new(),
            waiting_for: HashMap::new(),
            next_seq: 0,
            retries: 0,
        }
    }

    /// The queue's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Marks `key` as needing processing: queued once however often it is added before it is
    /// handed out; if it is being processed, it is queued again when that is done.
    pub fn add(&mut self, key: K) {
        if self.dirty.contains(&key) {
            return;
        }
        self.dirty_since.insert(key.clone(), self.clock.now());
        self.dirty.insert(key.clone());
        if self.processing.contains(&key) {
            return;
        }
        self.queue.push_back(key);
    }

    /// Adds `key` after `delay` (at once if zero). A key already scheduled keeps the earlier of
    /// its two times.
    pub fn add_after(&mut self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = self.clock.now() + delay;
        if let Some(existing) = self.waiting_for.get(&key)
            && *existing <= at
        {
            return;
        }
        self.waiting_for.insert(key.clone(), at);
        self.waiting.push(Reverse((at, self.next_seq, key)));
        self.next_seq += 1;
    }

    /// Adds `key` after its rate limiter's delay: counts a failure of it. Returns the delay.
    pub fn add_rate_limited(&mut self, key: K) -> Duration {
        let delay = self.limiter.when(&key, self.clock.now());
        self.retries += 1;
        self.add_after(key, delay);
        delay
    }

    /// Forgets `key`'s failures: its next failure starts from the base delay.
    pub fn forget(&mut self, key: &K) {
        self.limiter.forget(key);
    }

    /// Failures of `key` counted since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// Every key with failures counted, and how many.
    pub fn failures(&self) -> impl Iterator<Item = (&K, u32)> {
        self.limiter.backoff().counts()
    }

    /// Hands out the next ready key (moving due scheduled keys to ready first), marking it
    /// processing; `None` if no key is ready now.
    pub fn get(&mut self) -> Option<K> {
        self.promote_due();
        let key = self.queue.pop_front()?;
        self.dirty.remove(&key);
        self.dirty_since.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }

    /// Ends the processing of `key`; if it was added meanwhile, it is ready again.
    pub fn done(&mut self, key: &K) {
        self.processing.remove(key);
        if self.dirty.contains(key) {
            self.queue.push_back(key.clone());
        }
    }

    /// When the earliest scheduled key is due, if any.
    pub fn next_due(&mut self) -> Option<Instant> {
        self.drop_stale();
        self.waiting.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Whether a key is ready now (scheduled keys that are due included).
    pub fn has_ready(&mut self) -> bool {
        self.promote_due();
        !self.queue.is_empty()
    }

    /// Counts of what the queue holds.
    pub fn stats(&self) -> QueueStats {
        let now = self.clock.now();
        QueueStats {
            depth: self.queue.len(),
            waiting: self.waiting_for.len(),
            in_backoff: self
                .waiting_for
                .keys()
                .filter(|k| self.limiter.num_requeues(k) > 0)
                .count(),
            processing: self.processing.len(),
            retries: self.retries,
            oldest_ready: self
                .queue
                .iter()
                .filter_map(|k| self.dirty_since.get(k))
                .min()
                .map(|since| now.saturating_duration_since(*since)),
        }
    }

    /// Moves the queue's content (ready, processing-and-dirty and scheduled keys, each key's
    /// failure count and the retry counter) into `to`, which may have another clock or limits:
    /// a new version of a plugin carries its predecessor's queue. Keys being processed and not
    /// dirty are not carried: their processing ends with the old queue.
    pub fn carry_into(self, to: &mut Self) {
        let now = self.clock.now();
        for (key, failures) in self.limiter.backoff().counts() {
            let failures = failures.max(to.num_requeues(key));
            to.limiter.backoff_mut().set_count(key.clone(), failures);
        }
        let mut ready: Vec<K> = self.queue.into_iter().collect();
        ready.extend(
            self.processing
                .iter()
                .filter(|k| self.dirty.contains(*k))
                .cloned(),
        );
        for key in ready {
            to.add(key);
        }
        for (key, at) in self.waiting_for {
            to.add_after(key, at.saturating_duration_since(now));
        }
        to.retries += self.retries;
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((at, _, key))) = self.waiting.peek() {
            if self.waiting_for.get(key) == Some(at) {
                return;
            }
            self.waiting.pop();
        }
    }

    fn promote_due(&mut self) {
        let now = self.clock.now();
        while let Some(at) = self.next_due() {
            if at > now {
                return;
            }
            let Some(Reverse((_, _, key))) = self.waiting.pop() else {
                return;
            };
            self.waiting_for.remove(&key);
            self.add(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workqueue::VirtualClock;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn queue(limits: RateLimits) -> (WorkQueue<&'static str>, VirtualClock) {
        let clock = VirtualClock::new();
        (WorkQueue::new(Arc::new(clock.clone()), limits), clock)
    }

    fn drain(queue: &mut WorkQueue<&'static str>) -> Vec<&'static str> {
        let mut keys = Vec::new();
        while let Some(key) = queue.get() {
            queue.done(&key);
            keys.push(key);
        }
        keys
    }

    #[test]
    fn a_key_added_many_times_while_waiting_is_handed_out_once() {
        let (mut q, _) = queue(RateLimits::default());
        for _ in 0..1000 {
            q.add("a");
        }
        q.add("b");
        q.add("a");
        assert_eq!(q.stats().depth, 2);
        assert_eq!(drain(&mut q), ["a", "b"], "first-added order, each once");
    }

    #[test]
    fn a_key_is_never_handed_out_twice_before_done_and_runs_again_after() {
        let (mut q, _) = queue(RateLimits::default());
        q.add("a");
        assert_eq!(q.get(), Some("a"));
        for _ in 0..1000 {
            q.add("a");
        }
        assert_eq!(q.get(), None, "a is being processed: not handed out again");
        assert_eq!(q.stats().processing, 1);
        q.done(&"a");
        assert_eq!(q.get(), Some("a"), "added while processing: runs once more");
        q.done(&"a");
        assert_eq!(q.get(), None, "and only once");
    }

    #[test]
    fn a_key_done_without_a_new_add_is_not_requeued() {
        let (mut q, _) = queue(RateLimits::default());
        q.add("a");
        let key = q.get().unwrap();
        q.done(&key);
        assert_eq!(q.get(), None);
    }

    #[test]
    fn add_after_waits_on_the_clock_and_keeps_the_earlier_time() {
        let (mut q, clock) = queue(RateLimits::default());
        q.add_after("a", ms(100));
        q.add_after("a", ms(300));
        q.add_after("b", ms(50));
        assert_eq!(q.get(), None);
        assert_eq!(q.stats().waiting, 2);
        clock.advance(ms(60));
        assert_eq!(q.get(), Some("b"));
        assert_eq!(q.get(), None, "a is due at 100 ms");
        clock.advance(ms(40));
        assert_eq!(q.get(), Some("a"), "the earlier of 100 and 300 ms");
        q.done(&"a");
        clock.advance(ms(1000));
        assert_eq!(q.get(), None, "the later time was dropped, not run again");
    }

    #[test]
    fn an_earlier_schedule_replaces_a_later_one() {
        let (mut q, clock) = queue(RateLimits::default());
        q.add_after("a", ms(300));
        q.add_after("a", ms(100));
        clock.advance(ms(100));
        assert_eq!(q.get(), Some("a"));
        q.done(&"a");
        clock.advance(ms(500));
        assert_eq!(
            q.get(),
            None,
            "the stale 300 ms entry does not run it again"
        );
    }

    #[test]
    fn a_scheduled_key_that_is_also_added_runs_once_now_and_once_when_due() {
        let (mut q, clock) = queue(RateLimits::default());
        q.add_after("a", ms(100));
        q.add("a");
        assert_eq!(q.get(), Some("a"));
        q.done(&"a");
        assert_eq!(q.get(), None);
        clock.advance(ms(100));
        assert_eq!(
            q.get(),
            Some("a"),
            "client-go's delaying queue keeps the schedule"
        );
    }

    #[test]
    fn failures_back_off_exponentially_up_to_the_cap_on_the_virtual_clock() {
        let (mut q, clock) = queue(RateLimits {
            base: ms(5),
            max: ms(100),
            ..RateLimits::default()
        });
        q.add("a");
        let mut delays = Vec::new();
        for _ in 0..7 {
            let key = q.get().expect("the key is due");
            q.add_rate_limited(key);
            q.done(&key);
            let due = q.next_due().expect("scheduled");
            delays.push(due - clock.now());
            assert_eq!(q.get(), None, "not before its backoff");
            clock.advance_to(due);
        }
        assert_eq!(
            delays,
            [ms(5), ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]
        );
        assert_eq!(q.num_requeues(&"a"), 7);
        assert_eq!(q.stats().retries, 7);
    }

    #[test]
    fn forget_on_success_restarts_the_backoff() {
        let (mut q, clock) = queue(RateLimits::default());
        q.add("a");
        for _ in 0..3 {
            let key = q.get().unwrap();
            q.add_rate_limited(key);
            q.done(&key);
            clock.advance(Duration::from_secs(1));
        }
        assert_eq!(q.num_requeues(&"a"), 3);
        let key = q.get().unwrap();
        q.forget(&key);
        q.done(&key);
        assert_eq!(q.num_requeues(&"a"), 0);
        q.add_rate_limited("a");
        assert_eq!(q.next_due(), Some(clock.now() + ms(5)), "back to the base");
    }

    #[test]
    fn the_overall_bucket_spaces_retries_of_many_keys() {
        let (mut q, clock) = queue(RateLimits {
            base: ms(1),
            max: Duration::from_secs(1000),
            qps: 10.0,
            burst: 2,
        });
        for key in ["a", "b", "c", "d"] {
            q.add_rate_limited(key);
        }
        let mut order = Vec::new();
        while let Some(at) = q.next_due() {
            clock.advance_to(at);
            order.extend(drain(&mut q).into_iter().map(|k| (k, clock.elapsed())));
        }
        assert_eq!(
            order,
            [("a", ms(1)), ("b", ms(1)), ("c", ms(100)), ("d", ms(200))]
        );
        assert_eq!(
            clock.elapsed(),
            ms(200),
            "burst 2, then one token per 100 ms"
        );
    }

    #[test]
    fn stats_count_backoff_and_the_oldest_ready_key() {
        let (mut q, clock) = queue(RateLimits::default());
        q.add("a");
        clock.advance(ms(30));
        q.add("b");
        q.add_rate_limited("c");
        q.add_after("d", ms(500));
        let stats = q.stats();
        assert_eq!(
            (stats.depth, stats.waiting, stats.in_backoff, stats.retries),
            (2, 2, 1, 1)
        );
        assert_eq!(stats.oldest_ready, Some(ms(30)));
    }

    #[test]
    fn the_queue_carries_over_with_failure_counts_and_schedules() {
        let (mut old, clock) = queue(RateLimits::default());
        old.add("busy");
        old.add("failing");
        old.add("ready");
        assert_eq!(old.get(), Some("busy"));
        old.add("busy");
        assert_eq!(old.get(), Some("failing"));
        old.add_rate_limited("failing");
        old.add_rate_limited("failing");
        old.done(&"failing");
        old.add_after("later", ms(500));
        assert_eq!(
            old.get(),
            Some("ready"),
            "processing, not dirty: not carried"
        );

        let mut new = WorkQueue::new(Arc::new(clock.clone()), RateLimits::default());
        old.carry_into(&mut new);
        assert_eq!(new.num_requeues(&"failing"), 2);
        assert_eq!(new.stats().retries, 2);
        let mut now: Vec<_> = drain(&mut new);
        now.sort();
        assert_eq!(now, ["busy"], "dirty keys, processing or not");
        clock.advance(ms(10));
        assert_eq!(drain(&mut new), ["failing"], "due at 5 ms, kept");
        clock.advance(ms(490));
        assert_eq!(drain(&mut new), ["later"]);
    }
}
