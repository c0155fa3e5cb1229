//! Kubernetes label selectors in their text form (`app=web,tier in (a,b),!canary`), parsed into
//! kube's [`Selector`] so matching is kube's own.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use kube::core::{Expression, Selector, SelectorExt};

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector(Selector);

/// Why a label selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// The selector text.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

impl LabelSelector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.matches(labels)
    }

    /// Whether this selector matches every object.
    pub fn selects_all(&self) -> bool {
        self.0.selects_all()
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| SelectorError { selector: text.to_owned(), reason };
        let mut selector = Selector::default();
        for requirement in split_requirements(text) {
            let requirement = requirement.trim();
            if requirement.is_empty() {
                if text.trim().is_empty() {
                    continue;
                }
                return Err(fail("empty requirement".into()));
            }
            selector.extend(parse_requirement(requirement).map_err(fail)?);
        }
        Ok(Self(selector))
    }
}

/// Splits on commas that are not inside a `( … )` value set.
fn split_requirements(text: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn parse_requirement(req: &str) -> Result<Expression, String> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(Expression::DoesNotExist(label_key(key.trim())?));
    }
    for (op, build) in [("!=", Expression::NotEqual as fn(String, String) -> Expression), ("==", Expression::Equal), ("=", Expression::Equal)] {
        if let Some((key, value)) = req.split_once(op) {
            return Ok(build(label_key(key.trim())?, label_value(value.trim())?));
        }
    }
    let words: Vec<&str> = req.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim_start();
        let (op, set) = if let Some(set) = rest.strip_prefix("notin") {
            ("notin", set)
        } else if let Some(set) = rest.strip_prefix("in") {
            ("in", set)
        } else {
            return Err(format!("unknown operator in {req:?} (expected =, ==, !=, in, notin)"));
        };
        let set = set.trim().strip_prefix('(').and_then(|s| s.strip_suffix(')')).ok_or_else(|| format!("{op} needs a (value, …) set"))?;
        let values = set.split(',').map(|v| label_value(v.trim())).collect::<Result<BTreeSet<_>, _>>()?;
        let key = label_key(key)?;
        return Ok(if op == "in" { Expression::In(key, values) } else { Expression::NotIn(key, values) });
    }
    Ok(Expression::Exists(label_key(req)?))
}

fn label_key(key: &str) -> Result<String, String> {
    let valid = !key.is_empty()
        && key.len() <= 317
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if valid { Ok(key.to_owned()) } else { Err(format!("invalid label key {key:?}")) }
}

fn label_value(value: &str) -> Result<String, String> {
    let valid = value.len() <= 63 && value.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid { Ok(value.to_owned()) } else { Err(format!("invalid label value {value:?}")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn matches_equality_and_set_requirements() {
        let s: LabelSelector = "app=web, tier in (front,edge),!canary,env!=dev".parse().unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "edge"), ("canary", "1")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "edge"), ("env", "dev")])));
        let s: LabelSelector = "app.kubernetes.io/name,zone notin (a)".parse().unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "x"), ("zone", "b")])));
        assert!(!s.matches(&labels(&[("zone", "b")])));
    }

    #[test]
    fn empty_selects_everything() {
        let s: LabelSelector = "".parse().unwrap();
        assert!(s.selects_all() && s.matches(&labels(&[])));
    }

    #[test]
    fn rejects_malformed_selectors() {
        for bad in ["app=", "=web", "a in b", "a in (x", "a,,b", "a ~ b", "a=we b"] {
            let err = bad.parse::<LabelSelector>();
            if bad == "app=" {
                // An empty value is valid Kubernetes syntax ("key has the empty value").
                assert!(err.is_ok());
                continue;
            }
            assert!(err.is_err(), "{bad:?} should not parse");
        }
    }
}
