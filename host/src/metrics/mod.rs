//! Prometheus metrics: one [`Metrics`] registry built by the runtime and handed down as small
//! per-component handles ([`PluginMetrics`], [`QueueMetrics`], [`ListerCalls`]), the pattern of
//! `prometheus-client`; nothing below the runtime reaches for a global.
//!
//! - [`plugin`]: handler calls, durations, lister calls, swaps, version info, dropped log bytes.
//! - [`queue`]: each plugin's queue under client-go's `workqueue_*` names (`name="<plugin>"`).
//! - [`informer`]: one series per informer (never per object), read from the informers' status
//!   at scrape time.
//! - [`api`]: the API client's requests by verb and code, and their duration.
//! - [`writes`]: plugins' writes by verb and result, and their duration.
//! - [`process`]: resident memory, CPU time and open file descriptors, read from `/proc`.
//!
//! This module depends on nothing else of ours: the runtime maps its components' state into the
//! plain samples defined here.

pub mod api;
pub mod informer;
pub mod plugin;
pub mod process;
pub mod queue;
pub mod writes;

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

pub use informer::{InformerSample, InformerSampler};
pub use plugin::{CallResult, ListerCalls, PluginMetrics};
pub use queue::QueueMetrics;
pub use writes::WriteCalls;

/// The exposition formats `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4 (the default).
    Text,
    /// OpenMetrics 1.0 text, for scrapers that ask for `application/openmetrics-text`.
    OpenMetrics,
}

impl Format {
    /// The format an `Accept` header asks for.
    pub fn from_accept(accept: Option<&str>) -> Self {
        match accept {
            Some(accept) if accept.contains("application/openmetrics-text") => Self::OpenMetrics,
            _ => Self::Text,
        }
    }

    /// Its `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Text => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Self::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// The host's metrics registry and the families its components write to.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    plugins: Arc<plugin::Families>,
    queues: Arc<queue::Families>,
    api: api::Families,
    writes: writes::Families,
    leader: Gauge,
    leader_transitions: Counter,
    plugin_leader: Family<PluginLabel, Gauge>,
}

/// `{plugin="…"}`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabel {
    plugin: String,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A registry with every family registered (informer metrics once
    /// [`Metrics::register_informers`] is called).
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let plugins = Arc::new(plugin::Families::register(&mut registry));
        let queues = Arc::new(queue::Families::register(&mut registry));
        let api = api::Families::register(&mut registry);
        let writes = writes::Families::register(&mut registry);
        let leader = Gauge::default();
        registry.register(
            "wasmformer_leader",
            "1 while this replica calls handlers (always 1 without leader election)",
            leader.clone(),
        );
        leader.set(1);
        let leader_transitions = Counter::default();
        registry.register(
            "wasmformer_leader_transitions",
            "Times this replica started or stopped leading",
            leader_transitions.clone(),
        );
        let plugin_leader = Family::<PluginLabel, Gauge>::default();
        registry.register(
            "wasmformer_plugin_leader",
            "1 while this replica calls the plugin's handlers (it runs and, with leader election, leads it)",
            plugin_leader.clone(),
        );
        registry.register_collector(Box::new(process::ProcessCollector));
        Self {
            registry,
            plugins,
            queues,
            api,
            writes,
            leader,
            leader_transitions,
            plugin_leader,
        }
    }

    /// Reports the informers `sampler` lists at every scrape.
    pub fn register_informers(&mut self, sampler: InformerSampler) {
        self.registry
            .register_collector(Box::new(informer::InformerCollector::new(sampler)));
    }

    /// The handle for the plugin `name` (the same series whenever a plugin of that name runs).
    pub fn plugin(&self, name: &str) -> PluginMetrics {
        PluginMetrics::new(name, self.plugins.clone(), self.queues.plugin(name))
    }

    /// The handle the plugin `name`'s writer counts its writes with.
    pub fn writes(&self, name: &str) -> WriteCalls {
        WriteCalls::new(name, self.writes.clone())
    }

    /// `client`, with every request counted and timed.
    pub fn instrument_client(&self, client: kube::Client) -> kube::Client {
        self.api.instrument(client)
    }

    /// Sets whether this replica leads (calls handlers).
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// This replica started (`true`) or stopped leading (under `scope: plugin`: leading any
    /// plugin).
    pub fn leader_transition(&self, leading: bool) {
        self.set_leader(leading);
        self.leader_transitions.inc();
    }

    /// Whether this replica calls `plugin`'s handlers now: it started (`true`) or stopped leading
    /// it, or the plugin started or stopped.
    pub fn plugin_leader(&self, plugin: &str, leading: bool) {
        self.plugin_leader
            .get_or_create(&PluginLabel {
                plugin: plugin.to_owned(),
            })
            .set(i64::from(leading));
    }

    /// `plugin` is no longer configured: its `wasmformer_plugin_leader` series goes.
    pub fn forget_plugin_leader(&self, plugin: &str) {
        self.plugin_leader.remove(&PluginLabel {
            plugin: plugin.to_owned(),
        });
    }

    /// The registry in `format`.
    pub fn encode(&self, format: Format) -> String {
        let mut out = String::new();
        let encoded = match format {
            Format::Text => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
            }
            Format::OpenMetrics => {
                prometheus_client::encoding::text::encode(&mut out, &self.registry)
            }
        };
        encoded.expect("encoding metrics into a String cannot fail");
        out
    }
}

/// Label values are plain strings; a label set is a list of `(name, value)` pairs.
pub(crate) type Labels = Vec<(&'static str, String)>;

#[cfg(test)]
mod tests;
