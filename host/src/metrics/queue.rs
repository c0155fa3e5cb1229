//! Each plugin's queue under client-go's workqueue metric names, `name="<plugin>"`, so the
//! dashboards and alerts written for controller-runtime apply: `workqueue_depth`,
//! `workqueue_adds_total`, `workqueue_queue_duration_seconds`, `workqueue_work_duration_seconds`,
//! `workqueue_unfinished_work_seconds`, `workqueue_longest_running_processor_seconds`,
//! `workqueue_retries_total`; plus `wasmformer_queue_coalesced_total` (updates merged past
//! `maxQueuedEvents`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabel {
    name: String,
}

fn workqueue_histogram() -> Histogram {
    // client-go's buckets: 10 ns to 10 s, ×10.
    Histogram::new(exponential_buckets(10e-9, 10.0, 10))
}

type HistogramFamily = Family<NameLabel, Histogram, fn() -> Histogram>;

/// When each plugin's current call started (`None`: idle), read at scrape time.
type InFlight = Arc<Mutex<BTreeMap<String, Arc<Mutex<Option<Instant>>>>>>;

#[derive(Debug)]
pub(super) struct Families {
    depth: Family<NameLabel, Gauge>,
    adds: Family<NameLabel, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    retries: Family<NameLabel, Counter>,
    coalesced: Family<NameLabel, Counter>,
    in_flight: InFlight,
}

impl Families {
    pub(super) fn register(registry: &mut Registry) -> Self {
        let families = Self {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(workqueue_histogram),
            work_duration: Family::new_with_constructor(workqueue_histogram),
            retries: Family::default(),
            coalesced: Family::default(),
            in_flight: InFlight::default(),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of the plugin's queue",
            families.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Events and sync markers queued for the plugin",
            families.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long an event waits in the plugin's queue before its handler is called",
            families.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long delivering one event takes",
            families.work_duration.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Keys re-queued after a failure, rate limited: failed reconciles, and handler errors that asked for a retry",
            families.retries.clone(),
        );
        registry.register(
            "wasmformer_queue_coalesced",
            "Updates merged into a queued update because the queue was past maxQueuedEvents",
            families.coalesced.clone(),
        );
        registry.register_collector(Box::new(InFlightCollector(families.in_flight.clone())));
        families
    }

    pub(super) fn plugin(&self, name: &str) -> QueueMetrics {
        let label = NameLabel {
            name: name.to_owned(),
        };
        let in_flight = Arc::new(Mutex::new(None));
        self.in_flight
            .lock()
            .expect("in-flight lock poisoned")
            .insert(name.to_owned(), in_flight.clone());
        // Register the series now so that an idle plugin shows zeros rather than nothing.
        let _ = self.coalesced.get_or_create_owned(&label);
        QueueMetrics {
            retries: self.retries.get_or_create_owned(&label),
            depth: self.depth.get_or_create_owned(&label),
            adds: self.adds.get_or_create_owned(&label),
            queue_duration: self.queue_duration.get_or_create_owned(&label),
            work_duration: self.work_duration.get_or_create_owned(&label),
            coalesced: self.coalesced.get_or_create_owned(&label),
            in_flight,
        }
    }
}

/// One plugin queue's series, held by the queue and its worker.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    coalesced: Counter,
    retries: Counter,
    in_flight: Arc<Mutex<Option<Instant>>>,
}

impl Default for QueueMetrics {
    /// Series registered nowhere (queues built outside a runtime: tests, `replay`).
    fn default() -> Self {
        Self {
            depth: Gauge::default(),
            adds: Counter::default(),
            queue_duration: workqueue_histogram(),
            work_duration: workqueue_histogram(),
            coalesced: Counter::default(),
            retries: Counter::default(),
            in_flight: Arc::default(),
        }
    }
}

impl QueueMetrics {
    /// An item was queued; the queue now holds `depth`.
    pub fn added(&self, depth: usize) {
        self.adds.inc();
        self.depth.set(depth as i64);
    }

    /// A key of the plugin's work queue was re-queued after a failure.
    pub fn retried(&self) {
        self.retries.inc();
    }

    /// An update was merged into a queued one.
    pub fn coalesced(&self) {
        self.coalesced.inc();
    }

    /// The queue now holds `depth` items (after a pop, a snapshot swap, an abandon).
    pub fn depth(&self, depth: usize) {
        self.depth.set(depth as i64);
    }

    /// An item was taken after waiting `waited`.
    pub fn taken(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A delivery starts; it is timed until the returned guard is dropped.
    pub fn work(&self) -> Work<'_> {
        let started = Instant::now();
        *self.in_flight.lock().expect("in-flight lock poisoned") = Some(started);
        Work {
            metrics: self,
            started,
        }
    }
}

/// A delivery in progress (see [`QueueMetrics::work`]).
pub struct Work<'a> {
    metrics: &'a QueueMetrics,
    started: Instant,
}

impl Drop for Work<'_> {
    fn drop(&mut self) {
        *self
            .metrics
            .in_flight
            .lock()
            .expect("in-flight lock poisoned") = None;
        self.metrics
            .work_duration
            .observe(self.started.elapsed().as_secs_f64());
    }
}

/// `workqueue_unfinished_work_seconds` and `workqueue_longest_running_processor_seconds`: with
/// one worker per plugin both are how long the current call has been running.
#[derive(Debug)]
struct InFlightCollector(InFlight);

impl Collector for InFlightCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let running: Vec<(String, f64)> = self
            .0
            .lock()
            .expect("in-flight lock poisoned")
            .iter()
            .map(|(name, since)| {
                let since = *since.lock().expect("in-flight lock poisoned");
                (
                    name.clone(),
                    since.map_or(0.0, |s| s.elapsed().as_secs_f64()),
                )
            })
            .collect();
        for (metric, help) in [
            (
                "workqueue_unfinished_work_seconds",
                "Seconds of work in progress not yet observed by work_duration",
            ),
            (
                "workqueue_longest_running_processor_seconds",
                "How long the longest running delivery has been running",
            ),
        ] {
            let mut family = encoder.encode_descriptor(
                metric,
                help,
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?;
            for (name, seconds) in &running {
                let labels = NameLabel { name: name.clone() };
                ConstGauge::new(*seconds).encode(family.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
