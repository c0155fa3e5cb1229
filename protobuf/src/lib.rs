//! Kubernetes API objects in the protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! written as the JSON text the API server writes for them.
//!
//! The API server spends less than half the CPU on a protobuf LIST page as on the same page in
//! JSON (BENCHMARKS.md, "what the API server spends on a list"), and kubectl's typed clients send
//! protobuf request bodies. Everything downstream of the wire in wasmformer — the cache, the
//! plugins, the dev cluster's store — keeps JSON, so a protobuf body is turned into JSON text in
//! one pass over its bytes ([`to_json`]), with no object tree in between.
//!
//! A body is the 4-byte `k8s\0` magic and a `runtime.Unknown` whose `raw` bytes are the object.
//! The fields of every API type come from the protobuf descriptors of the Kubernetes version the
//! harness builds (`proto/kubernetes.fds.gz`, compiled by `proto/generate.sh`); how Go writes each
//! field as JSON (the JSON name, embedded inline, omitted when empty or zero, `null` when unset,
//! the Go struct's field order) comes from the Go types' struct tags, read by
//! `proto/json_fields.go` into `proto/json-fields.json.gz`. The apimachinery types with a JSON
//! form of their own (times, quantities, int-or-string, raw JSON) take that form.
//!
//! What protobuf cannot carry is lost as it is in client-go: an empty slice or map without
//! `omitempty` comes out `null`, as a nil one does.

mod schema;
mod transcode;

pub use transcode::{continue_token, to_json};

/// Whether [`to_json`] writes an object's `metadata.managedFields` (often half its JSON): a
/// reader that drops them anyway (the informer's cache, by default) saves writing and parsing
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManagedFields {
    /// Written, as the API server writes them.
    Keep,
    /// Left out.
    Drop,
}

/// The protobuf media type of the Kubernetes API.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Whether a `Content-Type` names the protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().map(str::trim) == Some(MEDIA_TYPE)
}

/// Whether objects of this `apiVersion` and `kind` are turned into exactly the JSON the API server
/// writes: the Kubernetes API's own types, but not those that hold a type with a JSON form not
/// handled here (a CustomResourceDefinition's schema), nor custom resources, which the API server
/// serves only as JSON. [`to_json`] takes the others too, as well as it can.
pub fn knows(api_version: &str, kind: &str) -> bool {
    let schema = &schema::SCHEMA;
    schema
        .message_for(api_version, kind)
        .is_some_and(|id| schema.messages[id as usize].exact)
}

/// A protobuf body could not be turned into JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The body does not start with the `k8s\0` magic.
    #[error("the protobuf body does not start with the Kubernetes magic number \"k8s\\x00\"")]
    NoMagic,
    /// The envelope says the object is compressed, which the API server never does.
    #[error("the protobuf body's content encoding {0:?} is not supported")]
    ContentEncoding(String),
    /// The bytes are not valid protobuf for the message they should hold.
    #[error("decoding the protobuf {message}: {reason}")]
    Malformed {
        /// The message (or field) being read.
        message: String,
        /// What was wrong.
        reason: &'static str,
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
