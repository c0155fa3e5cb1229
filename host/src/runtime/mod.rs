//! [`Runtime`]: the running host, built from a [`HostConfig`]: the shared informers, the plugins
//! and their dispatch. `wasmformer run` and `wasmformer dev` are this plus signal handling; tests
//! build it in-process.

mod connect;
mod discovery;
mod leader;
mod leadership;
mod reload;
mod share;
mod writes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::Client;
use kube::discovery::ApiResource;

pub use connect::{ConnectError, connect};
pub use discovery::Discovery;
pub use leader::{LeadershipReport, PluginLeadership};
use reload::Request;
pub use reload::{ReloadOutcome, ReloadReport};

use crate::cache::{Gvk, IndexSpec};
use crate::config::{HostConfig, KindRef, LeaseScope, PluginConfig};
use crate::dispatch::{
    DeliveryPool, DispatchedPlugin, Gate, HandledKind, KeyMap, PluginStatus, ReconcileWiring,
    RelatedKind, StatusReport, Terms, TimedError,
};
use crate::error_chain;
use crate::informer::{self, InformerFactory, InformerKey, Lister, StoreOptions, WatchSettings};
use crate::metrics::{InformerSample, InformerSampler, Metrics};
use crate::plugin::{
    CallError, Grants, LoadError, LoadedPlugin, LogObserver, PluginEngine, PluginInstance,
};

/// How the runtime watches and where plugin logs go besides tracing.
#[derive(Clone, Default)]
pub struct RuntimeOptions {
    /// Watch parameters shared by every informer.
    pub watch: WatchSettings,
    /// Receives every line any plugin logs (tests, `wasmformer dev`'s console).
    pub log_observer: Option<LogObserver>,
    /// Send plugins' writes with `dryRun=All` (`wasmformer run --dry-run`).
    pub dry_run: bool,
}

/// Why a plugin could not be started (or swapped).
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A kind the plugin names is not served by the cluster.
    #[error("plugin {plugin}: the cluster does not serve {kind}")]
    NotServed {
        /// The plugin.
        plugin: String,
        /// The kind, as configured.
        kind: String,
    },
    /// Discovery failed.
    #[error("plugin {plugin}: cannot discover {kind}")]
    Discovery {
        /// The plugin.
        plugin: String,
        /// The kind, as configured.
        kind: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The wasm could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// The component could not be pulled from its registry.
    #[error(transparent)]
    Pull(#[from] crate::oci::PullError),
    /// `init` failed or trapped.
    #[error("plugin {plugin}: failed to start")]
    Start {
        /// The plugin.
        plugin: String,
        /// Why.
        #[source]
        source: CallError,
    },
    /// An informer could not be set up (e.g. an index name used with two fields).
    #[error("plugin {plugin}: cannot set up the informer for {kind}")]
    Informer {
        /// The plugin.
        plugin: String,
        /// The kind.
        kind: String,
        /// Why.
        #[source]
        source: informer::Error,
    },
    /// No plugin of that name runs.
    #[error("no plugin named {0:?} is running")]
    UnknownPlugin(String),
    /// The host is shutting down: no plugin is started, swapped or stopped any more.
    #[error("the host is shutting down")]
    ShuttingDown,
}

/// The running host.
pub struct Runtime {
    config: std::sync::Mutex<HostConfig>,
    engine: Arc<PluginEngine>,
    /// The threads that call plugins (`host.deliveryThreads`, read at start).
    pool: DeliveryPool,
    factory: InformerFactory,
    discovery: Discovery,
    log_observer: Option<LogObserver>,
    plugins: tokio::sync::Mutex<BTreeMap<String, Running>>,
    failed: std::sync::Mutex<BTreeMap<String, TimedError>>,
    /// The reload task: every change to the running plugins goes through it, one at a time.
    reloads: tokio::sync::mpsc::UnboundedSender<Request>,
    writes: writes::Writes,
    metrics: Arc<Metrics>,
    /// The leader election, when `host.leaderElection.enabled` with `scope: host`.
    election: Option<Arc<leader::Election>>,
    /// The plugins' elections, when `host.leaderElection.enabled` with `scope: plugin`.
    share: Option<Arc<share::Share>>,
    /// The leadership term plugins are gated by (see [`Gate`]).
    terms: Terms,
    /// With election: every configured plugin's informers, held whether or not this replica
    /// leads, so a follower's caches stay warm and a takeover costs no list.
    warm: std::sync::Mutex<BTreeMap<String, Vec<Lister>>>,
    started_at: std::time::SystemTime,
}

/// A running plugin with what a swap needs to start its next version.
struct Running {
    dispatched: DispatchedPlugin,
    config: PluginConfig,
    grants: Grants,
}

/// A plugin's kinds, resolved against the cluster.
struct Wiring {
    handled: Vec<(InformerKey, StoreOptions)>,
    read: Vec<(InformerKey, StoreOptions)>,
    /// `reconcile.owns`, then `reconcile.watches` (read-granted too).
    related: Vec<(InformerKey, StoreOptions, KeyMap)>,
}

impl Runtime {
    /// Starts every configured plugin. A plugin that fails to start is logged and reported in
    /// [`Runtime::statuses`]; the others run. Also starts the reload task, through which every
    /// later change to the plugins goes (see [`reload`](self::reload)).
    pub async fn start(
        config: HostConfig,
        client: Client,
        engine: Arc<PluginEngine>,
        mut options: RuntimeOptions,
    ) -> Arc<Self> {
        let plugins = config.plugins.clone();
        options.watch.max_object_bytes = config.host.max_object_bytes;
        options.watch.list_encoding = config.host.list_encoding;
        let (reloads, requests) = tokio::sync::mpsc::unbounded_channel();
        let mut metrics = Metrics::new();
        let client = metrics.instrument_client(client);
        let factory = InformerFactory::new(client.clone(), options.watch);
        metrics.register_informers(informer_sampler(factory.clone()));
        let terms = Terms::default();
        let settings = config.host.leader_election.clone();
        let (sender, transitions) = tokio::sync::mpsc::unbounded_channel();
        let (election, share) = match (settings.enabled, settings.scope) {
            (false, _) => (None, None),
            (true, LeaseScope::Host) => {
                metrics.set_leader(false);
                let election =
                    leader::Election::start(client.clone(), settings, terms.clone(), sender);
                (Some(election), None)
            }
            (true, LeaseScope::Plugin) => {
                metrics.set_leader(false);
                (
                    None,
                    Some(share::Share::new(client.clone(), settings, sender)),
                )
            }
        };
        let elected = election.is_some() || share.is_some();
        let pool = DeliveryPool::new(config.host.delivery_threads);
        let runtime = Arc::new(Self {
            pool,
            config: std::sync::Mutex::new(config),
            factory,
            metrics: Arc::new(metrics),
            writes: writes::Writes::new(client.clone(), options.dry_run),
            log_observer: options.log_observer,
            discovery: Discovery::new(client),
            engine,
            plugins: Default::default(),
            failed: Default::default(),
            reloads,
            election,
            share: share.clone(),
            terms,
            warm: Default::default(),
            started_at: std::time::SystemTime::now(),
        });
        // Nothing else can reach the runtime yet: these starts need not go through the task.
        for plugin in plugins {
            if let Err(e) = runtime.start_plugin(plugin.clone()).await {
                runtime.record_failure(plugin.name.as_str(), &e);
            }
        }
        tokio::spawn(reload::serve(Arc::downgrade(&runtime), requests));
        if elected {
            tokio::spawn(leadership::follow_leadership(
                Arc::downgrade(&runtime),
                transitions,
            ));
        }
        if let Some(share) = share {
            tokio::spawn(share::balance(Arc::downgrade(&runtime), share));
        }
        runtime
    }

    fn record_failure(&self, name: &str, error: &RuntimeError) {
        let text = error_chain(error);
        tracing::error!(plugin.id = %name, error = %text, "plugin not started");
        self.failed.lock().expect("failed lock").insert(
            name.to_owned(),
            TimedError::new(std::time::SystemTime::now(), text),
        );
    }

    /// The configuration the runtime was started or last reloaded with.
    pub fn config(&self) -> HostConfig {
        self.config.lock().expect("config lock").clone()
    }

    /// The informers, shared by all plugins.
    pub fn informers(&self) -> &InformerFactory {
        &self.factory
    }

    /// The metrics registry (`/metrics`).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// The engine plugins are compiled with.
    pub fn engine(&self) -> &Arc<PluginEngine> {
        &self.engine
    }

    /// Starts `plugin` (or re-subscribes it, if one of that name runs): loads and `init`s it off
    /// the event path, then subscribes it, so it receives the current cache as initial adds and
    /// then live events. A running version of it is stopped first (it delivers what it has
    /// queued) before the new one delivers anything. Goes through the reload task.
    pub async fn add_plugin(&self, plugin: PluginConfig) -> Result<(), RuntimeError> {
        self.request(|reply| Request::Add(plugin, reply))
            .await
            .unwrap_or(Err(RuntimeError::ShuttingDown))
    }

    /// [`Runtime::add_plugin`], on the reload task.
    async fn start_plugin(&self, plugin: PluginConfig) -> Result<(), RuntimeError> {
        let name = plugin.name.as_str().to_owned();
        let wiring = self.wire(&plugin).await?;
        let loaded = self.load(&plugin).await?;
        let metrics = self.metrics.plugin(&name);
        metrics.expect_calls(expected_calls(
            !wiring.handled.is_empty(),
            loaded.reconciles(),
        ));
        let mut grants = Grants::none();
        grants.count_calls(metrics.lister_calls());
        let mut handled = Vec::new();
        let mut listers = Vec::new();
        let related_keys = wiring.related.iter().map(|(k, o, _)| (k, o));
        for (key, options) in wiring
            .handled
            .iter()
            .map(|(k, o)| (k, o))
            .chain(wiring.read.iter().map(|(k, o)| (k, o)))
            .chain(related_keys)
        {
            let informer = self
                .factory
                .informer(key.clone(), options)
                .map_err(|source| RuntimeError::Informer {
                    plugin: name.clone(),
                    kind: key.resource_name(),
                    source,
                })?;
            listers.push(informer.lister());
        }
        for ((key, _), lister) in wiring.handled.iter().zip(&listers) {
            grants.grant_source(key.gvk(), Arc::new(lister.clone()));
            handled.push(HandledKind {
                gvk: key.gvk(),
                lister: lister.clone(),
            });
        }
        for ((key, _), lister) in wiring.read.iter().zip(&listers[wiring.handled.len()..]) {
            grants.grant_source(key.gvk(), Arc::new(lister.clone()));
        }
        let mut related = Vec::new();
        let first_related = wiring.handled.len() + wiring.read.len();
        for ((key, _, map), lister) in wiring.related.iter().zip(&listers[first_related..]) {
            grants.grant_source(key.gvk(), Arc::new(lister.clone()));
            related.push(RelatedKind {
                gvk: key.gvk(),
                lister: lister.clone(),
                map: map.clone(),
            });
        }
        let reconcile = ReconcileWiring {
            limits: plugin
                .reconcile
                .as_ref()
                .map(rate_limits)
                .unwrap_or_default(),
            related,
        };
        let terms = match (&self.election, &self.share) {
            (None, None) => None,
            (_, Some(share)) => Some(share.election(&name).terms().clone()),
            (Some(_), None) => Some(self.terms.clone()),
        };
        let gate = match terms {
            None => Gate::always(),
            Some(terms) => {
                self.warm
                    .lock()
                    .expect("warm lock")
                    .insert(name.clone(), listers.clone());
                let term = terms.current();
                if term == 0 {
                    tracing::info!(plugin.id = %name, leader.identity = self.identity().unwrap_or_default(), "following: plugin's informers kept warm, no handlers called");
                    self.failed.lock().expect("failed lock").remove(&name);
                    self.metrics.plugin_leader(&name, false);
                    return Ok(());
                }
                terms.gate(term)
            }
        };
        let grants = self.writes.grant(&plugin, grants, &self.metrics);
        let instance = self.start_instance(&plugin, loaded, grants.clone()).await?;
        let resync = plugin.resync.unwrap_or(self.config().host.default_resync);
        let lifecycle = plugin.lifecycle.unwrap_or(self.config().host.lifecycle);
        let timeout = self.config().host.shutdown_timeout;
        let mut plugins = self.plugins.lock().await;
        let previous = plugins
            .remove(&name)
            .map(|previous| (previous.dispatched, timeout));
        let dispatched = DispatchedPlugin::start(
            instance,
            plugin.max_queued_events,
            (!resync.is_zero()).then_some(resync),
            (!lifecycle.unload_after.is_zero()).then_some(lifecycle.unload_after),
            handled,
            listers,
            previous,
            metrics,
            gate,
            reconcile,
            &self.pool,
        );
        tracing::info!(plugin.id = %name, resources = wiring.handled.len(), reads = wiring.read.len(), related = wiring.related.len(), "plugin started");
        self.metrics.plugin_leader(&name, true);
        self.failed.lock().expect("failed lock").remove(&name);
        plugins.insert(
            name,
            Running {
                dispatched,
                config: plugin,
                grants,
            },
        );
        Ok(())
    }

    async fn load(&self, plugin: &PluginConfig) -> Result<LoadedPlugin, RuntimeError> {
        let (engine, name) = (self.engine.clone(), plugin.name.to_string());
        let source = crate::oci::PluginSource::resolve(&self.config(), plugin, &engine).await?;
        let loaded = tokio::task::spawn_blocking(move || source.load(&engine, &name));
        Ok(loaded.await.expect("plugin load task panicked")?)
    }

    async fn start_instance(
        &self,
        plugin: &PluginConfig,
        loaded: LoadedPlugin,
        grants: Grants,
    ) -> Result<PluginInstance, RuntimeError> {
        let (limits, config, name) = (
            plugin.limits.clone(),
            plugin.config_json(),
            plugin.name.to_string(),
        );
        let observer = self.log_observer.clone();
        let started = tokio::task::spawn_blocking(move || {
            PluginInstance::start(loaded, limits, grants, &config, observer)
        });
        started
            .await
            .expect("plugin start task panicked")
            .map_err(|source| RuntimeError::Start {
                plugin: name,
                source,
            })
    }

    /// Resolves the plugin's kinds and builds its informer keys and store options.
    async fn wire(&self, plugin: &PluginConfig) -> Result<Wiring, RuntimeError> {
        let strip = self.config().host.strip_managed_fields;
        let mut indexes: Vec<(Gvk, IndexSpec)> = Vec::new();
        for index in &plugin.indexes {
            let (resource, _) = self.resolve(plugin, &index.kind_ref()).await?;
            indexes.push((
                gvk_of(&resource),
                IndexSpec {
                    name: index.name.clone(),
                    path: index.field.clone(),
                },
            ));
        }
        let options_for = |gvk: &Gvk| StoreOptions {
            indexes: indexes
                .iter()
                .filter(|(g, _)| g == gvk)
                .map(|(_, spec)| spec.clone())
                .collect(),
            strip_managed_fields: strip,
        };
        let mut handled = Vec::new();
        for handle in &plugin.handles {
            let (resource, namespaced) = self.resolve(plugin, &handle.kind_ref()).await?;
            let options = options_for(&gvk_of(&resource));
            let mut key = InformerKey::new(resource, namespaced);
            if let Some(ns) = &handle.namespace {
                key = key.namespace(ns);
            }
            if let Some(selector) = &handle.label_selector {
                key = key.labels(selector);
            }
            if let Some(selector) = &handle.field_selector {
                key = key.fields(selector);
            }
            if handle.metadata_only {
                key = key.metadata_only();
            }
            handled.push((key, options));
        }
        let mut read = Vec::new();
        for kind in &plugin.read {
            let (resource, namespaced) = self.resolve(plugin, kind).await?;
            let options = options_for(&gvk_of(&resource));
            read.push((InformerKey::new(resource, namespaced), options));
        }
        let mut related = Vec::new();
        let reconcile = plugin.reconcile.clone().unwrap_or_default();
        let maps = reconcile.owns.iter().map(|_| KeyMap::Owner).chain(
            reconcile
                .watches
                .iter()
                .map(|w| KeyMap::Index(w.index.clone())),
        );
        for (kind, map) in plugin.related_kinds().iter().zip(maps) {
            let (resource, namespaced) = self.resolve(plugin, kind).await?;
            let options = options_for(&gvk_of(&resource));
            related.push((InformerKey::new(resource, namespaced), options, map));
        }
        Ok(Wiring {
            handled,
            read,
            related,
        })
    }

    async fn resolve(
        &self,
        plugin: &PluginConfig,
        kind: &KindRef,
    ) -> Result<(ApiResource, bool), RuntimeError> {
        self.discovery.resolve(plugin.name.as_str(), kind).await
    }

    /// Stops the plugin `name`: unsubscribes it (informers no one else uses stop and free their
    /// cache) and delivers what it has queued. Goes through the reload task.
    pub async fn remove_plugin(&self, name: &str) -> Result<(), RuntimeError> {
        let name = name.to_owned();
        self.request(|reply| Request::Remove(name, reply))
            .await
            .unwrap_or(Err(RuntimeError::ShuttingDown))
    }

    /// [`Runtime::remove_plugin`], on the reload task.
    async fn stop_plugin(&self, name: &str) -> Result<(), RuntimeError> {
        let removed = self
            .plugins
            .lock()
            .await
            .remove(name)
            .ok_or_else(|| RuntimeError::UnknownPlugin(name.to_owned()))?;
        self.metrics.forget_plugin_leader(name);
        let timeout = self.config().host.shutdown_timeout;
        tokio::task::spawn_blocking(move || removed.dispatched.stop(timeout))
            .await
            .expect("plugin stop task panicked");
        tracing::info!(plugin.id = %name, "plugin removed");
        Ok(())
    }

    /// Every plugin's status, failed ones included.
    pub async fn statuses(&self) -> Vec<StatusReport> {
        let mut reports: Vec<StatusReport> = self
            .plugins
            .lock()
            .await
            .values()
            .map(|r| {
                let mut report = r.dispatched.report();
                if let Some(access) = r.grants.writes() {
                    report.writes = access.writer().counts().tally();
                }
                report
            })
            .collect();
        for (name, error) in self.failed.lock().expect("failed lock").iter() {
            reports.push(PluginStatus::failed_report(name, error.clone()));
        }
        if self.election.is_some() || self.share.is_some() {
            // The plugins another replica leads: warm informers only.
            let warm = self.warm.lock().expect("warm lock");
            for (name, listers) in warm.iter() {
                if reports.iter().all(|r| &r.name != name) {
                    let synced = listers.iter().all(Lister::has_synced);
                    reports.push(PluginStatus::standby_report(name, synced));
                }
            }
        }
        reports.sort_by(|a, b| a.name.cmp(&b.name));
        reports
    }

    /// Whether every running plugin has processed its initial list.
    pub async fn is_synced(&self) -> bool {
        // With election, a replica is ready when its caches are: it can take over any plugin
        // without a list.
        let warm = self
            .warm
            .lock()
            .expect("warm lock")
            .values()
            .flatten()
            .all(Lister::has_synced);
        if !warm {
            return false;
        }
        self.plugins
            .lock()
            .await
            .values()
            .all(|p| p.dispatched.status().is_synced())
    }

    /// Waits until every running plugin is synced, or `timeout`; returns whether they are.
    pub async fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_synced().await {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every plugin, delivering what each has queued within the configured shutdown
    /// timeout; informers stop with their last subscription. Waits for a reload in progress to
    /// end; reloads asked for afterwards are refused.
    pub async fn shutdown(&self) {
        if let Some(share) = &self.share {
            share.close();
        }
        if self.request(Request::Shutdown).await.is_none() {
            // The task is gone (the runtime is being dropped): stop what is left here.
            self.stop_all().await;
        }
        if let Some(election) = &self.election {
            election.release().await;
        }
        if let Some(share) = &self.share {
            share.release_all().await;
        }
    }

    /// [`Runtime::shutdown`], on the reload task.
    async fn stop_all(&self) {
        self.stop_plugins(self.config().host.shutdown_timeout).await;
        tracing::info!("all plugins stopped");
    }

    /// Stops every running plugin, giving each `timeout` to deliver what it has queued.
    async fn stop_plugins(&self, timeout: Duration) {
        let plugins = std::mem::take(&mut *self.plugins.lock().await);
        for name in plugins.keys() {
            self.metrics.plugin_leader(name, false);
        }
        let stops: Vec<_> = plugins
            .into_values()
            .map(|plugin| tokio::task::spawn_blocking(move || plugin.dispatched.stop(timeout)))
            .collect();
        for stop in stops {
            let _ = stop.await;
        }
    }
}

/// Samples every running informer for the metrics, at scrape time.
fn informer_sampler(factory: InformerFactory) -> InformerSampler {
    Box::new(move || {
        factory
            .statuses()
            .into_iter()
            .map(|(key, status)| {
                let relists_other = status.relists - status.relists_expired;
                let selector: Vec<String> = [
                    key.label_selector.as_ref().map(|s| format!("labels {s}")),
                    key.field_selector.as_ref().map(|s| format!("fields {s}")),
                    key.metadata_only.then(|| "metadata-only".to_owned()),
                ]
                .into_iter()
                .flatten()
                .collect();
                InformerSample {
                    resource: key.resource_name(),
                    namespace: if key.namespaced {
                        key.namespace_label().to_owned()
                    } else {
                        String::new()
                    },
                    selector: selector.join("; "),
                    objects: status.objects as u64,
                    events: [
                        ("added", status.emitted.added),
                        ("updated", status.emitted.updated),
                        ("deleted", status.emitted.deleted),
                    ],
                    lists: [
                        ("start", status.lists - status.relists),
                        ("410", status.relists_expired),
                        ("error", relists_other),
                    ],
                    watch_restarts: status.errors,
                    seconds_since_last_event: status
                        .last_event_at
                        .map(|at| at.elapsed().unwrap_or_default().as_secs_f64()),
                    synced: status.synced,
                }
            })
            .collect()
    })
}

fn gvk_of(resource: &ApiResource) -> Gvk {
    Gvk {
        group: resource.group.clone(),
        version: resource.version.clone(),
        kind: resource.kind.clone(),
    }
}

/// The work queue's rate limits from `reconcile:`.
fn rate_limits(reconcile: &crate::config::ReconcileConfig) -> crate::workqueue::RateLimits {
    crate::workqueue::RateLimits {
        base: reconcile.backoff.base,
        max: reconcile.backoff.max,
        qps: reconcile.qps,
        burst: reconcile.burst,
    }
}

/// The handler calls a plugin is made for: an event of each kind it `handles` (add, update,
/// delete), and a reconcile when it exports `reconciler`.
fn expected_calls(handles: bool, reconciles: bool) -> &'static [&'static str] {
    match (handles, reconciles) {
        (true, true) => &["add", "update", "delete", "reconcile"],
        (true, false) => &["add", "update", "delete"],
        (false, true) => &["reconcile"],
        (false, false) => &[],
    }
}
