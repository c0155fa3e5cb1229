//! `/openapi/v2` in protobuf (gnostic's `openapi_v2.Document`), which kubectl asks for when it
//! validates a `kind: List` file on the client, and when it merges with client-side apply.
//!
//! The document is the JSON one ([`crate::openapi`]) re-encoded: its definitions, schema by
//! schema, with every field kubectl reads (`$ref`, `type`, `properties`, `items`,
//! `additionalProperties`, `required`, `x-kubernetes-*` extensions, …). Its paths are left out:
//! kubectl reads them only to learn whether a kind takes server-side field validation, which it
//! asks the v3 documents first (and an absent path says "no", as for a `List`).

use prost::encoding::{self, WireType};
use serde_json::Value;

/// The media types a client may ask for in `Accept`: kubectl sends the first, which is not a
/// valid media type (`@`), so the API server answers with the second, as here.
const MEDIA_TYPES: [&str; 2] = [
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
];

/// The `Content-Type` of the answer if `accept` asks for the protobuf document.
pub(crate) fn requested(accept: &str) -> Option<&'static str> {
    let asked = accept.split(',').any(|part| {
        let media = part.split(';').next().unwrap_or("").trim();
        MEDIA_TYPES.contains(&media)
    });
    asked.then_some(MEDIA_TYPES[1])
}

/// `document` (an OpenAPI v2 document as JSON) as an `openapi_v2.Document`.
pub(crate) fn encode(document: &Value) -> Vec<u8> {
    let mut buf = Vec::new();
    string(&mut buf, 1, document["swagger"].as_str().unwrap_or("2.0"));
    if let Some(info) = document.get("info") {
        message(&mut buf, 2, |buf| {
            string(buf, 1, info["title"].as_str().unwrap_or(""));
            string(buf, 2, info["version"].as_str().unwrap_or(""));
        });
    }
    if let Some(definitions) = document["definitions"].as_object() {
        message(&mut buf, 9, |buf| named_schemas(buf, definitions));
    }
    buf
}

/// `repeated NamedSchema additional_properties = 1` of `Definitions` and `Properties`.
fn named_schemas(buf: &mut Vec<u8>, schemas: &serde_json::Map<String, Value>) {
    for (name, schema) in schemas {
        message(buf, 1, |buf| {
            string(buf, 1, name);
            message(buf, 2, |buf| self::schema(buf, schema));
        });
    }
}

/// The fields of one `Schema` message.
fn schema(buf: &mut Vec<u8>, schema: &Value) {
    let Some(fields) = schema.as_object() else {
        return;
    };
    for (key, value) in fields {
        match (key.as_str(), value) {
            ("$ref", Value::String(s)) => string(buf, 1, s),
            ("format", Value::String(s)) => string(buf, 2, s),
            ("title", Value::String(s)) => string(buf, 3, s),
            ("description", Value::String(s)) => string(buf, 4, s),
            ("default", v) => any(buf, 5, v),
            ("multipleOf", v) => double(buf, 6, v),
            ("maximum", v) => double(buf, 7, v),
            ("exclusiveMaximum", Value::Bool(b)) => boolean(buf, 8, *b),
            ("minimum", v) => double(buf, 9, v),
            ("exclusiveMinimum", Value::Bool(b)) => boolean(buf, 10, *b),
            ("maxLength", v) => int64(buf, 11, v),
            ("minLength", v) => int64(buf, 12, v),
            ("pattern", Value::String(s)) => string(buf, 13, s),
            ("maxItems", v) => int64(buf, 14, v),
            ("minItems", v) => int64(buf, 15, v),
            ("uniqueItems", Value::Bool(b)) => boolean(buf, 16, *b),
            ("maxProperties", v) => int64(buf, 17, v),
            ("minProperties", v) => int64(buf, 18, v),
            ("required", Value::Array(names)) => {
                for name in names.iter().filter_map(Value::as_str) {
                    string(buf, 19, name);
                }
            }
            ("enum", Value::Array(values)) => values.iter().for_each(|v| any(buf, 20, v)),
            ("additionalProperties", Value::Bool(b)) => message(buf, 21, |buf| boolean(buf, 2, *b)),
            ("additionalProperties", v @ Value::Object(_)) => {
                message(buf, 21, |buf| message(buf, 1, |buf| self::schema(buf, v)));
            }
            ("type", Value::String(s)) => message(buf, 22, |buf| string(buf, 1, s)),
            ("type", Value::Array(types)) => message(buf, 22, |buf| {
                types
                    .iter()
                    .filter_map(Value::as_str)
                    .for_each(|s| string(buf, 1, s));
            }),
            ("items", v @ Value::Object(_)) => {
                message(buf, 23, |buf| message(buf, 1, |buf| self::schema(buf, v)));
            }
            ("items", Value::Array(items)) => message(buf, 23, |buf| {
                for item in items {
                    message(buf, 1, |buf| self::schema(buf, item));
                }
            }),
            ("allOf", Value::Array(schemas)) => {
                for s in schemas {
                    message(buf, 24, |buf| self::schema(buf, s));
                }
            }
            ("properties", Value::Object(properties)) => {
                message(buf, 25, |buf| named_schemas(buf, properties));
            }
            ("discriminator", Value::String(s)) => string(buf, 26, s),
            ("readOnly", Value::Bool(b)) => boolean(buf, 27, *b),
            ("example", v) => any(buf, 30, v),
            (extension, v) if extension.starts_with("x-") => message(buf, 31, |buf| {
                string(buf, 1, extension);
                any(buf, 2, v);
            }),
            _ => {}
        }
    }
}

/// An `Any` (gnostic's, not protobuf's): the value as YAML text, which JSON text is.
fn any(buf: &mut Vec<u8>, tag: u32, value: &Value) {
    message(buf, tag, |buf| string(buf, 2, &value.to_string()));
}

/// A length-delimited field holding the message `fill` writes.
fn message(buf: &mut Vec<u8>, tag: u32, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(inner.len() as u64, buf);
    buf.extend_from_slice(&inner);
}

fn string(buf: &mut Vec<u8>, tag: u32, value: &str) {
    encoding::encode_key(tag, WireType::LengthDelimited, buf);
    encoding::encode_varint(value.len() as u64, buf);
    buf.extend_from_slice(value.as_bytes());
}

fn boolean(buf: &mut Vec<u8>, tag: u32, value: bool) {
    encoding::bool::encode(tag, &value, buf);
}

fn double(buf: &mut Vec<u8>, tag: u32, value: &Value) {
    if let Some(n) = value.as_f64() {
        encoding::double::encode(tag, &n, buf);
    }
}

fn int64(buf: &mut Vec<u8>, tag: u32, value: &Value) {
    if let Some(n) = value.as_i64() {
        encoding::int64::encode(tag, &n, buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use serde_json::json;

    #[test]
    fn the_protobuf_document_is_answered_in_the_media_type_go_can_parse() {
        assert_eq!(
            requested("application/com.github.proto-openapi.spec.v2@v1.0+protobuf"),
            Some(MEDIA_TYPES[1])
        );
        assert_eq!(
            requested(
                "application/json, application/com.github.proto-openapi.spec.v2.v1.0+protobuf;q=0.9"
            ),
            Some(MEDIA_TYPES[1])
        );
        assert_eq!(requested("application/json"), None);
        assert_eq!(requested("*/*"), None);
    }

    /// The gnostic messages kubectl decodes, for the fields this test reads.
    #[derive(Clone, PartialEq, Message)]
    struct Document {
        #[prost(string, tag = "1")]
        swagger: String,
        #[prost(message, optional, tag = "9")]
        definitions: Option<Named>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct Named {
        #[prost(message, repeated, tag = "1")]
        entries: Vec<NamedSchema>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct NamedSchema {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(message, optional, tag = "2")]
        value: Option<Schema>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct Schema {
        #[prost(string, tag = "1")]
        reference: String,
        #[prost(string, tag = "4")]
        description: String,
        #[prost(int64, tag = "15")]
        min_items: i64,
        #[prost(string, repeated, tag = "19")]
        required: Vec<String>,
        #[prost(message, optional, tag = "22")]
        kind: Option<TypeItem>,
        #[prost(message, optional, tag = "25")]
        properties: Option<Named>,
        #[prost(message, repeated, tag = "31")]
        extensions: Vec<NamedAny>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct TypeItem {
        #[prost(string, repeated, tag = "1")]
        value: Vec<String>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct NamedAny {
        #[prost(string, tag = "1")]
        name: String,
        #[prost(message, optional, tag = "2")]
        value: Option<Any>,
    }
    #[derive(Clone, PartialEq, Message)]
    struct Any {
        #[prost(string, tag = "2")]
        yaml: String,
    }

    #[test]
    fn a_definition_keeps_its_type_properties_references_and_extensions() {
        let document = json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.37.2"},
            "paths": {"/api/": {}},
            "definitions": {
                "io.k8s.api.core.v1.ConfigMap": {
                    "description": "ConfigMap holds configuration data.",
                    "type": "object",
                    "required": ["data"],
                    "properties": {
                        "metadata": {"$ref": "#/definitions/ObjectMeta"},
                        "data": {"type": "object", "minItems": 2}
                    },
                    "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]
                }
            }
        });
        let decoded = Document::decode(encode(&document).as_slice()).unwrap();
        assert_eq!(decoded.swagger, "2.0");
        let definitions = decoded.definitions.unwrap().entries;
        assert_eq!(definitions.len(), 1);
        assert_eq!(definitions[0].name, "io.k8s.api.core.v1.ConfigMap");
        let config_map = definitions[0].value.clone().unwrap();
        assert_eq!(
            config_map.description,
            "ConfigMap holds configuration data."
        );
        assert_eq!(config_map.kind.unwrap().value, ["object"]);
        assert_eq!(config_map.required, ["data"]);
        let properties = config_map.properties.unwrap().entries;
        let by_name = |n: &str| {
            properties
                .iter()
                .find(|p| p.name == n)
                .and_then(|p| p.value.clone())
                .unwrap()
        };
        assert_eq!(by_name("metadata").reference, "#/definitions/ObjectMeta");
        assert_eq!(by_name("data").min_items, 2);
        assert_eq!(
            config_map.extensions[0].name,
            "x-kubernetes-group-version-kind"
        );
        let yaml = &config_map.extensions[0].value.as_ref().unwrap().yaml;
        assert_eq!(
            serde_json::from_str::<Value>(yaml).unwrap(),
            json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
        );
    }
}
