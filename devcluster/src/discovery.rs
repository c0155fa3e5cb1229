//! Discovery documents: `/version`, `/api` (APIVersions), `/apis` (APIGroupList),
//! `/apis/{group}` (APIGroup) and `/api/v1`, `/apis/{group}/{version}` (APIResourceList), built
//! from the registry so CRD-defined types appear as soon as their CRD is created. Aggregated
//! discovery is not offered; clients fall back to these legacy documents.

use serde_json::{Value, json};

use crate::resources::{Registry, ResourceType};

/// The Kubernetes version the dev cluster serves and, unless
/// [`Faults::report_version`](crate::Faults::report_version) says otherwise, reports.
pub const KUBERNETES_VERSION: (&str, &str) = ("1", "37");

/// The exact release the dev cluster's OpenAPI documents and protobuf descriptors come from: the
/// kube-apiserver the test harness (`tests/kube-apiserver`) builds.
pub const KUBERNETES_GIT_VERSION: &str = "v1.37.2";

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// `/version`, reporting `major.minor`.
pub(crate) fn version(major: &str, minor: &str) -> Value {
    json!({
        "major": major,
        "minor": minor,
        "emulationMajor": major,
        "emulationMinor": minor,
        "minCompatibilityMajor": major,
        "minCompatibilityMinor": minor.parse::<u32>().map_or_else(|_| minor.to_string(), |m| m.saturating_sub(1).to_string()),
        "gitVersion": if (major, minor) == KUBERNETES_VERSION {
            format!("{KUBERNETES_GIT_VERSION}+wasmformer-dev")
        } else {
            format!("v{major}.{minor}.0+wasmformer-dev")
        },
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" }),
    })
}

/// `/api`.
pub(crate) fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_document(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": entries,
        "preferredVersion": entries[0],
    })
}

/// `/apis`: every named group.
pub(crate) fn groups(registry: &Registry) -> Value {
    let groups: Vec<Value> = registry
        .groups()
        .into_iter()
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, versions)| group_document(&name, &versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`.
pub(crate) fn group(registry: &Registry, name: &str) -> Option<Value> {
    let (name, versions) = registry
        .groups()
        .into_iter()
        .find(|(g, _)| g == name && !g.is_empty())?;
    let mut document = group_document(&name, &versions);
    document["kind"] = json!("APIGroup");
    document["apiVersion"] = json!("v1");
    Some(document)
}

fn resource_entries(ty: &ResourceType) -> Vec<Value> {
    let mut main = json!({
        "name": ty.id.resource,
        "singularName": ty.singular,
        "namespaced": ty.namespaced,
        "kind": ty.kind,
        "verbs": if ty.create_only { &["create"][..] } else { VERBS },
    });
    if !ty.short_names.is_empty() {
        main["shortNames"] = json!(ty.short_names);
    }
    if !ty.categories.is_empty() {
        main["categories"] = json!(ty.categories);
    }
    let mut entries = vec![main];
    if ty.status_subresource {
        entries.push(json!({
            "name": format!("{}/status", ty.id.resource),
            "singularName": "",
            "namespaced": ty.namespaced,
            "kind": ty.kind,
            "verbs": ["get", "patch", "update"],
        }));
    }
    if ty.scale_subresource {
        entries.push(json!({
            "name": format!("{}/scale", ty.id.resource),
            "singularName": "",
            "namespaced": ty.namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": ["get", "patch", "update"],
        }));
    }
    entries
}

/// `/api/v1` or `/apis/{group}/{version}`.
pub(crate) fn resources(registry: &Registry, group: &str, version: &str) -> Option<Value> {
    let types: Vec<_> = registry
        .iter()
        .filter(|t| t.id.group == group && t.serves(version))
        .collect();
    if types.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let entries: Vec<Value> = types
        .into_iter()
        .flat_map(|t| resource_entries(t))
        .collect();
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_resource_list_includes_pods_and_their_status() {
        let list = resources(&Registry::builtin(), "", "v1").unwrap();
        assert_eq!(list["groupVersion"], "v1");
        let entries = list["resources"].as_array().unwrap();
        let pods = entries.iter().find(|e| e["name"] == "pods").unwrap();
        assert_eq!(pods["kind"], "Pod");
        assert_eq!(pods["namespaced"], true);
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert!(pods["verbs"].as_array().unwrap().contains(&json!("watch")));
        assert!(entries.iter().any(|e| e["name"] == "pods/status"));
        let nodes = entries.iter().find(|e| e["name"] == "nodes").unwrap();
        assert_eq!(nodes["namespaced"], false);
    }

    #[test]
    fn version_reports_the_given_major_and_minor() {
        let version = version("1", "31");
        assert_eq!(
            (version["major"].as_str(), version["minor"].as_str()),
            (Some("1"), Some("31"))
        );
        assert_eq!(version["gitVersion"], "v1.31.0+wasmformer-dev");
        assert_eq!(
            super::version("1", "37")["gitVersion"],
            "v1.37.2+wasmformer-dev"
        );
    }

    #[test]
    fn group_list_has_preferred_versions_and_no_core_group() {
        let list = groups(&Registry::builtin());
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"apps")
                && names.contains(&"coordination.k8s.io")
                && names.contains(&"apiextensions.k8s.io")
        );
        assert!(!names.contains(&""));
        let apps = group(&Registry::builtin(), "apps").unwrap();
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        assert!(resources(&Registry::builtin(), "apps", "v1beta1").is_none());
        assert!(group(&Registry::builtin(), "nope").is_none());
    }
}
