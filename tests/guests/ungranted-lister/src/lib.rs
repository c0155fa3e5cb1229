//! Reads Secrets through the lister, which it is not granted on objects named `boom*`; logs `ok <name>` for any other object.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            use wasmformer_guest::k8s_openapi::api::core::v1::Secret;
            let err =
                wasmformer_guest::lister::get::<Secret>(obj.namespace(), "token").unwrap_err();
            return Err(err.into());
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
