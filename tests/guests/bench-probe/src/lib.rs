//! Benchmark guest of the density benchmark (`tests/benches/density.rs`): does nothing with any
//! object, like `bench-empty`, except the one its config names (`probe: NAME`), whose updates it
//! logs as `probe <resourceVersion>`. The bench copies it N times, each copy with its own nonce,
//! and reads from the host's log when each copy handled each update of the probe Pod.

use wasmformer_guest::serde_json::Value;
use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Probe {
    /// The name of the object whose updates are logged.
    name: String,
}

impl Plugin for Probe {
    fn init(&mut self, config: Value) -> Result<()> {
        self.name = config
            .get("probe")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<()> {
        if new.name() == self.name {
            info!("probe {}", new.resource_version());
        }
        Ok(())
    }
}

wasmformer_guest::export!(Probe);
