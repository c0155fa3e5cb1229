//! Controllers: a [`Reconciler`] reconciles one object's key at a time from the host's work
//! queue (contract 0.3.1), in kube-runtime's terms ([`Action`]).
//!
//! ```text
//! use wasmformer_guest::{Action, ObjectRef, Plugin, Reconciler, Result};
//!
//! #[derive(Default)]
//! struct Labeler;
//! impl Plugin for Labeler {}
//! impl Reconciler for Labeler {
//!     fn reconcile(&mut self, key: &ObjectRef) -> Result<Action> {
//!         let Some(obj) = key.get()? else { return Ok(Action::done()) }; // deleted
//!         // … bring the cluster in line with `obj` …
//!         Ok(Action::requeue(std::time::Duration::from_secs(300)))
//!     }
//! }
//! wasmformer_guest::export!(Labeler, reconciler);
//! ```

use std::fmt;
use std::time::Duration;

use crate::{Gvk, ListerError, Object, Result};

/// The key of one object of a kind the plugin handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// Its kind.
    pub kind: Gvk,
    /// `metadata.namespace`; empty for cluster-scoped kinds.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// The object's newest state in the host's cache; `None` if it is gone.
    pub fn get(&self) -> Result<Option<Object>> {
        match crate::lister::get_object(&self.kind, &self.namespace, &self.name) {
            Ok(obj) => Ok(Some(obj)),
            Err(ListerError::NotFound) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// What the host does with a key after a successful reconcile (its failures are forgotten).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    requeue_after: Option<Duration>,
}

impl Action {
    /// Reconcile the key again after `after` (controller-runtime's `RequeueAfter`), or sooner if
    /// something queues it.
    pub fn requeue(after: Duration) -> Self {
        Self {
            requeue_after: Some(after),
        }
    }

    /// Nothing more until something queues the key again (kube-runtime's `await_change`).
    pub fn done() -> Self {
        Self {
            requeue_after: None,
        }
    }

    /// When the key is reconciled again, if it is scheduled.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.requeue_after
    }
}

/// A controller: besides its [`crate::Plugin`] handlers, it reconciles keys. Export it with
/// `export!(MyPlugin, reconciler)`.
///
/// The host queues a key for every event of a kind the plugin handles (and for
/// `reconcile.owns`/`reconcile.watches` in its configuration); a key queued many times while it
/// waits is reconciled once, one key is never reconciled twice at once, and a key that changed
/// during its reconcile is reconciled again. An `Err` is retried after the key's exponential
/// backoff unless made with [`crate::Error::permanent`].
pub trait Reconciler: crate::Plugin {
    /// Brings the cluster in line with the object `key` (read it with [`ObjectRef::get`]: it may
    /// have been deleted).
    fn reconcile(&mut self, key: &ObjectRef) -> Result<Action>;
}
