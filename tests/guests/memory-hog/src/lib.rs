//! Allocates without bound on objects named `boom*`; logs `ok <name>` for any other object.

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
