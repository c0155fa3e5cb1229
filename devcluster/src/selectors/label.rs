//! Label selectors: the equality-based (`a=b`, `a==b`, `a!=b`) and set-based (`a in (x,y)`,
//! `a notin (x)`, `a`, `!a`, `a>1`, `a<1`) grammar of `k8s.io/apimachinery/pkg/labels`.

use std::{collections::BTreeSet, fmt, str::FromStr};

use serde_json::{Map, Value};

use super::{Error, Result};

/// A parsed label selector; every requirement must hold (logical AND).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
    values: BTreeSet<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

#[derive(Clone, Debug, PartialEq, Eq)]
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

impl LabelSelector {
    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether an object's `metadata.labels` satisfy the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.is_empty()
            || self.matches(
                object
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object),
            )
    }
}

impl Requirement {
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels
            .and_then(|l| l.get(&self.key))
            .and_then(Value::as_str);
        match (self.op, value) {
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Equals | Op::In, Some(v)) => self.values.contains(v),
            (Op::Equals | Op::In, None) => false,
            (Op::NotEquals | Op::NotIn, Some(v)) => !self.values.contains(v),
            (Op::NotEquals | Op::NotIn, None) => true,
            (Op::GreaterThan | Op::LessThan, None) => false,
            (op @ (Op::GreaterThan | Op::LessThan), Some(v)) => {
                let (Ok(actual), Some(Ok(bound))) = (
                    v.parse::<i64>(),
                    self.values.iter().next().map(|b| b.parse::<i64>()),
                ) else {
                    return false;
                };
                if op == Op::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl FromStr for LabelSelector {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let fail = |reason: String| Error::Label {
            selector: text.to_string(),
            reason,
        };
        let tokens = lex(text);
        let mut parser = Parser { tokens, pos: 0 };
        let mut requirements = Vec::new();
        if parser.peek().is_none() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(parser.requirement().map_err(&fail)?);
            match parser.next() {
                None => break,
                Some(Token::Comma) => {}
                Some(other) => return Err(fail(format!("found {other:?}, expected ','"))),
            }
        }
        Ok(Self { requirements })
    }
}

impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| {
                let values = r.values.iter().cloned().collect::<Vec<_>>().join(",");
                match r.op {
                    Op::Exists => r.key.clone(),
                    Op::DoesNotExist => format!("!{}", r.key),
                    Op::Equals => format!("{}={values}", r.key),
                    Op::NotEquals => format!("{}!={values}", r.key),
                    Op::In => format!("{} in ({values})", r.key),
                    Op::NotIn => format!("{} notin ({values})", r.key),
                    Op::GreaterThan => format!("{}>{values}", r.key),
                    Op::LessThan => format!("{}<{values}", r.key),
                }
            })
            .collect();
        f.write_str(&parts.join(","))
    }
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
        let token = match c {
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '<' => Token::LessThan,
            '>' => Token::GreaterThan,
            '!' | '=' => {
                chars.next();
                let token = match (c, chars.peek()) {
                    ('!', Some('=')) => Token::NotEquals,
                    ('!', _) => Token::Not,
                    ('=', Some('=')) => Token::DoubleEquals,
                    _ => Token::Equals,
                };
                if matches!(token, Token::NotEquals | Token::DoubleEquals) {
                    chars.next();
                }
                tokens.push(token);
                continue;
            }
            _ => {
                let mut ident = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || SPECIAL.contains(&c) {
                        break;
                    }
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
        };
        chars.next();
        tokens.push(token);
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

    fn key(&mut self) -> std::result::Result<String, String> {
        match self.next() {
            Some(Token::Ident(key)) => validate_key(&key).map(|()| key),
            other => Err(format!("found {other:?}, expected a label key")),
        }
    }

    fn requirement(&mut self) -> std::result::Result<Requirement, String> {
        let negated = self.peek() == Some(&Token::Not);
        if negated {
            self.next();
        }
        let key = self.key()?;
        let mut values = BTreeSet::new();
        if negated {
            return Ok(Requirement {
                key,
                op: Op::DoesNotExist,
                values,
            });
        }
        let op = match self.peek() {
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
            Some(other) => return Err(format!("found {other:?}, expected an operator")),
        };
        self.next();
        match op {
            Op::In | Op::NotIn => {
                if self.next() != Some(Token::Open) {
                    return Err("expected '(' after set operator".to_string());
                }
                loop {
                    match self.next() {
                        Some(Token::Ident(v)) => {
                            validate_value(&v)?;
                            values.insert(v);
                            match self.next() {
                                Some(Token::Comma) => {}
                                Some(Token::Close) => break,
                                other => {
                                    return Err(format!("found {other:?}, expected ',' or ')'"));
                                }
                            }
                        }
                        Some(Token::Close) if values.is_empty() => {
                            values.insert(String::new());
                            break;
                        }
                        other => return Err(format!("found {other:?}, expected a value")),
                    }
                }
            }
            Op::GreaterThan | Op::LessThan => match self.next() {
                Some(Token::Ident(v)) if v.parse::<i64>().is_ok() => {
                    values.insert(v);
                }
                other => return Err(format!("found {other:?}, expected an integer")),
            },
            _ => match self.peek() {
                None | Some(Token::Comma) => {
                    values.insert(String::new());
                }
                Some(Token::Ident(v)) => {
                    validate_value(v)?;
                    values.insert(v.clone());
                    self.next();
                }
                Some(other) => return Err(format!("found {other:?}, expected a value")),
            },
        }
        Ok(Requirement { key, op, values })
    }
}

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

fn validate_key(key: &str) -> std::result::Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
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
        Ok(())
    } else {
        Err(format!("invalid label key {key:?}"))
    }
}

fn validate_value(value: &str) -> std::result::Result<(), String> {
    if value.is_empty() || is_name_part(value) {
        Ok(())
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn matches(selector: &str, labels: Value) -> bool {
        let selector: LabelSelector = selector.parse().unwrap();
        selector.matches(labels.as_object())
    }

    #[test]
    fn equality_requirements() {
        let labels = json!({"app": "web", "tier": "front"});
        assert!(matches("app=web", labels.clone()));
        assert!(matches("app==web", labels.clone()));
        assert!(matches("app = web , tier==front", labels.clone()));
        assert!(!matches("app=db", labels.clone()));
        assert!(matches("app!=db", labels.clone()));
        assert!(matches("missing!=x", labels.clone()));
        assert!(!matches("app!=web", labels.clone()));
    }

    #[test]
    fn set_requirements() {
        let labels = json!({"env": "prod", "app": "web"});
        assert!(matches("env in (prod, staging)", labels.clone()));
        assert!(!matches("env in (dev)", labels.clone()));
        assert!(matches("env notin (dev)", labels.clone()));
        assert!(matches("other notin (dev)", labels.clone()));
        assert!(!matches("env notin (prod)", labels.clone()));
        assert!(matches("app", labels.clone()));
        assert!(!matches("!app", labels.clone()));
        assert!(matches("!other,app,env in (prod)", labels.clone()));
    }

    #[test]
    fn numeric_comparisons() {
        let labels = json!({"replicas": "3"});
        assert!(matches("replicas>2", labels.clone()));
        assert!(!matches("replicas<3", labels.clone()));
        assert!(!matches("missing>1", labels));
    }

    #[test]
    fn empty_value_and_empty_selector() {
        assert!(matches("flag=", json!({"flag": ""})));
        assert!(!matches("flag=", json!({"flag": "x"})));
        assert!(matches("", json!({})));
        assert!(LabelSelector::from_str("  ").unwrap().is_empty());
    }

    #[test]
    fn prefixed_keys() {
        assert!(matches(
            "app.kubernetes.io/name=web",
            json!({"app.kubernetes.io/name": "web"})
        ));
    }

    #[test]
    fn malformed_selectors_are_rejected() {
        for bad in [
            "app in prod",
            "=x",
            "app in (a,",
            "app==a==b",
            "app>x",
            "a b",
            "!",
            "app,,x",
            "-bad=x",
        ] {
            let err = LabelSelector::from_str(bad).unwrap_err();
            assert!(matches!(err, Error::Label { .. }), "{bad}: {err}");
        }
    }

    #[test]
    fn display_round_trips() {
        let text = "a=b,c!=d,e in (f,g),h notin (i),j,!k";
        let parsed: LabelSelector = text.parse().unwrap();
        assert_eq!(parsed.to_string(), text);
        assert_eq!(parsed, parsed.to_string().parse().unwrap());
    }
}
