//! Loops forever on objects named `boom*`; logs `ok <name>` for any other object.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            #[allow(clippy::empty_loop)]
            loop {
                std::hint::black_box(());
            }
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
