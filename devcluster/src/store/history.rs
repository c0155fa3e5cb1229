//! The bounded event history: a ring buffer of every change in resourceVersion order. Watches
//! read it from their cursor, and lists at an older resourceVersion (continue tokens,
//! `resourceVersionMatch=Exact`) rebuild the past state by undoing the events after it.

use std::{
    collections::{BTreeMap, VecDeque},
    sync::Arc,
};

use serde_json::Value;

use super::NameKey;
use crate::resources::ResourceId;

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The object was created.
    Added,
    /// The object was changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventKind {
    /// The watch event `type`: `ADDED`, `MODIFIED`, `DELETED`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as recorded in the history and streamed to watches.
#[derive(Clone, Debug)]
pub struct StoredEvent {
    /// The store-wide resourceVersion this change created.
    pub resource_version: u64,
    /// Added, modified or deleted.
    pub kind: EventKind,
    /// The type of the object.
    pub resource: ResourceId,
    /// Namespace (empty for cluster-scoped) and name.
    pub key: NameKey,
    /// The object after the change; for a deletion, its last state stamped with the deletion's
    /// resourceVersion.
    pub object: Arc<Value>,
    /// The object before the change (`None` for an addition).
    pub previous: Option<Arc<Value>>,
}

/// The requested resourceVersion is older than the history reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expired {
    /// The resourceVersion asked for.
    pub requested: u64,
    /// The oldest resourceVersion that can still be served.
    pub oldest: u64,
}

#[derive(Debug)]
pub(crate) struct History {
    events: VecDeque<Arc<StoredEvent>>,
    limit: usize,
    /// Every event with a resourceVersion at or below this is gone.
    compacted_through: u64,
}

impl History {
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            events: VecDeque::new(),
            limit: limit.max(1),
            compacted_through: 0,
        }
    }

    pub(crate) fn push(&mut self, event: StoredEvent) {
        if self.events.len() == self.limit
            && let Some(oldest) = self.events.pop_front()
        {
            self.compacted_through = oldest.resource_version;
        }
        self.events.push_back(Arc::new(event));
    }

    /// Drops every event up to and including `through`.
    pub(crate) fn compact(&mut self, through: u64) {
        while self
            .events
            .front()
            .is_some_and(|e| e.resource_version <= through)
        {
            self.events.pop_front();
        }
        self.compacted_through = self.compacted_through.max(through);
    }

    /// The oldest resourceVersion from which every later event is still known.
    pub(crate) fn oldest(&self) -> u64 {
        self.compacted_through
    }

    pub(crate) fn check(&self, resource_version: u64) -> Result<(), Expired> {
        if resource_version < self.compacted_through {
            Err(Expired {
                requested: resource_version,
                oldest: self.compacted_through,
            })
        } else {
            Ok(())
        }
    }

    /// Events after `resource_version` in order.
    pub(crate) fn after(&self, resource_version: u64) -> impl Iterator<Item = &Arc<StoredEvent>> {
        let start = self
            .events
            .partition_point(|e| e.resource_version <= resource_version);
        self.events.range(start..)
    }

    /// For every object of `resource` changed after `resource_version`, its state at that
    /// version (`None` if it did not exist then).
    pub(crate) fn undo_after(
        &self,
        resource: &ResourceId,
        resource_version: u64,
    ) -> Result<BTreeMap<NameKey, Option<Arc<Value>>>, Expired> {
        self.check(resource_version)?;
        let mut states = BTreeMap::new();
        for event in self
            .after(resource_version)
            .filter(|e| &e.resource == resource)
        {
            states
                .entry(event.key.clone())
                .or_insert_with(|| event.previous.clone());
        }
        Ok(states)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(rv: u64, kind: EventKind, name: &str, previous: Option<Value>) -> StoredEvent {
        StoredEvent {
            resource_version: rv,
            kind,
            resource: ResourceId::core("configmaps"),
            key: ("default".into(), name.into()),
            object: Arc::new(json!({"rv": rv})),
            previous: previous.map(Arc::new),
        }
    }

    #[test]
    fn ring_buffer_drops_oldest_and_expires_older_versions() {
        let mut history = History::new(2);
        history.push(event(1, EventKind::Added, "a", None));
        history.push(event(2, EventKind::Added, "b", None));
        assert!(history.check(0).is_ok());
        history.push(event(3, EventKind::Added, "c", None));
        assert_eq!(
            history.check(0),
            Err(Expired {
                requested: 0,
                oldest: 1
            })
        );
        assert!(history.check(1).is_ok());
        let after: Vec<u64> = history.after(1).map(|e| e.resource_version).collect();
        assert_eq!(after, vec![2, 3]);
    }

    #[test]
    fn compaction_expires_everything_before_it() {
        let mut history = History::new(10);
        for rv in 1..=5 {
            history.push(event(rv, EventKind::Added, &format!("o{rv}"), None));
        }
        history.compact(4);
        assert_eq!(history.after(0).count(), 1);
        assert!(history.check(3).is_err());
        assert!(history.check(4).is_ok());
    }

    #[test]
    fn undo_reports_state_before_first_later_change() {
        let mut history = History::new(10);
        history.push(event(1, EventKind::Added, "a", None));
        history.push(event(2, EventKind::Modified, "a", Some(json!({"rv": 1}))));
        history.push(event(3, EventKind::Deleted, "a", Some(json!({"rv": 2}))));
        history.push(event(4, EventKind::Added, "b", None));
        let states = history
            .undo_after(&ResourceId::core("configmaps"), 1)
            .unwrap();
        assert_eq!(
            states[&("default".to_string(), "a".to_string())],
            Some(Arc::new(json!({"rv": 1})))
        );
        assert_eq!(states[&("default".to_string(), "b".to_string())], None);
        assert!(
            history
                .undo_after(&ResourceId::core("pods"), 1)
                .unwrap()
                .is_empty()
        );
    }
}
