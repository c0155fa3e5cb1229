//! [`Work`]: a plugin's work queue of keys on its worker — what the worker reconciles (contract
//! 0.3.1's `reconciler` export) and which failed events it delivers again (a handler's
//! `Error::retry`), with client-go's deduplication, per-key backoff and overall bucket
//! ([`crate::workqueue`]).
//!
//! Keys come from events the worker pops: an event of a handled kind queues its object's key; an
//! event of a `reconcile.owns` kind queues its controller owner's key; an event of a
//! `reconcile.watches` kind queues the handled objects that its configured index maps its name
//! to (a lookup in the handled kind's store, no guest call). Everything here runs on the worker's
//! thread, between two event deliveries, so the queue needs no lock; `/status` reads a copy of
//! its counts.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::queue::{SubscriptionId, TRIM_CAPACITY};
use super::worker::HandledKind;
use crate::cache::{CachedObject, Event, Gvk, ObjectKey};
use crate::error_chain;
use crate::informer::Lister;
use crate::metrics::QueueMetrics;
use crate::plugin::{CallError, PluginInstance};
use crate::workqueue::{Clock, QueueStats, RateLimits, SystemClock, WorkQueue};

/// What a plugin's work queue is fed from besides its handled kinds, and how it is paced.
#[derive(Debug, Clone, Default)]
pub struct ReconcileWiring {
    /// Backoff and bucket (`reconcile.backoff`, `qps`, `burst`).
    pub limits: RateLimits,
    /// The `reconcile.owns` and `reconcile.watches` kinds, subscribed after the handled kinds
    /// (the first one's subscription is `handles.len()`).
    pub related: Vec<RelatedKind>,
}

/// A kind whose events queue keys of handled objects, with no handler call.
#[derive(Debug, Clone)]
pub struct RelatedKind {
    /// The kind.
    pub gvk: Gvk,
    /// Its informer's store.
    pub lister: Lister,
    /// How its objects map to keys.
    pub map: KeyMap,
}

/// How an object of a related kind maps to keys of handled objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMap {
    /// `reconcile.owns`: its controller owner (`ownerReferences[].controller: true`), if the
    /// owner's kind is handled.
    Owner,
    /// `reconcile.watches`: every handled object in its namespace (all namespaces for a
    /// cluster-scoped object) whose index `index` holds its name.
    Index(String),
}

/// Why a key is queued.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Purpose {
    /// Reconcile it.
    Reconcile,
    /// Deliver its newest state again to the handler that asked for a retry.
    Redeliver,
}

/// One key of the work queue: an object of a handled kind, and why.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct WorkKey {
    purpose: Purpose,
    subscription: SubscriptionId,
    key: ObjectKey,
}

/// `/status`'s `workQueue` of a plugin: its keys to reconcile or retry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkQueueReport {
    /// Keys ready to run.
    pub depth: usize,
    /// Keys scheduled for later (backoff or requeue-after).
    pub scheduled: usize,
    /// Scheduled keys that failed at least once since their last success.
    pub keys_in_backoff: usize,
    /// Retries (rate-limited re-adds after a failure) so far.
    pub retries: u64,
    /// Reconcile calls so far.
    pub reconciles: u64,
    /// How long the longest-waiting ready key has waited, in milliseconds.
    pub oldest_key_age_ms: Option<u64>,
    /// The keys that failed since their last success (most failures first, at most
    /// [`FAILING_SHOWN`]).
    pub failing: Vec<FailingKey>,
}

/// How many failing keys `/status` lists.
pub const FAILING_SHOWN: usize = 10;

/// A key that failed since its last success.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailingKey {
    /// `reconcile` or `redeliver` (a handler's retried event).
    pub purpose: &'static str,
    /// `ConfigMap shop/settings`.
    pub key: String,
    /// Failures in a row: its next run is attempt `failures + 1`.
    pub failures: u32,
}

/// The worker's work queue and what feeds it.
pub(crate) struct Work {
    queue: WorkQueue<WorkKey>,
    /// The handled kinds, by subscription (for `/status`).
    kinds: Vec<Gvk>,
    related: Vec<RelatedKind>,
    reconciles: u64,
    report: Arc<Mutex<WorkQueueReport>>,
    /// `workqueue_retries_total` of the plugin.
    metrics: QueueMetrics,
}

impl Work {
    /// An empty queue on the system clock for a plugin handling `kinds`.
    pub fn new(
        wiring: ReconcileWiring,
        kinds: Vec<Gvk>,
        report: Arc<Mutex<WorkQueueReport>>,
        metrics: QueueMetrics,
    ) -> Self {
        Self::with_clock(wiring, kinds, report, metrics, Arc::new(SystemClock))
    }

    /// An empty queue on `clock`.
    pub fn with_clock(
        wiring: ReconcileWiring,
        kinds: Vec<Gvk>,
        report: Arc<Mutex<WorkQueueReport>>,
        metrics: QueueMetrics,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self {
            queue: WorkQueue::new(clock, wiring.limits),
            kinds,
            related: wiring.related,
            reconciles: 0,
            report,
            metrics,
        }
    }

    /// Whether `subscription` is a related kind's (no handler is called for its events).
    pub fn is_related(&self, handled: &[HandledKind], subscription: SubscriptionId) -> bool {
        subscription >= handled.len() && subscription - handled.len() < self.related.len()
    }

    /// Queues the keys an event on `obj` (from `subscription`) maps to, if `reconciles`.
    pub fn on_event(
        &mut self,
        handled: &[HandledKind],
        subscription: SubscriptionId,
        obj: &CachedObject,
        reconciles: bool,
    ) {
        if !reconciles {
            return;
        }
        if subscription < handled.len() {
            self.reconcile(subscription, obj.key().clone());
        } else if let Some(related) = self.related.get(subscription - handled.len()) {
            for (subscription, key) in related_keys(handled, &related.map, obj) {
                self.reconcile(subscription, key);
            }
        }
        self.publish();
    }

    fn reconcile(&mut self, subscription: SubscriptionId, key: ObjectKey) {
        self.queue.add(WorkKey {
            purpose: Purpose::Reconcile,
            subscription,
            key,
        });
    }

    /// Schedules a failed event's object for delivery again after its backoff.
    pub fn retry_event(&mut self, subscription: SubscriptionId, key: ObjectKey) {
        self.queue.add_rate_limited(WorkKey {
            purpose: Purpose::Redeliver,
            subscription,
            key,
        });
        self.metrics.retried();
        self.publish();
    }

    /// A successful delivery of the object: its retry failures are forgotten.
    pub fn delivered(&mut self, subscription: SubscriptionId, key: &ObjectKey) {
        let key = WorkKey {
            purpose: Purpose::Redeliver,
            subscription,
            key: key.clone(),
        };
        if self.queue.num_requeues(&key) > 0 {
            self.queue.forget(&key);
        }
    }

    /// Whether a key is ready to run now.
    pub fn has_ready(&mut self) -> bool {
        self.queue.has_ready()
    }

    /// How long until the earliest scheduled key is due (zero if one is ready).
    pub fn next_in(&mut self) -> Option<Duration> {
        if self.queue.has_ready() {
            return Some(Duration::ZERO);
        }
        let now = self.queue.clock().now();
        self.queue
            .next_due()
            .map(|at| at.saturating_duration_since(now))
    }

    /// Runs one ready key on `instance`: a reconcile, or a handler's retried event. Returns the
    /// outcome for the worker's accounting, or `None` if nothing was ready.
    pub fn run_one(
        &mut self,
        instance: &mut PluginInstance,
        handled: &[HandledKind],
    ) -> Option<Ran> {
        let key = self.queue.get()?;
        let attempt = self.queue.num_requeues(&key) + 1;
        let kind = &handled[key.subscription];
        let started = Instant::now();
        let (what, result, retry) = match key.purpose {
            Purpose::Reconcile => {
                if !instance.reconciles() {
                    // Queued for a version that reconciled; this one does not.
                    self.queue.forget(&key);
                    self.queue.done(&key);
                    self.publish();
                    return None;
                }
                self.reconciles += 1;
                let result = instance
                    .reconcile(&kind.gvk, key.key.namespace(), key.key.name())
                    .map(|requeue| {
                        if let Some(after) = requeue {
                            self.queue.add_after(key.clone(), after);
                        }
                    });
                let retry = result.as_ref().is_err_and(|e| e.wants_retry(true));
                ("reconcile", result, retry)
            }
            Purpose::Redeliver => {
                let Some(obj) = kind.lister.store().get(key.key.namespace(), key.key.name()) else {
                    // Deleted meanwhile: its delete was delivered, nothing to retry.
                    self.queue.forget(&key);
                    self.queue.done(&key);
                    self.publish();
                    return None;
                };
                let event = Event::Update {
                    old: obj.clone(),
                    new: obj,
                };
                let result = instance.handle(&kind.gvk, &event);
                let retry = result.as_ref().is_err_and(|e| e.wants_retry(false));
                ("update", result, retry)
            }
        };
        let backoff = match (&result, retry) {
            (Ok(()), _) | (Err(_), false) => {
                self.queue.forget(&key);
                None
            }
            (Err(_), true) => {
                self.queue.add_rate_limited(key.clone());
                self.metrics.retried();
                self.queue.next_due().map(|_| ())
            }
        };
        self.queue.done(&key);
        // A drained backlog's freed heap is given back to the OS, as the event queue's is.
        if self.queue.release_drained() >= TRIM_CAPACITY {
            crate::trim::request();
        }
        let elapsed = started.elapsed();
        match &result {
            Ok(()) => tracing::debug!(
                object.ref = %key.key, object.kind = %kind.gvk.kind, event.kind = what, reconcile.attempt = attempt,
                event.durationMs = elapsed.as_secs_f64() * 1e3, "work done"
            ),
            Err(error) => tracing::warn!(
                object.ref = %key.key, object.kind = %kind.gvk.kind, event.kind = what, reconcile.attempt = attempt,
                retried = backoff.is_some(), error = %error_chain(error), "work failed"
            ),
        }
        self.publish();
        Some(Ran {
            what,
            gvk: kind.gvk.clone(),
            key: key.key,
            attempt,
            result,
            elapsed,
        })
    }

    /// Copies the queue's counts for `/status`.
    fn publish(&self) {
        let stats: QueueStats = self.queue.stats();
        let failing = self
            .queue
            .most_failing(FAILING_SHOWN)
            .map(|(key, failures)| FailingKey {
                purpose: match key.purpose {
                    Purpose::Reconcile => "reconcile",
                    Purpose::Redeliver => "redeliver",
                },
                key: format!(
                    "{} {}",
                    self.kinds
                        .get(key.subscription)
                        .map_or("", |k| k.kind.as_str()),
                    key.key
                ),
                failures,
            })
            .collect();
        *self.report.lock().expect("work queue report lock poisoned") = WorkQueueReport {
            depth: stats.depth,
            scheduled: stats.waiting,
            keys_in_backoff: stats.in_backoff,
            retries: stats.retries,
            reconciles: self.reconciles,
            oldest_key_age_ms: stats.oldest_ready.map(|d| d.as_millis() as u64),
            failing,
        };
    }
}

/// One key the worker ran.
pub(crate) struct Ran {
    /// `reconcile`, or `update` for a retried event.
    pub what: &'static str,
    /// The key's kind.
    pub gvk: Gvk,
    /// The key.
    pub key: ObjectKey,
    /// 1 + its failures before this run.
    pub attempt: u32,
    /// How it ended.
    pub result: Result<(), CallError>,
    /// How long it took.
    pub elapsed: Duration,
}

/// The handled keys an object of a related kind maps to.
fn related_keys(
    handled: &[HandledKind],
    map: &KeyMap,
    obj: &CachedObject,
) -> Vec<(SubscriptionId, ObjectKey)> {
    match map {
        KeyMap::Owner => controller_owner(obj)
            .and_then(|(gvk, name)| {
                let subscription = handled.iter().position(|h| h.gvk == gvk)?;
                Some(vec![(subscription, ObjectKey::new(obj.namespace(), name))])
            })
            .unwrap_or_default(),
        KeyMap::Index(index) => {
            let mut keys = Vec::new();
            for (subscription, kind) in handled.iter().enumerate() {
                let Ok(objects) = kind.lister.store().by_index(index, obj.name()) else {
                    continue;
                };
                keys.extend(
                    objects
                        .iter()
                        .filter(|o| obj.namespace().is_empty() || o.namespace() == obj.namespace())
                        .map(|o| (subscription, o.key().clone())),
                );
            }
            keys
        }
    }
}

/// The kind and name of `obj`'s controller owner, from `metadata.ownerReferences`.
fn controller_owner(obj: &CachedObject) -> Option<(Gvk, String)> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default, rename = "ownerReferences")]
        owner_references: Vec<OwnerReference>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct OwnerReference {
        api_version: String,
        kind: String,
        name: String,
        #[serde(default)]
        controller: Option<bool>,
    }
    #[derive(serde::Deserialize)]
    struct Body {
        metadata: Meta,
    }
    let body: Body = serde_json::from_str(obj.body()).ok()?;
    body.metadata
        .owner_references
        .into_iter()
        .find(|r| r.controller == Some(true))
        .map(|r| (Gvk::from_api_version(&r.api_version, &r.kind), r.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> CachedObject {
        CachedObject::from_value(value, true, &[]).unwrap()
    }

    #[test]
    fn the_controller_owner_is_the_reference_with_controller_true() {
        let rs = object(
            json!({"metadata": {"namespace": "ns", "name": "web-1", "uid": "u", "resourceVersion": "1",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "x"},
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "y", "controller": true}
            ]}}),
        );
        assert_eq!(
            controller_owner(&rs),
            Some((Gvk::from_api_version("apps/v1", "Deployment"), "web".into()))
        );
        let orphan = object(
            json!({"metadata": {"namespace": "ns", "name": "o", "uid": "u", "resourceVersion": "1",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "x"}]}}),
        );
        assert_eq!(controller_owner(&orphan), None);
    }
}
