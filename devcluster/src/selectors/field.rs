//! Field selectors: comma-separated `field=value`, `field==value` and `field!=value` terms with
//! backslash escapes, matched against the string form of a dotted path in the object.

use std::{fmt, str::FromStr};

use serde_json::Value;

use super::{Error, Result};
use crate::resources::ResourceType;

/// A parsed field selector; every term must hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<Term>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Term {
    field: String,
    negated: bool,
    value: String,
}

impl FieldSelector {
    /// Whether the selector has no terms (matches everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Checks every field is one the resource supports, as the API server does.
    pub fn validate_for(&self, ty: &ResourceType) -> Result<()> {
        match self.terms.iter().find(|t| !ty.supports_field(&t.field)) {
            Some(term) => Err(Error::UnsupportedField {
                field: term.field.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether the object satisfies every term. A missing field reads as the empty string.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.terms
            .iter()
            .all(|t| (field_value(object, &t.field) == t.value) != t.negated)
    }

    /// The value required by an `=`/`==` term on `field`, if there is one.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }
}

/// The string form of the value at a dotted path, as the API server's field sets render it.
fn field_value(object: &Value, field: &str) -> String {
    let mut current = object;
    for part in field.split('.') {
        match current.get(part) {
            Some(next) => current = next,
            None => return String::new(),
        }
    }
    match current {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FromStr for FieldSelector {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let fail = |reason: &str| Error::Field {
            selector: text.to_string(),
            reason: reason.to_string(),
        };
        let mut terms = Vec::new();
        for raw in split_unescaped(text, ',') {
            if raw.trim().is_empty() {
                continue;
            }
            let (field, negated, value) =
                split_term(&raw).ok_or_else(|| fail("expected field=value or field!=value"))?;
            let field = unescape(field.trim());
            if field.is_empty() {
                return Err(fail("empty field name"));
            }
            terms.push(Term {
                field,
                negated,
                value: unescape(value),
            });
        }
        Ok(Self { terms })
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .terms
            .iter()
            .map(|t| {
                format!(
                    "{}{}{}",
                    t.field,
                    if t.negated { "!=" } else { "=" },
                    escape(&t.value)
                )
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Splits on `sep` where it is not preceded by a backslash escape; escapes are kept.
fn split_unescaped(text: &str, sep: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            parts.last_mut().unwrap().push(c);
            if let Some(next) = chars.next() {
                parts.last_mut().unwrap().push(next);
            }
        } else if c == sep {
            parts.push(String::new());
        } else {
            parts.last_mut().unwrap().push(c);
        }
    }
    parts
}

/// Finds the first unescaped `!=`, `==` or `=` and splits the term around it.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'!' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], true, &term[i + 2..]));
            }
            b'=' if bytes.get(i + 1) == Some(&b'=') => {
                return Some((&term[..i], false, &term[i + 2..]));
            }
            b'=' => return Some((&term[..i], false, &term[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\\' | ',' | '=' | '!') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::resources::{Registry, ResourceId};

    fn pod() -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "prod"},
            "spec": {"nodeName": "node-a", "hostNetwork": false},
            "status": {"phase": "Running"}
        })
    }

    fn matches(selector: &str, object: &Value) -> bool {
        selector
            .parse::<FieldSelector>()
            .unwrap()
            .matches_object(object)
    }

    #[test]
    fn equality_and_inequality() {
        let pod = pod();
        assert!(matches("metadata.name=web-1", &pod));
        assert!(matches("metadata.name==web-1", &pod));
        assert!(!matches("metadata.name!=web-1", &pod));
        assert!(matches(
            "metadata.namespace=prod,spec.nodeName=node-a",
            &pod
        ));
        assert!(!matches(
            "metadata.namespace=prod,spec.nodeName=node-b",
            &pod
        ));
        assert!(matches("spec.nodeName!=node-b", &pod));
        assert!(matches("spec.hostNetwork=false", &pod));
    }

    #[test]
    fn missing_field_reads_as_empty() {
        let unscheduled = json!({"metadata": {"name": "p"}, "spec": {}});
        assert!(matches("spec.nodeName=", &unscheduled));
        assert!(!matches("spec.nodeName!=", &unscheduled));
        assert!(matches("spec.nodeName!=", &pod()));
    }

    #[test]
    fn escapes_in_values() {
        let object = json!({"metadata": {"name": "a,b=c"}});
        assert!(matches(r"metadata.name=a\,b\=c", &object));
        let parsed: FieldSelector = r"metadata.name=a\,b\=c".parse().unwrap();
        assert_eq!(parsed.required_value("metadata.name"), Some("a,b=c"));
        assert_eq!(parsed.to_string(), r"metadata.name=a\,b\=c");
    }

    #[test]
    fn unsupported_fields_are_rejected_per_resource() {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        let cms = registry.get(&ResourceId::core("configmaps")).unwrap();
        let selector: FieldSelector = "spec.nodeName=a".parse().unwrap();
        assert!(selector.validate_for(pods).is_ok());
        assert_eq!(
            selector.validate_for(cms),
            Err(Error::UnsupportedField {
                field: "spec.nodeName".into()
            })
        );
    }

    #[test]
    fn malformed_terms_are_rejected() {
        assert!(FieldSelector::from_str("metadata.name").is_err());
        assert!(FieldSelector::from_str("=x").is_err());
        assert!(FieldSelector::from_str("").unwrap().is_empty());
    }
}
