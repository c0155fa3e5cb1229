//! Changes to the cluster, within the plugin's grants: server-side apply, patch, create, delete
//! and Events.
//!
//! ```text
//! use wasmformer_guest::writer::{self, EventType};
//! use wasmformer_guest::serde_json::json;
//! use wasmformer_guest::k8s_openapi::api::core::v1::Pod;
//!
//! writer::apply(&json!({"apiVersion": "v1", "kind": "Pod",
//!     "metadata": {"name": "web-1", "namespace": "shop", "labels": {"team": "a"}}}))?;
//! writer::patch::<Pod>("shop", "web-1", json!({"metadata": {"annotations": {"seen": "yes"}}}))?;
//! writer::event(&pod, EventType::Warning, "ContainerRestarted", "Restart", "web restarted")?;
//! ```
//!
//! Writes are synchronous: each returns the API server's answer. The host sets the field manager
//! (`wasmformer/<plugin-name>`); a write the plugin's config does not grant answers
//! [`WriteError::Forbidden`] with [`RefusedBy::Grant`] without reaching the server. Writes from
//! `init` are refused. A write's effect comes back to the plugin as an ordinary event if it
//! handles that kind.

use std::fmt;

use k8s_openapi::Resource;
use serde::Serialize;
use serde_json::Value;

use crate::bindings::wasmformer::plugin::writer as wit;
use crate::lister::gvk_of;
use crate::{Gvk, Object};

pub use wit::{EventType, PatchType, Propagation, RefusedBy};

/// One reason the API server gave for refusing a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// The field (e.g. `.metadata.labels.team`); empty if none.
    pub field: String,
    /// Machine-readable reason (e.g. `FieldManagerConflict`).
    pub reason: String,
    /// What is wrong.
    pub message: String,
}

/// Why a write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteError {
    /// Not granted to this plugin ([`RefusedBy::Grant`]), or refused by the API server's RBAC
    /// ([`RefusedBy::Server`]).
    Forbidden {
        /// Who refused it.
        by: RefusedBy,
        /// What was refused.
        message: String,
    },
    /// Malformed, over a limit, from `init`, or refused by the server's validation.
    Invalid {
        /// What is wrong.
        message: String,
        /// The server's causes.
        causes: Vec<Cause>,
    },
    /// An apply conflict (one cause per field, naming the other manager), a failed delete
    /// precondition, or an object that already exists.
    Conflict {
        /// The server's message.
        message: String,
        /// The conflicting fields.
        causes: Vec<Cause>,
    },
    /// The object or its namespace does not exist.
    NotFound(String),
    /// Over the plugin's write rate, or the server answered 429.
    Throttled(String),
    /// The server could not be reached, failed, or did not answer in time.
    Unavailable(String),
    /// The object could not be encoded as JSON.
    Encode(String),
}

impl WriteError {
    /// For a conflict: the other field managers named in its causes (e.g. `kubectl`).
    pub fn conflicting_managers(&self) -> Vec<String> {
        let Self::Conflict { causes, message } = self else {
            return Vec::new();
        };
        let mut managers: Vec<String> = causes
            .iter()
            .map(|c| c.message.as_str())
            .chain([message.as_str()])
            .flat_map(|text| {
                text.split("conflict with \"")
                    .skip(1)
                    .filter_map(|rest| rest.split('"').next().map(str::to_owned))
            })
            .collect();
        managers.sort();
        managers.dedup();
        managers
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Forbidden {
                by: RefusedBy::Grant,
                message,
            } => write!(f, "forbidden (not granted): {message}"),
            Self::Forbidden {
                by: RefusedBy::Server,
                message,
            } => write!(f, "forbidden (by the API server): {message}"),
            Self::Invalid { message, .. } => write!(f, "invalid: {message}"),
            Self::Conflict { message, .. } => write!(f, "conflict: {message}"),
            Self::NotFound(message) => write!(f, "not found: {message}"),
            Self::Throttled(message) => write!(f, "throttled: {message}"),
            Self::Unavailable(message) => write!(f, "unavailable: {message}"),
            Self::Encode(message) => write!(f, "cannot encode the object: {message}"),
        }
    }
}

impl std::error::Error for WriteError {}

fn causes(causes: Vec<wit::Cause>) -> Vec<Cause> {
    causes
        .into_iter()
        .map(|c| Cause {
            field: c.field,
            reason: c.reason,
            message: c.message,
        })
        .collect()
}

impl From<wit::Error> for WriteError {
    fn from(e: wit::Error) -> Self {
        match e {
            wit::Error::Forbidden(f) => Self::Forbidden {
                by: f.refused_by,
                message: f.message,
            },
            wit::Error::Invalid(d) => Self::Invalid {
                message: d.message,
                causes: causes(d.causes),
            },
            wit::Error::Conflict(d) => Self::Conflict {
                message: d.message,
                causes: causes(d.causes),
            },
            wit::Error::NotFound(m) => Self::NotFound(m),
            wit::Error::Throttled(m) => Self::Throttled(m),
            wit::Error::Unavailable(m) => Self::Unavailable(m),
        }
    }
}

/// How [`apply_with`] is sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyOptions {
    /// Take ownership of fields another field manager owns instead of a conflict.
    pub force: bool,
    /// Apply to the `status` subresource.
    pub status: bool,
}

/// Conditions a delete must meet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Preconditions {
    /// The object's uid must be this.
    pub uid: Option<String>,
    /// The object's resourceVersion must be this.
    pub resource_version: Option<String>,
}

fn encode<T: Serialize + ?Sized>(obj: &T) -> Result<String, WriteError> {
    serde_json::to_string(obj).map_err(|e| WriteError::Encode(e.to_string()))
}

fn target(kind: Gvk, namespace: &str, name: &str) -> wit::Target {
    wit::Target {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// Server-side apply of `obj` (a k8s-openapi type or a `serde_json::Value` with apiVersion,
/// kind and metadata.name); returns the object as the server stored it, as JSON.
pub fn apply<T: Serialize + ?Sized>(obj: &T) -> Result<String, WriteError> {
    apply_with(obj, ApplyOptions::default())
}

/// [`apply`] with options: `force` to take over conflicting fields, `status` for the status
/// subresource.
pub fn apply_with<T: Serialize + ?Sized>(
    obj: &T,
    options: ApplyOptions,
) -> Result<String, WriteError> {
    Ok(wit::apply(
        &encode(obj)?,
        wit::ApplyOptions {
            force: options.force,
            status: options.status,
        },
    )?)
}

/// [`apply_with`] of a manifest already encoded as JSON (sent as it is).
pub fn apply_json(manifest: &str, options: ApplyOptions) -> Result<String, WriteError> {
    Ok(wit::apply(
        manifest,
        wit::ApplyOptions {
            force: options.force,
            status: options.status,
        },
    )?)
}

/// JSON merge patch of the `K` `namespace`/`name`: `patch::<Pod>("shop", "web-1", json!({..}))`.
pub fn patch<K: Resource>(namespace: &str, name: &str, body: Value) -> Result<String, WriteError> {
    patch_with(
        &gvk_of::<K>(),
        namespace,
        name,
        PatchType::Merge,
        &body,
        false,
    )
}

/// Any patch of any kind (custom resources included), to the object or its `status`.
pub fn patch_with(
    kind: &Gvk,
    namespace: &str,
    name: &str,
    patch_type: PatchType,
    body: &Value,
    status: bool,
) -> Result<String, WriteError> {
    Ok(wit::patch(
        &target(kind.clone(), namespace, name),
        patch_type,
        &encode(body)?,
        status,
    )?)
}

/// Creates `obj`; returns the object as the server stored it, as JSON.
pub fn create<T: Serialize + ?Sized>(obj: &T) -> Result<String, WriteError> {
    Ok(wit::create(&encode(obj)?)?)
}

/// Deletes the `K` `namespace`/`name`.
pub fn delete<K: Resource>(namespace: &str, name: &str) -> Result<(), WriteError> {
    delete_with(
        &gvk_of::<K>(),
        namespace,
        name,
        Propagation::Default,
        &Preconditions::default(),
    )
}

/// Deletes any kind, with a propagation policy and preconditions.
pub fn delete_with(
    kind: &Gvk,
    namespace: &str,
    name: &str,
    propagation: Propagation,
    preconditions: &Preconditions,
) -> Result<(), WriteError> {
    let preconditions = wit::Preconditions {
        uid: preconditions.uid.clone(),
        resource_version: preconditions.resource_version.clone(),
    };
    Ok(wit::delete(
        &target(kind.clone(), namespace, name),
        propagation,
        &preconditions,
    )?)
}

/// Records an Event about `regarding` (an object a handler received), reported by
/// `wasmformer/<plugin-name>`; repeats aggregate into one Event with a growing count.
pub fn event(
    regarding: &Object,
    event_type: EventType,
    reason: &str,
    action: &str,
    note: &str,
) -> Result<(), WriteError> {
    let reference = wit::ObjectReference {
        kind: regarding.kind().clone(),
        namespace: regarding.namespace().to_owned(),
        name: regarding.name().to_owned(),
        uid: regarding.uid().to_owned(),
    };
    Ok(wit::event(&reference, event_type, reason, action, note)?)
}
