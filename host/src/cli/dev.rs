//! `wasmformer dev`: the host against the embedded dev cluster, with optional simulated churn.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use wasmformer::config::HostConfig;
use wasmformer_devcluster::simulate::{self, SimulationConfig};
use wasmformer_devcluster::{ControllerConfig, DevCluster, DevClusterConfig};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The config's `cluster:` section is ignored: the host talks to the dev cluster.\n\
While it runs, kubectl works against it: kubectl --kubeconfig <printed path> get pods -A"
)]
pub struct DevArgs {
    /// The host configuration (YAML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Generate workload churn (namespaces, deployments, replicasets, pods through their
    /// lifecycle) at this many events per second.
    #[arg(long, value_name = "EVENTS_PER_SECOND", num_args = 0..=1, default_missing_value = "20")]
    simulate: Option<f64>,
    /// Where the dev cluster listens.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write a kubeconfig for the dev cluster.
    #[arg(long, value_name = "FILE", default_value = "wasmformer-dev.kubeconfig")]
    kubeconfig_out: PathBuf,
    /// Stop after this long (default: run until SIGINT/SIGTERM).
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    run_for: Option<Duration>,
    /// Run no controllers: no fake Nodes, nothing turns Deployments into Pods, no scheduling,
    /// no garbage collection (a bare API server, like kube-apiserver without its
    /// controller-manager).
    #[arg(long)]
    no_controllers: bool,
    /// How many fake Nodes the controllers create.
    #[arg(long, value_name = "COUNT", default_value_t = 1)]
    nodes: usize,
    /// How long a scheduled Pod stays ContainerCreating before it is Running and Ready.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION", default_value = "500ms")]
    pod_start_delay: Duration,
}

pub fn run(args: DevArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config = HostConfig::load(&args.config)?;
    let tokio = tokio::runtime::Runtime::new()?;
    tokio.block_on(async move {
        let controllers = (!args.no_controllers).then(|| {
            ControllerConfig::default()
                .nodes(args.nodes)
                .pod_start_delay(args.pod_start_delay)
        });
        let dev = DevCluster::start(
            DevClusterConfig::default()
                .addr(args.listen)
                .controllers(controllers),
        )
        .await
        .context("cannot start the dev cluster")?;
        dev.write_kubeconfig(&args.kubeconfig_out)
            .with_context(|| format!("cannot write {}", args.kubeconfig_out.display()))?;
        eprintln!(
            "dev cluster at {}; kubeconfig written to {}",
            dev.url(),
            args.kubeconfig_out.display()
        );
        eprintln!(
            "  try: kubectl --kubeconfig {} get pods -A",
            args.kubeconfig_out.display()
        );
        let simulation = args.simulate.map(|rate| {
            eprintln!("simulating cluster churn at {rate} events/s");
            simulate::spawn(
                dev.store().clone(),
                SimulationConfig::default().events_per_second(rate),
            )
        });
        let client = dev
            .client()
            .context("cannot create a client for the dev cluster")?;
        let served = super::run::serve(config, client, cache_dir, args.run_for, false).await;
        if let Some(simulation) = simulation {
            let _ = simulation.stop().await;
        }
        dev.shutdown()
            .await
            .context("dev cluster did not stop cleanly")?;
        served
    })
}
