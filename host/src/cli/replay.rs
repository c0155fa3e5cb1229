//! `wasmformer replay`: a plugin against an event script, no cluster.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use wasmformer::plugin::{Limits, LoadedPlugin, LogSource, PluginEngine};
use wasmformer::replay::{self, Script};

#[derive(Debug, clap::Args)]
#[command(after_help = "The event script format is described in the README (\"Testing a plugin with replay\").\n\
Exit status: 0 if every call succeeded, 1 if any call failed, 2 if the plugin or script could not be used.")]
pub struct ReplayArgs {
    /// The plugin component (.wasm).
    #[arg(long, value_name = "FILE")]
    plugin: PathBuf,
    /// The event script (YAML or JSON).
    #[arg(long, value_name = "FILE")]
    events: PathBuf,
    /// The plugin's config block, as JSON, passed to its `init`.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    config: String,
    /// Deadline per call.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    deadline: Duration,
    /// Memory limit per instance, in bytes.
    #[arg(long, default_value_t = Limits::default().memory_bytes)]
    memory_bytes: usize,
}

pub fn run(args: ReplayArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let config: serde_json::Value = serde_json::from_str(&args.config).context("--config is not valid JSON")?;
    let script = Script::load(&args.events)?;
    let engine = PluginEngine::new(cache_dir).map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let name = args.plugin.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "plugin".into());
    let plugin = LoadedPlugin::load(&engine, &name, &args.plugin)?;
    let limits = Limits { deadline: args.deadline, memory_bytes: args.memory_bytes, ..Limits::default() };
    let outcomes = replay::run(plugin, &script, &config, limits, |outcome| {
        for line in &outcome.logs {
            let stream = match line.source {
                LogSource::Log => "",
                LogSource::Stdout => " stdout",
                LogSource::Stderr => " stderr",
            };
            println!("  [{}{stream}] {}: {}", line.plugin, line.level.as_str().to_lowercase(), line.message);
        }
        println!("{outcome}");
    })?;
    let failed = outcomes.iter().filter(|o| o.error.is_some()).count();
    println!("{} calls, {failed} failed", outcomes.len());
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
