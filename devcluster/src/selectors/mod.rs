//! Label and field selectors as the API server parses and applies them to `labelSelector=` and
//! `fieldSelector=` on lists and watches.

mod field;
mod label;

pub use field::FieldSelector;
pub use label::LabelSelector;

/// A selector that could not be parsed or is not supported for the resource.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// The label selector text is malformed.
    #[error("unable to parse requirement: {reason} in label selector {selector:?}")]
    Label {
        /// The selector as given.
        selector: String,
        /// What was wrong.
        reason: String,
    },
    /// The field selector text is malformed.
    #[error("invalid field selector {selector:?}: {reason}")]
    Field {
        /// The selector as given.
        selector: String,
        /// What was wrong.
        reason: String,
    },
    /// The field is not one the resource supports selecting on.
    #[error("field label not supported: {field}")]
    UnsupportedField {
        /// The field label.
        field: String,
    },
}

/// `pub type Result<T, E = Error>` for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;
