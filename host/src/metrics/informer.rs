//! Informer metrics, one series per informer (never per object: client-go removed its reflector
//! metrics because per-object series leaked). Read from the informers' status at scrape time, so
//! the informers hold no metrics handle at all.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use super::Labels;

/// What one informer has done, as the metrics show it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InformerSample {
    /// The `resource` label: plural with its group (`pods`, `deployments.apps`).
    pub resource: String,
    /// The `namespace` label: `*` for all namespaces, empty for cluster-scoped resources.
    pub namespace: String,
    /// The `selector` label: `labels <selector>`, `fields <selector>`, `metadata-only`, joined
    /// by `; `; empty for none. Together the three labels name one informer.
    pub selector: String,
    /// Objects in its cache.
    pub objects: u64,
    /// Events emitted by type: added, updated, deleted.
    pub events: [(&'static str, u64); 3],
    /// Lists by reason: `start` (the first), `410` (the watch expired), `error` (after another
    /// watch failure).
    pub lists: [(&'static str, u64); 3],
    /// Watch failures, each followed by a new watch.
    pub watch_restarts: u64,
    /// Seconds since it last received an object (listed or watched); `None` before the first.
    pub seconds_since_last_event: Option<f64>,
    /// Whether its first list completed.
    pub synced: bool,
}

/// Reads one gauge's value from a sample (`NaN`: no value).
type Reading = fn(&InformerSample) -> f64;

/// Lists the running informers at scrape time.
pub type InformerSampler = Box<dyn Fn() -> Vec<InformerSample> + Send + Sync>;

pub(super) struct InformerCollector {
    sampler: InformerSampler,
}

impl std::fmt::Debug for InformerCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InformerCollector").finish_non_exhaustive()
    }
}

impl InformerCollector {
    pub(super) fn new(sampler: InformerSampler) -> Self {
        Self { sampler }
    }
}

fn labels(sample: &InformerSample) -> Labels {
    vec![
        ("resource", sample.resource.clone()),
        ("namespace", sample.namespace.clone()),
        ("selector", sample.selector.clone()),
    ]
}

fn labels_with(sample: &InformerSample, name: &'static str, value: &str) -> Labels {
    let mut labels = labels(sample);
    labels.push((name, value.to_owned()));
    labels
}

impl Collector for InformerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let samples = (self.sampler)();
        let gauges: [(&str, &str, Reading); 3] = [
            (
                "wasmformer_informer_objects",
                "Objects in the informer's cache",
                |s| s.objects as f64,
            ),
            (
                "wasmformer_informer_synced",
                "1 once the informer's first list completed",
                |s| f64::from(u8::from(s.synced)),
            ),
            (
                "wasmformer_informer_seconds_since_last_event",
                "Seconds since the informer last received an object (absent before the first)",
                |s| s.seconds_since_last_event.unwrap_or(f64::NAN),
            ),
        ];
        for (name, help, value) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for sample in &samples {
                let v = value(sample);
                if !v.is_nan() {
                    ConstGauge::new(v).encode(family.encode_family(&labels(sample))?)?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "wasmformer_informer_events",
            "Events the informer emitted, by type",
            None,
            MetricType::Counter,
        )?;
        for sample in &samples {
            for (kind, count) in sample.events {
                ConstCounter::new(count)
                    .encode(family.encode_family(&labels_with(sample, "type", kind))?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "wasmformer_informer_lists",
            "Lists by reason: start (the first), 410 (the watch expired), error (after another failure)",
            None,
            MetricType::Counter,
        )?;
        for sample in &samples {
            for (reason, count) in sample.lists {
                ConstCounter::new(count)
                    .encode(family.encode_family(&labels_with(sample, "reason", reason))?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "wasmformer_informer_watch_restarts",
            "Watch failures, each followed by a new watch (or a list)",
            None,
            MetricType::Counter,
        )?;
        for sample in &samples {
            ConstCounter::new(sample.watch_restarts)
                .encode(family.encode_family(&labels(sample))?)?;
        }
        Ok(())
    }
}
