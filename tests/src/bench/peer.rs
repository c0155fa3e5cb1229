//! The informer peers the benchmarks compare wasmformer with: programs that keep an informer's
//! cache of Pods and print one JSON line per handler call on stdout, read here.
//!
//! ```text
//! {"event":"add","namespace":"ns","name":"x","resourceVersion":"12",…}
//! {"event":"synced"}
//! {"event":"stats","rssBytes":123,"objects":4,"heapInuseBytes":5}
//! ```
//!
//! The client-go one is the harness's `informer` program (`tests/kube-apiserver/cmd/informer`,
//! a typed SharedInformer); the kube-rs one is the `kube-informer` bench target (a `reflector`
//! store fed by a `watcher`).

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::proc::stop_child;
use crate::apiserver::harness_binaries;

/// What a peer printed so far.
#[derive(Default)]
pub struct PeerState {
    pub adds: usize,
    pub updates: usize,
    pub synced: bool,
    /// When its `{"event":"done"}` line was read (the saturation peers print one).
    pub done: Option<Instant>,
    /// `rssBytes`, `objects`, `heapInuseBytes` of its last stats line.
    pub stats: Option<(u64, usize, u64)>,
    /// Event lines with the instant they were read, while recording.
    pub recorded: Option<Vec<(Instant, String)>>,
}

/// A peer informer process on every Pod.
pub struct InformerPeer {
    what: &'static str,
    child: Child,
    state: Arc<Mutex<PeerState>>,
    started: Instant,
}

impl InformerPeer {
    /// The client-go informer program (a typed SharedInformer) on every Pod, printing stats every
    /// second; `record`: keep every event line with the instant it was read.
    pub fn client_go(kubeconfig: &Path, record: bool) -> Result<Self> {
        let mut command = Command::new(harness_binaries().join("informer"));
        command.args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--resource",
            "pods",
            "--stats-every",
            "1s",
        ]);
        Self::start("the client-go informer", command, record)
    }

    /// Starts `command`, which prints the lines of this module on stdout.
    pub fn start(what: &'static str, mut command: Command, record: bool) -> Result<Self> {
        let started = Instant::now();
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("start {what}"))?;
        let state = Arc::new(Mutex::new(PeerState {
            recorded: record.then(Vec::new),
            ..PeerState::default()
        }));
        let (stdout, shared) = (child.stdout.take().unwrap(), state.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let read_at = Instant::now();
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                let mut state = shared.lock().unwrap();
                match v["event"].as_str() {
                    Some("add") => state.adds += 1,
                    Some("update") => state.updates += 1,
                    Some("synced") => state.synced = true,
                    Some("done") => state.done = Some(read_at),
                    Some("stats") => {
                        let n = |f: &str| v[f].as_u64().unwrap_or(0);
                        state.stats =
                            Some((n("rssBytes"), n("objects") as usize, n("heapInuseBytes")));
                        continue;
                    }
                    _ => {}
                }
                if let Some(recorded) = &mut state.recorded {
                    recorded.push((read_at, line));
                }
            }
        });
        Ok(Self {
            what,
            child,
            state,
            started,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reads what it printed so far.
    pub fn with<T>(&self, f: impl FnOnce(&PeerState) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    /// The recorded event lines, which it stops recording.
    pub fn take_recorded(&self) -> Vec<(Instant, String)> {
        self.state
            .lock()
            .unwrap()
            .recorded
            .take()
            .unwrap_or_default()
    }

    /// Waits until `done` holds of what it printed; the time since its start.
    pub fn wait(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&PeerState) -> bool,
    ) -> Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.with(&done) {
                return Ok(self.started.elapsed());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("{} exited ({status}) while waiting for {what}", self.what);
            }
            ensure!(
                Instant::now() < deadline,
                "{}: no {what} after {timeout:?}",
                self.what
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for InformerPeer {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}
