//! The `lister` import: reads of the stores a plugin is granted, answered from the cache.
//!
//! A plugin may hold several stores of one kind: two `handles` of Pods in two namespaces (or with
//! two selectors), or a `handles` entry and a `read` grant of the same kind. Its reads of that
//! kind see the union of them all, so a `get` inside a handler finds the object the handler was
//! just given, whichever subscription delivered it. An object held by more than one store is
//! answered once, in its newest state (highest resourceVersion).

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use prometheus_client::metrics::counter::Counter;

use wasmtime::StoreContextMut;
use wasmtime::component::{ComponentType, Lift, Linker, Lower};

use super::arg::ArgStr;
use super::{HostState, PackedKind, SharedObject};
use crate::cache::{CachedObject, Gvk, LabelSelector, ObjectKey, Store, StoreSource, UnknownIndex};
use crate::metrics::ListerCalls;
use crate::plugin::bindings::wasmformer::plugin::lister::Error;
use crate::plugin::bindings::wasmformer::plugin::types;
use crate::plugin::{CONTRACT_PACKAGE, CONTRACT_VERSION};

/// The stores one plugin may read, by kind: one per subscription or read grant of that kind (a
/// kind it handles is granted too); and what it may write.
///
/// A lister call finds its kind by comparing names (a plugin is granted a few kinds, so a scan
/// costs less than hashing three strings) and counts itself with a counter kept per kind and
/// result, so a call allocates nothing on the host before its answer (issue 17, item 9).
#[derive(Debug, Default, Clone)]
pub struct Grants {
    kinds: Vec<GrantedKind>,
    writes: Option<Arc<super::WriteAccess>>,
    calls: Option<ListerCalls>,
}

/// One granted kind: its stores, and its counters of `wasmformer_lister_calls_total`, made at its
/// first call with each result (a series exists once a call had that result, as before).
#[derive(Debug, Clone)]
struct GrantedKind {
    gvk: Gvk,
    /// `gvk` packed for the `meta` of every object answered.
    packed: PackedKind,
    sources: Vec<Arc<dyn StoreSource>>,
    counters: [OnceLock<Counter>; OUTCOMES.len()],
}

/// The `result` label of `wasmformer_lister_calls_total`, by [`outcome`].
const OUTCOMES: [&str; 5] = [
    "ok",
    "not-found",
    "forbidden",
    "invalid-selector",
    "unknown-index",
];

/// The index in [`OUTCOMES`] of a call's result.
fn outcome<T>(result: &Result<T, Error>) -> usize {
    match result {
        Ok(_) => 0,
        Err(Error::NotFound) => 1,
        Err(Error::Forbidden(_)) => 2,
        Err(Error::InvalidSelector(_)) => 3,
        Err(Error::UnknownIndex(_)) => 4,
    }
}

/// A kind as a lister call names it, read in place (in the plugin's memory, for the current
/// contract).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KindRef<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub kind: &'a str,
}

impl<'a> KindRef<'a> {
    pub(crate) fn of(gvk: &'a types::Gvk) -> Self {
        Self {
            group: &gvk.group,
            version: &gvk.version,
            kind: &gvk.kind,
        }
    }
}

impl GrantedKind {
    fn is(&self, kind: KindRef<'_>) -> bool {
        self.gvk.kind == kind.kind
            && self.gvk.group == kind.group
            && self.gvk.version == kind.version
    }

    /// The object at `namespace`/`name` in any of the current stores, without collecting them
    /// (what [`Granted::get`] answers).
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        newest(
            self.sources
                .iter()
                .filter_map(|source| source.current().get(namespace, name)),
        )
    }

    /// `objects` of this kind, as they cross into the plugin.
    fn shared(&self, objects: Vec<Arc<CachedObject>>) -> Vec<SharedObject> {
        (objects.into_iter())
            .map(|o| SharedObject::new(self.packed, o))
            .collect()
    }

    /// The current stores: reads of the kind see their union.
    fn granted(&self) -> Granted {
        Granted {
            stores: self.sources.iter().map(|source| source.current()).collect(),
        }
    }
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
        match self.kinds.iter_mut().find(|granted| granted.gvk == gvk) {
            Some(granted) => granted.sources.push(source),
            None => self.kinds.push(GrantedKind {
                packed: PackedKind::new(&gvk),
                gvk,
                sources: vec![source],
                counters: Default::default(),
            }),
        }
        self
    }

    /// The current stores for `gvk`, if granted: reads of the kind see their union.
    pub fn stores(&self, gvk: &Gvk) -> Option<Granted> {
        self.kinds
            .iter()
            .find(|granted| granted.gvk == *gvk)
            .map(GrantedKind::granted)
    }

    /// The granted kind `kind`, if it is.
    fn find(&self, kind: KindRef<'_>) -> Option<&GrantedKind> {
        self.kinds.iter().find(|granted| granted.is(kind))
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

    /// Counts a call for `kind` (`granted`, if it is) that ended in `result`.
    fn counted<T>(
        &self,
        kind: KindRef<'_>,
        granted: Option<&GrantedKind>,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        let Some(calls) = &self.calls else {
            return result;
        };
        let outcome = outcome(&result);
        match granted {
            Some(granted) => granted.counters[outcome]
                .get_or_init(|| calls.counter(&granted.gvk.to_string(), OUTCOMES[outcome]))
                .inc(),
            None => calls
                .counter(&host_gvk(kind).to_string(), OUTCOMES[outcome])
                .inc(),
        };
        result
    }

    /// The granted kinds.
    pub fn kinds(&self) -> impl Iterator<Item = &Gvk> {
        self.kinds.iter().map(|granted| &granted.gvk)
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

/// The newest of several states of one object (the first seen among equals).
fn newest(states: impl Iterator<Item = Arc<CachedObject>>) -> Option<Arc<CachedObject>> {
    states.reduce(|a, b| if newer(&b, &a) { b } else { a })
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
        newest(
            self.stores
                .iter()
                .filter_map(|store| store.get(namespace, name)),
        )
    }

    /// Objects in `namespace` (`None`: all) matching `selector` in any of the stores, each once,
    /// ordered by key.
    pub fn list(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
    ) -> Vec<Arc<CachedObject>> {
        self.list_page(namespace, selector, None, usize::MAX)
    }

    /// What [`Granted::list`] answers, a page of it: at most `limit` of those objects whose key
    /// comes after `after` (`None`: from the first).
    pub fn list_page(
        &self,
        namespace: Option<&str>,
        selector: &LabelSelector,
        after: Option<&ObjectKey>,
        limit: usize,
    ) -> Vec<Arc<CachedObject>> {
        // Each store's first `limit` after `after` hold the union's first `limit`.
        let mut page = union(
            self.stores
                .iter()
                .map(|store| store.list_page(namespace, selector, after, limit)),
        );
        page.truncate(limit);
        page
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

/// A `list-page` answer: the objects, and where the next page starts if this one is full.
/// `after` is a key as `next` gives it (`namespace/name`, or `name` for a cluster-scoped object);
/// `limit` 0 answers all the rest, as the API server's does.
fn page(
    granted: &Granted,
    namespace: Option<&str>,
    selector: &LabelSelector,
    after: Option<&str>,
    limit: u32,
) -> (Vec<Arc<CachedObject>>, Option<String>) {
    // Namespaces and names hold no `/` (the API server refuses them in both).
    let after = after.map(|key| match key.split_once('/') {
        Some((namespace, name)) => ObjectKey::new(namespace, name),
        None => ObjectKey::new("", key),
    });
    let limit = match limit {
        0 => usize::MAX,
        limit => limit as usize,
    };
    let objects = granted.list_page(namespace, selector, after.as_ref(), limit);
    let next = match objects.len() == limit {
        true => objects.last().map(|o| o.key().to_string()),
        false => None,
    };
    (objects, next)
}

/// A lister call's label selector, or why it does not parse.
fn parse_selector(text: &str) -> Result<LabelSelector, Error> {
    text.parse()
        .map_err(|e: crate::cache::SelectorError| Error::InvalidSelector(e.reason))
}

fn host_gvk(kind: KindRef<'_>) -> Gvk {
    Gvk {
        group: kind.group.to_owned(),
        version: kind.version.to_owned(),
        kind: kind.kind.to_owned(),
    }
}

/// A lister call's answer; the error is the plugin's to handle, a trap (`Err`) ends its call.
type Answer<T> = wasmtime::Result<Result<T, Error>>;

impl HostState {
    /// A lister call `call` of `kind`: `read` answers it from the granted kind, or the answer is
    /// `forbidden` (logged: who asked for what); counted either way.
    fn answer<T>(
        &self,
        kind: KindRef<'_>,
        call: &str,
        read: impl FnOnce(&GrantedKind) -> Result<T, Error>,
    ) -> Answer<T> {
        self.check_deadline()?;
        let granted = self.grants.find(kind);
        let result = match granted {
            Some(granted) => read(granted),
            None => {
                let gvk = host_gvk(kind);
                tracing::warn!(plugin.id = %self.plugin, lister.call = call, kind = %gvk, "lister refused: kind not granted");
                Err(Error::Forbidden(format!(
                    "plugin {} is not granted {gvk}; add it to the plugin's `read` list",
                    self.plugin
                )))
            }
        };
        Ok(self.grants.counted(kind, granted, result))
    }

    /// `lister.get`.
    pub(crate) fn lister_get(
        &self,
        kind: KindRef<'_>,
        namespace: &str,
        name: &str,
    ) -> Answer<SharedObject> {
        self.answer(kind, "get", |granted| {
            granted
                .get(namespace, name)
                .map(|obj| SharedObject::new(granted.packed, obj))
                .ok_or(Error::NotFound)
        })
    }

    /// `lister.list`.
    pub(crate) fn lister_list(
        &self,
        kind: KindRef<'_>,
        namespace: Option<&str>,
        label_selector: &str,
    ) -> Answer<Vec<SharedObject>> {
        self.answer(kind, "list", |granted| {
            let selector = parse_selector(label_selector)?;
            Ok(granted.shared(granted.granted().list(namespace, &selector)))
        })
    }

    /// `lister.list-page` ([`page`]).
    pub(crate) fn lister_list_page(
        &self,
        kind: KindRef<'_>,
        namespace: Option<&str>,
        label_selector: &str,
        after: Option<&str>,
        limit: u32,
    ) -> Answer<Page> {
        self.answer(kind, "list-page", |granted| {
            let selector = parse_selector(label_selector)?;
            let (objects, next) = page(&granted.granted(), namespace, &selector, after, limit);
            Ok(Page {
                objects: granted.shared(objects),
                next,
            })
        })
    }

    /// `lister.by-index`.
    pub(crate) fn lister_by_index(
        &self,
        kind: KindRef<'_>,
        index: &str,
        value: &str,
    ) -> Answer<Vec<SharedObject>> {
        self.answer(kind, "by-index", |granted| {
            let objects = granted
                .granted()
                .by_index(index, value)
                .map_err(|e| Error::UnknownIndex(e.to_string()))?;
            Ok(granted.shared(objects))
        })
    }
}

/// Links the current contract's `lister` (which 0.3.x plugins import), by hand rather than through
/// the generated bindings: those answer owned records, which would copy every body. Its string
/// arguments are read as they are lifted ([`ArgStr`]).
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    let mut lister = linker.instance(&format!("{CONTRACT_PACKAGE}/lister@{CONTRACT_VERSION}"))?;
    lister.func_wrap(
        "get",
        |store: StoreContextMut<'_, HostState>,
         (kind, namespace, name): (WireGvk, ArgStr, ArgStr)| {
            Ok((store.data().lister_get(kind.as_kind(), &namespace, &name)?,))
        },
    )?;
    lister.func_wrap(
        "list",
        |store: StoreContextMut<'_, HostState>,
         (kind, namespace, selector): (WireGvk, Option<ArgStr>, ArgStr)| {
            Ok((store
                .data()
                .lister_list(kind.as_kind(), namespace.as_deref(), &selector)?,))
        },
    )?;
    lister.func_wrap(
        "list-page",
        |store: StoreContextMut<'_, HostState>,
         (kind, namespace, selector, after, limit): (
            WireGvk,
            Option<ArgStr>,
            ArgStr,
            Option<ArgStr>,
            u32,
        )| {
            Ok((store.data().lister_list_page(
                kind.as_kind(),
                namespace.as_deref(),
                &selector,
                after.as_deref(),
                limit,
            )?,))
        },
    )?;
    lister.func_wrap(
        "by-index",
        |store: StoreContextMut<'_, HostState>, (kind, index, value): (WireGvk, ArgStr, ArgStr)| {
            Ok((store
                .data()
                .lister_by_index(kind.as_kind(), &index, &value)?,))
        },
    )?;
    Ok(())
}

/// The contract's `page` record, a `list-page` answer.
#[derive(ComponentType, Lower)]
#[component(record)]
pub(crate) struct Page {
    objects: Vec<SharedObject>,
    next: Option<String>,
}

/// The contract's `gvk` record as a lister call's argument.
#[derive(ComponentType, Lift)]
#[component(record)]
struct WireGvk {
    group: ArgStr,
    version: ArgStr,
    kind: ArgStr,
}

impl WireGvk {
    fn as_kind(&self) -> KindRef<'_> {
        KindRef {
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
        }
    }
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
    fn pages_answer_the_union_once_per_object_a_page_at_a_time() {
        let granted = granted();
        let everything = LabelSelector::default();
        let page = |after: Option<ObjectKey>, limit| {
            names(&granted.list_page(None, &everything, after.as_ref(), limit))
        };
        assert_eq!(
            page(None, 2),
            ["a/x 5", "a/y 3"],
            "a/x once, in its newest state"
        );
        assert_eq!(page(Some(ObjectKey::new("a", "x")), 2), ["a/y 3", "b/z 4"]);
        assert_eq!(page(Some(ObjectKey::new("a", "y")), 2), ["b/z 4"]);
        assert!(page(Some(ObjectKey::new("b", "z")), 2).is_empty());
    }

    /// The wire's side of a page: keys as text, `next` only after a full page, 0 for no limit.
    #[test]
    fn a_page_starts_after_the_key_the_one_before_gave() {
        let granted = granted();
        let everything = LabelSelector::default();
        let answer = |after, limit| {
            let (objects, next) = page(&granted, None, &everything, after, limit);
            (names(&objects), next)
        };
        assert_eq!(
            answer(None, 2),
            (vec!["a/x 5".into(), "a/y 3".into()], Some("a/y".into()))
        );
        assert_eq!(answer(Some("a/y"), 2), (vec!["b/z 4".into()], None));
        assert_eq!(
            answer(Some("a/x"), 0).0,
            ["a/y 3", "b/z 4"],
            "0: all the rest"
        );
        assert_eq!(answer(Some("a/x"), 0).1, None);
        // A key without a namespace is a cluster-scoped object's, before every namespace's.
        assert_eq!(answer(Some("zzz"), 1).0, ["a/x 5"]);
    }

    #[test]
    fn a_kind_not_granted_has_no_stores() {
        assert!(
            Grants::none()
                .stores(&Gvk::from_api_version("v1", "Pod"))
                .is_none()
        );
    }

    /// A call counts into its kind's and result's series, a repeated result into the same one,
    /// and a kind not granted under its own name (the counters kept per granted kind must not
    /// mix kinds or results up).
    #[test]
    fn calls_are_counted_by_kind_and_result() {
        let metrics = crate::metrics::Metrics::new();
        let mut grants = Grants::none();
        grants
            .grant(store(&[pod("a", "x", 5, "n1")]))
            .count_calls(metrics.plugin("p").lister_calls());
        let wire = |group: &str, version: &str, kind: &str| types::Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        };
        let pods = wire("", "v1", "Pod");
        let deployments = wire("apps", "v1", "Deployment");
        let (pods, deployments) = (KindRef::of(&pods), KindRef::of(&deployments));
        let granted = grants.find(pods);
        assert!(granted.is_some(), "Pods are granted");
        assert!(grants.find(deployments).is_none());
        assert!(
            grants.find(KindRef::of(&wire("", "v2", "Pod"))).is_none(),
            "the version counts"
        );
        for _ in 0..3 {
            let _ = grants.counted(pods, granted, Ok(()));
        }
        let _ = grants.counted(pods, granted, Err::<(), _>(Error::NotFound));
        let _ = grants.counted(
            deployments,
            None,
            Err::<(), _>(Error::Forbidden("no".into())),
        );
        let text = metrics.encode(crate::metrics::Format::Text);
        for line in [
            r#"wasmformer_lister_calls_total{plugin="p",kind="v1 Pod",result="ok"} 3"#,
            r#"wasmformer_lister_calls_total{plugin="p",kind="v1 Pod",result="not-found"} 1"#,
            r#"wasmformer_lister_calls_total{plugin="p",kind="apps/v1 Deployment",result="forbidden"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("wasmformer_lister_calls_total{"))
                .count(),
            3,
            "{text}"
        );
    }
}
