//! A plugin whose state survives unloading and hot swap (`export!(Counter, state)`): it counts
//! the events it handled and logs one JSON line per event, `{"count": N, "event": "add",
//! "name": …, "resourceVersion": …, "restoredFrom": …}` (the first 12 hex digits of the version
//! its state came from, or null), and `{"init": N}` from `init`. Objects whose name starts with
//! `poison-trap` or `poison-error` poison the state: its next restore panics or fails. An object
//! named `grow-N` adds N bytes to the state.

use serde::{Deserialize, Deserializer, Serialize, de::Error as _};
use wasmformer_guest::serde_json::json;
use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default, Serialize, Deserialize)]
struct Counter {
    count: u64,
    #[serde(default, deserialize_with = "poisoned")]
    poison: Option<String>,
    #[serde(default)]
    ballast: String,
    /// From the config: not kept.
    #[serde(skip)]
    tag: String,
}

/// Reads `poison`, failing as it says: `trap` panics, `error` is a deserialization error.
fn poisoned<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<String>, D::Error> {
    let poison = Option::<String>::deserialize(deserializer)?;
    match poison.as_deref() {
        Some("trap") => panic!("restore trapped on purpose"),
        Some("error") => Err(D::Error::custom("poisoned on purpose")),
        _ => Ok(poison),
    }
}

impl Counter {
    fn count(&mut self, event: &str, obj: &Object) {
        self.count += 1;
        let name = obj.name();
        if let Some(kind) = name.strip_prefix("poison-") {
            self.poison = Some(kind.split('-').next().unwrap_or(kind).to_owned());
        }
        if let Some(bytes) = name.strip_prefix("grow-").and_then(|n| n.parse().ok()) {
            self.ballast.push_str(&"x".repeat(bytes));
        }
        let restored_from = wasmformer_guest::restored_from().map(|v| v[..12].to_owned());
        info!(
            "{}",
            json!({
                "count": self.count, "event": event, "name": name, "tag": self.tag,
                "resourceVersion": obj.resource_version(), "restoredFrom": restored_from,
            })
        );
    }
}

impl Plugin for Counter {
    fn init(&mut self, config: wasmformer_guest::serde_json::Value) -> Result<()> {
        self.tag = config["tag"].as_str().unwrap_or_default().to_owned();
        info!("{}", json!({ "init": self.count }));
        Ok(())
    }

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
