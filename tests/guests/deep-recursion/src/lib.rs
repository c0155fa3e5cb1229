//! Recurses until the stack overflows on objects named `boom*`; logs `ok <name>` for any other object.

/// Recursion that uses only the wasm call stack (no address-taken locals in linear memory), so
/// it ends in wasmtime's stack-overflow trap; `black_box` keeps it from becoming a loop.
#[allow(unconditional_recursion)]
fn depth(n: u64) -> u64 {
    std::hint::black_box(depth(std::hint::black_box(n + 1))) + 1
}
use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            return Err(format!("unreachable: {}", depth(std::hint::black_box(0))).into());
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
