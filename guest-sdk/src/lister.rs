//! Typed reads of the host's informer cache (never a call to the API server).
//!
//! ```text
//! use wasmformer_guest::k8s_openapi::api::apps::v1::ReplicaSet;
//! let rs: ReplicaSet = wasmformer_guest::lister::get("default", "web-7d4b9")?;
//! ```
//!
//! A plugin may read only the kinds the host configuration grants it; other kinds answer
//! [`ListerError::Forbidden`].

use std::fmt;

use k8s_openapi::Resource;
use serde::de::DeserializeOwned;

use crate::bindings::wasmformer::plugin::lister as wit;
use crate::{Gvk, Object};

/// Why a lister call returned nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListerError {
    /// No such object in the cache.
    NotFound,
    /// The plugin is not granted this kind.
    Forbidden(String),
    /// The label selector does not parse.
    InvalidSelector(String),
    /// No index of that name is configured for the kind.
    UnknownIndex(String),
    /// The object is in the cache but does not decode into the requested type.
    Decode(String),
}

impl fmt::Display for ListerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotFound => f.write_str("not found"),
            Self::Forbidden(what) => write!(f, "forbidden: {what}"),
            Self::InvalidSelector(why) => write!(f, "invalid label selector: {why}"),
            Self::UnknownIndex(name) => write!(f, "unknown index: {name}"),
            Self::Decode(why) => write!(f, "cannot decode object: {why}"),
        }
    }
}

impl std::error::Error for ListerError {}

impl From<wit::Error> for ListerError {
    fn from(e: wit::Error) -> Self {
        match e {
            wit::Error::NotFound => Self::NotFound,
            wit::Error::Forbidden(what) => Self::Forbidden(what),
            wit::Error::InvalidSelector(why) => Self::InvalidSelector(why),
            wit::Error::UnknownIndex(name) => Self::UnknownIndex(name),
        }
    }
}

/// The [`Gvk`] of a k8s-openapi type, e.g. `gvk_of::<Pod>()` is `("", "v1", "Pod")`.
pub fn gvk_of<K: Resource>() -> Gvk {
    Gvk {
        group: K::GROUP.to_owned(),
        version: K::VERSION.to_owned(),
        kind: K::KIND.to_owned(),
    }
}

/// The object `namespace`/`name` of type `K` (namespace empty for cluster-scoped kinds).
pub fn get<K: Resource + DeserializeOwned>(namespace: &str, name: &str) -> Result<K, ListerError> {
    decode(get_object(&gvk_of::<K>(), namespace, name)?)
}

/// Objects of type `K` in `namespace` (`None`: all) matching `label_selector` (empty: all).
pub fn list<K: Resource + DeserializeOwned>(
    namespace: Option<&str>,
    label_selector: &str,
) -> Result<Vec<K>, ListerError> {
    list_objects(&gvk_of::<K>(), namespace, label_selector)?
        .into_iter()
        .map(decode)
        .collect()
}

/// The objects [`list`] answers, read from the cache a page at a time as the iterator goes
/// (contract 0.3.3), so that going through any number of them takes the memory of one page: a
/// plugin with `limits.memoryBytes` of a few MiB can walk 100,000 Pods. Stop early and the rest
/// is never read.
///
/// Unlike [`list`], which reads the cache once, each page reads it as it is then: every object
/// comes once at most and in key order (namespace, then name), in its state when its page was
/// read. See [`ObjectPages`] for the page size.
///
/// ```text
/// use wasmformer_guest::k8s_openapi::api::core::v1::Pod;
/// for pod in wasmformer_guest::lister::iter::<Pod>(None, "app=web") {
///     let pod = pod?;
///     // …
/// }
/// ```
pub fn iter<K: Resource + DeserializeOwned>(
    namespace: Option<&str>,
    label_selector: &str,
) -> impl Iterator<Item = Result<K, ListerError>> {
    iter_objects(&gvk_of::<K>(), namespace, label_selector).map(|obj| decode(obj?))
}

/// [`iter`] for any kind, custom resources included, without decoding.
pub fn iter_objects(kind: &Gvk, namespace: Option<&str>, label_selector: &str) -> ObjectPages {
    ObjectPages {
        kind: kind.clone(),
        namespace: namespace.map(str::to_owned),
        label_selector: label_selector.to_owned(),
        page_size: ObjectPages::DEFAULT_PAGE_SIZE,
        after: None,
        page: Vec::new().into_iter(),
        done: false,
    }
}

/// The iterator [`iter_objects`] returns: a page of objects is read from the cache when the one
/// before is used up.
#[derive(Debug)]
pub struct ObjectPages {
    kind: Gvk,
    namespace: Option<String>,
    label_selector: String,
    page_size: u32,
    /// Where the next page starts (`None`: at the first object).
    after: Option<String>,
    page: std::vec::IntoIter<crate::bindings::wasmformer::plugin::types::Object>,
    /// Whether the page read last was the last one (or an error ended the list).
    done: bool,
}

impl ObjectPages {
    /// The objects asked for at a time unless [`ObjectPages::page_size`] says otherwise: about
    /// 250 KiB of realistic Pods. Per object, pages of 64 cost about what one `list` does; pages
    /// of 8 cost 1.3–1.6× as much (a call into the host each), and larger ones measured no
    /// cheaper (BENCHMARKS.md, "lister pages").
    pub const DEFAULT_PAGE_SIZE: u32 = 64;

    /// Asks for `objects` at a time (at least 1): more costs fewer calls into the host and more
    /// memory for the page.
    pub fn page_size(mut self, objects: u32) -> Self {
        self.page_size = objects.max(1);
        self
    }
}

impl Iterator for ObjectPages {
    type Item = Result<Object, ListerError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(obj) = self.page.next() {
                return Some(Ok(obj.into()));
            }
            if self.done {
                return None;
            }
            let page = wit::list_page(
                &self.kind,
                self.namespace.as_deref(),
                &self.label_selector,
                self.after.as_deref(),
                self.page_size,
            );
            match page {
                Ok(page) => {
                    self.done = page.next.is_none();
                    self.after = page.next;
                    self.page = page.objects.into_iter();
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(e.into()));
                }
            }
        }
    }
}

/// Objects of type `K` whose index `index` holds `value`.
pub fn by_index<K: Resource + DeserializeOwned>(
    index: &str,
    value: &str,
) -> Result<Vec<K>, ListerError> {
    objects_by_index(&gvk_of::<K>(), index, value)?
        .into_iter()
        .map(decode)
        .collect()
}

/// [`get`] for any kind, custom resources included, without decoding.
pub fn get_object(kind: &Gvk, namespace: &str, name: &str) -> Result<Object, ListerError> {
    Ok(wit::get(kind, namespace, name)?.into())
}

/// [`list`] for any kind, without decoding.
pub fn list_objects(
    kind: &Gvk,
    namespace: Option<&str>,
    label_selector: &str,
) -> Result<Vec<Object>, ListerError> {
    Ok(wit::list(kind, namespace, label_selector)?
        .into_iter()
        .map(Object::from)
        .collect())
}

/// [`by_index`] for any kind, without decoding.
pub fn objects_by_index(kind: &Gvk, index: &str, value: &str) -> Result<Vec<Object>, ListerError> {
    Ok(wit::by_index(kind, index, value)?
        .into_iter()
        .map(Object::from)
        .collect())
}

fn decode<K: DeserializeOwned>(obj: Object) -> Result<K, ListerError> {
    serde_json::from_str(obj.json()).map_err(|e| ListerError::Decode(e.to_string()))
}
