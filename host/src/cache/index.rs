//! Custom indexes: a name and a [`FieldPath`] whose values an object is indexed under, like
//! client-go's `IndexFunc`s (pods by `spec.nodeName`, by a label, by owner UID).

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::Value;

/// The built-in index every store has: objects by namespace.
pub const NAMESPACE_INDEX: &str = "namespace";

/// A named index over a field of the objects of one kind.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSpec {
    /// The name plugins pass to `by-index`, e.g. `pods-by-node`.
    pub name: String,
    /// The field to index by, e.g. `spec.nodeName`.
    #[serde(rename = "field")]
    pub path: FieldPath,
}

/// A path into an object's JSON: dot-separated keys, `['key']` for keys with dots or slashes, and
/// `[*]` for every item of an array. Examples: `spec.nodeName`,
/// `metadata.labels['app.kubernetes.io/name']`, `metadata.ownerReferences[*].uid`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    EachItem,
}

/// Why a field path does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid field path {path:?}: {reason}")]
pub struct FieldPathError {
    path: String,
    reason: &'static str,
}

impl FromStr for FieldPath {
    type Err = FieldPathError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason| FieldPathError {
            path: text.to_owned(),
            reason,
        };
        let mut steps = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("[*]") {
                steps.push(Step::EachItem);
                rest = after;
            } else if let Some(after) = rest.strip_prefix('[') {
                let quote = after
                    .chars()
                    .next()
                    .filter(|c| *c == '\'' || *c == '"')
                    .ok_or_else(|| fail("expected [*] or ['key']"))?;
                let close = after[1..]
                    .find(quote)
                    .ok_or_else(|| fail("unterminated quoted key"))?;
                let key = &after[1..1 + close];
                rest = after[1 + close + 1..]
                    .strip_prefix(']')
                    .ok_or_else(|| fail("expected ] after quoted key"))?;
                steps.push(Step::Key(key.to_owned()));
            } else {
                let end = rest.find(['.', '[']).unwrap_or(rest.len());
                if end == 0 {
                    return Err(fail("empty key"));
                }
                steps.push(Step::Key(rest[..end].to_owned()));
                rest = &rest[end..];
            }
            if let Some(after) = rest.strip_prefix('.') {
                if after.is_empty() || after.starts_with(['.', '[']) {
                    return Err(fail("empty key"));
                }
                rest = after;
            }
        }
        if steps.is_empty() {
            return Err(fail("empty path"));
        }
        Ok(Self {
            text: text.to_owned(),
            steps,
        })
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FieldPath {
    /// The top-level key this path starts with (`spec` for `spec.nodeName`).
    pub(crate) fn first_key(&self) -> Option<&str> {
        match self.steps.first() {
            Some(Step::Key(key)) => Some(key),
            _ => None,
        }
    }

    /// The values at this path in `object`: strings as they are, numbers and booleans as text;
    /// missing fields and nulls give no value. Sorted and deduplicated.
    pub fn values(&self, object: &Value) -> Vec<String> {
        let mut current = vec![object];
        for step in &self.steps {
            current = match step {
                Step::Key(key) => current.into_iter().filter_map(|v| v.get(key)).collect(),
                Step::EachItem => current
                    .into_iter()
                    .filter_map(Value::as_array)
                    .flatten()
                    .collect(),
            };
        }
        let mut values: Vec<String> = current
            .into_iter()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                Value::Bool(b) => Some(b.to_string()),
                _ => None,
            })
            .collect();
        values.sort();
        values.dedup();
        values
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn values(path: &str, v: Value) -> Vec<String> {
        path.parse::<FieldPath>().unwrap().values(&v)
    }

    #[test]
    fn follows_keys_quoted_keys_and_arrays() {
        assert_eq!(
            values("spec.nodeName", json!({"spec": {"nodeName": "n1"}})),
            ["n1"]
        );
        assert_eq!(
            values(
                "metadata.labels['app.kubernetes.io/name']",
                json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"}}})
            ),
            ["web"]
        );
        let owners =
            json!({"metadata": {"ownerReferences": [{"uid": "b"}, {"uid": "a"}, {"uid": "b"}]}});
        assert_eq!(
            values("metadata.ownerReferences[*].uid", owners),
            ["a", "b"]
        );
        assert_eq!(
            values("spec.replicas", json!({"spec": {"replicas": 3}})),
            ["3"]
        );
        assert!(values("spec.nodeName", json!({"spec": {}})).is_empty());
    }

    #[test]
    fn rejects_malformed_paths() {
        for bad in ["", "spec..x", "spec.", "a[1]", "a['x", "a['x'"] {
            assert!(
                bad.parse::<FieldPath>().is_err(),
                "{bad:?} should not parse"
            );
        }
    }
}
