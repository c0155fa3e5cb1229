//! Benchmark guest: reads only the fields that cross without parsing (name, namespace, labels)
//! and counts what it saw; logs nothing. Built natively too, so the benchmark can compare.

use wasmformer_guest::{Object, Plugin, Result};

/// Counts label entries and identity bytes seen, so the work cannot be optimised away.
#[derive(Default)]
pub struct LabelCounter {
    /// Labels seen, over every event.
    pub labels: u64,
    /// Events whose object has an `app` label.
    pub with_app: u64,
    /// Bytes of name and namespace seen.
    pub identity_bytes: u64,
}

impl Plugin for LabelCounter {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        self.labels += obj.labels().len() as u64;
        self.with_app += u64::from(obj.label("app").is_some());
        self.identity_bytes += (obj.name().len() + obj.namespace().len()) as u64;
        Ok(())
    }
}

// Exported only in the wasm build: the native rlib is called through the `Plugin` trait.
#[cfg(target_family = "wasm")]
wasmformer_guest::export!(LabelCounter);
