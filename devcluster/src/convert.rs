//! Conversion between the form a type is served in and the form it is stored in, for the types
//! stored as another ([`ResourceType::stored_as`]): `events.k8s.io/v1` Events are core `v1`
//! Events, renamed field for field as the API server's conversion does (`note` ↔ `message`,
//! `regarding` ↔ `involvedObject`, `reportingController` ↔ `reportingComponent`, the
//! `deprecated*` fields ↔ `source`, `firstTimestamp`, `lastTimestamp`, `count`). The same
//! renaming converts merge and apply patch bodies, which name the same top-level fields.

use serde_json::{Map, Value, json};

use crate::resources::{EVENTS_GROUP, ResourceType};

/// `(events.k8s.io/v1 field, core v1 field)`.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

const EVENTS_V1: &str = "events.k8s.io/v1";

fn rename(object: Value, from_served: bool, api_version: &str) -> Value {
    let Value::Object(map) = object else {
        return object;
    };
    let mut out = Map::with_capacity(map.len());
    for (key, value) in map {
        let renamed = EVENT_FIELDS.iter().find_map(|&(served, stored)| {
            let (from, to) = if from_served {
                (served, stored)
            } else {
                (stored, served)
            };
            (key == from).then_some(to)
        });
        match (key.as_str(), renamed) {
            ("apiVersion", _) => out.insert(key, json!(api_version)),
            (_, Some(to)) => out.insert(to.to_owned(), value),
            _ => out.insert(key, value),
        };
    }
    Value::Object(out)
}

/// A request body of `ty` (an object, or a merge or apply patch) in its stored form.
pub(crate) fn to_storage(ty: &ResourceType, object: Value) -> Value {
    if ty.stored_as.is_some() && ty.id.group == EVENTS_GROUP {
        rename(object, true, "v1")
    } else {
        object
    }
}

/// A stored object as served at `api_version`, when that needs more than its `apiVersion` set.
pub(crate) fn served(object: &Value, api_version: &str) -> Option<Value> {
    (api_version == EVENTS_V1 && object["apiVersion"] == "v1" && object["kind"] == "Event")
        .then(|| rename(object.clone(), false, EVENTS_V1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    #[test]
    fn an_events_v1_event_round_trips_through_the_core_form() {
        let registry = Registry::builtin();
        let ty = registry
            .get(&ResourceId::new(EVENTS_GROUP, "events"))
            .unwrap();
        let v1 = json!({"apiVersion": EVENTS_V1, "kind": "Event", "metadata": {"name": "e"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "restarted", "type": "Warning",
            "reason": "Restarted", "action": "Alert", "reportingController": "wasmformer/a",
            "reportingInstance": "a-1", "series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}});
        let core = to_storage(ty, v1.clone());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "restarted");
        assert_eq!(core["reportingComponent"], "wasmformer/a");
        assert_eq!(core["series"]["count"], 2);
        assert!(core.get("note").is_none());
        assert_eq!(served(&core, EVENTS_V1).unwrap(), v1);
        assert!(served(&core, "v1").is_none());
    }
}
