//! The error a handler returns: a message the host logs with the plugin's name and the object.

use std::fmt;

/// A handler's failure. Anything that converts to a message converts to it, so `?` works on
/// decoding, lister and string errors alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(String);

/// `Result<T, wasmformer_guest::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        Self(message.to_string())
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
        Self(message)
    }
}

impl From<&str> for Error {
    fn from(message: &str) -> Self {
        Self(message.to_owned())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self(format!("cannot decode object: {e}"))
    }
}

impl From<crate::ListerError> for Error {
    fn from(e: crate::ListerError) -> Self {
        Self(format!("lister: {e}"))
    }
}

impl From<crate::WriteError> for Error {
    fn from(e: crate::WriteError) -> Self {
        Self(format!("writer: {e}"))
    }
}
