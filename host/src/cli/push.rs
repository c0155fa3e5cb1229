//! `wasmformer push PLUGIN.wasm oci://registry/repository:tag`: publishes a plugin in the Wasm OCI
//! layout, after checking it is a component of this host's contract.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use wasmformer::error_chain;
use wasmformer::oci::{self, Registries};
use wasmformer::plugin::{PluginEngine, inspect};

#[derive(Debug, clap::Args)]
#[command(
    after_help = "Prints the manifest digest: pin it in the config as oci://REGISTRY/REPOSITORY@sha256:…, or keep the tag and reload to pick up a new push."
)]
pub struct PushArgs {
    /// The plugin component (.wasm).
    plugin: PathBuf,
    /// Where to publish it: oci://REGISTRY/REPOSITORY:TAG.
    reference: String,
    /// Speak plain HTTP to this registry (as `host.insecureRegistries` does for pulls).
    #[arg(long)]
    insecure: bool,
    /// A Docker config.json with the registry's credentials (as `host.registryAuth` is for
    /// pulls); default: $DOCKER_CONFIG/config.json or ~/.docker/config.json when it exists.
    #[arg(long, value_name = "FILE")]
    registry_auth: Option<PathBuf>,
}

pub fn run(args: PushArgs, cache_dir: Option<PathBuf>) -> anyhow::Result<ExitCode> {
    let Some(reference) = args.reference.strip_prefix(oci::SCHEME) else {
        eprintln!(
            "error: {} is not an oci:// reference (oci://REGISTRY/REPOSITORY:TAG)",
            args.reference
        );
        return Ok(ExitCode::from(2));
    };
    let engine = PluginEngine::new(cache_dir)
        .map_err(|e| anyhow::anyhow!("cannot create the wasm engine: {e}"))?;
    let info = match inspect(&engine, &args.plugin) {
        Ok(info) if info.contract_version.is_some() => info,
        Ok(_) => {
            eprintln!(
                "error: {} is not a wasmformer plugin (it exports no wasmformer:plugin/handler)",
                args.plugin.display()
            );
            return Ok(ExitCode::from(2));
        }
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            return Ok(ExitCode::from(2));
        }
    };
    let wasm = std::fs::read(&args.plugin)
        .with_context(|| format!("cannot read {}", args.plugin.display()))?;
    let version = wasmformer::plugin::content_digest(&wasm);
    let registry = reference.split('/').next().unwrap_or_default().to_owned();
    let registries = Registries {
        insecure: if args.insecure {
            vec![registry]
        } else {
            vec![]
        },
        cache: None,
        auth_file: args.registry_auth,
    };
    let component = serde_json::json!({"exports": info.exports, "imports": info.imports});
    let tokio = tokio::runtime::Runtime::new()?;
    match tokio.block_on(oci::push(wasm, reference, component, &registries)) {
        Ok(pushed) => {
            println!("pushed {}", args.reference);
            println!("digest: {}", pushed.manifest_digest);
            println!("layer:  {}", pushed.layer_digest);
            println!("version: {version}");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            Ok(ExitCode::FAILURE)
        }
    }
}
