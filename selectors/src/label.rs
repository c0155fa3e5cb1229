//! Label selectors: the equality-based (`a=b`, `a==b`, `a!=b`) and set-based (`a in (x,y)`,
//! `a notin (x)`, `a`, `!a`, `a>1`, `a<1`) grammar of `k8s.io/apimachinery/pkg/labels`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use crate::{Error, Kind};

/// A parsed label selector; every requirement must hold. The empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether every requirement holds for the labels `value_of` looks up.
    pub fn matches_with<'a>(&self, value_of: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(value_of(&r.key)))
    }

    /// Whether a label map satisfies every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_with(|key| labels.get(key).map(String::as_str))
    }

    /// Whether a JSON label map (an object's `metadata.labels`) satisfies every requirement.
    pub fn matches_json(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_with(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.is_empty()
            || self.matches_json(
                object
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object),
            )
    }
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
    fn matches(&self, value: Option<&str>) -> bool {
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

impl FromStr for LabelSelector {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let fail = |reason: String| Error {
            kind: Kind::Label,
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

impl fmt::Display for LabelSelector {
    /// The canonical text form, which parses back to the same selector.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            let values = r.values.iter().cloned().collect::<Vec<_>>().join(",");
            let key = &r.key;
            match r.op {
                Op::Exists => write!(f, "{key}")?,
                Op::DoesNotExist => write!(f, "!{key}")?,
                Op::Equals => write!(f, "{key}={values}")?,
                Op::NotEquals => write!(f, "{key}!={values}")?,
                Op::In => write!(f, "{key} in ({values})")?,
                Op::NotIn => write!(f, "{key} notin ({values})")?,
                Op::GreaterThan => write!(f, "{key}>{values}")?,
                Op::LessThan => write!(f, "{key}<{values}")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn matches(selector: &str, labels: Value) -> bool {
        let selector: LabelSelector = selector.parse().unwrap();
        selector.matches_json(labels.as_object())
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
        assert!(matches(
            "app.kubernetes.io/name=web",
            json!({"app.kubernetes.io/name": "web"})
        ));
    }

    #[test]
    fn numeric_comparisons() {
        let labels = json!({"replicas": "3", "size": "9"});
        assert!(matches("replicas>2,size<10", labels.clone()));
        assert!(!matches("replicas<3", labels.clone()));
        assert!(!matches("missing>1", labels));
        assert!("replicas>x".parse::<LabelSelector>().is_err());
    }

    #[test]
    fn empty_value_and_empty_selector() {
        assert!(matches("flag=", json!({"flag": ""})));
        assert!(!matches("flag=", json!({"flag": "x"})));
        assert!(matches("", json!({})));
        let empty: LabelSelector = "  ".parse().unwrap();
        assert!(empty.is_empty() && empty.matches(&BTreeMap::new()));
    }

    #[test]
    fn malformed_selectors_are_refused_with_the_reason() {
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
            "a ~ b",
            "a=we b",
            "Pre.fix/a",
            "a=-x",
        ] {
            let err = bad.parse::<LabelSelector>().unwrap_err();
            assert_eq!(err.kind, Kind::Label, "{bad}: {err}");
        }
        assert!(
            "app=".parse::<LabelSelector>().is_ok(),
            "an empty value is valid syntax"
        );
        let err = "a in b".parse::<LabelSelector>().unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid label selector "a in b": expected '(' after in or notin"#
        );
    }

    #[test]
    fn display_round_trips() {
        let text = "a=b,c!=d,e in (f,g),h notin (i),j,!k,n>1,m<2";
        let parsed: LabelSelector = text.parse().unwrap();
        assert_eq!(parsed.to_string(), text);
        assert_eq!(parsed, parsed.to_string().parse().unwrap());
    }
}
