//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which kubectl's typed clients send (`kubectl create configmap|secret|deployment|…`,
//! `kubectl auth can-i`): the 4-byte `k8s\0` magic, then a `runtime.Unknown` whose `raw` bytes
//! are the object. Both are decoded with `prost-reflect` against the descriptors of the
//! Kubernetes version the dev cluster reports (`proto/kubernetes.fds.gz`, compiled from the
//! harness's `k8s.io` modules by `proto/generate.sh`), and the object is rendered as the JSON the
//! API server accepts for it, so the store only ever sees JSON.

use std::{io::Read, sync::LazyLock};

use base64::Engine;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as Field,
};
use serde_json::{Map, Value, json};

/// The `Content-Type` kubectl's typed clients send.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const META_PACKAGE: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

static DESCRIPTORS: &[u8] = include_bytes!("../proto/kubernetes.fds.gz");

static POOL: LazyLock<Result<DescriptorPool, String>> = LazyLock::new(|| {
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(DESCRIPTORS)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("unpacking the protobuf descriptors: {e}"))?;
    DescriptorPool::decode(bytes.as_slice())
        .map_err(|e| format!("loading the protobuf descriptors: {e}"))
});

/// A protobuf body could not be turned into an object.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The body does not start with the `k8s\0` magic.
    #[error("the protobuf body does not start with the Kubernetes magic number \"k8s\\x00\"")]
    NoMagic,
    /// The embedded descriptors are broken (a build problem, not a client's).
    #[error("{0}")]
    Descriptors(String),
    /// The `runtime.Unknown` envelope or the object inside it is not valid protobuf.
    #[error("decoding the protobuf {what}")]
    Decode {
        /// `runtime.Unknown` or the object's kind.
        what: String,
        /// The wire-format error.
        #[source]
        source: prost::DecodeError,
    },
    /// No Kubernetes type has this `apiVersion` and `kind`.
    #[error("no protobuf message for apiVersion {api_version:?} kind {kind:?}")]
    UnknownType {
        /// The envelope's `typeMeta.apiVersion`.
        api_version: String,
        /// The envelope's `typeMeta.kind`.
        kind: String,
    },
}

impl Error {
    /// The message with its causes, `outer: inner`, for a `Status` message.
    pub(crate) fn chain_message(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        message
    }
}

/// Whether a `Content-Type` names the protobuf encoding.
pub(crate) fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().map(str::trim) == Some(MEDIA_TYPE)
}

/// Decodes a `k8s\0` + `runtime.Unknown` body into the object's JSON (with `apiVersion` and
/// `kind` from the envelope).
pub(crate) fn decode(body: &[u8]) -> Result<Value, Error> {
    let pool = POOL.as_ref().map_err(|e| Error::Descriptors(e.clone()))?;
    let envelope = body.strip_prefix(MAGIC).ok_or(Error::NoMagic)?;
    let unknown_type = pool
        .get_message_by_name(UNKNOWN)
        .ok_or_else(|| Error::Descriptors(format!("{UNKNOWN} is missing")))?;
    let unknown =
        DynamicMessage::decode(unknown_type, envelope).map_err(|source| Error::Decode {
            what: "runtime.Unknown".into(),
            source,
        })?;
    let text = |message: &DynamicMessage, field: &str| match message.get_field_by_name(field) {
        Some(value) => value.as_str().unwrap_or_default().to_string(),
        None => String::new(),
    };
    let type_meta = unknown
        .get_field_by_name("typeMeta")
        .and_then(|v| v.as_message().cloned());
    let (api_version, kind) = type_meta
        .map(|t| (text(&t, "apiVersion"), text(&t, "kind")))
        .unwrap_or_default();
    let raw = unknown
        .get_field_by_name("raw")
        .and_then(|v| v.as_bytes().cloned())
        .unwrap_or_default();
    let descriptor = message_for(pool, &api_version, &kind).ok_or_else(|| Error::UnknownType {
        api_version: api_version.clone(),
        kind: kind.clone(),
    })?;
    let object = DynamicMessage::decode(descriptor, raw).map_err(|source| Error::Decode {
        what: kind.clone(),
        source,
    })?;
    let mut json = message_json(&object);
    if let Some(map) = json.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(json)
}

/// The message for `apiVersion`/`kind`: package `….{group's first label}.{version}` (`core` for
/// the core group), or `meta/v1` for the options types (`DeleteOptions`).
fn message_for(pool: &DescriptorPool, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let short = match group {
        "" => "core",
        group => group.split('.').next().unwrap_or(group),
    };
    let suffix = format!(".{short}.{version}");
    pool.all_messages()
        .find(|m| m.name() == kind && m.package_name().ends_with(&suffix))
        .or_else(|| pool.get_message_by_name(&format!("{META_PACKAGE}.{kind}")))
}

/// The JSON form of a message, with the apimachinery types that have a custom JSON encoding
/// (times, quantities, int-or-string, raw JSON) rendered as the API server renders them.
fn message_json(message: &DynamicMessage) -> Value {
    let field = |name: &str| message.get_field_by_name(name);
    let int = |name: &str| field(name).and_then(|v| v.as_i64()).unwrap_or(0);
    match message.descriptor().full_name() {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" => timestamp(int("seconds"), None),
        "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            let nanos = field("nanos").and_then(|v| v.as_i32()).unwrap_or(0);
            timestamp(int("seconds"), Some(nanos))
        }
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => {
            json!(field("string").and_then(|v| v.as_str().map(String::from)))
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            json!(field("duration").and_then(|v| v.as_str().map(String::from)))
        }
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                json!(field("strVal").and_then(|v| v.as_str().map(String::from)))
            } else {
                json!(field("intVal").and_then(|v| v.as_i32()).unwrap_or(0))
            }
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON" => {
            let raw = field("raw").and_then(|v| v.as_bytes().cloned());
            raw.and_then(|raw| serde_json::from_slice(&raw).ok())
                .unwrap_or(Value::Null)
        }
        _ => {
            let mut object = Map::new();
            for (descriptor, value) in message.fields() {
                match field_json(value) {
                    // Go's protobuf marshalling writes unset non-pointer strings as "", which
                    // the JSON encoding omits.
                    Value::Null => {}
                    Value::String(s) if s.is_empty() => {}
                    value => {
                        object.insert(descriptor.name().to_string(), value);
                    }
                }
            }
            Value::Object(object)
        }
    }
}

fn field_json(value: &Field) -> Value {
    match value {
        Field::Bool(b) => json!(b),
        Field::I32(n) => json!(n),
        Field::I64(n) => json!(n),
        Field::U32(n) => json!(n),
        Field::U64(n) => json!(n),
        Field::F32(n) => json!(n),
        Field::F64(n) => json!(n),
        Field::EnumNumber(n) => json!(n),
        Field::String(s) => json!(s),
        Field::Bytes(b) => json!(base64::engine::general_purpose::STANDARD.encode(b)),
        Field::Message(m) => message_json(m),
        Field::List(items) => Value::Array(items.iter().map(field_json).collect()),
        Field::Map(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                map.insert(key, field_json(value));
            }
            Value::Object(map)
        }
    }
}

/// `2024-05-01T12:00:00Z` (Time) or `2024-05-01T12:00:00.000000Z` (MicroTime); the zero time
/// (Go's unset `metav1.Time`) is `null`.
fn timestamp(seconds: i64, micro_nanos: Option<i32>) -> Value {
    if seconds == 0 && micro_nanos.unwrap_or(0) == 0 {
        return Value::Null;
    }
    let Ok(at) = jiff::Timestamp::new(seconds, micro_nanos.unwrap_or(0)) else {
        return Value::Null;
    };
    match micro_nanos {
        None => json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        Some(_) => json!(at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn pool() -> &'static DescriptorPool {
        POOL.as_ref().unwrap()
    }

    /// Encodes `object` (a JSON document in proto field names) as kubectl would send it.
    fn envelope(api_version: &str, kind: &str, object: DynamicMessage) -> Vec<u8> {
        let mut unknown = DynamicMessage::new(pool().get_message_by_name(UNKNOWN).unwrap());
        let mut type_meta = DynamicMessage::new(
            pool()
                .get_message_by_name("k8s.io.apimachinery.pkg.runtime.TypeMeta")
                .unwrap(),
        );
        type_meta.set_field_by_name("apiVersion", Field::String(api_version.into()));
        type_meta.set_field_by_name("kind", Field::String(kind.into()));
        unknown.set_field_by_name("typeMeta", Field::Message(type_meta));
        unknown.set_field_by_name("raw", Field::Bytes(object.encode_to_vec().into()));
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn message(name: &str) -> DynamicMessage {
        DynamicMessage::new(pool().get_message_by_name(name).unwrap())
    }

    #[test]
    fn a_configmap_decodes_to_its_json() {
        let mut meta = message("k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta");
        meta.set_field_by_name("name", Field::String("settings".into()));
        meta.set_field_by_name("namespace", Field::String(String::new()));
        meta.set_field_by_name(
            "creationTimestamp",
            Field::Message(message("k8s.io.apimachinery.pkg.apis.meta.v1.Time")),
        );
        let mut cm = message("k8s.io.api.core.v1.ConfigMap");
        cm.set_field_by_name("metadata", Field::Message(meta));
        cm.set_field_by_name(
            "data",
            Field::Map([(MapKey::String("mode".into()), Field::String("fast".into()))].into()),
        );
        let decoded = decode(&envelope("v1", "ConfigMap", cm)).unwrap();
        assert_eq!(
            decoded,
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings"}, "data": {"mode": "fast"}})
        );
    }

    #[test]
    fn apimachinery_types_take_their_json_forms() {
        let mut port = message("k8s.io.apimachinery.pkg.util.intstr.IntOrString");
        port.set_field_by_name("type", Field::I64(1));
        port.set_field_by_name("strVal", Field::String("http".into()));
        assert_eq!(message_json(&port), json!("http"));
        let mut time = message("k8s.io.apimachinery.pkg.apis.meta.v1.Time");
        time.set_field_by_name("seconds", Field::I64(1_700_000_000));
        assert_eq!(message_json(&time), json!("2023-11-14T22:13:20Z"));
        let mut quantity = message("k8s.io.apimachinery.pkg.api.resource.Quantity");
        quantity.set_field_by_name("string", Field::String("100m".into()));
        assert_eq!(message_json(&quantity), json!("100m"));
    }

    #[test]
    fn groups_map_to_their_proto_packages() {
        let name = |v: &str, k: &str| message_for(pool(), v, k).map(|m| m.full_name().to_string());
        assert_eq!(
            name("apps/v1", "Deployment").as_deref(),
            Some("k8s.io.api.apps.v1.Deployment")
        );
        assert_eq!(
            name("rbac.authorization.k8s.io/v1", "Role").as_deref(),
            Some("k8s.io.api.rbac.v1.Role")
        );
        assert_eq!(
            name("authorization.k8s.io/v1", "SelfSubjectAccessReview").as_deref(),
            Some("k8s.io.api.authorization.v1.SelfSubjectAccessReview")
        );
        assert_eq!(
            name("v1", "DeleteOptions").as_deref(),
            Some("k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions")
        );
        assert!(name("example.com/v1", "Widget").is_none());
    }

    #[test]
    fn a_body_without_the_magic_is_refused() {
        assert!(matches!(decode(b"{\"kind\":\"Pod\"}"), Err(Error::NoMagic)));
    }
}
