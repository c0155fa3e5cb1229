//! What starts a reload on its own: SIGHUP, and changes to the config file or a plugin's wasm
//! file. Files are polled (every 500 ms) rather than watched with inotify, so a file replaced by
//! a rename, on any filesystem, is seen too; a change must hold still for one more poll before it
//! is applied, so a file still being written is not loaded half-written (and if it is, the
//! compile fails and the running version keeps serving until the next change).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::runtime::Runtime;

/// How often the files are checked.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

type Fingerprint = Vec<(PathBuf, Option<(SystemTime, u64)>)>;

fn fingerprint(runtime: &Runtime) -> Fingerprint {
    let config = runtime.config();
    let mut files: Vec<PathBuf> = config.plugins.iter().map(|p| config.wasm_path(p)).collect();
    files.extend(config.path.clone());
    files.sort();
    files.dedup();
    files
        .into_iter()
        .map(|path| {
            let stamp = std::fs::metadata(&path).ok().map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
            (path, stamp)
        })
        .collect()
}

async fn reload(runtime: &Runtime, why: &str) {
    tracing::info!(reason = why, "reloading");
    match runtime.reload_config().await {
        Ok(report) => {
            for (plugin, outcome) in &report.plugins {
                tracing::info!(plugin.id = %plugin, outcome = ?outcome, "reload outcome");
            }
        }
        Err(e) => tracing::error!(error = %crate::runtime::error_chain(&e), "config not reloaded; the running plugins keep serving"),
    }
}

/// Reloads on SIGHUP, and (if `watch_files`) when the config file or a wasm file changes.
pub fn spawn(runtime: Arc<Runtime>, watch_files: bool) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        let mut seen = fingerprint(&runtime);
        let mut pending: Option<Fingerprint> = None;
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        loop {
            tokio::select! {
                _ = hangup.recv() => {
                    reload(&runtime, "SIGHUP").await;
                    seen = fingerprint(&runtime);
                }
                _ = tick.tick(), if watch_files => {
                    let now = fingerprint(&runtime);
                    if now == seen {
                        pending = None;
                    } else if pending.as_ref() == Some(&now) {
                        reload(&runtime, "file changed").await;
                        seen = fingerprint(&runtime);
                        pending = None;
                    } else {
                        pending = Some(now);
                    }
                }
            }
        }
    }))
}
