//! [`Event`]: one change to a cache, as an informer emits it after updating its store, as a
//! plugin's queue holds it, and as a plugin's handler receives it. The one event type from the
//! informer to the plugin: `informer` produces it, `dispatch` queues it, `plugin` delivers it.

use std::sync::Arc;

use super::CachedObject;

/// One change for a handler, after the store has been updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// An object appeared. `initial` marks objects of the first complete list (and, for a late
    /// subscriber or a `snapshot` swap, the store's content at that moment).
    Add {
        /// The object.
        obj: Arc<CachedObject>,
        /// Whether it is part of the initial content rather than a live change.
        initial: bool,
    },
    /// An object changed (its resourceVersion differs from the stored one; on a resync, `old`
    /// and `new` are the same object).
    Update {
        /// The object as stored before.
        old: Arc<CachedObject>,
        /// The object as stored now.
        new: Arc<CachedObject>,
    },
    /// An object disappeared.
    Delete {
        /// The object's final state, or the last known state if `final_state_unknown`.
        obj: Arc<CachedObject>,
        /// The deletion was inferred from a relist: the object may have changed before it went.
        final_state_unknown: bool,
    },
    /// The initial list is complete: every `Add { initial: true }` before it has been delivered.
    /// Not an object event: a plugin's worker marks the subscription synced, no handler is called.
    Synced,
}

impl Event {
    /// `add`, `update`, `delete` or `synced`, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Add { .. } => "add",
            Event::Update { .. } => "update",
            Event::Delete { .. } => "delete",
            Event::Synced => "synced",
        }
    }

    /// The object the event is about (the new one for an update); `None` for `Synced`.
    pub fn object(&self) -> Option<&Arc<CachedObject>> {
        match self {
            Event::Add { obj, .. } | Event::Delete { obj, .. } | Event::Update { new: obj, .. } => {
                Some(obj)
            }
            Event::Synced => None,
        }
    }
}
