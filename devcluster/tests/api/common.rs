//! Shared setup for the integration tests.

use std::{future::Future, time::Duration};

use wasmformer_devcluster::{DevCluster, DevClusterConfig};

/// Upper bound for any single awaited condition in these tests.
pub const WAIT: Duration = Duration::from_secs(20);

/// Starts a dev cluster on a free loopback port.
pub async fn start() -> DevCluster {
    start_with(DevClusterConfig::default()).await
}

pub async fn start_with(config: DevClusterConfig) -> DevCluster {
    DevCluster::start(config).await.expect("dev cluster starts")
}

/// Awaits `future`, failing the test with `what` if it takes longer than [`WAIT`].
pub async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}
