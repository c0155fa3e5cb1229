//! Fault injection: close every open watch, compact the history (older watches and continue
//! tokens get 410), fail or delay the next N matching requests, and pause the server. Tests use
//! the [`Faults`] handle; `wasmformer dev` users use the `/wasmformer-dev/faults/...` endpoints.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::sync::watch;

use crate::{
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

    fn status(self) -> ApiStatus {
        match self {
            Self::InternalError => {
                ApiStatus::internal("injected failure (wasmformer dev cluster fault injection)")
            }
            Self::TooManyRequests {
                retry_after_seconds,
            } => ApiStatus::too_many_requests(retry_after_seconds),
        }
    }
}

/// Which requests a fault applies to; the default matches every API request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestFilter {
    /// Only this verb.
    pub verb: Option<Verb>,
    /// Only this resource (`pods`, `deployments.apps`).
    pub resource: Option<String>,
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

    fn matches(&self, record: &RequestRecord) -> bool {
        self.verb.is_none_or(|v| v == record.verb)
            && self
                .resource
                .as_ref()
                .is_none_or(|r| record.resource.as_ref() == Some(r))
    }
}

#[derive(Clone, Debug)]
enum Action {
    Fail(Failure),
    Delay(Duration),
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

#[derive(Debug)]
struct Inner {
    store: Store,
    close: watch::Sender<u64>,
    paused: watch::Sender<bool>,
    rules: Mutex<Vec<Rule>>,
    stopping: std::sync::atomic::AtomicBool,
}

impl Faults {
    pub(crate) fn new(store: Store) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                close: watch::channel(0).0,
                paused: watch::channel(false).0,
                rules: Mutex::new(Vec::new()),
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

    /// Forgets pending fail/delay rules and resumes.
    pub fn clear(&self) {
        self.rules().clear();
        self.resume();
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.inner.rules.lock().unwrap_or_else(|p| p.into_inner())
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

    /// Applies pause, delay and failure to a request before it is served.
    pub(crate) async fn gate(&self, record: &RequestRecord) -> Result<(), ApiStatus> {
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
            Action::Fail(_) => None,
        });
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let failure = self.take(record, |a| match a {
            Action::Fail(f) => Some(*f),
            Action::Delay(_) => None,
        });
        failure.map_or(Ok(()), |f| Err(f.status()))
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
        }
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
}
