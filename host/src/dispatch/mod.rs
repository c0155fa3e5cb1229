//! Dispatch: joins informers to plugins. Each plugin has one ordered [`EventQueue`] that its
//! subscriptions feed without blocking, and one [`PluginWorker`] thread that delivers the queue
//! to its instance, so a slow or failing plugin never delays the watches, the cache or another
//! plugin.

mod queue;
mod status;
mod worker;

use std::sync::Arc;
use std::time::Duration;

pub use queue::{EventQueue, Item, Popped, SourceId, SourceSink};
pub(crate) use status::rfc3339;
pub use status::{PluginStatus, StatusReport, TimedError};
pub use worker::{PluginWorker, Source, SwapMode};

use crate::cache::{Store, StoreSource};
use crate::informer::{Lister, Subscription};
use crate::plugin::PluginInstance;

impl StoreSource for Lister {
    fn current(&self) -> Arc<Store> {
        self.store()
    }
}

/// A plugin wired to its informers: subscriptions feeding its queue, lister grants held, worker
/// running. Dropping the subscriptions (on [`DispatchedPlugin::stop`]) releases informers that no
/// one else uses.
pub struct DispatchedPlugin {
    name: String,
    queue: Arc<EventQueue>,
    status: Arc<PluginStatus>,
    worker: PluginWorker,
    subscriptions: Vec<Subscription>,
    listers: Vec<Lister>,
}

impl DispatchedPlugin {
    /// Subscribes, then starts the worker for `instance`: each subscription first queues the
    /// informer's current content as initial adds, then live deltas.
    pub fn start(
        instance: PluginInstance,
        max_queued: usize,
        resync: Option<Duration>,
        handled: Vec<Source>,
        listers: Vec<Lister>,
    ) -> Self {
        let name = instance.plugin().name().to_owned();
        let queue = EventQueue::new(max_queued);
        let status = Arc::new(PluginStatus::default());
        status.loaded(instance.plugin().digest());
        let subscriptions = handled
            .iter()
            .enumerate()
            .map(|(source, info)| info.lister.informer().subscribe(Arc::new(SourceSink { queue: queue.clone(), source })))
            .collect();
        let worker = PluginWorker::start(instance, queue.clone(), handled, status.clone(), resync);
        Self { name, queue, status, worker, subscriptions, listers }
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its live status.
    pub fn status(&self) -> &Arc<PluginStatus> {
        &self.status
    }

    /// A copy of its status, with the queue depth.
    pub fn report(&self) -> StatusReport {
        self.status.report(&self.name, self.queue.depth())
    }

    /// Hands `instance` to the worker, which swaps it in between two events; the receiver is
    /// told when that happened (with how many objects were replayed, for a replay swap).
    pub fn swap(&self, instance: PluginInstance, mode: SwapMode) -> std::sync::mpsc::Receiver<Option<usize>> {
        self.worker.swap(instance, mode)
    }

    /// Records a failed swap (the old version keeps running).
    pub fn swap_failed(&self, error: String) {
        self.status.swap_failed(error);
    }

    /// Unsubscribes, then delivers what is queued within `timeout` and stops the worker.
    pub fn stop(self, timeout: Duration) {
        drop(self.subscriptions);
        self.worker.stop(timeout);
        drop(self.listers);
    }
}
