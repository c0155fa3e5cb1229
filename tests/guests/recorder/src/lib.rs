//! Logs every call as one JSON line, so tests can compare what a plugin saw with what happened.
//! Config `{"tag": "v1"}` adds a tag (hot-swap tests tell versions apart by it).

use wasmformer_guest::serde_json::{Value, json};
use wasmformer_guest::{Object, Plugin, Result, info};

#[derive(Default)]
struct Recorder {
    tag: String,
}

impl Recorder {
    fn record(&self, event: &str, obj: &Object, extra: Value) {
        let mut line = json!({
            "tag": self.tag, "event": event, "namespace": obj.namespace(), "name": obj.name(),
            "uid": obj.uid(), "resourceVersion": obj.resource_version(), "kind": obj.kind().kind,
        });
        if let (Value::Object(line), Value::Object(extra)) = (&mut line, extra) {
            line.extend(extra);
        }
        info!("{line}");
    }
}

impl Plugin for Recorder {
    fn init(&mut self, config: Value) -> Result<()> {
        self.tag = config.get("tag").and_then(Value::as_str).unwrap_or_default().to_owned();
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, initial: bool) -> Result<()> {
        self.record("add", obj, json!({ "initial": initial }));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        self.record("update", new, json!({ "oldResourceVersion": old.resource_version() }));
        Ok(())
    }

    fn on_delete(&mut self, obj: &Object, final_state_unknown: bool) -> Result<()> {
        self.record("delete", obj, json!({ "finalStateUnknown": final_state_unknown }));
        Ok(())
    }
}

wasmformer_guest::export!(Recorder);
