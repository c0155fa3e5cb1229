//! `wasmformer replay`: a plugin against an event script, no cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use wasmformer::config::ReconcileConfig;
use wasmformer::plugin::{Limits, LoadedPlugin, LogSource, PluginEngine};
use wasmformer::replay::{self, Script};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "The event script format is described in the README (\"Testing a plugin with replay\").\n\
Exit status: 0 if every call succeeded, 1 if any call failed, 2 if the plugin or script could not be used."
)]
pub struct ReplayArgs {
    /// The plugin component (.wasm).
    #[arg(long, value_name = "FILE")]
    plugin: PathBuf,
    /// The event script (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    events: PathBuf,
    /// The plugin's name (logs, the field manager `wasmformer/<name>`) [default: the file's stem].
    #[arg(long)]
    name: Option<String>,
    /// The plugin's config block, as JSON, passed to its `init`.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    config: String,
    /// The plugin's `reconcile:` block, as JSON (`{"backoff": {"base": "20ms"}, "qps": 5}`): its
    /// backoff, qps and burst (client-go's defaults for what it leaves out) replace the event
    /// script's; `owns` and `watches` are not applied.
    #[arg(long, value_name = "JSON")]
    reconcile: Option<String>,
    /// Deadline per call.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    deadline: Duration,
    /// Memory limit per instance, in bytes.
    #[arg(long, default_value_t = Limits::default().memory_bytes)]
    memory_bytes: usize,
    /// What to print: `calls` (each call, its logs and its writes) or `writes` (only the writes
    /// the plugin made, in order, as a YAML list: the dry-run output to compare with a golden file).
    #[arg(long, value_enum, default_value_t = Output::Calls)]
    output: Output,
}

/// What `wasmformer replay` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    /// Each call with its logs and writes.
    Calls,
    /// The writes only, as YAML.
    Writes,
}

pub fn run(args: ReplayArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config: serde_json::Value =
        serde_json::from_str(&args.config).context("--config is not valid JSON")?;
    let mut script = Script::load(&args.events)?;
    if let Some(reconcile) = &args.reconcile {
        let reconcile: ReconcileConfig = serde_json::from_str(reconcile)
            .context("--reconcile is not a valid reconcile: block")?;
        script.set_limits(&reconcile);
    }
    let engine = PluginEngine::new(cache_dir)
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let name = args.name.clone().unwrap_or_else(|| {
        args.plugin
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "plugin".into())
    });
    let plugin = LoadedPlugin::load(&engine, &name, &args.plugin)?;
    let limits = Limits {
        deadline: args.deadline,
        memory_bytes: args.memory_bytes,
        ..Limits::default()
    };
    let calls = args.output == Output::Calls;
    let outcomes = replay::run(plugin, &script, &config, limits, |outcome| {
        if !calls {
            return;
        }
        for line in &outcome.logs {
            let stream = match line.source {
                LogSource::Log => "",
                LogSource::Stdout => " stdout",
                LogSource::Stderr => " stderr",
            };
            println!(
                "  [{}{stream}] {}: {}",
                line.plugin,
                line.level.as_str().to_lowercase(),
                line.message
            );
        }
        println!("{outcome}");
        for write in &outcome.writes {
            let target = write.request.target();
            println!("  write {:<6} {target}", write.request.verb());
        }
    })?;
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    if calls {
        println!("{} calls, {failed} failed", outcomes.len());
    } else {
        print!("{}", replay::writes_yaml(&outcomes));
        for outcome in outcomes.iter().filter(|o| o.error.is_some()) {
            eprintln!("{outcome}");
        }
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
