//! [`InformerFactory`]: client-go's `SharedInformerFactory`. One running [`Informer`] per
//! [`InformerKey`], shared by every subscriber and lister of that key.
//!
//! The factory holds informers weakly. An informer runs while anything holds it (an
//! `Arc<Informer>`, a [`Subscription`], a [`Lister`]); when the last holder goes, the informer
//! aborts its watch task, frees its store and leaves the factory, and the next request for the
//! key starts a fresh one. So removing the last plugin of a resource (dropping its subscription
//! and lister grants) stops that informer; a hot swap that wants to keep the cache subscribes the
//! new plugin before dropping the old one's handles.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use kube::Client;

use super::informer::WatchSource;
use super::retry::Reachability;
use super::watch::{ApiSource, StreamingSupport};
use super::{
    EventSink, Informer, InformerKey, InformerStatus, Lister, Result, StoreOptions, Subscription,
    WatchSettings,
};

struct Inner {
    client: Client,
    settings: WatchSettings,
    runtime: tokio::runtime::Handle,
    streaming: Arc<StreamingSupport>,
    reachability: Arc<Reachability>,
    informers: Mutex<HashMap<InformerKey, Weak<Informer>>>,
}

impl Inner {
    /// Never drop an `Arc<Informer>` while holding this: its `Drop` takes the lock.
    fn lock(&self) -> MutexGuard<'_, HashMap<InformerKey, Weak<Informer>>> {
        self.informers
            .lock()
            .expect("informer factory lock poisoned")
    }
}

/// Starts and shares informers against one API server.
#[derive(Clone)]
pub struct InformerFactory {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for InformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerFactory")
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl InformerFactory {
    /// A factory watching through `client`. Must be called within a Tokio runtime: informers'
    /// tasks run on it.
    pub fn new(client: Client, settings: WatchSettings) -> Self {
        let inner = Inner {
            reachability: Arc::new(Reachability::new(client.clone())),
            client,
            settings,
            runtime: tokio::runtime::Handle::current(),
            streaming: Arc::default(),
            informers: Mutex::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The running informer for `key`, started if none runs, with `options` merged into its store
    /// (see [`Informer::ensure_options`]).
    pub fn informer(&self, key: InformerKey, options: &StoreOptions) -> Result<Arc<Informer>> {
        let key = key.normalized()?;
        let mut informers = self.inner.lock();
        if let Some(informer) = informers.get(&key).and_then(Weak::upgrade) {
            drop(informers);
            informer.ensure_options(options)?;
            return Ok(informer);
        }
        let source = ApiSource::new(
            self.inner.client.clone(),
            key.clone(),
            self.inner.settings.clone(),
            options.strip_managed_fields,
            self.inner.streaming.clone(),
            self.inner.reachability.clone(),
        );
        let factory = Arc::downgrade(&self.inner);
        let dropped_key = key.clone();
        let on_drop = Box::new(move || {
            if let Some(factory) = factory.upgrade() {
                let mut informers = factory.lock();
                // A new informer for the key may already have replaced this one.
                if informers
                    .get(&dropped_key)
                    .is_some_and(|weak| weak.strong_count() == 0)
                {
                    informers.remove(&dropped_key);
                }
            }
        });
        let informer = Informer::spawn(
            key.clone(),
            options.clone(),
            WatchSource::Api(Box::new(source)),
            &self.inner.runtime,
            Some(on_drop),
        )?;
        informers.insert(key, Arc::downgrade(&informer));
        tracing::info!(informer.resource = %informer.key().resource_name(), informer.namespace = %informer.key().namespace_label(), "informer started");
        Ok(informer)
    }

    /// Subscribes `sink` to the informer for `key` (started if needed); see
    /// [`Informer::subscribe`].
    pub fn subscribe(
        &self,
        key: InformerKey,
        options: &StoreOptions,
        sink: Arc<dyn EventSink>,
    ) -> Result<Subscription> {
        Ok(self.informer(key, options)?.subscribe(sink))
    }

    /// A lister for `key` (its informer started if needed): a plugin's read grant.
    pub fn lister(&self, key: InformerKey, options: &StoreOptions) -> Result<Lister> {
        Ok(self.informer(key, options)?.lister())
    }

    /// The running informer for `key`, if any.
    pub fn get(&self, key: &InformerKey) -> Option<Arc<Informer>> {
        let key = key.clone().normalized().ok()?;
        self.inner.lock().get(&key).and_then(Weak::upgrade)
    }

    /// A lister for the running informer of `key`, if any.
    pub fn store(&self, key: &InformerKey) -> Option<Lister> {
        self.get(key).map(|informer| informer.lister())
    }

    /// Every running informer and its status, ordered by key text.
    pub fn statuses(&self) -> Vec<(InformerKey, InformerStatus)> {
        let running: Vec<Arc<Informer>> = self
            .inner
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut statuses: Vec<_> = running
            .iter()
            .map(|i| (i.key().clone(), i.status()))
            .collect();
        drop(running);
        statuses.sort_by_cached_key(|(key, _)| key.to_string());
        statuses
    }
}

#[cfg(test)]
#[path = "factory_tests.rs"]
mod tests;
