//! One running informer: a tokio task that drives kube's watcher through a [`Reflector`] into a
//! [`Store`] and fans the resulting [`Event`]s out to every subscribed [`EventSink`].
//!
//! Applying a watch event to the store and pushing the resulting events happen under one lock, the
//! same lock [`Informer::subscribe`] takes to hand over the store's content, so a subscriber sees
//! every object exactly once: either in that snapshot or as a live event, never both, never neither.
//!
//! Errors never stop the task: kube's watcher recovers (re-watch, relist) and the task waits as
//! [`super::retry`] says: not at all after a single `410 Gone`, kube's `DefaultBackoff` (0.8 s
//! doubling to 30 s, with jitter) after other failures, cut short when a server that could not be
//! reached answers again. kube's own `StreamBackoff` resets on any event, and the `Init` marker
//! that precedes every LIST attempt would keep a persistently failing LIST (a 403) at the first
//! step; the task resets only on proof of progress (a completed list, a live event).
//!
//! The informer lives while a handle to it does: an [`Arc<Informer>`], a [`Subscription`] or a
//! [`Lister`]. Dropping the last one aborts the task and frees the store.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::SystemTime;

use futures::StreamExt;
use kube::runtime::watcher::Event as WatchEvent;

use tokio::task::AbortHandle;
use tracing::Instrument;

use super::guard::StreamHealth;
use super::reflector::{Event, EventSink, Reflector};
use super::retry::{Reachability, RetryPolicy, Wait};
use super::watch::{
    ApiSource, DEFAULT_MAX_OBJECT_BYTES, EventStream, ListEncoding, ListStrategy,
    METADATA_API_VERSION, METADATA_KIND, WatchError,
};
use super::{Error, InformerKey, Result, StoreOptions};
use crate::cache::{CachedObject, Store, WireObject};

/// The most recent watch failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    /// What failed and why, for operators (see [`WatchError::describe`]).
    pub message: String,
    /// When.
    pub at: SystemTime,
}

/// What an informer has done, for the host to show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InformerStatus {
    /// Whether the first list has completed.
    pub synced: bool,
    /// When the first list completed.
    pub synced_at: Option<SystemTime>,
    /// Objects in the store.
    pub objects: usize,
    /// Current subscriptions.
    pub subscribers: usize,
    /// Objects received from the watcher (listed or watched).
    pub events: u64,
    /// Lists started after the first sync (after `410 Gone`, or a restarted streaming list).
    pub relists: u64,
    /// Watch failures.
    pub errors: u64,
    /// Objects refused: of another kind than the informer's, over `host.maxObjectBytes`, or
    /// not cacheable (no name, malformed labels).
    pub rejected: u64,
    /// Watch events that could not be decoded (each restarted the watch).
    pub undecodable: u64,
    /// The most recent failure; kept after recovery.
    pub last_error: Option<LastError>,
    /// How the initial content is fetched, once the watch has started (`List` or `Streaming`).
    pub list_strategy: Option<ListStrategy>,
    /// How the last LIST page came (`host.listEncoding`); `None` before the first.
    pub list_encoding: Option<ListEncoding>,
    /// Lists started, the first included.
    pub lists: u64,
    /// Of the relists, those after the watch expired (`410 Gone`); the rest followed another
    /// failure.
    pub relists_expired: u64,
    /// Events fanned out, by type: adds, updates, deletes.
    pub emitted: EventCounts,
    /// When the last object arrived (listed or watched).
    pub last_event_at: Option<SystemTime>,
}

/// Events an informer emitted, by type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventCounts {
    /// `Add`s.
    pub added: u64,
    /// `Update`s (resyncs are the plugins' own and not counted here).
    pub updated: u64,
    /// `Delete`s, tombstones included.
    pub deleted: u64,
}

/// Everything the apply/fan-out lock protects.
struct Fanout {
    reflector: Reflector,
    options: StoreOptions,
    sinks: Vec<(u64, Arc<dyn EventSink>)>,
    next_id: u64,
    status: InformerStatus,
    /// The last watch failure was a `410 Gone`: the next relist is for that reason.
    expired: bool,
}

/// The state shared by the informer handle and its task.
struct Core {
    key: InformerKey,
    fanout: Mutex<Fanout>,
    /// The current store, for listers (replaced only when indexes are added).
    store: RwLock<Arc<Store>>,
    synced: tokio::sync::watch::Sender<bool>,
    /// What the watch streams' guard refused.
    health: Arc<StreamHealth>,
}

impl Core {
    fn lock(&self) -> MutexGuard<'_, Fanout> {
        self.fanout.lock().expect("informer lock poisoned")
    }

    fn apply(&self, event: WatchEvent<WireObject>, strategy: Option<ListStrategy>) {
        let mut fanout = self.lock();
        let Fanout {
            reflector,
            sinks,
            status,
            expired,
            ..
        } = &mut *fanout;
        status.list_strategy = strategy.or(status.list_strategy);
        match &event {
            WatchEvent::Init => {
                status.lists += 1;
                if reflector.is_synced() {
                    status.relists += 1;
                    status.relists_expired += u64::from(std::mem::take(expired));
                    tracing::info!(informer.relists = status.relists, "relisting");
                }
            }
            WatchEvent::Apply(_) | WatchEvent::InitApply(_) | WatchEvent::Delete(_) => {
                status.events += 1;
                status.last_event_at = Some(SystemTime::now());
            }
            _ => {}
        }
        let was_synced = reflector.is_synced();
        let list_done = matches!(event, WatchEvent::InitDone);
        let emitted = &mut status.emitted;
        let rejected = reflector.apply(event, &mut |event| {
            match &event {
                Event::Add { .. } => emitted.added += 1,
                Event::Update { .. } => emitted.updated += 1,
                Event::Delete { .. } => emitted.deleted += 1,
                Event::Synced => {}
            }
            for (_, sink) in sinks.iter() {
                sink.push(event.clone());
            }
        });
        status.rejected += rejected as u64;
        if list_done {
            // The list's pages and buffered objects were just freed, in arenas that keep them.
            crate::trim::request();
        }
        if !was_synced && reflector.is_synced() {
            status.synced = true;
            status.synced_at = Some(SystemTime::now());
            tracing::info!(informer.objects = reflector.store().len(), "synced");
            self.synced.send_replace(true);
        }
    }

    fn record_error(&self, error: &WatchError) {
        let message = error.describe();
        match error {
            WatchError::Expired { .. } => tracing::info!(error = %message, "watch expired"),
            _ => tracing::warn!(error = %message, "watch failed"),
        }
        let mut fanout = self.lock();
        fanout.expired = matches!(error, WatchError::Expired { .. });
        fanout.status.errors += 1;
        fanout.status.last_error = Some(LastError {
            message,
            at: SystemTime::now(),
        });
    }
}

/// Where an informer's watch events come from.
pub(crate) enum WatchSource {
    /// A server, through kube's watcher.
    Api(Box<ApiSource>),
    /// A given stream (tests, recordings); the task ends with it.
    Stream(EventStream),
}

impl WatchSource {
    async fn next(&mut self) -> Option<kube::runtime::watcher::Result<WatchEvent<WireObject>>> {
        match self {
            WatchSource::Api(api) => Some(api.next().await),
            WatchSource::Stream(stream) => stream.next().await,
        }
    }

    fn strategy(&self) -> Option<ListStrategy> {
        match self {
            WatchSource::Api(api) => api.strategy(),
            WatchSource::Stream(_) => None,
        }
    }

    fn health(&self) -> Arc<StreamHealth> {
        match self {
            WatchSource::Api(api) => api.health(),
            WatchSource::Stream(_) => Arc::default(),
        }
    }

    fn max_object_bytes(&self) -> usize {
        match self {
            WatchSource::Api(api) => api.max_object_bytes(),
            WatchSource::Stream(_) => DEFAULT_MAX_OBJECT_BYTES,
        }
    }

    /// What notices the server answer again, if there is a server.
    fn reachability(&self) -> Option<Arc<Reachability>> {
        match self {
            WatchSource::Api(api) => Some(api.reachability().clone()),
            WatchSource::Stream(_) => None,
        }
    }
}

async fn run(core: Arc<Core>, mut source: WatchSource) {
    let mut retry = RetryPolicy::default();
    while let Some(item) = source.next().await {
        match item {
            Ok(event) => {
                retry.progress(&event);
                core.apply(event, source.strategy());
            }
            Err(error) => {
                let error = WatchError::new(&core.key, error);
                core.record_error(&error);
                match retry.after(&error) {
                    Wait::Now => {}
                    Wait::For(delay) => {
                        tracing::debug!(backoffMs = delay.as_millis() as u64, "backing off");
                        tokio::time::sleep(delay).await;
                    }
                    Wait::UntilReachable(delay) => {
                        tracing::debug!(
                            backoffMs = delay.as_millis() as u64,
                            "backing off until the server answers"
                        );
                        match source.reachability() {
                            Some(reachability) => {
                                reachability.wait(delay).await;
                            }
                            None => tokio::time::sleep(delay).await,
                        }
                    }
                }
            }
        }
    }
}

/// A running informer for one [`InformerKey`].
pub struct Informer {
    core: Arc<Core>,
    task: AbortHandle,
    on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl std::fmt::Debug for Informer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Informer")
            .field("key", &self.core.key)
            .finish_non_exhaustive()
    }
}

impl Drop for Informer {
    fn drop(&mut self) {
        self.task.abort();
        tracing::info!(informer.resource = %self.core.key.resource_name(), informer.namespace = %self.core.key.namespace_label(), "informer stopped");
        if let Some(on_drop) = self.on_drop.take() {
            on_drop();
        }
    }
}

impl Informer {
    /// Starts an informer for `key` over `events` (any watcher event stream: a test script, a
    /// recording). Must be called within a Tokio runtime.
    pub fn from_stream(
        key: InformerKey,
        options: StoreOptions,
        events: EventStream,
    ) -> Result<Arc<Self>> {
        Self::spawn(
            key,
            options,
            WatchSource::Stream(events),
            &tokio::runtime::Handle::current(),
            None,
        )
    }

    pub(crate) fn spawn(
        key: InformerKey,
        options: StoreOptions,
        source: WatchSource,
        runtime: &tokio::runtime::Handle,
        on_drop: Option<Box<dyn FnOnce() + Send + Sync>>,
    ) -> Result<Arc<Self>> {
        let key = key.normalized()?;
        let mut merged = StoreOptions {
            indexes: Vec::new(),
            strip_managed_fields: options.strip_managed_fields,
        };
        merged.merge(&key, &options)?;
        let store = Arc::new(Store::new(
            key.gvk(),
            merged.indexes.clone(),
            merged.strip_managed_fields,
        ));
        let (api_version, kind) = if key.metadata_only {
            (METADATA_API_VERSION.to_owned(), METADATA_KIND.to_owned())
        } else {
            (key.resource.api_version.clone(), key.resource.kind.clone())
        };
        let reflector = Reflector::new(store.clone())
            .expecting(api_version, kind)
            .max_object_bytes(source.max_object_bytes());
        let fanout = Fanout {
            reflector,
            options: merged,
            sinks: Vec::new(),
            next_id: 0,
            status: InformerStatus::default(),
            expired: false,
        };
        let span = tracing::info_span!(
            "informer",
            informer.resource = %key.resource_name(),
            informer.namespace = %key.namespace_label(),
        );
        let core = Arc::new(Core {
            key,
            fanout: Mutex::new(fanout),
            store: RwLock::new(store),
            synced: tokio::sync::watch::Sender::new(false),
            health: source.health(),
        });
        let task = runtime
            .spawn(run(core.clone(), source).instrument(span))
            .abort_handle();
        Ok(Arc::new(Self {
            core,
            task,
            on_drop,
        }))
    }

    /// What this informer watches.
    pub fn key(&self) -> &InformerKey {
        &self.core.key
    }

    /// The store as it is now. Hold a [`Lister`] rather than this `Arc` to keep the informer
    /// running (and to follow a store rebuilt with more indexes).
    pub fn store(&self) -> Arc<Store> {
        self.core
            .store
            .read()
            .expect("informer store lock poisoned")
            .clone()
    }

    /// A handle that reads the store and keeps the informer running.
    pub fn lister(self: &Arc<Self>) -> Lister {
        Lister {
            informer: self.clone(),
        }
    }

    /// Whether the first list has completed.
    pub fn has_synced(&self) -> bool {
        *self.core.synced.borrow()
    }

    /// Waits until the first list has completed.
    pub async fn wait_synced(&self) {
        let mut synced = self.core.synced.subscribe();
        // The sender lives in `core`, which `self` keeps alive: this cannot fail.
        let _ = synced.wait_for(|synced| *synced).await;
    }

    /// What this informer has done so far.
    pub fn status(&self) -> InformerStatus {
        let fanout = self.core.lock();
        let health = &self.core.health;
        let guard_error = health
            .last_error
            .lock()
            .expect("stream health lock poisoned")
            .clone();
        let last_error = match (fanout.status.last_error.clone(), guard_error) {
            (Some(a), Some(b)) => Some(if b.at > a.at { b } else { a }),
            (a, b) => a.or(b),
        };
        InformerStatus {
            objects: fanout.reflector.store().len(),
            subscribers: fanout.sinks.len(),
            rejected: fanout.status.rejected + health.too_large.load(Ordering::Relaxed),
            undecodable: health.undecodable.load(Ordering::Relaxed),
            list_encoding: health.list_encoding(),
            last_error,
            ..fanout.status.clone()
        }
    }

    /// The store options in effect (merged from every user).
    pub fn options(&self) -> StoreOptions {
        self.core.lock().options.clone()
    }

    /// Subscribes `sink`: it first receives the store's content as `Add { initial: true }` (in
    /// key order) and `Synced` if the first list has completed, then every live event. Dropping
    /// the [`Subscription`] unsubscribes.
    pub fn subscribe(self: &Arc<Self>, sink: Arc<dyn EventSink>) -> Subscription {
        let mut fanout = self.core.lock();
        for obj in fanout.reflector.store().snapshot() {
            sink.push(Event::Add { obj, initial: true });
        }
        if fanout.reflector.is_synced() {
            sink.push(Event::Synced);
        }
        let id = fanout.next_id;
        fanout.next_id += 1;
        fanout.sinks.push((id, sink));
        Subscription {
            informer: self.clone(),
            id,
        }
    }

    /// Hands a snapshot of the store, and whether the initial list is complete, to `take` while
    /// no event is fanned out: what `take` queues lines up exactly with the events after it, as a
    /// new subscription's initial adds do.
    pub fn with_snapshot(&self, take: impl FnOnce(Vec<Arc<CachedObject>>, bool)) {
        let fanout = self.core.lock();
        take(
            fanout.reflector.store().snapshot(),
            fanout.reflector.is_synced(),
        );
    }

    /// Makes the store carry `options` too: adds missing indexes (rebuilding the store, which
    /// costs a second copy of it while it runs), keeps existing ones. Fails on an index name used
    /// with another field, or when managed fields are needed but already stripped.
    pub fn ensure_options(&self, options: &StoreOptions) -> Result<()> {
        let mut fanout = self.core.lock();
        let mut merged = fanout.options.clone();
        merged.merge(&self.core.key, options)?;
        if merged.strip_managed_fields != fanout.options.strip_managed_fields {
            return Err(Error::ManagedFieldsStripped {
                resource: self.core.key.resource_name(),
            });
        }
        if merged.indexes.len() == fanout.options.indexes.len() {
            return Ok(());
        }
        let store = Arc::new(Store::new(
            self.core.key.gvk(),
            merged.indexes.clone(),
            merged.strip_managed_fields,
        ));
        fanout.reflector.replace_store(store.clone());
        *self
            .core
            .store
            .write()
            .expect("informer store lock poisoned") = store;
        fanout.options = merged;
        Ok(())
    }

    fn unsubscribe(&self, id: u64) {
        self.core.lock().sinks.retain(|(sink_id, _)| *sink_id != id);
    }
}

/// A subscription to an informer's events; dropping it unsubscribes (and stops the informer if
/// it was the last handle).
#[derive(Debug)]
pub struct Subscription {
    informer: Arc<Informer>,
    id: u64,
}

impl Subscription {
    /// The informer subscribed to.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.informer.unsubscribe(self.id);
    }
}

/// Read access to an informer's store that keeps the informer running: what a plugin's lister
/// grant holds.
#[derive(Debug, Clone)]
pub struct Lister {
    informer: Arc<Informer>,
}

impl Lister {
    /// The store as it is now (a store rebuilt with more indexes replaces the previous one).
    pub fn store(&self) -> Arc<Store> {
        self.informer.store()
    }

    /// Whether the store holds the first complete list.
    pub fn has_synced(&self) -> bool {
        self.informer.has_synced()
    }

    /// The informer behind this lister.
    pub fn informer(&self) -> &Arc<Informer> {
        &self.informer
    }
}

#[cfg(test)]
#[path = "informer_tests.rs"]
mod tests;
