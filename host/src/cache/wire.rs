//! [`WireObject`]: an object as it arrives from the API server, read once.
//!
//! The informer's decoder (kube's, through `serde_json`) walks each object's JSON once. Top-level
//! fields other than `apiVersion`, `kind` and `metadata` (`spec`, `status`, …) are kept as the
//! JSON text they arrived as, never built into a tree. `metadata` is kept as text too, and read
//! a second time for what the cache needs (name, namespace, uid, resourceVersion, labels) and for
//! where `managedFields` lies, so the cache can cut it out of the text. The cached body is then
//! assembled from these pieces ([`super::CachedObject::from_wire`]): a watched object costs one
//! parse plus one pass over its metadata, where a `serde_json::Value` would cost a parse, a tree
//! and a serialization.
//!
//! The JSON is kept as the server wrote it (the API server's is compact). Top-level fields come
//! out in the order `apiVersion`, `kind`, `metadata`, then the others as received.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;

use super::{ObjectError, ObjectKey};

/// One object's JSON as received, with its identity and labels read out of it.
#[derive(Clone)]
pub struct WireObject {
    pub(super) api_version: Option<String>,
    pub(super) kind: Option<String>,
    /// Name, namespace, uid, resourceVersion and labels (nothing else is read).
    pub(super) meta: ObjectMeta,
    /// `metadata` as received (`None` when the object has none).
    pub(super) metadata: Option<Box<RawValue>>,
    /// The `"managedFields": …` entry in `metadata`, with one separating comma.
    pub(super) managed_fields: Option<Range<usize>>,
    /// Every other top-level field, in the order received.
    pub(super) fields: Vec<(String, Box<RawValue>)>,
}

impl fmt::Debug for WireObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WireObject")
            .field("api_version", &self.api_version)
            .field("kind", &self.kind)
            .field("namespace", &self.meta.namespace)
            .field("name", &self.meta.name)
            .field("resource_version", &self.meta.resource_version)
            .finish_non_exhaustive()
    }
}

/// The fields of `metadata` the cache reads; the rest is skipped.
#[derive(Deserialize)]
struct MetadataFields<'a> {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default, rename = "resourceVersion")]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, borrow, rename = "managedFields")]
    managed_fields: Option<&'a RawValue>,
}

impl WireObject {
    /// An object built as a `serde_json::Value` (tests, the metadata-only watch, tools): its
    /// compact text read as if received.
    pub fn from_value(value: &Value) -> Result<Self, ObjectError> {
        let Some(map) = value.as_object() else {
            return Err(ObjectError::NotAnObject);
        };
        // Name the object in a labels error, as the cache does.
        if let Some(labels) = map.get("metadata").and_then(|m| m.get("labels"))
            && !labels.is_null()
            && !labels
                .as_object()
                .is_some_and(|l| l.values().all(Value::is_string))
        {
            let metadata = &map["metadata"];
            let text = |f: &str| metadata.get(f).and_then(Value::as_str).unwrap_or_default();
            return Err(ObjectError::BadLabels {
                key: ObjectKey::new(text("namespace"), text("name")),
            });
        }
        serde_json::from_str(&value.to_string()).map_err(|_| ObjectError::NoName)
    }

    /// Reads identity, labels and where `managedFields` lies out of `metadata`.
    fn read_metadata(&mut self) -> Result<(), serde_json::Error> {
        let Some(metadata) = self.metadata.take() else {
            return Ok(());
        };
        if metadata.get() == "null" {
            return Ok(());
        }
        let fields: MetadataFields<'_> = serde_json::from_str(metadata.get())?;
        let mut span = fields
            .managed_fields
            .and_then(|value| entry_span(metadata.get(), value.get()));
        let escaped = fields.managed_fields.is_some() && span.is_none();
        self.meta = ObjectMeta {
            name: fields.name,
            namespace: fields.namespace,
            uid: fields.uid,
            resource_version: fields.resource_version,
            labels: fields.labels,
            ..ObjectMeta::default()
        };
        let metadata = if escaped {
            // The key is written with escapes: write the metadata again with plain keys.
            let map: serde_json::Map<String, Value> = serde_json::from_str(metadata.get())?;
            let plain = serde_json::value::to_raw_value(&map)?;
            let fields: MetadataFields<'_> = serde_json::from_str(plain.get())?;
            span = fields
                .managed_fields
                .and_then(|value| entry_span(plain.get(), value.get()));
            plain
        } else {
            metadata
        };
        self.managed_fields = span;
        self.metadata = Some(metadata);
        Ok(())
    }

    /// Sets `apiVersion` and `kind` where the object lacks them (LIST items come without them).
    #[must_use]
    pub fn with_default_type(mut self, api_version: &str, kind: &str) -> Self {
        self.api_version
            .get_or_insert_with(|| api_version.to_owned());
        self.kind.get_or_insert_with(|| kind.to_owned());
        self
    }

    /// Whether the object has `metadata`.
    pub fn metadata_present(&self) -> bool {
        self.metadata.is_some()
    }

    /// `apiVersion`, as received.
    pub fn api_version(&self) -> Option<&str> {
        self.api_version.as_deref()
    }

    /// `kind`, as received.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The object's metadata as far as it was read (see [`WireObject`]).
    pub fn meta(&self) -> &ObjectMeta {
        &self.meta
    }

    /// Mutable metadata (kube's watcher needs it; the cache reads only what was read in).
    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }

    /// `metadata.name`, `metadata.namespace` as the cache key.
    pub fn key(&self) -> ObjectKey {
        ObjectKey::new(
            self.meta.namespace.as_deref().unwrap_or_default(),
            self.meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// `metadata.uid`, empty when unset.
    pub fn uid(&self) -> &str {
        self.meta.uid.as_deref().unwrap_or_default()
    }

    /// `metadata.resourceVersion`, empty when unset.
    pub fn resource_version(&self) -> &str {
        self.meta.resource_version.as_deref().unwrap_or_default()
    }

    /// The whole object as JSON text, `managedFields` left out when `strip_managed_fields`.
    pub(super) fn body(&self, strip_managed_fields: bool) -> String {
        let metadata = self.metadata_parts(strip_managed_fields);
        let size = metadata.map_or(0, |(head, tail)| head.len() + tail.len() + 12)
            + self
                .fields
                .iter()
                .map(|(k, v)| k.len() + v.get().len() + 4)
                .sum::<usize>()
            + self.api_version.as_ref().map_or(0, |v| v.len() + 16)
            + self.kind.as_ref().map_or(0, |v| v.len() + 10)
            + 2;
        let mut body = String::with_capacity(size);
        body.push('{');
        // Starts the entry `key` (its value is pushed next).
        let key = |body: &mut String, key: &str| {
            if body.len() > 1 {
                body.push(',');
            }
            push_json_string(body, key);
            body.push(':');
        };
        for (name, value) in [("apiVersion", &self.api_version), ("kind", &self.kind)] {
            if let Some(value) = value {
                key(&mut body, name);
                push_json_string(&mut body, value);
            }
        }
        if let Some((head, tail)) = metadata {
            key(&mut body, "metadata");
            body.push_str(head);
            body.push_str(tail);
        }
        for (name, value) in &self.fields {
            key(&mut body, name);
            body.push_str(value.get());
        }
        body.push('}');
        body
    }

    /// `metadata`'s text in two pieces, around `managedFields` when `strip_managed_fields` (the
    /// second piece is empty when nothing is cut).
    fn metadata_parts(&self, strip_managed_fields: bool) -> Option<(&str, &str)> {
        let text = self.metadata.as_deref()?.get();
        Some(match (&self.managed_fields, strip_managed_fields) {
            (Some(span), true) => (&text[..span.start], &text[span.end..]),
            _ => (text, ""),
        })
    }

    /// The top-level fields named in `first_keys`, as a JSON object to evaluate index paths on
    /// (custom indexes read only these, so only these are parsed).
    pub(super) fn partial_value(&self, first_keys: &[&str], strip_managed_fields: bool) -> Value {
        let mut map = serde_json::Map::new();
        for &key in first_keys {
            let raw = match key {
                "apiVersion" => self.api_version.clone().map(Value::String),
                "kind" => self.kind.clone().map(Value::String),
                "metadata" => self
                    .metadata_parts(strip_managed_fields)
                    .and_then(|(head, tail)| serde_json::from_str(&[head, tail].concat()).ok()),
                _ => self
                    .fields
                    .iter()
                    .find(|(k, _)| k == key)
                    .and_then(|(_, v)| serde_json::from_str(v.get()).ok()),
            };
            if let Some(value) = raw {
                map.insert(key.to_owned(), value);
            }
        }
        Value::Object(map)
    }
}

/// Appends `s` as a JSON string (quoted, escaped as `serde_json` does).
fn push_json_string(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&serde_json::to_string(s).expect("a string serializes"));
    }
}

/// Where the `managedFields` entry lies in `metadata`'s text, given its value's text (a slice of
/// it), with one separating comma; `None` if its key is not written plainly.
fn entry_span(text: &str, value: &str) -> Option<Range<usize>> {
    let start = (value.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let end = start + value.len();
    let before = text[..start].trim_end().strip_suffix(':')?.trim_end();
    let key_start = before.strip_suffix("\"managedFields\"")?.len();
    let after = &text[end..];
    if let Some(rest) = after.trim_start().strip_prefix(',') {
        return Some(key_start..text.len() - rest.len());
    }
    match text[..key_start].trim_end().strip_suffix(',') {
        Some(head) => Some(head.len()..end),
        None => Some(key_start..end),
    }
}

impl<'de> Deserialize<'de> for WireObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(WireVisitor)
    }
}

/// A map key, borrowed from the input when it can be.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

struct WireVisitor;

impl<'de> Visitor<'de> for WireVisitor {
    type Value = WireObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireObject, A::Error> {
        let mut object = WireObject {
            api_version: None,
            kind: None,
            meta: ObjectMeta::default(),
            metadata: None,
            managed_fields: None,
            fields: Vec::new(),
        };
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match &*key {
                "apiVersion" => object.api_version = map.next_value()?,
                "kind" => object.kind = map.next_value()?,
                "metadata" => object.metadata = map.next_value()?,
                _ => {
                    let value: Box<RawValue> = map.next_value()?;
                    match object.fields.iter_mut().find(|(k, _)| *k == *key) {
                        // A repeated key: the last one counts, as in a `serde_json::Value`.
                        Some((_, old)) => *old = value,
                        None => object.fields.push((key.into_owned(), value)),
                    }
                }
            }
        }
        object.read_metadata().map_err(de::Error::custom)?;
        Ok(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wire(text: &str) -> WireObject {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn reads_identity_and_keeps_the_rest_as_text() {
        let obj = wire(
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","labels":{"app":"web"},"generation":3},"spec":{"nodeName":"n1"},"status":{}}"#,
        );
        assert_eq!(obj.key(), ObjectKey::new("ns", "a"));
        assert_eq!((obj.uid(), obj.resource_version()), ("u", "7"));
        assert_eq!(obj.meta().labels.as_ref().unwrap()["app"], "web");
        assert_eq!(
            obj.body(true),
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"ns","uid":"u","resourceVersion":"7","labels":{"app":"web"},"generation":3},"spec":{"nodeName":"n1"},"status":{}}"#
        );
    }

    #[test]
    fn cuts_managed_fields_wherever_they_are() {
        for (metadata, stripped) in [
            (
                r#"{"name":"a","managedFields":[{"manager":"m"}],"uid":"u"}"#,
                r#"{"name":"a","uid":"u"}"#,
            ),
            (
                r#"{"name":"a","managedFields":[{"manager":"m"}]}"#,
                r#"{"name":"a"}"#,
            ),
            (
                r#"{"managedFields":[{"manager":"m"}],"name":"a"}"#,
                r#"{"name":"a"}"#,
            ),
            (r#"{"managedFields":[]}"#, r#"{}"#),
            (
                r#"{ "name" : "a" , "managedFields" : [ ] , "uid" : "u" }"#,
                r#"{ "name" : "a" ,  "uid" : "u" }"#,
            ),
            // Escaped key: decoded and re-encoded.
            (
                r#"{"name":"a","managed\u0046ields":[1]}"#,
                r#"{"name":"a"}"#,
            ),
        ] {
            let obj = wire(&format!(r#"{{"metadata":{metadata}}}"#));
            assert_eq!(
                obj.body(true),
                format!(r#"{{"metadata":{stripped}}}"#),
                "{metadata}"
            );
            let kept: Value = serde_json::from_str(&obj.body(false)).unwrap();
            assert!(
                kept["metadata"].get("managedFields").is_some(),
                "{metadata}"
            );
        }
    }

    #[test]
    fn fills_in_type_and_escapes_strings() {
        let obj = wire(r#"{"metadata":{"name":"a"},"x\"y":1}"#).with_default_type("v1", "Pod");
        let body = obj.body(true);
        assert_eq!(
            body,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"x\"y":1}"#
        );
        let kept = wire(r#"{"kind":"Other","metadata":{}}"#).with_default_type("v1", "Pod");
        assert_eq!(kept.kind(), Some("Other"));
    }

    #[test]
    fn text_matches_the_value_it_came_from() {
        let value = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "labels": {"k": "v"}},
            "spec": {"containers": [{"name": "c", "args": ["é", "\"q\"", "\n"]}]}});
        let obj = WireObject::from_value(&value).unwrap();
        let back: Value = serde_json::from_str(&obj.body(true)).unwrap();
        assert_eq!(back, value);
        assert!(matches!(
            WireObject::from_value(&json!([1])),
            Err(ObjectError::NotAnObject)
        ));
        assert!(matches!(
            WireObject::from_value(&json!({"metadata": {"name": "a", "labels": {"k": 1}}})),
            Err(ObjectError::BadLabels { .. })
        ));
    }
}
