//! What the API server does to an object before storing it: type and name checks, server-owned
//! metadata (uid, creationTimestamp, generation), the status-subresource rule, and the few
//! per-kind defaults clients rely on (namespace phase and name label, pod phase, CRD status).

use serde_json::{Map, Value, json};

use super::{Error, FieldError, Part, crd};
use crate::resources::{ResourceId, ResourceType};

/// Server-generated identifiers: uids and `generateName` suffixes.
#[derive(Debug)]
pub(crate) struct IdSource {
    state: u64,
}

impl IdSource {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// SplitMix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random (version 4) UUID.
    pub(crate) fn uid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0x0fff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// Five characters from the alphabet the API server uses for `generateName`.
    pub(crate) fn suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize] as char)
            .collect()
    }
}

/// The current time as the API server writes timestamps (`2024-05-01T12:00:00Z`).
pub(crate) fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(crate) fn metadata(object: &Value) -> Option<&Map<String, Value>> {
    object.get("metadata").and_then(Value::as_object)
}

pub(crate) fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    let map = object
        .as_object_mut()
        .expect("objects are checked to be JSON objects");
    map.entry("metadata").or_insert_with(|| json!({}));
    if !map["metadata"].is_object() {
        map["metadata"] = json!({});
    }
    map["metadata"].as_object_mut().unwrap()
}

pub(crate) fn meta_str<'a>(object: &'a Value, field: &str) -> &'a str {
    metadata(object)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Checks `apiVersion`/`kind` against the type, filling them in when absent.
fn check_type(ty: &ResourceType, object: &mut Value, version: &str) -> Result<(), Error> {
    let Some(map) = object.as_object_mut() else {
        return Err(Error::BadRequest {
            message: "the request body must be a JSON object".into(),
        });
    };
    let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != ty.kind {
        return Err(Error::BadRequest {
            message: format!(
                "the body kind {kind:?} does not match the resource kind {:?}",
                ty.kind
            ),
        });
    }
    let api_version = map
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let version = match api_version
        .rsplit_once('/')
        .map_or(("", api_version.as_str()), |(g, v)| (g, v))
    {
        (_, "") => version.to_string(),
        (group, v) if group == ty.id.group && ty.serves(v) => v.to_string(),
        _ => {
            return Err(Error::BadRequest {
                message: format!(
                    "the body apiVersion {api_version:?} is not served for {}",
                    ty.id
                ),
            });
        }
    };
    map.insert("kind".into(), json!(ty.kind));
    map.insert("apiVersion".into(), json!(ty.api_version(&version)));
    Ok(())
}

fn invalid(
    ty: &ResourceType,
    name: &str,
    field: &str,
    reason: &'static str,
    detail: String,
) -> Error {
    Error::Invalid {
        kind: ty.kind.clone(),
        name: name.to_string(),
        causes: vec![FieldError {
            field: field.to_string(),
            reason,
            detail,
        }],
    }
}

pub(super) fn is_dns_label(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// Prepares a new object: type, name (or `generateName`), namespace, server-owned metadata and
/// per-kind defaults. `namespace` is the scope the object is created in.
pub(crate) fn prepare_create(
    ty: &ResourceType,
    object: &mut Value,
    version: &str,
    namespace: Option<&str>,
    ids: &mut IdSource,
) -> Result<(), Error> {
    check_type(ty, object, version)?;
    let mut name = meta_str(object, "name").to_string();
    if name.is_empty() {
        let prefix = meta_str(object, "generateName");
        if prefix.is_empty() {
            return Err(invalid(
                ty,
                "",
                "metadata.name",
                "FieldValueRequired",
                "Required value: name or generateName is required".into(),
            ));
        }
        name = format!("{prefix}{}", ids.suffix());
    }
    let valid = if ty.id.is_namespace() {
        is_dns_label(&name)
    } else {
        is_dns_subdomain(&name)
    };
    if !valid {
        return Err(invalid(
            ty,
            &name,
            "metadata.name",
            "FieldValueInvalid",
            format!(
                "Invalid value: {name:?}: a lowercase RFC 1123 name must consist of lower case alphanumeric characters, '-' or '.'"
            ),
        ));
    }
    if !meta_str(object, "resourceVersion").is_empty() {
        return Err(Error::BadRequest {
            message: "resourceVersion should not be set on objects to be created".into(),
        });
    }
    let meta = metadata_mut(object);
    meta.insert("name".into(), json!(name));
    match namespace {
        Some(ns) => meta.insert("namespace".into(), json!(ns)),
        None => meta.remove("namespace"),
    };
    meta.insert("uid".into(), json!(ids.uid()));
    meta.insert("creationTimestamp".into(), json!(now()));
    if has_generation(ty) {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    // `managedFields` are the handlers' (set from the request's field manager) or none.
    for server_owned in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        meta.remove(server_owned);
    }
    if ty.id.is_namespace() && object.pointer("/spec/finalizers").is_none() {
        if !object.get("spec").is_some_and(Value::is_object) {
            object["spec"] = json!({});
        }
        object["spec"]["finalizers"] = json!([super::NAMESPACE_FINALIZER]);
    }
    apply_defaults(ty, object, &name)
}

/// Prepares a replacement of `current`: `/status` writes change only the status, main writes keep
/// the status when it is a subresource; server-owned metadata is carried over and `generation`
/// bumps when anything outside metadata and status changed.
pub(crate) fn prepare_update(
    ty: &ResourceType,
    current: &Value,
    object: &mut Value,
    part: Part,
) -> Result<(), Error> {
    let version = current["apiVersion"]
        .as_str()
        .and_then(|v| v.rsplit('/').next())
        .unwrap_or("v1")
        .to_string();
    check_type(ty, object, &version)?;
    let keep_status = match part {
        Part::Status => {
            let status = object.get("status").cloned();
            let api_version = object["apiVersion"].clone();
            let managed = object.pointer("/metadata/managedFields").cloned();
            *object = current.clone();
            object["apiVersion"] = api_version;
            if let Some(managed) = managed {
                metadata_mut(object).insert("managedFields".into(), managed);
            }
            status
        }
        Part::Main if ty.status_subresource => current.get("status").cloned(),
        Part::Main | Part::Whole => object.get("status").cloned(),
    };
    let map = object.as_object_mut().unwrap();
    match keep_status {
        Some(status) => map.insert("status".into(), status),
        None => map.remove("status"),
    };
    let current_meta = metadata(current).cloned().unwrap_or_default();
    let meta = metadata_mut(object);
    for owned in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
    ] {
        match current_meta.get(owned) {
            Some(value) => meta.insert(owned.into(), value.clone()),
            None => meta.remove(owned),
        };
    }
    if ty.id.is_namespace() && part != Part::Whole {
        // Only the namespace controller (`/finalize` on a real server) changes them.
        match current.pointer("/spec/finalizers") {
            Some(finalizers) => {
                if !object.get("spec").is_some_and(Value::is_object) {
                    object["spec"] = json!({});
                }
                object["spec"]["finalizers"] = finalizers.clone();
            }
            None => {
                if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                    spec.remove("finalizers");
                }
            }
        }
    }
    let meta = metadata_mut(object);
    // Kept as the handlers set them (field ownership); a write that sends none keeps them.
    if !meta.contains_key("managedFields")
        && let Some(managed) = current_meta.get("managedFields")
    {
        meta.insert("managedFields".into(), managed.clone());
    }
    let generation = current_meta
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    // As the API server's Deployment strategy: annotation changes bump a Deployment's generation
    // too (they are copied to its ReplicaSets), except through the status subresource.
    let annotations_changed = part == Part::Main
        && ty.id == ResourceId::new("apps", "deployments")
        && current["metadata"]["annotations"] != object["metadata"]["annotations"];
    let changed = spec_of(current) != spec_of(object) || annotations_changed;
    if has_generation(ty) {
        metadata_mut(object).insert("generation".into(), json!(generation + i64::from(changed)));
    } else {
        metadata_mut(object).remove("generation");
    }
    let name = meta_str(current, "name").to_string();
    apply_defaults(ty, object, &name)
}

/// Whether the API server keeps `metadata.generation` for objects of this type: the types whose
/// registry strategy sets it (workloads, Pods, Ingresses, PodDisruptionBudgets, CRDs and custom
/// resources), not ConfigMaps, Namespaces, Events and the like.
fn has_generation(ty: &ResourceType) -> bool {
    let id = &ty.id;
    !crate::resources::Registry::is_builtin(id)
        || matches!(
            id.group.as_str(),
            "apps" | "batch" | crate::resources::CRD_GROUP
        )
        || *id == ResourceId::core("pods")
        || *id == ResourceId::new("networking.k8s.io", "ingresses")
        || *id == ResourceId::new("policy", "poddisruptionbudgets")
}

/// Everything but metadata and status: what `generation` tracks.
fn spec_of(object: &Value) -> Map<String, Value> {
    object
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn apply_defaults(ty: &ResourceType, object: &mut Value, name: &str) -> Result<(), Error> {
    if ty.id.is_namespace() {
        let labels = metadata_mut(object)
            .entry("labels")
            .or_insert_with(|| json!({}));
        if let Some(labels) = labels.as_object_mut() {
            labels.insert("kubernetes.io/metadata.name".into(), json!(name));
        }
        let terminating = !meta_str(object, "deletionTimestamp").is_empty();
        object["status"] = json!({"phase": if terminating { "Terminating" } else { "Active" }});
    } else if ty.id == ResourceId::core("pods") && object.pointer("/status/phase").is_none() {
        if !object.get("status").is_some_and(Value::is_object) {
            object["status"] = json!({});
        }
        object["status"]["phase"] = json!("Pending");
    } else if ty.id.is_crd() {
        let defined = crd::type_from_crd(object)?;
        object["status"] = crd::status(object, &defined);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_version_4_uuids_and_suffixes_use_the_api_alphabet() {
        let mut ids = IdSource::new(7);
        let uid = ids.uid();
        let parts: Vec<&str> = uid.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            vec![8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('4'));
        assert_ne!(uid, ids.uid());
        let suffix = ids.suffix();
        assert_eq!(suffix.len(), 5);
        assert!(
            suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c))
        );
    }

    #[test]
    fn names_follow_dns_rules() {
        assert!(is_dns_subdomain("web-1.example"));
        assert!(!is_dns_subdomain("Web"));
        assert!(!is_dns_label("a.b"));
        assert!(!is_dns_subdomain("-a"));
    }
}
