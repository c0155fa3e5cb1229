//! The `wasmformer` command: parses arguments, sets up logging, runs one subcommand.

mod cli;

use clap::Parser;

fn main() -> std::process::ExitCode {
    wasmformer::trim::one_arena();
    let args = cli::Args::parse();
    cli::init_tracing(&args);
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
