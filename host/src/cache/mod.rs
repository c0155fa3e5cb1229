//! The indexed local cache: client-go's thread-safe store and indexer.
//!
//! One [`Store`] per kind holds each object once, as an [`Arc<CachedObject>`] shared by every
//! plugin, keyed by `namespace/name`, with a namespace index and the custom indexes named in the
//! configuration ([`IndexSpec`]). Each informer owns one store; plugins read the stores they are
//! granted through the lister. Reads are consistent snapshots under a read lock; writes are
//! crate-private and come only from the informers' reflectors. [`Event`] is a change to a store,
//! the one event type from informer to plugin.

mod event;
mod index;
mod labels;
mod object;
mod store;
mod wire;

pub use event::Event;
pub use index::{FieldPath, IndexSpec, NAMESPACE_INDEX};
pub use labels::Labels;
pub use object::{CachedObject, Gvk, ObjectError, ObjectKey};
pub use store::{Store, UnknownIndex};
pub use wasmformer_selectors::{Error as SelectorError, FieldSelector, LabelSelector};
pub use wire::WireObject;

use std::sync::Arc;

/// Yields the current store of one kind. An informer may rebuild its store (when a plugin added
/// later needs another index), so readers keep a source, not a store, and ask it on each read.
pub trait StoreSource: Send + Sync + std::fmt::Debug {
    /// The store as it is now.
    fn current(&self) -> Arc<Store>;
}

impl StoreSource for Arc<Store> {
    fn current(&self) -> Arc<Store> {
        self.clone()
    }
}
