//! [`PluginWorker`]: delivers one plugin's queued events to its instance, one at a time, in
//! order; backs off a failing plugin; queues resyncs; swaps in new versions between two events;
//! and between events runs the keys of its work queue ([`Work`]: reconciles and retried events),
//! which a swap leaves in place for the new version. While the plugin is idle for
//! `lifecycle.unloadAfter`, it unloads its instance (the next event creates it again), and it
//! hands a plugin's state (the `state` export) from one instance or version to the next.
//!
//! A worker is a task of the [`DeliveryPool`]: it holds a thread while it has something to
//! deliver and gives it back when its queue is empty (a timer brings it back for a due resync,
//! work-queue key, unload or the end of a backoff pause), so a thousand idle plugins hold no
//! thread.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::gate::Gate;
use super::pool::{DeliveryPool, SLICE, Task};
use super::queue::{EventQueue, Popped, SubscriptionId};
use super::reconcile::{Ran, ReconcileWiring, Work};
use super::status::PluginStatus;
use crate::cache::{Event, Gvk};
use crate::config::SwapMode;
use crate::error_chain;
use crate::informer::Lister;
use crate::metrics::{CallResult, PluginMetrics};
use crate::plugin::{Backoff, CallError, PluginInstance, SavedState, StateError, TrapKind};

/// What runs before a new worker delivers: stopping the version it replaces, which returns that
/// version's state.
pub(crate) type Before = Box<dyn FnOnce() -> Option<SavedState> + Send>;

/// One entry of the plugin's `handles`, as the worker knows it (its position is its
/// [`SubscriptionId`]).
#[derive(Debug, Clone)]
pub struct HandledKind {
    /// The kind it delivers.
    pub gvk: Gvk,
    /// Its informer's store, for resyncs and snapshot swaps.
    pub lister: Lister,
}

/// A new version waiting to replace the running one between two events.
pub(crate) struct PendingSwap {
    /// The new version, started and `init`-ed.
    pub instance: PluginInstance,
    /// Live or snapshot.
    pub mode: SwapMode,
    /// Told when the swap happened.
    pub done: std::sync::mpsc::Sender<Swapped>,
}

/// The worker's answer to a [`PendingSwap`], once the new version runs.
pub struct Swapped {
    /// How many cached objects the new version was handed (snapshot swaps).
    pub snapshot: Option<usize>,
    /// The old version's instance, for the receiver to drop off the event path: releasing its
    /// pool slot and, with its version's last handle, its compiled code took the worker 0.15 ms
    /// (p50) to 0.4 ms (p99) between two events (the swap benchmark).
    pub retired: PluginInstance,
}

/// Runs one plugin's deliveries on the threads of a [`DeliveryPool`] (wasmtime calls are
/// synchronous).
pub struct PluginWorker {
    name: Arc<str>,
    swap: Arc<Mutex<Option<PendingSwap>>>,
    queue: Arc<EventQueue>,
    /// Gets the instance when the worker ends (`None` if it panicked).
    finished: Receiver<Option<PluginInstance>>,
    /// Held here while the worker waits: the pool, its queue and its timers hold it only while
    /// it is queued or running, or weakly.
    _scheduled: Arc<Scheduled>,
}

/// Where a worker is: waiting for something to do, waiting for a pool thread, running, running
/// and told of something new meanwhile, or ended.
const IDLE: u8 = 0;
const QUEUED: u8 = 1;
const RUNNING: u8 = 2;
const NOTIFIED: u8 = 3;
const ENDED: u8 = 4;

/// A worker as the pool, its queue and its timers see it.
struct Scheduled {
    pool: DeliveryPool,
    schedule: AtomicU8,
    /// Taken when the worker ends.
    delivery: Mutex<Option<Delivery>>,
    finished: Mutex<Option<Sender<Option<PluginInstance>>>>,
    /// The earliest timer set and not fired yet.
    timer: Mutex<Option<Instant>>,
}

/// What one turn on a pool thread ended with.
enum Turn {
    /// Nothing to do until the queue has something new or, if set, until then.
    Idle(Option<Instant>),
    /// More to do, but other workers wait for a thread.
    Yield,
    /// The queue is closed and drained, or leadership was lost.
    Ended,
}

struct Delivery {
    name: Arc<str>,
    instance: PluginInstance,
    queue: Arc<EventQueue>,
    pool: DeliveryPool,
    handled: Vec<HandledKind>,
    status: Arc<PluginStatus>,
    swap: Arc<Mutex<Option<PendingSwap>>>,
    resync: Option<Duration>,
    next_resync: Option<Instant>,
    backoff: Backoff,
    /// The end of a backoff pause after a failed call.
    paused_until: Option<Instant>,
    events_in_a_row: usize,
    /// `lifecycle.unloadAfter`, if on.
    unload_after: Option<Duration>,
    /// When the last call ended (or the worker started).
    idle_since: Instant,
    /// The instance's activations already counted.
    activations_seen: u64,
    /// Whether the instance was unloaded for being idle (and not loaded again since).
    unloaded: bool,
    unsynced: Vec<bool>,
    metrics: PluginMetrics,
    /// The running version's dropped log bytes already counted.
    log_dropped_seen: u64,
    /// Closed when this replica's leadership term ends.
    gate: Gate,
    /// Keys to reconcile and failed events to deliver again.
    work: Work,
}

/// How many events the worker delivers in a row while a key of its work queue is ready: events
/// only queue keys, so a burst of changes to one object is folded into one reconcile.
const EVENTS_PER_KEY: usize = 1024;

impl PluginWorker {
    /// Starts delivering from `queue` to `instance` on `pool`'s threads, after running `before`
    /// (if any) on a thread of its own: stopping the version this one replaces, whose state (if
    /// it keeps one) `instance` restores.
    #[expect(
        clippy::too_many_arguments,
        reason = "each argument is a distinct part of the worker; a struct would only rename them"
    )]
    pub fn start(
        instance: PluginInstance,
        queue: Arc<EventQueue>,
        handled: Vec<HandledKind>,
        status: Arc<PluginStatus>,
        resync: Option<Duration>,
        unload_after: Option<Duration>,
        before: Option<Before>,
        metrics: PluginMetrics,
        gate: Gate,
        reconcile: ReconcileWiring,
        pool: &DeliveryPool,
    ) -> Self {
        let name: Arc<str> = instance.plugin().name().into();
        let kinds = handled.iter().map(|h| h.gvk.clone()).collect();
        let work = Work::new(
            reconcile,
            kinds,
            status.work_queue.clone(),
            metrics.queue.clone(),
        );
        let swap = Arc::new(Mutex::new(None));
        let unsynced = vec![true; handled.len()];
        let delivery = Delivery {
            name: name.clone(),
            instance,
            queue: queue.clone(),
            pool: pool.clone(),
            handled,
            status,
            swap: swap.clone(),
            resync,
            next_resync: resync.map(|period| Instant::now() + period),
            backoff: Backoff::default(),
            paused_until: None,
            events_in_a_row: 0,
            unload_after,
            idle_since: Instant::now(),
            activations_seen: 0,
            unloaded: false,
            unsynced,
            metrics,
            log_dropped_seen: 0,
            gate,
            work,
        };
        let (finished_tx, finished) = std::sync::mpsc::channel();
        // With `before`, the worker counts as running until `before` is done: what the queue
        // says meanwhile is seen by the first turn after it.
        let scheduled = Arc::new(Scheduled {
            pool: pool.clone(),
            schedule: AtomicU8::new(if before.is_some() { RUNNING } else { IDLE }),
            delivery: Mutex::new(Some(delivery)),
            finished: Mutex::new(Some(finished_tx)),
            timer: Mutex::new(None),
        });
        let waker = Arc::downgrade(&scheduled);
        queue.set_waker(move || {
            if let Some(scheduled) = waker.upgrade() {
                scheduled.notify();
            }
        });
        match before {
            Some(before) => {
                let (scheduled, plugin) = (scheduled.clone(), name.clone());
                std::thread::Builder::new()
                    .name(format!("plugin-{name}-handover"))
                    .spawn(move || {
                        // A panic here must not leave the worker "running" forever.
                        let state = std::panic::catch_unwind(AssertUnwindSafe(before))
                            .unwrap_or_else(|_| {
                                tracing::error!(plugin.id = %plugin, "stopping the previous version panicked; this version starts without its state");
                                None
                            });
                        if let Some(state) = state
                            && let Some(delivery) = scheduled.lock().as_mut()
                        {
                            delivery.restore(state);
                        }
                        scheduled.requeue();
                    })
                    .expect("spawn a plugin handover thread");
            }
            None => scheduled.notify(),
        }
        Self {
            name,
            swap,
            queue,
            finished,
            _scheduled: scheduled,
        }
    }

    /// Hands a started new version to the worker, which swaps it in before the next event and
    /// signals `done` (immediately if idle), handing back the old instance. The runtime's reload
    /// task offers one swap at a time and awaits it, so the slot is empty here: no pending swap is
    /// ever overwritten.
    pub(crate) fn swap(
        &self,
        instance: PluginInstance,
        mode: SwapMode,
    ) -> std::sync::mpsc::Receiver<Swapped> {
        let (done, swapped) = std::sync::mpsc::channel();
        let overwritten = self
            .swap
            .lock()
            .expect("swap slot lock poisoned")
            .replace(PendingSwap {
                instance,
                mode,
                done,
            });
        debug_assert!(
            overwritten.is_none(),
            "a swap was offered while another was pending"
        );
        self.queue.wake();
        swapped
    }

    /// Closes the queue and waits up to `timeout` for what is queued to be delivered; past it,
    /// what is left is dropped (and counted in the log), and the call under way finishes.
    /// Returns the instance (`None` if the worker panicked).
    pub fn stop(self, timeout: Duration) -> Option<PluginInstance> {
        self.queue.close();
        match self.finished.recv_timeout(timeout) {
            Ok(instance) => instance,
            Err(_) => {
                let dropped = self.queue.abandon();
                tracing::warn!(plugin.id = %self.name, queue.dropped = dropped, "plugin queue not drained before the shutdown deadline");
                self.finished.recv().ok().flatten()
            }
        }
    }
}

impl Scheduled {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Delivery>> {
        self.delivery.lock().expect("plugin delivery lock poisoned")
    }

    /// Something new for the worker: queue it on the pool unless it is queued or running (a
    /// running worker takes another turn).
    fn notify(self: &Arc<Self>) {
        let mut now = self.schedule.load(Ordering::SeqCst);
        loop {
            let next = match now {
                IDLE => QUEUED,
                RUNNING => NOTIFIED,
                _ => return,
            };
            match self
                .schedule
                .compare_exchange(now, next, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {
                    if next == QUEUED {
                        self.pool.submit(self.clone());
                    }
                    return;
                }
                Err(actual) => now = actual,
            }
        }
    }

    /// Queues the worker on the pool again, from running (or its handover).
    fn requeue(self: &Arc<Self>) {
        self.schedule.store(QUEUED, Ordering::SeqCst);
        self.pool.submit(self.clone());
    }

    /// Sets a timer for `at` unless one at or before it is set.
    fn wake_at(self: &Arc<Self>, at: Instant) {
        let mut timer = self.timer.lock().expect("plugin timer lock poisoned");
        if timer.is_some_and(|set| set <= at) {
            return;
        }
        *timer = Some(at);
        drop(timer);
        let this: Arc<dyn Task> = self.clone();
        self.pool.wake_at(at, Arc::downgrade(&this));
    }

    fn end(&self, panicked: bool) {
        self.schedule.store(ENDED, Ordering::SeqCst);
        let delivery = self.lock().take();
        let instance = delivery
            .filter(|_| !panicked)
            .map(|delivery| delivery.instance);
        if let Some(finished) = self.finished.lock().expect("finished lock").take() {
            let _ = finished.send(instance);
        }
    }
}

impl Task for Scheduled {
    fn run(self: Arc<Self>) {
        self.schedule.store(RUNNING, Ordering::SeqCst);
        let turn = {
            let mut delivery = self.lock();
            match delivery.as_mut() {
                Some(delivery) => {
                    std::panic::catch_unwind(AssertUnwindSafe(|| delivery.turn())).ok()
                }
                None => Some(Turn::Ended),
            }
        };
        match turn {
            None => {
                tracing::error!("plugin worker panicked; the plugin stops");
                self.end(true);
            }
            Some(Turn::Ended) => self.end(false),
            Some(Turn::Yield) => self.requeue(),
            Some(Turn::Idle(wake)) => {
                if let Some(at) = wake {
                    self.wake_at(at);
                }
                if self
                    .schedule
                    .compare_exchange(RUNNING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                    .is_err()
                {
                    // Told of something new during the turn.
                    self.requeue();
                }
            }
        }
    }

    fn timer(self: Arc<Self>, at: Instant) {
        let mut timer = self.timer.lock().expect("plugin timer lock poisoned");
        if *timer != Some(at) {
            // A timer since replaced by an earlier one, which woke the worker already.
            return;
        }
        *timer = None;
        drop(timer);
        self.notify();
    }
}

impl Delivery {
    /// Delivers until there is nothing to do now, the queue is closed and drained, or [`SLICE`]
    /// has passed while other workers wait for a thread.
    fn turn(&mut self) -> Turn {
        let _span = tracing::info_span!("plugin", plugin.id = %self.name).entered();
        let started = Instant::now();
        loop {
            if let Some(until) = self.paused_until {
                if Instant::now() < until && !self.queue.interrupts_pause() {
                    return Turn::Idle(Some(until));
                }
                self.paused_until = None;
            }
            // A swap happens here, between two events (a pending swap wakes the worker).
            if self.take_swap() {
                self.backoff = Backoff::default();
            }
            if self.events_in_a_row >= EVENTS_PER_KEY && self.work.has_ready() {
                if !self.run_work() {
                    return self.ended();
                }
                self.events_in_a_row = 0;
                continue;
            }
            match self.queue.pop() {
                Popped::Closed => return self.ended(),
                Popped::Woken => {}
                Popped::Empty => {
                    let resync_in = self
                        .next_resync
                        .map(|at| at.saturating_duration_since(Instant::now()));
                    let work_in = self.work.next_in();
                    let wait = [resync_in, work_in, self.unload_in(work_in)]
                        .into_iter()
                        .flatten()
                        .min();
                    match wait {
                        None => return Turn::Idle(None),
                        Some(wait) if !wait.is_zero() => {
                            return Turn::Idle(Some(Instant::now() + wait));
                        }
                        // Something is due now.
                        Some(_) => {}
                    }
                    self.events_in_a_row = 0;
                    if let (Some(period), Some(at)) = (self.resync, self.next_resync.as_mut())
                        && Instant::now() >= *at
                    {
                        *at = Instant::now() + period;
                        self.queue_resync();
                    }
                    if self.work.has_ready() && !self.run_work() {
                        return self.ended();
                    }
                    let work_in = self.work.next_in();
                    if self.unload_in(work_in) == Some(Duration::ZERO) {
                        self.unload();
                    }
                }
                Popped::Event {
                    subscription,
                    event,
                } => {
                    self.events_in_a_row += 1;
                    if !self.deliver(subscription, event) {
                        return self.ended();
                    }
                    if started.elapsed() >= SLICE && self.pool.has_waiting() {
                        return Turn::Yield;
                    }
                }
            }
        }
    }

    fn ended(&self) -> Turn {
        tracing::info!("plugin worker stopped");
        Turn::Ended
    }

    /// Delivers one event; returns false if leadership was lost (the worker stops).
    fn deliver(&mut self, subscription: SubscriptionId, event: Event) -> bool {
        let Some(obj) = event.object().cloned() else {
            // `Synced`: no handler is called.
            self.mark_synced(subscription);
            return true;
        };
        if !self.gate.is_open() {
            tracing::info!("leadership lost: plugin worker stops calling handlers");
            return false;
        }
        let reconciles = self.instance.reconciles();
        if self.work.is_related(&self.handled, subscription) {
            // `reconcile.owns`/`watches`: only keys, no handler.
            self.work
                .on_event(&self.handled, subscription, &obj, reconciles);
            return true;
        }
        let gvk = &self.handled[subscription].gvk;
        let started = Instant::now();
        let work = self.metrics.queue.work();
        let result = self.instance.handle(gvk, &event);
        drop(work);
        self.metrics
            .handler_call(event.kind(), call_result(&result), started.elapsed());
        let dropped = self.instance.dropped_log_bytes();
        self.metrics.log_dropped(
            dropped.saturating_sub(std::mem::replace(&mut self.log_dropped_seen, dropped)),
        );
        match &result {
            Ok(()) => {
                self.backoff.succeeded();
                self.work.delivered(subscription, obj.key());
                tracing::trace!(object.ref = %obj.key(), event.kind = event.kind(), event.durationMs = started.elapsed().as_secs_f64() * 1e3, "delivered");
            }
            Err(error) => {
                let pause = self.backoff.failed();
                log_failure(
                    gvk,
                    obj.key(),
                    event.kind(),
                    error,
                    self.backoff.consecutive_failures(),
                    pause,
                );
                if error.wants_retry(false) && !matches!(event, Event::Delete { .. }) {
                    self.work.retry_event(subscription, obj.key().clone());
                }
                self.paused_until = Some(Instant::now() + pause);
            }
        }
        self.status.called(result.err().map(|e| {
            format!(
                "{} {} {}: {}",
                event.kind(),
                gvk.kind,
                obj.key(),
                error_chain(&e)
            )
        }));
        self.work
            .on_event(&self.handled, subscription, &obj, reconciles);
        self.after_call();
        true
    }

    /// Runs one ready key of the work queue, unless leadership was lost (then returns false: the
    /// worker stops).
    fn run_work(&mut self) -> bool {
        if !self.gate.is_open() {
            tracing::info!("leadership lost: plugin worker stops calling handlers");
            return false;
        }
        let Some(Ran {
            what,
            gvk,
            key,
            attempt,
            result,
            elapsed,
        }) = self.work.run_one(&mut self.instance, &self.handled)
        else {
            return true;
        };
        self.after_call();
        self.metrics
            .handler_call(what, call_result(&result), elapsed);
        self.status.called(result.err().map(|e| {
            format!(
                "{what} {} {key} (attempt {attempt}): {}",
                gvk.kind,
                error_chain(&e)
            )
        }));
        true
    }

    /// Swaps in the pending new version, if any; returns whether it did. A snapshot swap
    /// replaces what is queued with the current cache. A new version starts with a clean slate: the
    /// caller resets the backoff its predecessor's failures built up.
    fn take_swap(&mut self) -> bool {
        let pending = self.swap.lock().expect("swap slot lock poisoned").take();
        let Some(PendingSwap {
            instance,
            mode,
            done,
        }) = pending
        else {
            return false;
        };
        let digest = instance.plugin().digest().to_owned();
        let state = self.instance.take_state();
        let old = std::mem::replace(&mut self.instance, instance);
        self.activations_seen = 0;
        match state {
            Ok(Some(state)) => self.restore(state),
            Ok(None) => {}
            Err(error) => self.state_failed(error),
        }
        // The new version is loaded, whether or not the old one was.
        self.after_call();
        let snapshot = (mode == SwapMode::Snapshot).then(|| self.queue_snapshot());
        self.status.swapped(&digest);
        self.metrics
            .running(&digest, self.instance.plugin().contract());
        self.status.contract(self.instance.plugin().contract());
        self.metrics.swapped(true);
        self.log_dropped_seen = 0;
        tracing::info!(
            plugin.version = %&digest[..12], plugin.previous = %&old.plugin().digest()[..12], snapshot,
            "plugin version swapped in"
        );
        // Dropped here only if the reload gave up waiting (its receiver is gone).
        let _ = done.send(Swapped {
            snapshot,
            retired: old,
        });
        true
    }

    /// Starts the instance over from `state` (its predecessor's): restore, then `init`.
    fn restore(&mut self, state: SavedState) {
        let bytes = state.bytes.len();
        match self.instance.restore(state) {
            Ok(()) => tracing::info!(state.bytes = bytes, "plugin state restored"),
            Err(error) => {
                tracing::warn!(error = %error_chain(&error), "plugin could not start after its state was restored; the next event tries init again")
            }
        }
        self.after_call();
    }

    /// How long until the idle instance is unloaded (`Some(ZERO)`: now); `None` while it is not
    /// loaded, or unloading is off, or a key of its work queue is due (in `work_in`) within
    /// `unloadAfter`.
    fn unload_in(&self, work_in: Option<Duration>) -> Option<Duration> {
        let after = self.unload_after?;
        if !self.instance.is_loaded() || work_in.is_some_and(|next| next < after) {
            return None;
        }
        Some((self.idle_since + after).saturating_duration_since(Instant::now()))
    }

    /// Unloads the idle instance, keeping its state; a refused state keeps it loaded until it
    /// has been idle another `unloadAfter`.
    fn unload(&mut self) {
        let idle = self.idle_since.elapsed();
        match self.instance.unload() {
            Ok(()) => {
                let kept = self.instance.saved_state_bytes();
                tracing::info!(
                    idleMs = idle.as_millis() as u64,
                    state.bytes = kept.unwrap_or(0),
                    "plugin unloaded while idle"
                );
                self.status.instance(false, kept);
                self.metrics.loaded(false);
                self.unloaded = true;
                self.queue.shrink();
            }
            Err(error) => {
                // Too large a state keeps the instance; a trap lost it (and its state).
                self.state_failed(error);
                self.idle_since = Instant::now();
            }
        }
    }

    /// After a call: the idle clock restarts; an instance created again is counted; a failed
    /// restore is reported.
    fn after_call(&mut self) {
        self.idle_since = Instant::now();
        let activations = self.instance.activations();
        if activations > self.activations_seen {
            let new = activations - self.activations_seen;
            self.activations_seen = activations;
            self.status.activated(new);
            self.metrics.activated(new);
            tracing::debug!(activations, "plugin loaded again for an event");
        }
        if self.unloaded && self.instance.is_loaded() {
            self.unloaded = false;
            self.status.instance(true, None);
            self.metrics.loaded(true);
        }
        if let Some(error) = self.instance.take_state_error() {
            self.state_failed(error);
        }
    }

    /// Reports a state that could not be saved or restored (the plugin keeps running).
    fn state_failed(&self, error: StateError) {
        tracing::warn!(error = %error, "plugin state not kept");
        self.status.state_failed(error.to_string());
    }

    /// Replaces each subscription's queued events with a snapshot of its informer's store as
    /// initial adds; returns how many objects that is.
    fn queue_snapshot(&self) -> usize {
        let mut handed = 0;
        for (subscription, handled) in self.handled.iter().enumerate() {
            handled.lister.informer().with_snapshot(|objects, synced| {
                handed += objects.len();
                let dropped = self.queue.replace_with_snapshot(subscription, objects, synced);
                tracing::debug!(resource = %handled.gvk, queue.dropped = dropped, "queued events replaced by the cache");
            });
        }
        handed
    }

    fn mark_synced(&mut self, subscription: SubscriptionId) {
        if let Some(flag) = self.unsynced.get_mut(subscription) {
            *flag = false;
        }
        if !self.status.is_synced() && self.unsynced.iter().all(|u| !u) {
            self.status.set_synced();
            tracing::info!(
                calls = self.status.calls(),
                "plugin synced: initial list delivered"
            );
        }
    }

    /// Queues a resync: its updates of handled objects queue their keys, as any event does.
    fn queue_resync(&self) {
        resync(&self.queue, &self.handled);
    }
}

/// Queues a resync of every subscription into `queue`. Each subscription's snapshot is taken and
/// queued under its informer's fan-out lock, as a snapshot swap's is: no live event falls between
/// the snapshot and the queued updates, so a resync never follows a real change with the state
/// before it.
fn resync(queue: &EventQueue, handled: &[HandledKind]) {
    for (subscription, handled) in handled.iter().enumerate() {
        let mut queued = 0;
        handled
            .lister
            .informer()
            .with_snapshot(|objects, _synced| queued = queue.resync(subscription, objects));
        tracing::debug!(resource = %handled.gvk, queued, "resync queued");
    }
}

fn call_result(result: &Result<(), CallError>) -> CallResult {
    match result {
        Ok(()) => CallResult::Ok,
        Err(error) => match error.trap_kind() {
            Some(TrapKind::Deadline) => CallResult::Deadline,
            Some(TrapKind::MemoryLimit) => CallResult::Memory,
            Some(_) => CallResult::Trap,
            None => CallResult::Error,
        },
    }
}

fn log_failure(
    gvk: &Gvk,
    key: &crate::cache::ObjectKey,
    kind: &str,
    error: &CallError,
    failures: u32,
    pause: Duration,
) {
    let cause = error_chain(error);
    match error.trap_kind() {
        Some(trap) => tracing::error!(
            object.ref = %key, object.kind = %gvk.kind, event.kind = kind, trap = %trap, consecutiveFailures = failures,
            backoffMs = pause.as_millis() as u64, error = %cause, "plugin trapped; its instance will be recreated"
        ),
        None => tracing::warn!(
            object.ref = %key, object.kind = %gvk.kind, event.kind = kind, consecutiveFailures = failures,
            backoffMs = pause.as_millis() as u64, error = %cause, "plugin handler failed"
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::{Receiver, Sender, channel};

    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event as WatchEvent};
    use serde_json::{Value, json};

    use super::*;
    use crate::cache::Event;
    use crate::dispatch::SubscriptionSink;
    use crate::informer::{EventSink, Informer, InformerKey, StoreOptions};

    fn pod(rv: u64) -> Value {
        json!({"metadata": {"namespace": "ns", "name": "a", "uid": "uid-a", "resourceVersion": rv.to_string()}})
    }

    /// A subscriber that, at the first update, says so and holds the informer's fan-out (the
    /// store is updated, the subscribers after it have not been told) until it is opened.
    struct Gate {
        entered: Mutex<Option<Sender<()>>>,
        open: Mutex<Receiver<()>>,
    }

    impl EventSink for Gate {
        fn push(&self, event: Event) {
            if matches!(event, Event::Update { .. })
                && let Some(entered) = self.entered.lock().unwrap().take()
            {
                entered.send(()).unwrap();
                self.open.lock().unwrap().recv().unwrap();
            }
        }
    }

    fn drain(queue: &EventQueue) -> Vec<String> {
        let mut seen = Vec::new();
        while let Popped::Event { event, .. } = queue.pop() {
            seen.push(match &event {
                Event::Update { old, new } => {
                    format!(
                        "update {}->{}",
                        old.resource_version(),
                        new.resource_version()
                    )
                }
                Event::Add { obj, .. } | Event::Delete { obj, .. } => {
                    format!("{} {}", event.kind(), obj.resource_version())
                }
                Event::Synced => "synced".to_owned(),
            });
        }
        seen
    }

    /// Issue 18, item 2. The informer has stored a@2 and is fanning out its update when a resync
    /// runs: the resync must not queue a@2 ahead of the update from a@1 (the plugin would see
    /// a@2, then a change from a@1 to a@2).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resync_during_a_fan_out_waits_for_it_and_never_precedes_the_real_change() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<watcher::Result<WatchEvent<Value>>>();
        let events =
            futures::stream::unfold(rx, |mut rx| async { rx.recv().await.map(|e| (e, rx)) })
                .boxed();
        let key = InformerKey::new(
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            true,
        );
        let informer = Informer::from_stream(
            key,
            StoreOptions::default(),
            crate::informer::watch::value_stream(events),
        )
        .unwrap();
        let (entered_tx, entered) = channel();
        let (open, open_rx) = channel();
        let _gate = informer.subscribe(Arc::new(Gate {
            entered: Mutex::new(Some(entered_tx)),
            open: Mutex::new(open_rx),
        }));
        let queue = EventQueue::new(100);
        let _subscription = informer.subscribe(Arc::new(SubscriptionSink {
            queue: queue.clone(),
            subscription: 0,
        }));
        for event in [
            WatchEvent::Init,
            WatchEvent::InitApply(pod(1)),
            WatchEvent::InitDone,
        ] {
            tx.send(Ok(event)).unwrap();
        }
        informer.wait_synced().await;
        assert_eq!(drain(&queue), ["add 1", "synced"]);

        tx.send(Ok(WatchEvent::Apply(pod(2)))).unwrap();
        entered.recv().unwrap();
        let handled = vec![HandledKind {
            gvk: informer.key().gvk(),
            lister: informer.lister(),
        }];
        let (done_tx, done) = channel();
        let resyncing = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                resync(&queue, &handled);
                done_tx.send(()).unwrap();
            })
        };
        // A resync that does not wait for the fan-out finishes at once; one that waits cannot
        // finish before the gate opens. Either way the gate then opens: this bound decides
        // nothing about the outcome, it only lets a broken resync finish first.
        let finished_first = done.recv_timeout(Duration::from_millis(500)).is_ok();
        open.send(()).unwrap();
        resyncing.join().unwrap();
        assert_eq!(
            drain(&queue),
            ["update 1->2"],
            "the resync finished during the fan-out: {finished_first}"
        );
    }

    /// `guest` loaded as plugin `name`, with the engine it needs (kept for its epoch ticker).
    fn load(name: &str, guest: &str) -> (crate::plugin::PluginEngine, crate::plugin::LoadedPlugin) {
        let engine = crate::plugin::PluginEngine::new(None).unwrap();
        let loaded =
            crate::plugin::LoadedPlugin::load(&engine, name, std::path::Path::new(guest)).unwrap();
        (engine, loaded)
    }

    /// A Pod informer whose watch never sends anything, and the plugin's one handled kind on it.
    fn quiet_pod_informer() -> (Arc<Informer>, Vec<HandledKind>) {
        let key = InformerKey::new(
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            true,
        );
        let informer = Informer::from_stream(
            key,
            StoreOptions::default(),
            futures::stream::pending().boxed(),
        )
        .unwrap();
        let handled = vec![HandledKind {
            gvk: informer.key().gvk(),
            lister: informer.lister(),
        }];
        (informer, handled)
    }

    /// A worker for `instance` with no predecessor, no idle unloading and no work queue.
    fn plain_worker(
        instance: PluginInstance,
        queue: Arc<EventQueue>,
        handled: Vec<HandledKind>,
        name: &str,
        pool: &DeliveryPool,
    ) -> PluginWorker {
        PluginWorker::start(
            instance,
            queue,
            handled,
            Arc::default(),
            None,
            None,
            None,
            crate::metrics::Metrics::new().plugin(name),
            crate::dispatch::Gate::always(),
            ReconcileWiring::default(),
            pool,
        )
    }

    /// Issue 16: with `unloadAfter` shorter than the gaps between events, the worker unloads
    /// the idle plugin again and again while events keep arriving (some during an unload, some
    /// just after); each is delivered once, in order, and the plugin's state (a count) survives
    /// every unload.
    #[test]
    fn events_around_idle_unloads_are_delivered_once_in_order_with_the_state_kept() {
        let (_engine, loaded) = load("counter", wasmformer_tests::guests::COUNTER);
        let lines = Arc::new(Mutex::new(Vec::<Value>::new()));
        let seen = lines.clone();
        let observer = Arc::new(move |line: &crate::plugin::LogLine| {
            if let Ok(line) = serde_json::from_str::<Value>(&line.message)
                && line["count"].is_u64()
            {
                seen.lock().unwrap().push(line);
            }
        });
        let instance = PluginInstance::start(
            loaded,
            crate::plugin::Limits::default(),
            crate::plugin::Grants::none(),
            &json!({}),
            Some(observer),
        )
        .unwrap();
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let _entered = runtime.enter();
        let (_informer, handled) = quiet_pod_informer();
        let queue = EventQueue::new(1000);
        let status = Arc::new(PluginStatus::default());
        let worker = PluginWorker::start(
            instance,
            queue.clone(),
            handled,
            status.clone(),
            None,
            Some(Duration::from_millis(3)),
            None,
            crate::metrics::Metrics::new().plugin("counter"),
            crate::dispatch::Gate::always(),
            ReconcileWiring::default(),
            &DeliveryPool::shared(),
        );
        const EVENTS: u64 = 150;
        for rv in 1..=EVENTS {
            let obj = Arc::new(crate::cache::CachedObject::from_value(pod(rv), true, &[]).unwrap());
            queue.push(
                0,
                Event::Add {
                    obj,
                    initial: false,
                },
            );
            // 0 to 6 ms: around the 3 ms after which the idle plugin is unloaded.
            std::thread::sleep(Duration::from_micros((rv * 977) % 6000));
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while lines.lock().unwrap().len() < EVENTS as usize && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let instance = worker.stop(Duration::from_secs(5)).unwrap();
        let report = status.report("counter", 0);
        let delivered: Vec<(u64, String)> = lines
            .lock()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["count"].as_u64().unwrap(),
                    e["resourceVersion"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected: Vec<(u64, String)> = (1..=EVENTS).map(|rv| (rv, rv.to_string())).collect();
        assert_eq!(delivered, expected);
        assert!(
            instance.activations() >= 10,
            "the plugin was unloaded and loaded again: {} activations",
            instance.activations()
        );
        assert_eq!(report.activations, instance.activations());
    }

    /// Issue 17 (item 9d): a swap's answer hands back the old version's instance, so the
    /// reload can drop it (its pool slot, and with it the version's code) off the event path;
    /// the worker goes on with the new version.
    #[test]
    fn a_swap_hands_the_old_instance_back_to_be_dropped_elsewhere() {
        let (_engine, old) = load("counter", wasmformer_tests::guests::COUNTER);
        let (_engine_v2, new) = load("counter", wasmformer_tests::guests::COUNTER_V2);
        let (old_version, new_version) = (old.digest().to_owned(), new.digest().to_owned());
        let start = |loaded| {
            PluginInstance::start(
                loaded,
                crate::plugin::Limits::default(),
                crate::plugin::Grants::none(),
                &json!({}),
                None,
            )
            .unwrap()
        };
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let _entered = runtime.enter();
        let (_informer, handled) = quiet_pod_informer();
        let worker = plain_worker(
            start(old),
            EventQueue::new(10),
            handled,
            "counter",
            &DeliveryPool::shared(),
        );
        let swapped = worker
            .swap(start(new), SwapMode::Live)
            .recv_timeout(Duration::from_secs(10))
            .expect("the idle worker swaps at once");
        assert_eq!(swapped.snapshot, None);
        assert_eq!(swapped.retired.plugin().digest(), old_version);
        drop(swapped);
        let running = worker.stop(Duration::from_secs(5)).unwrap();
        assert_eq!(running.plugin().digest(), new_version);
    }

    /// Issue 16: workers hold a pool thread only while they have something to deliver. Two
    /// hundred plugins on a pool of four threads each get their events, in order; the pool never
    /// has more than four threads; once they are idle (still running, not stopped) they hold
    /// none.
    #[test]
    fn many_workers_share_a_bounded_pool_and_idle_ones_hold_no_thread() {
        const PLUGINS: usize = 200;
        const EVENTS: u64 = 5;
        let (_engine, loaded) = load("counter", wasmformer_tests::guests::COUNTER);
        let pool = DeliveryPool::with_keep_alive(4, Duration::from_millis(200));
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let _entered = runtime.enter();
        let (_informer, handled) = quiet_pod_informer();
        let counts: Vec<Arc<Mutex<Vec<u64>>>> = (0..PLUGINS).map(|_| Arc::default()).collect();
        let mut queues = Vec::new();
        let workers: Vec<PluginWorker> = counts
            .iter()
            .map(|seen| {
                let seen = seen.clone();
                let observer = Arc::new(move |line: &crate::plugin::LogLine| {
                    if let Ok(line) = serde_json::from_str::<Value>(&line.message)
                        && let Some(count) = line["count"].as_u64()
                    {
                        seen.lock().unwrap().push(count);
                    }
                });
                let instance = PluginInstance::start(
                    loaded.clone(),
                    crate::plugin::Limits::default(),
                    crate::plugin::Grants::none(),
                    &json!({}),
                    Some(observer),
                )
                .unwrap();
                let queue = EventQueue::new(100);
                queues.push(queue.clone());
                plain_worker(instance, queue, handled.clone(), "counter", &pool)
            })
            .collect();
        let mut most_threads = 0;
        for rv in 1..=EVENTS {
            for queue in &queues {
                let obj =
                    Arc::new(crate::cache::CachedObject::from_value(pod(rv), true, &[]).unwrap());
                queue.push(
                    0,
                    Event::Add {
                        obj,
                        initial: false,
                    },
                );
                most_threads = most_threads.max(pool.threads());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        while counts
            .iter()
            .any(|c| c.lock().unwrap().len() < EVENTS as usize)
        {
            assert!(Instant::now() < deadline, "not every event was delivered");
            most_threads = most_threads.max(pool.threads());
            std::thread::sleep(Duration::from_millis(1));
        }
        for seen in &counts {
            assert_eq!(*seen.lock().unwrap(), (1..=EVENTS).collect::<Vec<_>>());
        }
        assert!(
            (1..=4).contains(&most_threads),
            "pool threads: {most_threads}"
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while pool.threads() > 0 {
            assert!(
                Instant::now() < deadline,
                "idle workers still hold {} threads",
                pool.threads()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        for worker in workers {
            assert!(worker.stop(Duration::from_secs(5)).is_some());
        }
    }

    /// Writes formatted log records into a shared buffer.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Issue 18, item 12: the warning that a stopped plugin's queue was not drained names it.
    #[tokio::test]
    async fn the_undrained_queue_warning_names_its_plugin() {
        let (_engine, loaded) = load("slow-rec", wasmformer_tests::guests::RECORDER);
        let limits = crate::plugin::Limits {
            deadline: Duration::from_secs(10),
            ..Default::default()
        };
        let instance = PluginInstance::start(
            loaded,
            limits,
            crate::plugin::Grants::none(),
            &json!({"sleepMs": 300}),
            None,
        )
        .unwrap();
        let (_informer, handled) = quiet_pod_informer();
        let queue = EventQueue::new(100);
        for rv in 1..=5 {
            let obj = Arc::new(crate::cache::CachedObject::from_value(pod(rv), true, &[]).unwrap());
            queue.push(
                0,
                Event::Add {
                    obj,
                    initial: false,
                },
            );
        }
        let worker = plain_worker(
            instance,
            queue,
            handled,
            "slow-rec",
            &DeliveryPool::shared(),
        );

        // Five 300 ms calls cannot be delivered within 50 ms.
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            worker.stop(Duration::from_millis(50));
        });
        let logged = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let warning = logged
            .lines()
            .find(|l| l.contains("plugin queue not drained"))
            .unwrap_or_else(|| panic!("no warning in {logged:?}"));
        assert!(
            warning.contains("plugin.id=slow-rec") && warning.contains("queue.dropped="),
            "{warning}"
        );
    }
}
