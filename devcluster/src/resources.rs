//! The resource types the dev cluster serves: the built-in table (pods, deployments, leases, ...)
//! and the types that creating a `CustomResourceDefinition` adds. Discovery, routing and the store
//! all read this registry; only the store changes it, under its lock.

use std::{collections::BTreeMap, fmt, sync::Arc};

/// A resource type independent of version: `(group, plural)`, e.g. `("apps", "deployments")`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// API group, empty for the core group.
    pub group: String,
    /// Plural lower-case resource name, as in the URL.
    pub resource: String,
}

impl ResourceId {
    /// A resource in `group` (empty for core).
    pub fn new(group: impl Into<String>, resource: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            resource: resource.into(),
        }
    }

    /// A resource of the core (`v1`) group.
    pub fn core(resource: impl Into<String>) -> Self {
        Self::new("", resource)
    }

    /// `namespaces`.
    pub fn namespaces() -> Self {
        Self::core("namespaces")
    }

    /// `customresourcedefinitions.apiextensions.k8s.io`.
    pub fn crds() -> Self {
        Self::new(CRD_GROUP, "customresourcedefinitions")
    }

    pub(crate) fn is_crd(&self) -> bool {
        self.group == CRD_GROUP && self.resource == "customresourcedefinitions"
    }

    pub(crate) fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.resource == "namespaces"
    }
}

impl fmt::Display for ResourceId {
    /// `pods`, `deployments.apps`: the form kubectl and error messages use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

pub(crate) const CRD_GROUP: &str = "apiextensions.k8s.io";
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";
/// The group of the new Events API, whose Events are core Events converted.
pub(crate) const EVENTS_GROUP: &str = "events.k8s.io";
/// The group of the access reviews, which are answered rather than stored.
pub(crate) const REVIEW_GROUP: &str = "authorization.k8s.io";

/// Everything the server knows about one resource type.
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceType {
    /// Group and plural.
    pub id: ResourceId,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    /// `Kind` of a single object.
    pub kind: String,
    /// Lower-case singular name.
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// Short names for kubectl (`po`, `deploy`).
    pub short_names: Vec<String>,
    /// Categories for kubectl (`all`).
    pub categories: Vec<String>,
    /// Whether `/status` is a separate subresource (updates to the main resource keep the status).
    pub status_subresource: bool,
    /// Whether `/scale` serves an `autoscaling/v1` `Scale` of `.spec.replicas`.
    pub scale_subresource: bool,
    /// Field-selector labels accepted besides `metadata.name` and `metadata.namespace`.
    pub field_labels: Vec<String>,
    /// Objects are not stored: the only verb is `create`, which answers with the evaluated
    /// object (`SelfSubjectAccessReview`, `SelfSubjectRulesReview`).
    pub create_only: bool,
    /// Objects are stored as those of another resource and converted on the way in and out
    /// (`events.k8s.io/v1` Events are core `v1` Events, as on the API server).
    pub stored_as: Option<ResourceId>,
}

impl ResourceType {
    /// `v1` for core, `group/version` otherwise.
    pub fn api_version(&self, version: &str) -> String {
        if self.id.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{}", self.id.group, version)
        }
    }

    /// The version used when none is given (the first served one).
    pub fn preferred_version(&self) -> &str {
        &self.versions[0]
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// `PodList` for `Pod`.
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The resource its objects are stored under (itself unless [`ResourceType::stored_as`]).
    pub fn storage(&self) -> &ResourceId {
        self.stored_as.as_ref().unwrap_or(&self.id)
    }

    /// Whether `field` may be used in a field selector on this type.
    pub fn supports_field(&self, field: &str) -> bool {
        field == "metadata.name"
            || field == "metadata.namespace"
            || self.field_labels.iter().any(|f| f == field)
    }
}

/// One row of the built-in table:
/// (group, version, plural, kind, namespaced, short names, status subresource, field labels).
type Builtin = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    bool,
    &'static [&'static str],
);

const BUILTINS: &[Builtin] = &[
    (
        "",
        "v1",
        "configmaps",
        "ConfigMap",
        true,
        &["cm"],
        false,
        &[],
    ),
    (
        "",
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    ),
    (
        "",
        "v1",
        "namespaces",
        "Namespace",
        false,
        &["ns"],
        true,
        &["status.phase"],
    ),
    (
        "",
        "v1",
        "nodes",
        "Node",
        false,
        &["no"],
        true,
        &["spec.unschedulable"],
    ),
    (
        "",
        "v1",
        "pods",
        "Pod",
        true,
        &["po"],
        true,
        &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    ),
    ("", "v1", "secrets", "Secret", true, &[], false, &["type"]),
    (
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        true,
        &["sa"],
        false,
        &[],
    ),
    ("", "v1", "services", "Service", true, &["svc"], true, &[]),
    (
        "apps",
        "v1",
        "daemonsets",
        "DaemonSet",
        true,
        &["ds"],
        true,
        &[],
    ),
    (
        "apps",
        "v1",
        "deployments",
        "Deployment",
        true,
        &["deploy"],
        true,
        &[],
    ),
    (
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
        true,
        &["status.replicas"],
    ),
    (
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
        true,
        &[],
    ),
    (
        "coordination.k8s.io",
        "v1",
        "leases",
        "Lease",
        true,
        &[],
        false,
        &[],
    ),
    (
        CRD_GROUP,
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
        &[],
    ),
    (
        "",
        "v1",
        "resourcequotas",
        "ResourceQuota",
        true,
        &["quota"],
        true,
        &[],
    ),
    ("batch", "v1", "jobs", "Job", true, &[], true, &[]),
    (
        "batch",
        "v1",
        "cronjobs",
        "CronJob",
        true,
        &["cj"],
        true,
        &[],
    ),
    (
        "networking.k8s.io",
        "v1",
        "ingresses",
        "Ingress",
        true,
        &["ing"],
        true,
        &[],
    ),
    (
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
        &[],
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "PriorityClass",
        false,
        &["pc"],
        false,
        &[],
    ),
    (
        EVENTS_GROUP,
        "v1",
        "events",
        "Event",
        true,
        &["ev"],
        false,
        &[],
    ),
    (RBAC_GROUP, "v1", "roles", "Role", true, &[], false, &[]),
    (
        RBAC_GROUP,
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
        false,
        &[],
    ),
    (
        RBAC_GROUP,
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
        false,
        &[],
    ),
    (
        RBAC_GROUP,
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
        false,
        &[],
    ),
    (
        REVIEW_GROUP,
        "v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
        &[],
        false,
        &[],
    ),
    (
        REVIEW_GROUP,
        "v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
        &[],
        false,
        &[],
    ),
];

/// `apps` resources with a `/scale` subresource.
const SCALABLE: &[&str] = &["deployments", "replicasets", "statefulsets"];

/// Resources kubectl lists for `kubectl get all`.
const CATEGORY_ALL: &[&str] = &[
    "pods",
    "jobs",
    "cronjobs",
    "services",
    "daemonsets",
    "deployments",
    "replicasets",
    "statefulsets",
];

/// The served resource types, keyed by [`ResourceId`].
#[derive(Clone, Debug, Default)]
pub struct Registry {
    types: BTreeMap<ResourceId, Arc<ResourceType>>,
}

impl Registry {
    /// The built-in Kubernetes types the dev cluster serves.
    pub fn builtin() -> Self {
        let mut registry = Self::default();
        for &(group, version, plural, kind, namespaced, short, status, fields) in BUILTINS {
            registry.insert(ResourceType {
                id: ResourceId::new(group, plural),
                versions: vec![version.to_string()],
                kind: kind.to_string(),
                singular: kind.to_ascii_lowercase(),
                namespaced,
                short_names: short.iter().map(|s| s.to_string()).collect(),
                categories: if CATEGORY_ALL.contains(&plural) {
                    vec!["all".to_string()]
                } else {
                    Vec::new()
                },
                status_subresource: status,
                scale_subresource: group == "apps" && SCALABLE.contains(&plural),
                field_labels: fields.iter().map(|s| s.to_string()).collect(),
                create_only: group == REVIEW_GROUP,
                stored_as: (group == EVENTS_GROUP).then(|| ResourceId::core("events")),
            });
        }
        registry
    }

    /// The type with this id.
    pub fn get(&self, id: &ResourceId) -> Option<&Arc<ResourceType>> {
        self.types.get(id)
    }

    /// The type served at `/apis/{group}/{version}/{resource}`, if that version is served.
    pub fn resolve(&self, group: &str, version: &str, resource: &str) -> Option<Arc<ResourceType>> {
        self.types
            .get(&ResourceId::new(group, resource))
            .filter(|t| t.serves(version))
            .cloned()
    }

    /// The type whose objects have this `apiVersion` and `kind`.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        self.types
            .values()
            .find(|t| t.id.group == group && t.kind == kind && t.serves(version))
            .cloned()
    }

    /// All types, ordered by group then plural.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<ResourceType>> {
        self.types.values()
    }

    /// Served `(group, versions)` pairs, ordered by group; versions preferred first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for ty in self.types.values() {
            let versions = groups.entry(&ty.id.group).or_default();
            for v in &ty.versions {
                if !versions.contains(v) {
                    versions.push(v.clone());
                }
            }
        }
        groups
            .into_iter()
            .map(|(g, v)| (g.to_string(), v))
            .collect()
    }

    pub(crate) fn insert(&mut self, ty: ResourceType) {
        self.types.insert(ty.id.clone(), Arc::new(ty));
    }

    pub(crate) fn remove(&mut self, id: &ResourceId) {
        self.types.remove(id);
    }

    /// Whether `id` is one of the built-in types (which a CRD may not replace).
    pub(crate) fn is_builtin(id: &ResourceId) -> bool {
        BUILTINS
            .iter()
            .any(|b| b.0 == id.group && b.2 == id.resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_types_resolve_by_path_and_kind() {
        let registry = Registry::builtin();
        let deploy = registry.resolve("apps", "v1", "deployments").unwrap();
        assert_eq!(deploy.kind, "Deployment");
        assert!(deploy.namespaced);
        assert_eq!(deploy.api_version("v1"), "apps/v1");
        assert!(registry.resolve("apps", "v1beta1", "deployments").is_none());
        assert_eq!(
            registry.by_kind("v1", "Node").unwrap().id,
            ResourceId::core("nodes")
        );
        assert!(!registry.by_kind("v1", "Node").unwrap().namespaced);
        assert_eq!(
            registry
                .by_kind("coordination.k8s.io/v1", "Lease")
                .unwrap()
                .id
                .resource,
            "leases"
        );
    }

    #[test]
    fn groups_list_core_first_then_named_groups() {
        let groups = Registry::builtin().groups();
        assert_eq!(groups[0], (String::new(), vec!["v1".to_string()]));
        assert!(groups.iter().any(|(g, _)| g == "apps"));
        assert!(groups.iter().any(|(g, _)| g == CRD_GROUP));
    }

    #[test]
    fn pods_accept_node_name_field_selector() {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        assert!(pods.supports_field("spec.nodeName"));
        assert!(pods.supports_field("metadata.name"));
        assert!(!pods.supports_field("spec.containers"));
        assert_eq!(
            ResourceId::new("apps", "deployments").to_string(),
            "deployments.apps"
        );
    }
}
