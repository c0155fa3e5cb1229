//! Request bodies in the Kubernetes protobuf encoding, which kubectl's typed clients send
//! (`kubectl create configmap|secret|deployment|…`, `kubectl auth can-i`), rendered by
//! `wasmformer-protobuf` as the JSON the API server writes for them, so the store only ever
//! sees JSON.

use serde_json::Value;
use wasmformer_protobuf::ManagedFields;
pub use wasmformer_protobuf::{MEDIA_TYPE, is_protobuf};

/// Decodes a `k8s\0` + `runtime.Unknown` body into the object's JSON (with `apiVersion` and
/// `kind` from the envelope); the error is a sentence for a `Status` message.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let json =
        wasmformer_protobuf::to_json(body, ManagedFields::Keep).map_err(|e| e.to_string())?;
    serde_json::from_slice(&json)
        .map_err(|e| format!("the protobuf body's embedded JSON is not valid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_without_the_magic_is_refused() {
        assert_eq!(
            decode(b"{\"kind\":\"Pod\"}").unwrap_err(),
            "the protobuf body does not start with the Kubernetes magic number \"k8s\\x00\""
        );
    }
}
