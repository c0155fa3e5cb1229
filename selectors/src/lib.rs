//! Kubernetes selectors in their text form, with the grammar of `k8s.io/apimachinery`: label
//! selectors (`app=web,tier in (a,b),!canary,replicas>2`) and field selectors
//! (`spec.nodeName=node-1,metadata.name!=a\,b`).
//!
//! One parser for the whole workspace: the host's lister and config checks and the dev cluster's
//! `labelSelector=`/`fieldSelector=` queries read a selector string the same way because they use
//! this crate.

mod field;
mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;

/// Which of the two selector languages a text was parsed as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A label selector.
    Label,
    /// A field selector.
    Field,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Label => "label",
            Kind::Field => "field",
        })
    }
}

/// Why a selector does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} selector {selector:?}: {reason}")]
pub struct Error {
    /// Label or field.
    pub kind: Kind,
    /// The selector text.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `pub type Result<T, E = Error>` for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod props;
