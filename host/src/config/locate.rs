//! [`Locations`]: where each value of a YAML document is, by the path a [`Problem`] names, so
//! every problem can be shown with its line and column.
//!
//! [`Problem`]: super::Problem

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// A line and column in the config file, both counted from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The line.
    pub line: u64,
    /// The column.
    pub column: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.line, self.column)
    }
}

/// The position of every value of a document, by path: `plugins[0].handles[1].labelSelector`.
#[derive(Debug, Default)]
pub struct Locations(HashMap<String, Position>);

impl Locations {
    /// The positions in `text`; none if it is not YAML.
    pub fn of(text: &str) -> Self {
        let mut locations = HashMap::new();
        if let Ok(root) = crate::yaml::from_str::<Spanned<Node>>(text) {
            root.value.collect("", &mut locations);
        }
        Self(locations)
    }

    /// Where the value at `path` is; for a path that is not in the document (a missing field),
    /// where its nearest enclosing value is.
    pub fn find(&self, path: &str) -> Option<Position> {
        let mut path = path;
        loop {
            if let Some(position) = self.0.get(path) {
                return Some(*position);
            }
            let cut = path.rfind(['.', '['])?;
            path = &path[..cut];
        }
    }
}

/// A YAML node with the position of each child, for [`Locations`].
struct Node(Vec<(String, Spanned<Node>)>);

impl Node {
    fn collect(&self, at: &str, into: &mut HashMap<String, Position>) {
        for (segment, child) in &self.0 {
            let path = match (at.is_empty(), segment.starts_with('[')) {
                (true, _) | (false, true) => format!("{at}{segment}"),
                (false, false) => format!("{at}.{segment}"),
            };
            let location = child.referenced;
            if location.line() > 0 {
                into.insert(
                    path.clone(),
                    Position {
                        line: location.line(),
                        column: location.column(),
                    },
                );
            }
            child.value.collect(&path, into);
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

macro_rules! leaf {
    ($($method:ident: $ty:ty),*) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<Node, E> { Ok(Node(Vec::new())) })*
    };
}

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    leaf!(visit_bool: bool, visit_i64: i64, visit_u64: u64, visit_i128: i128, visit_u128: u128, visit_f64: f64, visit_str: &str);

    fn visit_unit<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node(Vec::new()))
    }

    fn visit_none<E: de::Error>(self) -> Result<Node, E> {
        Ok(Node(Vec::new()))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Node, D::Error> {
        Node::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut children = Vec::new();
        while let Some(child) = seq.next_element::<Spanned<Node>>()? {
            children.push((format!("[{}]", children.len()), child));
        }
        Ok(Node(children))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut children = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            children.push((key.0, map.next_value::<Spanned<Node>>()?));
        }
        Ok(Node(children))
    }
}

/// A mapping key as text, whatever scalar it is.
struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Ok(Key(match value {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_values_by_path_and_missing_ones_by_their_parent() {
        let text = "plugins:\n  - name: a\n    handles:\n      - {apiVersion: v1, kind: Pod}\n      - apiVersion: v1\n        labelSelector: 'a in b'\n";
        let locations = Locations::of(text);
        assert_eq!(
            locations.find("plugins[0].name"),
            Some(Position {
                line: 2,
                column: 11
            })
        );
        assert_eq!(
            locations.find("plugins[0].handles[1].labelSelector"),
            Some(Position {
                line: 6,
                column: 24
            })
        );
        assert_eq!(
            locations.find("plugins[0].handles[0].kind").map(|p| p.line),
            Some(4)
        );
        assert_eq!(
            locations.find("plugins[0].handles[1].kind").map(|p| p.line),
            Some(5),
            "a missing field: its entry"
        );
        assert_eq!(locations.find("nothing"), None);
    }
}
