//! [`Object`]: the object a handler receives or the lister returns.

use serde::de::DeserializeOwned;

use crate::bindings::wasmformer::plugin::types;

/// A kind of object: API group (empty for core), version and kind.
pub type Gvk = types::Gvk;

/// One Kubernetes object from the host's cache.
///
/// Identity and labels are plain fields (no parsing); [`Object::decode`] turns the JSON body into
/// a k8s-openapi type (`Pod`, `Deployment`, …) or a `serde_json::Value`.
#[derive(Debug, Clone)]
pub struct Object(types::Object);

impl From<types::Object> for Object {
    fn from(inner: types::Object) -> Self {
        Self(inner)
    }
}

impl Object {
    /// Builds an object from its parts; for tests and native benchmarks of plugin code.
    pub fn new(
        kind: Gvk,
        namespace: &str,
        name: &str,
        uid: &str,
        resource_version: &str,
        labels: Vec<(String, String)>,
        body: String,
    ) -> Self {
        Self(types::Object {
            kind,
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            resource_version: resource_version.to_owned(),
            labels,
            body,
        })
    }

    /// The object's group, version and kind.
    pub fn kind(&self) -> &Gvk {
        &self.0.kind
    }

    /// `metadata.namespace`; empty for cluster-scoped objects.
    pub fn namespace(&self) -> &str {
        &self.0.namespace
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.0.uid
    }

    /// `metadata.resourceVersion`.
    pub fn resource_version(&self) -> &str {
        &self.0.resource_version
    }

    /// `metadata.labels`, in key order.
    pub fn labels(&self) -> &[(String, String)] {
        &self.0.labels
    }

    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.0.labels.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The whole object as compact JSON.
    pub fn json(&self) -> &str {
        &self.0.body
    }

    /// Decodes the body into `T`: a k8s-openapi type, your own struct, or `serde_json::Value`.
    pub fn decode<T: DeserializeOwned>(&self) -> crate::Result<T> {
        Ok(serde_json::from_str(&self.0.body)?)
    }
}
