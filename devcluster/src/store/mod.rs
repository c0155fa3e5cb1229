//! The object store: every object of every resource as JSON, keyed by resource, namespace and
//! name, with one store-wide resourceVersion. All mutations take one lock, so resourceVersions
//! are totally ordered and every change is appended to the bounded history of
//! [`StoredEvent`]s that watches and consistent lists read. Writers (HTTP handlers, the
//! simulator, tests) all go through [`Store`].

mod admission;
mod crd;
mod history;
mod read;
mod write;

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, MutexGuard},
};

use serde_json::{Value, json};
use tokio::sync::watch;

pub use history::{EventKind, Expired, StoredEvent};
pub(crate) use read::PageRequest;

use self::{
    admission::{IdSource, metadata_mut},
    history::History,
};
use crate::{
    patch::{self, Patch},
    resources::{Registry, ResourceId},
};

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type NameKey = (String, String);

/// Namespaces that exist from the start and cannot be deleted.
const SYSTEM_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// An error the API would report as a `metav1.Status`.
#[derive(Debug, thiserror::Error, Clone)]
pub enum Error {
    /// No such object.
    #[error("{resource} {name:?} not found")]
    NotFound {
        /// The resource type.
        resource: ResourceId,
        /// The object name.
        name: String,
    },
    /// An object with that name already exists.
    #[error("{resource} {name:?} already exists")]
    AlreadyExists {
        /// The resource type.
        resource: ResourceId,
        /// The object name.
        name: String,
    },
    /// A resourceVersion or uid precondition did not hold.
    #[error("operation cannot be fulfilled on {resource} {name:?}: {reason}")]
    Conflict {
        /// The resource type.
        resource: ResourceId,
        /// The object name.
        name: String,
        /// Why, in the API server's words.
        reason: String,
    },
    /// The object failed validation.
    #[error("{kind} {name:?} is invalid: {}", causes.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Invalid {
        /// The object kind.
        kind: String,
        /// The object name (may be empty).
        name: String,
        /// One entry per invalid field.
        causes: Vec<FieldError>,
    },
    /// The request itself is malformed.
    #[error("{message}")]
    BadRequest {
        /// What is wrong.
        message: String,
    },
    /// The resource type (or subresource) is not served.
    #[error("the server could not find the requested resource {resource}")]
    UnknownResource {
        /// The resource asked for.
        resource: ResourceId,
    },
    /// The operation is refused for this object.
    #[error("{resource} {name:?} is forbidden: {reason}")]
    Forbidden {
        /// The resource type.
        resource: ResourceId,
        /// The object name.
        name: String,
        /// Why.
        reason: String,
    },
    /// The resourceVersion is older than the history reaches.
    #[error("too old resource version: {} ({})", .0.requested, .0.oldest)]
    Expired(Expired),
    /// The resourceVersion has not been reached yet.
    #[error("too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The resourceVersion asked for.
        requested: u64,
        /// The store's current resourceVersion.
        current: u64,
    },
    /// A patch could not be applied.
    #[error("the patch could not be applied")]
    Patch(#[source] Arc<patch::Error>),
    /// A server-side apply set fields other field managers own (and was not forced).
    #[error("{}", .0.message())]
    ApplyConflict(crate::ownership::Conflicts),
}

/// `pub type Result<T, E = Error>` for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One invalid field of an [`Error::Invalid`].
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// Dotted path, e.g. `metadata.name`.
    pub field: String,
    /// The Status cause reason, e.g. `FieldValueRequired`.
    pub reason: &'static str,
    /// The detail, e.g. `Required value: name or generateName is required`.
    pub detail: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.detail)
    }
}

/// Identifies one object.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    /// Its resource type.
    pub resource: ResourceId,
    /// Its namespace; `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl ObjectKey {
    /// A key from parts.
    pub fn new(resource: ResourceId, namespace: Option<&str>, name: impl Into<String>) -> Self {
        Self {
            resource,
            namespace: namespace.filter(|ns| !ns.is_empty()).map(String::from),
            name: name.into(),
        }
    }

    fn name_key(&self) -> NameKey {
        (
            self.namespace.clone().unwrap_or_default(),
            self.name.clone(),
        )
    }
}

/// Which part of an object a write may change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Part {
    /// The object (its status is kept when status is a subresource).
    #[default]
    Main,
    /// Only `.status`, as `PUT/PATCH .../status`.
    Status,
    /// Spec and status in one write, as the API server's own writers do (the `binding`
    /// subresource sets `spec.nodeName` and the `PodScheduled` condition together). Not reachable
    /// over HTTP; the dev cluster's controllers use it.
    Whole,
}

/// `DeleteOptions.propagationPolicy`: what happens to the objects that name the deleted one in
/// their `ownerReferences`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    /// Delete the object now; the garbage collector deletes its dependents afterwards.
    #[default]
    Background,
    /// Keep the object (finalizer `foregroundDeletion`) until the garbage collector has deleted
    /// its dependents.
    Foreground,
    /// Keep the object (finalizer `orphan`) until the garbage collector has removed it from its
    /// dependents' `ownerReferences`.
    Orphan,
}

impl Propagation {
    /// The finalizer the API server adds for this policy.
    pub fn finalizer(self) -> Option<&'static str> {
        match self {
            Self::Background => None,
            Self::Foreground => Some(FOREGROUND_FINALIZER),
            Self::Orphan => Some(ORPHAN_FINALIZER),
        }
    }
}

/// The finalizer of a foreground deletion.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";
/// The finalizer of an orphaning deletion.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The namespace controller's entry in a Namespace's `spec.finalizers`: the namespace stays
/// `Terminating` until the controller has deleted what is in it and removed this.
pub const NAMESPACE_FINALIZER: &str = "kubernetes";

/// `DeleteOptions.preconditions`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object must have this uid.
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    pub resource_version: Option<String>,
}

/// The outcome of a delete.
#[derive(Clone, Debug, PartialEq)]
pub enum Deletion {
    /// The object is gone; this was its last state.
    Deleted(Arc<Value>),
    /// The object has finalizers: it is marked with `deletionTimestamp` and stays until they are
    /// removed.
    Finalizing(Arc<Value>),
}

/// A cheap, cloneable handle to the store.
#[derive(Clone, Debug)]
pub struct Store {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    latest: watch::Sender<u64>,
}

#[derive(Debug)]
struct State {
    registry: Registry,
    objects: BTreeMap<ResourceId, BTreeMap<NameKey, Arc<Value>>>,
    resource_version: u64,
    history: History,
    ids: IdSource,
}

impl Store {
    /// An empty store with the built-in types, the system namespaces, and a history of at most
    /// `history_limit` events.
    pub fn new(history_limit: usize) -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let store = Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    registry: Registry::builtin(),
                    objects: BTreeMap::new(),
                    resource_version: 0,
                    history: History::new(history_limit),
                    ids: IdSource::new(seed),
                }),
                latest: watch::channel(0).0,
            }),
        };
        for ns in SYSTEM_NAMESPACES {
            store
                .create(
                    &ResourceId::namespaces(),
                    None,
                    json!({"metadata": {"name": ns}}),
                )
                .expect("system namespaces are valid");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs a mutation under the lock and publishes the new resourceVersion to watches.
    fn mutate<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut state = self.lock();
        let before = state.resource_version;
        let result = f(&mut state);
        if state.resource_version != before {
            self.shared.latest.send_replace(state.resource_version);
        }
        result
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Follows the latest resourceVersion; changes whenever anything is written.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.latest.subscribe()
    }

    /// A copy of the served types (built-in and CRD-defined).
    pub fn registry(&self) -> Registry {
        self.lock().registry.clone()
    }

    /// Drops the whole event history: watches and continue tokens from before the current
    /// resourceVersion then get 410 Gone.
    pub fn compact(&self) {
        let mut state = self.lock();
        let current = state.resource_version;
        state.history.compact(current);
    }

    /// Creates an object in `namespace` (taken from the object's metadata when `None`).
    pub fn create(
        &self,
        resource: &ResourceId,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Arc<Value>> {
        self.mutate(|state| state.create(resource, namespace, object))
    }

    /// Creates an object whose `apiVersion`, `kind` and `metadata.namespace` say where it goes.
    pub fn create_object(&self, object: Value) -> Result<Arc<Value>> {
        let api_version = object["apiVersion"].as_str().unwrap_or("");
        let kind = object["kind"].as_str().unwrap_or("");
        let ty = self
            .lock()
            .registry
            .by_kind(api_version, kind)
            .ok_or_else(|| Error::BadRequest {
                message: format!("no resource serves apiVersion {api_version:?} kind {kind:?}"),
            })?;
        self.create(&ty.id, None, object)
    }

    /// The object with this key.
    pub fn get(&self, key: &ObjectKey) -> Result<Arc<Value>> {
        let state = self.lock();
        state.ty(&key.resource)?;
        state.current(key).cloned()
    }

    /// Every object of a type (in one namespace, or all), with the resourceVersion they are at.
    pub fn list(
        &self,
        resource: &ResourceId,
        namespace: Option<&str>,
    ) -> Result<(Vec<Arc<Value>>, u64)> {
        let page = self.page(
            PageRequest {
                resource,
                namespace,
                at: None,
                after: None,
                limit: None,
            },
            &|_| true,
        )?;
        Ok((page.items, page.resource_version))
    }

    /// Replaces an object (PUT). A non-empty `metadata.resourceVersion` must match the stored one.
    pub fn replace(&self, key: &ObjectKey, object: Value, part: Part) -> Result<Arc<Value>> {
        self.mutate(|state| state.replace(key, object, part))
    }

    /// Applies a patch to the current object. An apply patch creates a missing object.
    pub fn patch(&self, key: &ObjectKey, patch: &Patch, part: Part) -> Result<Arc<Value>> {
        self.mutate(|state| match state.current(key).cloned() {
            Err(Error::NotFound { .. })
                if matches!(patch, Patch::Apply(_)) && part == Part::Main =>
            {
                let Patch::Apply(body) = patch else {
                    unreachable!()
                };
                let mut object = body.clone();
                if object.is_object() {
                    metadata_mut(&mut object).insert("name".into(), json!(key.name));
                }
                state.create(&key.resource, key.namespace.as_deref(), object)
            }
            Err(e) => Err(e),
            Ok(current) => {
                let patched = patch
                    .apply_to(&current)
                    .map_err(|e| Error::Patch(Arc::new(e)))?;
                state.replace(key, patched, part)
            }
        })
    }

    /// Read-modify-write of an object under the lock that may fail: `f` gets the current object
    /// and returns its replacement (resourceVersion and uid preconditions in it still apply).
    pub fn update_with(
        &self,
        key: &ObjectKey,
        part: Part,
        f: impl FnOnce(&Value) -> Result<Value>,
    ) -> Result<Arc<Value>> {
        self.mutate(|state| {
            let current = state.current(key)?.clone();
            let object = f(&current)?;
            state.replace(key, object, part)
        })
    }

    /// Read-modify-write of an object under the lock (no resourceVersion precondition).
    pub fn modify(
        &self,
        key: &ObjectKey,
        part: Part,
        f: impl FnOnce(&mut Value),
    ) -> Result<Arc<Value>> {
        self.mutate(|state| {
            let mut object = Value::clone(state.current(key)?);
            f(&mut object);
            state.replace(key, object, part)
        })
    }

    /// Deletes an object, or marks it for deletion when it has finalizers; a Pod goes in one
    /// write, as when its kubelet has confirmed the termination (the store-level delete tests
    /// and the workload simulator use). Deleting a namespace only marks it `Terminating`;
    /// deleting a CRD deletes its objects and stops serving the type.
    pub fn delete(&self, key: &ObjectKey, preconditions: &Preconditions) -> Result<Deletion> {
        self.mutate(|state| state.delete(key, preconditions, Propagation::Background, false))
    }

    /// The API server's delete (HTTP clients and the controllers): [`Store::delete`] with a
    /// propagation policy (`Foreground` and `Orphan` add their finalizer, so the object stays with
    /// a `deletionTimestamp` until the garbage collector is done), and a Pod's graceful step: the
    /// Pod is first marked (`deletionTimestamp`, grace period 0), then removed.
    pub fn delete_propagating(
        &self,
        key: &ObjectKey,
        preconditions: &Preconditions,
        propagation: Propagation,
    ) -> Result<Deletion> {
        self.mutate(|state| state.delete(key, preconditions, propagation, true))
    }
}

#[cfg(test)]
mod tests;
