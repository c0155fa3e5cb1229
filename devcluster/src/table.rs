//! Server-side printing: the `meta.k8s.io/v1` `Table` that `kubectl get` asks for with
//! `Accept: application/json;as=Table;...`. Columns are NAME and AGE plus a few per kind
//! (pod phase and restarts, deployment readiness, namespace phase, configmap data count).

use std::time::Duration;

use serde_json::{Value, json};

use crate::resources::ResourceType;

/// What each row carries besides its cells (`includeObject=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    pub(crate) fn parse(value: Option<&str>) -> Self {
        match value {
            Some("None") => Self::None,
            Some("Object") => Self::Object,
            _ => Self::Metadata,
        }
    }
}

struct Column {
    name: &'static str,
    kind: &'static str,
    description: &'static str,
}

const NAME: Column = Column {
    name: "Name",
    kind: "string",
    description: "Name must be unique within a namespace.",
};
const AGE: Column = Column {
    name: "Age",
    kind: "string",
    description: "CreationTimestamp is a timestamp representing the server time when this object was created.",
};

fn text(object: &Value, pointer: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn number(object: &Value, pointer: &str) -> i64 {
    object.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn or_none(value: String) -> Value {
    json!(if value.is_empty() {
        "<none>".to_string()
    } else {
        value
    })
}

fn joined(object: &Value, pointer: &str, field: &str) -> String {
    object
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c[field].as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn selector(object: &Value) -> String {
    object
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect::<Vec<_>>()
        .join(",")
}

/// The `-o wide` columns (priority 1), after AGE.
fn wide_columns(ty: &ResourceType, object: &Value) -> Vec<(Column, Value)> {
    let column = |name, kind| Column {
        name,
        kind,
        description: "",
    };
    let workload = |containers: &str| {
        vec![
            (
                column("Containers", "string"),
                or_none(joined(object, containers, "name")),
            ),
            (
                column("Images", "string"),
                or_none(joined(object, containers, "image")),
            ),
            (column("Selector", "string"), or_none(selector(object))),
        ]
    };
    match (ty.id.group.as_str(), ty.id.resource.as_str()) {
        ("", "pods") => vec![
            (
                column("IP", "string"),
                or_none(text(object, "/status/podIP")),
            ),
            (
                column("Node", "string"),
                or_none(text(object, "/spec/nodeName")),
            ),
            (column("Nominated Node", "string"), json!("<none>")),
            (column("Readiness Gates", "string"), json!("<none>")),
        ],
        ("apps", "deployments" | "replicasets") | ("batch", "jobs") => {
            workload("/spec/template/spec/containers")
        }
        ("", "nodes") => vec![(
            column("Internal-IP", "string"),
            or_none(
                object
                    .pointer("/status/addresses")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .find(|a| a["type"] == "InternalIP")
                    .and_then(|a| a["address"].as_str())
                    .unwrap_or("")
                    .to_string(),
            ),
        )],
        _ => Vec::new(),
    }
}

/// The kind-specific middle columns and their cells.
fn extra_columns(ty: &ResourceType, object: &Value) -> Vec<(Column, Value)> {
    let column = |name, kind| Column {
        name,
        kind,
        description: "",
    };
    match (ty.id.group.as_str(), ty.id.resource.as_str()) {
        ("", "pods") => {
            let statuses = object
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            let total = object
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let restarts: i64 = statuses.map_or(0, |s| {
                s.iter()
                    .map(|c| c["restartCount"].as_i64().unwrap_or(0))
                    .sum()
            });
            let reason = statuses.into_iter().flatten().find_map(|c| {
                c.pointer("/state/waiting/reason")
                    .or_else(|| c.pointer("/state/terminated/reason"))
                    .and_then(Value::as_str)
            });
            let status = if object.pointer("/metadata/deletionTimestamp").is_some() {
                "Terminating".to_string()
            } else {
                reason.map_or_else(|| text(object, "/status/phase"), String::from)
            };
            vec![
                (column("Ready", "string"), json!(format!("{ready}/{total}"))),
                (column("Status", "string"), json!(status)),
                (column("Restarts", "string"), json!(restarts.to_string())),
            ]
        }
        ("apps", "deployments") => vec![
            (
                column("Ready", "string"),
                json!(format!(
                    "{}/{}",
                    number(object, "/status/readyReplicas"),
                    number(object, "/spec/replicas")
                )),
            ),
            (
                column("Up-to-date", "integer"),
                json!(number(object, "/status/updatedReplicas")),
            ),
            (
                column("Available", "integer"),
                json!(number(object, "/status/availableReplicas")),
            ),
        ],
        ("apps", "replicasets") => vec![
            (
                column("Desired", "integer"),
                json!(number(object, "/spec/replicas")),
            ),
            (
                column("Current", "integer"),
                json!(number(object, "/status/replicas")),
            ),
            (
                column("Ready", "integer"),
                json!(number(object, "/status/readyReplicas")),
            ),
        ],
        ("batch", "jobs") => {
            let complete = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Complete" && c["status"] == "True");
            let completions = object
                .pointer("/spec/completions")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            vec![
                (
                    column("Status", "string"),
                    json!(if complete { "Complete" } else { "Running" }),
                ),
                (
                    column("Completions", "string"),
                    json!(format!(
                        "{}/{completions}",
                        number(object, "/status/succeeded")
                    )),
                ),
            ]
        }
        ("", "nodes") => {
            let ready = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            vec![
                (
                    column("Status", "string"),
                    json!(if ready { "Ready" } else { "NotReady" }),
                ),
                (column("Roles", "string"), json!("<none>")),
            ]
        }
        ("", "namespaces") => vec![(
            column("Status", "string"),
            json!(text(object, "/status/phase")),
        )],
        ("", "configmaps") => {
            let count = ["data", "binaryData"]
                .iter()
                .map(|f| {
                    object
                        .get(*f)
                        .and_then(Value::as_object)
                        .map_or(0, |m| m.len())
                })
                .sum::<usize>();
            vec![(column("Data", "integer"), json!(count))]
        }
        _ => Vec::new(),
    }
}

/// `duration.HumanDuration` from apimachinery: `45s`, `3m20s`, `5h2m`, `3d4h`, `400d`.
pub(crate) fn human_duration(d: Duration) -> String {
    let seconds = d.as_secs();
    let (minutes, hours, days) = (seconds / 60, seconds / 3600, seconds / 86400);
    match () {
        _ if seconds < 120 => format!("{seconds}s"),
        _ if minutes < 10 => match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        },
        _ if minutes < 180 => format!("{minutes}m"),
        _ if hours < 8 => match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        },
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 192 => match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        },
        _ if days < 365 * 2 => format!("{days}d"),
        _ if days < 365 * 8 => match days % 365 {
            0 => format!("{}y", days / 365),
            dd => format!("{}y{dd}d", days / 365),
        },
        _ => format!("{}y", days / 365),
    }
}

fn age(object: &Value) -> String {
    let created = text(object, "/metadata/creationTimestamp");
    match created.parse::<jiff::Timestamp>() {
        Ok(created) => {
            let elapsed = jiff::Timestamp::now().duration_since(created);
            human_duration(Duration::try_from(elapsed).unwrap_or_default())
        }
        Err(_) => "<unknown>".to_string(),
    }
}

/// Every column of a row with its priority (1: only with `-o wide`), in kubectl's order.
fn columns(ty: &ResourceType, object: &Value) -> Vec<(Column, u8, Value)> {
    let column = |name, kind| Column {
        name,
        kind,
        description: "",
    };
    if ty.id.group.is_empty() && ty.id.resource == "events" {
        // As the API server's printer: the last timestamp, else the series' last observation,
        // else the event time (what events.k8s.io recorders set).
        let last = ["/lastTimestamp", "/series/lastObservedTime", "/eventTime"]
            .iter()
            .map(|p| text(object, p))
            .find(|t| !t.is_empty())
            .unwrap_or_default();
        let last_seen = last
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| {
                let elapsed = jiff::Timestamp::now().duration_since(t);
                human_duration(Duration::try_from(elapsed).unwrap_or_default())
            })
            .unwrap_or_else(|| "<unknown>".into());
        let involved = format!(
            "{}/{}",
            text(object, "/involvedObject/kind").to_ascii_lowercase(),
            text(object, "/involvedObject/name")
        );
        return vec![
            (column("Last Seen", "string"), 0, json!(last_seen)),
            (column("Type", "string"), 0, json!(text(object, "/type"))),
            (
                column("Reason", "string"),
                0,
                json!(text(object, "/reason")),
            ),
            (column("Object", "string"), 0, json!(involved)),
            (
                column("Message", "string"),
                0,
                json!(text(object, "/message")),
            ),
            (NAME, 1, json!(text(object, "/metadata/name"))),
        ];
    }
    let mut all = vec![(NAME, 0, json!(text(object, "/metadata/name")))];
    all.extend(
        extra_columns(ty, object)
            .into_iter()
            .map(|(c, v)| (c, 0, v)),
    );
    all.push((AGE, 0, json!(age(object))));
    all.extend(wide_columns(ty, object).into_iter().map(|(c, v)| (c, 1, v)));
    all
}

fn row(ty: &ResourceType, object: &Value, include: IncludeObject) -> Value {
    let cells: Vec<Value> = columns(ty, object).into_iter().map(|(_, _, v)| v).collect();
    let mut row = json!({"cells": cells});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row["object"] = json!({
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
            });
        }
        IncludeObject::Object => row["object"] = object.clone(),
    }
    row
}

/// A Table of `objects`; `metadata` is the list metadata (resourceVersion, continue).
pub(crate) fn render(
    ty: &ResourceType,
    objects: &[&Value],
    include: IncludeObject,
    metadata: Value,
) -> Value {
    let sample = objects
        .first()
        .copied()
        .cloned()
        .unwrap_or_else(|| json!({}));
    let definitions: Vec<Value> = columns(ty, &sample)
        .iter()
        .map(|(c, priority, _)| {
            let format = if c.name == "Name" { "name" } else { "" };
            json!({"name": c.name, "type": c.kind, "format": format, "description": c.description, "priority": priority})
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": objects.iter().map(|o| row(ty, o, include)).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    #[test]
    fn human_durations_match_kubectl() {
        let cases = [
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (200, "3m20s"),
            (3600, "60m"),
            (3 * 3600 + 120, "3h2m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (400 * 86400, "400d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
        ];
        for (secs, expected) in cases {
            assert_eq!(
                human_duration(Duration::from_secs(secs)),
                expected,
                "{secs}s"
            );
        }
    }

    #[test]
    fn pod_table_has_kubectl_columns_and_metadata_rows() {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        let pod = json!({
            "metadata": {"name": "web-1", "creationTimestamp": "2020-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {"phase": "Running", "containerStatuses": [{"ready": true, "restartCount": 2}, {"ready": false, "restartCount": 1}]}
        });
        let table = render(
            pods,
            &[&pod],
            IncludeObject::Metadata,
            json!({"resourceVersion": "9"}),
        );
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            vec![
                "Name",
                "Ready",
                "Status",
                "Restarts",
                "Age",
                "IP",
                "Node",
                "Nominated Node",
                "Readiness Gates"
            ]
        );
        assert_eq!(table["columnDefinitions"][5]["priority"], 1);
        let cells = table["rows"][0]["cells"].as_array().unwrap();
        assert_eq!(
            cells[..4],
            [json!("web-1"), json!("1/2"), json!("Running"), json!("3")]
        );
        assert!(
            cells[4].as_str().unwrap().contains('y'),
            "created years ago: {}",
            cells[4]
        );
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["metadata"]["resourceVersion"], "9");
    }
}
