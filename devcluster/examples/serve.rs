//! Runs a dev cluster until Ctrl-C, for trying it with kubectl:
//!
//! ```text
//! cargo run -p wasmformer-devcluster --example serve -- /tmp/dev.kubeconfig [events-per-second]
//! kubectl --kubeconfig /tmp/dev.kubeconfig get pods -A -w
//! ```
//!
//! The controllers run (two fake nodes). With a rate, the simulator generates workload churn at
//! that many events per second.

use wasmformer_devcluster::{
    ControllerConfig, DevCluster, DevClusterConfig,
    simulate::{self, SimulationConfig},
};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let kubeconfig = args
        .next()
        .unwrap_or_else(|| "wasmformer-dev.kubeconfig".into());
    let rate: Option<f64> = args.next().map(|r| r.parse()).transpose()?;
    let dev = DevCluster::start(
        DevClusterConfig::default().controllers(Some(ControllerConfig::default().nodes(2))),
    )
    .await?;
    dev.write_kubeconfig(&kubeconfig)?;
    println!("dev cluster at {} (kubeconfig {kubeconfig})", dev.url());
    let simulation = rate.map(|rate| {
        simulate::spawn(
            dev.store().clone(),
            SimulationConfig::default().events_per_second(rate),
        )
    });
    tokio::signal::ctrl_c().await?;
    if let Some(simulation) = simulation {
        println!("{:?}", simulation.stop().await?);
    }
    dev.shutdown().await?;
    Ok(())
}
