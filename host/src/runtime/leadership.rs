//! Leadership as the runtime sees it: what `/status` shows, and what the reload task does when
//! this replica starts or stops leading — the whole host (`scope: host`) or one plugin
//! (`scope: plugin`), or hands a plugin back to share them evenly (see [`share`](super::share)).

use std::time::Duration;

use super::reload::Request;
use super::{LeadershipReport, Runtime, leader};
use crate::dispatch::rfc3339;

impl Runtime {
    /// Leadership as `/status` shows it.
    pub fn leadership(&self) -> LeadershipReport {
        if let Some(election) = &self.election {
            return election.report();
        }
        if let Some(share) = &self.share {
            let (plugins, since) = share.reports();
            return LeadershipReport {
                enabled: true,
                leader: plugins.iter().any(|p| p.leader),
                identity: Some(share.identity().to_owned()),
                holder: None,
                lease: None,
                since: Some(rfc3339(since.unwrap_or(self.started_at))),
                scope: "plugin",
                replicas: share.replicas(),
                fair_share: share.fair_share(),
                plugins,
            };
        }
        LeadershipReport {
            enabled: false,
            leader: true,
            identity: None,
            holder: None,
            lease: None,
            since: Some(rfc3339(self.started_at)),
            scope: "host",
            replicas: None,
            fair_share: None,
            plugins: Vec::new(),
        }
    }

    /// Whether this replica calls handlers (always, without leader election); under
    /// `scope: plugin`, whether it leads at least one plugin.
    pub fn is_leading(&self) -> bool {
        match (&self.election, &self.share) {
            (Some(election), _) => election.is_leading(),
            (None, Some(share)) => share.leads_any(),
            (None, None) => true,
        }
    }

    /// This replica's identity in the Leases; `None` without leader election.
    pub(super) fn identity(&self) -> Option<&str> {
        match (&self.election, &self.share) {
            (Some(election), _) => Some(election.identity()),
            (None, Some(share)) => Some(share.identity()),
            (None, None) => None,
        }
    }

    /// With leader election: whether `name` is configured and this replica does not run it
    /// because another replica leads it (or none does yet), so it keeps only its informers warm.
    pub(super) async fn stands_by(&self, name: &str) -> bool {
        let leads = match (&self.election, &self.share) {
            (None, None) => return false,
            (Some(election), _) => election.is_leading(),
            (None, Some(share)) => share.leads(name),
        };
        self.config().plugin(name).is_some()
            && !leads
            && !self.plugins.lock().await.contains_key(name)
    }

    /// On the reload task: this replica became leader in `term`; starts every configured plugin
    /// from its warm cache (initial adds, then live events).
    pub(super) async fn lead(&self, term: u64) {
        if self.terms.current() != term {
            return; // already over
        }
        let running: Vec<String> = self.plugins.lock().await.keys().cloned().collect();
        for plugin in self.config().plugins {
            if running.iter().any(|name| name == plugin.name.as_str()) {
                continue;
            }
            if let Err(e) = self.start_plugin(plugin.clone()).await {
                self.record_failure(plugin.name.as_str(), &e);
            }
        }
    }

    /// On the reload task, `scope: plugin`: this replica leads `name` in `term`; starts it from
    /// its warm cache.
    pub(super) async fn lead_plugin(&self, name: &str, term: u64) {
        let Some(share) = &self.share else {
            return;
        };
        if share.get(name).is_none_or(|e| e.terms().current() != term)
            || self.plugins.lock().await.contains_key(name)
        {
            return; // already over, or running
        }
        let Some(plugin) = self.config().plugin(name).cloned() else {
            return;
        };
        if let Err(e) = self.start_plugin(plugin).await {
            self.record_failure(name, &e);
        }
    }

    /// On the reload task, `scope: plugin`: this replica stopped leading `name`. Its gate closed
    /// already; this drops what its worker had queued, keeping the informers warm.
    pub(super) async fn follow_plugin(&self, name: &str) {
        let removed = self.plugins.lock().await.remove(name);
        if let Some(removed) = removed {
            self.metrics.plugin_leader(name, false);
            tokio::task::spawn_blocking(move || removed.dispatched.stop(Duration::ZERO))
                .await
                .expect("plugin stop task panicked");
            tracing::info!(plugin.id = %name, "plugin stands by: another replica may lead it");
        }
    }

    /// On the reload task, `scope: plugin`: gives `name` back (this replica leads more than its
    /// share, or withdraws a campaign): closes its gate, stops its worker (a call in progress
    /// ends first), and only then releases its Lease, so no two replicas call its handlers at
    /// once.
    pub(super) async fn hand_back(&self, name: &str) {
        let Some(election) = self.share.as_ref().and_then(|s| s.get(name)) else {
            return;
        };
        let leading = election.is_leading();
        election.withdraw();
        self.follow_plugin(name).await;
        election.stand().await;
        if leading {
            tracing::info!(plugin.id = %name, "plugin handed back");
        } else {
            tracing::info!(plugin.id = %name, "campaign withdrawn");
        }
    }

    /// On the reload task: this replica stopped leading. The gate closed already (workers call
    /// no more handlers); this drops what they had queued and their subscriptions, keeping the
    /// informers warm.
    pub(super) async fn follow(&self) {
        self.stop_plugins(Duration::ZERO).await;
    }
}

/// Carries leadership transitions to the reload task (the gate has already moved) and the
/// metrics, until the runtime is dropped.
pub(super) async fn follow_leadership(
    runtime: std::sync::Weak<Runtime>,
    mut transitions: tokio::sync::mpsc::UnboundedReceiver<(Option<String>, leader::Transition)>,
) {
    use leader::Transition::{Follow, Lead};
    while let Some((plugin, transition)) = transitions.recv().await {
        let Some(runtime) = runtime.upgrade() else {
            return;
        };
        let leading = matches!(transition, Lead(_));
        match plugin {
            None => {
                runtime.metrics.leader_transition(leading);
                match transition {
                    Lead(term) => runtime.request(|reply| Request::Lead(term, reply)).await,
                    Follow => runtime.request(Request::Follow).await,
                };
            }
            Some(plugin) => {
                runtime.metrics.plugin_leader(&plugin, leading);
                runtime.metrics.leader_transition(runtime.is_leading());
                match transition {
                    Lead(term) => {
                        runtime
                            .request(|reply| Request::LeadPlugin(plugin, term, reply))
                            .await
                    }
                    Follow => {
                        runtime
                            .request(|reply| Request::FollowPlugin(plugin, reply))
                            .await
                    }
                };
            }
        }
    }
}
