//! [`PluginWorker`]: the thread that delivers one plugin's queued events to its instance, one at
//! a time, in order; backs off a failing plugin; queues resyncs; swaps in new versions between
//! two events.

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::queue::{EventQueue, Item, Popped, SourceId};
use super::status::PluginStatus;
use crate::cache::Gvk;
use crate::error_chain;
use crate::informer::Lister;
use crate::plugin::{Backoff, CallError, PluginInstance};

/// What the worker knows of one subscription.
#[derive(Debug, Clone)]
pub struct Source {
    /// The kind it delivers.
    pub gvk: Gvk,
    /// Its informer's store, for resyncs and replays.
    pub lister: Lister,
}

/// What a new version receives first when it is swapped in (`onSwap:` in the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwapMode {
    /// `live` — the events after the swap; what was queued for the old version goes on to the
    /// new one.
    #[default]
    Live,
    /// `replay` — the current cache as initial adds, then the events after it; what was queued
    /// for the old version is dropped (its effect is in the cache).
    Replay,
}

/// A new version waiting to replace the running one between two events.
pub(crate) struct PendingSwap {
    /// The new version, started and `init`-ed.
    pub instance: PluginInstance,
    /// Live or replay.
    pub mode: SwapMode,
    /// Told when the swap happened, with how many objects were replayed (replay swaps).
    pub done: std::sync::mpsc::Sender<Option<usize>>,
}

/// Runs one plugin's deliveries on a dedicated thread (wasmtime calls are synchronous).
pub struct PluginWorker {
    thread: Option<JoinHandle<()>>,
    swap: Arc<Mutex<Option<PendingSwap>>>,
    queue: Arc<EventQueue>,
}

struct Delivery {
    name: Arc<str>,
    instance: PluginInstance,
    queue: Arc<EventQueue>,
    sources: Vec<Source>,
    status: Arc<PluginStatus>,
    swap: Arc<Mutex<Option<PendingSwap>>>,
    resync: Option<Duration>,
    unsynced: Vec<bool>,
}

impl PluginWorker {
    /// Starts delivering from `queue` to `instance`.
    pub fn start(
        instance: PluginInstance,
        queue: Arc<EventQueue>,
        sources: Vec<Source>,
        status: Arc<PluginStatus>,
        resync: Option<Duration>,
    ) -> Self {
        let name: Arc<str> = instance.plugin().name().into();
        let swap = Arc::new(Mutex::new(None));
        let unsynced = vec![true; sources.len()];
        let delivery = Delivery { name: name.clone(), instance, queue: queue.clone(), sources, status, swap: swap.clone(), resync, unsynced };
        let thread = std::thread::Builder::new()
            .name(format!("plugin-{name}"))
            .spawn(move || delivery.run())
            .expect("spawn plugin worker thread");
        Self { thread: Some(thread), swap, queue }
    }

    /// Hands a started new version to the worker, which swaps it in before the next event and
    /// signals `done` (immediately if idle).
    pub(crate) fn swap(&self, instance: PluginInstance, mode: SwapMode) -> std::sync::mpsc::Receiver<Option<usize>> {
        let (done, swapped) = std::sync::mpsc::channel();
        *self.swap.lock().expect("swap slot lock poisoned") = Some(PendingSwap { instance, mode, done });
        self.queue.wake();
        swapped
    }

    /// Closes the queue and waits up to `timeout` for what is queued to be delivered; past it,
    /// what is left is dropped (and counted in the log).
    pub fn stop(mut self, timeout: Duration) {
        self.queue.close();
        let deadline = Instant::now() + timeout;
        let thread = self.thread.take().expect("worker thread");
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if !thread.is_finished() {
            let dropped = self.queue.abandon();
            tracing::warn!(queue.dropped = dropped, "plugin queue not drained before the shutdown deadline");
        }
        let _ = thread.join();
    }
}

impl Delivery {
    fn run(mut self) {
        let _span = tracing::info_span!("plugin", plugin.id = %self.name).entered();
        let mut backoff = Backoff::default();
        let mut next_resync = self.resync.map(|period| Instant::now() + period);
        loop {
            // A swap happens here, between two events (a pending swap wakes `pop`).
            if self.take_swap() {
                backoff = Backoff::default();
            }
            let timeout = next_resync.map(|at| at.saturating_duration_since(Instant::now()));
            match self.queue.pop(timeout) {
                Popped::Closed => break,
                Popped::Woken => {}
                Popped::Timeout => {
                    if let (Some(period), Some(at)) = (self.resync, next_resync.as_mut())
                        && Instant::now() >= *at
                    {
                        self.queue_resync();
                        *at = Instant::now() + period;
                    }
                }
                Popped::Item(Item::Synced { source }) => self.mark_synced(source),
                Popped::Item(Item::Event { source, event }) => {
                    let gvk = &self.sources[source].gvk;
                    let started = Instant::now();
                    let result = self.instance.handle(gvk, &event);
                    let obj = event.object();
                    match &result {
                        Ok(()) => {
                            backoff.succeeded();
                            tracing::trace!(object.ref = %obj.key(), event.kind = event.kind(), event.durationMs = started.elapsed().as_secs_f64() * 1e3, "delivered");
                        }
                        Err(error) => {
                            let pause = backoff.failed();
                            log_failure(gvk, obj.key(), event.kind(), error, backoff.consecutive_failures(), pause);
                            self.queue.sleep(pause);
                        }
                    }
                    self.status.called(result.err().map(|e| format!("{} {} {}: {}", event.kind(), gvk.kind, obj.key(), error_chain(&e))));
                }
            }
        }
        tracing::info!("plugin worker stopped");
    }

    /// Swaps in the pending new version, if any; returns whether it did. A replay swap replaces
    /// what is queued with the current cache. A new version starts with a clean slate: the
    /// caller resets the backoff its predecessor's failures built up.
    fn take_swap(&mut self) -> bool {
        let pending = self.swap.lock().expect("swap slot lock poisoned").take();
        let Some(PendingSwap { instance, mode, done }) = pending else { return false };
        let digest = instance.plugin().digest().to_owned();
        let old = std::mem::replace(&mut self.instance, instance);
        let replayed = (mode == SwapMode::Replay).then(|| self.replay());
        self.status.swapped(&digest);
        tracing::info!(
            plugin.version = %&digest[..12], plugin.previous = %&old.plugin().digest()[..12], replayed,
            "plugin version swapped in"
        );
        let _ = done.send(replayed);
        true
    }

    /// Replaces each source's queued events with its informer's content as initial adds; returns
    /// how many objects that is.
    fn replay(&self) -> usize {
        let mut replayed = 0;
        for (source, info) in self.sources.iter().enumerate() {
            info.lister.informer().replay(|objects, synced| {
                replayed += objects.len();
                let dropped = self.queue.replay(source, objects, synced);
                tracing::debug!(resource = %info.gvk, queue.dropped = dropped, "queued events replaced by the cache");
            });
        }
        replayed
    }

    fn mark_synced(&mut self, source: SourceId) {
        if let Some(flag) = self.unsynced.get_mut(source) {
            *flag = false;
        }
        if !self.status.is_synced() && self.unsynced.iter().all(|u| !u) {
            self.status.set_synced();
            tracing::info!(calls = self.status.calls(), "plugin synced: initial list delivered");
        }
    }

    fn queue_resync(&self) {
        for (source, info) in self.sources.iter().enumerate() {
            let queued = self.queue.resync(source, info.lister.store().snapshot());
            tracing::debug!(resource = %info.gvk, queued, "resync queued");
        }
    }
}

fn log_failure(gvk: &Gvk, key: &crate::cache::ObjectKey, kind: &str, error: &CallError, failures: u32, pause: Duration) {
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
