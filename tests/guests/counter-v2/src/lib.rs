//! The next version of the `counter` guest, with a new state format that reads the old one: the
//! count is now `total` (read from the old `count`), and it counts the events since the swap in a
//! new field (absent from the old format). Logs `{"total": N, "sinceV2": M, "event": …,
//! "name": …, "restoredFrom": …}`.

use serde::{Deserialize, Serialize};
use wasmformer_guest::serde_json::json;
use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    #[serde(alias = "count")]
    total: u64,
    #[serde(default)]
    since_v2: u64,
}

impl Counter {
    fn count(&mut self, event: &str, obj: &Object) {
        self.total += 1;
        self.since_v2 += 1;
        let restored_from = wasmformer_guest::restored_from().map(|v| v[..12].to_owned());
        info!(
            "{}",
            json!({
                "total": self.total, "sinceV2": self.since_v2, "event": event, "name": obj.name(),
                "restoredFrom": restored_from,
            })
        );
    }
}

impl Plugin for Counter {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        self.count("add", obj);
        Ok(())
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<()> {
        self.count("update", new);
        Ok(())
    }

    fn on_delete(&mut self, obj: &Object, _unknown: bool) -> Result<()> {
        self.count("delete", obj);
        Ok(())
    }
}

wasmformer_guest::export!(Counter, state);
