//! `wasmformer replay`: runs one plugin against a scripted sequence of events, with no cluster.
//!
//! The script ([`Script`]) holds the objects in the cache before the first event, then adds,
//! updates and deletes written as ordinary manifests. [`Feed`] turns it into watch events and
//! passes them through the informer's own [`Reflector`](crate::informer::reflector::Reflector), one
//! per kind, so the cache and the events delivered are the live informer's (lister calls inside
//! handlers see each event's object); every call's outcome is reported. The whole script is
//! checked ([`Script::check`]) before the plugin starts. Writes are recorded in order, checked
//! against the script's grants and the plugin's limits like a running host's, but never sent.

mod feed;
mod script;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use feed::Feed;
pub use script::{Script, ScriptError, ScriptStep, Step};

use crate::cache::{Event, Gvk, ObjectKey, Store};
use crate::plugin::{
    CallError, Grants, Limits, LoadedPlugin, LogLine, LogObserver, PluginInstance, WriteAccess,
};
use crate::writer::{PluginWriter, RecordedWrite, Recording, Sink, WriteSettings};

/// What happened to one scripted event.
#[derive(Debug)]
pub struct CallOutcome {
    /// `add`, `update` or `delete`.
    pub event: &'static str,
    /// The object's kind.
    pub gvk: Gvk,
    /// The object's key.
    pub key: ObjectKey,
    /// Its resourceVersion.
    pub resource_version: String,
    /// An add of the initial list, or a delete inferred by a relist (`finalStateUnknown`).
    pub marker: Option<&'static str>,
    /// How long the call took.
    pub elapsed: Duration,
    /// What the plugin logged during the call.
    pub logs: Vec<LogLine>,
    /// The writes the call made, in order (recorded, not sent).
    pub writes: Vec<RecordedWrite>,
    /// The error, if the call failed.
    pub error: Option<CallError>,
}

impl fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.event == "init" {
            write!(f, "init   ")?;
        } else {
            write!(
                f,
                "{:<6} {} {} (rv {}",
                self.event, self.gvk.kind, self.key, self.resource_version
            )?;
            match self.marker {
                Some(marker) => write!(f, ", {marker}) ")?,
                None => f.write_str(") ")?,
            }
        }
        match &self.error {
            None => write!(f, "ok in {:.1}ms", self.elapsed.as_secs_f64() * 1e3),
            Some(e) => write!(
                f,
                "FAILED in {:.1}ms: {e}",
                self.elapsed.as_secs_f64() * 1e3
            ),
        }
    }
}

/// Why a replay could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The script is invalid.
    #[error(transparent)]
    Script(#[from] ScriptError),
    /// The plugin failed to start (`init` failed or trapped).
    #[error("plugin {plugin} failed to start")]
    Start {
        /// The plugin's name.
        plugin: String,
        /// Why.
        #[source]
        source: CallError,
    },
}

/// Runs `plugin` through `script`, calling `report` after each event.
pub fn run(
    plugin: LoadedPlugin,
    script: &Script,
    config: &serde_json::Value,
    limits: Limits,
    mut report: impl FnMut(&CallOutcome),
) -> Result<Vec<CallOutcome>, ReplayError> {
    let mut feed = Feed::new(script)?;
    let mut grants = Grants::none();
    for kind in script.readable_kinds() {
        grants.grant(feed.stores()[&kind].clone());
    }
    let recording = Recording::default();
    // Nothing is sent, so nothing is rate-limited: a replay runs as fast as the plugin.
    let settings = WriteSettings {
        qps: u32::MAX,
        burst: u32::MAX,
        timeout: limits.write_timeout,
    };
    let writer = Arc::new(PluginWriter::new(
        plugin.name(),
        settings,
        Sink::Record(recording.clone()),
    ));
    grants.grant_writes(Arc::new(WriteAccess::new(
        script.write_grants(),
        script.events_granted(),
        &limits,
        writer,
    )));
    let lines = Arc::new(Mutex::new(Vec::new()));
    let observer: LogObserver = {
        let lines = lines.clone();
        Arc::new(move |line: &LogLine| lines.lock().expect("log lines").push(line.clone()))
    };
    let name = plugin.name().to_owned();
    let started = Instant::now();
    let mut instance = PluginInstance::start(plugin, limits, grants, config, Some(observer))
        .map_err(|source| ReplayError::Start {
            plugin: name,
            source,
        })?;
    let init = CallOutcome {
        event: "init",
        gvk: Gvk::default(),
        key: ObjectKey::new("", ""),
        resource_version: String::new(),
        marker: None,
        elapsed: started.elapsed(),
        logs: std::mem::take(&mut *lines.lock().expect("log lines")),
        writes: recording.take(),
        error: None,
    };
    report(&init);

    let handled = script.handled_kinds();
    let mut outcomes = vec![init];
    while let Some((gvk, event)) = feed.next() {
        let Some(obj) = event.object().cloned() else {
            continue; // `Synced`: not a call
        };
        if !handled.contains(&gvk) {
            continue;
        }
        let started = Instant::now();
        let error = instance.handle(&gvk, &event).err();
        let marker = match event {
            Event::Add { initial: true, .. } => Some("initial"),
            Event::Delete {
                final_state_unknown: true,
                ..
            } => Some("final state unknown"),
            _ => None,
        };
        let outcome = CallOutcome {
            event: event.kind(),
            gvk: gvk.clone(),
            key: obj.key().clone(),
            resource_version: obj.resource_version().to_owned(),
            marker,
            elapsed: started.elapsed(),
            logs: std::mem::take(&mut *lines.lock().expect("log lines")),
            writes: recording.take(),
            error,
        };
        report(&outcome);
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The writes of `outcomes`, in order, as a YAML list (what `wasmformer replay --output writes`
/// prints; the examples' golden files hold it).
pub fn writes_yaml(outcomes: &[CallOutcome]) -> String {
    let writes: Vec<&RecordedWrite> = outcomes.iter().flat_map(|o| &o.writes).collect();
    if writes.is_empty() {
        return "[]\n".to_owned();
    }
    serde_saphyr::to_string(&writes)
        .unwrap_or_else(|e| format!("# cannot print the writes as YAML: {e}\n"))
}

/// The stores for a script, one per kind it mentions.
pub(crate) type Stores = HashMap<Gvk, Arc<Store>>;
