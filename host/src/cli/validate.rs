//! `wasmformer validate`: every problem of a config, with its location.

use std::path::PathBuf;
use std::process::ExitCode;

use wasmformer::config::{ConfigError, HostConfig, Problem};
use wasmformer::plugin::{LoadedPlugin, PluginEngine};
use wasmformer::error_chain;
use wasmformer::runtime;

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The host configuration (YAML).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Do not contact the cluster (skips checking that it serves the configured kinds).
    #[arg(long)]
    offline: bool,
}

pub fn run(args: ValidateArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config = match HostConfig::load(&args.config) {
        Ok(config) => config,
        Err(ConfigError::Invalid { problems, .. }) => return Ok(report(&args.config, &problems)),
        Err(e) => return Err(e.into()),
    };
    let engine = PluginEngine::new(cache_dir).map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let mut problems = Vec::new();
    let mut warnings = Vec::new();
    for (i, plugin) in config.plugins.iter().enumerate() {
        match LoadedPlugin::load(&engine, plugin.name.as_str(), &config.wasm_path(plugin)) {
            Ok(loaded) => warnings.extend(memory_warning(&loaded, plugin.limits.memory_bytes, i)),
            Err(e) => problems.push(Problem::new(format!("plugins[{i}].wasm"), error_chain(&e))),
        }
    }
    for warning in &warnings {
        println!("warning: {warning}");
    }
    if !args.offline {
        problems.extend(check_cluster(&config));
    }
    Ok(report(&args.config, &problems))
}

/// A warning when a fresh instance of `plugin` already needs more memory than its limit allows
/// (every instantiation would trap: Python and JavaScript plugins start at 10-20 MiB).
fn memory_warning(plugin: &LoadedPlugin, limit: usize, i: usize) -> Option<String> {
    let at_start = plugin.memory_at_start().ok()?;
    (at_start > limit).then(|| {
        format!(
            "plugins[{i}].limits.memoryBytes: {} starts with {at_start} bytes of memory, more than its limit of {limit}; \
             raise memoryBytes above {at_start}",
            plugin.name()
        )
    })
}

/// Resolves every plugin's kinds against the cluster.
fn check_cluster(config: &HostConfig) -> Vec<Problem> {
    let tokio = tokio::runtime::Runtime::new().expect("tokio runtime");
    tokio.block_on(async {
        let client = match runtime::connect(config).await {
            Ok(client) => client,
            Err(e) => return vec![Problem::new("cluster", error_chain(&e))],
        };
        let discovery = runtime::Discovery::new(client);
        let mut problems = Vec::new();
        for (i, plugin) in config.plugins.iter().enumerate() {
            for (at, kind) in plugin.kinds() {
                if let Err(e) = discovery.resolve(plugin.name.as_str(), &kind).await {
                    problems.push(Problem::new(format!("plugins[{i}].{at}"), error_chain(&e)));
                }
            }
        }
        problems
    })
}

fn report(path: &std::path::Path, problems: &[Problem]) -> ExitCode {
    if problems.is_empty() {
        println!("{}: ok", path.display());
        return ExitCode::SUCCESS;
    }
    println!("{}: {} problem{}", path.display(), problems.len(), if problems.len() == 1 { "" } else { "s" });
    for problem in problems {
        println!("  {problem}");
    }
    ExitCode::FAILURE
}
