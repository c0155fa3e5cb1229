//! Property tests: a selector string means the same to the host as to the dev cluster, which
//! parses and applies selectors as the API server does (accept/reject, and what matches).

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value};
use wasmformer_devcluster::selectors;

use super::*;

const KEYS: &[&str] = &[
    "a",
    "app",
    "tier",
    "x.io/k",
    "A.b/c",
    "-bad",
    "k_",
    "Ab",
    "app.kubernetes.io/name",
    "a/",
    "/a",
    "a b",
];
const VALUES: &[&str] = &[
    "", "1", "web", "a-b", "-1", "v_1", "x.y", "_x", "b c", "Web", "12",
];
const OPS: &[&str] = &["=", "==", "!=", " in ", " notin ", ">", "<", "", " ", "=!"];
const SEPARATORS: &[&str] = &[",", ", ", " , ", ",,", " "];

fn pick(list: &'static [&'static str]) -> impl Strategy<Value = &'static str> {
    prop::sample::select(list)
}

/// One requirement-like piece: `!key`, `key`, `key op value`, `key in (v, …)`.
fn requirement() -> impl Strategy<Value = String> {
    let set = prop::collection::vec(pick(VALUES), 0..3)
        .prop_map(|values| format!("({})", values.join(",")));
    prop_oneof![
        pick(KEYS).prop_map(|k| format!("!{k}")),
        pick(KEYS).prop_map(str::to_owned),
        (pick(KEYS), pick(OPS), pick(VALUES)).prop_map(|(k, op, v)| format!("{k}{op}{v}")),
        (pick(KEYS), pick(&[" in ", " notin ", " in", "in "]), set)
            .prop_map(|(k, op, set)| format!("{k}{op}{set}")),
        "[ -~]{0,6}",
    ]
}

fn label_selector() -> impl Strategy<Value = String> {
    prop::collection::vec((requirement(), pick(SEPARATORS)), 0..4).prop_map(|parts| {
        let mut text = String::new();
        for (i, (requirement, separator)) in parts.iter().enumerate() {
            if i > 0 {
                text.push_str(separator);
            }
            text.push_str(requirement);
        }
        text
    })
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(
        pick(KEYS).prop_map(str::to_owned),
        pick(VALUES).prop_map(str::to_owned),
        0..5,
    )
}

fn field_selector() -> impl Strategy<Value = String> {
    let term = prop_oneof![
        (
            pick(&["metadata.name", "spec.nodeName", "", " a "]),
            pick(&["=", "==", "!=", "", "=="]),
            pick(&["x", "", "a\\,b", "a=b", "a\\=b", "\\", "a\\x"])
        )
            .prop_map(|(f, op, v)| format!("{f}{op}{v}")),
        "[ -~]{0,6}",
    ];
    prop::collection::vec(term, 0..4).prop_map(|terms| terms.join(","))
}

// Cases: `PROPTEST_CASES` (proptest's default: 256).
proptest! {
    #[test]
    fn label_selectors_mean_the_same_to_host_and_dev_cluster(text in label_selector(), objects in prop::collection::vec(labels(), 8)) {
        let host = text.parse::<LabelSelector>();
        let dev = text.parse::<selectors::LabelSelector>();
        prop_assert_eq!(host.is_ok(), dev.is_ok(), "{:?}: host {:?}, dev cluster {:?}", text, host, dev);
        if let (Ok(host), Ok(dev)) = (host, dev) {
            for labels in objects {
                let map: Map<String, Value> = labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                prop_assert_eq!(host.matches(&labels), dev.matches(Some(&map)), "{:?} on {:?}", text, labels);
            }
        }
    }

    #[test]
    fn field_selectors_are_accepted_alike_by_host_and_dev_cluster(text in field_selector()) {
        let host = text.parse::<FieldSelector>();
        let dev = text.parse::<selectors::FieldSelector>();
        prop_assert_eq!(host.is_ok(), dev.is_ok(), "{:?}: host {:?}, dev cluster {:?}", text, host, dev);
    }
}
