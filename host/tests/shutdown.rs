//! `wasmformer run` stopping on SIGTERM, as a process manager or the kubelet sends it: the queued
//! events are delivered within `host.shutdownTimeout` and the exit status is 0; a second SIGTERM
//! exits at once with 143.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use wasmformer_devcluster::DevCluster;
use wasmformer_tests::guests;

const PODS: usize = 30;
const WAIT: Duration = Duration::from_secs(60);

/// A dev cluster holding `PODS` pods in namespace `queued`, and a config whose recorder plugin
/// takes `sleep_ms` per event: at startup, the initial list is a backlog.
struct Cluster {
    _tokio: tokio::runtime::Runtime,
    _dev: DevCluster,
    dir: tempfile::TempDir,
}

fn cluster(sleep_ms: u64, shutdown_timeout: &str) -> (Cluster, String) {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dev = tokio.block_on(async {
        let dev = DevCluster::start(Default::default()).await.unwrap();
        let client = dev.client().unwrap();
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some("queued".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client, "queued");
        for i in 0..PODS {
            let pod = serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i:02}")},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}
            }))
            .unwrap();
            pods.create(&PostParams::default(), &pod).await.unwrap();
        }
        dev
    });
    dev.write_kubeconfig(dir.path().join("dev.kubeconfig"))
        .unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!(
            "cluster: {{kubeconfig: dev.kubeconfig}}\nhost: {{shutdownTimeout: {shutdown_timeout}, watchConfig: false}}\nplugins:\n  - name: rec\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: queued}}]\n    limits: {{deadline: 5s}}\n    config: {{sleepMs: {sleep_ms}}}\n",
            guests::RECORDER
        ),
    )
    .unwrap();
    let config = config.display().to_string();
    (
        Cluster {
            _tokio: tokio,
            _dev: dev,
            dir,
        },
        config,
    )
}

/// The host's log lines, collected as they come.
struct Host {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Host {
    fn start(config: &str, dir: &std::path::Path) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["--log-format", "json", "run", "--config", config])
            .env(
                "WASMFORMER_CACHE_DIR",
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
            )
            .env("RUST_LOG", "info")
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run wasmformer");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, lines }
    }

    /// How many events the recorder handled (one JSON log line each).
    fn handled(&self) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(r#"\"event\":\"add\""#))
            .count()
    }

    fn wait_until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(Instant::now() < deadline, "{what}: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn sigterm(&self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the host did not exit: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn sigterm_delivers_what_is_queued_and_exits_zero() {
    let (cluster, config) = cluster(50, "60s");
    let mut host = Host::start(&config, cluster.dir.path());
    host.wait_until("the first event was handled", |h| h.handled() >= 1);
    host.sigterm();
    let status = host.wait();
    assert_eq!(status.code(), Some(0), "{}", host.log());
    assert_eq!(
        host.handled(),
        PODS,
        "every queued event is delivered before the exit: {}",
        host.log()
    );
    assert!(
        host.log().contains("SIGTERM received, stopping"),
        "{}",
        host.log()
    );
}

#[test]
fn a_second_sigterm_exits_at_once_without_delivering_the_rest() {
    let (cluster, config) = cluster(1000, "5m");
    let mut host = Host::start(&config, cluster.dir.path());
    host.wait_until("the first event was handled", |h| h.handled() >= 1);
    host.sigterm();
    host.wait_until("the shutdown started", |h| {
        h.log().contains("SIGTERM received, stopping")
    });
    host.sigterm();
    let status = host.wait();
    assert_eq!(status.code(), Some(143), "{}", host.log());
    assert!(
        host.handled() < PODS,
        "the rest of the queue was not delivered: {}",
        host.log()
    );
    assert!(
        host.log().contains("second signal during shutdown"),
        "{}",
        host.log()
    );
}
