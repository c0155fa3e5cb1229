//! The `writer` import: checks each write against the plugin's grants (`write:`, `events:`) and
//! limits (writes per call, manifest size, no writes in `init`), then hands it to the plugin's
//! [`PluginWriter`] (`crate::writer`), which rate-limits and sends it. Every call's outcome is
//! counted in the writer's [`WriteCounts`](crate::writer::WriteCounts) (`/status`, `/metrics`); a
//! refused write answers at once and is logged at most once a minute per (kind, verb).

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::HostState;
use crate::config::{WriteGrant, WriteVerb};
use crate::plugin::Limits;
use crate::plugin::bindings::wasmformer::plugin::types;
use crate::plugin::bindings::wasmformer::plugin::writer::{self as wit, Error};
use crate::writer::{
    Cause, EventType, PatchType, PluginWriter, Propagation, RefusedBy, Target, WriteError,
    WriteRequest, target_of,
};

/// What one plugin may write, its write limits, and its writer.
#[derive(Debug)]
pub struct WriteAccess {
    grants: Vec<WriteGrant>,
    events: bool,
    writes_per_call: usize,
    manifest_bytes: usize,
    writer: Arc<PluginWriter>,
}

impl WriteAccess {
    /// `grants` and `events` from the plugin's config, its `limits`, and its writer (whose
    /// `/metrics` series for each granted verb start at 0).
    pub fn new(
        grants: Vec<WriteGrant>,
        events: bool,
        limits: &Limits,
        writer: Arc<PluginWriter>,
    ) -> Self {
        for grant in &grants {
            for verb in &grant.verbs {
                writer.counts().declare(verb.as_str());
            }
        }
        if events {
            writer.counts().declare("event");
        }
        Self {
            grants,
            events,
            writes_per_call: limits.writes_per_call,
            manifest_bytes: limits.manifest_bytes,
            writer,
        }
    }

    /// The plugin's writer (its counts outlive this version).
    pub fn writer(&self) -> &Arc<PluginWriter> {
        &self.writer
    }

    /// The JSON object in `text`, within the size limit.
    fn parse(&self, plugin: &str, what: &str, text: &str) -> Result<Value, WriteError> {
        if text.len() > self.manifest_bytes {
            return Err(WriteError::invalid(format!(
                "plugin {plugin}: {what} of {} bytes is over limits.manifestBytes ({})",
                text.len(),
                self.manifest_bytes
            )));
        }
        serde_json::from_str(text)
            .map_err(|e| WriteError::invalid(format!("plugin {plugin}: {what} is not JSON: {e}")))
    }

    /// A manifest with apiVersion, kind and metadata.name.
    fn manifest(&self, plugin: &str, text: &str) -> Result<Value, WriteError> {
        let object = self.parse(plugin, "the manifest", text)?;
        if !object.is_object() {
            return Err(WriteError::invalid(format!(
                "plugin {plugin}: the manifest is not a JSON object"
            )));
        }
        let target = target_of(&object);
        let missing: Vec<&str> = [
            ("apiVersion", &target.api_version),
            ("kind", &target.kind),
            ("metadata.name", &target.name),
        ]
        .into_iter()
        .filter(|(_, v)| v.is_empty())
        .map(|(field, _)| field)
        .collect();
        if !missing.is_empty() {
            return Err(WriteError::invalid(format!(
                "plugin {plugin}: the manifest has no {}",
                missing.join(", ")
            )));
        }
        Ok(object)
    }

    /// `Ok` if the grants cover `request`; else the refusal, logged at most once a minute per
    /// kind and verb.
    fn check(&self, plugin: &str, request: &WriteRequest) -> Result<(), WriteError> {
        let target = request.target();
        let (verb, status) = match request {
            WriteRequest::Apply { status, .. } => (Some(WriteVerb::Apply), *status),
            WriteRequest::Patch { status, .. } => (Some(WriteVerb::Patch), *status),
            WriteRequest::Create { .. } => (Some(WriteVerb::Create), false),
            WriteRequest::Delete { .. } => (Some(WriteVerb::Delete), false),
            WriteRequest::Event { .. } => (None, false),
        };
        let granted = match verb {
            None => self.events,
            Some(verb) => self
                .grants
                .iter()
                .any(|g| g.gvk() == target.gvk() && g.allows(verb, &target.namespace, status)),
        };
        if granted {
            return Ok(());
        }
        let kind = format!("{} {}", target.api_version, target.kind);
        let message = match verb {
            None => {
                format!("plugin {plugin} is not granted events; set `events: true` in its config")
            }
            Some(verb) => {
                let place = if target.namespace.is_empty() {
                    String::new()
                } else {
                    format!(" in namespace {}", target.namespace)
                };
                let sub = if status { " (status subresource)" } else { "" };
                format!(
                    "plugin {plugin} is not granted {verb} on {kind}{sub}{place}; add it to the plugin's `write:` list"
                )
            }
        };
        let verb = verb.map_or("event", WriteVerb::as_str);
        let counts = self.writer.counts();
        if let Some(suppressed) = counts.log_refusal(&kind, verb, Instant::now()) {
            tracing::warn!(plugin.id = %plugin, write.verb = verb, write.kind = %kind, object.ref = %target, write.refusedUnlogged = suppressed, "write refused: not granted");
        }
        Err(WriteError::Forbidden {
            by: RefusedBy::Grant,
            message,
        })
    }
}

fn target(t: wit::Target) -> Target {
    let kind = types::Gvk { ..t.kind };
    Target {
        api_version: api_version(&kind),
        kind: kind.kind,
        namespace: t.namespace,
        name: t.name,
        uid: String::new(),
    }
}

fn api_version(kind: &types::Gvk) -> String {
    if kind.group.is_empty() {
        kind.version.clone()
    } else {
        format!("{}/{}", kind.group, kind.version)
    }
}

fn causes(causes: Vec<Cause>) -> Vec<wit::Cause> {
    causes
        .into_iter()
        .map(|c| wit::Cause {
            field: c.field,
            reason: c.reason,
            message: c.message,
        })
        .collect()
}

/// The host's error as the guest sees it.
fn to_wit(error: WriteError) -> Error {
    match error {
        WriteError::Forbidden { by, message } => Error::Forbidden(wit::Forbidden {
            refused_by: match by {
                RefusedBy::Grant => wit::RefusedBy::Grant,
                RefusedBy::Server => wit::RefusedBy::Server,
            },
            message,
        }),
        WriteError::Invalid { message, causes: c } => Error::Invalid(wit::Details {
            message,
            causes: causes(c),
        }),
        WriteError::Conflict { message, causes: c } => Error::Conflict(wit::Details {
            message,
            causes: causes(c),
        }),
        WriteError::NotFound(message) => Error::NotFound(message),
        WriteError::Throttled(message) => Error::Throttled(message),
        WriteError::Unavailable(message) => Error::Unavailable(message),
    }
}

impl HostState {
    /// Checks and sends one write of `verb`, and counts how it ended. The time the write takes
    /// is added to the call's deadline: a write has its own budget (`limits.writeTimeout`).
    fn write(
        &mut self,
        verb: &'static str,
        prepare: impl FnOnce(&WriteAccess, &str) -> Result<WriteRequest, WriteError>,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.check_deadline()?;
        let plugin = self.plugin.clone();
        let Some(access) = self.grants.writes() else {
            return Ok(Err(to_wit(WriteError::Forbidden {
                by: RefusedBy::Grant,
                message: format!(
                    "plugin {plugin} has no write grants; add `write:` or `events: true` to its config"
                ),
            })));
        };
        let mut sent = None;
        let outcome = self.checked(&access, &plugin, prepare).and_then(|request| {
            let started = Instant::now();
            let outcome = access.writer.send(request);
            sent = Some(started.elapsed());
            outcome
        });
        if let Some(took) = sent {
            self.deadline.extend(took);
        }
        access
            .writer
            .counts()
            .count(verb, outcome.as_ref().map(|_| ()), sent);
        Ok(outcome.map_err(to_wit))
    }

    /// The write `prepare` builds, if this call may write it: not in `init`, within
    /// `limits.writesPerCall`, well-formed, granted.
    fn checked(
        &mut self,
        access: &WriteAccess,
        plugin: &str,
        prepare: impl FnOnce(&WriteAccess, &str) -> Result<WriteRequest, WriteError>,
    ) -> Result<WriteRequest, WriteError> {
        if self.in_init {
            return Err(WriteError::invalid(format!(
                "plugin {plugin}: writes are not allowed in init; write from a handler"
            )));
        }
        self.writes_this_call += 1;
        if self.writes_this_call > access.writes_per_call {
            if self.writes_this_call == access.writes_per_call + 1 {
                tracing::warn!(plugin.id = %plugin, limit = access.writes_per_call, "plugin over limits.writesPerCall; further writes in this call are refused");
            }
            return Err(WriteError::invalid(format!(
                "plugin {plugin}: more than limits.writesPerCall ({}) writes in one call",
                access.writes_per_call
            )));
        }
        let request = prepare(access, plugin)?;
        access.check(plugin, &request)?;
        Ok(request)
    }
}

impl wit::Host for HostState {
    fn apply(
        &mut self,
        manifest: String,
        options: wit::ApplyOptions,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.write("apply", |access, plugin| {
            let object = access.manifest(plugin, &manifest)?;
            Ok(WriteRequest::Apply {
                object,
                force: options.force,
                status: options.status,
            })
        })
    }

    fn patch(
        &mut self,
        t: wit::Target,
        patch_type: wit::PatchType,
        body: String,
        status: bool,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.write("patch", |access, plugin| {
            let body = access.parse(plugin, "the patch", &body)?;
            let patch_type = match patch_type {
                wit::PatchType::Merge => PatchType::Merge,
                wit::PatchType::Json => PatchType::Json,
            };
            Ok(WriteRequest::Patch {
                target: target(t),
                patch_type,
                body,
                status,
            })
        })
    }

    fn create(&mut self, manifest: String) -> wasmtime::Result<Result<String, Error>> {
        self.write("create", |access, plugin| {
            Ok(WriteRequest::Create {
                object: access.manifest(plugin, &manifest)?,
            })
        })
    }

    fn delete(
        &mut self,
        t: wit::Target,
        propagation: wit::Propagation,
        preconditions: wit::Preconditions,
    ) -> wasmtime::Result<Result<(), Error>> {
        let outcome = self.write("delete", |_, _| {
            let propagation = match propagation {
                wit::Propagation::Default => Propagation::Default,
                wit::Propagation::Background => Propagation::Background,
                wit::Propagation::Foreground => Propagation::Foreground,
                wit::Propagation::Orphan => Propagation::Orphan,
            };
            Ok(WriteRequest::Delete {
                target: target(t),
                propagation,
                uid: preconditions.uid,
                resource_version: preconditions.resource_version,
            })
        })?;
        Ok(outcome.map(|_| ()))
    }

    fn event(
        &mut self,
        regarding: wit::ObjectReference,
        event_type: wit::EventType,
        reason: String,
        action: String,
        note: String,
    ) -> wasmtime::Result<Result<(), Error>> {
        let outcome = self.write("event", |_, plugin| {
            if reason.is_empty() || action.is_empty() {
                return Err(WriteError::invalid(format!(
                    "plugin {plugin}: an Event needs a reason and an action"
                )));
            }
            let mut target = target(wit::Target {
                kind: regarding.kind,
                namespace: regarding.namespace,
                name: regarding.name,
            });
            target.uid = regarding.uid;
            let event_type = match event_type {
                wit::EventType::Normal => EventType::Normal,
                wit::EventType::Warning => EventType::Warning,
            };
            Ok(WriteRequest::Event {
                regarding: target,
                event_type,
                reason,
                action,
                note,
            })
        })?;
        Ok(outcome.map(|_| ()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::writer::{Recording, Sink, WriteSettings};

    fn access() -> WriteAccess {
        let settings = WriteSettings {
            qps: 1,
            burst: 1,
            timeout: Duration::from_secs(1),
        };
        let writer = Arc::new(PluginWriter::new(
            "p",
            settings,
            Sink::Record(Recording::default()),
        ));
        WriteAccess::new(Vec::new(), false, &Limits::default(), writer)
    }

    fn create(kind: &str) -> WriteRequest {
        WriteRequest::Create {
            object: serde_json::json!({"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": "d", "namespace": "shop"}}),
        }
    }

    /// Log lines written while `run` runs (WARN and above, plain text).
    fn logged(run: impl FnOnce()) -> Vec<String> {
        #[derive(Clone, Default)]
        struct Capture(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Capture {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let capture = Capture::default();
        let writer = capture.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, run);
        let text = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_owned).collect()
    }

    #[test]
    fn a_write_outside_the_grants_is_refused_naming_plugin_kind_and_verb() {
        let access = access();
        let error = access.check("p", &create("Deployment")).unwrap_err();
        assert_eq!(
            error,
            WriteError::Forbidden { by: RefusedBy::Grant, message: "plugin p is not granted create on apps/v1 Deployment in namespace shop; add it to the plugin's `write:` list".into() }
        );
    }

    #[test]
    fn repeated_refusals_of_one_kind_and_verb_are_logged_once_a_minute() {
        let access = access();
        let lines = logged(|| {
            for _ in 0..5 {
                access.check("p", &create("Deployment")).unwrap_err();
            }
            access.check("p", &create("StatefulSet")).unwrap_err();
            access.check("p", &create("StatefulSet")).unwrap_err();
        });
        let refusals: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains("write refused: not granted"))
            .collect();
        assert_eq!(refusals.len(), 2, "one line per kind and verb: {lines:#?}");
        assert!(
            refusals[0].contains("plugin.id=p")
                && refusals[0].contains("write.verb=\"create\"")
                && refusals[0].contains("apps/v1 Deployment"),
            "{refusals:?}"
        );
        assert!(refusals[1].contains("apps/v1 StatefulSet"), "{refusals:?}");
    }
}
