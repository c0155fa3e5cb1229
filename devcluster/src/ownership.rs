//! Server-side apply's field ownership, approximated: `metadata.managedFields` with one entry per
//! field manager and operation (`Apply` or `Update`), in the API server's `FieldsV1` form. An
//! apply conflicts (409, naming the other manager and the fields, in the API server's words) when
//! it sets a field another manager owns to a different value, unless forced, which moves the
//! field to the applier; a field the applier applied before and no longer applies is removed
//! when no other manager owns it. Other writes (create, update, patch) give their manager the
//! fields they set or changed, taking them from the others.
//!
//! Paths follow the OpenAPI schema: objects by field, `map` lists by their keys, `set` lists by
//! value, other lists and `atomic` maps as one field.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use crate::openapi::resolve;

/// One step of a field path, as `FieldsV1` writes it (`f:name`, `k:{"name":"c"}`, `v:"x"`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Field(String),
    Key(String),
    Value(String),
}

type Path = Vec<Step>;
type FieldSet = BTreeSet<Path>;

/// Identity and server-owned metadata no manager owns.
const UNOWNED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Who writes, as the API server records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manager {
    /// `fieldManager`, or the client's user agent up to its first `/`.
    pub name: String,
    /// The written object's `apiVersion`.
    pub api_version: String,
    /// `status` for writes to the status subresource.
    pub subresource: Option<String>,
}

/// An apply that sets fields other managers own, to other values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflicts {
    /// `(manager, field path as `.spec.replicas`)`, in path order. The manager is quoted, with
    /// ` using <apiVersion>` when it wrote another version than the applier's
    /// (`"kubectl" using apps/v1beta1`), as the API server words it.
    pub fields: Vec<(String, String)>,
}

impl Conflicts {
    /// The API server's message: `Apply failed with 1 conflict: conflict with "kubectl":
    /// .data.team`.
    pub fn message(&self) -> String {
        let count = self.fields.len();
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (manager, path) in &self.fields {
            by_manager.entry(manager).or_default().push(path);
        }
        let parts: Vec<String> = by_manager
            .iter()
            .map(|(manager, paths)| {
                if let [path] = paths.as_slice() {
                    format!("conflict with {manager}: {path}")
                } else {
                    let list: String = paths.iter().map(|p| format!("\n- {p}")).collect();
                    format!("conflicts with {manager}:{list}")
                }
            })
            .collect();
        format!(
            "Apply failed with {count} conflict{}: {}",
            if count == 1 { "" } else { "s" },
            parts.join("\n")
        )
    }

    /// `details.causes` of the Status: one `FieldManagerConflict` per field.
    pub fn causes(&self) -> Vec<Value> {
        self.fields
            .iter()
            .map(|(manager, path)| {
                json!({"reason": "FieldManagerConflict",
                    "message": format!("conflict with {manager}"),
                    "field": path})
            })
            .collect()
    }
}

/// The schema an object is walked by: its type's OpenAPI schema and the document's schemas.
#[derive(Clone, Copy)]
pub struct Schema<'a> {
    /// The object's schema (`Value::Null`: no schema, every list atomic).
    pub root: &'a Value,
    /// What `$ref`s point into.
    pub schemas: &'a Value,
}

impl Schema<'_> {
    fn fields(&self, object: &Value, status: bool) -> FieldSet {
        let mut set = FieldSet::new();
        let Some(map) = object.as_object() else {
            return set;
        };
        let root = resolve(self.root, self.schemas);
        for (key, value) in map {
            if key == "apiVersion" || key == "kind" || (key == "status") != status {
                continue;
            }
            let mut path = vec![Step::Field(key.clone())];
            let child = &root["properties"][key];
            if key == "metadata" {
                if let Some(meta) = value.as_object() {
                    for (field, value) in meta {
                        if UNOWNED_METADATA.contains(&field.as_str()) {
                            continue;
                        }
                        path.push(Step::Field(field.clone()));
                        walk(&Value::Null, self.schemas, value, &mut path, &mut set);
                        path.pop();
                    }
                }
                continue;
            }
            walk(child, self.schemas, value, &mut path, &mut set);
        }
        set
    }
}

fn walk(schema: &Value, schemas: &Value, value: &Value, path: &mut Path, set: &mut FieldSet) {
    let schema = resolve(schema, schemas);
    match value {
        Value::Null => {}
        Value::Object(map)
            if !map.is_empty() && schema["x-kubernetes-map-type"].as_str() != Some("atomic") =>
        {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            for (key, child) in map {
                let child_schema = properties
                    .and_then(|p| p.get(key))
                    .or_else(|| additional.is_object().then_some(additional))
                    .unwrap_or(&Value::Null);
                path.push(Step::Field(key.clone()));
                walk(child_schema, schemas, child, path, set);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match list_type(schema) {
            ListType::Map(keys) => {
                for item in items {
                    path.push(Step::Key(item_key(&keys, item)));
                    set.insert(path.clone());
                    walk(&schema["items"], schemas, item, path, set);
                    path.pop();
                }
            }
            ListType::Set => {
                for item in items {
                    path.push(Step::Value(item.to_string()));
                    set.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Atomic => {
                set.insert(path.clone());
            }
        },
        _ => {
            set.insert(path.clone());
        }
    }
}

enum ListType {
    Map(Vec<String>),
    Set,
    Atomic,
}

fn list_type(schema: &Value) -> ListType {
    let keys: Vec<String> = schema["x-kubernetes-list-map-keys"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(String::from)
        .collect();
    match schema["x-kubernetes-list-type"].as_str() {
        Some("map") if !keys.is_empty() => ListType::Map(keys),
        Some("set") => ListType::Set,
        // Strategic-merge lists without list-type are keyed by their patch merge key.
        None if schema["x-kubernetes-patch-strategy"]
            .as_str()
            .is_some_and(|s| s.contains("merge"))
            && schema["x-kubernetes-patch-merge-key"].is_string() =>
        {
            ListType::Map(vec![
                schema["x-kubernetes-patch-merge-key"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            ])
        }
        _ => ListType::Atomic,
    }
}

/// `{"name":"c"}`: the item's key fields, sorted, as compact JSON.
fn item_key(keys: &[String], item: &Value) -> String {
    let map: BTreeMap<&str, &Value> = keys
        .iter()
        .filter_map(|k| item.get(k).map(|v| (k.as_str(), v)))
        .collect();
    serde_json::to_string(&map).unwrap_or_default()
}

fn matches_step(step: &Step, item: &Value) -> bool {
    match step {
        Step::Key(key) => serde_json::from_str::<Map<String, Value>>(key)
            .is_ok_and(|k| k.iter().all(|(name, v)| item.get(name) == Some(v))),
        Step::Value(v) => serde_json::from_str::<Value>(v).is_ok_and(|v| v == *item),
        Step::Field(_) => false,
    }
}

fn value_at<'a>(object: &'a Value, path: &[Step]) -> Option<&'a Value> {
    let mut current = object;
    for step in path {
        current = match step {
            Step::Field(name) => current.get(name)?,
            _ => current.as_array()?.iter().find(|i| matches_step(step, i))?,
        };
    }
    Some(current)
}

fn remove_at(object: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut current = object;
    for step in parent {
        let next = match step {
            Step::Field(name) => current.get_mut(name),
            _ => current
                .as_array_mut()
                .and_then(|items| items.iter_mut().find(|i| matches_step(step, i))),
        };
        match next {
            Some(next) => current = next,
            None => return,
        }
    }
    match last {
        Step::Field(name) => {
            if let Some(map) = current.as_object_mut() {
                map.remove(name);
            }
        }
        step => {
            if let Some(items) = current.as_array_mut() {
                items.retain(|i| !matches_step(step, i));
            }
        }
    }
}

/// `.spec.containers[name="c"].image`, as the API server names a field in a conflict.
fn path_text(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Field(name) => {
                out.push('.');
                out.push_str(name);
            }
            Step::Key(key) => {
                let fields: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
                let inner: Vec<String> = fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
                out.push_str(&format!("[{}]", inner.join(",")));
            }
            Step::Value(v) => out.push_str(&format!("[={v}]")),
        }
    }
    out
}

/// One `managedFields` entry.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn parse(value: &Value) -> Option<Self> {
        let mut fields = FieldSet::new();
        parse_fields(&value["fieldsV1"], &mut Vec::new(), &mut fields);
        Some(Self {
            manager: value["manager"].as_str()?.to_owned(),
            operation: value["operation"].as_str().unwrap_or("Update").to_owned(),
            api_version: value["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: value["time"].as_str().unwrap_or_default().to_owned(),
            subresource: value["subresource"].as_str().map(String::from),
            fields,
        })
    }

    fn render(&self) -> Value {
        let mut entry = json!({
            "manager": self.manager, "operation": self.operation, "apiVersion": self.api_version,
            "time": self.time, "fieldsType": "FieldsV1", "fieldsV1": render_fields(&self.fields),
        });
        if let Some(subresource) = &self.subresource {
            entry["subresource"] = json!(subresource);
        }
        entry
    }

    fn is(&self, manager: &Manager, operation: &str) -> bool {
        self.manager == manager.name
            && self.operation == operation
            && self.subresource == manager.subresource
    }
}

fn parse_fields(node: &Value, path: &mut Path, set: &mut FieldSet) {
    let Some(map) = node.as_object() else {
        return;
    };
    if map.is_empty() && !path.is_empty() {
        set.insert(path.clone());
    }
    for (key, child) in map {
        let step = if key == "." {
            set.insert(path.clone());
            continue;
        } else if let Some(name) = key.strip_prefix("f:") {
            Step::Field(name.to_owned())
        } else if let Some(k) = key.strip_prefix("k:") {
            Step::Key(k.to_owned())
        } else if let Some(v) = key.strip_prefix("v:") {
            Step::Value(v.to_owned())
        } else {
            continue;
        };
        path.push(step);
        parse_fields(child, path, set);
        path.pop();
    }
}

fn render_fields(set: &FieldSet) -> Value {
    let mut root = json!({});
    for path in set {
        let mut node = &mut root;
        for step in path {
            let key = match step {
                Step::Field(name) => format!("f:{name}"),
                Step::Key(k) => format!("k:{k}"),
                Step::Value(v) => format!("v:{v}"),
            };
            node = node
                .as_object_mut()
                .expect("nodes are objects")
                .entry(key)
                .or_insert_with(|| json!({}));
        }
        // A member that also has members below it is marked with ".".
        if set
            .range(path.clone()..)
            .nth(1)
            .is_some_and(|next| next.starts_with(path))
        {
            node.as_object_mut()
                .expect("nodes are objects")
                .insert(".".into(), json!({}));
        }
    }
    root
}

fn entries_of(object: &Value) -> Vec<Entry> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Entry::parse)
        .collect()
}

fn store_entries(object: &mut Value, entries: Vec<Entry>) {
    let rendered: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(Entry::render)
        .collect();
    if let Some(meta) = object["metadata"].as_object_mut() {
        if rendered.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(rendered));
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Records a create, update or patch by `manager`: the fields of `new` that `old` (absent on
/// create) lacked or had with another value become the manager's (`Update`), taken from the
/// others; fields `new` dropped leave every manager. `new`'s `managedFields` are replaced.
pub fn record_update(schema: Schema<'_>, manager: &Manager, old: Option<&Value>, new: &mut Value) {
    let status = manager.subresource.as_deref() == Some("status");
    let mut entries = old.map(entries_of).unwrap_or_default();
    let after = schema.fields(new, status);
    let before = old.map(|o| schema.fields(o, status)).unwrap_or_default();
    let changed: FieldSet = after
        .iter()
        .filter(|p| old.and_then(|o| value_at(o, p)) != value_at(new, p))
        .cloned()
        .collect();
    let dropped: FieldSet = before.difference(&after).cloned().collect();
    if !changed.is_empty() || !dropped.is_empty() {
        for entry in &mut entries {
            entry
                .fields
                .retain(|p| !changed.contains(p) && !dropped.contains(p));
        }
        if !changed.is_empty() {
            match entries.iter_mut().find(|e| e.is(manager, "Update")) {
                Some(entry) => {
                    entry.fields.extend(changed);
                    entry.time = now();
                    entry.api_version = manager.api_version.clone();
                }
                None => entries.push(Entry {
                    manager: manager.name.clone(),
                    operation: "Update".into(),
                    api_version: manager.api_version.clone(),
                    time: now(),
                    subresource: manager.subresource.clone(),
                    fields: changed,
                }),
            }
        }
    }
    store_entries(new, entries);
}

/// Server-side apply of `applied` by `manager` onto `live` (`None`: the apply creates):
/// conflicts unless `force`; `merge` merges the applied configuration into the object; then the
/// fields the manager applied before and no longer applies are removed where no other manager
/// owns them, and the manager's `Apply` entry becomes exactly what it applied.
pub fn apply(
    schema: Schema<'_>,
    manager: &Manager,
    live: Option<&Value>,
    applied: &Value,
    force: bool,
    merge: impl FnOnce(&mut Value, &Value),
) -> Result<Value, Conflicts> {
    let status = manager.subresource.as_deref() == Some("status");
    let mut entries = live.map(entries_of).unwrap_or_default();
    let set = schema.fields(applied, status);
    let mut conflicts = Vec::new();
    for entry in entries.iter().filter(|e| !e.is(manager, "Apply")) {
        for path in entry.fields.intersection(&set) {
            if live.and_then(|l| value_at(l, path)) != value_at(applied, path) {
                let who = if entry.api_version == manager.api_version {
                    format!("\"{}\"", entry.manager)
                } else {
                    format!("\"{}\" using {}", entry.manager, entry.api_version)
                };
                conflicts.push((who, path_text(path)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        conflicts.sort_by(|a, b| a.1.cmp(&b.1));
        return Err(Conflicts { fields: conflicts });
    }
    let mut object = live.cloned().unwrap_or_else(|| json!({}));
    merge(&mut object, applied);
    let previous = entries
        .iter()
        .find(|e| e.is(manager, "Apply"))
        .map(|e| e.fields.clone())
        .unwrap_or_default();
    for entry in entries.iter_mut().filter(|e| !e.is(manager, "Apply")) {
        if force {
            entry.fields.retain(|p| {
                !set.contains(p) || live.and_then(|l| value_at(l, p)) == value_at(applied, p)
            });
        }
    }
    // Dropped fields go when nobody else owns them; deepest first, so a map item goes after
    // its fields.
    let others: FieldSet = entries
        .iter()
        .filter(|e| !e.is(manager, "Apply"))
        .flat_map(|e| e.fields.iter().cloned())
        .collect();
    let mut dropped: Vec<&Path> = previous
        .iter()
        .filter(|p| !set.contains(*p) && !others.contains(*p))
        .collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in dropped {
        remove_at(&mut object, path);
    }
    match entries.iter_mut().find(|e| e.is(manager, "Apply")) {
        Some(entry) => {
            if entry.fields != set {
                entry.time = now();
            }
            entry.fields = set;
            entry.api_version = manager.api_version.clone();
        }
        None => entries.push(Entry {
            manager: manager.name.clone(),
            operation: "Apply".into(),
            api_version: manager.api_version.clone(),
            time: now(),
            subresource: manager.subresource.clone(),
            fields: set,
        }),
    }
    store_entries(&mut object, entries);
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manager(name: &str) -> Manager {
        Manager {
            name: name.into(),
            api_version: "v1".into(),
            subresource: None,
        }
    }

    const NO_SCHEMA: Schema<'static> = Schema {
        root: &Value::Null,
        schemas: &Value::Null,
    };

    fn merge(target: &mut Value, applied: &Value) {
        crate::openapi::apply_merge(&Value::Null, &Value::Null, target, applied);
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": data})
    }

    #[test]
    fn a_second_manager_conflicts_on_a_changed_field_unless_forced() {
        let first = apply(
            NO_SCHEMA,
            &manager("kubectl"),
            None,
            &cm(json!({"team": "a"})),
            false,
            merge,
        )
        .unwrap();
        assert_eq!(
            first["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:data": {"f:team": {}}})
        );
        let conflict = apply(
            NO_SCHEMA,
            &manager("wasmformer/a"),
            Some(&first),
            &cm(json!({"team": "b"})),
            false,
            merge,
        )
        .unwrap_err();
        assert_eq!(
            conflict.message(),
            "Apply failed with 1 conflict: conflict with \"kubectl\": .data.team"
        );
        // The same value is shared, not a conflict.
        let shared = apply(
            NO_SCHEMA,
            &manager("wasmformer/a"),
            Some(&first),
            &cm(json!({"team": "a"})),
            false,
            merge,
        )
        .unwrap();
        assert_eq!(
            shared["metadata"]["managedFields"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        let forced = apply(
            NO_SCHEMA,
            &manager("wasmformer/a"),
            Some(&first),
            &cm(json!({"team": "b"})),
            true,
            merge,
        )
        .unwrap();
        assert_eq!(forced["data"]["team"], "b");
        let managers: Vec<&str> = forced["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, ["wasmformer/a"], "force takes the field over");
    }

    #[test]
    fn a_field_the_applier_stops_applying_is_removed_unless_another_manager_owns_it() {
        let m = manager("a");
        let one = apply(
            NO_SCHEMA,
            &m,
            None,
            &cm(json!({"x": "1", "y": "2"})),
            false,
            merge,
        )
        .unwrap();
        let mut updated = one.clone();
        updated["data"]["y"] = json!("3");
        record_update(
            NO_SCHEMA,
            &manager("kubectl-edit"),
            Some(&one),
            &mut updated,
        );
        let two = apply(NO_SCHEMA, &m, Some(&updated), &cm(json!({})), false, merge).unwrap();
        assert_eq!(
            two["data"],
            json!({"y": "3"}),
            "x dropped; y is kubectl-edit's"
        );
    }

    #[test]
    fn fields_v1_round_trips_with_map_items() {
        let mut set = FieldSet::new();
        let key = Step::Key("{\"name\":\"c\"}".into());
        set.insert(vec![
            Step::Field("spec".into()),
            Step::Field("containers".into()),
            key.clone(),
        ]);
        set.insert(vec![
            Step::Field("spec".into()),
            Step::Field("containers".into()),
            key,
            Step::Field("image".into()),
        ]);
        let rendered = render_fields(&set);
        assert_eq!(
            rendered,
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}}}})
        );
        let mut parsed = FieldSet::new();
        parse_fields(&rendered, &mut Vec::new(), &mut parsed);
        assert_eq!(parsed, set);
        assert_eq!(
            path_text(set.iter().last().unwrap()),
            ".spec.containers[name=\"c\"].image"
        );
    }
}
