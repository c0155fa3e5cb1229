//! `CustomResourceDefinition` handling: the resource type a CRD defines (group, served
//! versions in Kubernetes priority order, names, scope, status subresource, selectable fields)
//! and the status the apiextensions controllers would give it (names accepted, established).

use serde_json::{Value, json};

use super::{
    Error, FieldError,
    admission::{is_dns_label, meta_str, now},
};
use crate::resources::{Registry, ResourceId, ResourceType};

/// Orders versions as Kubernetes does: GA before beta before alpha, higher numbers first, then
/// other names alphabetically.
fn version_priority(version: &str) -> (u8, i64, i64, String) {
    let parse = || -> Option<(u8, i64, i64)> {
        let rest = version.strip_prefix('v')?;
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        let major: i64 = rest[..digits].parse().ok()?;
        match &rest[digits..] {
            "" => Some((0, -major, 0)),
            tail => {
                let (level, minor) = tail
                    .strip_prefix("beta")
                    .map(|m| (1, m))
                    .or_else(|| tail.strip_prefix("alpha").map(|m| (2, m)))?;
                Some((level, -major, -minor.parse::<i64>().ok()?))
            }
        }
    };
    match parse() {
        Some((level, major, minor)) => (level, major, minor, String::new()),
        None => (3, 0, 0, version.to_string()),
    }
}

/// The resource type a `CustomResourceDefinition` defines.
pub(crate) fn type_from_crd(crd: &Value) -> Result<ResourceType, Error> {
    let name = meta_str(crd, "name");
    let spec = &crd["spec"];
    let text = |ptr: &str| {
        spec.pointer(ptr)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (group, plural, kind) = (text("/group"), text("/names/plural"), text("/names/kind"));
    let mut causes = Vec::new();
    let mut require = |ok: bool, field: &str, detail: &str| {
        if !ok {
            causes.push(FieldError {
                field: field.to_string(),
                reason: if detail.starts_with("Required") {
                    "FieldValueRequired"
                } else {
                    "FieldValueInvalid"
                },
                detail: detail.to_string(),
            });
        }
    };
    require(!group.is_empty(), "spec.group", "Required value");
    require(is_dns_label(&plural), "spec.names.plural", "Required value");
    require(!kind.is_empty(), "spec.names.kind", "Required value");
    let scope = text("/scope");
    require(
        scope == "Namespaced" || scope == "Cluster",
        "spec.scope",
        "Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
    );
    require(
        name == format!("{plural}.{group}"),
        "metadata.name",
        "Invalid value: must be spec.names.plural+\".\"+spec.group",
    );
    let versions: Vec<&Value> = spec["versions"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter(|v| v["served"].as_bool().unwrap_or(false))
                .collect()
        })
        .unwrap_or_default();
    require(
        !versions.is_empty(),
        "spec.versions",
        "Required value: at least one served version",
    );
    let id = ResourceId::new(group.as_str(), plural.as_str());
    require(
        !Registry::is_builtin(&id),
        "spec.names.plural",
        "Invalid value: the resource is built in",
    );
    if !causes.is_empty() {
        return Err(Error::Invalid {
            kind: "CustomResourceDefinition".into(),
            name: name.to_string(),
            causes,
        });
    }
    let mut names: Vec<String> = versions
        .iter()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect();
    names.sort_by_key(|v| version_priority(v));
    let strings = |ptr: &str| -> Vec<String> {
        spec.pointer(ptr)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = text("/names/singular");
    Ok(ResourceType {
        id,
        versions: names,
        singular: if singular.is_empty() {
            kind.to_ascii_lowercase()
        } else {
            singular
        },
        kind,
        namespaced: scope == "Namespaced",
        short_names: strings("/names/shortNames"),
        categories: strings("/names/categories"),
        status_subresource: versions
            .iter()
            .any(|v| v.pointer("/subresources/status").is_some()),
        scale_subresource: false,
        stored_as: None,
        field_labels: versions
            .iter()
            .flat_map(|v| v["selectableFields"].as_array().into_iter().flatten())
            .filter_map(|f| {
                f["jsonPath"]
                    .as_str()
                    .map(|p| p.trim_start_matches('.').to_string())
            })
            .collect(),
        create_only: false,
    })
}

/// The status the apiextensions controllers would settle on: names accepted, established.
pub(crate) fn status(crd: &Value, ty: &ResourceType) -> Value {
    let since = crd
        .pointer("/status/conditions/0/lastTransitionTime")
        .cloned()
        .unwrap_or_else(|| json!(now()));
    let mut accepted = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    accepted["singular"] = json!(ty.singular);
    accepted["listKind"] = json!(ty.list_kind());
    let storage = crd["spec"]["versions"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_else(|| ty.preferred_version());
    json!({
        "acceptedNames": accepted,
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": since},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": since}
        ],
        "storedVersions": [storage]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_like_kubernetes() {
        let mut versions = vec!["v1alpha1", "v2beta1", "foo", "v1", "v1beta2", "v2"];
        versions.sort_by_key(|v| version_priority(v));
        assert_eq!(
            versions,
            vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]
        );
    }

    #[test]
    fn crd_defines_a_type_with_served_versions_scope_and_status() {
        let crd = json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1alpha1", "served": true, "storage": false},
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "selectableFields": [{"jsonPath": ".spec.color"}]},
                    {"name": "v0", "served": false, "storage": false}
                ]
            }
        });
        let ty = type_from_crd(&crd).unwrap();
        assert_eq!(ty.id, ResourceId::new("example.com", "widgets"));
        assert_eq!(ty.versions, vec!["v1", "v1alpha1"]);
        assert_eq!(ty.singular, "widget");
        assert!(ty.namespaced && ty.status_subresource);
        assert!(ty.supports_field("spec.color"));
        let status = status(&crd, &ty);
        assert_eq!(status["conditions"][1]["type"], "Established");
        assert_eq!(status["storedVersions"], json!(["v1"]));
    }

    #[test]
    fn crd_with_wrong_name_or_no_versions_is_invalid() {
        let crd = json!({"metadata": {"name": "wrong"}, "spec": {"group": "example.com", "scope": "Cluster",
            "names": {"plural": "widgets", "kind": "Widget"}, "versions": []}});
        let Err(Error::Invalid { causes, .. }) = type_from_crd(&crd) else {
            panic!("expected invalid")
        };
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["metadata.name", "spec.versions"]);
    }
}
