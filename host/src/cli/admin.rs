//! `wasmformer status` and `wasmformer reload`: clients of a running host's admin endpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Where the running host's admin endpoint is.
#[derive(Debug, clap::Args)]
pub struct AdminTarget {
    /// The admin endpoint (`host.adminAddress` of the running host).
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9090", env = "WASMFORMER_ADMIN")]
    admin: String,
}

#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    target: AdminTarget,
    /// Print the raw JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    #[command(flatten)]
    target: AdminTarget,
    /// Reload only this plugin's wasm file (default: re-read the whole config file).
    plugin: Option<String>,
    /// A file holding the bearer token (`host.adminTokenFile` of the running host).
    #[arg(long, value_name = "FILE", env = "WASMFORMER_ADMIN_TOKEN_FILE")]
    token_file: PathBuf,
}

pub fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let url = format!("{}/status", args.target.admin.trim_end_matches('/'));
    let body: serde_json::Value = ureq::get(&url).call().with_context(|| format!("GET {url}"))?.body_mut().read_json()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<20} {:<14} {:>6} {:>9} {:>8} {:>6} {:<7} LAST ERROR", "PLUGIN", "VERSION", "SWAPS", "CALLS", "FAILED", "QUEUE", "SYNCED");
    for p in body["plugins"].as_array().into_iter().flatten() {
        println!(
            "{:<20} {:<14} {:>6} {:>9} {:>8} {:>6} {:<7} {}",
            p["name"].as_str().unwrap_or("?"),
            p["version"].as_str().unwrap_or("").get(..12).unwrap_or("-"),
            p["swaps"],
            p["calls"],
            p["failures"],
            p["queueDepth"],
            p["synced"],
            p["lastSwapError"].as_str().or(p["lastError"].as_str()).unwrap_or("")
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn reload(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let token = std::fs::read_to_string(&args.token_file).with_context(|| format!("cannot read {}", args.token_file.display()))?;
    let mut url = format!("{}/reload", args.target.admin.trim_end_matches('/'));
    if let Some(plugin) = &args.plugin {
        url = format!("{url}?plugin={plugin}");
    }
    let response = ureq::post(&url)
        .header("authorization", &format!("Bearer {}", token.trim()))
        .config()
        .http_status_as_error(false)
        .build()
        .send_empty()
        .with_context(|| format!("POST {url}"))?;
    let status = response.status();
    let text = response.into_body().read_to_string()?;
    if !status.is_success() {
        eprintln!("reload refused ({status}): {}", text.trim());
        return Ok(ExitCode::FAILURE);
    }
    let report: serde_json::Value = serde_json::from_str(&text)?;
    let mut failed = false;
    for entry in report["plugins"].as_array().into_iter().flatten() {
        let (name, outcome) = (&entry[0], &entry[1]);
        failed |= outcome["outcome"] == "failed";
        println!("{}: {}", name.as_str().unwrap_or("?"), outcome);
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
