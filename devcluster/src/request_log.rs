//! The request log: every API request the server received (before faults are applied), with its
//! verb, resource and query parameters, so tests can assert "no new LIST", "the watch resumed
//! from resourceVersion N" or "the label selector was pushed down".

use std::{
    collections::{BTreeMap, VecDeque},
    sync::{Arc, Mutex},
};

use serde::Serialize;
use tokio::sync::watch;

/// What a request does, in the API server's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true` (or the `/watch/` path).
    Watch,
    /// POST to a collection.
    Create,
    /// PUT of an object.
    Update,
    /// PATCH of an object.
    Patch,
    /// DELETE of an object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
    /// `/api`, `/apis`, `/version`, `/openapi`...
    Discovery,
    /// Anything else.
    Other,
}

impl Verb {
    /// Parses the lower-case form used in URLs (`list`, `watch`, `deletecollection`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "get" => Self::Get,
            "list" => Self::List,
            "watch" => Self::Watch,
            "create" => Self::Create,
            "update" => Self::Update,
            "patch" => Self::Patch,
            "delete" => Self::Delete,
            "deletecollection" => Self::DeleteCollection,
            "discovery" => Self::Discovery,
            _ => return None,
        })
    }

    /// The lower-case name (`list`, `watch`, `deletecollection`), as RBAC and URLs spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
            Self::Discovery => "discovery",
            Self::Other => "other",
        }
    }
}

/// One received request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    /// Position in the log, from 1.
    pub seq: u64,
    /// HTTP method.
    pub method: String,
    /// URL path.
    pub path: String,
    /// What the request does.
    pub verb: Verb,
    /// `pods`, `deployments.apps`; `None` for non-resource requests.
    pub resource: Option<String>,
    /// Namespace in the URL.
    pub namespace: Option<String>,
    /// Object name in the URL.
    pub name: Option<String>,
    /// Subresource in the URL (`status`).
    pub subresource: Option<String>,
    /// Decoded query parameters (`labelSelector`, `resourceVersion`, `continue`...).
    pub query: BTreeMap<String, String>,
    /// The `Accept` header, which picks the representation (`application/json`, a `Table`,
    /// `PartialObjectMetadata`).
    pub accept: Option<String>,
}

impl RequestRecord {
    /// A query parameter.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query.get(key).map(String::as_str)
    }

    /// Whether this is `verb` on `resource` (as in [`RequestRecord::resource`]).
    pub fn is(&self, verb: Verb, resource: &str) -> bool {
        self.verb == verb && self.resource.as_deref() == Some(resource)
    }
}

/// A shared, bounded log of received requests.
#[derive(Clone, Debug)]
pub struct RequestLog {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    records: Mutex<VecDeque<RequestRecord>>,
    limit: usize,
    latest: watch::Sender<u64>,
}

impl RequestLog {
    /// A log keeping the last `limit` requests.
    pub fn new(limit: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                records: Mutex::new(VecDeque::new()),
                limit: limit.max(1),
                latest: watch::channel(0).0,
            }),
        }
    }

    fn records_guard(&self) -> std::sync::MutexGuard<'_, VecDeque<RequestRecord>> {
        self.inner.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a record, assigning its sequence number.
    pub(crate) fn record(&self, mut record: RequestRecord) -> RequestRecord {
        let mut records = self.records_guard();
        record.seq = *self.inner.latest.borrow() + 1;
        if records.len() == self.inner.limit {
            records.pop_front();
        }
        records.push_back(record.clone());
        self.inner.latest.send_replace(record.seq);
        record
    }

    /// The sequence number of the latest request (0 before any).
    pub fn last_seq(&self) -> u64 {
        *self.inner.latest.borrow()
    }

    /// Every kept record, oldest first.
    pub fn records(&self) -> Vec<RequestRecord> {
        self.records_guard().iter().cloned().collect()
    }

    /// Records after sequence number `seq`.
    pub fn since(&self, seq: u64) -> Vec<RequestRecord> {
        self.records_guard()
            .iter()
            .filter(|r| r.seq > seq)
            .cloned()
            .collect()
    }

    /// How many kept records are `verb` on `resource` (`pods`, `deployments.apps`).
    pub fn count(&self, verb: Verb, resource: &str) -> usize {
        self.records_guard()
            .iter()
            .filter(|r| r.is(verb, resource))
            .count()
    }

    /// Like [`RequestLog::count`], for records after sequence number `seq`.
    pub fn count_since(&self, seq: u64, verb: Verb, resource: &str) -> usize {
        self.records_guard()
            .iter()
            .filter(|r| r.seq > seq && r.is(verb, resource))
            .count()
    }

    /// Waits for the first record after `seq` that satisfies `predicate` (it may already be
    /// in the log).
    pub async fn wait_for(
        &self,
        seq: u64,
        predicate: impl Fn(&RequestRecord) -> bool,
    ) -> RequestRecord {
        let mut latest = self.inner.latest.subscribe();
        loop {
            latest.borrow_and_update();
            if let Some(found) = self
                .records_guard()
                .iter()
                .find(|r| r.seq > seq && predicate(r))
            {
                return found.clone();
            }
            if latest.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Forgets every record (sequence numbers keep increasing).
    pub fn clear(&self) {
        self.records_guard().clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn list(resource: &str) -> RequestRecord {
        RequestRecord {
            seq: 0,
            method: "GET".into(),
            path: format!("/api/v1/{resource}"),
            verb: Verb::List,
            resource: Some(resource.into()),
            namespace: None,
            name: None,
            subresource: None,
            query: BTreeMap::from([("labelSelector".to_string(), "a=b".to_string())]),
            accept: None,
        }
    }

    #[test]
    fn verb_names_round_trip() {
        for verb in [Verb::Get, Verb::List, Verb::Watch, Verb::DeleteCollection] {
            assert_eq!(Verb::from_name(verb.name()), Some(verb));
        }
    }

    #[test]
    fn counts_by_verb_and_resource_and_keeps_the_newest() {
        let log = RequestLog::new(2);
        log.record(list("pods"));
        let second = log.record(list("pods"));
        log.record(list("nodes"));
        assert_eq!(log.last_seq(), 3);
        assert_eq!(
            log.count(Verb::List, "pods"),
            1,
            "the oldest record was dropped"
        );
        assert_eq!(log.count_since(second.seq, Verb::List, "nodes"), 1);
        assert_eq!(log.since(second.seq).len(), 1);
        assert_eq!(log.records()[0].param("labelSelector"), Some("a=b"));
    }

    #[tokio::test]
    async fn wait_for_sees_records_added_later() {
        let log = RequestLog::new(10);
        log.record(list("pods"));
        let waiter = tokio::spawn({
            let log = log.clone();
            async move { log.wait_for(1, |r| r.is(Verb::List, "nodes")).await }
        });
        log.record(list("pods"));
        log.record(list("nodes"));
        let found = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.seq, 3);
    }
}
