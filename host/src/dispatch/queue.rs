//! [`EventQueue`]: one plugin's ordered backlog, fed by its informer subscriptions without ever
//! blocking them, drained by the plugin's worker.
//!
//! Order is arrival order. When the backlog passes the plugin's `maxQueuedEvents`, an update of
//! an object whose latest queued event is also an update is merged into it (first old, last new),
//! as client-go's DeltaFIFO would; adds and deletes are never merged or dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use crate::cache::{CachedObject, Event, ObjectKey};
use crate::informer::EventSink;
use crate::metrics::QueueMetrics;

/// Which of the plugin's subscriptions an event came from (its position in the plugin's
/// `handles`).
pub type SubscriptionId = usize;

/// One queued event: its sequence number, its subscription, the event.
type Queued = (u64, SubscriptionId, Event);

/// Entries a drained queue keeps room for; what a backlog (an initial list of 10k objects) grew
/// beyond is given back when the queue empties, so a thousand idle plugins do not each hold the
/// capacity of their initial list (about 1.2 MiB per plugin with 10k Pods). Small: 256 entries
/// still cost about 40 KiB per plugin (the queue and its two maps), and a burst regrows it.
const KEPT_CAPACITY: usize = 32;
/// A drained backlog of at least this many entries (about 120 KiB) also asks for the freed heap
/// to be given back to the OS ([`crate::trim`]): freed, it would stay resident in malloc's arena.
/// The reconcile worker's key queue uses the same bound.
pub(super) const TRIM_CAPACITY: usize = 1024;

#[derive(Debug, Default)]
struct State {
    items: VecDeque<Queued>,
    next_seq: u64,
    /// The sequence number of each object's latest queued event.
    latest: HashMap<(SubscriptionId, ObjectKey), u64>,
    coalesced: u64,
    /// When each queued item was appended, for `workqueue_queue_duration_seconds`.
    enqueued: HashMap<u64, Instant>,
    closed: bool,
    woken: bool,
}

/// A plugin's backlog.
#[derive(Debug)]
pub struct EventQueue {
    state: Mutex<State>,
    /// Told whenever [`pop`](Self::pop) may find something new: the plugin's worker, which
    /// holds a thread only while it has something to do.
    waker: OnceLock<Waker>,
    max_queued: usize,
    metrics: QueueMetrics,
}

/// What [`EventQueue::set_waker`] calls.
struct Waker(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Waker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Waker")
    }
}

/// What [`EventQueue::pop`] found.
#[derive(Debug)]
pub enum Popped {
    /// The next event and the subscription it came from.
    Event {
        /// Its subscription.
        subscription: SubscriptionId,
        /// The event (`Synced` included: the subscription's initial list is queued in full).
        event: Event,
    },
    /// Nothing is queued.
    Empty,
    /// [`EventQueue::wake`] was called.
    Woken,
    /// The queue is closed and drained.
    Closed,
}

impl EventQueue {
    /// An empty queue that starts coalescing updates past `max_queued` items.
    pub fn new(max_queued: usize) -> Arc<Self> {
        Self::with_metrics(max_queued, QueueMetrics::default())
    }

    /// [`EventQueue::new`], reporting to `metrics` (the plugin's `workqueue_*` series).
    pub fn with_metrics(max_queued: usize, metrics: QueueMetrics) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::default(),
            waker: OnceLock::new(),
            max_queued,
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("event queue lock poisoned")
    }

    /// Calls `waker` (once per change, outside the queue's lock) whenever there is something new
    /// to pop: an item, a [`wake`](Self::wake), the close. Set once, by the queue's worker.
    pub fn set_waker(&self, waker: impl Fn() + Send + Sync + 'static) {
        if self.waker.set(Waker(Box::new(waker))).is_err() {
            panic!("an event queue has one worker");
        }
    }

    /// Tells the worker.
    fn notify(&self) {
        if let Some(Waker(waker)) = self.waker.get() {
            waker();
        }
    }

    /// Appends `event` from `subscription` (or merges an update, see the module docs).
    pub fn push(&self, subscription: SubscriptionId, event: Event) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if let Event::Update { new, .. } = &event
            && state.items.len() >= self.max_queued
            && Self::merge_update(&mut state, subscription, new)
        {
            self.metrics.coalesced();
            return;
        }
        Self::append(&mut state, subscription, event);
        self.metrics.added(state.items.len());
        drop(state);
        self.notify();
    }

    fn append(state: &mut State, subscription: SubscriptionId, event: Event) {
        let seq = state.next_seq;
        state.next_seq += 1;
        if let Some(obj) = event.object() {
            state.latest.insert((subscription, obj.key().clone()), seq);
        }
        state.items.push_back((seq, subscription, event));
        state.enqueued.insert(seq, Instant::now());
    }

    /// Replaces what `subscription` has queued with a snapshot of its store, `objects` as
    /// initial adds, then `Synced` if `synced` (a snapshot swap: the new version gets the current
    /// state, not the changes that led to it); other subscriptions' events keep their order.
    /// Returns how many events were dropped.
    pub fn replace_with_snapshot(
        &self,
        subscription: SubscriptionId,
        objects: Vec<Arc<CachedObject>>,
        synced: bool,
    ) -> usize {
        let mut state = self.lock();
        if state.closed {
            return 0;
        }
        let before = state.items.len();
        let kept: Vec<(SubscriptionId, Event)> = std::mem::take(&mut state.items)
            .into_iter()
            .filter(|(_, from, _)| *from != subscription)
            .map(|(_, from, event)| (from, event))
            .collect();
        let dropped = before - kept.len();
        state.latest.clear();
        state.enqueued.clear();
        let snapshot = objects
            .into_iter()
            .map(|obj| (subscription, Event::Add { obj, initial: true }));
        for (from, event) in kept
            .into_iter()
            .chain(snapshot)
            .chain(synced.then_some((subscription, Event::Synced)))
        {
            Self::append(&mut state, from, event);
        }
        self.metrics.depth(state.items.len());
        drop(state);
        self.notify();
        dropped
    }

    /// Merges `new` into the object's latest queued event if that is an update.
    fn merge_update(
        state: &mut State,
        subscription: SubscriptionId,
        new: &Arc<CachedObject>,
    ) -> bool {
        let Some(&seq) = state.latest.get(&(subscription, new.key().clone())) else {
            return false;
        };
        let first = state.items.front().map_or(0, |(s, _, _)| *s);
        let Some((_, _, Event::Update { new: queued, .. })) =
            state.items.get_mut((seq - first) as usize)
        else {
            return false;
        };
        *queued = new.clone();
        state.coalesced += 1;
        true
    }

    /// Queues a resync of `objects` as updates with old == new, skipping objects that have an
    /// event queued already (like client-go, a resync never overtakes a real change). The check
    /// and the appends happen under one lock, so no live push lands between them; the caller
    /// takes `objects` under the informer's fan-out lock (see [`Informer::with_snapshot`]), so
    /// the snapshot is never ahead of what the informer has pushed here.
    ///
    /// [`Informer::with_snapshot`]: crate::informer::Informer::with_snapshot
    pub fn resync(&self, subscription: SubscriptionId, objects: Vec<Arc<CachedObject>>) -> usize {
        let mut state = self.lock();
        if state.closed {
            return 0;
        }
        let mut queued = 0;
        for obj in objects {
            if state
                .latest
                .contains_key(&(subscription, obj.key().clone()))
            {
                continue;
            }
            // Nothing is queued for the object, so there is nothing to merge with: append.
            Self::append(
                &mut state,
                subscription,
                Event::Update {
                    old: obj.clone(),
                    new: obj,
                },
            );
            queued += 1;
        }
        drop(state);
        if queued > 0 {
            self.notify();
        }
        queued
    }

    /// The next item, without waiting: the worker is told (see [`set_waker`](Self::set_waker))
    /// when there is one.
    pub fn pop(&self) -> Popped {
        let mut state = self.lock();
        if let Some((seq, subscription, event)) = state.items.pop_front() {
            if let Some(obj) = event.object() {
                let key = (subscription, obj.key().clone());
                if state.latest.get(&key) == Some(&seq) {
                    state.latest.remove(&key);
                }
            }
            if let Some(at) = state.enqueued.remove(&seq) {
                self.metrics.taken(at.elapsed());
            }
            if state.items.is_empty() && state.items.capacity() > KEPT_CAPACITY {
                if state.items.capacity() >= TRIM_CAPACITY {
                    crate::trim::request();
                }
                state.items.shrink_to(KEPT_CAPACITY);
                state.latest.shrink_to(KEPT_CAPACITY);
                state.enqueued.shrink_to(KEPT_CAPACITY);
            }
            self.metrics.depth(state.items.len());
            return Popped::Event {
                subscription,
                event,
            };
        }
        if state.closed {
            return Popped::Closed;
        }
        if std::mem::take(&mut state.woken) {
            return Popped::Woken;
        }
        Popped::Empty
    }

    /// Stops accepting items; [`pop`](Self::pop) drains what is queued, then says `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify();
    }

    /// Drops everything queued and closes (shutdown past its deadline).
    pub fn abandon(&self) -> usize {
        let mut state = self.lock();
        let dropped = state.items.len();
        state.items.clear();
        state.latest.clear();
        state.enqueued.clear();
        state.closed = true;
        self.metrics.depth(0);
        drop(state);
        self.notify();
        dropped
    }

    /// Makes the next [`pop`](Self::pop) of an empty queue say `Woken`, and tells the worker,
    /// so it looks at its swap slot.
    pub fn wake(&self) {
        self.lock().woken = true;
        self.notify();
    }

    /// Gives back the memory of an empty queue (its plugin was unloaded while idle); a queue
    /// with items keeps it.
    pub fn shrink(&self) {
        let mut state = self.lock();
        if state.items.is_empty() {
            state.items = VecDeque::new();
            state.latest = HashMap::new();
            state.enqueued = HashMap::new();
        }
    }

    /// Items waiting.
    pub fn depth(&self) -> usize {
        self.lock().items.len()
    }

    /// Updates merged so far because the backlog was over its limit.
    pub fn coalesced(&self) -> u64 {
        self.lock().coalesced
    }

    /// Whether a backoff pause should end early: the queue is closed (what is queued is
    /// delivered now), or [`wake`](Self::wake) was called (a new version waits to be swapped in:
    /// it should not wait for its predecessor's backoff). Takes the wake.
    pub fn interrupts_pause(&self) -> bool {
        let mut state = self.lock();
        state.closed || std::mem::take(&mut state.woken)
    }
}

/// Feeds one subscription's events into a plugin's queue.
#[derive(Debug)]
pub struct SubscriptionSink {
    /// The plugin's queue.
    pub queue: Arc<EventQueue>,
    /// Which subscription this is.
    pub subscription: SubscriptionId,
}

impl EventSink for SubscriptionSink {
    fn push(&self, event: Event) {
        self.queue.push(self.subscription, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, rv: u64) -> Arc<CachedObject> {
        let value = json!({"metadata": {"namespace": "ns", "name": name, "resourceVersion": rv.to_string()}});
        Arc::new(CachedObject::from_value(value, true, &[]).unwrap())
    }

    fn update(name: &str, from: u64, to: u64) -> Event {
        Event::Update {
            old: obj(name, from),
            new: obj(name, to),
        }
    }

    /// Issue 16: a drained backlog gives its memory back (a thousand idle plugins each kept the
    /// capacity of their initial list).
    #[test]
    fn a_drained_backlog_gives_back_its_capacity() {
        let queue = EventQueue::new(100_000);
        for i in 0..10_000 {
            queue.push(
                0,
                Event::Add {
                    obj: obj(&format!("o{i}"), 1),
                    initial: true,
                },
            );
        }
        assert!(queue.lock().items.capacity() >= 10_000);
        let trims = crate::trim::requests_on_this_thread();
        assert_eq!(drain(&queue).len(), 10_000);
        assert_eq!(
            crate::trim::requests_on_this_thread(),
            trims + 1,
            "the freed backlog is given back to the OS"
        );
        {
            let state = queue.lock();
            assert!(
                state.items.capacity() <= 2 * KEPT_CAPACITY
                    && state.latest.capacity() <= 2 * KEPT_CAPACITY
                    && state.enqueued.capacity() <= 2 * KEPT_CAPACITY,
                "{} {} {}",
                state.items.capacity(),
                state.latest.capacity(),
                state.enqueued.capacity()
            );
        }
        // An unloaded plugin's empty queue keeps nothing.
        queue.shrink();
        let state = queue.lock();
        assert_eq!(
            (
                state.items.capacity(),
                state.latest.capacity(),
                state.enqueued.capacity()
            ),
            (0, 0, 0)
        );
        drop(state);
        queue.push(0, Event::Synced);
        queue.shrink();
        assert_eq!(queue.depth(), 1, "a queue with items is left alone");
    }

    fn drain(queue: &EventQueue) -> Vec<String> {
        let mut seen = Vec::new();
        while let Popped::Event {
            subscription,
            event,
        } = queue.pop()
        {
            seen.push(match &event {
                Event::Update { old, new } => {
                    format!(
                        "update {} {}->{}",
                        new.name(),
                        old.resource_version(),
                        new.resource_version()
                    )
                }
                Event::Synced => format!("synced {subscription}"),
                Event::Add { obj, .. } | Event::Delete { obj, .. } => {
                    format!("{} {} {}", event.kind(), obj.name(), obj.resource_version())
                }
            });
        }
        seen
    }

    #[test]
    fn keeps_every_event_in_order_under_the_limit() {
        let queue = EventQueue::new(100);
        queue.push(
            0,
            Event::Add {
                obj: obj("a", 1),
                initial: true,
            },
        );
        queue.push(0, Event::Synced);
        queue.push(0, update("a", 1, 2));
        queue.push(0, update("a", 2, 3));
        assert_eq!(
            drain(&queue),
            ["add a 1", "synced 0", "update a 1->2", "update a 2->3"]
        );
    }

    #[test]
    fn over_the_limit_merges_consecutive_updates_but_never_adds_or_deletes() {
        let queue = EventQueue::new(2);
        queue.push(0, update("a", 1, 2));
        queue.push(0, update("b", 1, 2));
        queue.push(0, update("a", 2, 3)); // merged into the first: first old, last new
        queue.push(
            0,
            Event::Delete {
                obj: obj("a", 3),
                final_state_unknown: false,
            },
        );
        queue.push(
            0,
            Event::Add {
                obj: obj("a", 4),
                initial: false,
            },
        );
        queue.push(0, update("a", 4, 5)); // a's latest is an add: not merged
        assert_eq!(queue.coalesced(), 1);
        assert_eq!(
            drain(&queue),
            [
                "update a 1->3",
                "update b 1->2",
                "delete a 3",
                "add a 4",
                "update a 4->5"
            ]
        );
    }

    #[test]
    fn resync_skips_objects_with_pending_events() {
        let queue = EventQueue::new(100);
        queue.push(0, update("a", 1, 2));
        assert_eq!(queue.resync(0, vec![obj("a", 2), obj("b", 7)]), 1);
        assert_eq!(drain(&queue), ["update a 1->2", "update b 7->7"]);
        assert_eq!(
            queue.resync(0, vec![obj("a", 2)]),
            1,
            "once delivered, a resyncs again"
        );
    }

    #[test]
    fn a_snapshot_replaces_one_subscriptions_events_and_keeps_the_others_in_order() {
        let queue = EventQueue::new(100);
        queue.push(0, update("a", 1, 2));
        queue.push(
            1,
            Event::Add {
                obj: obj("x", 1),
                initial: false,
            },
        );
        queue.push(0, update("b", 1, 2));
        queue.push(0, Event::Synced);
        assert_eq!(
            queue.replace_with_snapshot(0, vec![obj("a", 3), obj("c", 4)], true),
            3
        );
        assert_eq!(drain(&queue), ["add x 1", "add a 3", "add c 4", "synced 0"]);
        // The snapshot's adds are the objects' latest events: a later update merges only past the
        // limit, and a resync skips them.
        queue.push(0, update("a", 3, 5));
        assert_eq!(queue.resync(0, vec![obj("a", 5)]), 0);
        assert_eq!(drain(&queue), ["update a 3->5"]);
    }

    #[test]
    fn a_wake_ends_a_backoff_pause_once_and_the_close_for_good() {
        let queue = EventQueue::new(10);
        assert!(!queue.interrupts_pause());
        queue.wake();
        assert!(queue.interrupts_pause(), "the wake ends the pause");
        assert!(!queue.interrupts_pause(), "the wake was taken");
        queue.close();
        assert!(queue.interrupts_pause() && queue.interrupts_pause());
    }

    /// The worker is told of every change `pop` could see, after the queue's lock is released
    /// (the waker locks the queue here).
    #[test]
    fn the_waker_hears_of_items_wakes_and_the_close() {
        let queue = EventQueue::new(10);
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (ear, weak) = (heard.clone(), Arc::downgrade(&queue));
        queue.set_waker(move || {
            let depth = weak.upgrade().map_or(0, |queue| queue.depth());
            ear.lock().unwrap().push(depth);
        });
        queue.push(
            0,
            Event::Add {
                obj: obj("a", 1),
                initial: false,
            },
        );
        queue.push(0, update("a", 1, 2));
        queue.wake();
        assert_eq!(queue.resync(0, vec![obj("b", 1)]), 1);
        queue.close();
        assert_eq!(*heard.lock().unwrap(), [1, 2, 2, 3, 3]);
    }

    #[test]
    fn close_drains_then_reports_closed() {
        let queue = EventQueue::new(10);
        queue.push(0, update("a", 1, 2));
        queue.close();
        queue.push(0, update("a", 2, 3));
        assert!(matches!(queue.pop(), Popped::Event { .. }));
        assert!(matches!(queue.pop(), Popped::Closed));
    }
}
