//! Field selectors: comma-separated `field=value`, `field==value` and `field!=value` terms, with
//! `\` escaping `,`, `=`, `!` and `\` in values, matched against the string form of a dotted path
//! in an object.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::{Error, Kind};

/// A parsed field selector; every term must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<Term>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
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

    /// The field paths the terms select on, in order.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// Whether the object satisfies every term. A missing field reads as the empty string, as
    /// the API server's field sets render it.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.terms
            .iter()
            .all(|t| (field_value(object, &t.field) == t.value) != t.negated)
    }

    /// The value an `=`/`==` term requires of `field`, if there is one.
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && !t.negated)
            .map(|t| t.value.as_str())
    }
}

/// The string form of the value at a dotted path.
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

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| Error {
            kind: Kind::Field,
            selector: text.to_owned(),
            reason: reason.to_owned(),
        };
        let mut terms = Vec::new();
        for raw in split_unescaped(text) {
            if raw.trim().is_empty() {
                continue;
            }
            let (field, negated, value) = split_term(&raw)
                .ok_or_else(|| fail(&format!("{raw:?} is not field=value or field!=value")))?;
            let field = unescape(field.trim());
            if field.is_empty() {
                return Err(fail(&format!("{raw:?} has no field name")));
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
    /// The canonical text form, which parses back to the same selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let op = if t.negated { "!=" } else { "=" };
            write!(f, "{}{op}{}", escape(&t.field), escape(&t.value))?;
        }
        Ok(())
    }
}

/// Splits on commas not escaped by a backslash; escapes are kept.
fn split_unescaped(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let part = parts.last_mut().expect("never empty");
        match c {
            '\\' => {
                part.push(c);
                part.extend(chars.next());
            }
            ',' => parts.push(String::new()),
            _ => part.push(c),
        }
    }
    parts
}

/// Splits a term around its first unescaped `!=`, `==` or `=`.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', _) => i += 2,
            (b'!', Some(b'=')) => return Some((&term[..i], true, &term[i + 2..])),
            (b'=', Some(b'=')) => return Some((&term[..i], false, &term[i + 2..])),
            (b'=', _) => return Some((&term[..i], false, &term[i + 1..])),
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
            out.extend(chars.next());
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
        let parsed: FieldSelector = r"metadata.name=a\,b\=c,spec.nodeName!=n1,".parse().unwrap();
        assert_eq!(parsed.required_value("metadata.name"), Some("a,b=c"));
        assert_eq!(
            parsed.required_value("spec.nodeName"),
            None,
            "a != term requires nothing"
        );
        assert_eq!(
            parsed.fields().collect::<Vec<_>>(),
            ["metadata.name", "spec.nodeName"]
        );
        assert_eq!(
            parsed.to_string(),
            r"metadata.name=a\,b\=c,spec.nodeName!=n1"
        );
    }

    #[test]
    fn malformed_terms_are_refused_with_the_reason() {
        assert!("=x".parse::<FieldSelector>().is_err());
        assert!("".parse::<FieldSelector>().unwrap().is_empty());
        let err = "metadata.name".parse::<FieldSelector>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid field selector "metadata.name": "metadata.name" is not field=value or field!=value"#
        );
    }
}
