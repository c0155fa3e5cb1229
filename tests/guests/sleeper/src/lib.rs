//! Sleeps 20 s on objects named `boom*` (a blocking WASI call: a monotonic-clock pollable polled
//! until it is ready); logs `ok <name>` for any other object.

use std::time::Duration;

use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        if obj.name().starts_with("boom") {
            std::thread::sleep(Duration::from_secs(20));
            info!("woke up after 20 s");
        }
        info!("ok {}", obj.name());
        Ok(())
    }
}

wasmformer_guest::export!(Guest);
