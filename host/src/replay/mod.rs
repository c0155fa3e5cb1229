//! `wasmformer replay`: runs one plugin against a scripted sequence of events, with no cluster.
//!
//! The script ([`Script`]) holds the objects in the cache before the first event, then adds,
//! updates and deletes written as ordinary manifests. [`Feed`] turns it into watch events and
//! passes them through the informer's own [`Reflector`](crate::informer::reflector::Reflector), one
//! per kind, so the cache and the events delivered are the live informer's (lister calls inside
//! handlers see each event's object); every call's outcome is reported. The whole script is
//! checked ([`Script::check`]) before the plugin starts. Writes are recorded in order, checked
//! against the script's grants and the plugin's limits like a running host's, but never sent.
//!
//! A plugin that exports `reconciler` is also reconciled: each handled event queues its key in a
//! [`WorkQueue`] on a [`VirtualClock`] (the script's `reconcile:` limits, else client-go's
//! defaults); after each event the ready
//! keys run, and after the last one the clock jumps from one scheduled key to the next (retries
//! after their backoff, requeue-afters once), so a replay is instant and deterministic. Each
//! reconcile is reported with its attempt number, its virtual time and the backoff that follows
//! a retried failure. The script's `reconcile.fail` entries fail a key's first reconciles
//! without calling the plugin (see [`Script`]).

mod feed;
mod script;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use feed::Feed;
pub use script::{InjectedFailure, Script, ScriptError, ScriptStep, Step};

use crate::cache::{Event, Gvk, ObjectKey, Store};
use crate::plugin::{
    CallError, Grants, Limits, LoadedPlugin, LogLine, LogObserver, PluginInstance, WriteAccess,
};
use crate::workqueue::{VirtualClock, WorkQueue};
use crate::writer::{PluginWriter, RecordedWrite, Recording, Sink, WriteSettings};

/// At most this many reconciles run after the script's last event (a reconciler that always
/// fails or always requeues would otherwise run forever on the virtual clock).
const RECONCILES_AFTER_THE_SCRIPT: usize = 100;

/// A reconcile's place in its key's retry sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileStep {
    /// 1 + the key's failures before it.
    pub attempt: u32,
    /// The virtual time it ran at, from the replay's start.
    pub at: Duration,
    /// After a failure that is retried: how long until the next attempt.
    pub backoff: Option<Duration>,
    /// The script failed it (`reconcile.fail`): the plugin was not called.
    pub injected: bool,
}

/// What happened to one scripted event.
#[derive(Debug)]
pub struct CallOutcome {
    /// `add`, `update`, `delete` or `reconcile`.
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
    /// For a reconcile: its attempt, time and the backoff after it.
    pub reconcile: Option<ReconcileStep>,
}

impl fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.event == "init" {
            write!(f, "init   ")?;
        } else if let Some(step) = &self.reconcile {
            write!(
                f,
                "reconcile {} {} (attempt {}, at {}ms) ",
                self.gvk.kind,
                self.key,
                step.attempt,
                step.at.as_millis()
            )?;
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
        let injected = self.reconcile.is_some_and(|step| step.injected);
        match &self.error {
            Some(e) if injected => write!(f, "FAILED by the script: {e}")?,
            None => write!(f, "ok in {:.1}ms", self.elapsed.as_secs_f64() * 1e3)?,
            Some(e) => write!(
                f,
                "FAILED in {:.1}ms: {e}",
                self.elapsed.as_secs_f64() * 1e3
            )?,
        }
        match self.reconcile.and_then(|step| step.backoff) {
            Some(backoff) => write!(f, "; retry after {}ms", backoff.as_millis()),
            None => Ok(()),
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
        reconcile: None,
    };
    report(&init);
    let clock = VirtualClock::new();
    let mut work: WorkQueue<(Gvk, ObjectKey)> =
        WorkQueue::new(Arc::new(clock.clone()), script.rate_limits());
    let reconciles = instance.reconciles();
    let mut reconcile = Reconcile {
        instance: &mut instance,
        work: &mut work,
        clock: &clock,
        lines: &lines,
        recording: &recording,
        failures: Failures::new(script.injected_failures()),
    };

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
        let error = reconcile.instance.handle(&gvk, &event).err();
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
            reconcile: None,
        };
        report(&outcome);
        outcomes.push(outcome);
        if reconciles {
            reconcile.work.add((gvk.clone(), obj.key().clone()));
            while let Some(key) = reconcile.work.get() {
                let outcome = reconcile.one(key);
                report(&outcome);
                outcomes.push(outcome);
            }
        }
    }
    let mut after = 0;
    while after < RECONCILES_AFTER_THE_SCRIPT
        && let Some(at) = reconcile.work.next_due()
    {
        clock.advance_to(at);
        while let Some(key) = reconcile.work.get() {
            let outcome = reconcile.one(key);
            report(&outcome);
            outcomes.push(outcome);
            after += 1;
        }
    }
    Ok(outcomes)
}

/// The reconciles a script fails: how many of each key's next reconciles still fail.
struct Failures {
    left: HashMap<(Gvk, ObjectKey), (u32, InjectedFailure)>,
}

impl Failures {
    fn new(failures: Vec<InjectedFailure>) -> Self {
        let left = failures
            .into_iter()
            .map(|f| ((f.gvk.clone(), f.key.clone()), (f.times, f)))
            .collect();
        Self { left }
    }

    /// The error of `key`'s next reconcile, if the script fails it.
    fn take(&mut self, key: &(Gvk, ObjectKey)) -> Option<CallError> {
        let (left, failure) = self.left.get_mut(key)?;
        if *left == 0 {
            return None;
        }
        *left -= 1;
        Some(CallError::Reconcile {
            message: failure.message.clone(),
            retry: failure.retry,
        })
    }
}

/// What a replay's reconciles run with.
struct Reconcile<'a> {
    instance: &'a mut PluginInstance,
    work: &'a mut WorkQueue<(Gvk, ObjectKey)>,
    clock: &'a VirtualClock,
    lines: &'a Mutex<Vec<LogLine>>,
    recording: &'a Recording,
    failures: Failures,
}

impl Reconcile<'_> {
    /// Runs one reconcile of `key` (or fails it, if the script says so) and re-queues it as a
    /// live worker would.
    fn one(&mut self, key: (Gvk, ObjectKey)) -> CallOutcome {
        let work = &mut *self.work;
        let attempt = work.num_requeues(&key) + 1;
        let (gvk, object) = key.clone();
        let started = Instant::now();
        let injected = self.failures.take(&key);
        let is_injected = injected.is_some();
        let result = match injected {
            Some(error) => Err(error),
            None => self
                .instance
                .reconcile(&gvk, object.namespace(), object.name()),
        };
        let elapsed = started.elapsed();
        let mut backoff = None;
        match &result {
            Ok(requeue) => {
                work.forget(&key);
                if let Some(after) = requeue {
                    work.add_after(key.clone(), *after);
                }
            }
            Err(error) if error.wants_retry(true) => {
                backoff = Some(work.add_rate_limited(key.clone()));
            }
            Err(_) => work.forget(&key),
        }
        work.done(&key);
        CallOutcome {
            event: "reconcile",
            gvk,
            key: object,
            resource_version: String::new(),
            marker: None,
            elapsed,
            logs: std::mem::take(&mut *self.lines.lock().expect("log lines")),
            writes: self.recording.take(),
            error: result.err(),
            reconcile: Some(ReconcileStep {
                attempt,
                at: self.clock.elapsed(),
                backoff,
                injected: is_injected,
            }),
        }
    }
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
