//! [`Store`]: one kind's objects with their namespace and custom indexes, kept consistent through
//! every write, like client-go's `ThreadSafeStore` with an `Indexer`.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasher, Hash, Hasher};
use std::ops::Bound;
use std::sync::{Arc, RwLock, RwLockReadGuard};

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use serde_json::Value;

use super::{
    CachedObject, Gvk, IndexSpec, LabelSelector, NAMESPACE_INDEX, ObjectError, ObjectKey,
    WireObject,
};

/// No index of that name exists for the kind.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no index {index:?} for {gvk}")]
pub struct UnknownIndex {
    /// The kind asked about.
    pub gvk: Gvk,
    /// The index name asked for.
    pub index: String,
}

/// One kind's objects, shared by every plugin that handles or reads that kind.
#[derive(Debug)]
pub struct Store {
    gvk: Gvk,
    indexes: Vec<IndexSpec>,
    strip_managed_fields: bool,
    state: RwLock<State>,
}

/// Every structure holds the objects themselves (`Arc`s), never a copy of their keys: an object's
/// key lives once, in the object.
#[derive(Default)]
struct State {
    /// The key hash: foldhash, seeded at random per store (hashbrown's default hasher; kube-rs's
    /// reflector store uses ahash, of the same kind). SipHash, the standard library's, took 380
    /// of the ~7,250 instructions a plugin's `lister.get` costs the host (issue 17, item 9).
    hasher: RandomState,
    objects: HashTable<Arc<CachedObject>>,
    /// Namespace → objects, ordered: a list walks it in key order (`ObjectKey` orders by
    /// namespace first).
    by_namespace: BTreeMap<String, BTreeSet<ByKey>>,
    /// Per custom index (same order as `Store::indexes`): value → objects.
    by_index: Vec<HashMap<String, BTreeSet<ByKey>>>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("objects", &self.objects.len())
            .finish_non_exhaustive()
    }
}

/// An object in an index set, ordered (and found) by its key.
#[derive(Debug, Clone)]
struct ByKey(Arc<CachedObject>);

impl PartialEq for ByKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key() == other.0.key()
    }
}

impl Eq for ByKey {}

impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.key().cmp(other.0.key())
    }
}

impl Borrow<ObjectKey> for ByKey {
    fn borrow(&self) -> &ObjectKey {
        self.0.key()
    }
}

/// The table's hash of the key `namespace`/`name`.
fn key_hash(hasher: &RandomState, namespace: &str, name: &str) -> u64 {
    let mut hasher = hasher.build_hasher();
    namespace.hash(&mut hasher);
    name.hash(&mut hasher);
    hasher.finish()
}

impl State {
    fn hash(&self, namespace: &str, name: &str) -> u64 {
        key_hash(&self.hasher, namespace, name)
    }

    fn get(&self, namespace: &str, name: &str) -> Option<&Arc<CachedObject>> {
        self.objects.find(self.hash(namespace, name), |o| {
            o.namespace() == namespace && o.name() == name
        })
    }

    /// Inserts or replaces `obj` in the table (not the indexes), returning the object replaced.
    fn insert(&mut self, obj: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let hash = self.hash(obj.namespace(), obj.name());
        let hasher = &self.hasher;
        let rehash = |o: &Arc<CachedObject>| key_hash(hasher, o.namespace(), o.name());
        match self.objects.entry(hash, |o| o.key() == obj.key(), rehash) {
            Entry::Occupied(mut entry) => Some(std::mem::replace(entry.get_mut(), obj)),
            Entry::Vacant(entry) => {
                entry.insert(obj);
                None
            }
        }
    }

    fn remove(&mut self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        let hash = self.hash(key.namespace(), key.name());
        let entry = self.objects.find_entry(hash, |o| o.key() == key).ok()?;
        Some(entry.remove().0)
    }

    fn link(&mut self, obj: &Arc<CachedObject>) {
        self.by_namespace
            .entry(obj.namespace().to_owned())
            .or_default()
            .insert(ByKey(obj.clone()));
        for (i, index) in self.by_index.iter_mut().enumerate() {
            for value in obj.index_values(i) {
                index
                    .entry(value.clone())
                    .or_default()
                    .insert(ByKey(obj.clone()));
            }
        }
    }

    fn unlink(&mut self, obj: &CachedObject) {
        /// Takes `key` out of `objects`, saying whether that left the set empty (to drop it).
        fn emptied(objects: Option<&mut BTreeSet<ByKey>>, key: &ObjectKey) -> bool {
            objects.is_some_and(|objects| objects.remove(key) && objects.is_empty())
        }
        if emptied(self.by_namespace.get_mut(obj.namespace()), obj.key()) {
            self.by_namespace.remove(obj.namespace());
        }
        for (i, index) in self.by_index.iter_mut().enumerate() {
            for value in obj.index_values(i) {
                if emptied(index.get_mut(value), obj.key()) {
                    index.remove(value);
                }
            }
        }
    }

    /// The objects of `objects` from `start` on, in key order.
    fn objects_from<'a>(
        objects: &'a BTreeSet<ByKey>,
        start: Bound<&ObjectKey>,
    ) -> impl Iterator<Item = &'a Arc<CachedObject>> + use<'a> {
        objects
            .range::<ObjectKey, _>((start, Bound::Unbounded))
            .map(|o| &o.0)
    }

    fn objects_at(objects: Option<&BTreeSet<ByKey>>) -> Vec<Arc<CachedObject>> {
        objects.into_iter().flatten().map(|o| o.0.clone()).collect()
    }
}

impl Store {
    /// An empty store for `gvk` with `indexes` (besides the built-in namespace index).
    pub fn new(gvk: Gvk, indexes: Vec<IndexSpec>, strip_managed_fields: bool) -> Self {
        let state = State {
            by_index: vec![HashMap::new(); indexes.len()],
            ..State::default()
        };
        Self {
            gvk,
            indexes,
            strip_managed_fields,
            state: RwLock::new(state),
        }
    }

    /// A store holding `objects`, each admitted as [`Store::admit`] does: a cache built without
    /// an informer (tests, benchmarks, tools). Only the crate's informers write to a store after
    /// it is built.
    pub fn with_objects(
        gvk: Gvk,
        indexes: Vec<IndexSpec>,
        strip_managed_fields: bool,
        objects: impl IntoIterator<Item = Value>,
    ) -> Result<Self, ObjectError> {
        let store = Self::new(gvk, indexes, strip_managed_fields);
        for value in objects {
            store.upsert(store.admit(value)?);
        }
        Ok(store)
    }

    /// The kind this store keeps.
    pub fn gvk(&self) -> &Gvk {
        &self.gvk
    }

    /// The custom indexes this store keeps.
    pub fn indexes(&self) -> &[IndexSpec] {
        &self.indexes
    }

    /// Turns an object's JSON into a [`CachedObject`] for this store (stripping managed fields
    /// and computing its index values as configured). Does not insert it.
    pub fn admit(&self, value: Value) -> Result<Arc<CachedObject>, ObjectError> {
        CachedObject::from_value(value, self.strip_managed_fields, &self.indexes).map(Arc::new)
    }

    /// [`Store::admit`] for an object as received from the server.
    pub fn admit_wire(&self, wire: WireObject) -> Result<Arc<CachedObject>, ObjectError> {
        CachedObject::from_wire(wire, self.strip_managed_fields, &self.indexes).map(Arc::new)
    }

    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().expect("store lock poisoned")
    }

    /// Inserts or replaces `obj`, returning the object it replaced.
    pub(crate) fn upsert(&self, obj: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let mut state = self.state.write().expect("store lock poisoned");
        let old = state.insert(obj.clone());
        if let Some(old) = &old {
            state.unlink(old);
        }
        state.link(&obj);
        old
    }

    /// Removes the object at `key`, returning it.
    pub(crate) fn remove(&self, key: &ObjectKey) -> Option<Arc<CachedObject>> {
        let mut state = self.state.write().expect("store lock poisoned");
        let old = state.remove(key)?;
        state.unlink(&old);
        Some(old)
    }

    /// The object at `namespace`/`name`.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        self.read().get(namespace, name).cloned()
    }

    /// Objects in `namespace` (`None`: all) matching `selector`, ordered by key.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<CachedObject>> {
        self.list_page(namespace, selector, None, usize::MAX)
    }

    /// What [`Store::list`] answers, a page of it: at most `limit` of those objects whose key
    /// comes after `after` (`None`: from the first).
    ///
    /// The objects are walked in key order where they already are in it, the namespace index
    /// (namespace by namespace, for all of them), so a page costs the objects it walks, not a
    /// sort. The selector is tested under the read lock, on the objects in place: only a match
    /// is cloned (an `Arc` cloned and dropped again cost a list two atomic operations per object
    /// it skipped).
    pub fn list_page(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Vec<Arc<CachedObject>> {
        let matches = |o: &&Arc<CachedObject>| selector.matches_with(|key| o.labels().get(key));
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        // The namespace asked for, or all from the one `after` is in, in order.
        let namespaces = match namespace {
            Some(ns) => (Bound::Included(ns), Bound::Included(ns)),
            None => (
                Bound::Included(after.map_or("", ObjectKey::namespace)),
                Bound::Unbounded,
            ),
        };
        let state = self.read();
        (state.by_namespace.range::<str, _>(namespaces))
            .flat_map(|(_, objects)| State::objects_from(objects, start))
            .filter(matches)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Objects whose index `index` holds `value`, ordered by key. `namespace` is built in.
    pub fn by_index(
        &self,
        index: &str,
        value: &str,
    ) -> Result<Vec<Arc<CachedObject>>, UnknownIndex> {
        let state = self.read();
        if index == NAMESPACE_INDEX {
            return Ok(State::objects_at(state.by_namespace.get(value)));
        }
        let i = self
            .indexes
            .iter()
            .position(|spec| spec.name == index)
            .ok_or_else(|| UnknownIndex {
                gvk: self.gvk.clone(),
                index: index.to_owned(),
            })?;
        Ok(State::objects_at(state.by_index[i].get(value)))
    }

    /// Every object, ordered by key: a consistent snapshot.
    pub fn snapshot(&self) -> Vec<Arc<CachedObject>> {
        self.list(None, &LabelSelector::default())
    }

    /// How many objects the store holds.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// Whether the store holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod_store() -> Store {
        let by_node = IndexSpec {
            name: "by-node".into(),
            path: "spec.nodeName".parse().unwrap(),
        };
        Store::new(Gvk::from_api_version("v1", "Pod"), vec![by_node], true)
    }

    fn pod(store: &Store, ns: &str, name: &str, node: &str, app: &str) -> Arc<CachedObject> {
        store
            .admit(json!({"metadata": {"namespace": ns, "name": name, "labels": {"app": app}}, "spec": {"nodeName": node}}))
            .unwrap()
    }

    fn names(objs: Vec<Arc<CachedObject>>) -> Vec<String> {
        objs.iter().map(|o| o.key().to_string()).collect()
    }

    #[test]
    fn indexes_follow_updates_and_deletes() {
        let store = pod_store();
        store.upsert(pod(&store, "a", "p1", "n1", "web"));
        store.upsert(pod(&store, "b", "p2", "n1", "db"));
        assert_eq!(
            names(store.by_index("by-node", "n1").unwrap()),
            ["a/p1", "b/p2"]
        );

        // p1 moves to n2: the old index entry goes, the new one appears.
        let old = store.upsert(pod(&store, "a", "p1", "n2", "web")).unwrap();
        assert_eq!(old.index_values(0), ["n1"]);
        assert_eq!(names(store.by_index("by-node", "n1").unwrap()), ["b/p2"]);
        assert_eq!(names(store.by_index("by-node", "n2").unwrap()), ["a/p1"]);

        store.remove(&ObjectKey::new("b", "p2"));
        assert!(store.by_index("by-node", "n1").unwrap().is_empty());
        assert!(store.by_index(NAMESPACE_INDEX, "b").unwrap().is_empty());
        assert_eq!(
            names(store.by_index(NAMESPACE_INDEX, "a").unwrap()),
            ["a/p1"]
        );
        assert_eq!(store.by_index("nope", "x").unwrap_err().index, "nope");
    }

    #[test]
    fn list_filters_by_namespace_and_selector() {
        let store = pod_store();
        for (ns, name, app) in [("a", "p1", "web"), ("a", "p2", "db"), ("b", "p3", "web")] {
            store.upsert(pod(&store, ns, name, "n", app));
        }
        let web: LabelSelector = "app=web".parse().unwrap();
        assert_eq!(names(store.list(None, &web)), ["a/p1", "b/p3"]);
        assert_eq!(names(store.list(Some("a"), &web)), ["a/p1"]);
        assert_eq!(
            names(store.list(Some("a"), &LabelSelector::default())),
            ["a/p1", "a/p2"]
        );
        assert!(
            store
                .list(Some("zzz"), &LabelSelector::default())
                .is_empty()
        );
    }

    #[test]
    fn list_answers_in_key_order_whatever_the_order_of_writes() {
        let store = pod_store();
        for (ns, name, app) in [
            ("b", "p9", "web"),
            ("a", "p5", "web"),
            ("b", "p1", "web"),
            ("a", "p2", "db"),
            ("a", "p0", "web"),
        ] {
            store.upsert(pod(&store, ns, name, "n", app));
        }
        let web: LabelSelector = "app=web".parse().unwrap();
        assert_eq!(
            names(store.list(None, &web)),
            ["a/p0", "a/p5", "b/p1", "b/p9"]
        );
        assert_eq!(names(store.list(Some("a"), &web)), ["a/p0", "a/p5"]);
        let not_web: LabelSelector = "app!=web".parse().unwrap();
        assert_eq!(names(store.list(None, &not_web)), ["a/p2"]);
    }

    /// Pages read one after another, each from the last key of the one before, answer what one
    /// list answers: every match once, in key order, namespaces included; and a page reads the
    /// store as it is when asked.
    #[test]
    fn pages_from_the_last_key_answer_the_list_in_order() {
        let store = pod_store();
        for (ns, name, app) in [
            ("b", "p9", "web"),
            ("a", "p5", "web"),
            ("b", "p1", "web"),
            ("a-b", "p3", "web"),
            ("a", "p2", "db"),
            ("a", "p0", "web"),
            ("c", "p4", "web"),
        ] {
            store.upsert(pod(&store, ns, name, "n", app));
        }
        let web: LabelSelector = "app=web".parse().unwrap();
        let pages = |namespace: Option<&str>, limit: usize| {
            let mut pages = Vec::new();
            let mut after = None;
            loop {
                let page = store.list_page(namespace, &web, after.as_ref(), limit);
                after = page.last().map(|o| o.key().clone());
                let full = page.len() == limit;
                pages.push(names(page));
                if !full {
                    return pages;
                }
            }
        };
        // "a" < "a-b" as namespaces, though "a/…" > "a-b/…" as text: keys order by namespace.
        let all = ["a/p0", "a/p5", "a-b/p3", "b/p1", "b/p9", "c/p4"];
        assert_eq!(names(store.list(None, &web)), all);
        assert_eq!(
            pages(None, 2),
            [
                vec!["a/p0", "a/p5"],
                vec!["a-b/p3", "b/p1"],
                vec!["b/p9", "c/p4"],
                vec![]
            ]
        );
        assert_eq!(pages(None, 4), [&all[..4], &all[4..]]);
        assert_eq!(pages(Some("b"), 1), [vec!["b/p1"], vec!["b/p9"], vec![]]);
        // From a key no object has, in another namespace: the next ones, in this namespace only.
        let after = ObjectKey::new("a", "p1");
        assert_eq!(
            names(store.list_page(None, &web, Some(&after), 2)),
            ["a/p5", "a-b/p3"]
        );
        assert_eq!(
            names(store.list_page(Some("b"), &web, Some(&after), 9)),
            ["b/p1", "b/p9"]
        );
        assert!(
            store
                .list_page(Some("a"), &web, Some(&ObjectKey::new("b", "")), 9)
                .is_empty()
        );
        // Each page reads the store as it is then: a write behind the last page does not show,
        // one ahead of it does.
        let after = ObjectKey::new("b", "p1");
        store.upsert(pod(&store, "a", "p1", "n", "web"));
        store.upsert(pod(&store, "b", "p5", "n", "web"));
        store.remove(&ObjectKey::new("b", "p9"));
        assert_eq!(
            names(store.list_page(None, &web, Some(&after), 9)),
            ["b/p5", "c/p4"]
        );
    }
}
