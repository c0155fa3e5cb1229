//! A real OCI registry for the plugin-pull tests: the CNCF distribution registry (`cmd/registry`)
//! built by `tests/oci-registry/build.sh` (cached by the hash of its inputs), serving plain HTTP
//! (or HTTPS with a given certificate) on a free loopback port from a temporary directory.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a start may take.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The registry binary: `$WASMFORMER_REGISTRY_BIN`, else built (or reused) by `build.sh`.
pub fn registry_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("WASMFORMER_REGISTRY_BIN") {
            return PathBuf::from(bin);
        }
        let script = crate::repo_root().join("tests/oci-registry/build.sh");
        let output = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/oci-registry/build.sh");
        assert!(
            output.status.success(),
            "building the OCI registry failed (see above); it needs Go and the Go module proxy"
        );
        let stdout = String::from_utf8(output.stdout).unwrap();
        PathBuf::from(
            stdout
                .lines()
                .last()
                .expect("build.sh prints the binary")
                .trim(),
        )
    })
    .clone()
}

/// A running registry; stopped when dropped.
pub struct OciRegistry {
    port: u16,
    tls: bool,
    login: bool,
    child: Mutex<Option<Child>>,
    dir: tempfile::TempDir,
}

impl OciRegistry {
    /// Starts one serving plain HTTP on a free loopback port.
    pub fn start() -> Self {
        Self::start_with(None, None)
    }

    /// Starts one serving HTTPS on a free loopback port with `cert` and `key` (PEM files; the
    /// certificate must name 127.0.0.1).
    pub fn start_tls(cert: &Path, key: &Path) -> Self {
        Self::start_with(Some((cert, key)), None)
    }

    /// A registry that answers only `user` with `password` (HTTP basic auth, the registry's
    /// `htpasswd` backend), over plain HTTP.
    pub fn start_with_login(user: &str, password: &str) -> Self {
        Self::start_with(None, Some((user, password)))
    }

    fn start_with(tls: Option<(&Path, &Path)>, login: Option<(&str, &str)>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let auth = login.map_or_else(String::new, |(user, password)| {
            let file = dir.path().join("htpasswd");
            let hash = bcrypt::hash(password, 4).expect("bcrypt");
            std::fs::write(&file, format!("{user}:{hash}\n")).unwrap();
            format!(
                "auth:\n  htpasswd: {{realm: wasmformer-tests, path: {}}}\n",
                file.display()
            )
        });
        let login = login.is_some();
        let port = free_port();
        let config = dir.path().join("config.yml");
        let tls = tls.map_or_else(String::new, |(cert, key)| {
            format!(
                "  tls: {{certificate: {}, key: {}}}\n",
                cert.display(),
                key.display()
            )
        });
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  delete: {{enabled: true}}\n{auth}http:\n  addr: 127.0.0.1:{port}\n{tls}",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("registry.log")).unwrap();
        let mut command = Command::new(registry_binary());
        command
            .arg("serve")
            .arg(&config)
            .env("OTEL_TRACES_EXPORTER", "none")
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl in the child before exec; it only asks for SIGTERM when the test exits.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = command.spawn().expect("start the registry");
        let registry = Self {
            port,
            tls: !tls.is_empty(),
            login,
            child: Mutex::new(Some(child)),
            dir,
        };
        registry.wait_ready();
        registry
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + READY_TIMEOUT;
        let url = format!("http://127.0.0.1:{}/v2/", self.port);
        // Over HTTPS (which this crate's HTTP client does not speak), listening is enough.
        let answers = || {
            if self.tls {
                std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok()
            } else {
                // With a login, /v2/ answers 401: answering at all is ready.
                match ureq::get(&url).call() {
                    Ok(_) => true,
                    Err(ureq::Error::StatusCode(401)) => self.login,
                    Err(_) => false,
                }
            }
        };
        while !answers() {
            assert!(
                Instant::now() < deadline,
                "the registry did not answer {url} in {READY_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `127.0.0.1:<port>`, as in an `oci://` reference.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Stops it (SIGTERM) and waits: its port then refuses connections.
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
        }
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free port")
        .port()
}
