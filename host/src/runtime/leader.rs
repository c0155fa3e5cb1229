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

use std::sync::Mutex;
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
    /// started.
    pub since: Option<String>,
}

/// This replica becoming leader (with its new term) or follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transition {
    Lead(u64),
    Follow,
}

/// The Lease as the driver last read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Observed {
    holder: Option<String>,
    renewed: Option<SystemTime>,
    duration: Option<Duration>,
}

impl Observed {
    fn from_lease(lease: &Lease) -> Self {
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
    fn is_takeable(&self, now: SystemTime) -> bool {
        match (&self.holder, self.renewed, self.duration) {
            (None, _, _) => true,
            (Some(_), Some(renewed), Some(duration)) => now >= renewed + duration,
            (Some(_), _, _) => true,
        }
    }
}

/// One replica's part in the election.
pub(super) struct Election {
    settings: LeaderElection,
    identity: String,
    terms: Terms,
    state: Mutex<State>,
    observed: watch::Receiver<Observed>,
    release: Mutex<Option<oneshot::Sender<oneshot::Sender<()>>>>,
}

#[derive(Debug)]
struct State {
    leading: bool,
    since: SystemTime,
    term: u64,
}

impl Election {
    /// Starts the driver and the clock; transitions arrive on the returned receiver (after the
    /// gate has already been opened or closed).
    pub(super) fn start(
        client: Client,
        settings: LeaderElection,
        terms: Terms,
    ) -> (std::sync::Arc<Self>, mpsc::UnboundedReceiver<Transition>) {
        let identity = settings.identity.clone().unwrap_or_else(default_identity);
        let (observe, observed) = watch::channel(Observed::default());
        let (release, released) = oneshot::channel();
        let election = std::sync::Arc::new(Self {
            settings: settings.clone(),
            identity: identity.clone(),
            terms,
            state: Mutex::new(State {
                leading: false,
                since: SystemTime::now(),
                term: 0,
            }),
            observed: observed.clone(),
            release: Mutex::new(Some(release)),
        });
        let (transitions, receiver) = mpsc::unbounded_channel();
        tracing::info!(leader.identity = %identity, leader.lease = %election.lease(), "leader election started");
        tokio::spawn(drive(client, settings, identity, observe, released));
        tokio::spawn(clock(
            std::sync::Arc::downgrade(&election),
            observed,
            transitions,
        ));
        (election, receiver)
    }

    /// This replica's identity.
    pub(super) fn identity(&self) -> &str {
        &self.identity
    }

    /// `namespace/name`.
    pub(super) fn lease(&self) -> String {
        format!("{}/{}", self.settings.namespace, self.settings.lease_name)
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
        }
    }

    /// Ends the term (handlers stop at once), stops the driver and releases the Lease if this
    /// replica holds it, so a follower takes over within about `retryPeriod`. Called after the
    /// plugins have drained.
    pub(super) async fn release(&self) {
        self.set(false);
        let Some(release) = self.release.lock().expect("release lock").take() else {
            return;
        };
        let (done, released) = oneshot::channel();
        if release.send(done).is_ok() {
            // The driver answers between two steps, each at most `retryPeriod` long.
            let _ = tokio::time::timeout(self.settings.retry_period * 3, released).await;
        }
    }

    /// Opens (a new term) or closes the gate; returns the transition if there was one.
    fn set(&self, leading: bool) -> Option<Transition> {
        let mut state = self.state.lock().expect("leader state lock");
        if state.leading == leading {
            return None;
        }
        state.leading = leading;
        state.since = SystemTime::now();
        if leading {
            state.term += 1;
            self.terms.begin(state.term);
            tracing::info!(leader.identity = %self.identity, leader.term = state.term, "became leader");
            Some(Transition::Lead(state.term))
        } else {
            self.terms.end();
            tracing::warn!(leader.identity = %self.identity, "stopped leading");
            Some(Transition::Follow)
        }
    }
}

/// `<hostname>_<pid>`, like client-go's `<hostname>_<uuid>`: unique per process.
fn default_identity() -> String {
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
async fn clock(
    election: std::sync::Weak<Election>,
    mut observed: watch::Receiver<Observed>,
    transitions: mpsc::UnboundedSender<Transition>,
) {
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
        if let Some(transition) = election.set(leading)
            && transitions.send(transition).is_err()
        {
            return;
        }
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

/// The driver: runs the crate's protocol in `retryPeriod` slices and reads the Lease after each.
async fn drive(
    client: Client,
    settings: LeaderElection,
    identity: String,
    observe: watch::Sender<Observed>,
    mut release: oneshot::Receiver<oneshot::Sender<()>>,
) {
    let api: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let retry = settings.retry_period;
    let lease_secs = settings.lease_duration.as_secs();
    let grace = lease_secs
        .saturating_sub(settings.renew_every_secs())
        .max(1);
    let mut manager: Option<LeaseManager> = None;
    loop {
        if manager.is_none() {
            let params = LeaseParams::new(identity.clone(), lease_secs, grace);
            let built = tokio::time::timeout(
                retry,
                LeaseManager::new(
                    client.clone(),
                    settings.lease_name.clone(),
                    settings.namespace.clone(),
                    params,
                    LeaseCreateMode::AutoCreate,
                ),
            )
            .await;
            match built {
                Ok(Ok(built)) => manager = Some(built),
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot reach the lease"),
                Err(_) => tracing::warn!("reaching the lease timed out"),
            }
        }
        if let Some(current) = &manager {
            tokio::select! {
                step = tokio::time::timeout(retry, current.changed()) => {
                    if let Ok(Err(e)) = step {
                        tracing::warn!(error = %e, "lease step failed");
                        manager = None;
                    }
                }
                done = &mut release => {
                    if let Err(e) = current.release().await {
                        tracing::warn!(error = %e, "cannot release the lease");
                    } else {
                        tracing::info!("lease released");
                    }
                    if let Ok(done) = done {
                        let _ = done.send(());
                    }
                    return;
                }
            }
        } else {
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                done = &mut release => {
                    if let Ok(done) = done { let _ = done.send(()); }
                    return;
                }
            }
        }
        match tokio::time::timeout(retry, api.get(&settings.lease_name)).await {
            Ok(Ok(lease)) => {
                let seen = Observed::from_lease(&lease);
                if seen.holder.as_deref() != Some(identity.as_str())
                    && seen.is_takeable(SystemTime::now())
                {
                    // The crate trusts its copy until it expires: start afresh to take it now.
                    manager = None;
                }
                observe.send_if_modified(|current| {
                    let changed = *current != seen;
                    *current = seen;
                    changed
                });
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "cannot read the lease"),
            Err(_) => tracing::warn!("reading the lease timed out"),
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
