//! Recurses on objects named `boom*` with a 4 KiB buffer in every frame, so the stack Rust keeps
//! in linear memory (1 MiB) runs out long before wasmtime's wasm call stack does: the stack
//! pointer leaves linear memory and the next store traps as an out-of-bounds memory access
//! (not wasmtime's stack-overflow trap). Logs `ok <name>` for any other object.

use wasmformer_guest::{Object, Plugin, Result, info};

/// One frame: a buffer whose address escapes (so it lives in linear memory), then a deeper call.
#[allow(unconditional_recursion)]
#[inline(never)]
fn fill(depth: u64) -> u64 {
    let mut frame = [0u8; 4096];
    frame[(depth % 4096) as usize] = depth as u8;
    std::hint::black_box(&mut frame);
    std::hint::black_box(fill(std::hint::black_box(depth + 1))) + u64::from(frame[0])
}

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            return Err(format!("unreachable: {}", fill(0)).into());
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
