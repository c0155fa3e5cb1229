//! Property tests of the grammar: no input panics the parsers, every selector prints back to a
//! text that parses to the same selector, and a label map matches alike in each of its forms.
//! (The host and the dev cluster share this one parser, so a string cannot mean two things.)

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::{FieldSelector, LabelSelector};

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
    fn a_label_selector_prints_back_to_itself_and_matches_alike_in_every_form(
        text in label_selector(),
        objects in prop::collection::vec(labels(), 8),
    ) {
        if let Ok(selector) = text.parse::<LabelSelector>() {
            let printed = selector.to_string();
            let reparsed = printed.parse::<LabelSelector>();
            prop_assert_eq!(reparsed.as_ref(), Ok(&selector), "{:?} printed as {:?}", text, printed);
            for labels in objects {
                let map: Map<String, Value> = labels.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
                let by_map = selector.matches(&labels);
                prop_assert_eq!(by_map, selector.matches_json(Some(&map)), "{:?} on {:?}", text, labels);
                prop_assert_eq!(by_map, selector.matches_object(&json!({"metadata": {"labels": map}})), "{:?} on {:?}", text, labels);
            }
        }
    }

    #[test]
    fn a_field_selector_prints_back_to_itself(text in field_selector()) {
        if let Ok(selector) = text.parse::<FieldSelector>() {
            let printed = selector.to_string();
            let reparsed = printed.parse::<FieldSelector>();
            prop_assert_eq!(reparsed.as_ref(), Ok(&selector), "{:?} printed as {:?}", text, printed);
        }
    }

    #[test]
    fn no_text_panics_either_parser(text in "\\PC{0,24}") {
        let _ = text.parse::<LabelSelector>();
        let _ = text.parse::<FieldSelector>();
    }
}
