//! Logs far more than the host allows per event on objects named `boom*`; logs `ok <name>` for any other object.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            for i in 0..20_000 {
                info!("flood line {i} of 20000 for {}", obj.name());
            }
            println!("and stdout too");
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
