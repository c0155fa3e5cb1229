//! Fault injection: close every open watch, compact the history (older watches and continue
//! tokens get 410), fail, delay or strip parameters from the next N matching requests, send a raw
//! line in a watch stream (an object of another kind, a truncated event, a huge object), report
//! another Kubernetes version, and pause the server. Tests use the [`Faults`] handle;
//! `wasmformer dev` users use the `/wasmformer-dev/faults/...` endpoints.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde_json::json;
use tokio::sync::watch;

use crate::{
    discovery::KUBERNETES_VERSION,
    request_log::{RequestRecord, Verb},
    status::ApiStatus,
    store::Store,
};

/// How an injected failure answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// 500 InternalError.
    InternalError,
    /// 429 TooManyRequests with `Retry-After`.
    TooManyRequests {
        /// The `Retry-After` value in seconds.
        retry_after_seconds: u64,
    },
    /// 403 Forbidden, worded as RBAC denies the request to `user`: `pods is forbidden: User
    /// "system:serviceaccount:ops:app" cannot list resource "pods" in API group "" in the
    /// namespace "prod"`.
    Forbidden {
        /// The user the message names.
        user: &'static str,
    },
    /// 422 Invalid, as the validation of request options refuses a parameter, for example
    /// `sendInitialEvents` on a server whose `WatchList` feature gate is off.
    Invalid {
        /// The refused parameter (`sendInitialEvents`).
        field: &'static str,
        /// Why (`sendInitialEvents is forbidden for watch unless the WatchList feature gate is
        /// enabled`).
        detail: &'static str,
    },
}

impl Failure {
    /// The failure for an HTTP code: 500 or 429 (with `Retry-After: 1`).
    pub fn from_code(code: u16) -> Option<Self> {
        match code {
            500 => Some(Self::InternalError),
            429 => Some(Self::TooManyRequests {
                retry_after_seconds: 1,
            }),
            _ => None,
        }
    }

    fn status(self, record: &RequestRecord) -> ApiStatus {
        match self {
            Self::InternalError => {
                ApiStatus::internal("injected failure (wasmformer dev cluster fault injection)")
            }
            Self::TooManyRequests {
                retry_after_seconds,
            } => ApiStatus::too_many_requests(retry_after_seconds),
            Self::Forbidden { user } => forbidden(record, user),
            Self::Invalid { field, detail } => {
                let kind = if record.verb == Verb::Watch {
                    "WatchOptions"
                } else {
                    "ListOptions"
                };
                ApiStatus::invalid_options(kind, field, detail)
            }
        }
    }
}

/// The API server's answer when RBAC denies `record` to `user`.
fn forbidden(record: &RequestRecord, user: &str) -> ApiStatus {
    let Some(qualified) = record.resource.as_deref() else {
        let verb = record.method.to_lowercase();
        let message = format!(
            "forbidden: User {user:?} cannot {verb} path {:?}",
            record.path
        );
        return ApiStatus::new(403, "Forbidden", message);
    };
    let (resource, group) = qualified.split_once('.').unwrap_or((qualified, ""));
    let resource = match &record.subresource {
        Some(subresource) => format!("{resource}/{subresource}"),
        None => resource.to_owned(),
    };
    let verb = record.verb.name();
    let scope = match &record.namespace {
        Some(namespace) => format!("in the namespace {namespace:?}"),
        None => "at the cluster scope".to_owned(),
    };
    let denial =
        format!("User {user:?} cannot {verb} resource {resource:?} in API group {group:?} {scope}");
    let mut details = json!({"kind": resource});
    if !group.is_empty() {
        details["group"] = json!(group);
    }
    let message = match &record.name {
        Some(name) => {
            details["name"] = json!(name);
            format!("{qualified} {name:?} is forbidden: {denial}")
        }
        None => format!("{qualified} is forbidden: {denial}"),
    };
    ApiStatus {
        details: Some(details),
        ..ApiStatus::new(403, "Forbidden", message)
    }
}

/// Which requests a fault applies to; the default matches every API request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestFilter {
    /// Only this verb.
    pub verb: Option<Verb>,
    /// Only this resource (`pods`, `deployments.apps`).
    pub resource: Option<String>,
    /// Only requests with these query parameters (decoded values, as the request log shows
    /// them: `sendInitialEvents` = `true`).
    pub params: BTreeMap<String, String>,
}

impl RequestFilter {
    /// Matches requests with this verb.
    #[must_use]
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Matches requests on this resource.
    #[must_use]
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Matches requests whose query parameter `key` is `value`.
    #[must_use]
    pub fn param(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.params.insert(key.into(), value.into());
        self
    }

    fn matches(&self, record: &RequestRecord) -> bool {
        self.verb.is_none_or(|v| v == record.verb)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| record.resource.as_ref() == Some(r))
            && self
                .params
                .iter()
                .all(|(key, value)| record.param(key) == Some(value))
    }
}

#[derive(Clone, Debug)]
enum Action {
    Fail(Failure),
    Delay(Duration),
    IgnoreParams(Vec<String>),
}

/// What [`Faults::gate`] lets through to be served.
#[derive(Debug, Default)]
pub(crate) struct Admission {
    /// Query parameters to serve the request without.
    pub ignored_params: Vec<String>,
}

#[derive(Clone, Debug)]
struct Rule {
    remaining: u32,
    action: Action,
    filter: RequestFilter,
}

/// A cheap, cloneable handle to the server's fault controls.
#[derive(Clone, Debug)]
pub struct Faults {
    inner: Arc<Inner>,
}

/// A line a matching watch stream sends as it is.
#[derive(Clone, Debug)]
struct WatchLine {
    filter: RequestFilter,
    line: Vec<u8>,
}

#[derive(Debug)]
struct Inner {
    store: Store,
    close: watch::Sender<u64>,
    /// Raw lines waiting for a watch stream, and a counter that wakes open streams.
    watch_lines: Mutex<Vec<WatchLine>>,
    lines_added: watch::Sender<u64>,
    paused: watch::Sender<bool>,
    rules: Mutex<Vec<Rule>>,
    /// `(major, minor)` for `/version` instead of [`KUBERNETES_VERSION`].
    reported_version: Mutex<Option<(String, String)>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl Faults {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                close: watch::channel(0).0,
                watch_lines: Mutex::new(Vec::new()),
                lines_added: watch::channel(0).0,
                paused: watch::channel(false).0,
                rules: Mutex::new(Vec::new()),
                reported_version: Mutex::new(None),
                stopping: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Ends every open watch stream cleanly (clients re-watch from their last resourceVersion).
    pub fn close_watches(&self) {
        self.inner.close.send_modify(|generation| *generation += 1);
    }

    /// Drops the event history: watches or continue tokens from before now get 410 Gone.
    pub fn compact(&self) {
        self.inner.store.compact();
    }

    /// Fails the next `count` API requests.
    pub fn fail_next(&self, count: u32, failure: Failure) {
        self.fail_next_matching(RequestFilter::default(), count, failure);
    }

    /// Fails the next `count` API requests that match `filter`.
    pub fn fail_next_matching(&self, filter: RequestFilter, count: u32, failure: Failure) {
        self.add(filter, count, Action::Fail(failure));
    }

    /// Delays the next `count` API requests by `delay`.
    pub fn delay_next(&self, count: u32, delay: Duration) {
        self.delay_next_matching(RequestFilter::default(), count, delay);
    }

    /// Delays the next `count` API requests that match `filter` by `delay`.
    pub fn delay_next_matching(&self, filter: RequestFilter, count: u32, delay: Duration) {
        self.add(filter, count, Action::Delay(delay));
    }

    /// Serves the next `count` requests that match `filter` as if their query parameters
    /// `params` were absent, as a server (or proxy) that predates those parameters does. The
    /// request log still shows them.
    pub fn ignore_params_matching(&self, filter: RequestFilter, count: u32, params: &[&str]) {
        let params = params.iter().map(|p| (*p).to_owned()).collect();
        self.add(filter, count, Action::IgnoreParams(params));
    }

    /// Makes the first watch stream matching `filter` (an open one, or the next one opened)
    /// send `line` as its next line, exactly as given plus a newline: what a broken or hostile
    /// server sends, such as an object of another kind, a truncated event or a huge object.
    /// Each call sends the line once, in one stream.
    pub fn send_watch_line(&self, filter: RequestFilter, line: impl Into<Vec<u8>>) {
        let mut line = line.into();
        line.push(b'\n');
        self.watch_lines_guard().push(WatchLine { filter, line });
        self.inner.lines_added.send_modify(|added| *added += 1);
    }

    /// Takes the first raw line waiting for a watch stream that `record` started.
    pub(crate) fn take_watch_line(&self, record: &RequestRecord) -> Option<Vec<u8>> {
        let mut lines = self.watch_lines_guard();
        let index = lines.iter().position(|l| l.filter.matches(record))?;
        Some(lines.remove(index).line)
    }

    /// Changes when a raw line is queued for watch streams.
    pub(crate) fn watch_lines_added(&self) -> watch::Receiver<u64> {
        self.inner.lines_added.subscribe()
    }

    fn watch_lines_guard(&self) -> std::sync::MutexGuard<'_, Vec<WatchLine>> {
        self.inner
            .watch_lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `/version` report `major.minor` (`"1"`, `"31"`) until [`Faults::clear`]: to clients
    /// that choose by version, a server of that version. What is served does not change.
    pub fn report_version(&self, major: impl Into<String>, minor: impl Into<String>) {
        *self.version_guard() = Some((major.into(), minor.into()));
    }

    /// The `(major, minor)` version `/version` reports.
    pub fn reported_version(&self) -> (String, String) {
        self.version_guard().clone().unwrap_or_else(|| {
            let (major, minor) = KUBERNETES_VERSION;
            (major.to_owned(), minor.to_owned())
        })
    }

    /// Holds every new API request until [`Faults::resume`]. Open watches keep streaming.
    pub fn pause(&self) {
        self.inner.paused.send_replace(true);
    }

    /// Releases held requests.
    pub fn resume(&self) {
        self.inner.paused.send_replace(false);
    }

    /// Whether requests are held.
    pub fn is_paused(&self) -> bool {
        *self.inner.paused.borrow()
    }

    /// Forgets pending fail/delay/ignore rules, unsent watch lines and a reported version, and
    /// resumes.
    pub fn clear(&self) {
        self.rules().clear();
        self.watch_lines_guard().clear();
        *self.version_guard() = None;
        self.resume();
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.inner.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn version_guard(&self) -> std::sync::MutexGuard<'_, Option<(String, String)>> {
        self.inner
            .reported_version
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, filter: RequestFilter, count: u32, action: Action) {
        if count > 0 {
            self.rules().push(Rule {
                remaining: count,
                action,
                filter,
            });
        }
    }

    /// Takes one use of the first rule that matches and whose action `pick` accepts.
    fn take<T>(&self, record: &RequestRecord, pick: impl Fn(&Action) -> Option<T>) -> Option<T> {
        let mut rules = self.rules();
        let index = rules
            .iter()
            .position(|r| r.filter.matches(record) && pick(&r.action).is_some())?;
        let found = pick(&rules[index].action);
        rules[index].remaining -= 1;
        if rules[index].remaining == 0 {
            rules.remove(index);
        }
        found
    }

    /// Follows close-watches requests; a watch ends when this changes.
    pub(crate) fn watch_closer(&self) -> watch::Receiver<u64> {
        self.inner.close.subscribe()
    }

    /// The server is shutting down: release held requests, end watches, refuse new requests.
    pub(crate) fn stop(&self) {
        self.inner
            .stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.clear();
        self.close_watches();
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.inner
            .stopping
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Applies pause, delay, failure and ignored parameters to a request before it is served.
    pub(crate) async fn gate(&self, record: &RequestRecord) -> Result<Admission, ApiStatus> {
        let mut paused = self.inner.paused.subscribe();
        // The sender lives as long as `self`, so this only returns once resumed.
        let _ = paused.wait_for(|p| !p).await;
        if self.is_stopping() {
            return Err(ApiStatus::new(
                503,
                "ServiceUnavailable",
                "the dev cluster is shutting down",
            ));
        }
        let delay = self.take(record, |a| match a {
            Action::Delay(d) => Some(*d),
            _ => None,
        });
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let failure = self.take(record, |a| match a {
            Action::Fail(f) => Some(*f),
            _ => None,
        });
        if let Some(failure) = failure {
            return Err(failure.status(record));
        }
        let ignored_params = self
            .take(record, |a| match a {
                Action::IgnoreParams(params) => Some(params.clone()),
                _ => None,
            })
            .unwrap_or_default();
        Ok(Admission { ignored_params })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn record(verb: Verb, resource: &str) -> RequestRecord {
        RequestRecord {
            seq: 1,
            method: "GET".into(),
            path: String::new(),
            verb,
            resource: Some(resource.into()),
            namespace: None,
            name: None,
            subresource: None,
            query: BTreeMap::new(),
            accept: None,
        }
    }

    fn with_param(mut record: RequestRecord, key: &str, value: &str) -> RequestRecord {
        record.query.insert(key.into(), value.into());
        record
    }

    #[tokio::test]
    async fn fail_next_counts_down_matching_requests_only() {
        let faults = Faults::new(Store::new(10));
        faults.fail_next_matching(
            RequestFilter::default().verb(Verb::List).resource("pods"),
            2,
            Failure::InternalError,
        );
        assert!(faults.gate(&record(Verb::Watch, "pods")).await.is_ok());
        assert!(faults.gate(&record(Verb::List, "nodes")).await.is_ok());
        assert_eq!(
            faults
                .gate(&record(Verb::List, "pods"))
                .await
                .unwrap_err()
                .code,
            500
        );
        assert_eq!(
            faults
                .gate(&record(Verb::List, "pods"))
                .await
                .unwrap_err()
                .code,
            500
        );
        assert!(faults.gate(&record(Verb::List, "pods")).await.is_ok());
    }

    #[tokio::test]
    async fn too_many_requests_and_delays() {
        let faults = Faults::new(Store::new(10));
        faults.fail_next(1, Failure::from_code(429).unwrap());
        faults.delay_next(1, Duration::from_millis(30));
        let started = tokio::time::Instant::now();
        let status = faults.gate(&record(Verb::Get, "pods")).await.unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert_eq!((status.code, status.retry_after), (429, Some(1)));
        assert!(faults.gate(&record(Verb::Get, "pods")).await.is_ok());
    }

    #[tokio::test]
    async fn paused_requests_wait_for_resume() {
        let faults = Faults::new(Store::new(10));
        faults.pause();
        let held = tokio::spawn({
            let faults = faults.clone();
            async move { faults.gate(&record(Verb::Get, "pods")).await }
        });
        tokio::task::yield_now().await;
        assert!(!held.is_finished());
        faults.resume();
        let outcome = tokio::time::timeout(Duration::from_secs(5), held)
            .await
            .unwrap()
            .unwrap();
        assert!(outcome.is_ok());
    }

    #[tokio::test]
    async fn close_watches_notifies_subscribers() {
        let faults = Faults::new(Store::new(10));
        let mut closer = faults.watch_closer();
        faults.close_watches();
        tokio::time::timeout(Duration::from_secs(5), closer.changed())
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn forbidden_is_worded_like_an_rbac_denial_of_the_request() {
        let faults = Faults::new(Store::new(10));
        let user = "system:serviceaccount:ops:app";
        faults.fail_next(3, Failure::Forbidden { user });
        let mut list = record(Verb::List, "pods");
        list.namespace = Some("prod".into());
        let status = faults.gate(&list).await.unwrap_err();
        assert_eq!((status.code, status.reason), (403, "Forbidden"));
        assert_eq!(
            status.message,
            r#"pods is forbidden: User "system:serviceaccount:ops:app" cannot list resource "pods" in API group "" in the namespace "prod""#
        );
        let mut get = record(Verb::Get, "deployments.apps");
        get.name = Some("web".into());
        get.subresource = Some("scale".into());
        let status = faults.gate(&get).await.unwrap_err();
        assert_eq!(
            status.message,
            r#"deployments.apps "web" is forbidden: User "system:serviceaccount:ops:app" cannot get resource "deployments/scale" in API group "apps" at the cluster scope"#
        );
        assert_eq!(
            status.details,
            Some(json!({"kind": "deployments/scale", "group": "apps", "name": "web"}))
        );
        let mut version = record(Verb::Discovery, "");
        version.resource = None;
        version.path = "/version".into();
        let status = faults.gate(&version).await.unwrap_err();
        assert_eq!(
            status.message,
            r#"forbidden: User "system:serviceaccount:ops:app" cannot get path "/version""#
        );
    }

    #[tokio::test]
    async fn filters_on_query_parameters_and_refuses_them_as_invalid() {
        let faults = Faults::new(Store::new(10));
        let detail =
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled";
        faults.fail_next_matching(
            RequestFilter::default()
                .verb(Verb::Watch)
                .param("sendInitialEvents", "true"),
            1,
            Failure::Invalid {
                field: "sendInitialEvents",
                detail,
            },
        );
        assert!(faults.gate(&record(Verb::Watch, "pods")).await.is_ok());
        let other_value = with_param(record(Verb::Watch, "pods"), "sendInitialEvents", "false");
        assert!(faults.gate(&other_value).await.is_ok());
        let streaming = with_param(record(Verb::Watch, "pods"), "sendInitialEvents", "true");
        let status = faults.gate(&streaming).await.unwrap_err();
        assert_eq!((status.code, status.reason), (422, "Invalid"));
        assert_eq!(
            status.message,
            format!("WatchOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: {detail}")
        );
        assert!(faults.gate(&streaming).await.is_ok(), "used up");
    }

    #[tokio::test]
    async fn ignored_parameters_are_handed_out_to_matching_requests_only() {
        let faults = Faults::new(Store::new(10));
        faults.ignore_params_matching(
            RequestFilter::default().verb(Verb::Watch),
            1,
            &["sendInitialEvents", "resourceVersionMatch"],
        );
        let list = faults.gate(&record(Verb::List, "pods")).await.unwrap();
        assert!(list.ignored_params.is_empty());
        let watch = faults.gate(&record(Verb::Watch, "pods")).await.unwrap();
        assert_eq!(
            watch.ignored_params,
            ["sendInitialEvents", "resourceVersionMatch"]
        );
        let again = faults.gate(&record(Verb::Watch, "pods")).await.unwrap();
        assert!(again.ignored_params.is_empty(), "used up");
    }

    #[test]
    fn a_reported_version_lasts_until_cleared() {
        let faults = Faults::new(Store::new(10));
        let default = || {
            (
                KUBERNETES_VERSION.0.to_owned(),
                KUBERNETES_VERSION.1.to_owned(),
            )
        };
        assert_eq!(faults.reported_version(), default());
        faults.report_version("1", "31");
        assert_eq!(faults.reported_version(), ("1".to_owned(), "31".to_owned()));
        faults.clear();
        assert_eq!(faults.reported_version(), default());
    }

    /// A raw line reaches the first matching watch as it is, once.
    #[tokio::test]
    async fn a_watch_stream_sends_an_injected_line_as_it_is() {
        use futures::StreamExt;
        use kube::api::{Api, DynamicObject, WatchEvent, WatchParams};
        use kube::discovery::ApiResource;

        let dev = crate::DevCluster::start(crate::DevClusterConfig::default())
            .await
            .unwrap();
        let pods = ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&());
        let api: Api<DynamicObject> = Api::namespaced_with(dev.client().unwrap(), "default", &pods);
        let line = json!({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "intruder", "namespace": "default", "resourceVersion": "7"}}});
        dev.faults().send_watch_line(
            RequestFilter::default()
                .verb(Verb::Watch)
                .resource("configmaps"),
            "not for pods",
        );
        dev.faults().send_watch_line(
            RequestFilter::default().verb(Verb::Watch).resource("pods"),
            line.to_string(),
        );
        let rv = dev.store().resource_version().to_string();
        let mut events = api
            .watch(&WatchParams::default(), &rv)
            .await
            .unwrap()
            .boxed();
        let first = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap();
        let Some(Ok(WatchEvent::Added(object))) = first else {
            panic!("expected the injected ADDED event, got {first:?}");
        };
        assert_eq!(object.types.unwrap().kind, "ConfigMap");
        assert_eq!(object.metadata.name.as_deref(), Some("intruder"));
        dev.faults().clear();
        dev.shutdown().await.unwrap();
    }

    /// The faults above, through the HTTP server and a kube client.
    #[tokio::test]
    async fn a_kube_client_sees_the_reported_version_ignored_parameters_and_denials() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, ListParams};

        let dev = crate::DevCluster::start(crate::DevClusterConfig::default())
            .await
            .unwrap();
        let client = dev.client().unwrap();
        dev.faults().report_version("1", "31");
        assert_eq!(client.apiserver_version().await.unwrap().minor, "31");

        for name in ["a", "b"] {
            let labels = json!({"app": name});
            dev.store()
                .create_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "default", "labels": labels}}))
                .unwrap();
        }
        let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
        let only_a = ListParams::default().labels("app=a");
        dev.faults().ignore_params_matching(
            RequestFilter::default().resource("configmaps"),
            1,
            &["labelSelector"],
        );
        assert_eq!(configmaps.list(&only_a).await.unwrap().items.len(), 2);
        assert_eq!(configmaps.list(&only_a).await.unwrap().items.len(), 1);
        let seen = dev.request_log().records();
        assert!(
            seen.iter()
                .filter(|r| r.is(Verb::List, "configmaps"))
                .all(|r| r.param("labelSelector") == Some("app=a")),
            "the log shows what was sent: {seen:?}"
        );

        dev.faults().fail_next_matching(
            RequestFilter::default().resource("configmaps"),
            1,
            Failure::Forbidden { user: "jane" },
        );
        let Err(kube::Error::Api(status)) = configmaps.list(&ListParams::default()).await else {
            panic!("the list was not refused");
        };
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        assert!(
            status
                .message
                .starts_with(r#"configmaps is forbidden: User "jane" cannot list"#)
        );
        dev.shutdown().await.unwrap();
    }
}
