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
            let stamp = std::fs::metadata(&path)
                .ok()
                .map(|m| (m.modified().unwrap_or(SystemTime::UNIX_EPOCH), m.len()));
            (path, stamp)
        })
        .collect()
}

/// What the poller takes as seen after a reload that started when the files were as `before`
/// says: those stamps, not the files' stamps after the reload, so a file written while the reload
/// ran (it may block for a compile or a long call) still differs and is reloaded at a later poll.
/// Files the reload started watching (a plugin added to the config) take their current stamp.
fn seen_after_reload(before: Fingerprint, after: Fingerprint) -> Fingerprint {
    after
        .into_iter()
        .map(|(path, stamp)| {
            let stamp = before
                .iter()
                .find(|(p, _)| *p == path)
                .map_or(stamp, |(_, before)| *before);
            (path, stamp)
        })
        .collect()
}

async fn reload(runtime: &Runtime, why: &str) {
    tracing::info!(reason = why, "reloading");
    match runtime.reload_config().await {
        Ok(report) => {
            for (plugin, outcome) in &report.plugins {
                outcome.log(plugin);
            }
        }
        Err(e) => {
            tracing::error!(error = %crate::error_chain(&e), "config not reloaded; the running plugins keep serving")
        }
    }
}

/// Reloads on SIGHUP, and (if `watch_files`) when the config file or a wasm file changes after
/// this returns.
pub fn spawn(
    runtime: Arc<Runtime>,
    watch_files: bool,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    // Taken here, not in the task: a change made before the task first runs is still a change.
    let mut seen = fingerprint(&runtime);
    Ok(tokio::spawn(async move {
        let mut pending: Option<Fingerprint> = None;
        let mut tick = tokio::time::interval(POLL_INTERVAL);
        // After a reload that took several intervals, poll again one interval later rather than
        // firing the missed ticks back to back, which would defeat the "hold still" debounce.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = hangup.recv() => {
                    let before = fingerprint(&runtime);
                    reload(&runtime, "SIGHUP").await;
                    seen = seen_after_reload(before, fingerprint(&runtime));
                }
                _ = tick.tick(), if watch_files => {
                    let now = fingerprint(&runtime);
                    if now == seen {
                        pending = None;
                    } else if pending.as_ref() == Some(&now) {
                        reload(&runtime, "file changed").await;
                        seen = seen_after_reload(now, fingerprint(&runtime));
                        pending = None;
                    } else {
                        pending = Some(now);
                    }
                }
            }
        }
    }))
}
