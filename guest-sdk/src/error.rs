//! The error a handler or reconcile returns: a message the host logs with the plugin's name and
//! the object, and whether the host should retry.

use std::fmt;

/// A handler's or reconcile's failure. Anything that converts to a message converts to it, so `?`
/// works on decoding, lister and string errors alike.
///
/// Whether the host retries it: a handler's error is not retried and a reconcile's is (after the
/// key's backoff), unless it was made with [`Error::retry`] or [`Error::permanent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String, Option<bool>);

/// `Result<T, wasmformer_guest::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self(message.to_string(), None)
    }

    /// An error the host retries after a backoff: a handler's event is delivered again with the
    /// object's newest state, a reconcile's key is reconciled again.
    pub fn retry(message: impl fmt::Display) -> Self {
        Self(message.to_string(), Some(true))
    }

    /// An error the host does not retry, even from a reconcile.
    pub fn permanent(message: impl fmt::Display) -> Self {
        Self(message.to_string(), Some(false))
    }

    /// Marks this error as one to retry ([`Error::retry`]).
    #[must_use]
    pub fn retried(self) -> Self {
        Self(self.0, Some(true))
    }

    /// Whether the host retries it, where `default` is the caller's rule (handler: no,
    /// reconcile: yes).
    pub fn is_retry(&self, default: bool) -> bool {
        self.1.unwrap_or(default)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<String> for Error {
    fn from(message: String) -> Self {
        Self(message, None)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self(message.to_owned(), None)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self(format!("cannot decode object: {e}"), None)
    }
}

impl From<crate::ListerError> for Error {
    fn from(e: crate::ListerError) -> Self {
        Self(format!("lister: {e}"), None)
    }
}

impl From<crate::WriteError> for Error {
    fn from(e: crate::WriteError) -> Self {
        Self(format!("writer: {e}"), None)
    }
}
