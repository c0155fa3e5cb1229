//! [`WorkQueue`]: client-go's rate-limiting, delaying work queue of keys, on a [`Clock`].
//!
//! It is a plain data structure: the owner locks it and wakes its consumer. A key is in at most
//! one of three places: *ready* (in `queue`, and dirty), *processing* (handed out by
//! [`WorkQueue::get`], not yet [`WorkQueue::done`]; it may be dirty as well, meaning it must run
//! again), or *waiting* (scheduled for later by [`WorkQueue::add_after`]). One map holds what the
//! queue knows of each key, and [`WorkQueue::stats`] reads counters kept as keys move, so that
//! the worker can publish them after every key: a scan there made draining a queue of `n` keys
//! cost `n²` (30,000 keys: 29 s).

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::clock::Clock;
use super::limiter::{RateLimiter, RateLimits};

/// Keys a drained queue keeps room for ([`WorkQueue::release_drained`]); a burst regrows it.
const KEPT_CAPACITY: usize = 32;

/// A deduplicating, rate-limited queue of keys.
#[derive(Debug)]
pub struct WorkQueue<K> {
    clock: Arc<dyn Clock>,
    limiter: RateLimiter<K>,
    /// Ready keys in order, with when each became ready (the front's is the oldest).
    queue: VecDeque<(K, Instant)>,
    /// Each key that is dirty, processing or waiting; a key that is none of these is removed.
    keys: HashMap<K, KeyState>,
    /// Scheduled keys by time (ties in scheduling order); entries whose time is no longer the
    /// key's `due` are stale and skipped.
    waiting: BinaryHeap<Reverse<(Instant, u64, K)>>,
    /// How many keys are processing, waiting, and waiting with failures counted.
    processing: usize,
    scheduled: usize,
    in_backoff: usize,
    next_seq: u64,
    /// Rate-limited re-adds since the queue was made.
    retries: u64,
}

/// What the queue knows of one key.
#[derive(Debug, Default)]
struct KeyState {
    /// Needs processing: ready, or processing and added again.
    dirty: bool,
    /// Handed out and not yet done.
    processing: bool,
    /// When it is due, if scheduled.
    due: Option<Instant>,
}

impl KeyState {
    fn is_idle(&self) -> bool {
        !self.dirty && !self.processing && self.due.is_none()
    }
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
    /// How long the longest-ready key has waited to be handed out (a key added while it was
    /// processed is ready from its `done`).
    pub oldest_ready: Option<Duration>,
}

impl<K: Clone + Eq + Hash + Ord> WorkQueue<K> {
    /// An empty queue on `clock`, rate limited by `limits`.
    pub fn new(clock: Arc<dyn Clock>, limits: RateLimits) -> Self {
        Self {
            clock,
            limiter: RateLimiter::new(limits),
            queue: VecDeque::new(),
            keys: HashMap::new(),
            waiting: BinaryHeap::new(),
            processing: 0,
            scheduled: 0,
            in_backoff: 0,
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
        match self.keys.entry(key) {
            Entry::Occupied(mut entry) => {
                let state = entry.get_mut();
                if state.dirty {
                    return;
                }
                state.dirty = true;
                if !state.processing {
                    self.queue
                        .push_back((entry.key().clone(), self.clock.now()));
                }
            }
            Entry::Vacant(entry) => {
                let key = entry.key().clone();
                entry.insert(KeyState {
                    dirty: true,
                    ..KeyState::default()
                });
                self.queue.push_back((key, self.clock.now()));
            }
        }
    }

    /// Adds `key` after `delay` (at once if zero). A key already scheduled keeps the earlier of
    /// its two times.
    pub fn add_after(&mut self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let at = self.clock.now() + delay;
        let failing = self.limiter.num_requeues(&key) > 0;
        let entry = self.keys.entry(key);
        let key = entry.key().clone();
        let state = entry.or_default();
        match state.due {
            Some(due) if due <= at => return,
            Some(_) => {}
            None => {
                self.scheduled += 1;
                self.in_backoff += usize::from(failing);
            }
        }
        state.due = Some(at);
        self.waiting.push(Reverse((at, self.next_seq, key)));
        self.next_seq += 1;
    }

    /// Adds `key` after its rate limiter's delay: counts a failure of it. Returns the delay.
    pub fn add_rate_limited(&mut self, key: K) -> Duration {
        let failed_before = self.limiter.num_requeues(&key) > 0;
        let delay = self.limiter.when(&key, self.clock.now());
        if !failed_before && self.is_scheduled(&key) {
            self.in_backoff += 1;
        }
        self.retries += 1;
        self.add_after(key, delay);
        delay
    }

    /// Forgets `key`'s failures: its next failure starts from the base delay.
    pub fn forget(&mut self, key: &K) {
        if self.limiter.num_requeues(key) > 0 && self.is_scheduled(key) {
            self.in_backoff -= 1;
        }
        self.limiter.forget(key);
    }

    /// Failures of `key` counted since it was last forgotten.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// The `n` keys with the most failures counted (ties in key order), and how many each.
    pub fn most_failing(&self, n: usize) -> impl Iterator<Item = (&K, u32)> {
        self.limiter.backoff().most_failing().take(n)
    }

    /// Hands out the next ready key (moving due scheduled keys to ready first), marking it
    /// processing; `None` if no key is ready now.
    pub fn get(&mut self) -> Option<K> {
        self.promote_due();
        let (key, _) = self.queue.pop_front()?;
        let state = self.keys.get_mut(&key).expect("a ready key is known");
        state.dirty = false;
        state.processing = true;
        self.processing += 1;
        Some(key)
    }

    /// Ends the processing of `key`; if it was added meanwhile, it is ready again. Nothing for a
    /// key not being processed.
    pub fn done(&mut self, key: &K) {
        let Some(state) = self.keys.get_mut(key).filter(|state| state.processing) else {
            return;
        };
        state.processing = false;
        self.processing -= 1;
        if state.dirty {
            self.queue.push_back((key.clone(), self.clock.now()));
        } else if state.is_idle() {
            self.keys.remove(key);
        }
    }

    /// Gives back the room a backlog grew once no key is ready (a reconciler's initial list
    /// queues every key once, and hundreds of plugins would each keep that room); returns how
    /// many keys' room the ready queue gave back (0 if it had not grown). Cheap to call after
    /// every key.
    pub fn release_drained(&mut self) -> usize {
        let grown = self.queue.capacity();
        if !self.queue.is_empty() || grown <= KEPT_CAPACITY {
            return 0;
        }
        self.queue.shrink_to(KEPT_CAPACITY);
        self.keys.shrink_to(KEPT_CAPACITY);
        self.waiting.shrink_to(KEPT_CAPACITY);
        self.limiter.backoff_mut().shrink_to(KEPT_CAPACITY);
        grown - self.queue.capacity()
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

    /// Counts of what the queue holds; takes the same time however many keys it holds.
    pub fn stats(&self) -> QueueStats {
        QueueStats {
            depth: self.queue.len(),
            waiting: self.scheduled,
            in_backoff: self.in_backoff,
            processing: self.processing,
            retries: self.retries,
            oldest_ready: self
                .queue
                .front()
                .map(|(_, since)| self.clock.now().saturating_duration_since(*since)),
        }
    }

    /// Moves the queue's content (ready, processing-and-dirty and scheduled keys, each key's
    /// failure count and the retry counter) into `to`, which may have another clock or limits:
    /// a new version of a plugin carries its predecessor's queue. Keys being processed and not
    /// dirty are not carried: their processing ends with the old queue.
    pub fn carry_into(self, to: &mut Self) {
        let now = self.clock.now();
        for (key, failures) in self.limiter.backoff().counts() {
            let before = to.num_requeues(key);
            let failures = failures.max(before);
            if before == 0 && to.is_scheduled(key) {
                to.in_backoff += 1;
            }
            to.limiter.backoff_mut().set_count(key.clone(), failures);
        }
        let mut ready: Vec<K> = self.queue.into_iter().map(|(key, _)| key).collect();
        let mut waiting = Vec::new();
        for (key, state) in self.keys {
            if state.processing && state.dirty {
                ready.push(key.clone());
            }
            if let Some(at) = state.due {
                waiting.push((key, at));
            }
        }
        for key in ready {
            to.add(key);
        }
        for (key, at) in waiting {
            to.add_after(key, at.saturating_duration_since(now));
        }
        to.retries += self.retries;
    }

    fn is_scheduled(&self, key: &K) -> bool {
        self.keys.get(key).is_some_and(|state| state.due.is_some())
    }

    fn drop_stale(&mut self) {
        while let Some(Reverse((at, _, key))) = self.waiting.peek() {
            if self.keys.get(key).and_then(|state| state.due) == Some(*at) {
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
            let state = self.keys.get_mut(&key).expect("a scheduled key is known");
            state.due = None;
            self.scheduled -= 1;
            if self.limiter.num_requeues(&key) > 0 {
                self.in_backoff -= 1;
            }
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

    /// A reconciler's initial list queues every key once; drained, the queue gives that room back
    /// (a thousand idle plugins would each keep it).
    #[test]
    fn a_drained_backlog_gives_back_its_room() {
        let (mut q, _) = queue(RateLimits::default());
        let keys: Vec<&'static str> = (0..10_000)
            .map(|i| &*Box::leak(format!("k{i}").into_boxed_str()))
            .collect();
        for key in &keys {
            q.add(*key);
        }
        q.add_rate_limited("failing");
        assert_eq!(q.release_drained(), 0, "keys are ready: nothing given back");
        assert!(q.queue.capacity() >= 10_000 && q.keys.capacity() >= 10_000);
        while let Some(key) = q.get() {
            q.forget(&key);
            q.done(&key);
        }
        let released = q.release_drained();
        assert!(released >= 10_000 - 2 * KEPT_CAPACITY, "{released}");
        assert!(
            q.queue.capacity() <= 2 * KEPT_CAPACITY && q.keys.capacity() <= 2 * KEPT_CAPACITY,
            "{} {}",
            q.queue.capacity(),
            q.keys.capacity()
        );
        assert_eq!(q.stats().waiting, 1, "the scheduled key stays");
        assert_eq!(q.release_drained(), 0, "once");
    }

    /// The queue as client-go writes it, a set per state and a scan per count: what the counters
    /// and the single map above must agree with.
    #[derive(Default)]
    struct Model {
        queue: VecDeque<(&'static str, Instant)>,
        dirty: std::collections::HashSet<&'static str>,
        processing: std::collections::HashSet<&'static str>,
        /// Due time and scheduling order of each waiting key.
        waiting: HashMap<&'static str, (Instant, u64)>,
        seq: u64,
        failures: HashMap<&'static str, u32>,
    }

    impl Model {
        fn add(&mut self, key: &'static str, now: Instant) {
            if self.dirty.insert(key) && !self.processing.contains(key) {
                self.queue.push_back((key, now));
            }
        }

        fn add_after(&mut self, key: &'static str, delay: Duration, now: Instant) {
            if delay.is_zero() {
                return self.add(key, now);
            }
            let at = now + delay;
            if self.waiting.get(key).is_some_and(|(due, _)| *due <= at) {
                return;
            }
            self.waiting.insert(key, (at, self.seq));
            self.seq += 1;
        }

        fn get(&mut self, now: Instant) -> Option<&'static str> {
            let mut due: Vec<_> = self
                .waiting
                .iter()
                .filter(|(_, (at, _))| *at <= now)
                .map(|(k, t)| (*t, *k))
                .collect();
            due.sort();
            for (_, key) in due {
                self.waiting.remove(key);
                self.add(key, now);
            }
            let (key, _) = self.queue.pop_front()?;
            self.dirty.remove(key);
            self.processing.insert(key);
            Some(key)
        }

        fn done(&mut self, key: &'static str, now: Instant) {
            if self.processing.remove(key) && self.dirty.contains(key) {
                self.queue.push_back((key, now));
            }
        }

        fn stats(&self, now: Instant, retries: u64) -> QueueStats {
            QueueStats {
                depth: self.queue.len(),
                waiting: self.waiting.len(),
                in_backoff: self
                    .waiting
                    .keys()
                    .filter(|k| self.failures.contains_key(*k))
                    .count(),
                processing: self.processing.len(),
                retries,
                oldest_ready: self.queue.iter().map(|(_, since)| now - *since).max(),
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(usize),
        AddAfter(usize, u64),
        AddRateLimited(usize),
        Forget(usize),
        Get,
        Done(usize),
        Advance(u64),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            (0..5usize).prop_map(Op::Add),
            (0..5usize, 0..50u64).prop_map(|(k, ms)| Op::AddAfter(k, ms)),
            (0..5usize).prop_map(Op::AddRateLimited),
            (0..5usize).prop_map(Op::Forget),
            Just(Op::Get),
            (0..5usize).prop_map(Op::Done),
            (0..30u64).prop_map(Op::Advance),
        ]
    }

    proptest::proptest! {
        /// Whatever is done to it, the queue hands out what client-go's would, and its counts (kept
        /// as keys move) and its most failing keys are what a scan of client-go's sets finds.
        #[test]
        fn counts_kept_as_keys_move_match_a_scan(ops in proptest::collection::vec(op(), 1..200)) {
            const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
            let (mut q, clock) = queue(RateLimits { base: ms(5), max: ms(40), qps: 100.0, burst: 3 });
            let mut model = Model::default();
            let mut limiter = RateLimiter::new(RateLimits { base: ms(5), max: ms(40), qps: 100.0, burst: 3 });
            let mut retries = 0;
            for op in ops {
                let now = clock.now();
                match op {
                    Op::Add(k) => {
                        q.add(KEYS[k]);
                        model.add(KEYS[k], now);
                    }
                    Op::AddAfter(k, delay) => {
                        q.add_after(KEYS[k], ms(delay));
                        model.add_after(KEYS[k], ms(delay), now);
                    }
                    Op::AddRateLimited(k) => {
                        let delay = limiter.when(&KEYS[k], now);
                        *model.failures.entry(KEYS[k]).or_default() += 1;
                        retries += 1;
                        proptest::prop_assert_eq!(q.add_rate_limited(KEYS[k]), delay);
                        model.add_after(KEYS[k], delay, now);
                    }
                    Op::Forget(k) => {
                        q.forget(&KEYS[k]);
                        limiter.forget(&KEYS[k]);
                        model.failures.remove(KEYS[k]);
                    }
                    Op::Get => proptest::prop_assert_eq!(q.get(), model.get(now)),
                    Op::Done(k) => {
                        q.done(&KEYS[k]);
                        model.done(KEYS[k], now);
                    }
                    Op::Advance(by) => clock.advance(ms(by)),
                }
                proptest::prop_assert_eq!(q.stats(), model.stats(clock.now(), retries));
                let mut failing: Vec<_> = model.failures.iter().map(|(k, n)| (*k, *n)).collect();
                failing.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
                let shown: Vec<_> = q.most_failing(3).map(|(k, n)| (*k, n)).collect();
                proptest::prop_assert_eq!(shown, failing.into_iter().take(3).collect::<Vec<_>>());
            }
        }
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
