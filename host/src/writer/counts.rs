//! [`WriteCounts`]: how one plugin's writes ended, for `/status` ([`WriteTally`]) and `/metrics`
//! ([`WriteCalls`]), and the throttle that logs a refused write at most once a minute per (kind,
//! verb). Kept by the plugin's [`PluginWriter`](super::PluginWriter), so the counts and the
//! throttle outlive a hot swap.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{RefusedBy, WriteError};
use crate::metrics::WriteCalls;

/// How often one (kind, verb) refusal is logged per plugin.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// A plugin's write outcomes so far: one entry of `/status`'s `plugins[].writes` (the README's
/// "Machine-readable output" documents the JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteTally {
    /// Writes the API server (or the recording) accepted.
    pub ok: u64,
    /// Writes the host refused because the plugin's grants do not cover them; never sent.
    pub refused_by_grant: u64,
    /// Writes the API server's RBAC refused (403).
    pub forbidden_by_server: u64,
    /// Writes that failed otherwise: malformed or over a limit, invalid, conflict, not found,
    /// throttled, unavailable.
    pub failed: u64,
}

/// The `result` label of a write's outcome.
pub fn result_label(outcome: Result<(), &WriteError>) -> &'static str {
    match outcome {
        Ok(()) => "ok",
        Err(WriteError::Forbidden {
            by: RefusedBy::Grant,
            ..
        }) => "refused",
        Err(WriteError::Forbidden {
            by: RefusedBy::Server,
            ..
        }) => "forbidden",
        Err(WriteError::Invalid { .. }) => "invalid",
        Err(WriteError::Conflict { .. }) => "conflict",
        Err(WriteError::NotFound(_)) => "not-found",
        Err(WriteError::Throttled(_)) => "throttled",
        Err(WriteError::Unavailable(_)) => "unavailable",
    }
}

/// When a (kind, verb) refusal was last logged, and how many were not logged since.
#[derive(Debug, Clone, Copy)]
struct Logged {
    at: Instant,
    suppressed: u64,
}

/// One plugin's write counters and refusal-log throttle.
#[derive(Debug, Default)]
pub struct WriteCounts {
    ok: AtomicU64,
    refused_by_grant: AtomicU64,
    forbidden_by_server: AtomicU64,
    failed: AtomicU64,
    logged: Mutex<HashMap<(String, &'static str), Logged>>,
    metrics: Option<WriteCalls>,
}

impl WriteCounts {
    /// Counters that also count into `/metrics` through `metrics`, if given.
    pub fn new(metrics: Option<WriteCalls>) -> Self {
        Self {
            metrics,
            ..Self::default()
        }
    }

    /// Shows `verb`'s series in `/metrics` before its first write.
    pub fn declare(&self, verb: &str) {
        if let Some(metrics) = &self.metrics {
            metrics.declare(verb);
        }
    }

    /// Counts one write of `verb` that ended in `outcome`; `sent` is how long it took if it was
    /// sent (or recorded).
    pub fn count(&self, verb: &str, outcome: Result<(), &WriteError>, sent: Option<Duration>) {
        let counter = match outcome {
            Ok(()) => &self.ok,
            Err(WriteError::Forbidden {
                by: RefusedBy::Grant,
                ..
            }) => &self.refused_by_grant,
            Err(WriteError::Forbidden {
                by: RefusedBy::Server,
                ..
            }) => &self.forbidden_by_server,
            Err(_) => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if let Some(metrics) = &self.metrics {
            metrics.count(verb, result_label(outcome), sent);
        }
    }

    /// Whether a refusal of `verb` on `kind` at `now` is to be logged: the first is, then at most
    /// one a minute per kind and verb. `Some(n)`: log it, saying `n` were not logged since the
    /// last one.
    pub fn log_refusal(&self, kind: &str, verb: &'static str, now: Instant) -> Option<u64> {
        let mut logged = self.logged.lock().expect("refusal log lock");
        match logged.get_mut(&(kind.to_owned(), verb)) {
            Some(last) if now.duration_since(last.at) < REFUSAL_LOG_INTERVAL => {
                last.suppressed += 1;
                None
            }
            Some(last) => {
                let suppressed = last.suppressed;
                *last = Logged {
                    at: now,
                    suppressed: 0,
                };
                Some(suppressed)
            }
            None => {
                logged.insert(
                    (kind.to_owned(), verb),
                    Logged {
                        at: now,
                        suppressed: 0,
                    },
                );
                Some(0)
            }
        }
    }

    /// The counts so far.
    pub fn tally(&self) -> WriteTally {
        WriteTally {
            ok: self.ok.load(Ordering::Relaxed),
            refused_by_grant: self.refused_by_grant.load(Ordering::Relaxed),
            forbidden_by_server: self.forbidden_by_server.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_logged_once_a_minute_per_kind_and_verb_with_how_many_were_not() {
        let counts = WriteCounts::default();
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        assert_eq!(counts.log_refusal("v1 Pod", "apply", start), Some(0));
        assert_eq!(counts.log_refusal("v1 Pod", "apply", at(30)), None);
        assert_eq!(counts.log_refusal("v1 Pod", "apply", at(59)), None);
        assert_eq!(
            counts.log_refusal("v1 Pod", "delete", at(1)),
            Some(0),
            "another verb is logged"
        );
        assert_eq!(
            counts.log_refusal("v1 Secret", "apply", at(1)),
            Some(0),
            "another kind is logged"
        );
        assert_eq!(
            counts.log_refusal("v1 Pod", "apply", at(61)),
            Some(2),
            "a minute later it is logged again, with the two not logged meanwhile"
        );
        assert_eq!(counts.log_refusal("v1 Pod", "apply", at(62)), None);
    }

    #[test]
    fn outcomes_are_tallied_refused_by_grant_apart_from_forbidden_by_server() {
        let counts = WriteCounts::default();
        let forbidden = |by| WriteError::Forbidden {
            by,
            message: String::new(),
        };
        counts.count("apply", Ok(()), Some(Duration::ZERO));
        counts.count("apply", Ok(()), Some(Duration::ZERO));
        counts.count("apply", Err(&forbidden(RefusedBy::Grant)), None);
        counts.count("delete", Err(&forbidden(RefusedBy::Server)), None);
        counts.count("patch", Err(&WriteError::invalid("x")), None);
        counts.count("patch", Err(&WriteError::Unavailable("x".into())), None);
        assert_eq!(
            counts.tally(),
            WriteTally {
                ok: 2,
                refused_by_grant: 1,
                forbidden_by_server: 1,
                failed: 2
            }
        );
        assert_eq!(
            serde_json::to_value(counts.tally()).unwrap(),
            serde_json::json!({"ok": 2, "refusedByGrant": 1, "forbiddenByServer": 1, "failed": 2})
        );
    }
}
