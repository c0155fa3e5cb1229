//! OpenAPI documents: `/openapi/v2` and `/openapi/v3` (the index) with one document per served
//! group-version, which kubectl reads for `kubectl explain` and for client-side validation of
//! `create -f`/`apply -f`, and which server-side apply reads for list merge keys.
//!
//! The built-in types' documents are never written by hand: they are captured from the real
//! kube-apiserver the test harness builds (the same release as [`KUBERNETES_GIT_VERSION`]) by
//! `WASMFORMER_CAPTURE_OPENAPI=1 cargo test -p wasmformer-tests --test integration devcluster_openapi::`,
//! checked in as `openapi/kubernetes.json.gz`, and that test fails when the checked-in copy
//! differs from what the harness serves. A CRD's documents are built from its
//! `openAPIV3Schema` the way the API server builds them (GVK extension, `ObjectMeta` reference).
//!
//! [`KUBERNETES_GIT_VERSION`]: crate::discovery::KUBERNETES_GIT_VERSION

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    hash::{DefaultHasher, Hash, Hasher},
    io::Read,
    sync::LazyLock,
};

use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceType};

static CAPTURED_GZ: &[u8] = include_bytes!("../openapi/kubernetes.json.gz");

static CAPTURED: LazyLock<Result<Captured, String>> = LazyLock::new(|| {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(CAPTURED_GZ)
        .read_to_end(&mut text)
        .map_err(|e| format!("unpacking the OpenAPI documents: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("parsing the OpenAPI documents: {e}"))
});

const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";

/// The documents captured from the harness: `{"v2": …, "v3": {"api/v1": …, "apis/apps/v1": …}}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Captured {
    /// `/openapi/v2`.
    pub v2: Value,
    /// `/openapi/v3/{path}` by path.
    pub v3: BTreeMap<String, Value>,
}

/// The checked-in documents.
pub fn captured() -> Result<&'static Captured, String> {
    CAPTURED.as_ref().map_err(Clone::clone)
}

/// The `/openapi/v3/{path}` paths whose documents are captured: every group-version of the
/// built-in types.
pub fn captured_paths() -> Vec<String> {
    Registry::builtin()
        .groups()
        .into_iter()
        .flat_map(|(group, versions)| versions.into_iter().map(move |v| path_of(&group, &v)))
        .collect()
}

fn path_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `com.example.v1.Widget` for group `example.com`: the definition name the API server gives a
/// custom resource.
fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// `/openapi/v2`: the captured document plus a definition per served CRD version.
pub(crate) fn v2(registry: &Registry, crds: &[Value]) -> Result<Value, String> {
    let captured = captured()?;
    let mut document = captured.v2.clone();
    let definitions = document["definitions"]
        .as_object_mut()
        .ok_or("the captured v2 document has no definitions")?;
    for (group, version, kind, schema) in crd_schemas(registry, crds) {
        let schema = rewrite_refs(
            crd_definition(&group, &version, &kind, schema, "#/definitions/"),
            "#/definitions/",
        );
        definitions.insert(definition_name(&group, &version, &kind), schema);
    }
    Ok(document)
}

/// `/openapi/v3`: one entry per served group-version, with a content hash as the API server has.
pub(crate) fn v3_index(registry: &Registry, crds: &[Value]) -> Result<Value, String> {
    let mut paths = Map::new();
    for (group, versions) in registry.groups() {
        for version in versions {
            let path = path_of(&group, &version);
            let Some(document) = v3_document(registry, crds, &path)? else {
                continue;
            };
            let mut hasher = DefaultHasher::new();
            document.to_string().hash(&mut hasher);
            paths.insert(
                path.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{path}?hash={:016X}", hasher.finish())}),
            );
        }
    }
    Ok(json!({"paths": paths}))
}

/// `/openapi/v3/{path}`; `None` when no served type lives there.
pub(crate) fn v3_document(
    registry: &Registry,
    crds: &[Value],
    path: &str,
) -> Result<Option<Value>, String> {
    let captured = captured()?;
    if let Some(document) = captured.v3.get(path) {
        return Ok(Some(document.clone()));
    }
    let custom: Vec<_> = crd_schemas(registry, crds)
        .into_iter()
        .filter(|(group, version, _, _)| path_of(group, version) == path)
        .collect();
    if custom.is_empty() {
        return Ok(None);
    }
    let core = captured
        .v3
        .get("api/v1")
        .ok_or("the captured v3 documents have no api/v1")?;
    let core_schemas = &core["components"]["schemas"];
    let mut schemas = Map::new();
    for name in closure(core_schemas, &[OBJECT_META, LIST_META]) {
        schemas.insert(name.clone(), core_schemas[&name].clone());
    }
    for (group, version, kind, schema) in custom {
        schemas.insert(
            definition_name(&group, &version, &kind),
            crd_definition(&group, &version, &kind, schema, "#/components/schemas/"),
        );
    }
    Ok(Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes CRD Swagger", "version": "v0.1.0"},
        "paths": {},
        "components": {"schemas": schemas},
    })))
}

/// `(group, version, kind, openAPIV3Schema)` of every served CRD version with a schema.
fn crd_schemas<'a>(
    registry: &Registry,
    crds: &'a [Value],
) -> Vec<(String, String, String, &'a Value)> {
    let mut out = Vec::new();
    for crd in crds {
        let group = crd
            .pointer("/spec/group")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = crd
            .pointer("/spec/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("");
        let plural = crd
            .pointer("/spec/names/plural")
            .and_then(Value::as_str)
            .unwrap_or("");
        if registry
            .get(&crate::resources::ResourceId::new(group, plural))
            .is_none()
        {
            continue;
        }
        for version in crd
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let (Some(name), Some(schema)) = (
                version["name"].as_str(),
                version.pointer("/schema/openAPIV3Schema"),
            ) else {
                continue;
            };
            if version["served"] == false {
                continue;
            }
            out.push((
                group.to_string(),
                name.to_string(),
                kind.to_string(),
                schema,
            ));
        }
    }
    out
}

/// A CRD version's schema as the API server publishes it: `apiVersion`, `kind` and `metadata`
/// (a reference to `ObjectMeta`) filled in, and the GVK extension kubectl looks types up by.
fn crd_definition(group: &str, version: &str, kind: &str, schema: &Value, prefix: &str) -> Value {
    let mut schema = schema.clone();
    if let Some(map) = schema.as_object_mut() {
        let properties = map
            .entry("properties")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(properties) = properties {
            properties.insert(
                "apiVersion".into(),
                json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}),
            );
            properties.insert(
                "kind".into(),
                json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}),
            );
            properties.insert(
                "metadata".into(),
                json!({"allOf": [{"$ref": format!("{prefix}{OBJECT_META}")}], "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
            );
        }
        map.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": group, "kind": kind, "version": version}]),
        );
    }
    schema
}

/// The captured v3 schemas use `#/components/schemas/`; v2 uses `#/definitions/`.
fn rewrite_refs(mut value: Value, prefix: &str) -> Value {
    fn walk(value: &mut Value, prefix: &str) {
        match value {
            Value::Object(map) => {
                for (key, child) in map.iter_mut() {
                    if key == "$ref"
                        && let Some(target) = child.as_str()
                        && let Some(name) = target.strip_prefix("#/components/schemas/")
                    {
                        *child = json!(format!("{prefix}{name}"));
                    } else {
                        walk(child, prefix);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, prefix)),
            _ => {}
        }
    }
    walk(&mut value, prefix);
    value
}

/// `roots` and every schema they reference, transitively.
fn closure(schemas: &Value, roots: &[&str]) -> BTreeSet<String> {
    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                for (key, child) in map {
                    match (key.as_str(), child.as_str()) {
                        ("$ref", Some(target)) => out.extend(
                            target
                                .strip_prefix("#/components/schemas/")
                                .map(String::from),
                        ),
                        _ => refs(child, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| refs(i, out)),
            _ => {}
        }
    }
    let mut seen = BTreeSet::new();
    let mut pending: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(name) = pending.pop() {
        if schemas.get(&name).is_none() || !seen.insert(name.clone()) {
            continue;
        }
        refs(&schemas[&name], &mut pending);
    }
    seen
}

/// The schema of a type at `version` in the v3 documents, and the document's schemas its `$ref`s
/// point into; `None` for a type without a published schema.
pub(crate) fn schema_of(
    registry: &Registry,
    crds: &[Value],
    ty: &ResourceType,
    version: &str,
) -> Option<(Value, Cow<'static, Value>)> {
    let path = path_of(&ty.id.group, version);
    let schemas: Cow<'static, Value> = match captured().ok()?.v3.get(&path) {
        Some(document) => Cow::Borrowed(&document["components"]["schemas"]),
        None => {
            let document = v3_document(registry, crds, &path).ok()??;
            Cow::Owned(document["components"]["schemas"].clone())
        }
    };
    let schema = schemas.as_object()?.values().find(|s| {
        s["x-kubernetes-group-version-kind"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|g| {
                g["group"] == ty.id.group.as_str()
                    && g["version"] == version
                    && g["kind"] == ty.kind.as_str()
            })
    })?;
    Some((schema.clone(), schemas))
}

/// Follows `$ref` and a single-element `allOf` (how the API server wraps references).
pub(crate) fn resolve<'a>(schema: &'a Value, schemas: &'a Value) -> &'a Value {
    let mut current = schema;
    for _ in 0..8 {
        if let Some(target) = current["$ref"].as_str() {
            let name = target.rsplit('/').next().unwrap_or("");
            match schemas.get(name) {
                Some(next) => current = next,
                None => return current,
            }
        } else if let Some([only]) = current["allOf"].as_array().map(Vec::as_slice) {
            current = only;
        } else {
            return current;
        }
    }
    current
}

/// The fields of `object` its schema does not declare, as the API server's strict decoding names
/// them (`spec.replica`, `spec.template.spec.containers[0].imagee`). Keys starting with `$` (the
/// directives of strategic merge patches) are not fields.
pub(crate) fn unknown_fields(schema: &Value, schemas: &Value, object: &Value) -> Vec<String> {
    let mut unknown = Vec::new();
    walk_fields(schema, schemas, object, "", &mut unknown, true);
    unknown
}

fn walk_fields(
    schema: &Value,
    schemas: &Value,
    value: &Value,
    path: &str,
    unknown: &mut Vec<String>,
    top: bool,
) {
    let schema = resolve(schema, schemas);
    if schema["x-kubernetes-preserve-unknown-fields"] == true {
        return;
    }
    match value {
        Value::Object(map) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            if properties.is_none() && additional.is_null() {
                return;
            }
            for (key, child) in map {
                if key.starts_with('$') || (top && (key == "apiVersion" || key == "kind")) {
                    continue;
                }
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match properties.and_then(|p| p.get(key)) {
                    Some(child_schema) => {
                        walk_fields(child_schema, schemas, child, &child_path, unknown, false);
                    }
                    None if additional.is_object() => {
                        walk_fields(additional, schemas, child, &child_path, unknown, false);
                    }
                    None if additional == true => {}
                    None => unknown.push(child_path),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk_fields(
                        item_schema,
                        schemas,
                        item,
                        &format!("{path}[{i}]"),
                        unknown,
                        false,
                    );
                }
            }
        }
        _ => {}
    }
}

/// Server-side apply's merge of an applied configuration into the live object, by the schema:
/// lists with `x-kubernetes-list-type: map` merge their items by `x-kubernetes-list-map-keys`,
/// `set` lists take the union, other lists and scalars are replaced, objects merge field by field
/// (`null` removes). There is no field ownership: nothing the applier stopped applying is removed.
pub(crate) fn apply_merge(schema: &Value, schemas: &Value, target: &mut Value, applied: &Value) {
    let schema = resolve(schema, schemas);
    match applied {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            let object = target.as_object_mut().expect("made an object above");
            for (key, value) in fields {
                if value.is_null() {
                    object.remove(key);
                    continue;
                }
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.is_object().then_some(additional))
                    .unwrap_or(&Value::Null);
                let slot = object.entry(key.clone()).or_insert(Value::Null);
                apply_merge(child_schema, schemas, slot, value);
            }
        }
        Value::Array(items) => {
            let keys: Vec<&str> = schema["x-kubernetes-list-map-keys"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let list_type = schema["x-kubernetes-list-type"].as_str();
            let Some(current) = target.as_array_mut() else {
                *target = applied.clone();
                return;
            };
            match list_type {
                Some("map") if !keys.is_empty() => {
                    let item_schema = &schema["items"];
                    for item in items {
                        let same = |existing: &Value| keys.iter().all(|k| existing[*k] == item[*k]);
                        match current.iter_mut().find(|existing| same(existing)) {
                            Some(existing) => apply_merge(item_schema, schemas, existing, item),
                            None => current.push(item.clone()),
                        }
                    }
                }
                Some("set") => {
                    for item in items {
                        if !current.contains(item) {
                            current.push(item.clone());
                        }
                    }
                }
                _ => *target = applied.clone(),
            }
        }
        _ => *target = applied.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment_schema() -> (Value, Cow<'static, Value>) {
        let registry = Registry::builtin();
        let ty = registry
            .get(&crate::resources::ResourceId::new("apps", "deployments"))
            .unwrap();
        schema_of(&registry, &[], ty, "v1").expect("the captured apps/v1 document has Deployment")
    }

    #[test]
    fn apply_merges_lists_by_their_map_keys() {
        let (schema, schemas) = deployment_schema();
        let mut live = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "sidecar", "image": "side:1"}
        ]}}}});
        let applied = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:2", "ports": [{"containerPort": 443, "protocol": "TCP"}]}
        ]}}}});
        apply_merge(&schema, &schemas, &mut live, &applied);
        let containers = &live["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(
            containers[0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "protocol": "TCP"}]),
            "ports merge by (containerPort, protocol)"
        );
        assert_eq!(
            containers[1]["name"], "sidecar",
            "items the applier did not name stay"
        );
    }

    #[test]
    fn atomic_lists_are_replaced_and_unknown_fields_found() {
        let (schema, schemas) = deployment_schema();
        let mut live = json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["x", "y"]}]}}}});
        let applied =
            json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "args": ["z"]}]}}}});
        apply_merge(&schema, &schemas, &mut live, &applied);
        assert_eq!(
            live["spec"]["template"]["spec"]["containers"][0]["args"],
            json!(["z"])
        );
        let typo = json!({"spec": {"replica": 2, "template": {"spec": {"containers": [{"name": "a", "imagee": "x"}]}}}});
        assert_eq!(
            unknown_fields(&schema, &schemas, &typo),
            ["spec.replica", "spec.template.spec.containers[0].imagee"]
        );
    }
}
