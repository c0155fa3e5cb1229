//! `wasmformer status` and `wasmformer reload`: clients of a running host's admin endpoint.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Where the running host's admin endpoint is.
#[derive(Debug, clap::Args)]
pub struct AdminTarget {
    /// The admin endpoint (`host.adminAddress` of the running host).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:9090",
        env = "WASMFORMER_ADMIN"
    )]
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
    let body: serde_json::Value = ureq::get(&url)
        .call()
        .with_context(|| format!("GET {url}"))?
        .body_mut()
        .read_json()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&body)?);
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", plugin_table(&body));
    Ok(ExitCode::SUCCESS)
}

/// The plugins of a `/status` answer as a table whose columns line up whatever the names' lengths.
fn plugin_table(status: &serde_json::Value) -> String {
    let number =
        |v: &serde_json::Value| v.as_u64().map_or_else(|| "-".to_owned(), |n| n.to_string());
    // Writes that succeeded out of those attempted (`/status` has the refusals by cause).
    let writes = |w: &serde_json::Value| {
        let count = |key: &str| w[key].as_u64().unwrap_or(0);
        let ok = count("ok");
        let attempted = ok + count("refusedByGrant") + count("forbiddenByServer") + count("failed");
        if attempted == 0 {
            "-".to_owned()
        } else {
            format!("{ok}/{attempted}")
        }
    };
    let rows: Vec<Vec<String>> = status["plugins"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            let error = |key: &str| p[key]["message"].as_str().map(str::to_owned);
            vec![
                p["name"].as_str().unwrap_or("?").to_owned(),
                p["version"]
                    .as_str()
                    .and_then(|v| v.get(..12))
                    .unwrap_or("-")
                    .to_owned(),
                match p["instance"].as_str() {
                    Some(state @ ("loaded" | "unloaded")) => state.to_owned(),
                    _ => "-".to_owned(),
                },
                number(&p["swaps"]),
                number(&p["calls"]),
                number(&p["failures"]),
                number(&p["queueDepth"]),
                writes(&p["writes"]),
                if p["synced"] == true { "yes" } else { "no" }.to_owned(),
                error("lastSwapError")
                    .or_else(|| error("lastStateError"))
                    .or_else(|| error("lastError"))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    let headers = [
        "PLUGIN",
        "VERSION",
        "INSTANCE",
        "SWAPS",
        "CALLS",
        "FAILED",
        "QUEUE",
        "WRITES",
        "SYNCED",
        "LAST ERROR",
    ];
    // Counters are right-aligned; the last column is not padded.
    let right = [
        false, false, false, true, true, true, true, true, false, false,
    ];
    let widths: Vec<usize> = (0..headers.len())
        .map(|c| {
            rows.iter()
                .map(|r| r[c].chars().count())
                .chain([headers[c].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in std::iter::once(headers.map(str::to_owned).to_vec()).chain(rows) {
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| match (c + 1 == headers.len(), right[c]) {
                (true, _) => cell.clone(),
                (false, true) => format!("{cell:>width$}", width = widths[c]),
                (false, false) => format!("{cell:<width$}", width = widths[c]),
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub fn reload(args: ReloadArgs) -> anyhow::Result<ExitCode> {
    let token = std::fs::read_to_string(&args.token_file)
        .with_context(|| format!("cannot read {}", args.token_file.display()))?;
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
    let report: wasmformer::runtime::ReloadReport = serde_json::from_value(report)?;
    for (name, outcome) in &report.plugins {
        failed |= matches!(outcome, wasmformer::runtime::ReloadOutcome::Failed { .. });
        println!("{name}: {outcome}");
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_shows_writes_that_succeeded_out_of_those_attempted() {
        let status = serde_json::json!({"plugins": [
            {"name": "writer", "version": "0123456789abcdef", "swaps": 0, "calls": 9,
             "failures": 0, "queueDepth": 0, "synced": true,
             "writes": {"ok": 7, "refusedByGrant": 2, "forbiddenByServer": 1, "failed": 1}},
            {"name": "reader", "version": "fedcba9876543210", "swaps": 0, "calls": 9,
             "failures": 0, "queueDepth": 0, "synced": true, "instance": "unloaded",
             "writes": {"ok": 0, "refusedByGrant": 0, "forbiddenByServer": 0, "failed": 0}},
        ]});
        let table = plugin_table(&status);
        let cell = |row: &str| {
            let header = table.lines().next().unwrap();
            let end = header.find("WRITES").unwrap() + "WRITES".len();
            let line = table.lines().find(|l| l.starts_with(row)).unwrap();
            line[..end].split_whitespace().last().unwrap().to_owned()
        };
        assert_eq!(cell("writer"), "7/11", "{table}");
        assert_eq!(cell("reader"), "-", "{table}");
        let header = table.lines().next().unwrap();
        let at = header.find("INSTANCE").unwrap();
        let instance = |row: &str| {
            let line = table.lines().find(|l| l.starts_with(row)).unwrap();
            line[at..].split_whitespace().next().unwrap().to_owned()
        };
        assert_eq!(instance("reader"), "unloaded", "{table}");
        assert_eq!(instance("writer"), "-", "{table}");
    }
}
