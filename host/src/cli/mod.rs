//! Command-line interface: argument types and one function per subcommand.

mod admin;
mod build;
mod dev;
mod inspect;
mod manifests;
mod new;
mod push;
mod rbac;
mod replay;
mod run;
mod toolchain;
mod validate;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

/// Runs Kubernetes informer event handlers as sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "wasmformer", version, about, long_about = None)]
pub struct Args {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "WASMFORMER_LOG_FORMAT")]
    pub log_format: LogFormat,

    /// Where compiled plugins are cached [default: $WASMFORMER_CACHE_DIR/components, else
    /// ~/.cache/wasmformer/components].
    #[arg(long, global = true, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Compile plugins every time instead of using the compile cache.
    #[arg(long, global = true)]
    pub no_cache: bool,

    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a plugin against a scripted sequence of events, with no cluster.
    Replay(replay::ReplayArgs),
    /// Show the contract version, exports and imports a plugin was built with.
    Inspect(inspect::InspectArgs),
    /// Run the host against a cluster: shared informers, the indexed cache and the plugins.
    Run(run::RunArgs),
    /// Run the host against an embedded, in-memory dev cluster (no cluster needed).
    Dev(dev::DevArgs),
    /// Check a host configuration and report every problem with its location.
    Validate(validate::ValidateArgs),
    /// Show a running host's plugins: version, swaps, calls, failures, queue, synced.
    Status(admin::StatusArgs),
    /// Make a running host reload its config file, or one plugin's wasm file.
    Reload(admin::ReloadArgs),
    /// Create a plugin folder (Rust, Python or JavaScript) that builds and replays as generated.
    New(new::NewArgs),
    /// Build a plugin folder into a component with its language's toolchain.
    Build(build::BuildArgs),
    /// Install (once) the Python and JavaScript plugin toolchains and print where they are.
    Toolchain(toolchain::ToolchainArgs),
    /// Print the RBAC roles (and ServiceAccount bindings) exactly a configuration needs.
    Rbac(rbac::RbacArgs),
    /// Print the manifests that run a configuration in a cluster: ServiceAccount, RBAC,
    /// ConfigMap, Deployment, metrics Service (and a ServiceMonitor).
    Manifests(manifests::ManifestsArgs),
    /// Publish a plugin to an OCI registry (the Wasm OCI layout) and print its digest.
    Push(push::PushArgs),
}

/// Sets up the tracing subscriber. `RUST_LOG` overrides the default filter.
pub fn init_tracing(args: &Args) {
    let default = match args.command {
        // replay prints plugin logs itself; host logs only when something is wrong.
        Command::Replay(_)
        | Command::Inspect(_)
        | Command::Validate(_)
        | Command::Status(_)
        | Command::Reload(_)
        | Command::New(_)
        | Command::Build(_)
        | Command::Toolchain(_)
        | Command::Rbac(_)
        | Command::Manifests(_)
        | Command::Push(_) => "warn,plugin=off",
        Command::Run(_) | Command::Dev(_) => "info",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let colour = use_colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    match args.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Whether logs are coloured: only on a terminal, and not when `NO_COLOR` is set to anything
/// but the empty string (<https://no-color.org>).
fn use_colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Runs the chosen subcommand.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cache_dir = if args.no_cache {
        None
    } else {
        args.cache_dir
            .clone()
            .or_else(wasmformer::plugin::PluginEngine::default_cache_dir)
    };
    match args.command {
        Command::Replay(replay) => replay::run(replay, cache_dir),
        Command::Inspect(inspect) => inspect::run(inspect, cache_dir),
        Command::Run(run) => run::run(run, cache_dir),
        Command::Dev(dev) => dev::run(dev, cache_dir),
        Command::Validate(validate) => validate::run(validate, cache_dir),
        Command::Status(status) => admin::status(status),
        Command::Reload(reload) => admin::reload(reload),
        Command::New(new) => new::run(new),
        Command::Build(build) => build::run(build),
        Command::Toolchain(toolchain) => toolchain::run_command(toolchain),
        Command::Rbac(rbac) => rbac::run(rbac),
        Command::Manifests(manifests) => manifests::run(manifests),
        Command::Push(push) => push::run(push, cache_dir),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_colour(true, None));
        assert!(
            use_colour(true, Some("".as_ref())),
            "an empty NO_COLOR does not count"
        );
        assert!(!use_colour(true, Some("1".as_ref())));
        assert!(!use_colour(false, None));
    }
}
