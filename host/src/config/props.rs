//! Property test: the configuration parser answers every input with a config or problems, never
//! a panic. Inputs are configurations built from the schema's own parts with odd values, some of
//! them cut or garbled, YAML-like documents of its words, and arbitrary text.

use proptest::prelude::*;
use serde_json::json;

use super::HostConfig;

const KEYS: &[&str] = &[
    "cluster",
    "host",
    "plugins",
    "kubeconfig",
    "context",
    "inCluster",
    "defaultResync",
    "stripManagedFields",
    "adminAddress",
    "adminTokenFile",
    "shutdownTimeout",
    "watchConfig",
    "maxObjectBytes",
    "listEncoding",
    "deliveryThreads",
    "maxInstances",
    "keepResidentBytes",
    "leaderElection",
    "enabled",
    "leaseName",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "identity",
    "name",
    "wasm",
    "handles",
    "apiVersion",
    "kind",
    "resource",
    "namespace",
    "labelSelector",
    "fieldSelector",
    "metadataOnly",
    "read",
    "indexes",
    "field",
    "resync",
    "limits",
    "deadline",
    "memoryBytes",
    "logBytesPerCall",
    "maxQueuedEvents",
    "onSwap",
    "config",
    "unknown",
];
const VALUES: &[&str] = &[
    "",
    "~",
    "-",
    "0",
    "-1",
    "1e400",
    "18446744073709551616",
    "0x10",
    "true",
    "no",
    "10m",
    "100ms",
    "1000000000000000h",
    "v1",
    "apps/v1",
    "Pod",
    "pods",
    "a=b",
    "a in (x",
    "metadata.labels['x']",
    "spec.containers[*].image",
    "[",
    "]",
    "{",
    "}",
    "\"unterminated",
    "'q'",
    "&anchor",
    "*anchor",
    "!!binary x",
    "? complex",
    "é",
    "\u{0}",
    "127.0.0.1:99999",
    "live",
    "snapshot",
    "{a: 1}",
    "[1, 2]",
    "|",
    ">",
];

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(list)
}

/// A YAML-like document: lines of `indent key: value` and `indent - key: value`.
pub(crate) fn document(
    keys: &'static [&'static str],
    values: &'static [&'static str],
) -> impl Strategy<Value = String> {
    let line = (0..4usize, any::<bool>(), pick(keys), pick(values)).prop_map(
        |(depth, item, key, value)| {
            format!(
                "{}{}{key}: {value}",
                "  ".repeat(depth),
                if item { "- " } else { "" }
            )
        },
    );
    prop_oneof![
        4 => prop::collection::vec(line, 0..16).prop_map(|lines| lines.join("\n")),
        1 => ".{0,64}",
    ]
}

/// `text` cut short, or with one character replaced.
pub(crate) fn garble(text: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    (
        text,
        any::<prop::sample::Index>(),
        any::<bool>(),
        any::<char>(),
    )
        .prop_map(|(text, at, cut, c)| {
            let chars: Vec<char> = text.chars().collect();
            if chars.is_empty() {
                return text;
            }
            let at = at.index(chars.len());
            if cut {
                chars[..at].iter().collect()
            } else {
                chars[..at]
                    .iter()
                    .chain([&c])
                    .chain(&chars[at + 1..])
                    .collect()
            }
        })
}

/// A configuration built from its own parts with odd values (as JSON, which is YAML).
fn structured() -> impl Strategy<Value = String> {
    let kind = prop::sample::select(vec![
        json!({"apiVersion": "v1", "kind": "Pod"}),
        json!({"apiVersion": "v1", "resource": "pods", "kind": "Pod"}),
        json!({"apiVersion": "", "kind": "Pod", "labelSelector": "a in (b", "fieldSelector": "x"}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "namespace": "ns", "labelSelector": "a>1", "fieldSelector": "spec.nodeName=n"}),
        json!("Pod"),
    ]);
    let index = prop::sample::select(vec![
        json!({"apiVersion": "v1", "kind": "Pod", "name": "by-node", "field": "spec.nodeName"}),
        json!({"apiVersion": "v1", "kind": "Node", "name": "x", "field": "metadata.labels['a"}),
        json!({"apiVersion": "v1", "kind": "Pod", "name": "by-node", "field": "[*]"}),
    ]);
    let plugin = (
        prop::sample::select(vec![json!("a"), json!("a"), json!("B-"), json!(""), json!(1)]),
        prop::sample::select(vec![json!("a.wasm"), json!(""), json!(["x"])]),
        prop::collection::vec(kind.clone(), 0..3),
        prop::collection::vec(kind, 0..2),
        prop::collection::vec(index, 0..2),
        prop::sample::select(vec![json!({}), json!({"deadline": "0s", "memoryBytes": 0}), json!({"deadline": "x"}), json!({"logBytesPerCall": -1})]),
        prop::sample::select(vec![json!("live"), json!("snapshot"), json!("later"), json!(null)]),
    )
        .prop_map(|(name, wasm, handles, read, indexes, limits, on_swap)| {
            json!({"name": name, "wasm": wasm, "handles": handles, "read": read, "indexes": indexes, "limits": limits, "onSwap": on_swap, "resync": "1m"})
        });
    let host = prop::sample::select(vec![
        json!({}),
        json!({"defaultResync": "10m", "maxObjectBytes": 0, "adminAddress": "127.0.0.1:9090"}),
        json!({"adminAddress": "nowhere", "shutdownTimeout": "-1s"}),
        json!({"unknown": true}),
    ]);
    (prop::collection::vec(plugin, 0..3), host)
        .prop_map(|(plugins, host)| json!({"host": host, "plugins": plugins}).to_string())
}

// Cases: `PROPTEST_CASES` (proptest's default: 256).
proptest! {
    #[test]
    fn the_config_parser_never_panics(text in prop_oneof![2 => structured(), 1 => garble(structured()), 1 => document(KEYS, VALUES)]) {
        let _ = HostConfig::parse(&text, std::path::PathBuf::from("/nonexistent"));
    }
}
