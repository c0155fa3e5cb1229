//! Reads that need the history: paged lists at the latest or an older resourceVersion (the
//! past state is the current one with later events undone), and the event feed watches follow.

use std::{collections::BTreeMap, ops::Bound, sync::Arc};

use serde_json::Value;

use super::{Error, NameKey, Result, Store, StoredEvent};
use crate::resources::ResourceId;

/// One page of a list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PageRequest<'a> {
    pub resource: &'a ResourceId,
    /// Only this namespace; `None` for all.
    pub namespace: Option<&'a str>,
    /// The snapshot to read; `None` for the latest.
    pub at: Option<u64>,
    /// Start after this key (from a continue token).
    pub after: Option<&'a NameKey>,
    /// At most this many matching items.
    pub limit: Option<usize>,
}

#[derive(Clone, Debug)]
pub(crate) struct Page {
    pub items: Vec<Arc<Value>>,
    /// The snapshot the page was read at.
    pub resource_version: u64,
    /// Set when more matching items follow: the key of the last item returned.
    pub continue_after: Option<NameKey>,
}

/// Merges two sorted key streams, preferring the override when a key is in both.
fn merged<'a>(
    current: impl Iterator<Item = (&'a NameKey, &'a Arc<Value>)>,
    overrides: impl Iterator<Item = (&'a NameKey, &'a Option<Arc<Value>>)>,
) -> impl Iterator<Item = (&'a NameKey, Option<&'a Arc<Value>>)> {
    let mut current = current.peekable();
    let mut overrides = overrides.peekable();
    std::iter::from_fn(move || match (current.peek(), overrides.peek()) {
        (None, None) => None,
        (Some(_), None) => current.next().map(|(k, v)| (k, Some(v))),
        (None, Some(_)) => overrides.next().map(|(k, v)| (k, v.as_ref())),
        (Some((ck, _)), Some((ok, _))) => {
            if ck < ok {
                current.next().map(|(k, v)| (k, Some(v)))
            } else {
                if ck == ok {
                    current.next();
                }
                overrides.next().map(|(k, v)| (k, v.as_ref()))
            }
        }
    })
}

impl Store {
    /// Reads one page of matching objects at a snapshot.
    pub(crate) fn page(
        &self,
        request: PageRequest<'_>,
        filter: &dyn Fn(&Value) -> bool,
    ) -> Result<Page> {
        let state = self.lock();
        state.ty(request.resource)?;
        let latest = state.resource_version;
        let at = request.at.unwrap_or(latest);
        if at > latest {
            return Err(Error::TooLargeResourceVersion {
                requested: at,
                current: latest,
            });
        }
        let overrides = if at < latest {
            state
                .history
                .undo_after(request.resource, at)
                .map_err(Error::Expired)?
        } else {
            BTreeMap::new()
        };
        let lower = match (request.after, request.namespace) {
            (Some(after), _) => Bound::Excluded(after.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let empty = BTreeMap::new();
        let current = state.objects.get(request.resource).unwrap_or(&empty);
        let range = (lower.clone(), Bound::Unbounded);
        let limit = request.limit.unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last = None;
        let mut more = false;
        for (key, object) in merged(current.range(range.clone()), overrides.range(range)) {
            if request.namespace.is_some_and(|ns| key.0 != ns) {
                break;
            }
            let Some(object) = object.filter(|o| filter(o)) else {
                continue;
            };
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(object.clone());
            last = Some(key);
        }
        Ok(Page {
            items,
            resource_version: at,
            continue_after: if more { last.cloned() } else { None },
        })
    }

    /// Up to `max` events of `resource` after `after`, and the resourceVersion the scan reached
    /// (events of other resources are skipped but still advance it).
    pub(crate) fn events_after(
        &self,
        resource: &ResourceId,
        after: u64,
        max: usize,
    ) -> Result<(Vec<Arc<StoredEvent>>, u64)> {
        let state = self.lock();
        state.history.check(after).map_err(Error::Expired)?;
        let mut reached = after;
        let mut events = Vec::new();
        for event in state.history.after(after).take(max) {
            reached = event.resource_version;
            if &event.resource == resource {
                events.push(event.clone());
            }
        }
        Ok((events, reached))
    }

    /// Whether the type is (still) served.
    pub fn serves(&self, resource: &ResourceId) -> bool {
        self.lock().registry.get(resource).is_some()
    }

    /// The oldest resourceVersion a watch or continue token can still start from.
    pub fn oldest_resource_version(&self) -> u64 {
        self.lock().history.oldest()
    }
}
