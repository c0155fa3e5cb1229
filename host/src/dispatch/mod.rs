//! Dispatch: joins informers to plugins. Each plugin has one ordered [`EventQueue`] that its
//! subscriptions feed without blocking, and one [`PluginWorker`] that delivers the queue to its
//! instance on a thread of the [`DeliveryPool`] while it has something to deliver, so a slow or
//! failing plugin never delays the watches or the cache, and delays another plugin only when
//! every pool thread is busy.

mod gate;
mod pool;
mod queue;
mod reconcile;
mod status;
mod worker;

use std::sync::Arc;
use std::time::Duration;

pub use gate::{Gate, Terms};
pub use pool::DeliveryPool;
pub use queue::{EventQueue, Popped, SubscriptionId, SubscriptionSink};
pub use reconcile::{FailingKey, KeyMap, ReconcileWiring, RelatedKind, WorkQueueReport};
pub(crate) use status::rfc3339;
pub use status::{InstanceState, PluginStatus, StatusReport, TimedError};
pub use worker::{HandledKind, PluginWorker, Swapped};

/// What a new version receives first when it is swapped in; a config type, used here.
pub use crate::config::SwapMode;

use crate::cache::{Store, StoreSource};
use crate::informer::{Lister, Subscription};
use crate::metrics::PluginMetrics;
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
    metrics: PluginMetrics,
}

impl DispatchedPlugin {
    /// Subscribes, then starts the worker for `instance`: each subscription first queues the
    /// informer's current content as initial adds, then live events.
    ///
    /// `previous` is the version this one replaces with other subscriptions (a re-subscription):
    /// the new worker first stops it (it delivers what it has queued within `stop_timeout`, see
    /// [`DispatchedPlugin::stop`]), takes its state (the `state` export), and only then delivers, so at most one version of a plugin
    /// handles events at any instant. The worker calls handlers only while `gate` is open. The new
    /// subscriptions are in place before the old ones are dropped: informers both use keep
    /// running, and the new queue misses nothing meanwhile.
    #[expect(
        clippy::too_many_arguments,
        reason = "each argument is a distinct part of the plugin's dispatch; a struct would only rename them"
    )]
    pub fn start(
        instance: PluginInstance,
        max_queued: usize,
        resync: Option<Duration>,
        unload_after: Option<Duration>,
        handled: Vec<HandledKind>,
        listers: Vec<Lister>,
        previous: Option<(DispatchedPlugin, Duration)>,
        metrics: PluginMetrics,
        gate: Gate,
        reconcile: ReconcileWiring,
        pool: &DeliveryPool,
    ) -> Self {
        let name = instance.plugin().name().to_owned();
        let queue = EventQueue::with_metrics(max_queued, metrics.queue.clone());
        let status = Arc::new(PluginStatus::default());
        status.loaded(instance.plugin().digest());
        metrics.running(instance.plugin().digest(), instance.plugin().contract());
        status.contract(instance.plugin().contract());
        status.instance(true, None);
        metrics.loaded(true);
        metrics.activated(0);
        // Handled kinds first, then `reconcile.owns`/`watches` kinds (the worker tells them
        // apart by their subscription id).
        let subscriptions = handled
            .iter()
            .map(|h| &h.lister)
            .chain(reconcile.related.iter().map(|r| &r.lister))
            .enumerate()
            .map(|(subscription, lister)| {
                lister.informer().subscribe(Arc::new(SubscriptionSink {
                    queue: queue.clone(),
                    subscription,
                }))
            })
            .collect();
        let before = previous.map(|(previous, timeout)| -> worker::Before {
            Box::new(move || {
                let mut old = previous.stop(timeout)?;
                old.take_state()
                    .inspect_err(|error| tracing::warn!(error = %error, "plugin state not kept"))
                    .ok()
                    .flatten()
            })
        });
        let worker = PluginWorker::start(
            instance,
            queue.clone(),
            handled,
            status.clone(),
            resync,
            unload_after,
            before,
            metrics.clone(),
            gate,
            reconcile,
            pool,
        );
        Self {
            name,
            queue,
            status,
            worker,
            subscriptions,
            listers,
            metrics,
        }
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
    /// told when that happened (with how many cached objects the new version was handed, for a
    /// snapshot swap) and given the old instance, to drop off the event path.
    pub fn swap(
        &self,
        instance: PluginInstance,
        mode: SwapMode,
    ) -> std::sync::mpsc::Receiver<Swapped> {
        self.worker.swap(instance, mode)
    }

    /// Records a failed swap (the old version keeps running).
    pub fn swap_failed(&self, error: String) {
        self.status.swap_failed(error);
        self.metrics.swapped(false);
    }

    /// Unsubscribes, then delivers what is queued within `timeout` and stops the worker; returns
    /// its instance (for its state), `None` if the worker panicked.
    pub fn stop(self, timeout: Duration) -> Option<PluginInstance> {
        drop(self.subscriptions);
        let instance = self.worker.stop(timeout);
        drop(self.listers);
        instance
    }
}
