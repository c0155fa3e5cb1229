//! Leader election over a `coordination.k8s.io/v1` Lease, with client-go's semantics.
//!
//! The Lease protocol (create, acquire, renew, take over an expired lease, release) is
//! kube-lease-manager's. It has no renewDeadline or retryPeriod, so two small tasks of ours drive
//! it:
//!
//! - the **driver** lets the crate act for at most `retryPeriod` at a time (it renews every
//!   `retryPeriod`: its grace is `leaseDuration - retryPeriod`), then reads the Lease itself.
//!   The crate re-reads a Lease only when its copy expires, so a follower that sees the Lease
//!   free (released on SIGTERM) or expired starts a fresh manager, which takes it at once.
//! - the **clock** decides: this replica leads while the Lease names it and its last renewal is
//!   less than `renewDeadline` old. It ends the term on its own timer, whatever the API server
//!   does, so handlers stop `leaseDuration - renewDeadline` before any follower may take over.
//!
//! The runtime sees only transitions (`Transition`) and gates its workers with
//! [`Terms`](crate::dispatch::Terms); informers never learn who leads.
//!
//! One [`Election`] is one Lease. Under `scope: host` there is one, always campaigning; under
//! `scope: plugin` (see [`share`](super::share)) there is one per plugin plus the replica's
//! membership Lease, and a plugin's election campaigns only while the share task lets it
//! ([`Election::campaign`], [`Election::stand`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseCreateMode, LeaseManager, LeaseParams};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::LeaderElection;
use crate::dispatch::{Terms, rfc3339};

/// What `/status` shows of leadership (`leadership`). Every key is camelCase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeadershipReport {
    /// Whether `host.leaderElection.enabled` is set.
    pub enabled: bool,
    /// Whether this replica calls handlers now (always, without election).
    pub leader: bool,
    /// This replica's identity in the Lease; `null` without election.
    pub identity: Option<String>,
    /// Who the Lease names now, as last read; `null` when free or without election.
    pub holder: Option<String>,
    /// The Lease, `namespace/name`; `null` without election.
    pub lease: Option<String>,
    /// When this replica last started or stopped leading (RFC 3339); without election, when it
    /// started. Under `scope: plugin`, when it last started or stopped leading a plugin.
    pub since: Option<String>,
    /// `host` (one Lease for every plugin) or `plugin` (one Lease per plugin).
    pub scope: &'static str,
    /// Under `scope: plugin`: how many replicas share the plugins (unexpired membership Leases),
    /// as last counted; `null` otherwise.
    pub replicas: Option<usize>,
    /// Under `scope: plugin`: how many plugins this replica may lead,
    /// `ceil(plugins / replicas)`; `null` otherwise.
    pub fair_share: Option<usize>,
    /// Under `scope: plugin`: every configured plugin's Lease, in name order; empty otherwise.
    pub plugins: Vec<PluginLeadership>,
}

/// One plugin's Lease under `scope: plugin` (`/status`'s `leadership.plugins[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginLeadership {
    /// The plugin.
    pub name: String,
    /// Whether this replica calls its handlers now.
    pub leader: bool,
    /// Who its Lease names now, as last read; `null` when free.
    pub holder: Option<String>,
    /// Its Lease, `namespace/name`.
    pub lease: String,
    /// When this replica last started or stopped leading it (RFC 3339).
    pub since: String,
}

/// This replica becoming leader (with its new term) or follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    Lead(u64),
    Follow,
}

/// Where an election sends its transitions: with the plugin it covers (`None`: the whole host).
pub(super) type Transitions = mpsc::UnboundedSender<(Option<String>, Transition)>;

/// What the driver is asked to do.
enum Command {
    /// Campaign: acquire the Lease when it is free or expired, and renew it.
    Campaign,
    /// Stop campaigning: release the Lease if held (after the handlers stopped), keep reading it.
    Stand(oneshot::Sender<()>),
    /// Release the Lease if held and stop.
    Quit(oneshot::Sender<()>),
}

/// The Lease as the driver last read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Observed {
    /// Who the Lease names.
    pub(super) holder: Option<String>,
    renewed: Option<SystemTime>,
    duration: Option<Duration>,
}

impl Observed {
    pub(super) fn from_lease(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity,
            renewed: spec.renew_time.map(|t| SystemTime::from(t.0)),
            duration: spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(0) as u64)),
        }
    }

    /// Whether another replica may take the Lease now: free, or not renewed within its duration.
    pub(super) fn is_takeable(&self, now: SystemTime) -> bool {
        match (&self.holder, self.renewed, self.duration) {
            (None, _, _) => true,
            (Some(_), Some(renewed), Some(duration)) => now >= renewed + duration,
            (Some(_), _, _) => true,
        }
    }
}

/// One replica's part in the election for one Lease.
pub(super) struct Election {
    settings: LeaderElection,
    identity: String,
    /// The Lease's name.
    lease_name: String,
    /// The plugin it covers (`scope: plugin`); `None`: the whole host, or membership.
    plugin: Option<String>,
    terms: Terms,
    state: Mutex<State>,
    observed: watch::Receiver<Observed>,
    commands: mpsc::UnboundedSender<Command>,
    transitions: Option<Transitions>,
}

#[derive(Debug)]
struct State {
    leading: bool,
    /// Whether this replica campaigns for the Lease: it leads only while it does.
    campaign: bool,
    since: SystemTime,
    term: u64,
}

/// Which Lease an [`Election`] is for and how it starts.
pub(super) struct Ballot {
    /// The Lease's name.
    pub lease_name: String,
    /// The plugin it covers, if one.
    pub plugin: Option<String>,
    /// Whether to campaign from the start.
    pub campaign: bool,
    /// Where transitions go; `None`: nowhere (membership).
    pub transitions: Option<Transitions>,
}

impl Election {
    /// Starts the election for the host's one Lease (`scope: host`), campaigning from the start;
    /// transitions go to `transitions` (after the gate has already been opened or closed).
    pub(super) fn start(
        client: Client,
        settings: LeaderElection,
        terms: Terms,
        transitions: Transitions,
    ) -> Arc<Self> {
        let identity = settings.identity.clone().unwrap_or_else(default_identity);
        let ballot = Ballot {
            lease_name: settings.lease_name.clone(),
            plugin: None,
            campaign: true,
            transitions: Some(transitions),
        };
        Self::start_for(client, settings, identity, ballot, terms)
    }

    /// Starts the driver and the clock for the Lease `ballot` names.
    pub(super) fn start_for(
        client: Client,
        settings: LeaderElection,
        identity: String,
        ballot: Ballot,
        terms: Terms,
    ) -> Arc<Self> {
        let (observe, observed) = watch::channel(Observed::default());
        let (commands, received) = mpsc::unbounded_channel();
        let election = Arc::new(Self {
            settings: settings.clone(),
            identity: identity.clone(),
            lease_name: ballot.lease_name.clone(),
            plugin: ballot.plugin,
            terms,
            state: Mutex::new(State {
                leading: false,
                campaign: ballot.campaign,
                since: SystemTime::now(),
                term: 0,
            }),
            observed: observed.clone(),
            commands,
            transitions: ballot.transitions,
        });
        tracing::info!(leader.identity = %identity, leader.lease = %election.lease(), leader.campaign = ballot.campaign, "leader election started");
        let driver = Driver {
            client,
            settings,
            lease_name: ballot.lease_name,
            identity,
            observe,
        };
        tokio::spawn(driver.run(ballot.campaign, received));
        tokio::spawn(clock(Arc::downgrade(&election), observed));
        election
    }

    /// This replica's identity.
    pub(super) fn identity(&self) -> &str {
        &self.identity
    }

    /// `namespace/name`.
    pub(super) fn lease(&self) -> String {
        format!("{}/{}", self.settings.namespace, self.lease_name)
    }

    /// The terms this election opens and closes.
    pub(super) fn terms(&self) -> &Terms {
        &self.terms
    }

    /// The Lease as last read.
    pub(super) fn observed(&self) -> Observed {
        self.observed.borrow().clone()
    }

    /// Whether this replica campaigns for the Lease (holds it or tries to).
    pub(super) fn is_campaigning(&self) -> bool {
        self.state.lock().expect("leader state lock").campaign
    }

    /// Starts campaigning: the driver acquires the Lease when it is free or expired.
    pub(super) fn campaign(&self) {
        self.state.lock().expect("leader state lock").campaign = true;
        let _ = self.commands.send(Command::Campaign);
    }

    /// Stops campaigning and ends the term at once (handlers stop); the Lease is not released
    /// yet: call [`Election::stand`] once the plugin's worker has stopped.
    pub(super) fn withdraw(&self) {
        self.state.lock().expect("leader state lock").campaign = false;
        self.set(false);
    }

    /// [`Election::withdraw`], then releases the Lease if this replica holds it, so another
    /// replica may take it at once; keeps reading it.
    pub(super) async fn stand(&self) {
        self.withdraw();
        let (done, released) = oneshot::channel();
        if self.commands.send(Command::Stand(done)).is_ok() {
            // The driver answers between two steps, each at most `retryPeriod` long.
            let _ = tokio::time::timeout(self.settings.retry_period * 3, released).await;
        }
    }

    /// This plugin's line of the `/status` view.
    pub(super) fn plugin_report(&self) -> PluginLeadership {
        let state = self.state.lock().expect("leader state lock");
        PluginLeadership {
            name: self.plugin.clone().unwrap_or_default(),
            leader: state.leading,
            holder: self.observed.borrow().holder.clone(),
            lease: self.lease(),
            since: rfc3339(state.since),
        }
    }

    /// When this replica last started or stopped leading.
    pub(super) fn since(&self) -> SystemTime {
        self.state.lock().expect("leader state lock").since
    }

    /// Whether this replica leads now.
    pub(super) fn is_leading(&self) -> bool {
        self.state.lock().expect("leader state lock").leading
    }

    /// The `/status` view.
    pub(super) fn report(&self) -> LeadershipReport {
        let state = self.state.lock().expect("leader state lock");
        LeadershipReport {
            enabled: true,
            leader: state.leading,
            identity: Some(self.identity.clone()),
            holder: self.observed.borrow().holder.clone(),
            lease: Some(self.lease()),
            since: Some(rfc3339(state.since)),
            scope: "host",
            replicas: None,
            fair_share: None,
            plugins: Vec::new(),
        }
    }

    /// Ends the term (handlers stop at once), stops the driver and releases the Lease if this
    /// replica holds it, so a follower takes over within about `retryPeriod`. Called after the
    /// plugins have drained.
    pub(super) async fn release(&self) {
        self.withdraw();
        let (done, released) = oneshot::channel();
        if self.commands.send(Command::Quit(done)).is_ok() {
            // The driver answers between two steps, each at most `retryPeriod` long.
            let _ = tokio::time::timeout(self.settings.retry_period * 3, released).await;
        }
    }

    /// Opens (a new term) or closes the gate — it opens only while this replica campaigns —
    /// and sends the transition if there was one.
    fn set(&self, leading: bool) {
        let mut state = self.state.lock().expect("leader state lock");
        let leading = leading && state.campaign;
        if state.leading == leading {
            return;
        }
        state.leading = leading;
        state.since = SystemTime::now();
        if leading {
            state.term += 1;
            self.terms.begin(state.term);
            tracing::info!(leader.identity = %self.identity, leader.lease = %self.lease(), leader.term = state.term, "became leader");
        } else {
            self.terms.end();
            tracing::warn!(leader.identity = %self.identity, leader.lease = %self.lease(), "stopped leading");
        }
        let transition = if leading {
            Transition::Lead(state.term)
        } else {
            Transition::Follow
        };
        drop(state);
        if let Some(transitions) = &self.transitions {
            let _ = transitions.send((self.plugin.clone(), transition));
        }
    }
}

/// `<hostname>_<pid>`, like client-go's `<hostname>_<uuid>`: unique per process.
pub(super) fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "wasmformer".to_owned());
    format!("{host}_{}", std::process::id())
}

/// The clock: leads while the Lease names this replica and was renewed less than
/// `renewDeadline` ago; ends the term on its own timer when no renewal is seen in time.
async fn clock(election: std::sync::Weak<Election>, mut observed: watch::Receiver<Observed>) {
    loop {
        let Some(election) = election.upgrade() else {
            return;
        };
        let now = SystemTime::now();
        let seen = observed.borrow_and_update().clone();
        let valid_until = (seen.holder.as_deref() == Some(election.identity.as_str()))
            .then_some(seen.renewed)
            .flatten()
            .map(|renewed| renewed + election.settings.renew_deadline);
        let leading = valid_until.is_some_and(|until| now < until);
        election.set(leading);
        drop(election);
        let wait = valid_until
            .filter(|_| leading)
            .and_then(|until| until.duration_since(now).ok());
        match wait {
            Some(wait) => {
                tokio::select! {
                    changed = observed.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(wait) => {}
                }
            }
            None => {
                if observed.changed().await.is_err() {
                    return;
                }
            }
        }
    }
}

/// The driver of one Lease: while campaigning, runs the crate's protocol in `retryPeriod`
/// slices; campaigning or not, reads the Lease after each.
struct Driver {
    client: Client,
    settings: LeaderElection,
    lease_name: String,
    identity: String,
    observe: watch::Sender<Observed>,
}

impl Driver {
    async fn run(self, mut campaign: bool, mut commands: mpsc::UnboundedReceiver<Command>) {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let retry = self.settings.retry_period;
        let mut manager: Option<LeaseManager> = None;
        loop {
            if campaign && manager.is_none() {
                manager = self.manager().await;
            }
            let command = if let Some(current) = &manager {
                tokio::select! {
                    step = tokio::time::timeout(retry, current.changed()) => {
                        if let Ok(Err(e)) = step {
                            tracing::warn!(leader.lease = %self.lease_name, error = %e, "lease step failed");
                            manager = None;
                        }
                        None
                    }
                    command = commands.recv() => Some(command),
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep(retry) => None,
                    command = commands.recv() => Some(command),
                }
            };
            match command {
                None => {}
                Some(Some(Command::Campaign)) => campaign = true,
                Some(Some(Command::Stand(done))) => {
                    campaign = false;
                    if let Some(current) = manager.take() {
                        self.release(&current).await;
                    }
                    let _ = done.send(());
                }
                Some(Some(Command::Quit(done))) => {
                    if let Some(current) = manager.take() {
                        self.release(&current).await;
                    }
                    let _ = done.send(());
                    return;
                }
                Some(None) => return,
            }
            match tokio::time::timeout(retry, api.get_opt(&self.lease_name)).await {
                Ok(Ok(lease)) => {
                    let seen = lease.as_ref().map(Observed::from_lease).unwrap_or_default();
                    if campaign
                        && seen.holder.as_deref() != Some(self.identity.as_str())
                        && seen.is_takeable(SystemTime::now())
                    {
                        // The crate trusts its copy until it expires: start afresh to take it now.
                        manager = None;
                    }
                    self.observe.send_if_modified(|current| {
                        let changed = *current != seen;
                        *current = seen;
                        changed
                    });
                }
                Ok(Err(e)) => {
                    tracing::warn!(leader.lease = %self.lease_name, error = %e, "cannot read the lease")
                }
                Err(_) => {
                    tracing::warn!(leader.lease = %self.lease_name, "reading the lease timed out")
                }
            }
        }
    }

    /// A fresh manager of the Lease (created if missing), or `None` if the API did not answer.
    async fn manager(&self) -> Option<LeaseManager> {
        let lease_secs = self.settings.lease_duration.as_secs();
        let grace = lease_secs
            .saturating_sub(self.settings.renew_every_secs())
            .max(1);
        let params = LeaseParams::new(self.identity.clone(), lease_secs, grace);
        let built = tokio::time::timeout(
            self.settings.retry_period,
            LeaseManager::new(
                self.client.clone(),
                self.lease_name.clone(),
                self.settings.namespace.clone(),
                params,
                LeaseCreateMode::AutoCreate,
            ),
        )
        .await;
        match built {
            Ok(Ok(built)) => Some(built),
            Ok(Err(e)) => {
                tracing::warn!(leader.lease = %self.lease_name, error = %e, "cannot reach the lease");
                None
            }
            Err(_) => {
                tracing::warn!(leader.lease = %self.lease_name, "reaching the lease timed out");
                None
            }
        }
    }

    /// Releases the Lease if this replica holds it (the crate leaves another holder's alone).
    async fn release(&self, manager: &LeaseManager) {
        match manager.release().await {
            Ok(()) => tracing::info!(leader.lease = %self.lease_name, "lease released"),
            Err(e) => {
                tracing::warn!(leader.lease = %self.lease_name, error = %e, "cannot release the lease")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_takeable_when_free_or_expired() {
        let now = SystemTime::now();
        let held = Observed {
            holder: Some("a".to_owned()),
            renewed: Some(now - Duration::from_secs(3)),
            duration: Some(Duration::from_secs(4)),
        };
        assert!(!held.is_takeable(now));
        assert!(held.is_takeable(now + Duration::from_secs(1)));
        assert!(Observed::default().is_takeable(now));
    }
}
