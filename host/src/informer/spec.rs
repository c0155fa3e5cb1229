//! What an informer watches ([`InformerKey`]) and how its store is built ([`StoreOptions`]).
//!
//! Two requests share one running informer exactly when their keys are equal; their store options
//! are merged (indexes united by name, managed fields kept if anyone needs them).

use std::fmt;

use kube::discovery::ApiResource;

use super::{Error, Result};
use crate::cache::{Gvk, IndexSpec};

/// Identifies one watch: resource, scope, server-side selectors and object shape.
///
/// Selectors are compared as text (after trimming; an empty selector is no selector), so
/// `a=1,b=2` and `b=2,a=1` are two informers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// The resource, as discovery or [`ApiResource::erase`] gives it.
    pub resource: ApiResource,
    /// Whether the resource is namespaced (decides whether `namespace` is allowed).
    pub namespaced: bool,
    /// Watch only this namespace; `None` watches all namespaces (or a cluster-scoped resource).
    pub namespace: Option<String>,
    /// Label selector sent to the server, e.g. `app=web,tier!=cache`.
    pub label_selector: Option<String>,
    /// Field selector sent to the server, e.g. `spec.nodeName=node-1`.
    pub field_selector: Option<String>,
    /// Watch `PartialObjectMetadata` (metadata only) instead of whole objects.
    pub metadata_only: bool,
}

impl InformerKey {
    /// A key for every object of `resource`, whole objects, no selector.
    pub fn new(resource: ApiResource, namespaced: bool) -> Self {
        Self {
            resource,
            namespaced,
            namespace: None,
            label_selector: None,
            field_selector: None,
            metadata_only: false,
        }
    }

    /// Restricts the watch to `namespace`.
    #[must_use]
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Pushes a label selector down to the server.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_owned());
        self
    }

    /// Pushes a field selector down to the server.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }

    /// Watches metadata only.
    #[must_use]
    pub fn metadata_only(mut self) -> Self {
        self.metadata_only = true;
        self
    }

    /// The key in canonical form (trimmed selectors, empty ones removed), checked for a namespace
    /// on a cluster-scoped resource.
    pub fn normalized(mut self) -> Result<Self> {
        let clean = |s: Option<String>| s.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty());
        self.namespace = clean(self.namespace);
        self.label_selector = clean(self.label_selector);
        self.field_selector = clean(self.field_selector);
        if !self.namespaced
            && let Some(namespace) = self.namespace.take()
        {
            return Err(Error::NamespaceOnClusterScoped {
                resource: self.resource_name(),
                namespace,
            });
        }
        Ok(self)
    }

    /// The kind the store keeps.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.resource.api_version, &self.resource.kind)
    }

    /// The resource as RBAC names it: `pods`, `deployments.apps`.
    pub fn resource_name(&self) -> String {
        if self.resource.group.is_empty() {
            self.resource.plural.clone()
        } else {
            format!("{}.{}", self.resource.plural, self.resource.group)
        }
    }

    /// The namespace for logs: the namespace, or `*` for all namespaces and cluster scope.
    pub fn namespace_label(&self) -> &str {
        self.namespace.as_deref().unwrap_or("*")
    }
}

impl fmt::Display for InformerKey {
    /// `pods in namespace "prod" (labels app=web)`, `nodes (metadata only)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.resource_name())?;
        match (&self.namespace, self.namespaced) {
            (Some(ns), _) => write!(f, " in namespace {ns:?}")?,
            (None, true) => f.write_str(" in all namespaces")?,
            (None, false) => {}
        }
        if let Some(labels) = &self.label_selector {
            write!(f, " (labels {labels})")?;
        }
        if let Some(fields) = &self.field_selector {
            write!(f, " (fields {fields})")?;
        }
        if self.metadata_only {
            f.write_str(" (metadata only)")?;
        }
        Ok(())
    }
}

/// How an informer's store is built: what every user of the informer needs, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// Custom indexes (besides the built-in namespace index).
    pub indexes: Vec<IndexSpec>,
    /// Remove `metadata.managedFields` from cached objects (they are often half an object's
    /// size and rarely read).
    pub strip_managed_fields: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            indexes: Vec::new(),
            strip_managed_fields: true,
        }
    }
}

impl StoreOptions {
    /// Merges `other` into `self` for the informer of `key`: indexes united by name (the same
    /// name on two different fields is an error), managed fields kept if either keeps them.
    pub fn merge(&mut self, key: &InformerKey, other: &StoreOptions) -> Result<()> {
        for index in &other.indexes {
            match self.indexes.iter().find(|mine| mine.name == index.name) {
                Some(mine) if mine.path != index.path => {
                    return Err(Error::IndexConflict {
                        resource: key.resource_name(),
                        index: index.name.clone(),
                        existing: mine.path.to_string(),
                        requested: index.path.to_string(),
                    });
                }
                Some(_) => {}
                None => self.indexes.push(index.clone()),
            }
        }
        self.strip_managed_fields &= other.strip_managed_fields;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn pods() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
            plural: "pods".into(),
        }
    }

    fn index(name: &str, path: &str) -> IndexSpec {
        IndexSpec {
            name: name.into(),
            path: path.parse().unwrap(),
        }
    }

    #[test]
    fn normalizes_selectors_and_rejects_namespace_on_cluster_scope() {
        let a = InformerKey::new(pods(), true)
            .labels(" app=web ")
            .fields("")
            .normalized()
            .unwrap();
        let b = InformerKey::new(pods(), true)
            .labels("app=web")
            .normalized()
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(a.to_string(), "pods in all namespaces (labels app=web)");
        let mut nodes = pods();
        nodes.plural = "nodes".into();
        let err = InformerKey::new(nodes, false)
            .namespace("x")
            .normalized()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "nodes is cluster-scoped but namespace \"x\" was given"
        );
    }

    #[test]
    fn merges_indexes_by_name_and_keeps_managed_fields_if_anyone_needs_them() {
        let key = InformerKey::new(pods(), true);
        let mut merged = StoreOptions {
            indexes: vec![index("by-node", "spec.nodeName")],
            strip_managed_fields: true,
        };
        let other = StoreOptions {
            indexes: vec![
                index("by-node", "spec.nodeName"),
                index("by-owner", "metadata.ownerReferences[*].uid"),
            ],
            strip_managed_fields: false,
        };
        merged.merge(&key, &other).unwrap();
        assert_eq!(
            merged
                .indexes
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>(),
            ["by-node", "by-owner"]
        );
        assert!(!merged.strip_managed_fields);

        let clash = StoreOptions {
            indexes: vec![index("by-node", "status.hostIP")],
            ..StoreOptions::default()
        };
        let err = merged.merge(&key, &clash).unwrap_err();
        assert_eq!(
            err.to_string(),
            "index \"by-node\" on pods is defined on both spec.nodeName and status.hostIP"
        );
    }
}
