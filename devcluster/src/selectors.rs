//! Label and field selectors on lists and watches (`labelSelector=`, `fieldSelector=`). The
//! grammar is the workspace's one parser (`wasmformer-selectors`, which the host uses too); this
//! module adds what the API server checks on top of it, the fields each resource supports, and
//! its wording of the errors.

pub use wasmformer_selectors::{FieldSelector, LabelSelector};

use crate::resources::ResourceType;

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

impl From<wasmformer_selectors::Error> for Error {
    fn from(error: wasmformer_selectors::Error) -> Self {
        let wasmformer_selectors::Error {
            kind,
            selector,
            reason,
        } = error;
        match kind {
            wasmformer_selectors::Kind::Label => Self::Label { selector, reason },
            wasmformer_selectors::Kind::Field => Self::Field { selector, reason },
        }
    }
}

/// Checks every field of `selector` is one `ty` supports, as the API server does.
pub fn check_fields(selector: &FieldSelector, ty: &ResourceType) -> Result<()> {
    match selector.fields().find(|field| !ty.supports_field(field)) {
        Some(field) => Err(Error::UnsupportedField {
            field: field.to_owned(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{Registry, ResourceId};

    #[test]
    fn unsupported_fields_are_refused_per_resource() {
        let registry = Registry::builtin();
        let pods = registry.get(&ResourceId::core("pods")).unwrap();
        let cms = registry.get(&ResourceId::core("configmaps")).unwrap();
        let selector: FieldSelector = "spec.nodeName=a".parse().unwrap();
        assert!(check_fields(&selector, pods).is_ok());
        assert_eq!(
            check_fields(&selector, cms),
            Err(Error::UnsupportedField {
                field: "spec.nodeName".into()
            })
        );
    }

    #[test]
    fn parse_errors_take_the_api_server_wording() {
        let err = Error::from("a in b".parse::<LabelSelector>().unwrap_err());
        assert_eq!(
            err.to_string(),
            r#"unable to parse requirement: expected '(' after in or notin in label selector "a in b""#
        );
    }
}
