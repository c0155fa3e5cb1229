//! The `lister` import: reads of the stores a plugin is granted, answered from the cache.

use std::collections::HashMap;
use std::sync::Arc;

use super::{HostState, wit_object};
use crate::cache::{Gvk, LabelSelector, Store, StoreSource};
use crate::plugin::bindings::wasmformer::plugin::lister::{self, Error};
use crate::plugin::bindings::wasmformer::plugin::types;

/// The stores one plugin may read, by kind (a kind it handles is granted too), and what it may
/// write.
#[derive(Debug, Default, Clone)]
pub struct Grants {
    stores: HashMap<Gvk, Arc<dyn StoreSource>>,
    writes: Option<Arc<super::WriteAccess>>,
}

impl Grants {
    /// No grants: every lister call answers `forbidden`.
    pub fn none() -> Self {
        Self::default()
    }

    /// Grants read access to `store`'s kind.
    pub fn grant(&mut self, store: Arc<Store>) -> &mut Self {
        self.grant_source(store.gvk().clone(), Arc::new(store))
    }

    /// Grants read access to `gvk` through `source` (an informer's lister).
    pub fn grant_source(&mut self, gvk: Gvk, source: Arc<dyn StoreSource>) -> &mut Self {
        self.stores.insert(gvk, source);
        self
    }

    /// The current store for `gvk`, if granted.
    pub fn store(&self, gvk: &Gvk) -> Option<Arc<Store>> {
        self.stores.get(gvk).map(|source| source.current())
    }

    /// Grants the writes `access` allows (without it, every write answers `forbidden`).
    pub fn grant_writes(&mut self, access: Arc<super::WriteAccess>) -> &mut Self {
        self.writes = Some(access);
        self
    }

    /// What the plugin may write, if anything.
    pub fn writes(&self) -> Option<Arc<super::WriteAccess>> {
        self.writes.clone()
    }

    /// The granted kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &Gvk> {
        self.stores.keys()
    }
}

fn host_gvk(kind: types::Gvk) -> Gvk {
    Gvk { group: kind.group, version: kind.version, kind: kind.kind }
}

impl HostState {
    /// The granted store for `kind`, or the `forbidden` answer (logged: who asked for what).
    fn granted(&self, kind: types::Gvk, call: &str) -> Result<Arc<Store>, Error> {
        let gvk = host_gvk(kind);
        match self.grants.store(&gvk) {
            Some(store) => Ok(store),
            None => {
                tracing::warn!(plugin.id = %self.plugin, lister.call = call, kind = %gvk, "lister refused: kind not granted");
                Err(Error::Forbidden(format!("plugin {} is not granted {gvk}; add it to the plugin's `read` list", self.plugin)))
            }
        }
    }
}

impl lister::Host for HostState {
    fn get(&mut self, kind: types::Gvk, namespace: String, name: String) -> wasmtime::Result<Result<types::Object, Error>> {
        self.check_deadline()?;
        Ok(self.granted(kind, "get").and_then(|store| {
            store.get(&namespace, &name).map(|obj| wit_object(store.gvk(), &obj)).ok_or(Error::NotFound)
        }))
    }

    fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<types::Object>, Error>> {
        self.check_deadline()?;
        Ok(self.granted(kind, "list").and_then(|store| {
            let selector: LabelSelector = label_selector.parse().map_err(|e: crate::cache::SelectorError| Error::InvalidSelector(e.reason))?;
            Ok(store.list(namespace.as_deref(), &selector).iter().map(|o| wit_object(store.gvk(), o)).collect())
        }))
    }

    fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> wasmtime::Result<Result<Vec<types::Object>, Error>> {
        self.check_deadline()?;
        Ok(self.granted(kind, "by-index").and_then(|store| {
            let objects = store.by_index(&index, &value).map_err(|e| Error::UnknownIndex(e.to_string()))?;
            Ok(objects.iter().map(|o| wit_object(store.gvk(), o)).collect())
        }))
    }
}
