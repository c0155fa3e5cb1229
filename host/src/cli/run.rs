//! `wasmformer run`: the host against the cluster the config names, until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use wasmformer::config::HostConfig;
use wasmformer::plugin::{PluginEngine, PoolSettings};
use wasmformer::runtime::{self, Runtime, RuntimeOptions};

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The host configuration (YAML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Send plugins' writes with `dryRun=All`: the API server validates them and changes
    /// nothing (Events are logged, not created).
    #[arg(long)]
    dry_run: bool,
}

pub fn run(args: RunArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config = HostConfig::load(&args.config)?;
    let tokio = tokio::runtime::Runtime::new()?;
    tokio.block_on(async move {
        let client = runtime::connect(&config).await?;
        serve(config, client, cache_dir, None, args.dry_run).await
    })
}

/// Runs the host until a signal (or `run_for` has passed); shared with `wasmformer dev`.
pub async fn serve(
    config: HostConfig,
    client: kube::Client,
    cache_dir: Option<PathBuf>,
    run_for: Option<std::time::Duration>,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    let engine = std::sync::Arc::new(
        PluginEngine::with_pool(
            cache_dir,
            PoolSettings {
                max_instances: config.host.max_instances,
                keep_resident_bytes: config.host.keep_resident_bytes,
            },
        )
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?,
    );
    let (admin_address, watch_files) = (config.host.admin_address, config.host.watch_config);
    let token =
        match &config.host.admin_token_file {
            Some(file) => {
                let path = config.base_dir.join(file);
                Some(std::fs::read_to_string(&path).with_context(|| {
                    format!("cannot read host.adminTokenFile {}", path.display())
                })?)
            }
            None => None,
        };
    let runtime = Runtime::start(
        config,
        client,
        engine,
        RuntimeOptions {
            dry_run,
            ..RuntimeOptions::default()
        },
    )
    .await;
    let _admin = match admin_address {
        Some(addr) => Some(wasmformer::admin::serve(addr, runtime.clone(), token).await?),
        None => None,
    };
    let _reloads = wasmformer::trigger::spawn(runtime.clone(), watch_files)?;
    let _settle = tokio::spawn(settle_code_once_synced(runtime.clone()));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let deadline = async {
        match run_for {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let timeout = runtime.config().host.shutdown_timeout;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!(shutdown.timeout = ?timeout, "SIGINT received, stopping"),
        _ = terminate.recv() => tracing::info!(shutdown.timeout = ?timeout, "SIGTERM received, stopping"),
        _ = deadline => tracing::info!("run time over, stopping"),
    }
    // Stop taking events, deliver what is queued within host.shutdownTimeout; a second signal
    // exits at once, like kubelet's second SIGTERM or an impatient Ctrl-C.
    let started = std::time::Instant::now();
    tokio::select! {
        _ = runtime.shutdown() => {}
        _ = tokio::signal::ctrl_c() => exit_at_once("SIGINT", 130),
        _ = terminate.recv() => exit_at_once("SIGTERM", 143),
    }
    tracing::info!(shutdown.elapsed = ?started.elapsed(), "stopped");
    Ok(ExitCode::SUCCESS)
}

/// Once every plugin has synced (the start's work done: configuration, compiles, initial lists),
/// gives back the host's code pages only the start ran (`wasmformer::resident`).
async fn settle_code_once_synced(runtime: std::sync::Arc<Runtime>) {
    while !runtime.is_synced().await {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    wasmformer::resident::settle_own_code_soon();
}

/// A second signal during shutdown: leave without delivering the rest (exit status 128 + signal).
fn exit_at_once(signal: &str, status: i32) -> ! {
    tracing::warn!(
        signal,
        "second signal during shutdown: exiting without delivering the queued events"
    );
    std::process::exit(status)
}
