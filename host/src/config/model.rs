//! The configuration's types, field by field. Doc comments quote the YAML they describe.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{LeaderElection, Limits};
use crate::cache::{FieldPath, Gvk};
use crate::informer::ListEncoding;

/// `cluster:` — how to reach the API server. With nothing set, kube's defaults apply:
/// `$KUBECONFIG` or `~/.kube/config`, else the in-cluster service account.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterConfig {
    /// `kubeconfig: ~/.kube/config` — a kubeconfig file (relative to the config file).
    pub kubeconfig: Option<PathBuf>,
    /// `context: kind-dev` — the kubeconfig context to use (default: its current context).
    pub context: Option<String>,
    /// `inCluster: true` — use the pod's service account, ignoring any kubeconfig.
    #[serde(default)]
    pub in_cluster: bool,
}

/// `host:` — host-wide settings.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct HostSettings {
    /// `defaultResync: 0s` — resync period for plugins that set none; `0s` turns resync off.
    #[serde(with = "humantime_serde")]
    pub default_resync: Duration,
    /// `stripManagedFields: true` — drop `metadata.managedFields` from cached objects.
    pub strip_managed_fields: bool,
    /// `adminAddress: 127.0.0.1:9090` — health (`/healthz`, `/readyz`), status (`/status`) and
    /// reload (`POST /reload`) endpoint; unset: no endpoint.
    pub admin_address: Option<SocketAddr>,
    /// `adminTokenFile: admin-token` — a file whose content is the bearer token `POST /reload`
    /// requires (relative to the config file); unset: reload over HTTP is refused.
    pub admin_token_file: Option<PathBuf>,
    /// `shutdownTimeout: 10s` — how long SIGTERM waits for queued events to be delivered.
    #[serde(with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// `watchConfig: true` — reload when the config file or a plugin's wasm file changes.
    pub watch_config: bool,
    /// `maxObjectBytes: 2097152` — the largest object an informer accepts (its JSON, in bytes);
    /// a larger one is rejected with an error naming it, never cached or handed to a plugin.
    /// Read at start.
    pub max_object_bytes: usize,
    /// `listEncoding: protobuf` — how informers read LIST pages of the Kubernetes API's own kinds:
    /// `protobuf` (the API server spends less than half the CPU on it as on JSON; the host turns
    /// it into the same JSON) or `json`. Watches, custom resources and metadata-only informers
    /// are JSON either way. Read at start.
    pub list_encoding: ListEncoding,
    /// `insecureRegistries: [127.0.0.1:5000]` — registries (`host:port`, as in `oci://` references)
    /// reached over plain HTTP instead of HTTPS; meant for a registry on loopback or in a test.
    pub insecure_registries: Vec<String>,
    /// `registryAuth: /var/run/secrets/registry/.dockerconfigjson` — a Docker `config.json`
    /// (`auths`, credential helpers) with the credentials of private registries, relative to the
    /// config file; unset: `$DOCKER_CONFIG/config.json` or `~/.docker/config.json` when one exists,
    /// else anonymous.
    pub registry_auth: Option<PathBuf>,
    /// `leaderElection: {enabled: true}` — elect one replica to call handlers (see
    /// [`LeaderElection`]). Read at start.
    pub leader_election: LeaderElection,
    /// `lifecycle: {unloadAfter: 30s}` — the lifecycle of plugins that set none (see
    /// [`Lifecycle`]); off by default.
    pub lifecycle: Lifecycle,
    /// `maxInstances: 1000` — plugin instances that may be live at once: the size of the
    /// instance pool (each running plugin holds one, a hot swap briefly two; each reserves about
    /// 4 GiB of address space, not memory). Read at start.
    pub max_instances: u32,
    /// `keepResidentBytes: 16384` — how much of the memory a dropped instance wrote its slot of
    /// the pool keeps (of its linear memory, rounded up to pages, and a page of each table), reset
    /// in place, so the next instance there starts without page faults (the default covers an
    /// empty Rust plugin's start); `0`: give all of it back to the OS. An unloaded plugin's slot
    /// keeps only its tables' pages either way (its memory is given back by the unload). Needs
    /// Linux 6.7+ (`PAGEMAP_SCAN`); elsewhere nothing is kept. Read at start.
    pub keep_resident_bytes: usize,
    /// `deliveryThreads: 32` — the most OS threads that call plugins at once. A plugin holds one
    /// only while it has something to deliver, so idle plugins hold none; past the limit, busy
    /// plugins take turns. Read at start.
    pub delivery_threads: usize,
}

impl Default for HostSettings {
    fn default() -> Self {
        Self {
            default_resync: Duration::ZERO,
            strip_managed_fields: true,
            admin_address: None,
            admin_token_file: None,
            shutdown_timeout: Duration::from_secs(10),
            watch_config: true,
            max_object_bytes: 2 << 20,
            list_encoding: ListEncoding::Protobuf,
            insecure_registries: Vec::new(),
            registry_auth: None,
            leader_election: LeaderElection::default(),
            lifecycle: Lifecycle::default(),
            max_instances: 1000,
            keep_resident_bytes: crate::plugin::DEFAULT_KEEP_RESIDENT_BYTES,
            delivery_threads: crate::dispatch::DeliveryPool::DEFAULT_THREADS,
        }
    }
}

/// `lifecycle:` — when a plugin's instance is dropped while idle. Its informers, its queue and
/// its work queue stay; the next event (or due key, or resync) creates an instance again before
/// it is delivered. A plugin that exports `state` (contract 0.3.2) gets back what it saved; any
/// other starts over with `init`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct Lifecycle {
    /// `unloadAfter: 30s` — drop the instance after this long with no event delivered and no
    /// key of its work queue due within as long; `0s` (the default): never.
    #[serde(with = "humantime_serde")]
    pub unload_after: Duration,
}

/// A plugin's name: lowercase letters, digits and `-`, at most 63 characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "String")]
pub struct PluginName(String);

impl PluginName {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for PluginName {
    type Error = String;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if valid {
            Ok(Self(name))
        } else {
            Err(format!(
                "invalid plugin name {name:?}: use lowercase letters, digits and '-'"
            ))
        }
    }
}

impl fmt::Display for PluginName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A kind, as in a manifest: `{apiVersion: apps/v1, kind: ReplicaSet}`. `resource: replicasets`
/// (the plural) may stand instead of `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KindRef {
    /// `apiVersion: apps/v1` (`v1` for the core group).
    pub api_version: String,
    /// `kind: ReplicaSet`.
    pub kind: Option<String>,
    /// `resource: replicasets` — the plural resource name, instead of `kind`.
    pub resource: Option<String>,
}

impl KindRef {
    /// The group and version of `apiVersion`.
    pub fn group_version(&self) -> (&str, &str) {
        self.api_version
            .rsplit_once('/')
            .unwrap_or(("", &self.api_version))
    }

    /// The kind, if named by kind.
    pub fn gvk(&self) -> Option<Gvk> {
        self.kind
            .as_ref()
            .map(|kind| Gvk::from_api_version(&self.api_version, kind))
    }
}

impl fmt::Display for KindRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.kind, &self.resource) {
            (Some(kind), _) => write!(f, "{} {kind}", self.api_version),
            (None, Some(resource)) => write!(f, "{} {resource}", self.api_version),
            (None, None) => write!(f, "{} (no kind)", self.api_version),
        }
    }
}

/// One entry of `handles:` — a watched resource and the server-side filters of the watch.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResourceRef {
    /// `apiVersion: v1`.
    pub api_version: String,
    /// `kind: Pod` (or `resource: pods`).
    pub kind: Option<String>,
    /// `resource: pods` — the plural resource name, instead of `kind`.
    pub resource: Option<String>,
    /// `namespace: shop` — watch one namespace (default: all).
    pub namespace: Option<String>,
    /// `labelSelector: app=web,tier in (a,b)` — sent to the API server.
    pub label_selector: Option<String>,
    /// `fieldSelector: spec.nodeName=node-1` — sent to the API server.
    pub field_selector: Option<String>,
    /// `metadataOnly: true` — watch only metadata (`PartialObjectMetadata`); plugins then get
    /// objects without spec and status, for less memory.
    #[serde(default)]
    pub metadata_only: bool,
}

impl ResourceRef {
    /// The kind this entry names.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// One entry of `indexes:` — a custom index the plugin reads with `by-index`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IndexConfig {
    /// `apiVersion: v1`.
    pub api_version: String,
    /// `kind: Pod` (or `resource: pods`).
    pub kind: Option<String>,
    /// `resource: pods` — instead of `kind`.
    pub resource: Option<String>,
    /// `name: pods-by-node` — the name the plugin passes to `by-index`.
    pub name: String,
    /// `field: spec.nodeName` — dotted path, `['key']` for keys with dots, `[*]` for arrays.
    pub field: FieldPath,
}

impl IndexConfig {
    /// The kind this index is on.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// A verb of a `write:` grant.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, serde::Serialize,
)]
#[serde(rename_all = "lowercase")]
pub enum WriteVerb {
    /// `apply` — server-side apply (RBAC: `patch`, and `create` for objects that do not exist).
    Apply,
    /// `patch` — merge or JSON patch (RBAC: `patch`).
    Patch,
    /// `create` (RBAC: `create`).
    Create,
    /// `delete` (RBAC: `delete`).
    Delete,
}

impl WriteVerb {
    /// `apply`, `patch`, `create` or `delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "apply",
            Self::Patch => "patch",
            Self::Create => "create",
            Self::Delete => "delete",
        }
    }
}

impl fmt::Display for WriteVerb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `write:` — a kind the plugin may change, with which verbs and where.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteGrant {
    /// `apiVersion: v1`.
    pub api_version: String,
    /// `kind: Pod`.
    pub kind: String,
    /// `verbs: [apply, patch, create, delete]` — at least one.
    pub verbs: Vec<WriteVerb>,
    /// `namespaces: [shop]` — where; empty or absent: every namespace (and cluster-scoped objects).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// `status: true` — apply and patch may also target the `status` subresource.
    #[serde(default)]
    pub status: bool,
}

impl WriteGrant {
    /// The granted kind.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }

    /// The kind as a [`KindRef`].
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: Some(self.kind.clone()),
            resource: None,
        }
    }

    /// Whether this entry allows `verb` on an object in `namespace` (empty: cluster-scoped),
    /// to its `status` subresource if `status`.
    pub fn allows(&self, verb: WriteVerb, namespace: &str, status: bool) -> bool {
        self.verbs.contains(&verb)
            && (self.namespaces.is_empty() || self.namespaces.iter().any(|n| n == namespace))
            && (!status || self.status)
    }
}

/// One entry of `plugins:`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PluginConfig {
    /// `name: pod-logger` — unique; used in logs, metrics and `wasmformer reload NAME`.
    pub name: PluginName,
    /// `wasm: plugins/pod_logger.wasm` — the component (relative to the config file).
    pub wasm: PathBuf,
    /// `handles:` — the resources whose events the plugin receives (at least one).
    pub handles: Vec<ResourceRef>,
    /// `read:` — further kinds the plugin may read through the lister (all namespaces). A kind it
    /// handles is readable too.
    #[serde(default)]
    pub read: Vec<KindRef>,
    /// `indexes:` — custom indexes on handled or read kinds.
    #[serde(default)]
    pub indexes: Vec<IndexConfig>,
    /// `resync: 10m` — deliver the cache to the plugin again as updates (old == new) this often; `0s`
    /// turns it off. Default: `host.defaultResync`.
    #[serde(default, with = "humantime_serde")]
    pub resync: Option<Duration>,
    /// `limits:` — `deadline`, `memoryBytes`, `logBytesPerCall`, and for writes `writesPerCall`,
    /// `manifestBytes`, `writeQps`, `writeBurst`, `writeTimeout`.
    #[serde(default)]
    pub limits: Limits,
    /// `maxQueuedEvents: 10000` — past this backlog, consecutive updates of one object are
    /// coalesced (first old, last new); adds and deletes never are.
    #[serde(default = "default_max_queued_events")]
    pub max_queued_events: usize,
    /// `lifecycle: {unloadAfter: 30s}` — unload the plugin's instance while it is idle (see
    /// [`Lifecycle`]). Default: `host.lifecycle`.
    #[serde(default)]
    pub lifecycle: Option<Lifecycle>,
    /// `onSwap: live` — what a new version receives first when it is swapped in: `live` (the
    /// events after the swap; the default) or `snapshot` (the current cache as initial adds, to
    /// rebuild in-memory state, then the events after it).
    #[serde(default)]
    pub on_swap: SwapMode,
    /// `write: [{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [shop]}]` — what the
    /// plugin may change through the `writer` import; anything else answers `forbidden`.
    #[serde(default)]
    pub write: Vec<WriteGrant>,
    /// `events: true` — the plugin may record Events (about any object it names).
    #[serde(default)]
    pub events: bool,
    /// `config: {...}` — free-form; passed to the plugin's `init` as JSON.
    #[serde(default)]
    pub config: serde_json::Value,
    /// `reconcile: {owns: [...], watches: [...], backoff: {base: 5ms, max: 1000s}, qps: 10,
    /// burst: 100}` — the plugin's work queue (see [`ReconcileConfig`]). Absent: client-go's
    /// defaults, keys only from the handled kinds.
    #[serde(default)]
    pub reconcile: Option<ReconcileConfig>,
}

/// `reconcile:` — the work queue of a plugin that exports `reconciler` (contract 0.3.1): where
/// its keys come from besides the handled kinds, and how failed keys are retried. `backoff`,
/// `qps` and `burst` also pace handler retries (`Error::retry`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ReconcileConfig {
    /// `owns: [{apiVersion: apps/v1, kind: ReplicaSet}]` — an event on an object of these kinds
    /// queues the key of its controller owner (the `ownerReferences` entry with
    /// `controller: true`) if the owner's kind is a handled one. The kinds are read-granted.
    pub owns: Vec<KindRef>,
    /// `watches: [{apiVersion: v1, kind: ConfigMap, index: deployments-by-configmap}]` — an
    /// event on an object of these kinds queues every handled object in its namespace whose
    /// index `index` (an `indexes:` entry on a handled kind) holds the object's name. The kinds
    /// are read-granted.
    pub watches: Vec<WatchConfig>,
    /// `backoff: {base: 5ms, max: 1000s}` — a failed key waits `base · 2ⁿ⁻¹` after its `n`th
    /// failure in a row, at most `max`.
    pub backoff: BackoffConfig,
    /// `qps: 10` — retries per second over all keys, on average.
    pub qps: f64,
    /// `burst: 100` — retries allowed at once over all keys.
    pub burst: u32,
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self {
            owns: Vec::new(),
            watches: Vec::new(),
            backoff: BackoffConfig::default(),
            qps: 10.0,
            burst: 100,
        }
    }
}

/// `backoff:` of `reconcile:`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct BackoffConfig {
    /// `base: 5ms` — the first retry's delay.
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// `max: 1000s` — the longest delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            base: Duration::from_millis(5),
            max: Duration::from_secs(1000),
        }
    }
}

/// One entry of `reconcile.watches:`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WatchConfig {
    /// `apiVersion: v1`.
    pub api_version: String,
    /// `kind: ConfigMap` (or `resource: configmaps`).
    pub kind: Option<String>,
    /// `resource: configmaps` — instead of `kind`.
    pub resource: Option<String>,
    /// `index: deployments-by-configmap` — an `indexes:` entry on a handled kind whose values
    /// are names of watched objects.
    pub index: String,
}

impl WatchConfig {
    /// The watched kind.
    pub fn kind_ref(&self) -> KindRef {
        KindRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            resource: self.resource.clone(),
        }
    }
}

impl PluginConfig {
    /// Every kind the plugin names, with where: `handles[0]`, `read[1]`, `indexes[0]`.
    pub fn kinds(&self) -> Vec<(String, KindRef)> {
        let handles = self
            .handles
            .iter()
            .enumerate()
            .map(|(i, h)| (format!("handles[{i}]"), h.kind_ref()));
        let read = self
            .read
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("read[{i}]"), k.clone()));
        let indexes = self
            .indexes
            .iter()
            .enumerate()
            .map(|(i, x)| (format!("indexes[{i}]"), x.kind_ref()));
        let write = self
            .write
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("write[{i}]"), w.kind_ref()));
        let reconcile = self.reconcile.clone().unwrap_or_default();
        let owns = reconcile
            .owns
            .iter()
            .enumerate()
            .map(|(i, k)| (format!("reconcile.owns[{i}]"), k.clone()));
        let watches = reconcile
            .watches
            .iter()
            .enumerate()
            .map(|(i, w)| (format!("reconcile.watches[{i}]"), w.kind_ref()));
        handles
            .chain(read)
            .chain(indexes)
            .chain(write)
            .chain(owns)
            .chain(watches)
            .collect()
    }

    /// The kinds whose events queue keys without a handler call: `reconcile.owns`, then
    /// `reconcile.watches`.
    pub fn related_kinds(&self) -> Vec<KindRef> {
        let reconcile = self.reconcile.clone().unwrap_or_default();
        reconcile
            .owns
            .iter()
            .cloned()
            .chain(reconcile.watches.iter().map(WatchConfig::kind_ref))
            .collect()
    }

    /// The `config` block as the plugin's `init` receives it (`{}` when absent).
    pub fn config_json(&self) -> serde_json::Value {
        if self.config.is_null() {
            serde_json::Value::Object(Default::default())
        } else {
            self.config.clone()
        }
    }
}

fn default_max_queued_events() -> usize {
    10_000
}

/// What a new version receives first when it is swapped in (`onSwap:` in the config).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SwapMode {
    /// `live` — the events after the swap; what was queued for the old version goes on to the
    /// new one.
    #[default]
    Live,
    /// `snapshot` — a snapshot of the cache as initial adds, then the events after it; what was
    /// queued for the old version is dropped (its effect is in the cache).
    Snapshot,
}
