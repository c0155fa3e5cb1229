//! Hot swap: replacing a plugin's version, and applying a changed configuration, without
//! restarting watches or losing events.
//!
//! A new version is loaded, compiled and `init`-ed off the event path with the running version's
//! grants; only then does the plugin's worker swap it in, between two events. If anything fails,
//! the running version keeps serving and the failure is logged and shown in the status. The
//! informers and the cache are not touched: the API server sees no new list or watch.
//!
//! Every change to the running plugins — a config reload (file watcher, SIGHUP, `POST /reload`),
//! a plugin's reload, a plugin added or removed, shutdown — is a [`Request`] to one task,
//! [`serve`], which carries them out one at a time and answers each with its report. So two
//! reloads never interleave: a swap is offered only once the previous one has happened, and
//! every caller gets its own report.

use std::sync::Weak;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use super::{Runtime, RuntimeError};
use crate::config::{HostConfig, PluginConfig};
use crate::error_chain;

/// What a reload did to one plugin. In JSON, one object whose `outcome` names the variant
/// (`swapped`, `unchanged`, `added`, `rewired`, `removed`, `standby`, `failed`) beside the variant's fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    tag = "outcome"
)]
pub enum ReloadOutcome {
    /// A new version was swapped in.
    Swapped {
        /// The new version's content hash.
        version: String,
        /// How long loading and `init` took (off the event path).
        prepare_ms: u64,
        /// With `onSwap: snapshot`: how many cached objects the new version received as initial
        /// adds.
        #[serde(skip_serializing_if = "Option::is_none")]
        snapshot: Option<usize>,
    },
    /// The wasm and settings are unchanged: nothing to do.
    Unchanged,
    /// The plugin was started (new in the config, or failed before).
    Added,
    /// Its subscriptions changed (`handles`, `read`, `indexes`, queue or resync): it was
    /// re-subscribed and received the cache as initial adds.
    Rewired,
    /// It is no longer in the config and was stopped.
    Removed,
    /// With leader election: another replica leads the plugin (or none yet); this one keeps its
    /// informers warm and loads the current wasm when it takes the plugin over.
    Standby,
    /// The change failed; the previous version (if any) keeps running.
    Failed {
        /// Why.
        error: String,
    },
}

impl Runtime {
    /// Reads the configuration file again and applies it (see [`Runtime::apply_config`]). An
    /// invalid file changes nothing; its problems are returned. Goes through the reload task.
    pub async fn reload_config(&self) -> Result<ReloadReport, crate::config::ConfigError> {
        self.request(Request::ReadConfig)
            .await
            .unwrap_or_else(|| Ok(ReloadReport::default()))
    }

    /// [`Runtime::reload_config`], on the reload task.
    async fn read_config(&self) -> Result<ReloadReport, crate::config::ConfigError> {
        let Some(path) = self.config().path.clone() else {
            return Ok(ReloadReport::default());
        };
        let config = HostConfig::load(&path)?;
        Ok(self.apply(config).await)
    }
}

impl ReloadOutcome {
    /// `swapped`, `unchanged`, … as in the JSON.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Swapped { .. } => "swapped",
            Self::Unchanged => "unchanged",
            Self::Added => "added",
            Self::Rewired => "rewired",
            Self::Removed => "removed",
            Self::Standby => "standby",
            Self::Failed { .. } => "failed",
        }
    }

    /// Logs what happened to `plugin`, each value in its own field.
    pub fn log(&self, plugin: &str) {
        let outcome = self.name();
        match self {
            Self::Swapped {
                version,
                prepare_ms,
                snapshot,
            } => tracing::info!(
                plugin.id = %plugin, reload.outcome = outcome, plugin.version = %short(version),
                reload.prepareMs = prepare_ms, reload.snapshot = snapshot, "reload outcome"
            ),
            Self::Failed { error } => {
                tracing::warn!(plugin.id = %plugin, reload.outcome = outcome, error = %error, "reload outcome")
            }
            _ => tracing::info!(plugin.id = %plugin, reload.outcome = outcome, "reload outcome"),
        }
    }
}

impl std::fmt::Display for ReloadOutcome {
    /// `swapped to 3f2a9c81d0e4 (prepared in 41 ms, snapshot of 120 objects)`, `failed: …`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Swapped {
                version,
                prepare_ms,
                snapshot,
            } => {
                write!(
                    f,
                    "swapped to {} (prepared in {prepare_ms} ms",
                    short(version)
                )?;
                if let Some(snapshot) = snapshot {
                    write!(f, ", snapshot of {snapshot} objects")?;
                }
                f.write_str(")")
            }
            Self::Failed { error } => write!(f, "failed: {error}"),
            other => f.write_str(other.name()),
        }
    }
}

/// The first 12 hex digits of a version's content hash.
fn short(version: &str) -> &str {
    version.get(..12).unwrap_or(version)
}

/// What a reload did, plugin by plugin. In JSON:
/// `{"plugins": [{"name": "pod-logger", "outcome": "swapped", "version": "…", "prepareMs": 41}]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReloadReport {
    /// `(plugin, outcome)` in name order.
    #[serde(
        serialize_with = "plugins_as_objects",
        deserialize_with = "plugins_from_objects"
    )]
    pub plugins: Vec<(String, ReloadOutcome)>,
}

/// One entry of [`ReloadReport`]'s JSON: the plugin's name beside its outcome's fields.
#[derive(Serialize)]
struct PluginReload<'a> {
    name: &'a str,
    #[serde(flatten)]
    outcome: &'a ReloadOutcome,
}

/// [`PluginReload`], read back (`wasmformer reload` prints the host's answer).
#[derive(Deserialize)]
struct OwnedPluginReload {
    name: String,
    #[serde(flatten)]
    outcome: ReloadOutcome,
}

fn plugins_from_objects<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, ReloadOutcome)>, D::Error> {
    let entries = Vec::<OwnedPluginReload>::deserialize(deserializer)?;
    Ok(entries.into_iter().map(|e| (e.name, e.outcome)).collect())
}

fn plugins_as_objects<S: serde::Serializer>(
    plugins: &[(String, ReloadOutcome)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(
        plugins
            .iter()
            .map(|(name, outcome)| PluginReload { name, outcome }),
    )
}

impl Runtime {
    /// Loads the plugin's wasm file again and swaps it in if its content changed (or if `force`).
    /// Goes through the reload task.
    pub async fn reload_plugin(
        &self,
        name: &str,
        force: bool,
    ) -> Result<ReloadOutcome, RuntimeError> {
        let name = name.to_owned();
        self.request(|reply| Request::Plugin { name, force, reply })
            .await
            .unwrap_or(Err(RuntimeError::ShuttingDown))
    }

    /// [`Runtime::reload_plugin`], on the reload task.
    async fn reload_one(&self, name: &str, force: bool) -> Result<ReloadOutcome, RuntimeError> {
        if self.stands_by(name).await {
            return Ok(ReloadOutcome::Standby);
        }
        let config = {
            let plugins = self.plugins.lock().await;
            plugins
                .get(name)
                .map(|r| r.config.clone())
                .ok_or_else(|| RuntimeError::UnknownPlugin(name.to_owned()))?
        };
        Ok(self.swap(config, force).await)
    }

    /// Starts `config`'s version of a running plugin and swaps it in.
    async fn swap(&self, config: PluginConfig, force: bool) -> ReloadOutcome {
        let name = config.name.to_string();
        let started = Instant::now();
        let result = async {
            let loaded = self.load(&config).await?;
            let (grants, running_digest, running_config) = {
                let plugins = self.plugins.lock().await;
                let running = plugins
                    .get(&name)
                    .ok_or_else(|| RuntimeError::UnknownPlugin(name.clone()))?;
                (
                    running.grants.clone(),
                    running.dispatched.report().version,
                    running.config.clone(),
                )
            };
            if !force && loaded.digest() == running_digest && running_config == config {
                return Ok(None);
            }
            let grants = self.writes.grant(&config, grants, &self.metrics);
            let instance = self.start_instance(&config, loaded, grants).await?;
            Ok::<_, RuntimeError>(Some(instance))
        }
        .await;
        let prepare_ms = started.elapsed().as_millis() as u64;
        let mut plugins = self.plugins.lock().await;
        let Some(running) = plugins.get_mut(&name) else {
            return ReloadOutcome::Failed {
                error: format!("plugin {name} stopped during the reload"),
            };
        };
        match result {
            Ok(None) => ReloadOutcome::Unchanged,
            Ok(Some(instance)) => {
                let version = instance.plugin().digest().to_owned();
                let swapped = running.dispatched.swap(instance, config.on_swap);
                running.config = config;
                drop(plugins);
                // The worker swaps between two events: at most one call's deadline away. The old
                // instance is dropped here, on the blocking pool, not between two events.
                let snapshot = tokio::task::spawn_blocking(move || {
                    swapped.recv().ok().and_then(|swapped| swapped.snapshot)
                })
                .await
                .ok()
                .flatten();
                tracing::info!(plugin.id = %name, plugin.version = %short(&version), reload.prepareMs = prepare_ms, reload.snapshot = snapshot, "plugin reloaded");
                ReloadOutcome::Swapped {
                    version,
                    prepare_ms,
                    snapshot,
                }
            }
            Err(e) => {
                let error = error_chain(&e);
                tracing::error!(plugin.id = %name, error = %error, "reload failed; the running version keeps serving");
                running.dispatched.swap_failed(error.clone());
                ReloadOutcome::Failed { error }
            }
        }
    }

    /// Applies `config`: starts new plugins, stops removed ones, swaps plugins whose wasm,
    /// `config` block or limits changed, and re-subscribes plugins whose subscriptions changed.
    /// Host-level settings other than plugins take effect at the next start. Goes through the
    /// reload task.
    pub async fn apply_config(&self, config: HostConfig) -> ReloadReport {
        self.request(|reply| Request::Apply(config, reply))
            .await
            .unwrap_or_default()
    }

    /// [`Runtime::apply_config`], on the reload task.
    async fn apply(&self, config: HostConfig) -> ReloadReport {
        let running: Vec<(String, PluginConfig)> = self
            .plugins
            .lock()
            .await
            .iter()
            .map(|(name, r)| (name.clone(), r.config.clone()))
            .collect();
        self.warm
            .lock()
            .expect("warm lock")
            .retain(|name, _| config.plugin(name).is_some());
        {
            let mut current = self.config.lock().expect("config lock");
            current.plugins = config.plugins.clone();
            current.base_dir = config.base_dir.clone();
            current.path = config.path.clone().or(current.path.take());
        }
        let mut report = ReloadReport::default();
        for (name, _) in running
            .iter()
            .filter(|(name, _)| config.plugin(name).is_none())
        {
            let outcome = match self.stop_plugin(name).await {
                Ok(()) => ReloadOutcome::Removed,
                Err(e) => ReloadOutcome::Failed {
                    error: error_chain(&e),
                },
            };
            report.plugins.push((name.clone(), outcome));
        }
        // Only once the removed plugins have stopped: their Leases may go to another replica.
        if let Some(share) = &self.share {
            for name in share.plugins() {
                if config.plugin(&name).is_none() {
                    share.forget(&name).await;
                }
            }
        }
        // A plugin that failed to start and is no longer configured leaves the status.
        let forgotten: Vec<String> = {
            let mut failed = self.failed.lock().expect("failed lock");
            let gone: Vec<String> = failed
                .keys()
                .filter(|name| config.plugin(name).is_none())
                .cloned()
                .collect();
            gone.iter().for_each(|name| drop(failed.remove(name)));
            gone
        };
        report.plugins.extend(
            forgotten
                .into_iter()
                .map(|name| (name, ReloadOutcome::Removed)),
        );
        for plugin in config.plugins {
            let name = plugin.name.to_string();
            let previous = running.iter().find(|(n, _)| *n == name).map(|(_, c)| c);
            let outcome = match previous {
                Some(previous) if same_subscriptions(previous, &plugin) => {
                    self.swap(plugin, false).await
                }
                Some(_) => match self.start_plugin(plugin).await {
                    Ok(()) => ReloadOutcome::Rewired,
                    Err(e) => {
                        // The running version keeps serving with its old subscriptions: shown on
                        // it, like a failed swap, not as a second entry of the same plugin.
                        let error = error_chain(&e);
                        tracing::error!(plugin.id = %name, error = %error, "re-subscription failed; the running version keeps serving");
                        if let Some(running) = self.plugins.lock().await.get(&name) {
                            running.dispatched.swap_failed(error.clone());
                        }
                        ReloadOutcome::Failed { error }
                    }
                },
                None => match self.start_plugin(plugin).await {
                    Ok(()) if self.stands_by(&name).await => ReloadOutcome::Standby,
                    Ok(()) => ReloadOutcome::Added,
                    Err(e) => {
                        self.record_failure(&name, &e);
                        ReloadOutcome::Failed {
                            error: error_chain(&e),
                        }
                    }
                },
            };
            report.plugins.push((name, outcome));
        }
        report.plugins.sort_by(|a, b| a.0.cmp(&b.0));
        report
    }
}

/// Whether two versions of a plugin's config subscribe to the same things (so a swap suffices).
fn same_subscriptions(a: &PluginConfig, b: &PluginConfig) -> bool {
    a.handles == b.handles
        && a.read == b.read
        && a.indexes == b.indexes
        && a.resync == b.resync
        && a.lifecycle == b.lifecycle
        && a.max_queued_events == b.max_queued_events
        && a.reconcile == b.reconcile
}

/// A change to the running plugins, with where its report goes.
pub(super) enum Request {
    /// Re-read the config file and apply it.
    ReadConfig(oneshot::Sender<Result<ReloadReport, crate::config::ConfigError>>),
    /// Apply this config.
    Apply(HostConfig, oneshot::Sender<ReloadReport>),
    /// Reload one plugin's wasm.
    Plugin {
        /// The plugin.
        name: String,
        /// Swap even if the wasm and settings are unchanged.
        force: bool,
        /// Its outcome.
        reply: oneshot::Sender<Result<ReloadOutcome, RuntimeError>>,
    },
    /// Start (or re-subscribe) a plugin.
    Add(PluginConfig, oneshot::Sender<Result<(), RuntimeError>>),
    /// Stop a plugin.
    Remove(String, oneshot::Sender<Result<(), RuntimeError>>),
    /// Stop every plugin; refuse changes from now on.
    Shutdown(oneshot::Sender<()>),
    /// This replica leads in this term: start the plugins from the warm caches.
    Lead(u64, oneshot::Sender<()>),
    /// This replica stopped leading: drop the plugins' queues, keep their informers.
    Follow(oneshot::Sender<()>),
    /// `scope: plugin`: this replica leads this plugin in this term: start it from the warm cache.
    LeadPlugin(String, u64, oneshot::Sender<()>),
    /// `scope: plugin`: this replica stopped leading this plugin: drop its queue.
    FollowPlugin(String, oneshot::Sender<()>),
    /// `scope: plugin`: hand this plugin back (above the fair share): stop it, then release its
    /// Lease.
    HandBack(String, oneshot::Sender<()>),
}

impl Runtime {
    /// Sends a request to the reload task and awaits its answer; `None` if the task is gone.
    pub(super) async fn request<T>(
        &self,
        request: impl FnOnce(oneshot::Sender<T>) -> Request,
    ) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        self.reloads.send(request(reply)).ok()?;
        answer.await.ok()
    }
}

/// The reload task: carries out `requests` one at a time until the runtime is dropped. A
/// request whose caller stopped waiting (an HTTP client that went away) is still carried out
/// in full.
pub(super) async fn serve(runtime: Weak<Runtime>, mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut shut_down = false;
    while let Some(request) = requests.recv().await {
        // Held for one request only: the task must not keep the runtime alive.
        let Some(runtime) = runtime.upgrade() else {
            break;
        };
        match request {
            Request::ReadConfig(reply) if shut_down => answer(reply, Ok(ReloadReport::default())),
            Request::ReadConfig(reply) => answer(reply, runtime.read_config().await),
            Request::Apply(_, reply) if shut_down => answer(reply, ReloadReport::default()),
            Request::Apply(config, reply) => answer(reply, runtime.apply(config).await),
            Request::Plugin { reply, .. } if shut_down => {
                answer(reply, Err(RuntimeError::ShuttingDown))
            }
            Request::Plugin { name, force, reply } => {
                answer(reply, runtime.reload_one(&name, force).await)
            }
            Request::Add(_, reply) if shut_down => answer(reply, Err(RuntimeError::ShuttingDown)),
            Request::Add(plugin, reply) => answer(reply, runtime.start_plugin(plugin).await),
            Request::Remove(_, reply) if shut_down => {
                answer(reply, Err(RuntimeError::ShuttingDown))
            }
            Request::Remove(name, reply) => answer(reply, runtime.stop_plugin(&name).await),
            Request::Lead(_, reply)
            | Request::Follow(reply)
            | Request::LeadPlugin(_, _, reply)
            | Request::FollowPlugin(_, reply)
            | Request::HandBack(_, reply)
                if shut_down =>
            {
                answer(reply, ())
            }
            Request::LeadPlugin(name, term, reply) => {
                runtime.lead_plugin(&name, term).await;
                answer(reply, ());
            }
            Request::FollowPlugin(name, reply) => {
                runtime.follow_plugin(&name).await;
                answer(reply, ());
            }
            Request::HandBack(name, reply) => {
                runtime.hand_back(&name).await;
                answer(reply, ());
            }
            Request::Lead(term, reply) => {
                runtime.lead(term).await;
                answer(reply, ());
            }
            Request::Follow(reply) => {
                runtime.follow().await;
                answer(reply, ());
            }
            Request::Shutdown(reply) => {
                if !shut_down {
                    shut_down = true;
                    runtime.stop_all().await;
                }
                let _ = reply.send(());
            }
        }
    }
}

/// Sends a request's answer; a caller that stopped waiting does not need it.
fn answer<T>(reply: oneshot::Sender<T>, answer: T) {
    let _ = reply.send(answer);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_a_list_of_objects_with_camel_case_fields() {
        let report = ReloadReport {
            plugins: vec![
                (
                    "a".into(),
                    ReloadOutcome::Swapped {
                        version: "0123456789abcdef".into(),
                        prepare_ms: 41,
                        snapshot: Some(3),
                    },
                ),
                (
                    "b".into(),
                    ReloadOutcome::Swapped {
                        version: "fedcba9876543210".into(),
                        prepare_ms: 2,
                        snapshot: None,
                    },
                ),
                (
                    "c".into(),
                    ReloadOutcome::Failed {
                        error: "plugin c: cannot read c.wasm".into(),
                    },
                ),
                ("d".into(), ReloadOutcome::Unchanged),
            ],
        };
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            serde_json::json!({"plugins": [
                {"name": "a", "outcome": "swapped", "version": "0123456789abcdef", "prepareMs": 41, "snapshot": 3},
                {"name": "b", "outcome": "swapped", "version": "fedcba9876543210", "prepareMs": 2},
                {"name": "c", "outcome": "failed", "error": "plugin c: cannot read c.wasm"},
                {"name": "d", "outcome": "unchanged"},
            ]})
        );
        let read_back: ReloadReport =
            serde_json::from_value(serde_json::to_value(&report).unwrap()).unwrap();
        assert_eq!(read_back, report);
        assert_eq!(
            report.plugins[0].1.to_string(),
            "swapped to 0123456789ab (prepared in 41 ms, snapshot of 3 objects)"
        );
        assert_eq!(
            report.plugins[2].1.to_string(),
            "failed: plugin c: cannot read c.wasm"
        );
    }
}
