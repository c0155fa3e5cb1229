//! Plugins' writes: `wasmformer_writes_total{plugin,verb,result}` and
//! `wasmformer_write_duration_seconds{plugin,verb}`. `verb` is apply, patch, create, delete or
//! event; `result` is ok, or the error: `refused` (not granted: the host answered, nothing was
//! sent), `forbidden` (the API server's RBAC refused it), invalid, conflict, not-found,
//! throttled, unavailable. The duration covers writes that were sent (or recorded), rate-limit
//! wait included; refusals and malformed writes take no time worth a bucket.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WriteLabels {
    plugin: String,
    verb: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerbLabels {
    plugin: String,
    verb: String,
}

#[derive(Debug, Clone)]
pub(super) struct Families {
    writes: Family<WriteLabels, Counter>,
    duration: Family<VerbLabels, Histogram, fn() -> Histogram>,
}

impl Families {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            writes: Family::default(),
            duration: Family::new_with_constructor(super::api::request_histogram),
        };
        registry.register(
            "wasmformer_writes",
            "Plugins' writes by plugin, verb and result (refused: not granted, never sent; forbidden: refused by the API server's RBAC)",
            families.writes.clone(),
        );
        registry.register(
            "wasmformer_write_duration_seconds",
            "How long plugins' writes that were sent took, rate-limit wait included",
            families.duration.clone(),
        );
        families
    }
}

/// Counts one plugin's writes; cloned into its writer.
#[derive(Debug, Clone)]
pub struct WriteCalls {
    plugin: String,
    families: Families,
}

impl WriteCalls {
    pub(super) fn new(plugin: &str, families: Families) -> Self {
        Self {
            plugin: plugin.to_owned(),
            families,
        }
    }

    /// Shows `verb` (with result `ok`) at 0 before the first write, so a dashboard and an alert
    /// see the series of a plugin that may write from its start.
    pub fn declare(&self, verb: &str) {
        let _ = self.families.writes.get_or_create(&WriteLabels {
            plugin: self.plugin.clone(),
            verb: verb.to_owned(),
            result: "ok".to_owned(),
        });
        let _ = self.families.duration.get_or_create(&VerbLabels {
            plugin: self.plugin.clone(),
            verb: verb.to_owned(),
        });
    }

    /// One write of `verb` that ended in `result`; `sent` is how long it took if it was sent.
    pub fn count(&self, verb: &str, result: &str, sent: Option<Duration>) {
        let labels = WriteLabels {
            plugin: self.plugin.clone(),
            verb: verb.to_owned(),
            result: result.to_owned(),
        };
        self.families.writes.get_or_create(&labels).inc();
        if let Some(took) = sent {
            let labels = VerbLabels {
                plugin: self.plugin.clone(),
                verb: verb.to_owned(),
            };
            self.families
                .duration
                .get_or_create(&labels)
                .observe(took.as_secs_f64());
        }
    }
}
