//! `wasmformer validate`: every problem of a config, with its location.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use wasmformer::config::{HostConfig, Limits, Locations, Problem};
use wasmformer::error_chain;
use wasmformer::plugin::{LoadedPlugin, PluginEngine};
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
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("cannot read config {}", args.config.display()))?;
    let base_dir = args.config.parent().map(Path::to_owned).unwrap_or_default();
    let (config, mut problems) = match HostConfig::parse(&text, base_dir.clone()) {
        Ok(config) => (Some(config), Vec::new()),
        Err(problems) => (None, problems),
    };
    // The wasm files are checked whatever else is wrong: each entry that names one.
    let engine = PluginEngine::new(cache_dir)
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let (wasm_problems, warnings) = check_wasm(&engine, &text, &base_dir);
    problems.extend(wasm_problems);
    for warning in &warnings {
        println!("warning: {warning}");
    }
    // The cluster is asked only about a config that parsed: its kinds are known then.
    if let Some(config) = &config
        && !args.offline
    {
        problems.extend(check_cluster(config));
    }
    let locations = Locations::of(&text);
    for problem in &mut problems {
        problem.locate(&locations);
    }
    problems.sort_by_key(|p| (p.position.is_none(), p.position));
    Ok(report(&args.config, &problems))
}

/// Loads the wasm file of every `plugins[i]` entry that names one (as text), valid or not; a
/// plugin that loads is warned about when it starts above its memory limit.
fn check_wasm(engine: &PluginEngine, text: &str, base_dir: &Path) -> (Vec<Problem>, Vec<String>) {
    let Ok(doc) = wasmformer::yaml::from_str::<serde_json::Value>(text) else {
        return Default::default();
    };
    let entries = doc
        .get("plugins")
        .and_then(|p| p.as_array())
        .cloned()
        .unwrap_or_default();
    let (mut problems, mut warnings) = (Vec::new(), Vec::new());
    for (i, entry) in entries.iter().enumerate() {
        let Some(wasm) = entry.get("wasm").and_then(|w| w.as_str()) else {
            continue;
        };
        let name = entry
            .get("name")
            .and_then(|n| n.as_str())
            .map_or_else(|| format!("plugins[{i}]"), str::to_owned);
        let loaded = match wasmformer::oci::reference_of(Path::new(wasm)) {
            Some(reference) => pull_and_load(engine, &doc, base_dir, &name, wasm, reference),
            None => {
                LoadedPlugin::load(engine, &name, &base_dir.join(wasm)).map_err(|e| error_chain(&e))
            }
        };
        match loaded {
            Ok(loaded) => {
                let limit = entry
                    .pointer("/limits/memoryBytes")
                    .and_then(|m| m.as_u64())
                    .map_or(Limits::default().memory_bytes, |m| m as usize);
                warnings.extend(memory_warning(&loaded, limit, i));
                warnings.extend(reconcile_warning(&loaded, entry, i));
            }
            Err(e) => problems.push(Problem::new(format!("plugins[{i}].wasm"), e)),
        }
    }
    (problems, warnings)
}

/// Pulls an `oci://` plugin (with the document's `host.insecureRegistries` and
/// `host.registryAuth`) and loads it.
fn pull_and_load(
    engine: &PluginEngine,
    doc: &serde_json::Value,
    base_dir: &Path,
    name: &str,
    wasm: &str,
    reference: &str,
) -> Result<LoadedPlugin, String> {
    let insecure = doc
        .pointer("/host/insecureRegistries")
        .and_then(|r| r.as_array())
        .map(|r| {
            r.iter()
                .filter_map(|h| h.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let registries = wasmformer::oci::Registries {
        insecure,
        cache: engine
            .cache_dir()
            .map(|dir| wasmformer::oci::BlobCache::new(dir.join("oci"))),
        auth_file: doc
            .pointer("/host/registryAuth")
            .and_then(|f| f.as_str())
            .map(|f| base_dir.join(f)),
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let pulled = tokio
        .block_on(wasmformer::oci::pull(name, reference, &registries))
        .map_err(|e| error_chain(&e))?;
    LoadedPlugin::from_bytes(engine, name, Path::new(wasm), &pulled.wasm)
        .map_err(|e| error_chain(&e))
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

/// A warning when a plugin configures `reconcile.owns` or `reconcile.watches` but does not export
/// `reconciler`: those keys would only be queued for a reconcile that never comes.
fn reconcile_warning(plugin: &LoadedPlugin, entry: &serde_json::Value, i: usize) -> Option<String> {
    let listed = |field: &str| {
        entry
            .pointer(&format!("/reconcile/{field}"))
            .and_then(|v| v.as_array())
            .is_some_and(|v| !v.is_empty())
    };
    (!plugin.reconciles() && (listed("owns") || listed("watches"))).then(|| {
        format!(
            "plugins[{i}].reconcile: {} does not export wasmformer:plugin/reconciler (built for contract {}), \
             so its owns and watches queue nothing; implement Reconciler and export it with `export!(Plugin, reconciler)`",
            plugin.name(),
            plugin.contract()
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

fn report(path: &Path, problems: &[Problem]) -> ExitCode {
    if problems.is_empty() {
        println!("{}: ok", path.display());
        return ExitCode::SUCCESS;
    }
    println!(
        "{}: {} problem{}",
        path.display(),
        problems.len(),
        if problems.len() == 1 { "" } else { "s" }
    );
    for problem in problems {
        // `config.yaml:7:22: plugins[0]…: message`, as compilers print it (editors jump there).
        let separator = if problem.position.is_some() {
            ":"
        } else {
            ": "
        };
        println!("  {}{separator}{problem}", path.display());
    }
    ExitCode::FAILURE
}
