//! [`EventQueue`]: one plugin's ordered backlog, fed by its informer subscriptions without ever
//! blocking them, drained by the plugin's worker.
//!
//! Order is arrival order. When the backlog passes the plugin's `maxQueuedEvents`, an update of
//! an object whose latest queued event is also an update is merged into it (first old, last new),
//! as client-go's DeltaFIFO would; adds and deletes are never merged or dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::cache::{CachedObject, ObjectKey};
use crate::informer::{Delta, DeltaSink};
use crate::metrics::QueueMetrics;
use crate::plugin::Event;

/// Which of the plugin's subscriptions an item came from (its position in the plugin's
/// `handles`).
pub type SourceId = usize;

/// One queued item.
#[derive(Debug, Clone)]
pub enum Item {
    /// An event for the plugin.
    Event {
        /// Its subscription.
        source: SourceId,
        /// The event.
        event: Event,
    },
    /// The subscription's initial list has been queued in full.
    Synced {
        /// Its subscription.
        source: SourceId,
    },
}

impl Item {
    /// Its subscription.
    pub fn source(&self) -> SourceId {
        match self {
            Item::Event { source, .. } | Item::Synced { source } => *source,
        }
    }
}

#[derive(Debug, Default)]
struct State {
    items: VecDeque<(u64, Item)>,
    next_seq: u64,
    /// The sequence number of each object's latest queued event.
    latest: HashMap<(SourceId, ObjectKey), u64>,
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
    ready: Condvar,
    max_queued: usize,
    metrics: QueueMetrics,
}

/// What [`EventQueue::pop`] found.
#[derive(Debug)]
pub enum Popped {
    /// The next item.
    Item(Item),
    /// Nothing arrived before the timeout.
    Timeout,
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
            ready: Condvar::new(),
            max_queued,
            metrics,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("event queue lock poisoned")
    }

    /// Appends `item` (or merges an update, see the module docs).
    pub fn push(&self, item: Item) {
        let mut state = self.lock();
        if state.closed {
            return;
        }
        if let Item::Event {
            source,
            event: Event::Update { new, .. },
        } = &item
            && state.items.len() >= self.max_queued
            && Self::merge_update(&mut state, *source, new)
        {
            self.metrics.coalesced();
            return;
        }
        Self::append(&mut state, item);
        self.metrics.added(state.items.len());
        drop(state);
        self.ready.notify_one();
    }

    fn append(state: &mut State, item: Item) {
        let seq = state.next_seq;
        state.next_seq += 1;
        if let Item::Event { source, event } = &item {
            state
                .latest
                .insert((*source, event.object().key().clone()), seq);
        }
        state.items.push_back((seq, item));
        state.enqueued.insert(seq, Instant::now());
    }

    /// Replaces what `source` has queued with `objects` as initial adds, then `Synced` if
    /// `synced` (a replay swap: the new version gets the current state, not the changes that led
    /// to it); other sources' items keep their order. Returns how many items were dropped.
    pub fn replay(&self, source: SourceId, objects: Vec<Arc<CachedObject>>, synced: bool) -> usize {
        let mut state = self.lock();
        if state.closed {
            return 0;
        }
        let before = state.items.len();
        let kept: Vec<Item> = std::mem::take(&mut state.items)
            .into_iter()
            .map(|(_, item)| item)
            .filter(|item| item.source() != source)
            .collect();
        let dropped = before - kept.len();
        state.latest.clear();
        state.enqueued.clear();
        let replayed = objects.into_iter().map(|obj| Item::Event {
            source,
            event: Event::Add { obj, initial: true },
        });
        for item in kept
            .into_iter()
            .chain(replayed)
            .chain(synced.then_some(Item::Synced { source }))
        {
            Self::append(&mut state, item);
        }
        self.metrics.depth(state.items.len());
        drop(state);
        self.ready.notify_one();
        dropped
    }

    /// Merges `new` into the object's latest queued event if that is an update.
    fn merge_update(state: &mut State, source: SourceId, new: &Arc<CachedObject>) -> bool {
        let Some(&seq) = state.latest.get(&(source, new.key().clone())) else {
            return false;
        };
        let first = state.items.front().map_or(0, |(s, _)| *s);
        let Some((
            _,
            Item::Event {
                event: Event::Update { new: queued, .. },
                ..
            },
        )) = state.items.get_mut((seq - first) as usize)
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
    /// takes `objects` under the informer's fan-out lock (see [`Informer::replay`]), so the
    /// snapshot is never ahead of what the informer has pushed here.
    ///
    /// [`Informer::replay`]: crate::informer::Informer::replay
    pub fn resync(&self, source: SourceId, objects: Vec<Arc<CachedObject>>) -> usize {
        let mut state = self.lock();
        if state.closed {
            return 0;
        }
        let mut queued = 0;
        for obj in objects {
            if state.latest.contains_key(&(source, obj.key().clone())) {
                continue;
            }
            // Nothing is queued for the object, so there is nothing to merge with: append.
            Self::append(
                &mut state,
                Item::Event {
                    source,
                    event: Event::Update {
                        old: obj.clone(),
                        new: obj,
                    },
                },
            );
            queued += 1;
        }
        drop(state);
        if queued > 0 {
            self.ready.notify_one();
        }
        queued
    }

    /// The next item, waiting up to `timeout` (forever when `None`).
    pub fn pop(&self, timeout: Option<Duration>) -> Popped {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut state = self.lock();
        loop {
            if let Some((seq, item)) = state.items.pop_front() {
                if let Item::Event { source, event } = &item {
                    let key = (*source, event.object().key().clone());
                    if state.latest.get(&key) == Some(&seq) {
                        state.latest.remove(&key);
                    }
                }
                if let Some(at) = state.enqueued.remove(&seq) {
                    self.metrics.taken(at.elapsed());
                }
                self.metrics.depth(state.items.len());
                return Popped::Item(item);
            }
            if state.closed {
                return Popped::Closed;
            }
            if std::mem::take(&mut state.woken) {
                return Popped::Woken;
            }
            state = match deadline {
                None => self.ready.wait(state).expect("event queue lock poisoned"),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Popped::Timeout;
                    }
                    self.ready
                        .wait_timeout(state, left)
                        .expect("event queue lock poisoned")
                        .0
                }
            };
        }
    }

    /// Stops accepting items; [`pop`](Self::pop) drains what is queued, then says `Closed`.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
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
        self.ready.notify_all();
        dropped
    }

    /// Wakes a waiting [`pop`](Self::pop) so the worker can look at its swap slot.
    pub fn wake(&self) {
        self.lock().woken = true;
        self.ready.notify_all();
    }

    /// Items waiting.
    pub fn depth(&self) -> usize {
        self.lock().items.len()
    }

    /// Updates merged so far because the backlog was over its limit.
    pub fn coalesced(&self) -> u64 {
        self.lock().coalesced
    }

    /// Waits until `sleep` has passed, the queue is closed, or [`wake`](Self::wake) is called (a
    /// new version waits to be swapped in: it should not wait for its predecessor's backoff);
    /// for backoff pauses.
    pub fn sleep(&self, sleep: Duration) {
        let deadline = Instant::now() + sleep;
        let mut state = self.lock();
        while !state.closed && !std::mem::take(&mut state.woken) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            state = self
                .ready
                .wait_timeout(state, left)
                .expect("event queue lock poisoned")
                .0;
        }
    }
}

/// Feeds one subscription's deltas into a plugin's queue.
#[derive(Debug)]
pub struct SourceSink {
    /// The plugin's queue.
    pub queue: Arc<EventQueue>,
    /// Which subscription this is.
    pub source: SourceId,
}

impl DeltaSink for SourceSink {
    fn push(&self, delta: Delta) {
        let source = self.source;
        let item = match delta {
            Delta::Add { obj, initial } => Item::Event {
                source,
                event: Event::Add { obj, initial },
            },
            Delta::Update { old, new } => Item::Event {
                source,
                event: Event::Update { old, new },
            },
            Delta::Delete {
                obj,
                final_state_unknown,
            } => Item::Event {
                source,
                event: Event::Delete {
                    obj,
                    final_state_unknown,
                },
            },
            Delta::Synced => Item::Synced { source },
        };
        self.queue.push(item);
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

    fn update(name: &str, from: u64, to: u64) -> Item {
        Item::Event {
            source: 0,
            event: Event::Update {
                old: obj(name, from),
                new: obj(name, to),
            },
        }
    }

    fn drain(queue: &EventQueue) -> Vec<String> {
        let mut seen = Vec::new();
        while let Popped::Item(item) = queue.pop(Some(Duration::ZERO)) {
            seen.push(match item {
                Item::Event {
                    event: Event::Update { old, new },
                    ..
                } => {
                    format!(
                        "update {} {}->{}",
                        new.name(),
                        old.resource_version(),
                        new.resource_version()
                    )
                }
                Item::Event { event, .. } => format!(
                    "{} {} {}",
                    event.kind(),
                    event.object().name(),
                    event.object().resource_version()
                ),
                Item::Synced { source } => format!("synced {source}"),
            });
        }
        seen
    }

    #[test]
    fn keeps_every_event_in_order_under_the_limit() {
        let queue = EventQueue::new(100);
        queue.push(Item::Event {
            source: 0,
            event: Event::Add {
                obj: obj("a", 1),
                initial: true,
            },
        });
        queue.push(Item::Synced { source: 0 });
        queue.push(update("a", 1, 2));
        queue.push(update("a", 2, 3));
        assert_eq!(
            drain(&queue),
            ["add a 1", "synced 0", "update a 1->2", "update a 2->3"]
        );
    }

    #[test]
    fn over_the_limit_merges_consecutive_updates_but_never_adds_or_deletes() {
        let queue = EventQueue::new(2);
        queue.push(update("a", 1, 2));
        queue.push(update("b", 1, 2));
        queue.push(update("a", 2, 3)); // merged into the first: first old, last new
        queue.push(Item::Event {
            source: 0,
            event: Event::Delete {
                obj: obj("a", 3),
                final_state_unknown: false,
            },
        });
        queue.push(Item::Event {
            source: 0,
            event: Event::Add {
                obj: obj("a", 4),
                initial: false,
            },
        });
        queue.push(update("a", 4, 5)); // a's latest is an add: not merged
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
        queue.push(update("a", 1, 2));
        assert_eq!(queue.resync(0, vec![obj("a", 2), obj("b", 7)]), 1);
        assert_eq!(drain(&queue), ["update a 1->2", "update b 7->7"]);
        assert_eq!(
            queue.resync(0, vec![obj("a", 2)]),
            1,
            "once delivered, a resyncs again"
        );
    }

    #[test]
    fn replay_replaces_one_sources_items_and_keeps_the_others_in_order() {
        let queue = EventQueue::new(100);
        queue.push(update("a", 1, 2));
        queue.push(Item::Event {
            source: 1,
            event: Event::Add {
                obj: obj("x", 1),
                initial: false,
            },
        });
        queue.push(update("b", 1, 2));
        queue.push(Item::Synced { source: 0 });
        assert_eq!(queue.replay(0, vec![obj("a", 3), obj("c", 4)], true), 3);
        assert_eq!(drain(&queue), ["add x 1", "add a 3", "add c 4", "synced 0"]);
        // The replayed adds are the objects' latest events: a later update merges only past the
        // limit, and a resync skips them.
        queue.push(update("a", 3, 5));
        assert_eq!(queue.resync(0, vec![obj("a", 5)]), 0);
        assert_eq!(drain(&queue), ["update a 3->5"]);
    }

    #[test]
    fn a_wake_ends_a_backoff_sleep_once() {
        let queue = EventQueue::new(10);
        let waker = queue.clone();
        let wake = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            waker.wake();
        });
        let started = Instant::now();
        queue.sleep(Duration::from_secs(30));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the wake did not end the sleep"
        );
        wake.join().unwrap();
        let started = Instant::now();
        queue.sleep(Duration::from_millis(100));
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "the wake was taken: the next pause is whole"
        );
    }

    #[test]
    fn close_drains_then_reports_closed() {
        let queue = EventQueue::new(10);
        queue.push(update("a", 1, 2));
        queue.close();
        queue.push(update("a", 2, 3));
        assert!(matches!(queue.pop(None), Popped::Item(_)));
        assert!(matches!(queue.pop(None), Popped::Closed));
    }
}
