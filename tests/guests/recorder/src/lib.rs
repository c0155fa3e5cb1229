//! Logs every call as one JSON line, so tests can compare what a plugin saw with what happened.
//! Config: `tag` (hot-swap tests tell versions apart by it), `lookup: true` (also reads the
//! event's object back through the lister and records the resourceVersion it saw), `sleepMs`
//! (sleeps in every handler: a slow plugin), `marks: true` (also logs `enter TAG` when a handler
//! starts and `leave TAG` when it returns, as plain lines: tests check that two versions never
//! run at once), `body: true` (also records the whole object as `object`: tests compare what
//! changed between two events).

use wasmformer_guest::serde_json::{Value, json};
use wasmformer_guest::{ListerError, Object, Plugin, Result, info, lister};

#[derive(Default)]
struct Recorder {
    tag: String,
    lookup: bool,
    sleep_ms: u64,
    marks: bool,
    body: bool,
}

impl Recorder {
    fn record(&self, event: &str, obj: &Object, extra: Value) {
        if self.marks {
            info!("enter {}", self.tag);
        }
        if self.sleep_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(self.sleep_ms));
        }
        let mut line = json!({
            "tag": self.tag, "event": event, "namespace": obj.namespace(), "name": obj.name(),
            "uid": obj.uid(), "resourceVersion": obj.resource_version(), "kind": obj.kind().kind,
            "group": obj.kind().group, "version": obj.kind().version,
            "labels": obj.labels().collect::<std::collections::BTreeMap<_, _>>(),
        });
        if self.lookup {
            let seen = match lister::get_object(obj.kind(), obj.namespace(), obj.name()) {
                Ok(cached) => json!(cached.resource_version()),
                Err(ListerError::NotFound) => json!("not-found"),
                Err(e) => json!(e.to_string()),
            };
            line["listerResourceVersion"] = seen;
        }
        if self.body {
            line["object"] =
                wasmformer_guest::serde_json::from_str(obj.json()).unwrap_or(Value::Null);
        }
        if let (Value::Object(line), Value::Object(extra)) = (&mut line, extra) {
            line.extend(extra);
        }
        info!("{line}");
        if self.marks {
            info!("leave {}", self.tag);
        }
    }
}

impl Plugin for Recorder {
    fn init(&mut self, config: Value) -> Result<()> {
        self.tag = config
            .get("tag")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        self.lookup = config
            .get("lookup")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.sleep_ms = config.get("sleepMs").and_then(Value::as_u64).unwrap_or(0);
        self.marks = config
            .get("marks")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        self.body = config.get("body").and_then(Value::as_bool).unwrap_or(false);
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, initial: bool) -> Result<()> {
        self.record("add", obj, json!({ "initial": initial }));
        Ok(())
    }

    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        self.record(
            "update",
            new,
            json!({ "oldResourceVersion": old.resource_version() }),
        );
        Ok(())
    }

    fn on_delete(&mut self, obj: &Object, final_state_unknown: bool) -> Result<()> {
        self.record(
            "delete",
            obj,
            json!({ "finalStateUnknown": final_state_unknown }),
        );
        Ok(())
    }
}

wasmformer_guest::export!(Recorder);
