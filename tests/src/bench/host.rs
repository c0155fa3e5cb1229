//! `wasmformer run` (the release build) as a child process of a benchmark, with its admin
//! endpoint on a free port; its log goes to `host.log` in the bench's work directory.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use serde_json::Value;

use super::proc::stop_child;
use crate::repo_root;

/// A free TCP port of 127.0.0.1 (free when asked: another process may take it before it is used).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `GET path` over HTTP/1.1; the status code and body.
pub fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("malformed HTTP response")?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// What a measured `wasmformer run` runs.
pub struct HostSetup<'a> {
    /// The `plugins:` entries, YAML indented by two spaces.
    pub plugins: String,
    /// More fields of `host:`, YAML indented by two spaces (may be empty).
    pub host: String,
    /// Arguments before `run` (e.g. `--log-format json`).
    pub args: &'a [&'a str],
}

impl HostSetup<'_> {
    /// One plugin, `pods`, running `wasm` on every Pod.
    pub fn one_plugin(wasm: &str) -> Self {
        Self {
            plugins: format!(
                "  - name: pods\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n"
            ),
            host: String::new(),
            args: &[],
        }
    }
}

/// `wasmformer run` as a child process.
pub struct HostProcess {
    child: Child,
    admin: SocketAddr,
    started: Instant,
    log: PathBuf,
}

impl HostProcess {
    /// Starts `target/release/wasmformer run` (or `$WASMFORMER_BENCH_HOST`: another build, for a
    /// quick try of a bench) against `kubeconfig`, with its compile cache in `work/components`
    /// and its config in `work/host.yaml`; appends its log to `work/host.log`.
    pub fn start(work: &Path, kubeconfig: &Path, setup: HostSetup<'_>) -> Result<Self> {
        let binary = std::env::var_os("WASMFORMER_BENCH_HOST").map_or_else(
            || repo_root().join("target/release/wasmformer"),
            PathBuf::from,
        );
        Self::start_binary(&binary, work, kubeconfig, setup)
    }

    /// [`Self::start`] with another `wasmformer` binary (a build to compare side by side).
    pub fn start_binary(
        binary: &Path,
        work: &Path,
        kubeconfig: &Path,
        setup: HostSetup<'_>,
    ) -> Result<Self> {
        ensure!(
            binary.exists(),
            "{} is missing: run `cargo build --release -p wasmformer`",
            binary.display()
        );
        let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse()?;
        let config = work.join("host.yaml");
        std::fs::write(
            &config,
            format!(
                "cluster:\n  kubeconfig: {}\nhost:\n  adminAddress: {admin}\n  watchConfig: false\n{}plugins:\n{}",
                kubeconfig.display(),
                setup.host,
                setup.plugins
            ),
        )?;
        let log = work.join("host.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)?;
        let started = Instant::now();
        let child = Command::new(binary)
            .arg("--cache-dir")
            .arg(work.join("components"))
            .args(setup.args)
            .args(["run", "--config"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .context("start wasmformer run")?;
        Ok(Self {
            child,
            admin,
            started,
            log,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited, and how.
    pub fn try_wait(&mut self) -> Result<Option<std::process::ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// The file its log is appended to.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Waits for `/readyz` (every plugin has handled its initial adds); the time since the start.
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Duration> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok((200, _)) = http_get(self.admin, "/readyz") {
                return Ok(self.started.elapsed());
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("wasmformer run exited ({status}) before it was ready");
            }
            ensure!(
                Instant::now() < deadline,
                "wasmformer run not ready after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Its `/metrics` in the Prometheus text format.
    pub fn metrics(&self) -> Result<String> {
        let (code, body) = http_get(self.admin, "/metrics")?;
        ensure!(code == 200, "GET /metrics answered {code}");
        Ok(body)
    }

    /// Its `/status`.
    pub fn status(&self) -> Result<Value> {
        let (code, body) = http_get(self.admin, "/status")?;
        ensure!(code == 200, "GET /status answered {code}");
        serde_json::from_str(&body).context("parse /status")
    }

    /// The Pod informer's `events`, `relists`, `objects` counters and list strategy, from `/status`.
    pub fn informer(&self) -> Result<(u64, u64, u64, String)> {
        let status = self.status()?;
        let informer = &status["informers"][0];
        ensure!(informer.is_object(), "no informer in /status: {status}");
        let number = |field: &str| informer[field].as_u64().unwrap_or(0);
        let strategy = informer["listStrategy"].as_str().unwrap_or("?");
        Ok((
            number("events"),
            number("relists"),
            number("objects"),
            strategy.to_owned(),
        ))
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        stop_child(&mut self.child);
    }
}
