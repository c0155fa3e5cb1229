//! Kubernetes selectors in their text form, with the grammar of `k8s.io/apimachinery`:
//! label selectors (`app=web,tier in (a,b),!canary,replicas>2`), parsed and matched here for the
//! lister, and field selectors (`spec.nodeName=node-1,metadata.name!=a\,b`), parsed to check a
//! configuration (the server applies them).
//!
//! The dev cluster parses both the same way (`devcluster/src/selectors`); a property test holds
//! the two to the same meaning.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

/// A parsed label selector; every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// Why a selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} selector {selector:?}: {reason}")]
pub struct SelectorError {
    /// `label` or `field`.
    pub kind: &'static str,
    /// The selector text.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: BTreeSet<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Exists,
    DoesNotExist,
    Equals,
    NotEquals,
    In,
    NotIn,
    GreaterThan,
    LessThan,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match (self.op, value) {
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Equals | Op::In, Some(v)) => self.values.contains(v),
            (Op::NotEquals | Op::NotIn, Some(v)) => !self.values.contains(v),
            (Op::NotEquals | Op::NotIn, None) => true,
            (Op::Equals | Op::In | Op::GreaterThan | Op::LessThan, None) => false,
            (op @ (Op::GreaterThan | Op::LessThan), Some(v)) => {
                let bound = self.values.first().and_then(|b| b.parse::<i64>().ok());
                match (v.parse::<i64>(), bound) {
                    (Ok(actual), Some(bound)) if op == Op::GreaterThan => actual > bound,
                    (Ok(actual), Some(bound)) => actual < bound,
                    _ => false,
                }
            }
        }
    }
}

impl LabelSelector {
    /// Whether `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector matches every object.
    pub fn selects_all(&self) -> bool {
        self.requirements.is_empty()
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| SelectorError {
            kind: "label",
            selector: text.to_owned(),
            reason,
        };
        let mut parser = Parser {
            tokens: lex(text),
            pos: 0,
        };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(parser.requirement().map_err(fail)?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(other) => {
                    return Err(fail(format!("found {}, expected ','", other.describe())));
                }
            }
        }
        Ok(Self { requirements })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Not,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
    Open,
    Close,
    Comma,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Ident(ident) => format!("{ident:?}"),
            Token::Not => "'!'".into(),
            Token::Equals => "'='".into(),
            Token::DoubleEquals => "'=='".into(),
            Token::NotEquals => "'!='".into(),
            Token::GreaterThan => "'>'".into(),
            Token::LessThan => "'<'".into(),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::Open => "'('".into(),
            Token::Close => "')'".into(),
            Token::Comma => "','".into(),
        }
    }
}

fn describe(token: Option<&Token>) -> String {
    token.map_or_else(|| "the end".to_owned(), Token::describe)
}

fn lex(text: &str) -> Vec<Token> {
    const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '<', '>'];
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        if !SPECIAL.contains(&c) {
            let mut ident = String::new();
            while let Some(&c) = chars
                .peek()
                .filter(|c| !c.is_whitespace() && !SPECIAL.contains(c))
            {
                ident.push(c);
                chars.next();
            }
            tokens.push(match ident.as_str() {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Ident(ident),
            });
            continue;
        }
        chars.next();
        tokens.push(match (c, chars.peek()) {
            ('!', Some('=')) => {
                chars.next();
                Token::NotEquals
            }
            ('=', Some('=')) => {
                chars.next();
                Token::DoubleEquals
            }
            ('!', _) => Token::Not,
            ('=', _) => Token::Equals,
            ('(', _) => Token::Open,
            (')', _) => Token::Close,
            (',', _) => Token::Comma,
            ('<', _) => Token::LessThan,
            _ => Token::GreaterThan,
        });
    }
    tokens
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let token = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        token
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = self.peek() == Some(&Token::Not);
        if negated {
            self.next();
        }
        let key = match self.next() {
            Some(Token::Ident(key)) => label_key(key)?,
            other => {
                return Err(format!(
                    "found {}, expected a label key",
                    describe(other.as_ref())
                ));
            }
        };
        let mut values = BTreeSet::new();
        let op = match self.peek() {
            _ if negated => {
                return Ok(Requirement {
                    key,
                    op: Op::DoesNotExist,
                    values,
                });
            }
            None | Some(Token::Comma) => {
                return Ok(Requirement {
                    key,
                    op: Op::Exists,
                    values,
                });
            }
            Some(Token::Equals | Token::DoubleEquals) => Op::Equals,
            Some(Token::NotEquals) => Op::NotEquals,
            Some(Token::In) => Op::In,
            Some(Token::NotIn) => Op::NotIn,
            Some(Token::GreaterThan) => Op::GreaterThan,
            Some(Token::LessThan) => Op::LessThan,
            Some(other) => {
                return Err(format!(
                    "found {}, expected an operator (=, ==, !=, in, notin, >, <)",
                    other.describe()
                ));
            }
        };
        self.next();
        match op {
            Op::In | Op::NotIn => {
                if self.next() != Some(Token::Open) {
                    return Err("expected '(' after in or notin".to_owned());
                }
                loop {
                    match self.next() {
                        Some(Token::Ident(value)) => {
                            values.insert(label_value(value)?);
                            match self.next() {
                                Some(Token::Comma) => {}
                                Some(Token::Close) => break,
                                other => {
                                    return Err(format!(
                                        "found {}, expected ',' or ')'",
                                        describe(other.as_ref())
                                    ));
                                }
                            }
                        }
                        Some(Token::Close) if values.is_empty() => {
                            values.insert(String::new());
                            break;
                        }
                        other => {
                            return Err(format!(
                                "found {}, expected a value",
                                describe(other.as_ref())
                            ));
                        }
                    }
                }
            }
            Op::GreaterThan | Op::LessThan => match self.next() {
                Some(Token::Ident(value)) if value.parse::<i64>().is_ok() => {
                    values.insert(value);
                }
                other => {
                    return Err(format!(
                        "found {}, expected an integer",
                        describe(other.as_ref())
                    ));
                }
            },
            _ => match self.peek() {
                None | Some(Token::Comma) => {
                    values.insert(String::new());
                }
                Some(Token::Ident(value)) => {
                    values.insert(label_value(value.clone())?);
                    self.next();
                }
                Some(other) => return Err(format!("found {}, expected a value", other.describe())),
            },
        }
        Ok(Requirement { key, op, values })
    }
}

/// A name part: 1–63 characters, alphanumeric at both ends, `-`, `_`, `.` inside.
fn is_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// `name` or `prefix/name`, the prefix a DNS subdomain.
fn label_key(key: String) -> Result<String, String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key.as_str()),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            })
    });
    if prefix_ok && is_name_part(name) {
        Ok(key)
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

fn label_value(value: String) -> Result<String, String> {
    if value.is_empty() || is_name_part(&value) {
        Ok(value)
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

/// A parsed field selector: `field=value`, `field==value`, `field!=value` terms, separated by
/// commas, `\` escaping `,`, `=` and `\` in values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

impl FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: &str| SelectorError {
            kind: "field",
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
            terms.push((field, negated, unescape(value)));
        }
        Ok(Self { terms })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn matches_equality_and_set_requirements() {
        let s: LabelSelector = "app=web, tier in (front,edge),!canary,env!=dev"
            .parse()
            .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "edge")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "back")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("tier", "edge"),
            ("canary", "1")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "edge"), ("env", "dev")])));
        let s: LabelSelector = "app.kubernetes.io/name,zone notin (a)".parse().unwrap();
        assert!(s.matches(&labels(&[("app.kubernetes.io/name", "x"), ("zone", "b")])));
        assert!(!s.matches(&labels(&[("zone", "b")])));
    }

    #[test]
    fn numeric_comparisons() {
        let s: LabelSelector = "replicas>2,size<10".parse().unwrap();
        assert!(s.matches(&labels(&[("replicas", "3"), ("size", "9")])));
        assert!(!s.matches(&labels(&[("replicas", "2"), ("size", "9")])));
        assert!(!s.matches(&labels(&[("size", "9")])));
        assert!("replicas>x".parse::<LabelSelector>().is_err());
    }

    #[test]
    fn empty_selects_everything() {
        let s: LabelSelector = " ".parse().unwrap();
        assert!(s.selects_all() && s.matches(&labels(&[])));
    }

    #[test]
    fn rejects_malformed_selectors() {
        assert!(
            "app=".parse::<LabelSelector>().is_ok(),
            "an empty value is valid syntax"
        );
        for bad in [
            "=web",
            "a in b",
            "a in (x",
            "a,,b",
            "a ~ b",
            "a=we b",
            "-bad=x",
            "Pre.fix/a",
            "a=-x",
        ] {
            let err = bad.parse::<LabelSelector>();
            assert!(err.is_err(), "{bad:?} should not parse");
        }
        let err = "a in b".parse::<LabelSelector>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid label selector "a in b": expected '(' after in or notin"#
        );
    }

    #[test]
    fn field_selectors_take_escapes_and_refuse_terms_without_an_operator() {
        let s: FieldSelector = r"metadata.name=a\,b,spec.nodeName!=n1,".parse().unwrap();
        assert_eq!(
            s.terms,
            [
                ("metadata.name".into(), false, "a,b".into()),
                ("spec.nodeName".into(), true, "n1".into())
            ]
        );
        assert!("".parse::<FieldSelector>().unwrap().is_empty());
        let err = "metadata.name".parse::<FieldSelector>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid field selector "metadata.name": "metadata.name" is not field=value or field!=value"#
        );
        assert!("=x".parse::<FieldSelector>().is_err());
    }
}

#[cfg(test)]
#[path = "selector_props.rs"]
mod props;
