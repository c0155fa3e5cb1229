//! Per-plugin metrics: `wasmformer_handler_calls_total`, `wasmformer_handler_duration_seconds`,
//! `wasmformer_lister_calls_total`, `wasmformer_plugin_swaps_total`, `wasmformer_plugin_info`,
//! `wasmformer_plugin_log_dropped_bytes_total`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::QueueMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    version: String,
    event: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    plugin: String,
    event: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListerLabels {
    plugin: String,
    kind: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SwapLabels {
    plugin: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InfoLabels {
    plugin: String,
    version: String,
    contract: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

/// How a handler call ended (the `result` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallResult {
    /// It returned `Ok`.
    Ok,
    /// It returned `Err` (the plugin's own error).
    Error,
    /// It overran its deadline.
    Deadline,
    /// It grew its memory past its limit.
    Memory,
    /// Any other trap (a panic, a stack overflow, …).
    Trap,
}

impl CallResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Deadline => "deadline",
            Self::Memory => "memory",
            Self::Trap => "trap",
        }
    }
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn handler_histogram() -> Histogram {
    // 100 µs to about 6.5 s: a handler's deadline is 100 ms by default.
    Histogram::new(exponential_buckets(0.0001, 2.0, 17))
}

#[derive(Debug)]
pub(super) struct Families {
    calls: Family<CallLabels, Counter>,
    duration: HistogramFamily<DurationLabels>,
    lister: Family<ListerLabels, Counter>,
    swaps: Family<SwapLabels, Counter>,
    info: Family<InfoLabels, Gauge>,
    log_dropped: Family<PluginLabel, Counter>,
    loaded: Family<PluginLabel, Gauge>,
    activations: Family<PluginLabel, Counter>,
    /// Each plugin's running (version, contract), shared by every handle of that name, so a
    /// plugin started again (re-subscribed) moves its one `wasmformer_plugin_info` series.
    versions: Mutex<BTreeMap<String, RunningVersion>>,
}

/// A plugin's running (short version, contract), shared by its metrics handles.
type RunningVersion = Arc<Mutex<Running>>;

/// What every handle of one plugin shares: the version it runs, and the series its handler calls
/// count into, kept so that a call finds them without building label sets.
#[derive(Debug, Default)]
struct Running {
    /// The running version's short digest.
    version: String,
    contract: String,
    /// `wasmformer_handler_calls_total` of `version`, by event and result; emptied when the
    /// version changes.
    calls: Vec<(String, CallResult, Counter)>,
    /// `wasmformer_handler_duration_seconds`, by event.
    durations: Vec<(String, Histogram)>,
    /// The events the plugin's handlers are called for, whose `ok` series exist from its start.
    expected: &'static [&'static str],
}

impl Running {
    /// The call counter of `event` and `result` under the running version, made at its first
    /// use.
    fn counter(
        &mut self,
        families: &Families,
        plugin: &str,
        event: &str,
        result: CallResult,
    ) -> &Counter {
        let at = match self
            .calls
            .iter()
            .position(|(e, r, _)| e == event && *r == result)
        {
            Some(at) => at,
            None => {
                let labels = CallLabels {
                    plugin: plugin.to_owned(),
                    version: self.version.clone(),
                    event: event.to_owned(),
                    result: result.as_str().to_owned(),
                };
                let counter = families.calls.get_or_create(&labels).clone();
                self.calls.push((event.to_owned(), result, counter));
                self.calls.len() - 1
            }
        };
        &self.calls[at].2
    }

    /// The duration histogram of `event`, made at its first use.
    fn histogram(&mut self, families: &Families, plugin: &str, event: &str) -> &Histogram {
        let at = match self.durations.iter().position(|(e, _)| e == event) {
            Some(at) => at,
            None => {
                let labels = DurationLabels {
                    plugin: plugin.to_owned(),
                    event: event.to_owned(),
                };
                let histogram = families.duration.get_or_create(&labels).clone();
                self.durations.push((event.to_owned(), histogram));
                self.durations.len() - 1
            }
        };
        &self.durations[at].1
    }
}

impl Families {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            calls: Family::default(),
            duration: Family::new_with_constructor(handler_histogram),
            lister: Family::default(),
            swaps: Family::default(),
            info: Family::default(),
            log_dropped: Family::default(),
            loaded: Family::default(),
            activations: Family::default(),
            versions: Mutex::default(),
        };
        registry.register(
            "wasmformer_handler_calls",
            "Handler calls by plugin, version (first 12 hex digits of its BLAKE3 hash), event and result",
            families.calls.clone(),
        );
        registry.register(
            "wasmformer_handler_duration_seconds",
            "How long handler calls took, host calls included",
            families.duration.clone(),
        );
        registry.register(
            "wasmformer_lister_calls",
            "Lister calls by plugin, kind and result",
            families.lister.clone(),
        );
        registry.register(
            "wasmformer_plugin_swaps",
            "Hot swaps by plugin and result (ok: swapped in; error: the old version kept serving)",
            families.swaps.clone(),
        );
        registry.register(
            "wasmformer_plugin_info",
            "1 for the version and contract each plugin runs",
            families.info.clone(),
        );
        registry.register(
            "wasmformer_plugin_log_dropped_bytes",
            "Plugin log and stdout/stderr bytes dropped over the per-call budget",
            families.log_dropped.clone(),
        );
        registry.register(
            "wasmformer_plugin_loaded",
            "1 while a plugin's instance is loaded, 0 while it is unloaded for being idle (lifecycle.unloadAfter)",
            families.loaded.clone(),
        );
        registry.register(
            "wasmformer_plugin_activations",
            "Instances created again for an event after the plugin was unloaded for being idle",
            families.activations.clone(),
        );
        families
    }
}

/// One plugin's metrics handle, cloned into its worker and its lister grants.
#[derive(Debug, Clone)]
pub struct PluginMetrics {
    name: String,
    version: RunningVersion,
    families: Arc<Families>,
    /// Its queue's `workqueue_*` series.
    pub queue: QueueMetrics,
}

impl PluginMetrics {
    pub(super) fn new(name: &str, families: Arc<Families>, queue: QueueMetrics) -> Self {
        let version = families
            .versions
            .lock()
            .expect("plugin metrics lock poisoned")
            .entry(name.to_owned())
            .or_default()
            .clone();
        Self {
            name: name.to_owned(),
            version,
            families,
            queue,
        }
    }

    fn short(digest: &str) -> String {
        digest.get(..12).unwrap_or(digest).to_owned()
    }

    /// The plugin now runs `digest` built for `contract`: `wasmformer_plugin_info` moves to it.
    pub fn running(&self, digest: &str, contract: &str) {
        let mut running = self.version.lock().expect("plugin metrics lock poisoned");
        let previous = InfoLabels {
            plugin: self.name.clone(),
            version: running.version.clone(),
            contract: running.contract.clone(),
        };
        self.families.info.remove(&previous);
        running.version = Self::short(digest);
        running.contract = contract.to_owned();
        running.calls.clear();
        let current = InfoLabels {
            plugin: self.name.clone(),
            version: running.version.clone(),
            contract: running.contract.clone(),
        };
        self.families.info.get_or_create(&current).set(1);
        let expected = running.expected;
        self.create_series(&mut running, expected);
    }

    /// The plugin's handlers are called for `events`: their `ok` call counters and their
    /// duration histograms exist, at 0, from the moment it runs a version ([`Self::running`]),
    /// as controller-runtime starts its reconcile counters. Made then, with the plugin's other
    /// lasting data, and not at its first call, they do not sit among the allocations of the
    /// instance that makes that call, which an unload frees (BENCHMARKS.md, "what keeps an
    /// unloaded plugin's heap pages").
    pub fn expect_calls(&self, events: &'static [&'static str]) {
        let mut running = self.version.lock().expect("plugin metrics lock poisoned");
        running.expected = events;
        if !running.version.is_empty() {
            self.create_series(&mut running, events);
        }
    }

    fn create_series(&self, running: &mut Running, events: &[&str]) {
        running.calls.reserve_exact(events.len());
        for event in events {
            running.counter(&self.families, &self.name, event, CallResult::Ok);
            running.histogram(&self.families, &self.name, event);
        }
    }

    /// Counts and times one handler call (`event`: add, update, delete, reconcile). The series
    /// are looked up (and created) once per version, event and result, then kept.
    pub fn handler_call(&self, event: &str, result: CallResult, elapsed: Duration) {
        let mut running = self.version.lock().expect("plugin metrics lock poisoned");
        running
            .counter(&self.families, &self.name, event, result)
            .inc();
        running
            .histogram(&self.families, &self.name, event)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a swap: `ok` when a new version was swapped in, else it failed.
    pub fn swapped(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" }.to_owned();
        self.families
            .swaps
            .get_or_create(&SwapLabels {
                plugin: self.name.clone(),
                result,
            })
            .inc();
    }

    /// Counts log bytes dropped over the per-call budget.
    pub fn log_dropped(&self, bytes: u64) {
        if bytes > 0 {
            self.families
                .log_dropped
                .get_or_create(&PluginLabel {
                    plugin: self.name.clone(),
                })
                .inc_by(bytes);
        }
    }

    /// Its instance is now loaded (`true`) or unloaded for being idle.
    pub fn loaded(&self, loaded: bool) {
        self.families
            .loaded
            .get_or_create(&PluginLabel {
                plugin: self.name.clone(),
            })
            .set(i64::from(loaded));
    }

    /// Counts `n` instances created again after the plugin was unloaded (`0`: the series
    /// exists from the plugin's start, as Prometheus wants a counter).
    pub fn activated(&self, n: u64) {
        self.families
            .activations
            .get_or_create(&PluginLabel {
                plugin: self.name.clone(),
            })
            .inc_by(n);
    }

    /// The handle the plugin's lister import counts its calls with.
    pub fn lister_calls(&self) -> ListerCalls {
        ListerCalls {
            plugin: self.name.clone(),
            families: self.families.clone(),
        }
    }
}

/// Counts one plugin's lister calls (`wasmformer_lister_calls_total`).
#[derive(Debug, Clone)]
pub struct ListerCalls {
    plugin: String,
    families: Arc<Families>,
}

impl ListerCalls {
    /// The counter of calls for `kind` that ended in `result` (ok, not-found, forbidden,
    /// invalid-selector, unknown-index), created with its series; a clone counts into the same
    /// series, so a caller may keep it rather than look it up per call.
    pub fn counter(&self, kind: &str, result: &str) -> Counter {
        let labels = ListerLabels {
            plugin: self.plugin.clone(),
            kind: kind.to_owned(),
            result: result.to_owned(),
        };
        self.families.lister.get_or_create(&labels).clone()
    }
}
