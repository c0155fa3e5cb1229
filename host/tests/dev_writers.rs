//! The write examples under `wasmformer dev --simulate` (issue 10): label-sync's server-side
//! applies put each simulated namespace's `team` label on its Pods, and restart-alert's Warning
//! Events about restarted containers are listed by `kubectl get events`, as a user sees them.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmformer_tests::guests;

const WAIT: Duration = Duration::from_secs(120);

/// Kills the host when the test ends, passing or not.
struct Host(Child);

impl Drop for Host {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kubectl(kubeconfig: &std::path::Path, cache: &std::path::Path, args: &[&str]) -> String {
    let binary = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    let out = Command::new(binary)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache)
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn label_sync_and_restart_alert_write_to_the_dev_cluster_under_simulate() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("writers.yaml");
    std::fs::write(
        &config,
        format!(
            "plugins:\n  - name: label-sync\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}, {{apiVersion: v1, kind: Namespace}}]\n    write: [{{apiVersion: v1, kind: Pod, verbs: [apply]}}]\n    config: {{label: team}}\n  - name: restart-alert\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n    events: true\n",
            guests::LABEL_SYNC,
            guests::RESTART_ALERT
        ),
    )
    .unwrap();
    let kubeconfig = dir.path().join("dev.kubeconfig");
    let log = std::fs::File::create(dir.path().join("host.log")).unwrap();
    let _host = Host(
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["dev", "--config"])
            .arg(&config)
            .args(["--simulate", "100", "--run-for", "300s", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .env(
                "WASMFORMER_CACHE_DIR",
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
            )
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start wasmformer dev"),
    );
    let host_log = || std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default();
    let cache = dir.path().join("kubectl-cache");
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(started.elapsed() < WAIT, "no kubeconfig: {}", host_log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Every labelled Pod carries its namespace's team, and some Pods are labelled.
    let teams = |namespaces: &Value| -> Vec<(String, String)> {
        namespaces["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|ns| {
                Some((
                    ns["metadata"]["name"].as_str()?.to_owned(),
                    ns["metadata"]["labels"]["team"].as_str()?.to_owned(),
                ))
            })
            .collect()
    };
    loop {
        let namespaces: Value =
            serde_json::from_str(&kubectl(&kubeconfig, &cache, &["get", "ns", "-o", "json"]))
                .unwrap();
        let teams = teams(&namespaces);
        let pods: Value = serde_json::from_str(&kubectl(
            &kubeconfig,
            &cache,
            &[
                "get",
                "pods",
                "-A",
                "-l",
                "team",
                "-o",
                "json",
                "--show-managed-fields",
            ],
        ))
        .unwrap();
        let labelled = pods["items"].as_array().unwrap();
        for pod in labelled {
            let namespace = pod["metadata"]["namespace"].as_str().unwrap();
            let team = teams.iter().find(|(ns, _)| ns == namespace).map(|t| &t.1);
            assert_eq!(
                pod["metadata"]["labels"]["team"].as_str(),
                team.map(String::as_str),
                "{pod}"
            );
            let managers: Vec<&str> = pod["metadata"]["managedFields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|m| m["manager"].as_str())
                .collect();
            assert!(
                managers.contains(&"wasmformer/label-sync"),
                "the label is the plugin's field: {managers:?}"
            );
        }
        if !labelled.is_empty() {
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no Pod got its namespace's team label: {}",
            host_log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }

    // Restarted containers come back as Warning Events, as kubectl lists them.
    loop {
        let events = kubectl(&kubeconfig, &cache, &["get", "events", "-A"]);
        if let Some(line) = events.lines().find(|l| l.contains("ContainerRestarted")) {
            assert!(line.contains("Warning"), "{events}");
            assert!(line.contains("pod/"), "{events}");
            assert!(line.contains("restarted (restart count"), "{events}");
            break;
        }
        assert!(
            started.elapsed() < WAIT,
            "no ContainerRestarted event: {events}\n{}",
            host_log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
