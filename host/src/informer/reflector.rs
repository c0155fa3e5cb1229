//! From kube's watcher events to client-go's handler events: the pure state machine.
//!
//! kube's [`watcher`](mod@kube::runtime::watcher) reports `Init`, `InitApply`, `InitDone`, `Apply`
//! and `Delete`. The [`Reflector`] compares each with its [`Store`], updates the store, and only
//! then emits what a handler needs: [`Event::Add`], [`Event::Update`] with the old object,
//! [`Event::Delete`], and [`Event::Synced`] once after the first complete list.
//!
//! A list (`Init` … `InitDone`) is buffered until it is complete, because an interrupted list
//! (a LIST page or a streaming list failing half-way) starts over with a new `Init` and must leave
//! no trace. Objects listed with the same uid and resourceVersion as stored are kept only as a key,
//! so a relist costs the store plus the keys plus whatever changed during the gap. When the list is
//! complete, objects the store has but the list lacks are removed and delivered first, as
//! `Delete { final_state_unknown: true }` with the last known object (client-go's
//! `DeletedFinalStateUnknown`), then the list's adds and updates in list order.
//!
//! An object whose uid changed under the same name (deleted and recreated while the watch was
//! down) is delivered as a tombstone for the old uid followed by an `Add`, not as an `Update`.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::watcher::Event as WatchEvent;

pub use crate::cache::Event;
use crate::cache::{CachedObject, ObjectKey, Store, WireObject};

/// Receives an informer's events, in order.
///
/// `push` is called with the informer's fan-out lock held (that is what makes a subscription see
/// no gap and no duplicate): it must not block and must not call back into the informer. Queue
/// the event and return.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn push(&self, event: Event);
}

/// The objects of the list in progress.
#[derive(Debug, Default)]
struct Relist {
    /// Whether this is the informer's first list (its adds are `initial`).
    first: bool,
    /// Keys listed with the stored uid and resourceVersion: nothing to deliver.
    unchanged: HashSet<ObjectKey>,
    /// Listed objects that are new or changed, in list order.
    changed: Vec<Arc<CachedObject>>,
    /// Position of each key in `changed`.
    positions: HashMap<ObjectKey, usize>,
}

impl Relist {
    fn forget(&mut self, key: &ObjectKey) {
        self.unchanged.remove(key);
        if let Some(i) = self.positions.remove(key) {
            self.changed.remove(i);
            for position in self.positions.values_mut() {
                if *position > i {
                    *position -= 1;
                }
            }
        }
    }
}

/// Applies watcher events to a [`Store`] and emits the resulting [`Event`]s.
#[derive(Debug)]
pub struct Reflector {
    store: Arc<Store>,
    relist: Option<Relist>,
    synced: bool,
    /// The `apiVersion` and `kind` every object must have (unset: any).
    expected: Option<(String, String)>,
    max_object_bytes: usize,
    /// When an object of another kind was last logged, and how many were not logged since.
    mismatch_logged: Option<Instant>,
    mismatch_unlogged: u64,
}

/// How often an informer logs objects of another kind (each is counted).
const MISMATCH_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Key, uid and resourceVersion of an object as received, read without caching it.
fn identity(value: &WireObject) -> Option<(ObjectKey, &str, &str)> {
    value
        .metadata_present()
        .then(|| (value.key(), value.uid(), value.resource_version()))
}

fn same_version(stored: &CachedObject, uid: &str, resource_version: &str) -> bool {
    stored.uid() == uid && stored.resource_version() == resource_version
}

impl Reflector {
    /// A reflector writing into `store`, which should be empty.
    pub fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            relist: None,
            synced: false,
            expected: None,
            max_object_bytes: usize::MAX,
            mismatch_logged: None,
            mismatch_unlogged: 0,
        }
    }

    /// Refuses objects whose `apiVersion` or `kind` is not this one (a broken or hostile
    /// server's stream), as client-go refuses an unexpected watch event object type. Objects
    /// without them (LIST items) are taken to be of the expected kind.
    #[must_use]
    pub fn expecting(mut self, api_version: impl Into<String>, kind: impl Into<String>) -> Self {
        self.expected = Some((api_version.into(), kind.into()));
        self
    }

    /// Refuses objects whose compact JSON is longer than `bytes`.
    #[must_use]
    pub fn max_object_bytes(mut self, bytes: usize) -> Self {
        self.max_object_bytes = bytes;
        self
    }

    /// The store this reflector writes.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether the first list has completed.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Whether a list is in progress.
    pub fn is_listing(&self) -> bool {
        self.relist.is_some()
    }

    /// Applies one watcher event: updates the store, then calls `emit` with each delta. Returns
    /// how many objects were rejected (logged; e.g. no `metadata.name`).
    pub fn apply(&mut self, event: WatchEvent<WireObject>, emit: &mut impl FnMut(Event)) -> usize {
        match event {
            WatchEvent::Init => {
                self.relist = Some(Relist {
                    first: !self.synced,
                    ..Relist::default()
                });
                0
            }
            WatchEvent::InitApply(value) => self.list_one(value, emit),
            WatchEvent::InitDone => {
                self.finish_list(emit);
                0
            }
            WatchEvent::Apply(value) if self.relist.is_some() => self.list_one(value, emit),
            WatchEvent::Apply(value) => self.apply_live(value, emit),
            WatchEvent::Delete(value) => self.delete_live(value, emit),
        }
    }

    /// Replaces the store (with one that has more indexes), re-admitting every stored and
    /// buffered object into it. Deltas are not emitted: the content does not change.
    pub fn replace_store(&mut self, store: Arc<Store>) {
        fn readmit(store: &Store, obj: &CachedObject) -> Option<Arc<CachedObject>> {
            let wire = serde_json::from_str(obj.body()).ok()?;
            store.admit_wire(wire).ok()
        }
        for obj in self.store.snapshot() {
            if let Some(obj) = readmit(&store, &obj) {
                store.upsert(obj);
            }
        }
        if let Some(relist) = &mut self.relist {
            for obj in &mut relist.changed {
                if let Some(readmitted) = readmit(&store, obj) {
                    *obj = readmitted;
                }
            }
        }
        self.store = store;
    }

    fn admit(&self, value: WireObject) -> Option<Arc<CachedObject>> {
        match self.store.admit_wire(value) {
            Ok(obj) if obj.body().len() > self.max_object_bytes => {
                tracing::error!(
                    gvk = %self.store.gvk(),
                    object.ref = %obj.key(),
                    object.bytes = obj.body().len(),
                    limit.bytes = self.max_object_bytes,
                    "object larger than host.maxObjectBytes rejected"
                );
                None
            }
            Ok(obj) => Some(obj),
            Err(error) => {
                tracing::warn!(gvk = %self.store.gvk(), error = &error as &dyn std::error::Error, "object rejected");
                None
            }
        }
    }

    /// Whether `value` is of the expected kind; logs one refusal a minute.
    fn of_expected_kind(&mut self, value: &WireObject) -> bool {
        let Some((api_version, kind)) = &self.expected else {
            return true;
        };
        let field = |name: &str| match name {
            "apiVersion" => value.api_version(),
            _ => value.kind(),
        };
        let matches = |got: Option<&str>, want: &str| got.is_none_or(|got| got == want);
        if matches(field("apiVersion"), api_version) && matches(field("kind"), kind) {
            return true;
        }
        if self
            .mismatch_logged
            .is_none_or(|at| at.elapsed() >= MISMATCH_LOG_INTERVAL)
        {
            let key = identity(value)
                .map(|(key, _, _)| key.to_string())
                .unwrap_or_default();
            tracing::warn!(
                expected = %format!("{api_version} {kind}"),
                got = %format!("{} {}", field("apiVersion").unwrap_or("?"), field("kind").unwrap_or("?")),
                object.ref = %key,
                unlogged = self.mismatch_unlogged,
                "watch event object of another kind rejected"
            );
            self.mismatch_logged = Some(Instant::now());
            self.mismatch_unlogged = 0;
        } else {
            self.mismatch_unlogged += 1;
        }
        false
    }

    fn list_one(&mut self, value: WireObject, emit: &mut impl FnMut(Event)) -> usize {
        if !self.of_expected_kind(&value) {
            return 1;
        }
        let Some(relist) = &mut self.relist else {
            // kube sends InitApply only after Init; treat a stray one as a live change.
            return self.apply_live(value, emit);
        };
        let Some((key, uid, rv)) = identity(&value) else {
            return usize::from(self.admit(value).is_none());
        };
        if self
            .store
            .get(key.namespace(), key.name())
            .is_some_and(|stored| same_version(&stored, uid, rv))
        {
            relist.forget(&key);
            relist.unchanged.insert(key);
            return 0;
        }
        let Some(obj) = self.admit(value) else {
            return 1;
        };
        let relist = self.relist.as_mut().expect("relist checked above");
        relist.unchanged.remove(&key);
        match relist.positions.get(&key) {
            Some(&i) => relist.changed[i] = obj,
            None => {
                relist.positions.insert(key, relist.changed.len());
                relist.changed.push(obj);
            }
        }
        0
    }

    fn finish_list(&mut self, emit: &mut impl FnMut(Event)) {
        let Some(relist) = self.relist.take() else {
            return;
        };
        let Relist {
            first,
            unchanged,
            changed,
            positions,
        } = relist;
        // Tombstones first: what the store has but the list does not (or has under a new uid).
        for stored in self.store.snapshot() {
            let key = stored.key();
            let kept = unchanged.contains(key)
                || positions
                    .get(key)
                    .is_some_and(|&i| changed[i].uid() == stored.uid());
            if !kept && let Some(obj) = self.store.remove(key) {
                emit(Event::Delete {
                    obj,
                    final_state_unknown: true,
                });
            }
        }
        drop((unchanged, positions));
        for obj in changed {
            match self.store.upsert(obj.clone()) {
                Some(old) => emit(Event::Update { old, new: obj }),
                None => emit(Event::Add {
                    obj,
                    initial: first,
                }),
            }
        }
        if !self.synced {
            self.synced = true;
            emit(Event::Synced);
        }
    }

    fn apply_live(&mut self, value: WireObject, emit: &mut impl FnMut(Event)) -> usize {
        if !self.of_expected_kind(&value) {
            return 1;
        }
        if let Some((key, uid, rv)) = identity(&value)
            && self
                .store
                .get(key.namespace(), key.name())
                .is_some_and(|stored| same_version(&stored, uid, rv))
        {
            return 0;
        }
        let Some(obj) = self.admit(value) else {
            return 1;
        };
        match self.store.upsert(obj.clone()) {
            None => emit(Event::Add {
                obj,
                initial: false,
            }),
            Some(old) if old.uid() != obj.uid() => {
                emit(Event::Delete {
                    obj: old,
                    final_state_unknown: true,
                });
                emit(Event::Add {
                    obj,
                    initial: false,
                });
            }
            Some(old) => emit(Event::Update { old, new: obj }),
        }
        0
    }

    fn delete_live(&mut self, value: WireObject, emit: &mut impl FnMut(Event)) -> usize {
        if !self.of_expected_kind(&value) {
            return 1;
        }
        let Some((key, _, _)) = identity(&value) else {
            return usize::from(self.admit(value).is_none());
        };
        if let Some(relist) = &mut self.relist {
            // kube sends no Delete during a list; if one came, the list's end decides.
            relist.forget(&key);
            return 0;
        }
        let Some(stored) = self.store.remove(&key) else {
            tracing::debug!(gvk = %self.store.gvk(), object.key = %key, "delete of an object never seen");
            return 0;
        };
        // The event carries the final state; fall back to the last known one if it is unusable.
        let obj = self.admit(value).unwrap_or(stored);
        emit(Event::Delete {
            obj,
            final_state_unknown: false,
        });
        0
    }
}

#[cfg(test)]
#[path = "reflector_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "reflector_props.rs"]
mod props;
