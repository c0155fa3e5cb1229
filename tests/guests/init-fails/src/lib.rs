//! Fails `init` unless its config says `{"ok": true}`.

use wasmformer_guest::serde_json::Value;
use wasmformer_guest::{Plugin, Result};

#[derive(Default)]
struct Guest;

impl Plugin for Guest {
    fn init(&mut self, config: Value) -> Result<()> {
        if config.get("ok") == Some(&Value::Bool(true)) {
            Ok(())
        } else {
            Err("init refused: config lacks \"ok\": true".into())
        }
    }
}

wasmformer_guest::export!(Guest);
