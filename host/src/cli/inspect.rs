//! `wasmformer inspect`: what a plugin was built for, without running it.

use std::path::PathBuf;
use std::process::ExitCode;

use wasmformer::plugin::{CONTRACT_PACKAGE, CONTRACT_VERSION, PluginEngine, inspect};

#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
}

pub fn run(args: InspectArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let engine = PluginEngine::new(cache_dir)
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let info = inspect(&engine, &args.plugin)?;
    match &info.contract_version {
        Some(v) => println!(
            "contract: {CONTRACT_PACKAGE}@{v} (this host: {CONTRACT_PACKAGE}@{CONTRACT_VERSION})"
        ),
        None => println!(
            "contract: none (not a wasmformer plugin; this host: {CONTRACT_PACKAGE}@{CONTRACT_VERSION})"
        ),
    }
    println!("exports:");
    for name in &info.exports {
        println!("  {name}");
    }
    println!("imports:");
    for name in &info.imports {
        println!("  {name}");
    }
    Ok(ExitCode::SUCCESS)
}
