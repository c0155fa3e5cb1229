//! A churn generator for `wasmformer dev --simulate` and load tests: nodes with heartbeat
//! leases, namespaces, and deployments whose replicasets and pods go through their lifecycle
//! (created Pending, scheduled, Running with conditions and container statuses, scaled,
//! restarted, deleted), written through the [`Store`] at a steady rate.
//!
//! Each [`Simulator::step`] performs exactly one store write, so the rate is in watch events
//! per second. The sequence of operations (verbs, kinds, names, field values other than
//! timestamps and uids) is a pure function of the seed and the configuration, provided nothing
//! else writes the simulated objects.

mod rng;
mod workload;
mod writes;

use std::{future::Future, time::Duration};

use tokio::{sync::oneshot, task::JoinHandle, time::Instant};

use crate::{resources::ResourceId, store::Store};

pub use rng::Rng;
pub(crate) use writes::MANAGED_BY;

/// How the simulation behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct SimulationConfig {
    /// Seed for every random choice.
    pub seed: u64,
    /// Store writes (watch events) per second for [`Simulator::run`].
    pub events_per_second: f64,
    /// Namespaces to spread workloads over (`sim-0`, `sim-1`, ...).
    pub namespaces: usize,
    /// Nodes pods are scheduled on (`sim-node-0`, ...).
    pub nodes: usize,
    /// Upper bound on live deployments.
    pub max_deployments: usize,
    /// Upper bound on replicas per deployment.
    pub max_replicas: u32,
    /// Stop after this many writes.
    pub max_events: Option<u64>,
}

impl Default for SimulationConfig {
    fn default() -> Self {
        Self {
            seed: 1,
            events_per_second: 50.0,
            namespaces: 3,
            nodes: 3,
            max_deployments: 20,
            max_replicas: 3,
            max_events: None,
        }
    }
}

impl SimulationConfig {
    /// Sets [`SimulationConfig::seed`].
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets [`SimulationConfig::events_per_second`].
    #[must_use]
    pub fn events_per_second(mut self, rate: f64) -> Self {
        self.events_per_second = rate;
        self
    }

    /// Sets [`SimulationConfig::max_deployments`].
    #[must_use]
    pub fn max_deployments(mut self, max: usize) -> Self {
        self.max_deployments = max;
        self
    }

    /// Sets [`SimulationConfig::max_events`].
    #[must_use]
    pub fn max_events(mut self, max: u64) -> Self {
        self.max_events = Some(max);
        self
    }
}

/// A simulation step could not write to the store.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store refused a write the simulator expected to succeed.
    #[error("simulated {verb} of {resource} {name:?} failed")]
    Store {
        /// `create`, `update` or `delete`.
        verb: &'static str,
        /// The resource written.
        resource: ResourceId,
        /// The object name.
        name: String,
        /// The store's error.
        #[source]
        source: Box<crate::store::Error>,
    },
    /// The configured rate is not a positive number.
    #[error("events_per_second must be positive, got {rate}")]
    Rate {
        /// The configured rate.
        rate: f64,
    },
}

/// `pub type Result<T, E = Error>` for this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One write the simulator made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Operation {
    /// `create`, `update` or `delete`.
    pub verb: &'static str,
    /// The resource written.
    pub resource: ResourceId,
    /// The namespace, for namespaced objects.
    pub namespace: Option<String>,
    /// The object name.
    pub name: String,
    /// The resourceVersion of the write.
    pub resource_version: u64,
}

/// Counts of what a run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimulationStats {
    /// Writes performed.
    pub operations: u64,
    /// Objects created.
    pub creates: u64,
    /// Objects updated.
    pub updates: u64,
    /// Objects deleted.
    pub deletes: u64,
}

impl SimulationStats {
    fn count(&mut self, operation: &Operation) {
        self.operations += 1;
        match operation.verb {
            "create" => self.creates += 1,
            "delete" => self.deletes += 1,
            _ => self.updates += 1,
        }
    }
}

/// Drives a simulated cluster through the store.
#[derive(Debug)]
pub struct Simulator {
    store: Store,
    config: SimulationConfig,
    workload: workload::Workload,
    stats: SimulationStats,
}

impl Simulator {
    /// A simulator writing to `store`.
    pub fn new(store: Store, config: SimulationConfig) -> Self {
        Self {
            workload: workload::Workload::new(&config),
            store,
            config,
            stats: SimulationStats::default(),
        }
    }

    /// Performs exactly one write.
    pub fn step(&mut self) -> Result<Operation> {
        let operation = self.workload.step(&self.store)?;
        self.stats.count(&operation);
        Ok(operation)
    }

    /// What has been done so far.
    pub fn stats(&self) -> &SimulationStats {
        &self.stats
    }

    /// Writes at the configured rate until `stop` completes or `max_events` is reached.
    pub async fn run(mut self, stop: impl Future<Output = ()>) -> Result<SimulationStats> {
        let rate = self.config.events_per_second;
        if !(rate > 0.0 && rate.is_finite()) {
            return Err(Error::Rate { rate });
        }
        let limit = self.config.max_events.unwrap_or(u64::MAX);
        let started = Instant::now();
        tokio::pin!(stop);
        let mut done = 0u64;
        while done < limit {
            let due = ((started.elapsed().as_secs_f64() * rate) as u64).min(limit);
            while done < due {
                self.step()?;
                done += 1;
            }
            if done >= limit {
                break;
            }
            let next = started + Duration::from_secs_f64((done + 1) as f64 / rate);
            tokio::select! {
                () = &mut stop => break,
                () = tokio::time::sleep_until(next) => {}
            }
        }
        Ok(self.stats)
    }
}

/// A simulation running on a Tokio task.
#[derive(Debug)]
pub struct SimulationHandle {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<SimulationStats>>,
}

/// Starts [`Simulator::run`] on a task.
pub fn spawn(store: Store, config: SimulationConfig) -> SimulationHandle {
    let (stop, stopped) = oneshot::channel::<()>();
    let simulator = Simulator::new(store, config);
    let task = tokio::spawn(simulator.run(async {
        let _ = stopped.await;
    }));
    SimulationHandle {
        stop: Some(stop),
        task,
    }
}

impl SimulationHandle {
    /// Stops the simulation and returns what it did.
    pub async fn stop(mut self) -> Result<SimulationStats> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.join().await
    }

    /// Waits for the simulation to end by itself (`max_events`).
    pub async fn join(self) -> Result<SimulationStats> {
        match self.task.await {
            Ok(result) => result,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            // Cancelled with the runtime: nothing was lost that the caller can still see.
            Err(_cancelled) => Ok(SimulationStats::default()),
        }
    }
}

#[cfg(test)]
mod tests;
