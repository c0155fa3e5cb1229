//! Benchmark guest: decodes the whole object into a k8s-openapi `Pod` on every event and keeps a
//! count derived from it. Built natively too, so the benchmark can compare.

use wasmformer_guest::k8s_openapi::api::core::v1::Pod;
use wasmformer_guest::{Object, Plugin, Result};

/// Counts containers of the Pods it decoded, so the decode cannot be optimised away.
#[derive(Default)]
pub struct PodDecoder {
    /// Containers seen, over every event.
    pub containers: u64,
}

impl Plugin for PodDecoder {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        let pod: Pod = obj.decode()?;
        self.containers += pod.spec.map_or(0, |spec| spec.containers.len()) as u64;
        Ok(())
    }
}

// Exported only in the wasm build: the native rlib is called through the `Plugin` trait.
#[cfg(target_family = "wasm")]
wasmformer_guest::export!(PodDecoder);
