//! The real kube-apiserver (with etcd) from `tests/kube-apiserver/`, for end-to-end tests.
//!
//! [`KubeApiserver::shared`] starts one per test binary (building the harness first if its
//! inputs changed: `tests/kube-apiserver/build.sh` caches the binaries), or reuses the one whose
//! data directory `$WASMFORMER_APISERVER_DIR` names. Each test takes its own namespace.
//! [`KubeApiserver::start`] gives a test a private instance it may stop and restart.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};

/// How long a start may take before the fixture gives up.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// The directory holding the `apiserver` and `informer` binaries, built if needed.
pub fn harness_binaries() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("WASMFORMER_APISERVER_BIN_DIR") {
            return PathBuf::from(dir);
        }
        let script = crate::repo_root().join("tests/kube-apiserver/build.sh");
        let output = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output().expect("run tests/kube-apiserver/build.sh");
        assert!(output.status.success(), "building the kube-apiserver harness failed (see above); it needs Go and the Go module proxy");
        let stdout = String::from_utf8(output.stdout).unwrap();
        PathBuf::from(stdout.lines().last().expect("build.sh prints the binaries' directory").trim())
    })
    .clone()
}

/// A running kube-apiserver + etcd.
pub struct KubeApiserver {
    dir: PathBuf,
    port: u16,
    child: Mutex<Option<Child>>,
    _tmp: Option<tempfile::TempDir>,
}

/// The instance shared by a test binary's tests.
static SHARED: OnceLock<KubeApiserver> = OnceLock::new();

/// The start of the name of every data directory [`KubeApiserver::start`] makes.
const DATA_DIR_PREFIX: &str = "wasmformer-apiserver-";

impl KubeApiserver {
    /// The instance shared by this test binary's tests. It lives in a `static`, which is never
    /// dropped: an exit handler stops it and removes its data (62 MB of etcd files each, which
    /// once piled up until a CI disk was full).
    pub fn shared() -> &'static KubeApiserver {
        SHARED.get_or_init(|| match std::env::var_os("WASMFORMER_APISERVER_DIR") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                let port = read_ready_port(&dir)
                    .expect("$WASMFORMER_APISERVER_DIR has no ready apiserver");
                KubeApiserver {
                    dir,
                    port,
                    child: Mutex::new(None),
                    _tmp: None,
                }
            }
            None => {
                remove_stale_data_dirs();
                let server = Self::start();
                // SAFETY: registers a function of no arguments that only touches `SHARED`.
                unsafe { libc::atexit(remove_shared) };
                server
            }
        })
    }

    /// A private instance in a new temporary directory.
    pub fn start() -> Self {
        let tmp = tempfile::Builder::new()
            .prefix(DATA_DIR_PREFIX)
            .tempdir()
            .expect("temp dir");
        let dir = tmp.path().to_owned();
        let mut child = spawn(&dir, None, false);
        let port = wait_ready(&dir, &mut child);
        Self {
            dir,
            port,
            child: Mutex::new(Some(child)),
            _tmp: Some(tmp),
        }
    }

    /// Stops the process (SIGTERM) and waits for it.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }

    /// Starts the stopped instance again over the same etcd data, on `port` (the same port by
    /// default, so clients reconnect).
    pub fn restart_on(&self, port: Option<u16>) -> u16 {
        self.stop();
        let _ = std::fs::remove_file(self.dir.join("ready"));
        let mut child = spawn(&self.dir, Some(port.unwrap_or(self.port)), true);
        let port = wait_ready(&self.dir, &mut child);
        *self.child.lock().unwrap() = Some(child);
        port
    }

    /// The last lines the server logged.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The port it listens on (its first start's).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The kubeconfig of `user` (`admin` or `restricted`).
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.kubeconfig"))
    }

    /// A client as `user`, for the server on `port` (default: its own).
    pub async fn client_at(&self, user: &str, port: Option<u16>) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self.kubeconfig(user)).expect("read kubeconfig");
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .expect("kubeconfig");
        if let Some(port) = port {
            config.cluster_url = format!("https://127.0.0.1:{port}").parse().unwrap();
        }
        kube::Client::try_from(config).expect("client")
    }

    /// A file of its PKI: `ca.crt` (the CA the kubeconfigs trust), `serving.crt` and
    /// `serving.key` (its serving certificate, for 127.0.0.1 and localhost, and key).
    pub fn pki(&self, file: &str) -> PathBuf {
        self.dir.join("pki").join(file)
    }

    /// An admin client.
    pub async fn admin(&self) -> kube::Client {
        self.client_at("admin", None).await
    }

    /// Creates a namespace `prefix-<unique>` and returns its name.
    pub async fn namespace(&self, prefix: &str) -> String {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        if let Err(e) = Api::<Namespace>::all(self.admin().await)
            .create(&PostParams::default(), &ns)
            .await
        {
            panic!(
                "create namespace {name}: {e}; apiserver log:\n{}",
                self.log_tail()
            );
        }
        name
    }
}

impl Drop for KubeApiserver {
    fn drop(&mut self) {
        self.stop();
    }
}

/// At the test binary's exit: stops the shared instance and removes its data directory.
extern "C" fn remove_shared() {
    if let Some(server) = SHARED.get()
        && server._tmp.is_some()
    {
        server.stop();
        let _ = std::fs::remove_dir_all(&server.dir);
    }
}

/// Removes the harness's data directories that runs killed midway (or, before the exit handler
/// above, every run) left in the temporary directory: `scripts/test` does it before it builds,
/// and a test binary here before its first shared start, for `cargo test` run on its own. The
/// rules are the script's (`remove_stale_apiserver_dirs` in `scripts/lib.sh`).
fn remove_stale_data_dirs() {
    match remove_stale_data_dirs_in(&std::env::temp_dir()) {
        Ok(status) if status.success() => {}
        Ok(status) => eprintln!("scripts/lib.sh remove_stale_apiserver_dirs: {status}"),
        Err(e) => eprintln!("scripts/lib.sh remove_stale_apiserver_dirs: bash: {e}"),
    }
}

/// Runs `remove_stale_apiserver_dirs` on `tmp` as `scripts/test` does (`set -euo pipefail`).
fn remove_stale_data_dirs_in(tmp: &Path) -> std::io::Result<std::process::ExitStatus> {
    Command::new("bash")
        .args([
            "-c",
            "set -euo pipefail; source scripts/lib.sh; remove_stale_apiserver_dirs \"$1\"",
        ])
        .arg("bash")
        .arg(tmp)
        .current_dir(crate::repo_root())
        .status()
}

/// Starts the harness. `--exit-with-parent` stops it when the test binary exits, even though
/// the shared fixture (a `static`) is never dropped.
fn spawn(dir: &Path, port: Option<u16>, keep_data: bool) -> Child {
    let binary = harness_binaries().join("apiserver");
    let mut command = Command::new(binary);
    command
        .arg("--data-dir")
        .arg(dir)
        .arg("--exit-with-parent")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log_file(dir)));
    if keep_data {
        command.arg("--keep-etcd-data");
    }
    if let Some(port) = port {
        command.arg("--port").arg(port.to_string());
    }
    command.spawn().expect("start the kube-apiserver harness")
}

fn log_file(dir: &Path) -> std::fs::File {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("apiserver.log"))
        .expect("open apiserver.log")
}

fn read_ready_port(dir: &Path) -> Option<u16> {
    std::fs::read_to_string(dir.join("ready"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn wait_ready(dir: &Path, child: &mut Child) -> u16 {
    let deadline = Instant::now() + READY_TIMEOUT;
    let log_tail = || {
        let log = std::fs::read_to_string(dir.join("apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    };
    loop {
        if let Some(port) = read_ready_port(dir) {
            return port;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "kube-apiserver exited ({status}) before it was ready; last log lines:\n{}",
                log_tail()
            );
        }
        assert!(
            Instant::now() < deadline,
            "kube-apiserver not ready after {READY_TIMEOUT:?}; last log lines:\n{}",
            log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory laid out as the harness leaves one, last changed `age` ago.
    fn data_dir(tmp: &Path, name: &str, age: Duration) -> PathBuf {
        let dir = tmp.join(name);
        std::fs::create_dir_all(dir.join("etcd")).unwrap();
        std::fs::write(dir.join("tokens.csv"), "").unwrap();
        let modified = std::time::SystemTime::now() - age;
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        dir
    }

    #[test]
    fn stale_data_dirs_go_and_running_young_or_foreign_ones_stay() {
        let tmp = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        let stale = data_dir(tmp.path(), "wasmformer-apiserver-a", hour);
        let stale_old_name = data_dir(tmp.path(), ".tmpAbC123", hour);
        let young = data_dir(tmp.path(), "wasmformer-apiserver-b", Duration::ZERO);
        let foreign = tmp.path().join(".tmpNotOurs");
        std::fs::create_dir_all(foreign.join("etcd")).unwrap();
        let running = data_dir(tmp.path(), "wasmformer-apiserver-c", hour);
        // A process whose command line names `running` as its `--data-dir`, as the harness's does.
        let mut process = Command::new("sh")
            .args(["-c", "sleep 30", "sh", "--data-dir"])
            .arg(&running)
            .spawn()
            .unwrap();
        // Until it has exec'd, the child's command line is this one's.
        let cmdline = format!("/proc/{}/cmdline", process.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read(&cmdline)
            .unwrap()
            .windows(10)
            .any(|w| w == b"--data-dir")
        {
            assert!(Instant::now() < deadline, "sh never started");
            std::thread::sleep(Duration::from_millis(1));
        }

        let status = remove_stale_data_dirs_in(tmp.path()).unwrap();
        let _ = process.kill();
        let _ = process.wait();

        assert!(status.success());
        assert!(!stale.exists() && !stale_old_name.exists());
        assert!(young.exists() && foreign.exists() && running.exists());
    }
}
