//! [`CachedObject`]: one object as the cache keeps it, and the names that identify it.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Labels, WireObject, labels};

/// A kind: API group (empty for the core group), version and kind, as in a manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    /// API group, e.g. `apps`; empty for the core group.
    pub group: String,
    /// Version within the group, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Deployment`.
    pub kind: String,
}

impl Gvk {
    /// The kind named by a manifest's `apiVersion` (`v1`, `apps/v1`) and `kind`.
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// The `apiVersion` of this kind: `v1` or `apps/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.api_version(), self.kind)
    }
}

/// The cache key of an object: namespace (empty for cluster-scoped objects) and name, kept as
/// `namespace\0name` in one allocation (what `meta` carries after the kind). Ordered as the pair
/// (namespace, name): neither holds a NUL in an object the API server accepted (the cache refuses
/// those).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `namespace\0name`.
    packed: Box<str>,
    /// Where the namespace ends in `packed`.
    split: usize,
}

impl ObjectKey {
    /// The key `namespace`/`name`.
    pub fn new(namespace: impl AsRef<str>, name: impl AsRef<str>) -> Self {
        let (namespace, name) = (namespace.as_ref(), name.as_ref());
        let mut packed = String::with_capacity(namespace.len() + 1 + name.len());
        packed.push_str(namespace);
        packed.push('\0');
        packed.push_str(name);
        Self {
            packed: packed.into_boxed_str(),
            split: namespace.len(),
        }
    }

    /// `metadata.namespace`, empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        &self.packed[..self.split]
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.packed[self.split + 1..]
    }

    /// `namespace\0name`.
    pub(crate) fn packed(&self) -> &str {
        &self.packed
    }
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectKey")
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .finish()
    }
}

impl fmt::Display for ObjectKey {
    /// `namespace/name`, or `name` for cluster-scoped objects, as client-go's key function.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace().is_empty() {
            f.write_str(self.name())
        } else {
            write!(f, "{}/{}", self.namespace(), self.name())
        }
    }
}

/// Why a JSON document cannot be cached as an object.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// The document is not a JSON object.
    #[error("object is not a JSON object")]
    NotAnObject,
    /// `metadata.name` is missing or empty.
    #[error("object has no metadata.name")]
    NoName,
    /// `metadata.labels` is not a map of strings.
    #[error("metadata.labels of {key} is not a map of strings")]
    BadLabels {
        /// The object.
        key: ObjectKey,
    },
    /// Its namespace, name, uid, resourceVersion or a label holds a NUL character (which the
    /// API server never accepts; plugins receive these fields NUL-separated).
    #[error("metadata of {key} holds a NUL character")]
    Nul {
        /// The object.
        key: ObjectKey,
    },
}

/// One object in the cache: identity and labels extracted once, the body kept as compact JSON
/// (what plugins receive, so no handler call re-serializes it), and the object's values for each of
/// its store's indexes. The uid, resourceVersion and labels share one allocation, laid out as an
/// object's `meta` carries them after its namespace and name, so a crossing copies them at once.
#[derive(Debug, PartialEq, Eq)]
pub struct CachedObject {
    key: ObjectKey,
    /// `uid\0resourceVersion`, then `\0key\0value` for each label in key order.
    meta_tail: Box<str>,
    /// Where the uid ends in `meta_tail`.
    uid_end: usize,
    /// Where the resourceVersion ends in `meta_tail` (the labels start one byte after).
    version_end: usize,
    /// How many labels there are.
    label_count: usize,
    body: Box<str>,
    index_values: Box<[Box<[String]>]>,
}

impl CachedObject {
    /// Builds a cached object from its JSON, computing its values for `indexes`. Removes
    /// `metadata.managedFields` when `strip_managed_fields` is set.
    pub fn from_value(
        value: Value,
        strip_managed_fields: bool,
        indexes: &[super::IndexSpec],
    ) -> Result<Self, ObjectError> {
        Self::from_wire(
            WireObject::from_value(&value)?,
            strip_managed_fields,
            indexes,
        )
    }

    /// Builds a cached object from an object as received, computing its values for `indexes`.
    /// Removes `metadata.managedFields` when `strip_managed_fields` is set.
    pub fn from_wire(
        mut wire: WireObject,
        strip_managed_fields: bool,
        indexes: &[super::IndexSpec],
    ) -> Result<Self, ObjectError> {
        let meta = std::mem::take(&mut wire.meta);
        let key = ObjectKey::new(
            meta.namespace.unwrap_or_default(),
            meta.name.unwrap_or_default(),
        );
        if key.name().is_empty() {
            return Err(ObjectError::NoName);
        }
        let body = wire.body(strip_managed_fields);
        let index_values = if indexes.is_empty() {
            Box::default()
        } else {
            let mut first_keys: Vec<&str> = indexes
                .iter()
                .filter_map(|spec| spec.path.first_key())
                .collect();
            first_keys.sort_unstable();
            first_keys.dedup();
            let value = wire.partial_value(&first_keys, strip_managed_fields);
            indexes
                .iter()
                .map(|spec| spec.path.values(&value).into_boxed_slice())
                .collect()
        };
        let uid = meta.uid.unwrap_or_default();
        let resource_version = meta.resource_version.unwrap_or_default();
        if [key.namespace(), key.name(), &uid, &resource_version]
            .iter()
            .any(|field| field.contains('\0'))
        {
            return Err(ObjectError::Nul { key });
        }
        let mut meta_tail = uid;
        let uid_end = meta_tail.len();
        meta_tail.push('\0');
        meta_tail.push_str(&resource_version);
        let version_end = meta_tail.len();
        let Some(label_count) = labels::pack(&meta.labels.unwrap_or_default(), &mut meta_tail)
        else {
            return Err(ObjectError::Nul { key });
        };
        Ok(Self {
            key,
            meta_tail: meta_tail.into_boxed_str(),
            uid_end,
            version_end,
            label_count,
            body: body.into(),
            index_values,
        })
    }

    /// The object's cache key.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// `metadata.namespace`; empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        self.key.namespace()
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.key.name()
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.meta_tail[..self.uid_end]
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        &self.meta_tail[self.uid_end + 1..self.version_end]
    }

    /// `metadata.labels`.
    pub fn labels(&self) -> Labels<'_> {
        let packed = self
            .meta_tail
            .get(self.version_end + 1..)
            .unwrap_or_default();
        Labels::new(packed, self.label_count)
    }

    /// The uid, resourceVersion and labels NUL-separated: the end of the object's `meta`, after
    /// its namespace and name.
    pub(crate) fn meta_tail(&self) -> &str {
        &self.meta_tail
    }

    /// The whole object as compact JSON.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The object's values for its store's `i`-th index.
    pub(crate) fn index_values(&self, i: usize) -> &[String] {
        self.index_values.get(i).map_or(&[], |v| v)
    }

    /// Approximate heap bytes this object holds (for memory accounting in benchmarks and logs).
    pub fn heap_size(&self) -> usize {
        let indexes: usize = self
            .index_values
            .iter()
            .flat_map(|v| v.iter())
            .map(|s| s.len() + 24)
            .sum();
        self.key.packed().len() + self.meta_tail.len() + indexes + self.body.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    proptest::proptest! {
        /// A key orders, compares and reads back as the pair (namespace, name) it packs.
        #[test]
        fn a_key_is_its_namespace_and_name(
            a in ("[a-c/-]{0,3}", "[a-c/-]{0,3}"),
            b in ("[a-c/-]{0,3}", "[a-c/-]{0,3}"),
        ) {
            let (ka, kb) = (ObjectKey::new(&a.0, &a.1), ObjectKey::new(&b.0, &b.1));
            proptest::prop_assert_eq!((ka.namespace(), ka.name()), (a.0.as_str(), a.1.as_str()));
            proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            proptest::prop_assert_eq!(ka == kb, a == b);
        }
    }

    #[test]
    fn strips_managed_fields_and_extracts_identity() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "7",
            "labels": {"b": "2", "a": "1"}, "managedFields": [{"manager": "kubectl"}]}});
        let obj = CachedObject::from_value(pod, true, &[]).unwrap();
        assert_eq!(obj.key().to_string(), "prod/web");
        assert_eq!((obj.uid(), obj.resource_version()), ("u1", "7"));
        assert_eq!(obj.labels().keys().collect::<Vec<_>>(), ["a", "b"]);
        assert!(!obj.body().contains("managedFields"));
        let kept = CachedObject::from_value(
            json!({"metadata": {"name": "n", "managedFields": []}}),
            false,
            &[],
        )
        .unwrap();
        assert!(kept.body().contains("managedFields"));
    }

    #[test]
    fn rejects_objects_without_a_name() {
        assert!(matches!(
            CachedObject::from_value(json!({"metadata": {}}), true, &[]),
            Err(ObjectError::NoName)
        ));
        assert!(matches!(
            CachedObject::from_value(json!([1]), true, &[]),
            Err(ObjectError::NotAnObject)
        ));
    }

    #[test]
    fn rejects_a_nul_in_the_fields_plugins_receive_nul_separated() {
        for metadata in [
            json!({"name": "a\0b"}),
            json!({"name": "a", "uid": "\0"}),
            json!({"name": "a", "labels": {"k": "v\0"}}),
        ] {
            let result = CachedObject::from_value(json!({ "metadata": metadata }), true, &[]);
            assert!(
                matches!(result, Err(ObjectError::Nul { .. })),
                "{metadata}: {result:?}"
            );
        }
        assert!(
            CachedObject::from_value(
                json!({"metadata": {"name": "a"}, "data": {"x": "\0"}}),
                true,
                &[]
            )
            .is_ok(),
            "the body may hold one"
        );
    }

    #[test]
    fn gvk_round_trips_api_version() {
        assert_eq!(
            Gvk::from_api_version("apps/v1", "Deployment").api_version(),
            "apps/v1"
        );
        assert_eq!(Gvk::from_api_version("v1", "Pod").group, "");
        assert_eq!(Gvk::from_api_version("v1", "Pod").to_string(), "v1 Pod");
    }
}
