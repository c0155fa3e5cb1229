//! `leaderElection.scope: plugin`: each plugin has its own Lease and the live replicas share the
//! plugins evenly between them.
//!
//! Every replica holds a **membership Lease** of its own (`<leaseName>-member-<hash>`, labelled
//! [`MEMBER_LABEL`]`=<leaseName>`) and, every `retryPeriod`, the **balance** task counts the
//! unexpired ones: with `P` plugins and `N` live replicas, each replica's fair share is
//! `ceil(P / N)`. A replica campaigns for a free or expired plugin Lease only while it leads or
//! campaigns for fewer than its share, and hands back (stops the plugin, then releases its Lease)
//! the plugins above its share when a replica joins. A replica waits one `retryPeriod` after its
//! membership is counted before it takes anything, so replicas that start together see each
//! other first.
//!
//! Each plugin Lease is an [`Election`] (kube-lease-manager's protocol, the clock's
//! `renewDeadline`): a replica calls a plugin's handlers only while it holds that plugin's Lease,
//! so the bound of `scope: host` holds per plugin.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::SystemTime;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client};

use super::Runtime;
use super::leader::{Ballot, Election, Observed, PluginLeadership, Transitions};
use super::reload::Request;
use crate::config::{LeaderElection, MEMBER_LABEL};
use crate::dispatch::Terms;

/// This replica's part under `scope: plugin`: its membership and one election per plugin.
pub(super) struct Share {
    client: Client,
    settings: LeaderElection,
    identity: String,
    transitions: Transitions,
    member: Mutex<Option<Arc<Election>>>,
    plugins: Mutex<BTreeMap<String, Arc<Election>>>,
    /// Live replicas, as last counted (0: not yet).
    replicas: AtomicUsize,
    /// Set on shutdown: the balance task takes nothing any more.
    closed: AtomicBool,
}

impl Share {
    /// A share for this replica; plugins join with [`Share::election`], the balance task starts
    /// with [`Share::balance`].
    pub(super) fn new(
        client: Client,
        settings: LeaderElection,
        transitions: Transitions,
    ) -> Arc<Self> {
        let identity = settings
            .identity
            .clone()
            .unwrap_or_else(super::leader::default_identity);
        tracing::info!(leader.identity = %identity, leader.scope = "plugin", "leader election started");
        Arc::new(Self {
            client,
            settings,
            identity,
            transitions,
            member: Mutex::new(None),
            plugins: Mutex::new(BTreeMap::new()),
            replicas: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        })
    }

    /// This replica's identity.
    pub(super) fn identity(&self) -> &str {
        &self.identity
    }

    /// The election of `plugin`'s Lease, started (standing by) if it was not yet.
    pub(super) fn election(&self, plugin: &str) -> Arc<Election> {
        let mut plugins = self.plugins.lock().expect("share lock");
        plugins
            .entry(plugin.to_owned())
            .or_insert_with(|| {
                Election::start_for(
                    self.client.clone(),
                    self.settings.clone(),
                    self.identity.clone(),
                    Ballot {
                        lease_name: self.settings.plugin_lease(plugin),
                        plugin: Some(plugin.to_owned()),
                        campaign: false,
                        transitions: Some(self.transitions.clone()),
                    },
                    Terms::default(),
                )
            })
            .clone()
    }

    /// The election of `plugin`'s Lease, if it has one.
    pub(super) fn get(&self, plugin: &str) -> Option<Arc<Election>> {
        self.plugins
            .lock()
            .expect("share lock")
            .get(plugin)
            .cloned()
    }

    /// Forgets `plugin` (no longer configured): ends its term and releases its Lease.
    pub(super) async fn forget(&self, plugin: &str) {
        let election = self.plugins.lock().expect("share lock").remove(plugin);
        if let Some(election) = election {
            election.release().await;
        }
    }

    /// The plugins with an election, in name order.
    pub(super) fn plugins(&self) -> Vec<String> {
        self.plugins
            .lock()
            .expect("share lock")
            .keys()
            .cloned()
            .collect()
    }

    /// Whether this replica leads `plugin` now.
    pub(super) fn leads(&self, plugin: &str) -> bool {
        self.get(plugin).is_some_and(|e| e.is_leading())
    }

    /// Whether this replica leads any plugin.
    pub(super) fn leads_any(&self) -> bool {
        self.snapshot().iter().any(|(_, e)| e.is_leading())
    }

    fn snapshot(&self) -> Vec<(String, Arc<Election>)> {
        self.plugins
            .lock()
            .expect("share lock")
            .iter()
            .map(|(name, e)| (name.clone(), e.clone()))
            .collect()
    }

    /// Live replicas as last counted, `None` before the first count.
    pub(super) fn replicas(&self) -> Option<usize> {
        Some(self.replicas.load(Ordering::Relaxed)).filter(|n| *n > 0)
    }

    /// `ceil(plugins / replicas)`, `None` before the first count.
    pub(super) fn fair_share(&self) -> Option<usize> {
        let plugins = self.plugins.lock().expect("share lock").len();
        self.replicas().map(|n| fair_share(plugins, n))
    }

    /// Every plugin's line of `/status`, and when this replica last started or stopped leading
    /// one of them.
    pub(super) fn reports(&self) -> (Vec<PluginLeadership>, Option<SystemTime>) {
        let elections = self.snapshot();
        let since = elections.iter().map(|(_, e)| e.since()).max();
        (
            elections.iter().map(|(_, e)| e.plugin_report()).collect(),
            since,
        )
    }

    /// Shutting down: the balance task takes and hands back nothing any more.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Ends every term and releases every Lease this replica holds, its membership last (after
    /// the plugins have drained); then deletes the membership Lease (a restarted replica has a
    /// new identity, so it would only be left behind).
    pub(super) async fn release_all(&self) {
        self.close();
        let elections = std::mem::take(&mut *self.plugins.lock().expect("share lock"));
        futures::future::join_all(elections.values().map(|e| e.release())).await;
        let member = self.member.lock().expect("share lock").take();
        if let Some(member) = member {
            member.release().await;
            let name = self.settings.member_lease(&self.identity);
            let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.namespace);
            if let Err(e) = api.delete(&name, &Default::default()).await {
                tracing::warn!(leader.lease = %name, error = %e, "cannot delete the membership lease");
            }
        }
    }

    /// The membership election, creating the labelled membership Lease first; `None` once
    /// shutting down.
    async fn membership(&self) -> Result<Option<Arc<Election>>, kube::Error> {
        if let Some(member) = self.member.lock().expect("share lock").clone() {
            return Ok(Some(member));
        }
        if self.closed.load(Ordering::SeqCst) {
            return Ok(None);
        }
        let name = self.settings.member_lease(&self.identity);
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let labels = BTreeMap::from([(MEMBER_LABEL.to_owned(), self.settings.lease_name.clone())]);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(labels.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        match api.create(&PostParams::default(), &lease).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Left by an earlier run of this identity: make sure it is labelled.
                let patch = serde_json::json!({"metadata": {"labels": labels}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            Err(e) => return Err(e),
        }
        let member = Election::start_for(
            self.client.clone(),
            self.settings.clone(),
            self.identity.clone(),
            Ballot {
                lease_name: name,
                plugin: None,
                campaign: true,
                transitions: None,
            },
            Terms::default(),
        );
        let mut slot = self.member.lock().expect("share lock");
        if self.closed.load(Ordering::SeqCst) {
            drop(slot);
            member.release().await;
            return Ok(None);
        }
        *slot = Some(member.clone());
        Ok(Some(member))
    }

    /// Counts the unexpired membership Leases, and deletes those of replicas gone for a while
    /// (killed ones: a replica that stops deletes its own).
    async fn count_replicas(&self) -> Result<usize, kube::Error> {
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.settings.namespace);
        let selector = format!("{MEMBER_LABEL}={}", self.settings.lease_name);
        let leases = api.list(&ListParams::default().labels(&selector)).await?;
        let now = SystemTime::now();
        let mut live = 0;
        for lease in &leases.items {
            let seen = Observed::from_lease(lease);
            if seen.holder.is_some() && !seen.is_takeable(now) {
                live += 1;
            } else if let Some(name) = lease.metadata.name.as_deref()
                && is_abandoned(lease, now, self.settings.lease_duration)
            {
                let _ = api.delete(name, &Default::default()).await;
                tracing::info!(leader.lease = %name, "deleted an abandoned membership lease");
            }
        }
        Ok(live)
    }
}

/// Whether a membership Lease was neither renewed nor created within the last ten
/// `leaseDuration`s (at least a minute): its replica is gone, and a new one would have renewed it.
fn is_abandoned(lease: &Lease, now: SystemTime, lease_duration: std::time::Duration) -> bool {
    let last = lease
        .spec
        .as_ref()
        .and_then(|s| s.renew_time.as_ref())
        .map(|t| SystemTime::from(t.0))
        .into_iter()
        .chain(
            lease
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| SystemTime::from(t.0)),
        )
        .max();
    let idle = (lease_duration * 10).max(std::time::Duration::from_secs(60));
    last.is_some_and(|last| now.duration_since(last).is_ok_and(|d| d > idle))
}

/// `ceil(plugins / replicas)`: each replica leads at most this many, so together they cover all.
fn fair_share(plugins: usize, replicas: usize) -> usize {
    plugins.div_ceil(replicas.max(1))
}

/// This replica's preference for `plugin` (rendezvous hashing: lower is preferred). Replicas
/// prefer different plugins, so two rarely race for the same free Lease, and a replica keeps the
/// plugins it prefers when it hands some back.
fn rank(identity: &str, plugin: &str) -> [u8; 8] {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(identity.as_bytes())
        .chain_update([0])
        .chain_update(plugin.as_bytes())
        .finalize();
    let mut rank = [0; 8];
    rank.copy_from_slice(&digest[..8]);
    rank
}

/// What one balancing round decides, given which plugins this replica leads, campaigns for
/// without leading yet, and could take (their Lease free or expired), each in preference order.
#[derive(Debug, Default, PartialEq, Eq)]
struct Moves {
    /// Plugins to campaign for.
    campaign: Vec<String>,
    /// Plugins to stop campaigning for (not led yet: nothing to stop).
    withdraw: Vec<String>,
    /// Led plugins to hand back: stop, then release.
    hand_back: Vec<String>,
}

/// Plugins this replica leads, campaigns for (not yet leading, and whether another replica
/// holds the Lease now), and could take.
struct Holdings<'a> {
    leading: Vec<&'a str>,
    pending: Vec<(&'a str, bool)>,
    takeable: Vec<&'a str>,
}

/// The fair-share rule: campaign while below `share`, hand back what is above it. A pending
/// campaign another replica won is withdrawn.
fn moves(holdings: &Holdings<'_>, share: usize) -> Moves {
    let mut moves = Moves::default();
    let mut pending: Vec<&str> = Vec::new();
    for (plugin, lost) in &holdings.pending {
        if *lost {
            moves.withdraw.push((*plugin).to_owned());
        } else {
            pending.push(plugin);
        }
    }
    let led = holdings.leading.len();
    if led > share {
        // Keep the `share` it prefers, hand back the rest.
        moves.hand_back = holdings.leading[share..]
            .iter()
            .map(|p| (*p).to_owned())
            .collect();
        moves
            .withdraw
            .extend(pending.iter().map(|p| (*p).to_owned()));
        return moves;
    }
    let room = share - led;
    if pending.len() > room {
        moves
            .withdraw
            .extend(pending[room..].iter().map(|p| (*p).to_owned()));
        return moves;
    }
    moves.campaign = holdings
        .takeable
        .iter()
        .take(room - pending.len())
        .map(|p| (*p).to_owned())
        .collect();
    moves
}

/// The balance task: every `retryPeriod`, renews this replica's membership (through its
/// election), counts the live replicas and applies the fair-share rule, until the runtime is
/// dropped or shut down.
pub(super) async fn balance(runtime: Weak<Runtime>, share: Arc<Share>) {
    let retry = share.settings.retry_period;
    // Rounds since this replica's membership was first counted.
    let mut counted_rounds = 0u32;
    loop {
        tokio::time::sleep(retry).await;
        if share.closed.load(Ordering::SeqCst) || runtime.strong_count() == 0 {
            return;
        }
        let member = match share.membership().await {
            Ok(Some(member)) => member,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot create this replica's membership lease");
                continue;
            }
        };
        if !member.is_leading() {
            counted_rounds = 0;
            continue;
        }
        let replicas = match share.count_replicas().await {
            Ok(n) => n.max(1),
            Err(e) => {
                tracing::warn!(error = %e, "cannot count the replicas");
                continue;
            }
        };
        share.replicas.store(replicas, Ordering::Relaxed);
        counted_rounds += 1;
        if counted_rounds < 2 {
            continue; // let replicas that started together see each other first
        }
        let elections = share.snapshot();
        let target = fair_share(elections.len(), replicas);
        let now = SystemTime::now();
        let mut holdings = Holdings {
            leading: Vec::new(),
            pending: Vec::new(),
            takeable: Vec::new(),
        };
        for (name, election) in &elections {
            let seen = election.observed();
            if election.is_leading() {
                holdings.leading.push(name);
            } else if election.is_campaigning() {
                let lost =
                    seen.holder.as_deref() != Some(share.identity()) && !seen.is_takeable(now);
                holdings.pending.push((name, lost));
            } else if seen.is_takeable(now) {
                holdings.takeable.push(name);
            }
        }
        let identity = share.identity();
        holdings.leading.sort_by_key(|p| rank(identity, p));
        holdings.pending.sort_by_key(|(p, _)| rank(identity, p));
        holdings.takeable.sort_by_key(|p| rank(identity, p));
        let moves = moves(&holdings, target);
        if moves != Moves::default() {
            tracing::info!(
                leader.replicas = replicas,
                leader.fairShare = target,
                leader.leading = holdings.leading.len(),
                share.campaign = ?moves.campaign,
                share.handBack = ?moves.hand_back,
                share.withdraw = ?moves.withdraw,
                "rebalancing plugins"
            );
        }
        for plugin in &moves.campaign {
            if let Some(e) = share.get(plugin) {
                e.campaign();
            }
        }
        let Some(runtime) = runtime.upgrade() else {
            return;
        };
        // A withdrawn campaign may have just won (its plugin starting): it is handed back the same
        // way, so its worker stops before its Lease is released.
        for plugin in moves.withdraw.into_iter().chain(moves.hand_back) {
            runtime
                .request(|reply| Request::HandBack(plugin, reply))
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fair_share_covers_every_plugin() {
        assert_eq!(fair_share(6, 1), 6);
        assert_eq!(fair_share(6, 3), 2);
        assert_eq!(fair_share(6, 4), 2);
        assert_eq!(fair_share(7, 3), 3);
        assert_eq!(fair_share(6, 0), 6);
    }

    fn owned(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn a_membership_lease_is_abandoned_after_ten_lease_durations_or_a_minute() {
        use k8s_openapi::api::coordination::v1::LeaseSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
        let now = SystemTime::now();
        let lease = |created_secs_ago: u64, renewed_secs_ago: Option<u64>| Lease {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(
                    (now - std::time::Duration::from_secs(created_secs_ago))
                        .try_into()
                        .unwrap(),
                )),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: renewed_secs_ago.map(|ago| {
                    MicroTime(
                        (now - std::time::Duration::from_secs(ago))
                            .try_into()
                            .unwrap(),
                    )
                }),
                ..LeaseSpec::default()
            }),
        };
        let duration = std::time::Duration::from_secs(15);
        assert!(
            !is_abandoned(&lease(10, None), now, duration),
            "just created"
        );
        assert!(!is_abandoned(&lease(1000, Some(100)), now, duration));
        assert!(is_abandoned(&lease(1000, Some(200)), now, duration));
        assert!(
            is_abandoned(&lease(1000, None), now, duration),
            "never held"
        );
        let short = std::time::Duration::from_secs(2);
        assert!(
            !is_abandoned(&lease(1000, Some(30)), now, short),
            "at least a minute"
        );
    }

    #[test]
    fn replicas_prefer_different_plugins() {
        let plugins: Vec<String> = (0..6).map(|i| format!("rec-{i}")).collect();
        let first = |identity: &str| {
            plugins
                .iter()
                .min_by_key(|p| rank(identity, p))
                .unwrap()
                .clone()
        };
        let firsts: std::collections::BTreeSet<String> =
            ["host-a", "host-b", "host-c", "host-d"].map(first).into();
        assert!(firsts.len() > 1, "{firsts:?}");
    }

    #[test]
    fn a_replica_takes_only_up_to_its_share() {
        let holdings = Holdings {
            leading: vec!["a"],
            pending: vec![("b", false)],
            takeable: vec!["c", "d", "e"],
        };
        let moves = moves(&holdings, 3);
        assert_eq!(moves.campaign, owned(&["c"]));
        assert!(moves.hand_back.is_empty() && moves.withdraw.is_empty());
    }

    #[test]
    fn a_replica_above_its_share_hands_back_the_rest() {
        let holdings = Holdings {
            leading: vec!["a", "b", "c", "d"],
            pending: vec![("e", false)],
            takeable: vec!["f"],
        };
        let moves = moves(&holdings, 2);
        assert_eq!(moves.hand_back, owned(&["c", "d"]));
        assert_eq!(moves.withdraw, owned(&["e"]));
        assert!(moves.campaign.is_empty());
    }

    #[test]
    fn a_lost_campaign_is_withdrawn_and_leaves_room() {
        let holdings = Holdings {
            leading: vec!["a"],
            pending: vec![("b", true)],
            takeable: vec!["c"],
        };
        let moves = moves(&holdings, 2);
        assert_eq!(moves.withdraw, owned(&["b"]));
        assert_eq!(moves.campaign, owned(&["c"]));
    }
}
