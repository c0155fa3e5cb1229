//! [`PluginStatus`]: what an operator sees of one plugin (logs, `wasmformer status`, `/status`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use serde::Serialize;

use super::reconcile::WorkQueueReport;
use crate::writer::WriteTally;

/// Live counters and state of one plugin, updated by its worker.
#[derive(Debug, Default)]
pub struct PluginStatus {
    calls: AtomicU64,
    failures: AtomicU64,
    swaps: AtomicU64,
    synced: AtomicBool,
    unloaded: AtomicBool,
    activations: AtomicU64,
    details: Mutex<Details>,
    /// The worker's copy of its work queue's counts.
    pub(crate) work_queue: std::sync::Arc<Mutex<WorkQueueReport>>,
}

#[derive(Debug, Default, Clone)]
struct Details {
    digest: String,
    contract: String,
    loaded_at: Option<SystemTime>,
    last_error: Option<(SystemTime, String)>,
    last_swap_error: Option<(SystemTime, String)>,
    saved_state_bytes: Option<usize>,
    last_state_error: Option<(SystemTime, String)>,
}

/// Whether a plugin's wasmtime instance is live: `"loaded"`, `"unloaded"` (dropped while idle,
/// `lifecycle.unloadAfter`; the next event creates it again), or `"none"` (the plugin is not
/// running here: it failed to start, or another replica leads it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InstanceState {
    /// Live.
    Loaded,
    /// Dropped while idle.
    Unloaded,
    /// Not running here.
    #[default]
    None,
}

/// A failure and when it happened: `{"at": "2026-11-30T10:00:00Z", "message": "…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimedError {
    /// When (RFC 3339, seconds).
    pub at: String,
    /// What went wrong, on one line.
    pub message: String,
}

impl TimedError {
    /// `message`, happened at `at`.
    pub fn new(at: SystemTime, message: impl Into<String>) -> Self {
        Self {
            at: rfc3339(at),
            message: message.into(),
        }
    }
}

/// A point-in-time copy of a plugin's status; one entry of `/status`'s `plugins` (the README's
/// "Machine-readable output" documents the JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// The plugin's name.
    pub name: String,
    /// The running version: BLAKE3 hash of its wasm.
    pub version: String,
    /// The contract version it was built for (`0.2.0`); empty if it never loaded.
    pub contract: String,
    /// When that version was loaded (RFC 3339).
    pub loaded_at: Option<String>,
    /// How many times a new version replaced the running one.
    pub swaps: u64,
    /// Handler calls made.
    pub calls: u64,
    /// Handler calls that failed.
    pub failures: u64,
    /// The last failure.
    pub last_error: Option<TimedError>,
    /// The last failed swap (the old version kept running).
    pub last_swap_error: Option<TimedError>,
    /// Events waiting in its queue.
    pub queue_depth: usize,
    /// Whether it has processed its initial list.
    pub synced: bool,
    /// How its writes ended, over all its versions (filled in by the runtime, which holds the
    /// plugin's writer).
    pub writes: WriteTally,
    /// Its work queue: keys to reconcile and failed events to retry.
    pub work_queue: WorkQueueReport,
    /// Whether its instance is loaded.
    pub instance: InstanceState,
    /// How many times an instance was created again after it was unloaded for being idle.
    pub activations: u64,
    /// The size of the state kept for its next instance while it is unloaded (plugins that
    /// export `state`).
    pub saved_state_bytes: Option<usize>,
    /// The last failure to save or restore its state.
    pub last_state_error: Option<TimedError>,
}

/// `2026-11-30T10:00:00Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

impl PluginStatus {
    fn details(&self) -> std::sync::MutexGuard<'_, Details> {
        self.details.lock().expect("status lock poisoned")
    }

    pub(crate) fn loaded(&self, digest: &str) {
        let mut details = self.details();
        details.digest = digest.to_owned();
        details.loaded_at = Some(SystemTime::now());
    }

    pub(crate) fn contract(&self, contract: &str) {
        self.details().contract = contract.to_owned();
    }

    pub(crate) fn swapped(&self, digest: &str) {
        self.swaps.fetch_add(1, Ordering::Relaxed);
        self.loaded(digest);
    }

    pub(crate) fn swap_failed(&self, error: String) {
        self.details().last_swap_error = Some((SystemTime::now(), error));
    }

    pub(crate) fn called(&self, error: Option<String>) {
        let Some(error) = error else {
            self.calls.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Counted under the lock that `report` reads under: a report never counts a failed call
        // without showing its error.
        let mut details = self.details();
        details.last_error = Some((SystemTime::now(), error));
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.calls.fetch_add(1, Ordering::Relaxed);
    }

    /// Its instance was unloaded, keeping `saved_bytes` of state (or none), or loaded again.
    pub(crate) fn instance(&self, loaded: bool, saved_bytes: Option<usize>) {
        self.unloaded.store(!loaded, Ordering::Relaxed);
        self.details().saved_state_bytes = saved_bytes;
    }

    /// `n` more instances were created after an unload.
    pub(crate) fn activated(&self, n: u64) {
        self.activations.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn state_failed(&self, error: String) {
        self.details().last_state_error = Some((SystemTime::now(), error));
    }

    pub(crate) fn set_synced(&self) {
        self.synced.store(true, Ordering::Release);
    }

    /// Whether the plugin has processed the initial list of every resource it handles.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Handler calls made so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// The report of a plugin that is not running because it failed to start.
    pub fn failed_report(name: &str, error: TimedError) -> StatusReport {
        StatusReport {
            name: name.to_owned(),
            last_error: Some(error),
            ..StatusReport::default()
        }
    }

    /// The report of a plugin this replica stands by for (`leaderElection.scope: plugin`, another
    /// replica leads it): its informers are warm (`synced` once they listed), nothing runs.
    pub fn standby_report(name: &str, synced: bool) -> StatusReport {
        StatusReport {
            name: name.to_owned(),
            synced,
            ..StatusReport::default()
        }
    }

    /// A copy for reporting.
    pub fn report(&self, name: &str, queue_depth: usize) -> StatusReport {
        // The counts are read under the lock a failed call is counted under (`called`).
        let (details, calls, failures) = {
            let details = self.details();
            (
                details.clone(),
                self.calls.load(Ordering::Relaxed),
                self.failures.load(Ordering::Relaxed),
            )
        };
        StatusReport {
            name: name.to_owned(),
            version: details.digest,
            contract: details.contract,
            loaded_at: details.loaded_at.map(rfc3339),
            swaps: self.swaps.load(Ordering::Relaxed),
            calls,
            failures,
            last_error: details.last_error.map(|(t, e)| TimedError::new(t, e)),
            last_swap_error: details.last_swap_error.map(|(t, e)| TimedError::new(t, e)),
            queue_depth,
            synced: self.is_synced(),
            writes: WriteTally::default(),
            work_queue: self
                .work_queue
                .lock()
                .expect("work queue report lock poisoned")
                .clone(),
            instance: match self.unloaded.load(Ordering::Relaxed) {
                true => InstanceState::Unloaded,
                false => InstanceState::Loaded,
            },
            activations: self.activations.load(Ordering::Relaxed),
            saved_state_bytes: details.saved_state_bytes,
            last_state_error: details.last_state_error.map(|(t, e)| TimedError::new(t, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    /// A report taken while failed calls are being recorded shows the error of the last call it
    /// counts, never an earlier one (`/status` and the tests read `calls`, then `lastError`).
    #[test]
    fn a_report_counts_a_failed_call_only_with_its_error() {
        const CALLS: u64 = 20_000;
        let status = Arc::new(PluginStatus::default());
        let calling = std::thread::spawn({
            let status = status.clone();
            move || {
                for call in 1..=CALLS {
                    status.called(Some(call.to_string()));
                }
            }
        });
        let mut reports = 0;
        loop {
            let report = status.report("p", 0);
            let shown = report.last_error.map(|e| e.message).unwrap_or_default();
            let expected = if report.calls == 0 {
                String::new()
            } else {
                report.calls.to_string()
            };
            assert_eq!(shown, expected, "{} calls counted", report.calls);
            assert_eq!(report.failures, report.calls);
            reports += 1;
            if report.calls == CALLS {
                break;
            }
        }
        calling.join().unwrap();
        assert!(reports > 1);
    }
}
