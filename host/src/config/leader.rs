//! `host.leaderElection:` — whether replicas elect one leader through a Lease, with client-go's
//! names and defaults, and the checks its durations must pass.

use std::time::Duration;

use serde::Deserialize;

use super::Problem;

/// `host.leaderElection:` — elect one replica to call handlers through a
/// `coordination.k8s.io/v1` Lease; the others keep their caches warm and take over when it goes.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct LeaderElection {
    /// `enabled: true` — take part in the election; unset: this replica always leads.
    pub enabled: bool,
    /// `leaseName: wasmformer` — the Lease's name.
    pub lease_name: String,
    /// `namespace: default` — the Lease's namespace.
    pub namespace: String,
    /// `leaseDuration: 15s` — how long followers wait after the last renewal before taking over
    /// (whole seconds: the Lease stores seconds).
    #[serde(with = "humantime_serde")]
    pub lease_duration: Duration,
    /// `renewDeadline: 10s` — how long the leader keeps calling handlers without a successful
    /// renewal; past it, it stops.
    #[serde(with = "humantime_serde")]
    pub renew_deadline: Duration,
    /// `retryPeriod: 2s` — how often the leader renews and followers look at the Lease.
    #[serde(with = "humantime_serde")]
    pub retry_period: Duration,
    /// `identity: pod-a` — this replica's name in the Lease; unset: `<hostname>_<pid>`.
    pub identity: Option<String>,
    /// `scope: host` — one Lease for the whole host (`host`), or one per plugin (`plugin`), so
    /// that replicas share the plugins between them.
    pub scope: LeaseScope,
}

/// `host.leaderElection.scope:` — what one Lease covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum LeaseScope {
    /// `scope: host` — one replica leads every plugin; the others stand by.
    #[default]
    Host,
    /// `scope: plugin` — each plugin has its own Lease `<leaseName>-plugin-<plugin>`, and each
    /// replica leads about `ceil(plugins / live replicas)` of them.
    Plugin,
}

/// The label every replica's membership Lease carries under `scope: plugin`; its value is the
/// `leaseName`. Replicas count the unexpired Leases with it to know how many share the plugins.
pub const MEMBER_LABEL: &str = "wasmformer.dev/lease-group";

impl Default for LeaderElection {
    fn default() -> Self {
        Self {
            enabled: false,
            lease_name: "wasmformer".to_owned(),
            namespace: "default".to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            identity: None,
            scope: LeaseScope::Host,
        }
    }
}

impl LeaderElection {
    /// Under `scope: plugin`, the Lease of plugin `plugin`: `<leaseName>-plugin-<plugin>`, a
    /// valid name of at most 134 characters (`leaseName` is then at most 63, a plugin name is a
    /// DNS label).
    pub fn plugin_lease(&self, plugin: &str) -> String {
        format!("{}-plugin-{plugin}", self.lease_name)
    }

    /// Under `scope: plugin`, the membership Lease of the replica `identity`:
    /// `<leaseName>-member-<first 10 hex digits of SHA-256(identity)>` (an identity need not be a
    /// valid name: the default one holds `_`).
    pub fn member_lease(&self, identity: &str) -> String {
        use sha2::Digest;
        let digest = hex::encode(sha2::Sha256::digest(identity.as_bytes()));
        format!("{}-member-{}", self.lease_name, &digest[..10])
    }

    /// Every problem with these settings, located under `at` (`host.leaderElection`).
    pub(super) fn check(&self, at: &str, problems: &mut Vec<Problem>) {
        let mut problem = |field: &str, message: String| {
            problems.push(Problem::new(format!("{at}.{field}"), message))
        };
        if let Err(e) = check_name(&self.lease_name) {
            problem("leaseName", e);
        }
        if self.scope == LeaseScope::Plugin && self.lease_name.len() > 63 {
            problem(
                "leaseName",
                format!(
                    "must be at most 63 characters with scope: plugin (it is the value of the membership Leases' label), not {}",
                    self.lease_name.len()
                ),
            );
        }
        if let Err(e) = check_name(&self.namespace) {
            problem("namespace", e);
        }
        if self
            .identity
            .as_deref()
            .is_some_and(|i| i.trim().is_empty())
        {
            problem("identity", "must not be empty".to_owned());
        }
        let lease = self.lease_duration;
        if lease.subsec_nanos() != 0 || lease < Duration::from_secs(2) {
            problem(
                "leaseDuration",
                format!(
                    "must be whole seconds, at least 2s (the Lease stores seconds), not {}",
                    humantime::format_duration(lease)
                ),
            );
        }
        if self.renew_deadline >= lease {
            problem(
                "renewDeadline",
                format!(
                    "must be shorter than leaseDuration ({}), or a leader could still call handlers after another took over",
                    humantime::format_duration(lease)
                ),
            );
        }
        if self.retry_period.is_zero() {
            problem("retryPeriod", "must be more than 0s".to_owned());
        } else if self.retry_period >= self.renew_deadline {
            problem(
                "retryPeriod",
                format!(
                    "must be shorter than renewDeadline ({}), or the leader could not retry a failed renewal in time",
                    humantime::format_duration(self.renew_deadline)
                ),
            );
        }
    }

    /// How often the leader renews: the retry period in whole seconds (at least 1s), because the
    /// Lease crate counts in seconds.
    pub fn renew_every_secs(&self) -> u64 {
        self.retry_period.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// A Lease or namespace name: a DNS label (lowercase letters, digits, `-`, `.` for a Lease).
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a valid name: lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(settings: &LeaderElection) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        settings.check("host.leaderElection", &mut problems);
        problems.into_iter().map(|p| (p.at, p.message)).collect()
    }

    #[test]
    fn client_go_defaults_pass() {
        assert!(problems(&LeaderElection::default()).is_empty());
    }

    #[test]
    fn every_inconsistent_duration_is_reported_with_its_field() {
        let settings = LeaderElection {
            lease_name: "Bad_Name".to_owned(),
            lease_duration: Duration::from_millis(4500),
            renew_deadline: Duration::from_secs(5),
            retry_period: Duration::from_secs(6),
            identity: Some(" ".to_owned()),
            ..LeaderElection::default()
        };
        let at: Vec<String> = problems(&settings).into_iter().map(|(at, _)| at).collect();
        assert_eq!(
            at,
            [
                "host.leaderElection.leaseName",
                "host.leaderElection.identity",
                "host.leaderElection.leaseDuration",
                "host.leaderElection.renewDeadline",
                "host.leaderElection.retryPeriod",
            ]
        );
    }

    #[test]
    fn plugin_scope_names_one_lease_per_plugin_and_limits_the_lease_name() {
        let settings = LeaderElection {
            scope: LeaseScope::Plugin,
            lease_name: "x".repeat(64),
            ..LeaderElection::default()
        };
        let found = problems(&settings);
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(found[0].0, "host.leaderElection.leaseName");
        assert!(found[0].1.contains("at most 63"), "{}", found[0].1);
        let longest = LeaderElection {
            lease_name: "x".repeat(63),
            ..settings
        };
        assert!(problems(&longest).is_empty());
        assert!(check_name(&longest.plugin_lease(&"p".repeat(63))).is_ok());
        let defaults = LeaderElection::default();
        assert_eq!(defaults.plugin_lease("rec-0"), "wasmformer-plugin-rec-0");
        let member = defaults.member_lease("host_12");
        assert!(
            member.starts_with("wasmformer-member-") && member.len() == 28,
            "{member}"
        );
        assert!(check_name(&member).is_ok());
    }

    #[test]
    fn the_renewal_period_is_the_retry_period_in_whole_seconds() {
        let mut settings = LeaderElection::default();
        assert_eq!(settings.renew_every_secs(), 2);
        settings.retry_period = Duration::from_millis(300);
        assert_eq!(settings.renew_every_secs(), 1);
    }
}
