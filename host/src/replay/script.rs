//! The replay script: a YAML (or JSON) document of objects and events.
//!
//! ```yaml
//! initial:            # in the cache before the first event; delivered as initial adds
//!   - {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: web-5d8, namespace: shop}}
//! handles:            # optional: kinds the plugin receives (default: every kind in `events`)
//!   - {apiVersion: v1, kind: Pod}
//! read:               # optional: kinds the lister may read (default: every kind in the script)
//!   - {apiVersion: apps/v1, kind: ReplicaSet}
//! indexes:            # optional: custom indexes for the lister's `by-index`
//!   - {apiVersion: v1, kind: Pod, name: pods-by-node, field: spec.nodeName}
//! write:              # optional: what the plugin may write (default: every verb on every kind
//!   - {apiVersion: v1, kind: Pod, verbs: [apply]}   #   in the script); writes are recorded
//! writeEvents: true   # optional: whether it may record Events (default: true)
//! reconcile:          # optional, for a plugin that exports `reconciler`
//!   backoff: {base: 5ms, max: 1000s}   # the queue's limits, as the config's `reconcile:`
//!   qps: 10                            #   (default: client-go's, these)
//!   burst: 100
//!   fail:             # reconciles the script fails instead of calling the plugin
//!     - {apiVersion: v1, kind: ConfigMap, namespace: shop, name: a, times: 3}
//!     - {apiVersion: v1, kind: ConfigMap, namespace: shop, name: b, retry: false, message: gone}
//! events:
//!   - add: {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}
//!   - update: {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop, labels: {a: b}}}
//!   - delete: {apiVersion: v1, kind: Pod, metadata: {name: web-1, namespace: shop}}
//!     finalStateUnknown: false
//! ```
//!
//! Objects without `metadata.resourceVersion` get increasing ones in script order, and objects
//! without `metadata.uid` get `uid-<namespace>-<name>`, so updates keep their uid.
//!
//! A `reconcile.fail` entry fails the key's first `times` reconciles (default 1) without calling
//! the plugin, with a reconcile error carrying `message` that asks for a retry unless `retry:
//! false`; the key's later reconciles call the plugin.
//!
//! [`Script::check`] refuses, before anything runs, what no informer could deliver: a delete or
//! update of an object that is not in the cache at that point, an add of one that is (same uid),
//! an object that cannot be cached; each with the event's index and line.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use serde_saphyr::Spanned;

use super::Stores;
use crate::cache::{FieldPath, Gvk, IndexSpec, ObjectError, ObjectKey, Store};
use crate::config::BackoffConfig;
use crate::workqueue::RateLimits;

/// A kind in a script's `handles` or `read`: `apiVersion` and `kind` (unlike the config's
/// [`KindRef`](crate::config::KindRef), no plural `resource`: a script has no discovery to
/// resolve it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScriptKind {
    /// `v1`, `apps/v1`, …
    pub api_version: String,
    /// `Pod`, `Deployment`, …
    pub kind: String,
}

impl ScriptKind {
    fn gvk(&self) -> Gvk {
        Gvk::from_api_version(&self.api_version, &self.kind)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScriptIndex {
    api_version: String,
    kind: String,
    name: String,
    field: FieldPath,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct StepDoc {
    add: Option<Value>,
    update: Option<Value>,
    delete: Option<Value>,
    #[serde(default)]
    final_state_unknown: bool,
}

/// `reconcile:` of a script: the work queue's limits and the reconciles that fail.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScriptReconcile {
    backoff: Option<BackoffConfig>,
    qps: Option<f64>,
    burst: Option<u32>,
    #[serde(default)]
    fail: Vec<ScriptFailure>,
}

/// One entry of `reconcile.fail`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScriptFailure {
    api_version: String,
    kind: String,
    #[serde(default)]
    namespace: String,
    name: String,
    #[serde(default = "one")]
    times: u32,
    #[serde(default = "yes")]
    retry: bool,
    message: Option<String>,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

/// Reconciles a script fails instead of calling the plugin (its `reconcile.fail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFailure {
    /// The key's kind.
    pub gvk: Gvk,
    /// The key.
    pub key: ObjectKey,
    /// How many of the key's first reconciles fail.
    pub times: u32,
    /// Whether they ask for a retry.
    pub retry: bool,
    /// The error message.
    pub message: String,
}

/// One scripted event and where it is in the script.
#[derive(Debug, Clone)]
pub struct ScriptStep {
    /// `events[3]`.
    pub at: String,
    /// Its line in the script, when known.
    pub line: Option<u64>,
    /// The object's kind.
    pub gvk: Gvk,
    /// The event.
    pub step: Step,
}

/// One scripted event.
#[derive(Debug, Clone)]
pub enum Step {
    /// Add this object.
    Add(Value),
    /// Replace the cached object with this one.
    Update(Value),
    /// Delete the cached object with this one's namespace and name.
    Delete {
        /// Names the object.
        value: Value,
        /// Deliver the delete as inferred after a relist.
        final_state_unknown: bool,
    },
}

/// A parsed replay script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Script {
    #[serde(default)]
    initial: Vec<Value>,
    handles: Option<Vec<ScriptKind>>,
    read: Option<Vec<ScriptKind>>,
    #[serde(default)]
    indexes: Vec<ScriptIndex>,
    #[serde(default)]
    events: Vec<Spanned<StepDoc>>,
    write: Option<Vec<crate::config::WriteGrant>>,
    write_events: Option<bool>,
    #[serde(default)]
    reconcile: ScriptReconcile,
}

/// Why a script cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read event script {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid script (the error gives line and column).
    #[error("invalid event script {path}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, and where (boxed: the parser's error is large).
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A step or object is malformed.
    #[error("{at}: {reason}")]
    Invalid {
        /// Where: `events[3]`, `initial[0]`.
        at: String,
        /// What is wrong.
        reason: String,
    },
    /// An object cannot be cached.
    #[error("{at}{}: object cannot be cached", line_suffix(*.line))]
    Object {
        /// Where: `events[3]`, `initial[0]`.
        at: String,
        /// Its line, when known.
        line: Option<u64>,
        /// Why.
        #[source]
        source: ObjectError,
    },
    /// An event no informer could deliver at that point of the script.
    #[error("{at}{}: {reason}", line_suffix(*.line))]
    Refused {
        /// Where: `events[3]`.
        at: String,
        /// Its line, when known.
        line: Option<u64>,
        /// Why: `delete of Pod shop/web-1, which is not in the cache`.
        reason: String,
    },
}

fn line_suffix(line: Option<u64>) -> String {
    line.map(|line| format!(" (line {line})"))
        .unwrap_or_default()
}

impl ScriptError {
    fn invalid(at: String, reason: impl Into<String>) -> Self {
        Self::Invalid {
            at,
            reason: reason.into(),
        }
    }
}

impl Script {
    /// Reads a script from a YAML or JSON file.
    pub fn load(path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|source| ScriptError::Parse {
            path: path.to_owned(),
            source: Box::new(source),
        })
    }

    /// Parses a script from YAML or JSON text.
    pub fn parse(text: &str) -> Result<Self, serde_saphyr::Error> {
        crate::yaml::from_str(text)
    }

    /// The initial objects with their kinds, defaults filled in.
    pub fn initial_objects(&self) -> Result<Vec<(Gvk, Value)>, ScriptError> {
        Ok(self.numbered()?.0)
    }

    /// The events with their kinds and places, defaults filled in.
    pub fn steps(&self) -> Result<Vec<ScriptStep>, ScriptError> {
        Ok(self.numbered()?.1)
    }

    /// Checks the whole script as an informer would see it (see the module docs): every object
    /// can be cached, and every step is possible at its point of the script.
    pub fn check(&self) -> Result<(), ScriptError> {
        let stores = self.stores()?;
        let admit = |at: &str, line: Option<u64>, gvk: &Gvk, value: &Value| {
            stores[gvk]
                .admit(value.clone())
                .map_err(|source| ScriptError::Object {
                    at: at.to_owned(),
                    line,
                    source,
                })
        };
        self.check_reconcile()?;
        let mut cached: HashMap<(Gvk, ObjectKey), String> = HashMap::new();
        for (i, (gvk, value)) in self.initial_objects()?.iter().enumerate() {
            let obj = admit(&format!("initial[{i}]"), None, gvk, value)?;
            cached.insert((gvk.clone(), obj.key().clone()), obj.uid().to_owned());
        }
        for ScriptStep {
            at,
            line,
            gvk,
            step,
        } in self.steps()?
        {
            let refuse = |reason: String| ScriptError::Refused {
                at: at.clone(),
                line,
                reason,
            };
            let (value, action) = match &step {
                Step::Add(value) => (value, "add"),
                Step::Update(value) => (value, "update"),
                Step::Delete { value, .. } => (value, "delete"),
            };
            let obj = admit(&at, line, &gvk, value)?;
            let key = (gvk.clone(), obj.key().clone());
            let object = format!("{} {}", gvk.kind, obj.key());
            match (action, cached.get(&key)) {
                ("add", Some(uid)) if uid == obj.uid() => {
                    return Err(refuse(format!(
                        "add of {object}, which is already in the cache (use update)"
                    )));
                }
                ("update" | "delete", None) => {
                    return Err(refuse(format!(
                        "{action} of {object}, which is not in the cache at this point"
                    )));
                }
                ("delete", Some(_)) => {
                    cached.remove(&key);
                }
                _ => {
                    cached.insert(key, obj.uid().to_owned());
                }
            }
        }
        Ok(())
    }

    /// Checks `reconcile:`: limits a running host would accept, failures of handled kinds.
    fn check_reconcile(&self) -> Result<(), ScriptError> {
        let reconcile = &self.reconcile;
        if let Some(backoff) = reconcile.backoff {
            if backoff.base.is_zero() {
                return Err(ScriptError::invalid(
                    "reconcile.backoff.base".into(),
                    "must be more than 0s",
                ));
            }
            if backoff.max < backoff.base {
                return Err(ScriptError::invalid(
                    "reconcile.backoff.max".into(),
                    format!(
                        "must be at least backoff.base ({})",
                        humantime::format_duration(backoff.base)
                    ),
                ));
            }
        }
        if reconcile
            .qps
            .is_some_and(|qps| !(qps.is_finite() && qps > 0.0))
        {
            return Err(ScriptError::invalid(
                "reconcile.qps".into(),
                "must be more than 0",
            ));
        }
        if reconcile.burst == Some(0) {
            return Err(ScriptError::invalid(
                "reconcile.burst".into(),
                "must be more than 0",
            ));
        }
        let handled = self.handled_kinds();
        for (i, failure) in reconcile.fail.iter().enumerate() {
            let at = format!("reconcile.fail[{i}]");
            let gvk = Gvk::from_api_version(&failure.api_version, &failure.kind);
            if !handled.contains(&gvk) {
                return Err(ScriptError::invalid(
                    at,
                    format!(
                        "{} is not a handled kind, so none of its keys is reconciled",
                        failure.kind
                    ),
                ));
            }
            if failure.times == 0 {
                return Err(ScriptError::invalid(
                    format!("{at}.times"),
                    "must be at least 1",
                ));
            }
        }
        Ok(())
    }

    /// Replaces `reconcile:`'s limits with a plugin's `reconcile:` block (its `backoff`, `qps`
    /// and `burst`; `replay --reconcile`); [`Script::check`] checks them.
    pub fn set_limits(&mut self, reconcile: &crate::config::ReconcileConfig) {
        self.reconcile.backoff = Some(reconcile.backoff);
        self.reconcile.qps = Some(reconcile.qps);
        self.reconcile.burst = Some(reconcile.burst);
    }

    /// The work queue's limits: `reconcile:`'s, client-go's defaults for what it leaves out.
    pub fn rate_limits(&self) -> RateLimits {
        let defaults = RateLimits::default();
        let reconcile = &self.reconcile;
        RateLimits {
            base: reconcile.backoff.map_or(defaults.base, |b| b.base),
            max: reconcile.backoff.map_or(defaults.max, |b| b.max),
            qps: reconcile.qps.unwrap_or(defaults.qps),
            burst: reconcile.burst.unwrap_or(defaults.burst),
        }
    }

    /// The reconciles the script fails (`reconcile.fail`), in script order.
    pub fn injected_failures(&self) -> Vec<InjectedFailure> {
        self.reconcile
            .fail
            .iter()
            .map(|f| InjectedFailure {
                gvk: Gvk::from_api_version(&f.api_version, &f.kind),
                key: ObjectKey::new(&f.namespace, &f.name),
                times: f.times,
                retry: f.retry,
                message: f
                    .message
                    .clone()
                    .unwrap_or_else(|| "failed by the replay script".to_owned()),
            })
            .collect()
    }

    /// Fills in resourceVersions (in script order) and uids.
    #[allow(clippy::type_complexity)]
    fn numbered(&self) -> Result<(Vec<(Gvk, Value)>, Vec<ScriptStep>), ScriptError> {
        let mut rv = 0u64;
        let mut fill = |at: String, mut value: Value| -> Result<(Gvk, Value), ScriptError> {
            let gvk = kind_of(&at, &value)?;
            let metadata = value
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| ScriptError::invalid(at.clone(), "object has no metadata"))?;
            rv += 1;
            metadata
                .entry("resourceVersion")
                .or_insert_with(|| Value::String(rv.to_string()));
            let text = |k: &str| {
                metadata
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let uid = format!("uid-{}-{}", text("namespace"), text("name"));
            metadata.entry("uid").or_insert(Value::String(uid));
            Ok((gvk, value))
        };
        let initial = self
            .initial
            .iter()
            .enumerate()
            .map(|(i, v)| fill(format!("initial[{i}]"), v.clone()))
            .collect::<Result<_, _>>()?;
        let mut steps = Vec::new();
        for (i, spanned) in self.events.iter().enumerate() {
            let (doc, line) = (
                &spanned.value,
                Some(spanned.referenced.line()).filter(|&line| line > 0),
            );
            let at = format!("events[{i}]");
            let (gvk, step) = match (&doc.add, &doc.update, &doc.delete) {
                (Some(v), None, None) => {
                    fill(at.clone(), v.clone()).map(|(g, v)| (g, Step::Add(v)))?
                }
                (None, Some(v), None) => {
                    fill(at.clone(), v.clone()).map(|(g, v)| (g, Step::Update(v)))?
                }
                (None, None, Some(v)) => {
                    let (g, value) = fill(at.clone(), v.clone())?;
                    (
                        g,
                        Step::Delete {
                            value,
                            final_state_unknown: doc.final_state_unknown,
                        },
                    )
                }
                _ => {
                    return Err(ScriptError::invalid(
                        at,
                        "a step has exactly one of add, update, delete",
                    ));
                }
            };
            steps.push(ScriptStep {
                at,
                line,
                gvk,
                step,
            });
        }
        Ok((initial, steps))
    }

    /// Every kind the script mentions.
    fn kinds(&self) -> Result<BTreeSet<Gvk>, ScriptError> {
        let (initial, steps) = self.numbered()?;
        let mut kinds: BTreeSet<Gvk> = initial
            .into_iter()
            .map(|(g, _)| g)
            .chain(steps.into_iter().map(|s| s.gvk))
            .collect();
        kinds.extend(
            self.handles
                .iter()
                .flatten()
                .chain(self.read.iter().flatten())
                .map(ScriptKind::gvk),
        );
        kinds.extend(
            self.indexes
                .iter()
                .map(|i| Gvk::from_api_version(&i.api_version, &i.kind)),
        );
        Ok(kinds)
    }

    /// The kinds delivered to the plugin: `handles`, or every kind in `events`.
    pub fn handled_kinds(&self) -> BTreeSet<Gvk> {
        match &self.handles {
            Some(kinds) => kinds.iter().map(ScriptKind::gvk).collect(),
            None => self
                .steps()
                .map(|s| s.into_iter().map(|s| s.gvk).collect())
                .unwrap_or_default(),
        }
    }

    /// The kinds the lister may read: `read` plus handled kinds, or every kind in the script.
    pub fn readable_kinds(&self) -> BTreeSet<Gvk> {
        match &self.read {
            Some(kinds) => kinds
                .iter()
                .map(ScriptKind::gvk)
                .chain(self.handled_kinds())
                .collect(),
            None => self.kinds().unwrap_or_default(),
        }
    }

    /// What the plugin may write: `write`, or every verb on every kind in the script.
    pub fn write_grants(&self) -> Vec<crate::config::WriteGrant> {
        use crate::config::{WriteGrant, WriteVerb};
        match &self.write {
            Some(grants) => grants.clone(),
            None => self
                .kinds()
                .unwrap_or_default()
                .into_iter()
                .map(|gvk| WriteGrant {
                    api_version: gvk.api_version(),
                    kind: gvk.kind,
                    verbs: vec![
                        WriteVerb::Apply,
                        WriteVerb::Patch,
                        WriteVerb::Create,
                        WriteVerb::Delete,
                    ],
                    namespaces: Vec::new(),
                    status: true,
                })
                .collect(),
        }
    }

    /// Whether the plugin may record Events (`writeEvents`, default true).
    pub fn events_granted(&self) -> bool {
        self.write_events.unwrap_or(true)
    }

    /// One store per kind, with the script's indexes.
    pub(crate) fn stores(&self) -> Result<Stores, ScriptError> {
        let mut indexes: HashMap<Gvk, Vec<IndexSpec>> = HashMap::new();
        for index in &self.indexes {
            let spec = IndexSpec {
                name: index.name.clone(),
                path: index.field.clone(),
            };
            indexes
                .entry(Gvk::from_api_version(&index.api_version, &index.kind))
                .or_default()
                .push(spec);
        }
        Ok(self
            .kinds()?
            .into_iter()
            .map(|gvk| {
                let store = Store::new(gvk.clone(), indexes.remove(&gvk).unwrap_or_default(), true);
                (gvk, Arc::new(store))
            })
            .collect())
    }
}

fn kind_of(at: &str, value: &Value) -> Result<Gvk, ScriptError> {
    let field = |k: &str| {
        value
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    };
    match (field("apiVersion"), field("kind")) {
        (Some(api_version), Some(kind)) => Ok(Gvk::from_api_version(api_version, kind)),
        _ => Err(ScriptError::invalid(
            at.to_owned(),
            "object needs apiVersion and kind",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"
initial:
  - {apiVersion: apps/v1, kind: ReplicaSet, metadata: {name: rs, namespace: shop}}
events:
  - add: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: shop}}
  - update: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: shop, labels: {a: b}}}
  - delete: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: shop}}
    finalStateUnknown: true
"#;

    #[test]
    fn reconcile_limits_default_to_client_go_and_bad_ones_are_refused_by_name() {
        let events =
            "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: p, namespace: shop}}\n";
        let script = Script::parse(events).unwrap();
        assert_eq!(script.rate_limits(), RateLimits::default());
        let script = Script::parse(&format!(
            "reconcile: {{backoff: {{base: 1s}}, burst: 3}}\n{events}"
        ))
        .unwrap();
        assert_eq!(
            script.rate_limits(),
            RateLimits {
                base: std::time::Duration::from_secs(1),
                burst: 3,
                ..RateLimits::default()
            }
        );
        for (reconcile, error) in [
            (
                "{backoff: {base: 0s}}",
                "reconcile.backoff.base: must be more than 0s",
            ),
            (
                "{backoff: {base: 2s, max: 1s}}",
                "reconcile.backoff.max: must be at least backoff.base (2s)",
            ),
            ("{qps: 0}", "reconcile.qps: must be more than 0"),
            ("{burst: 0}", "reconcile.burst: must be more than 0"),
            (
                "{fail: [{apiVersion: v1, kind: Pod, name: p, times: 0}]}",
                "reconcile.fail[0].times: must be at least 1",
            ),
        ] {
            let script = Script::parse(&format!("reconcile: {reconcile}\n{events}")).unwrap();
            assert_eq!(
                script.check().unwrap_err().to_string(),
                error,
                "{reconcile}"
            );
        }
    }

    #[test]
    fn numbers_resource_versions_and_keeps_uids_stable() {
        let script = Script::parse(SCRIPT).unwrap();
        let steps = script.steps().unwrap();
        let rv = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let Step::Add(add) = &steps[0].step else {
            panic!()
        };
        let Step::Update(update) = &steps[1].step else {
            panic!()
        };
        assert_eq!((rv(add), rv(update)), ("2".to_owned(), "3".to_owned()));
        assert_eq!(add["metadata"]["uid"], update["metadata"]["uid"]);
        assert!(matches!(
            steps[2].step,
            Step::Delete {
                final_state_unknown: true,
                ..
            }
        ));
        assert_eq!(
            steps.iter().map(|s| s.line).collect::<Vec<_>>(),
            [Some(5), Some(6), Some(7)]
        );
    }

    #[test]
    fn handled_kinds_default_to_event_kinds_and_reads_to_all() {
        let script = Script::parse(SCRIPT).unwrap();
        let pod = Gvk::from_api_version("v1", "Pod");
        let rs = Gvk::from_api_version("apps/v1", "ReplicaSet");
        assert_eq!(script.handled_kinds(), BTreeSet::from([pod.clone()]));
        assert_eq!(script.readable_kinds(), BTreeSet::from([pod, rs]));
    }

    #[test]
    fn rejects_steps_without_exactly_one_action_and_unknown_fields() {
        let both = "events:\n  - {add: {apiVersion: v1, kind: Pod, metadata: {name: a}}, delete: {apiVersion: v1, kind: Pod, metadata: {name: a}}}\n";
        let err = Script::parse(both).unwrap().steps().unwrap_err();
        assert_eq!(
            err.to_string(),
            "events[0]: a step has exactly one of add, update, delete"
        );
        let err = Script::parse("evnts: []").unwrap_err().to_string();
        assert!(err.contains("unknown field `evnts`"), "{err}");
        let no_kind = Script::parse("events:\n  - add: {metadata: {name: a}}\n")
            .unwrap()
            .steps()
            .unwrap_err();
        assert_eq!(
            no_kind.to_string(),
            "events[0]: object needs apiVersion and kind"
        );
    }
}

#[cfg(test)]
#[path = "script_props.rs"]
mod props;
