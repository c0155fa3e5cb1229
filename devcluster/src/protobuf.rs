//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! which kubectl's typed clients send (`kubectl create configmap|secret|deployment|…`,
//! `kubectl auth can-i`): the 4-byte `k8s\0` magic, then a `runtime.Unknown` whose `raw` bytes
//! are the object. Both are decoded with `prost-reflect` against the descriptors of the
//! Kubernetes version the dev cluster reports (`proto/kubernetes.fds.gz`, compiled from the
//! harness's `k8s.io` modules by `proto/generate.sh`), and the object is rendered as the JSON the
//! API server writes for it, so the store only ever sees JSON. The descriptors name the fields;
//! how each is written as JSON (embedded inline, omitted when empty or zero, `null` when unset)
//! comes from the Go types' struct tags, in `proto/json-fields.json.gz` (generated beside the
//! descriptors by `proto/json_fields.go`).

use std::{collections::HashMap, io::Read, sync::LazyLock};

use base64::Engine;
use prost_reflect::{
    DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage, Value as Field,
};
use serde_json::{Map, Value, json};

/// The `Content-Type` kubectl's typed clients send.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

const MAGIC: &[u8] = b"k8s\0";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const META_PACKAGE: &str = "k8s.io.apimachinery.pkg.apis.meta.v1";

static DESCRIPTORS: &[u8] = include_bytes!("../proto/kubernetes.fds.gz");
static JSON_FIELDS: &[u8] = include_bytes!("../proto/json-fields.json.gz");

static POOL: LazyLock<Result<DescriptorPool, String>> = LazyLock::new(|| {
    DescriptorPool::decode(gunzip(DESCRIPTORS, "the protobuf descriptors")?.as_slice())
        .map_err(|e| format!("loading the protobuf descriptors: {e}"))
});

/// How the API server writes one field of a message as JSON (from the Go struct's tags).
#[derive(Debug, serde::Deserialize)]
struct JsonField(
    /// The protobuf field number.
    u32,
    /// The JSON name; empty for an embedded struct written inline.
    String,
    /// `i` inline, `o` omitempty, `z` omitzero, `p` pointer, `s` slice, `m` map, `v` struct value.
    String,
);

impl JsonField {
    fn has(&self, flag: char) -> bool {
        self.2.contains(flag)
    }
}

/// Message full name → its fields in the Go struct's order.
type JsonFields = HashMap<String, Vec<JsonField>>;

static FIELDS: LazyLock<Result<JsonFields, String>> = LazyLock::new(|| {
    serde_json::from_slice(&gunzip(JSON_FIELDS, "the JSON field table")?)
        .map_err(|e| format!("loading the JSON field table: {e}"))
});

fn gunzip(bytes: &[u8], what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| format!("unpacking {what}: {e}"))?;
    Ok(out)
}

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
    pub fn chain_message(&self) -> String {
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
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let pool = POOL.as_ref().map_err(|e| Error::Descriptors(e.clone()))?;
    let fields = FIELDS.as_ref().map_err(|e| Error::Descriptors(e.clone()))?;
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
    let mut json = message_json(&object, fields);
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
fn message_json(message: &DynamicMessage, fields: &JsonFields) -> Value {
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
        // The raw JSON is field 1 of each (`raw`, but `Raw` in FieldsV1).
        "k8s.io.apimachinery.pkg.runtime.RawExtension"
        | "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
        | "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON" => {
            let raw = message
                .get_field_by_number(1)
                .and_then(|v| v.as_bytes().cloned());
            raw.and_then(|raw| serde_json::from_slice(&raw).ok())
                .unwrap_or(Value::Null)
        }
        name => {
            let mut object = Map::new();
            match fields.get(name) {
                Some(table) => write_fields(message, table, fields, &mut object),
                None => {
                    // Not one of the API's Go types: every field that is set, by its proto
                    // name, leaving out empty strings (Go writes unset non-pointer strings as
                    // "", which the JSON encoding usually omits).
                    for (descriptor, value) in message.fields() {
                        match field_json(value, fields) {
                            Value::Null => {}
                            Value::String(s) if s.is_empty() => {}
                            value => {
                                object.insert(descriptor.name().to_string(), value);
                            }
                        }
                    }
                }
            }
            Value::Object(object)
        }
    }
}

/// Writes a message's fields into `object` as Go's `encoding/json` writes its struct: embedded
/// structs inline, `omitempty` fields left out when empty (a struct value never is), `omitzero`
/// ones when zero, and an unset pointer, slice or map without either as `null`.
fn write_fields(
    message: &DynamicMessage,
    table: &[JsonField],
    fields: &JsonFields,
    object: &mut Map<String, Value>,
) {
    for spec in table {
        let JsonField(number, name, _) = spec;
        if name == "-" {
            continue;
        }
        let value = message
            .has_field_by_number(*number)
            .then(|| message.get_field_by_number(*number))
            .flatten();
        if spec.has('i') {
            if let Some(Field::Message(inner)) = value.as_deref()
                && let Value::Object(inline) = message_json(inner, fields)
            {
                object.extend(inline);
            }
            continue;
        }
        let json = match value.as_deref() {
            Some(value) => field_json(value, fields),
            None if spec.has('o') || spec.has('z') => continue,
            None if spec.has('p') || spec.has('s') || spec.has('m') => Value::Null,
            // A scalar or struct the encoder left out: its zero value, as Go would write it.
            None => match message.descriptor().get_field(*number) {
                Some(descriptor) => {
                    field_json(&Field::default_value_for_field(&descriptor), fields)
                }
                None => continue,
            },
        };
        let empty = match &json {
            Value::Bool(b) => !b,
            Value::Number(n) => n.as_f64() == Some(0.0),
            Value::String(s) => s.is_empty(),
            Value::Array(items) => items.is_empty(),
            Value::Object(map) => map.is_empty(),
            Value::Null => true,
        };
        let omitempty = spec.has('o') && !spec.has('v') && !spec.has('p') && empty;
        let omitzero = spec.has('z') && empty;
        if !(omitempty || omitzero) {
            object.insert(name.clone(), json);
        }
    }
}

fn field_json(value: &Field, fields: &JsonFields) -> Value {
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
        Field::Message(m) => message_json(m, fields),
        Field::List(items) => Value::Array(items.iter().map(|v| field_json(v, fields)).collect()),
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
                map.insert(key, field_json(value, fields));
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

    fn fields() -> &'static JsonFields {
        FIELDS.as_ref().unwrap()
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
    fn fields_are_written_as_the_go_types_tags_say() {
        // `Volume` embeds its `VolumeSource`, which embeds nothing but holds a `configMap`
        // whose `LocalObjectReference` is embedded too: both inline in JSON.
        let mut reference = message("k8s.io.api.core.v1.LocalObjectReference");
        reference.set_field_by_name("name", Field::String("web".into()));
        let mut config_map = message("k8s.io.api.core.v1.ConfigMapVolumeSource");
        config_map.set_field_by_name("localObjectReference", Field::Message(reference));
        let mut source = message("k8s.io.api.core.v1.VolumeSource");
        source.set_field_by_name("configMap", Field::Message(config_map));
        let mut volume = message("k8s.io.api.core.v1.Volume");
        volume.set_field_by_name("name", Field::String("config".into()));
        volume.set_field_by_name("volumeSource", Field::Message(source));
        assert_eq!(
            message_json(&volume, fields()),
            json!({"name": "config", "configMap": {"name": "web"}})
        );
        // `ready` and `imageID` have no omitempty: false and "" are written; `containerID` has
        // it; `state` is a struct value, written even when empty.
        let mut status = message("k8s.io.api.core.v1.ContainerStatus");
        status.set_field_by_name("name", Field::String("web".into()));
        status.set_field_by_name("ready", Field::Bool(false));
        status.set_field_by_name("imageID", Field::String(String::new()));
        status.set_field_by_name("containerID", Field::String(String::new()));
        status.set_field_by_name(
            "state",
            Field::Message(message("k8s.io.api.core.v1.ContainerState")),
        );
        assert_eq!(
            message_json(&status, fields()),
            json!({"name": "web", "state": {}, "ready": false, "restartCount": 0,
                "image": "", "imageID": ""})
        );
    }

    #[test]
    fn apimachinery_types_take_their_json_forms() {
        let mut port = message("k8s.io.apimachinery.pkg.util.intstr.IntOrString");
        port.set_field_by_name("type", Field::I64(1));
        port.set_field_by_name("strVal", Field::String("http".into()));
        assert_eq!(message_json(&port, fields()), json!("http"));
        let mut time = message("k8s.io.apimachinery.pkg.apis.meta.v1.Time");
        time.set_field_by_name("seconds", Field::I64(1_700_000_000));
        assert_eq!(message_json(&time, fields()), json!("2023-11-14T22:13:20Z"));
        let mut quantity = message("k8s.io.apimachinery.pkg.api.resource.Quantity");
        quantity.set_field_by_name("string", Field::String("100m".into()));
        assert_eq!(message_json(&quantity, fields()), json!("100m"));
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
