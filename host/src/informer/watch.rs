//! Starting kube's watcher for an [`InformerKey`] and explaining its failures.
//!
//! Objects are watched as [`DynamicObject`]s (built-in kinds and CRDs alike), or as
//! [`PartialObjectMeta`] when the key asks for metadata only (kube 5 deprecates
//! `metadata_watcher` in favour of `watcher` over `Api<PartialObjectMeta<K>>`, which sends the
//! metadata-only `Accept` header). Full objects are decoded straight into [`WireObject`]s (one
//! pass over each object's JSON, its body kept as text; see `cache::wire`), metadata-only ones
//! converted; either way with `apiVersion`/`kind` filled in (LIST items come without them).
//!
//! The watcher is configured like client-go's reflector: label and field selectors sent to the
//! server, bookmarks on, LIST pages of [`WatchSettings::page_size`]. kube re-watches from the last
//! resourceVersion when a watch closes and relists after `410 Gone`.
//!
//! **Streaming list or LIST.** Informers LIST by default, in pages, as client-go does. A
//! streaming list (`sendInitialEvents=true`, KEP-3157) serves the initial content from the watch
//! cache event by event; measured against the real API server (v1.37, 10k Pods, BENCHMARKS.md),
//! it delivered the same content 1.7× slower than paginated LIST, and the informer's initial
//! list took 1.6× client-go's. [`ListStrategy::Streaming`] asks for one anyway, and
//! [`ListStrategy::Auto`] when the server's (emulated) version is 1.34 or later, where the
//! `WatchList` feature is on by default. A server that refuses the parameter (400/422, the feature
//! gate off) or that does not finish the initial events within
//! [`WatchSettings::initial_events_timeout`] (a server that ignores the parameter never marks
//! their end) makes the informer fall back to LIST, and every later informer of the same factory
//! starts with LIST.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event};
use tokio::sync::OnceCell;
use tokio::time::Instant;
use wasmformer_protobuf::ManagedFields;

use super::InformerKey;
use super::guard::{StreamHealth, guarded_client};
use super::retry::Reachability;
use crate::cache::WireObject;

/// How the initial content is fetched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListStrategy {
    /// A streaming list on servers at 1.34 or later, LIST otherwise, falling back to LIST when the
    /// server refuses or ignores streaming.
    Auto,
    /// Paginated LIST, then WATCH (the default, as client-go's).
    #[default]
    List,
    /// WATCH with `sendInitialEvents=true` (still falls back to LIST if refused).
    Streaming,
}

/// How LIST pages are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ListEncoding {
    /// In protobuf for the Kubernetes API's own kinds (the default, as the Kubernetes controllers
    /// read them), turned into the same JSON in the host; in JSON for custom resources (which
    /// the server serves only as JSON) and metadata-only informers.
    #[default]
    Protobuf,
    /// In JSON.
    Json,
}

/// Watch parameters shared by every informer of a factory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchSettings {
    /// Objects per LIST page (client-go's default is 500).
    pub page_size: u32,
    /// How the initial content is fetched.
    pub list_strategy: ListStrategy,
    /// How LIST pages are read (`host.listEncoding`).
    pub list_encoding: ListEncoding,
    /// Server-side timeout of each WATCH request, in seconds (kube's default is 290).
    pub watch_timeout_secs: Option<u32>,
    /// How long a streaming list may take to deliver its initial events before the informer
    /// falls back to LIST.
    pub initial_events_timeout: Duration,
    /// The largest object the informer accepts, in bytes (`host.maxObjectBytes`); larger ones
    /// are rejected, never cached or delivered.
    pub max_object_bytes: usize,
}

/// The default bound on one object: a little above the API server's 1.5 MiB request limit.
pub const DEFAULT_MAX_OBJECT_BYTES: usize = 2 << 20;

impl Default for WatchSettings {
    fn default() -> Self {
        Self {
            page_size: 500,
            list_strategy: ListStrategy::List,
            list_encoding: ListEncoding::Protobuf,
            watch_timeout_secs: None,
            initial_events_timeout: Duration::from_secs(60),
            max_object_bytes: DEFAULT_MAX_OBJECT_BYTES,
        }
    }
}

/// A watch failure, with the resource and namespace it concerns. All are retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// RBAC forbids listing or watching the resource.
    #[error("forbidden: cannot {verb} {resource} {} — grant list and watch on {resource} to {user}", scope(.namespace))]
    Forbidden {
        /// `list` or `watch`.
        verb: &'static str,
        /// The resource as RBAC names it (`pods`, `deployments.apps`).
        resource: String,
        /// The namespace watched; `None` for all namespaces or cluster scope.
        namespace: Option<String>,
        /// The user the server names in its refusal.
        user: String,
        /// The watcher's error.
        #[source]
        source: watcher::Error,
    },
    /// The resourceVersion fell out of the server's watch window (410 Gone): the watcher relists.
    #[error("watch of {resource} {} expired (410 Gone); relisting", scope(.namespace))]
    Expired {
        /// The resource.
        resource: String,
        /// The namespace watched.
        namespace: Option<String>,
        /// The watcher's error.
        #[source]
        source: watcher::Error,
    },
    /// A watch event kube could not decode into an object (the watch is restarted).
    #[error("undecodable watch event for {resource} {}; restarting the watch", scope(.namespace))]
    Undecodable {
        /// The resource.
        resource: String,
        /// The namespace watched.
        namespace: Option<String>,
        /// The watcher's error.
        #[source]
        source: watcher::Error,
    },
    /// Any other failure: network, server error, undecodable response.
    #[error("cannot {verb} {resource} {}", scope(.namespace))]
    Failed {
        /// `list` or `watch`.
        verb: &'static str,
        /// The resource.
        resource: String,
        /// The namespace watched.
        namespace: Option<String>,
        /// The watcher's error.
        #[source]
        source: watcher::Error,
    },
}

fn scope(namespace: &Option<String>) -> String {
    match namespace {
        Some(ns) => format!("in namespace {ns:?}"),
        None => "in all namespaces".to_owned(),
    }
}

/// The API status code behind a watcher error, if the server answered.
fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        watcher::Error::WatchError(status) => Some(status.code),
        _ => None,
    }
}

/// The server's own message behind a watcher error, if it answered with a status.
fn status_message(error: &watcher::Error) -> Option<&str> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(&status.message),
        watcher::Error::WatchError(status) => Some(&status.message),
        _ => None,
    }
}

impl WatchError {
    /// Explains `source`, a failure of the watch of `key`.
    pub fn new(key: &InformerKey, source: watcher::Error) -> Self {
        let resource = key.resource_name();
        let namespace = key.namespace.clone();
        let verb = match source {
            watcher::Error::InitialListFailed(_) => "list",
            _ => "watch",
        };
        match status_code(&source) {
            Some(403) => {
                // `pods is forbidden: User "system:serviceaccount:ns:sa" cannot list resource …`
                let user = status_message(&source)
                    .and_then(|m| {
                        m.split_once("User \"")?
                            .1
                            .split_once('"')
                            .map(|(user, _)| user.to_owned())
                    })
                    .unwrap_or_else(|| "the informer's identity".to_owned());
                WatchError::Forbidden {
                    verb,
                    resource,
                    namespace,
                    user,
                    source,
                }
            }
            Some(410) => WatchError::Expired {
                resource,
                namespace,
                source,
            },
            _ if undecodable(&source) => WatchError::Undecodable {
                resource,
                namespace,
                source,
            },
            _ => WatchError::Failed {
                verb,
                resource,
                namespace,
                source,
            },
        }
    }

    /// The watcher's error this explains.
    pub fn watcher_error(&self) -> &watcher::Error {
        match self {
            WatchError::Forbidden { source, .. }
            | WatchError::Expired { source, .. }
            | WatchError::Undecodable { source, .. }
            | WatchError::Failed { source, .. } => source,
        }
    }

    /// One line for operators: this error and its cause (the server's message when it sent one).
    pub fn describe(&self) -> String {
        let source = self.watcher_error();
        match (self, status_message(source)) {
            (WatchError::Forbidden { .. }, _) => self.to_string(),
            (_, Some(message)) if !message.is_empty() => format!("{self}: {message}"),
            _ => crate::error_chain(self),
        }
    }
}

/// Whether `error` is a watch event kube could not decode.
fn undecodable(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchFailed(kube::Error::SerdeError(_))
    )
}

/// Whether `error`, from a streaming list's watch, means the server does not accept streaming
/// lists (the `WatchList` feature gate is off or the parameter is unknown).
pub(crate) fn refuses_streaming(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(_) | watcher::Error::WatchError(_)
    ) && matches!(status_code(error), Some(400 | 415 | 422))
}

/// A stream of watcher events with objects as received.
pub type EventStream = BoxStream<'static, watcher::Result<Event<WireObject>>>;

/// Maps the object(s) of a watcher event.
pub fn map_event<K, T>(event: Event<K>, mut f: impl FnMut(K) -> T) -> Event<T> {
    match event {
        Event::Apply(obj) => Event::Apply(f(obj)),
        Event::Delete(obj) => Event::Delete(f(obj)),
        Event::InitApply(obj) => Event::InitApply(f(obj)),
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
    }
}

/// `event` with its object as if received from a server (for scripts, recordings and tests that
/// build objects as `serde_json::Value`s); `None` when the object is not a JSON object, or its
/// labels not a map of strings (the reflector would reject it).
pub fn wire_event(event: Event<serde_json::Value>) -> Option<Event<WireObject>> {
    let wire = |v: serde_json::Value| WireObject::from_value(&v).ok();
    Some(match event {
        Event::Init => Event::Init,
        Event::InitDone => Event::InitDone,
        Event::InitApply(v) => Event::InitApply(wire(v)?),
        Event::Apply(v) => Event::Apply(wire(v)?),
        Event::Delete(v) => Event::Delete(wire(v)?),
    })
}

/// An [`EventStream`] of events whose objects are `serde_json::Value`s (see [`wire_event`];
/// events it cannot convert are dropped).
pub fn value_stream(
    events: impl futures::Stream<Item = watcher::Result<Event<serde_json::Value>>> + Send + 'static,
) -> EventStream {
    events
        .filter_map(|item| async move {
            match item {
                Ok(event) => wire_event(event).map(Ok),
                Err(error) => Some(Err(error)),
            }
        })
        .boxed()
}

/// Objects are watched as [`WireObject`]s: `Api<WireObject>` is `Api<DynamicObject>` with a
/// decoder that keeps the body as text.
impl kube::Resource for WireObject {
    type DynamicType = ApiResource;
    type Scope = kube::core::DynamicResourceScope;

    fn kind(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> std::borrow::Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &kube::core::ObjectMeta {
        WireObject::meta(self)
    }

    fn meta_mut(&mut self) -> &mut kube::core::ObjectMeta {
        WireObject::meta_mut(self)
    }
}

/// A whole object as received, `apiVersion` and `kind` set from `resource` when missing (tests
/// and tools that build `DynamicObject`s).
pub fn dynamic_value(obj: DynamicObject, resource: &ApiResource) -> WireObject {
    let text = serde_json::to_string(&obj).expect("a DynamicObject serializes");
    serde_json::from_str::<WireObject>(&text)
        .expect("a DynamicObject's JSON is an object")
        .with_default_type(&resource.api_version, &resource.kind)
}

/// An object's metadata as `PartialObjectMetadata`, as client-go's metadata informer has it
/// (`apiVersion` and `kind` as the server sent them, so another kind is seen and refused).
pub fn metadata_value(obj: PartialObjectMeta<DynamicObject>) -> WireObject {
    let (api_version, kind) = match obj.types {
        Some(types) => (types.api_version, types.kind),
        None => (METADATA_API_VERSION.to_owned(), METADATA_KIND.to_owned()),
    };
    let value =
        serde_json::json!({ "apiVersion": api_version, "kind": kind, "metadata": obj.metadata });
    WireObject::from_value(&value).expect("PartialObjectMetadata's JSON is an object")
}

/// The `apiVersion` of metadata-only objects.
pub const METADATA_API_VERSION: &str = "meta.k8s.io/v1";
/// The `kind` of metadata-only objects.
pub const METADATA_KIND: &str = "PartialObjectMetadata";

/// The watcher configuration for `key`.
pub(crate) fn watcher_config(
    key: &InformerKey,
    settings: &WatchSettings,
    streaming: bool,
) -> watcher::Config {
    let mut config = watcher::Config::default().page_size(settings.page_size);
    if let Some(labels) = &key.label_selector {
        config = config.labels(labels);
    }
    if let Some(fields) = &key.field_selector {
        config = config.fields(fields);
    }
    if let Some(timeout) = settings.watch_timeout_secs {
        config = config.timeout(timeout);
    }
    if streaming {
        config.streaming_lists()
    } else {
        config
    }
}

/// kube's watcher for `key`, objects as JSON.
pub(crate) fn watch(client: Client, key: &InformerKey, config: watcher::Config) -> EventStream {
    let resource = key.resource.clone();
    if key.metadata_only {
        let api: Api<PartialObjectMeta<DynamicObject>> = match &key.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        watcher::watcher(api, config)
            .map_ok(|event| map_event(event, metadata_value))
            .boxed()
    } else {
        let api: Api<WireObject> = match &key.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        watcher::watcher(api, config)
            .map_ok(move |event| {
                map_event(event, |obj| {
                    obj.with_default_type(&resource.api_version, &resource.kind)
                })
            })
            .boxed()
    }
}

/// What a factory's informers know about the server's streaming-list support.
#[derive(Debug, Default)]
pub(crate) struct StreamingSupport {
    by_version: OnceCell<bool>,
    refused: AtomicBool,
}

impl StreamingSupport {
    /// Whether to try a streaming list: the server is at 1.34 or later and no informer has seen
    /// it refuse one.
    async fn get(&self, client: &Client) -> bool {
        if self.refused.load(Ordering::Relaxed) {
            return false;
        }
        *self
            .by_version
            .get_or_init(|| async {
                match client.apiserver_version().await {
                    Ok(info) => {
                        let minor = info.emulation_minor.as_deref().unwrap_or(&info.minor);
                        let major = info.emulation_major.as_deref().unwrap_or(&info.major);
                        let number = |s: &str| {
                            s.trim_end_matches(|c: char| !c.is_ascii_digit())
                                .parse::<u32>()
                                .ok()
                        };
                        matches!((number(major), number(minor)), (Some(1), Some(m)) if m >= 34)
                    }
                    Err(error) => {
                        tracing::info!(
                            error = &error as &dyn std::error::Error,
                            "server version unknown; using LIST"
                        );
                        false
                    }
                }
            })
            .await
    }
}

/// The watch of one key against a server: picks the list strategy, falls back from streaming to
/// LIST, and never ends (kube's watcher recovers from every error).
pub(crate) struct ApiSource {
    /// The client, its watch responses guarded (see [`super::guard`]).
    client: Client,
    health: Arc<StreamHealth>,
    key: InformerKey,
    settings: WatchSettings,
    support: Arc<StreamingSupport>,
    reachability: Arc<Reachability>,
    stream: Option<EventStream>,
    streaming: bool,
    /// While a streaming list's watch is open but its initial events have not ended: when to
    /// give up on it (failures to open the watch do not count).
    deadline: Option<Instant>,
}

impl ApiSource {
    /// A source for `key`; `strip_managed_fields`: the store drops them, so a protobuf LIST page
    /// is written as JSON without them (never parsed only to be cut out).
    pub(crate) fn new(
        client: Client,
        key: InformerKey,
        settings: WatchSettings,
        strip_managed_fields: bool,
        support: Arc<StreamingSupport>,
        reachability: Arc<Reachability>,
    ) -> Self {
        let health = Arc::new(StreamHealth::default());
        let protobuf = (settings.list_encoding == ListEncoding::Protobuf
            && !key.metadata_only
            && wasmformer_protobuf::knows(
                &key.resource.api_version,
                &format!("{}List", key.resource.kind),
            ))
        .then_some(if strip_managed_fields {
            ManagedFields::Drop
        } else {
            ManagedFields::Keep
        });
        let client = guarded_client(client, settings.max_object_bytes, protobuf, health.clone());
        Self {
            client,
            health,
            key,
            settings,
            support,
            reachability,
            stream: None,
            streaming: false,
            deadline: None,
        }
    }

    /// The bound on one object.
    pub(crate) fn max_object_bytes(&self) -> usize {
        self.settings.max_object_bytes
    }

    /// Notices the server answer again (shared by the factory's informers).
    pub(crate) fn reachability(&self) -> &Arc<Reachability> {
        &self.reachability
    }

    /// What the guard has refused in this source's watch streams.
    pub(crate) fn health(&self) -> Arc<StreamHealth> {
        self.health.clone()
    }

    /// The strategy in use (`List` or `Streaming`), once the watch has started.
    pub(crate) fn strategy(&self) -> Option<ListStrategy> {
        self.stream.as_ref().map(|_| {
            if self.streaming {
                ListStrategy::Streaming
            } else {
                ListStrategy::List
            }
        })
    }

    fn start(&mut self, streaming: bool) {
        self.streaming = streaming;
        self.deadline = None;
        let config = watcher_config(&self.key, &self.settings, streaming);
        self.stream = Some(watch(self.client.clone(), &self.key, config));
    }

    fn fall_back(&mut self, reason: &'static str) {
        tracing::warn!(reason, "streaming list unavailable; falling back to LIST");
        self.support.refused.store(true, Ordering::Relaxed);
        self.start(false);
    }

    /// The next watcher event or error.
    pub(crate) async fn next(&mut self) -> watcher::Result<Event<WireObject>> {
        if self.stream.is_none() {
            let streaming = match self.settings.list_strategy {
                ListStrategy::List => false,
                ListStrategy::Streaming => true,
                ListStrategy::Auto => self.support.get(&self.client).await,
            };
            self.start(streaming);
        }
        loop {
            let stream = self.stream.as_mut().expect("started above");
            let item = match self.deadline {
                Some(deadline) => match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(item) => item,
                    Err(_) => {
                        self.fall_back("initial events not finished in time");
                        continue;
                    }
                },
                None => stream.next().await,
            };
            // kube's watcher stream never ends; if it did, start over.
            let Some(item) = item else {
                self.start(self.streaming);
                continue;
            };
            match &item {
                // The streaming list's watch is established: its initial events must now end.
                Ok(Event::Init) if self.streaming => {
                    self.deadline = Some(Instant::now() + self.settings.initial_events_timeout);
                }
                Ok(Event::InitDone) => self.deadline = None,
                Err(error) if self.streaming && refuses_streaming(error) => {
                    self.fall_back("server refused sendInitialEvents");
                    continue;
                }
                Err(error) if undecodable(error) => {
                    // kube skips the event and reads on; client-go restarts the watch. kube's
                    // watcher cannot resume from its last resourceVersion on request, so it
                    // starts over (a relist).
                    self.health.record_undecodable(format!(
                        "undecodable watch event ({error}); watch restarted"
                    ));
                    self.start(self.streaming);
                }
                _ => {}
            }
            return item;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informer::spec::InformerKey;

    fn pods() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&())
    }

    fn api_error(code: u16, message: &str) -> kube::Error {
        let mut status = kube::core::Status::failure(message, "Forbidden");
        status.code = code;
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn forbidden_names_verb_resource_namespace_and_user() {
        let key = InformerKey::new(pods(), true).namespace("prod");
        let denied = api_error(
            403,
            "pods is forbidden: User \"system:serviceaccount:ops:wasmformer\" cannot list resource \"pods\" in API group \"\" in the namespace \"prod\"",
        );
        let err = WatchError::new(&key, watcher::Error::InitialListFailed(denied));
        assert_eq!(
            err.describe(),
            "forbidden: cannot list pods in namespace \"prod\" — grant list and watch on pods to system:serviceaccount:ops:wasmformer"
        );
        let err = WatchError::new(
            &InformerKey::new(pods(), true),
            watcher::Error::WatchStartFailed(api_error(500, "etcd down")),
        );
        assert_eq!(
            err.describe(),
            "cannot watch pods in all namespaces: etcd down"
        );
        assert!(matches!(
            WatchError::new(
                &key,
                watcher::Error::WatchError(Box::new(kube::core::Status {
                    code: 410,
                    ..Default::default()
                }))
            ),
            WatchError::Expired { .. }
        ));
    }

    #[test]
    fn config_pushes_selectors_down_and_pages() {
        let key = InformerKey::new(pods(), true)
            .labels("app=web")
            .fields("spec.nodeName=n1");
        let config = watcher_config(
            &key,
            &WatchSettings {
                page_size: 50,
                ..WatchSettings::default()
            },
            false,
        );
        assert_eq!(config.label_selector.as_deref(), Some("app=web"));
        assert_eq!(config.field_selector.as_deref(), Some("spec.nodeName=n1"));
        assert_eq!(config.page_size, Some(50));
        assert!(config.bookmarks);
        assert_eq!(
            config.initial_list_strategy,
            watcher::InitialListStrategy::ListWatch
        );
        let streaming = watcher_config(&key, &WatchSettings::default(), true);
        assert_eq!(
            streaming.initial_list_strategy,
            watcher::InitialListStrategy::StreamingList
        );
    }

    #[test]
    fn refusal_of_streaming_is_a_400_or_422_on_the_watch() {
        assert!(refuses_streaming(&watcher::Error::WatchStartFailed(
            api_error(422, "sendInitialEvents is forbidden")
        )));
        assert!(!refuses_streaming(&watcher::Error::WatchStartFailed(
            api_error(403, "no")
        )));
        assert!(!refuses_streaming(&watcher::Error::InitialListFailed(
            api_error(422, "no")
        )));
    }

    #[test]
    fn values_carry_api_version_and_kind() {
        let mut obj = DynamicObject::new("web", &pods()).within("prod");
        obj.types = None; // as in a LIST response
        let value = dynamic_value(obj, &pods());
        assert_eq!(
            (value.api_version(), value.kind()),
            (Some("v1"), Some("Pod"))
        );
        let metadata = kube::core::ObjectMeta {
            name: Some("web".into()),
            ..Default::default()
        };
        let meta = PartialObjectMeta::<DynamicObject> {
            types: None,
            metadata,
            _phantom: std::marker::PhantomData,
        };
        let value = metadata_value(meta);
        assert_eq!(value.kind(), Some("PartialObjectMetadata"));
        assert_eq!(value.meta().name.as_deref(), Some("web"));
    }
}
