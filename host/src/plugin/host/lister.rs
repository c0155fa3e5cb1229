//! The `lister` import: reads of the stores a plugin is granted, answered from the cache.

use std::collections::HashMap;
use std::sync::Arc;

use super::{HostState, wit_object};
use crate::cache::{Gvk, LabelSelector, Store, StoreSource};
use crate::metrics::ListerCalls;
use crate::plugin::bindings::wasmformer::plugin::lister::{self, Error};
use crate::plugin::bindings::wasmformer::plugin::types;

/// The stores one plugin may read, by kind. A kind it handles is granted too.
#[derive(Debug, Default, Clone)]
pub struct Grants {
    stores: HashMap<Gvk, Arc<dyn StoreSource>>,
    calls: Option<ListerCalls>,
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

    /// Counts every lister call with `calls` (`wasmformer_lister_calls_total`).
    pub fn count_calls(&mut self, calls: ListerCalls) -> &mut Self {
        self.calls = Some(calls);
        self
    }

    fn counted<T>(&self, kind: &Gvk, result: Result<T, Error>) -> Result<T, Error> {
        if let Some(calls) = &self.calls {
            let outcome = match &result {
                Ok(_) => "ok",
                Err(Error::NotFound) => "not-found",
                Err(Error::Forbidden(_)) => "forbidden",
                Err(Error::InvalidSelector(_)) => "invalid-selector",
                Err(Error::UnknownIndex(_)) => "unknown-index",
            };
            calls.count(&kind.to_string(), outcome);
        }
        result
    }

    /// The current store for `gvk`, if granted.
    pub fn store(&self, gvk: &Gvk) -> Option<Arc<Store>> {
        self.stores.get(gvk).map(|source| source.current())
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
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "get").and_then(|store| {
            store.get(&namespace, &name).map(|obj| wit_object(store.gvk(), &obj)).ok_or(Error::NotFound)
        });
        Ok(self.grants.counted(&gvk, result))
    }

    fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: String,
    ) -> wasmtime::Result<Result<Vec<types::Object>, Error>> {
        self.check_deadline()?;
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "list").and_then(|store| {
            let selector: LabelSelector = label_selector.parse().map_err(|e: crate::cache::SelectorError| Error::InvalidSelector(e.reason))?;
            Ok(store.list(namespace.as_deref(), &selector).iter().map(|o| wit_object(store.gvk(), o)).collect())
        });
        Ok(self.grants.counted(&gvk, result))
    }

    fn by_index(&mut self, kind: types::Gvk, index: String, value: String) -> wasmtime::Result<Result<Vec<types::Object>, Error>> {
        self.check_deadline()?;
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "by-index").and_then(|store| {
            let objects = store.by_index(&index, &value).map_err(|e| Error::UnknownIndex(e.to_string()))?;
            Ok(objects.iter().map(|o| wit_object(store.gvk(), o)).collect())
        });
        Ok(self.grants.counted(&gvk, result))
    }
}
