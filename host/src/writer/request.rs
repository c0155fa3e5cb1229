//! What a plugin asks to write, and how a write can fail: the host's side of the `writer` WIT.

use serde::Serialize;
use serde_json::Value;

use crate::cache::Gvk;

/// The object a patch, delete or Event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Empty for cluster-scoped kinds.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid` (Events only); empty if unknown.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

impl Target {
    /// The target's kind.
    pub fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace.is_empty() {
            true => write!(f, "{} {} {}", self.api_version, self.kind, self.name),
            false => write!(
                f,
                "{} {} {}/{}",
                self.api_version, self.kind, self.namespace, self.name
            ),
        }
    }
}

/// The format of a patch body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PatchType {
    /// JSON merge patch (RFC 7386).
    Merge,
    /// JSON patch (RFC 6902).
    Json,
}

/// What happens to a deleted object's dependents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Propagation {
    /// The server's default for the kind.
    Default,
    /// `Background`.
    Background,
    /// `Foreground`.
    Foreground,
    /// `Orphan`.
    Orphan,
}

/// The type of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// One write, checked against the plugin's grants and limits, ready to send.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "verb")]
pub enum WriteRequest {
    /// Server-side apply of a whole object.
    #[serde(rename_all = "camelCase")]
    Apply {
        /// The object (apiVersion, kind, metadata.name checked).
        object: Value,
        /// Take ownership of conflicting fields.
        force: bool,
        /// To the `status` subresource.
        status: bool,
    },
    /// A patch of an existing object.
    #[serde(rename_all = "camelCase")]
    Patch {
        /// The object.
        target: Target,
        /// Merge or JSON patch.
        patch_type: PatchType,
        /// The patch.
        body: Value,
        /// To the `status` subresource.
        status: bool,
    },
    /// A create.
    #[serde(rename_all = "camelCase")]
    Create {
        /// The object.
        object: Value,
    },
    /// A delete.
    #[serde(rename_all = "camelCase")]
    Delete {
        /// The object.
        target: Target,
        /// What happens to dependents.
        propagation: Propagation,
        /// `metadata.uid` it must have.
        #[serde(skip_serializing_if = "Option::is_none")]
        uid: Option<String>,
        /// `metadata.resourceVersion` it must have.
        #[serde(skip_serializing_if = "Option::is_none")]
        resource_version: Option<String>,
    },
    /// An `events.k8s.io/v1` Event.
    #[serde(rename_all = "camelCase")]
    Event {
        /// What it is about.
        regarding: Target,
        /// Normal or Warning.
        #[serde(rename = "type")]
        event_type: EventType,
        /// Why (CamelCase, e.g. `ContainerRestarted`).
        reason: String,
        /// What was done or noticed.
        action: String,
        /// Free text.
        note: String,
    },
}

impl WriteRequest {
    /// The object's kind, namespace and name, as a [`Target`] (for messages).
    pub fn target(&self) -> Target {
        match self {
            Self::Apply { object, .. } | Self::Create { object } => target_of(object),
            Self::Patch { target, .. } | Self::Delete { target, .. } => target.clone(),
            Self::Event { regarding, .. } => regarding.clone(),
        }
    }

    /// `apply`, `patch`, `create`, `delete` or `event`.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Apply { .. } => "apply",
            Self::Patch { .. } => "patch",
            Self::Create { .. } => "create",
            Self::Delete { .. } => "delete",
            Self::Event { .. } => "event",
        }
    }
}

/// The [`Target`] a manifest names (fields it lacks are empty).
pub fn target_of(object: &Value) -> Target {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let meta = object.get("metadata");
    Target {
        api_version: text(object.get("apiVersion")),
        kind: text(object.get("kind")),
        namespace: text(meta.and_then(|m| m.get("namespace"))),
        name: text(meta.and_then(|m| m.get("name"))),
        uid: String::new(),
    }
}

/// Who refused a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedBy {
    /// The plugin's grant, checked by the host.
    Grant,
    /// The API server's RBAC.
    Server,
}

/// One cause the API server gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The field; empty if none.
    pub field: String,
    /// Machine-readable reason.
    pub reason: String,
    /// What is wrong.
    pub message: String,
}

/// Why a write failed: the WIT `writer.error`, host side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// Not granted (host) or refused by RBAC (server).
    #[error("forbidden: {message}")]
    Forbidden {
        /// Who refused it.
        by: RefusedBy,
        /// What was refused.
        message: String,
    },
    /// Malformed, over a limit, from `init`, or refused by validation.
    #[error("invalid: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// The server's causes.
        causes: Vec<Cause>,
    },
    /// Apply conflict, failed precondition, or already exists.
    #[error("conflict: {message}")]
    Conflict {
        /// The server's message.
        message: String,
        /// The server's causes (one per conflicting field).
        causes: Vec<Cause>,
    },
    /// The object does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The rate limit or the server's 429.
    #[error("throttled: {0}")]
    Throttled(String),
    /// Not reachable, 5xx, or no answer in time.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl WriteError {
    /// An `invalid` error without causes.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid {
            message: message.into(),
            causes: Vec::new(),
        }
    }
}
