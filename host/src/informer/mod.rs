//! Shared informers: client-go's `SharedInformerFactory` semantics on top of kube-runtime's
//! [`watcher`](mod@kube::runtime::watcher).
//!
//! kube's watcher does the list/watch protocol (pagination, bookmarks, re-watching from the last
//! resourceVersion, relisting after `410 Gone`, streaming lists); this module turns its
//! `Init`/`InitApply`/`InitDone`/`Apply`/`Delete` events into client-go's handler semantics and
//! keeps one [`Store`](crate::cache::Store) per watched resource:
//!
//! - [`delta`]: the pure state machine from watcher events to [`Event`]s (`Add`, `Update` with
//!   the old object, `Delete`, `Synced`), comparing with the store. A relist delivers objects
//!   that vanished as tombstones (`final_state_unknown`) before its adds and updates.
//! - [`informer`]: one running [`Informer`]: a tokio task driving the watcher,
//!   the store, and the fan-out to [`EventSink`]s, with an [`InformerStatus`] for operators.
//! - [`watch`]: how the watcher is configured and started for an [`InformerKey`] (dynamic or
//!   metadata-only objects, selectors pushed down, streaming list or paginated LIST) and how its
//!   errors are explained ([`WatchError`]).
//! - [`guard`]: what stands between a watch stream and kube's decoder: event lines over
//!   `host.maxObjectBytes` are dropped and named, undecodable ones counted and the watch restarted;
//!   LIST pages read in protobuf and turned into JSON.
//! - [`prefetch`]: LIST pages fetched (and turned into JSON) one ahead, so the server encodes a
//!   page while the host reads the one before.
//! - [`retry`]: when an informer tries again after a failure: at once after a single `410 Gone`,
//!   with backoff otherwise, early when a server that could not be reached answers again.
//! - [`factory`]: the [`InformerFactory`], which shares one informer among every subscriber of an
//!   equal key and stops it when the last handle (subscription or lister) is gone.
//! - [`spec`]: the [`InformerKey`] and the [`StoreOptions`] merged from every plugin.

pub mod factory;
mod guard;
#[allow(clippy::module_inception)]
pub mod informer;
mod prefetch;
pub mod reflector;
mod retry;
pub mod spec;
pub mod watch;

pub use factory::InformerFactory;
pub use informer::{EventCounts, Informer, InformerStatus, LastError, Lister, Subscription};
pub use reflector::{Event, EventSink};
pub use spec::{InformerKey, StoreOptions};
pub use watch::{DEFAULT_MAX_OBJECT_BYTES, ListEncoding, ListStrategy, WatchError, WatchSettings};

/// Why an informer cannot be created or shared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A namespace was given for a cluster-scoped resource.
    #[error("{resource} is cluster-scoped but namespace {namespace:?} was given")]
    NamespaceOnClusterScoped {
        /// The resource (plural, with its group).
        resource: String,
        /// The namespace given.
        namespace: String,
    },
    /// Two users of one informer define an index with the same name but different fields.
    #[error("index {index:?} on {resource} is defined on both {existing} and {requested}")]
    IndexConflict {
        /// The resource (plural, with its group).
        resource: String,
        /// The index name.
        index: String,
        /// The field the index already uses.
        existing: String,
        /// The field asked for.
        requested: String,
    },
    /// The running informer strips `metadata.managedFields` but a new user needs them; the
    /// stripped fields cannot be brought back without restarting the informer.
    #[error("the running informer for {resource} strips managedFields, which a new user needs")]
    ManagedFieldsStripped {
        /// The resource (plural, with its group).
        resource: String,
    },
}

/// Result with this module's [`Error`] by default.
pub type Result<T, E = Error> = std::result::Result<T, E>;
