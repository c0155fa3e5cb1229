//! The `lister` import: reads of the stores a plugin is granted, answered from the cache.
//!
//! A plugin may hold several stores of one kind: two `handles` of Pods in two namespaces (or with
//! two selectors), or a `handles` entry and a `read` grant of the same kind. Its reads of that
//! kind see the union of them all, so a `get` inside a handler finds the object the handler was
//! just given, whichever subscription delivered it. An object held by more than one store is
//! answered once, in its newest state (highest resourceVersion).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use wasmtime::StoreContextMut;
use wasmtime::component::Linker;

use super::{HostState, SharedObject};
use crate::cache::{CachedObject, Gvk, LabelSelector, ObjectKey, Store, StoreSource, UnknownIndex};
use crate::metrics::ListerCalls;
use crate::plugin::bindings::wasmformer::plugin::lister::Error;
use crate::plugin::bindings::wasmformer::plugin::types;
use crate::plugin::{CONTRACT_PACKAGE, CONTRACT_VERSION};

/// The stores one plugin may read, by kind: one per subscription or read grant of that kind (a
/// kind it handles is granted too); and what it may write.
#[derive(Debug, Default, Clone)]
pub struct Grants {
    stores: HashMap<Gvk, Vec<Arc<dyn StoreSource>>>,
    writes: Option<Arc<super::WriteAccess>>,
    calls: Option<ListerCalls>,
}

impl Grants {
    /// No grants: every lister call answers `forbidden`.
    pub fn none() -> Self {
        Self::default()
    }

    /// Grants read access to `store` (added to the stores already granted for its kind).
    pub fn grant(&mut self, store: Arc<Store>) -> &mut Self {
        self.grant_source(store.gvk().clone(), Arc::new(store))
    }

    /// Grants read access to `gvk` through `source` (an informer's lister), besides the sources
    /// already granted for that kind.
    pub fn grant_source(&mut self, gvk: Gvk, source: Arc<dyn StoreSource>) -> &mut Self {
        self.stores.entry(gvk).or_default().push(source);
        self
    }

    /// The current stores for `gvk`, if granted: reads of the kind see their union.
    pub fn stores(&self, gvk: &Gvk) -> Option<Granted> {
        self.stores.get(gvk).map(|sources| Granted {
            stores: sources.iter().map(|source| source.current()).collect(),
        })
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

    /// The granted kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &Gvk> {
        self.stores.keys()
    }
}

/// The stores of one kind a plugin is granted, read as one.
#[derive(Debug, Clone)]
pub struct Granted {
    stores: Vec<Arc<Store>>,
}

/// Whether `a` is a newer state of an object than `b`: resourceVersions are compared as numbers
/// where both are (every API server in practice), else the one seen first is kept.
fn newer(a: &CachedObject, b: &CachedObject) -> bool {
    match (
        a.resource_version().parse::<u64>(),
        b.resource_version().parse::<u64>(),
    ) {
        (Ok(a), Ok(b)) => a > b,
        _ => false,
    }
}

/// One answer per object, the newest, ordered by key.
fn union(lists: impl IntoIterator<Item = Vec<Arc<CachedObject>>>) -> Vec<Arc<CachedObject>> {
    let mut lists = lists.into_iter();
    let first = lists.next().unwrap_or_default();
    let Some(second) = lists.next() else {
        // One store (the usual case): its answer is already ordered by key, each object once.
        return first;
    };
    let mut merged: BTreeMap<ObjectKey, Arc<CachedObject>> = BTreeMap::new();
    for obj in [first, second].into_iter().chain(lists).flatten() {
        match merged.get(obj.key()) {
            Some(seen) if !newer(&obj, seen) => {}
            _ => {
                merged.insert(obj.key().clone(), obj);
            }
        }
    }
    merged.into_values().collect()
}

impl Granted {
    /// The kind.
    pub fn gvk(&self) -> &Gvk {
        self.stores[0].gvk()
    }

    /// The object at `namespace`/`name` in any of the stores (the newest if several hold it).
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        self.stores
            .iter()
            .filter_map(|store| store.get(namespace, name))
            .reduce(|a, b| if newer(&b, &a) { b } else { a })
    }

    /// Objects in `namespace` (`None`: all) matching `selector` in any of the stores, each once,
    /// ordered by key.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<CachedObject>> {
        union(
            self.stores
                .iter()
                .map(|store| store.list(namespace, selector)),
        )
    }

    /// Objects whose index `index` holds `value` in any of the stores, each once, ordered by key.
    /// Every store of the kind carries the plugin's indexes; one that lacks `index` fails the
    /// call rather than answer part of the union.
    pub fn by_index(
        &self,
        index: &str,
        value: &str,
    ) -> Result<Vec<Arc<CachedObject>>, UnknownIndex> {
        let lists = self
            .stores
            .iter()
            .map(|store| store.by_index(index, value))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(union(lists))
    }
}

fn host_gvk(kind: types::Gvk) -> Gvk {
    Gvk {
        group: kind.group,
        version: kind.version,
        kind: kind.kind,
    }
}

impl HostState {
    /// The granted stores for `kind`, or the `forbidden` answer (logged: who asked for what).
    fn granted(&self, kind: types::Gvk, call: &str) -> Result<Granted, Error> {
        let gvk = host_gvk(kind);
        match self.grants.stores(&gvk) {
            Some(granted) => Ok(granted),
            None => {
                tracing::warn!(plugin.id = %self.plugin, lister.call = call, kind = %gvk, "lister refused: kind not granted");
                Err(Error::Forbidden(format!(
                    "plugin {} is not granted {gvk}; add it to the plugin's `read` list",
                    self.plugin
                )))
            }
        }
    }
}

/// A lister call's answer; the error is the plugin's to handle, a trap (`Err`) ends its call.
type Answer<T> = wasmtime::Result<Result<T, Error>>;

impl HostState {
    /// `lister.get`.
    pub(crate) fn lister_get(
        &mut self,
        kind: types::Gvk,
        namespace: String,
        name: String,
    ) -> Answer<SharedObject> {
        self.check_deadline()?;
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "get").and_then(|granted| {
            granted
                .get(&namespace, &name)
                .map(|obj| SharedObject::new(granted.gvk(), &obj))
                .ok_or(Error::NotFound)
        });
        Ok(self.grants.counted(&gvk, result))
    }

    /// `lister.list`.
    pub(crate) fn lister_list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: String,
    ) -> Answer<Vec<SharedObject>> {
        self.check_deadline()?;
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "list").and_then(|granted| {
            let selector: LabelSelector = label_selector
                .parse()
                .map_err(|e: crate::cache::SelectorError| Error::InvalidSelector(e.reason))?;
            Ok(granted
                .list(namespace.as_deref(), &selector)
                .iter()
                .map(|o| SharedObject::new(granted.gvk(), o))
                .collect())
        });
        Ok(self.grants.counted(&gvk, result))
    }

    /// `lister.by-index`.
    pub(crate) fn lister_by_index(
        &mut self,
        kind: types::Gvk,
        index: String,
        value: String,
    ) -> Answer<Vec<SharedObject>> {
        self.check_deadline()?;
        let gvk = host_gvk(kind.clone());
        let result = self.granted(kind, "by-index").and_then(|granted| {
            let objects = granted
                .by_index(&index, &value)
                .map_err(|e| Error::UnknownIndex(e.to_string()))?;
            Ok(objects
                .iter()
                .map(|o| SharedObject::new(granted.gvk(), o))
                .collect())
        });
        Ok(self.grants.counted(&gvk, result))
    }
}

/// Links the current contract's `lister` (which 0.3.x plugins import), by hand rather than through
/// the generated bindings: those answer owned records, which would copy every body.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut lister = linker.instance(&format!("{CONTRACT_PACKAGE}/lister@{CONTRACT_VERSION}"))?;
    lister.func_wrap(
        "get",
        |mut store: StoreContextMut<'_, HostState>,
         (kind, namespace, name): (types::Gvk, String, String)| {
            Ok((store.data_mut().lister_get(kind, namespace, name)?,))
        },
    )?;
    lister.func_wrap(
        "list",
        |mut store: StoreContextMut<'_, HostState>,
         (kind, namespace, selector): (types::Gvk, Option<String>, String)| {
            Ok((store.data_mut().lister_list(kind, namespace, selector)?,))
        },
    )?;
    lister.func_wrap(
        "by-index",
        |mut store: StoreContextMut<'_, HostState>,
         (kind, index, value): (types::Gvk, String, String)| {
            Ok((store.data_mut().lister_by_index(kind, index, value)?,))
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::IndexSpec;
    use serde_json::{Value, json};

    fn pod(namespace: &str, name: &str, rv: u64, node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"namespace": namespace, "name": name, "resourceVersion": rv.to_string()},
               "spec": {"nodeName": node}})
    }

    fn store(objects: &[Value]) -> Arc<Store> {
        let by_node = IndexSpec {
            name: "by-node".into(),
            path: "spec.nodeName".parse().unwrap(),
        };
        let store = Arc::new(Store::new(
            Gvk::from_api_version("v1", "Pod"),
            vec![by_node],
            true,
        ));
        for value in objects {
            store.upsert(store.admit(value.clone()).unwrap());
        }
        store
    }

    fn names(objects: &[Arc<CachedObject>]) -> Vec<String> {
        objects
            .iter()
            .map(|o| format!("{} {}", o.key(), o.resource_version()))
            .collect()
    }

    /// Two subscriptions of one kind (namespaces `a` and `b`) and a lagging copy of `a/x` in a
    /// third store (two selectors overlapping).
    fn granted() -> Granted {
        let mut grants = Grants::none();
        grants.grant(store(&[pod("a", "x", 5, "n1"), pod("a", "y", 3, "n2")]));
        grants.grant(store(&[pod("b", "z", 4, "n1")]));
        grants.grant(store(&[pod("a", "x", 2, "n1")]));
        grants.stores(&Gvk::from_api_version("v1", "Pod")).unwrap()
    }

    #[test]
    fn get_finds_an_object_of_any_subscription_of_the_kind_in_its_newest_state() {
        let granted = granted();
        assert_eq!(granted.get("a", "x").unwrap().resource_version(), "5");
        assert_eq!(
            granted.get("b", "z").unwrap().resource_version(),
            "4",
            "the second subscription's object is found too"
        );
        assert!(granted.get("c", "x").is_none());
    }

    #[test]
    fn list_and_by_index_answer_the_union_once_per_object() {
        let granted = granted();
        assert_eq!(
            names(&granted.list(None, &LabelSelector::default())),
            ["a/x 5", "a/y 3", "b/z 4"]
        );
        assert_eq!(
            names(&granted.list(Some("b"), &LabelSelector::default())),
            ["b/z 4"]
        );
        assert_eq!(
            names(&granted.by_index("by-node", "n1").unwrap()),
            ["a/x 5", "b/z 4"]
        );
        assert!(granted.by_index("by-zone", "z1").is_err());
    }

    #[test]
    fn a_kind_not_granted_has_no_stores() {
        assert!(
            Grants::none()
                .stores(&Gvk::from_api_version("v1", "Pod"))
                .is_none()
        );
    }
}
