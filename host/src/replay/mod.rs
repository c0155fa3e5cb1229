//! `wasmformer replay`: runs one plugin against a scripted sequence of events, with no cluster.
//!
//! The script ([`Script`]) holds the objects in the cache before the first event, then adds,
//! updates and deletes written as ordinary manifests. The cache is kept exactly as an informer
//! would keep it (so lister calls inside handlers see each event's object), and every call's
//! outcome is reported.

mod script;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use script::{KindRef, Script, ScriptError, Step};

use crate::cache::{CachedObject, Gvk, ObjectKey, Store};
use crate::plugin::{CallError, Event, Grants, Limits, LoadedPlugin, LogLine, LogObserver, PluginInstance};

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
    /// How long the call took.
    pub elapsed: Duration,
    /// What the plugin logged during the call.
    pub logs: Vec<LogLine>,
    /// The error, if the call failed.
    pub error: Option<CallError>,
}

impl fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.event == "init" {
            write!(f, "init   ")?;
        } else {
            write!(f, "{:<6} {} {} (rv {}) ", self.event, self.gvk.kind, self.key, self.resource_version)?;
        }
        match &self.error {
            None => write!(f, "ok in {:.1}ms", self.elapsed.as_secs_f64() * 1e3),
            Some(e) => write!(f, "FAILED in {:.1}ms: {e}", self.elapsed.as_secs_f64() * 1e3),
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
    let stores = script.stores()?;
    let mut grants = Grants::none();
    for kind in script.readable_kinds() {
        grants.grant(stores[&kind].clone());
    }
    let lines = Arc::new(Mutex::new(Vec::new()));
    let observer: LogObserver = {
        let lines = lines.clone();
        Arc::new(move |line: &LogLine| lines.lock().expect("log lines").push(line.clone()))
    };
    let name = plugin.name().to_owned();
    let started = Instant::now();
    let mut instance = PluginInstance::start(plugin, limits, grants, config, Some(observer))
        .map_err(|source| ReplayError::Start { plugin: name, source })?;
    let init = CallOutcome {
        event: "init",
        gvk: Gvk::default(),
        key: ObjectKey::new("", ""),
        resource_version: String::new(),
        elapsed: started.elapsed(),
        logs: std::mem::take(&mut *lines.lock().expect("log lines")),
        error: None,
    };
    report(&init);

    let handled = script.handled_kinds();
    let mut outcomes = vec![init];
    let mut deliver = |gvk: &Gvk, event: Event| {
        let started = Instant::now();
        let error = instance.handle(gvk, &event).err();
        let obj = event.object();
        let outcome = CallOutcome {
            event: event.kind(),
            gvk: gvk.clone(),
            key: obj.key().clone(),
            resource_version: obj.resource_version().to_owned(),
            elapsed: started.elapsed(),
            logs: std::mem::take(&mut *lines.lock().expect("log lines")),
            error,
        };
        report(&outcome);
        outcomes.push(outcome);
    };

    // The initial list: into the cache first, then delivered as initial adds, like an informer.
    let mut initial: Vec<(Gvk, Arc<CachedObject>)> = Vec::new();
    for (gvk, value) in script.initial_objects()? {
        let obj = stores[&gvk].admit(value).map_err(|e| ScriptError::object("initial", e))?;
        stores[&gvk].upsert(obj.clone());
        initial.push((gvk, obj));
    }
    for (gvk, obj) in initial {
        if handled.contains(&gvk) {
            deliver(&gvk, Event::Add { obj, initial: true });
        }
    }

    for (gvk, step) in script.steps()? {
        let store: &Arc<Store> = &stores[&gvk];
        let event = match step {
            Step::Add(value) => {
                let obj = store.admit(value).map_err(|e| ScriptError::object("add", e))?;
                store.upsert(obj.clone());
                Event::Add { obj, initial: false }
            }
            Step::Update(value) => {
                let new = store.admit(value).map_err(|e| ScriptError::object("update", e))?;
                let old = store.upsert(new.clone()).ok_or_else(|| ScriptError::UpdateOfUnknown(new.key().to_string()))?;
                Event::Update { old, new }
            }
            Step::Delete { value, final_state_unknown } => {
                let key = store.admit(value).map_err(|e| ScriptError::object("delete", e))?.key().clone();
                let obj = store.remove(&key).ok_or_else(|| ScriptError::DeleteOfUnknown(key.to_string()))?;
                Event::Delete { obj, final_state_unknown }
            }
        };
        if handled.contains(&gvk) {
            deliver(&gvk, event);
        }
    }
    Ok(outcomes)
}

/// The stores for a script, one per kind it mentions.
pub(crate) type Stores = HashMap<Gvk, Arc<Store>>;
