//! The `wasmformer` command as a user runs it: replay, inspect, validate and dev, with their
//! output and exit codes.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmformer_tests::{guests, repo_root};

/// `wasmformer` with this binary's compile cache.
fn command(args: &[&str]) -> Command {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache");
    let mut command = Command::new(env!("CARGO_BIN_EXE_wasmformer"));
    command
        .args(args)
        .env("WASMFORMER_CACHE_DIR", cache)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG");
    command
}

fn wasmformer(args: &[&str]) -> Output {
    command(args).output().expect("run wasmformer")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn example(name: &str) -> String {
    repo_root()
        .join("examples")
        .join(name)
        .join("events.yaml")
        .display()
        .to_string()
}

#[test]
fn replay_prints_plugin_logs_and_outcomes_and_exits_zero() {
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::OWNER_LOOKUP,
        "--events",
        &example("owner-lookup"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains(
            "[owner_lookup] info: pod shop/web-5d8-x2x -> ReplicaSet web-5d8 -> Deployment web"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("add    Pod shop/standalone (rv 4) ok"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("3 calls, 0 failed"), "{stdout}");
}

#[test]
fn replay_exits_one_when_a_call_fails_and_names_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    std::fs::write(&script, "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: boom, namespace: x}}\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: fine, namespace: x}}\n").unwrap();
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::PANIC,
        "--events",
        script.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout.contains("FAILED") && stdout.contains("boom: the plugin panicked on purpose"),
        "{stdout}"
    );
    assert!(
        stdout.contains("[guest_panic] info: ok fine"),
        "the next event is delivered: {stdout}"
    );
}

#[test]
fn replay_marks_initial_adds_and_refuses_an_impossible_script_before_the_plugin_starts() {
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::POD_LOGGER,
        "--events",
        &example("pod-logger"),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout.contains("add    Pod shop/web-0 (rv 1, initial) ok"),
        "{stdout}"
    );

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    let pod = "{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}";
    std::fs::write(
        &script,
        format!("events:\n  - add: {pod}\n  - delete: {pod}\n  - delete: {pod}\n"),
    )
    .unwrap();
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::POD_LOGGER,
        "--events",
        script.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "events[2] (line 4): delete of Pod x/a, which is not in the cache at this point"
        ),
        "{}",
        text(&out)
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("init"),
        "nothing ran: {}",
        text(&out)
    );
}

/// `ok in 0.3ms` → `ok in …`: the only part of a replay's output that is not deterministic.
fn without_durations(stdout: &str) -> String {
    stdout
        .lines()
        .map(|line| match line.rsplit_once(" ok in ") {
            Some((head, tail)) if tail.ends_with("ms") => format!("{head} ok in …"),
            _ => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn replay_fails_the_reconciles_the_script_names_with_the_scripts_backoff() {
    let dir = tempfile::tempdir().unwrap();
    let events = dir.path().join("events.yaml");
    std::fs::write(
        &events,
        "reconcile:\n\
         \x20 backoff: {base: 20ms}\n\
         \x20 fail:\n\
         \x20   - {apiVersion: v1, kind: ConfigMap, namespace: shop, name: a, times: 3}\n\
         \x20   - {apiVersion: v1, kind: ConfigMap, namespace: shop, name: b, retry: false, message: no quota}\n\
         events:\n\
         \x20 - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: shop}}\n\
         \x20 - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: shop}}\n",
    )
    .unwrap();
    let out = wasmformer(&[
        "replay",
        "--name",
        "ctl",
        "--plugin",
        guests::RECONCILER,
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let failed = "FAILED by the script: reconcile returned an error";
    assert_eq!(
        without_durations(&stdout),
        [
            "init   ok in …".to_owned(),
            r#"  [ctl] info: {"call":1,"event":"add","name":"a","resourceVersion":"1"}"#.to_owned(),
            "add    ConfigMap shop/a (rv 1) ok in …".to_owned(),
            format!("reconcile ConfigMap shop/a (attempt 1, at 0ms) {failed} (retried after a backoff): failed by the replay script; retry after 20ms"),
            r#"  [ctl] info: {"call":1,"event":"add","name":"b","resourceVersion":"2"}"#.to_owned(),
            "add    ConfigMap shop/b (rv 2) ok in …".to_owned(),
            format!("reconcile ConfigMap shop/b (attempt 1, at 0ms) {failed}: no quota"),
            format!("reconcile ConfigMap shop/a (attempt 2, at 20ms) {failed} (retried after a backoff): failed by the replay script; retry after 40ms"),
            format!("reconcile ConfigMap shop/a (attempt 3, at 60ms) {failed} (retried after a backoff): failed by the replay script; retry after 80ms"),
            r#"  [ctl] info: {"call":1,"reconcile":"ConfigMap shop/a","resourceVersion":"1"}"#.to_owned(),
            "reconcile ConfigMap shop/a (attempt 4, at 140ms) ok in …".to_owned(),
            "8 calls, 4 failed".to_owned(),
        ]
        .join("\n")
    );

    // The plugin's own `reconcile:` block replaces the script's limits.
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::RECONCILER,
        "--events",
        events.to_str().unwrap(),
        "--reconcile",
        r#"{"backoff": {"base": "5ms", "max": "1s"}}"#,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let attempts: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("reconcile ConfigMap shop/a "))
        .map(|l| l.rsplit_once("; ").map_or("success", |(_, retry)| retry))
        .collect();
    assert_eq!(
        attempts,
        [
            "retry after 5ms",
            "retry after 10ms",
            "retry after 20ms",
            "success"
        ],
        "{stdout}"
    );
    for (reconcile, error) in [
        (r#"{"qps": 0}"#, "reconcile.qps: must be more than 0"),
        (
            r#"{"retries": 3}"#,
            "--reconcile is not a valid reconcile: block",
        ),
    ] {
        let out = wasmformer(&[
            "replay",
            "--plugin",
            guests::RECONCILER,
            "--events",
            events.to_str().unwrap(),
            "--reconcile",
            reconcile,
        ]);
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(error), "{}", text(&out));
    }

    std::fs::write(
        &events,
        "reconcile:\n  fail: [{apiVersion: v1, kind: Secret, namespace: shop, name: a}]\n\
         events:\n  - add: {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: shop}}\n",
    )
    .unwrap();
    let out = wasmformer(&[
        "replay",
        "--plugin",
        guests::RECONCILER,
        "--events",
        events.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(
            "reconcile.fail[0]: Secret is not a handled kind, so none of its keys is reconciled"
        ),
        "{}",
        text(&out)
    );
}

#[test]
fn a_file_that_is_not_a_component_is_refused_with_exit_two() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.wasm");
    std::fs::write(&bogus, "hello").unwrap();
    let out = wasmformer(&[
        "replay",
        "--plugin",
        bogus.to_str().unwrap(),
        "--events",
        &example("pod-logger"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out).contains("plugin bogus:") && text(&out).contains("is not a WebAssembly file"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_compile_cache_that_cannot_be_created_is_refused_with_its_cause() {
    let out = wasmformer(&[
        "--cache-dir",
        "/proc/nowhere/cache",
        "inspect",
        guests::POD_LOGGER,
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains(
            "compile cache /proc/nowhere/cache: cannot create or read it: No such file or directory"
        ),
        "{}",
        text(&out)
    );
}

#[test]
fn inspect_shows_the_contract_version() {
    let out = wasmformer(&["inspect", guests::POD_LOGGER]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(&format!(
        "contract: wasmformer:plugin@{}",
        wasmformer::plugin::CONTRACT_VERSION
    )));
    let out = wasmformer(&["inspect", guests::FUTURE_CONTRACT]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("contract: wasmformer:plugin@0.4.0"));
}

fn write_config(dir: &Path, yaml: &str) -> String {
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path.display().to_string()
}

#[test]
fn validate_reports_every_problem_with_its_location() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "plugins:\n  - name: good\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n  - name: wrong\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n  - name: missing\n    wasm: nowhere.wasm\n    handles: [{{apiVersion: v1, kind: Pod}}]\n",
            guests::POD_LOGGER,
            guests::WRONG_WORLD
        ),
    );
    let out = wasmformer(&["validate", "--offline", "--config", &config]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stdout.contains("2 problems"), "{stdout}");
    assert!(
        stdout.contains("plugins[1].wasm: plugin wrong:")
            && stdout.contains("is not a wasmformer plugin"),
        "{stdout}"
    );
    assert!(
        stdout.contains("plugins[2].wasm: plugin missing: cannot read"),
        "{stdout}"
    );

    let bad = write_config(
        dir.path(),
        "plugins:\n  - name: x\n    wasm: a.wasm\n    handles: [{apiVersion: v1, kind: Pod, labelSelector: 'a in b'}]\n    limits: {deadlin: 1s}\n",
    );
    let out = wasmformer(&["validate", "--offline", "--config", &bad]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("plugins[0].handles[0].labelSelector")
            && stdout.contains("plugins[0].limits.deadlin"),
        "{stdout}"
    );
}

#[test]
fn dev_runs_the_examples_against_the_embedded_cluster_with_simulated_churn() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "plugins:\n  - name: pod-logger\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n",
            guests::POD_LOGGER
        ),
    );
    let kubeconfig = dir.path().join("dev.kubeconfig");
    let out = wasmformer(&[
        "dev",
        "--config",
        &config,
        "--simulate",
        "50",
        "--run-for",
        "4s",
        "--kubeconfig-out",
        kubeconfig.to_str().unwrap(),
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(
        !out.stderr.contains(&0x1b),
        "colour codes in logs written to a pipe: {all}"
    );
    assert!(all.contains("New Pod Added to Store:"), "{all}");
    assert!(all.contains("plugin synced"), "{all}");
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .unwrap()
            .contains("wasmformer-dev")
    );
}

#[test]
fn validate_checks_the_kinds_against_the_cluster() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let dev = tokio
        .block_on(wasmformer_devcluster::DevCluster::start(Default::default()))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("dev.kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    let config = write_config(
        dir.path(),
        &format!(
            "cluster: {{kubeconfig: {}}}\nplugins:\n  - name: p\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}, {{apiVersion: apps/v1, kind: Gadget}}]\n    read: [{{apiVersion: nope.example.com/v1, kind: Thing}}]\n",
            kubeconfig.display(),
            guests::POD_LOGGER
        ),
    );
    let out = wasmformer(&["validate", "--config", &config]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout
            .contains("plugins[0].handles[1]: plugin p: the cluster does not serve apps/v1 Gadget"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "plugins[0].read[0]: plugin p: the cluster does not serve nope.example.com/v1 Thing"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("handles[0]"), "v1 Pod is served: {stdout}");
    tokio.block_on(dev.shutdown()).unwrap();
}

/// Asserts `value` holds no Rust debug text (`Some(…)`, `Name { field: … }`) and only camelCase
/// keys (dotted for log fields), at any depth.
fn assert_machine_readable(value: &Value, at: &str) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                let camel = key.split('.').all(|part| {
                    part.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                        && part.chars().all(|c| c.is_ascii_alphanumeric())
                });
                assert!(camel, "{at}: key {key:?} is not camelCase");
                assert_machine_readable(value, &format!("{at}.{key}"));
            }
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| assert_machine_readable(v, &format!("{at}[{i}]"))),
        Value::String(text) => {
            let debug = text.contains("Some(")
                || text.contains("None") && text.len() == 4
                || text
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .windows(3)
                    .any(|w| {
                        w[0].starts_with(char::is_uppercase) && w[1] == "{" && w[2].ends_with(':')
                    });
            assert!(!debug, "{at}: Rust debug text {text:?}");
        }
        _ => {}
    }
}

/// The type of each field of `object`, by name, for comparing a shape with the documented one.
fn shape(object: &Value) -> Vec<(String, &'static str)> {
    let kind = |v: &Value| match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    object
        .as_object()
        .expect("an object")
        .iter()
        .map(|(k, v)| (k.clone(), kind(v)))
        .collect()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(url: &str) -> Option<String> {
    ureq::get(url).call().ok()?.body_mut().read_to_string().ok()
}

/// A host (`wasmformer dev`, JSON logs) with plugins named `a`, a long name, and one whose wasm is
/// missing: `status`, `status --json`, `/status`, `POST /reload` and its logs, as a script reads them.
#[test]
fn status_reload_and_logs_are_machine_readable_and_the_table_lines_up() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    std::fs::write(dir.path().join("token"), "secret\n").unwrap();
    let long = "a-plugin-with-a-name-longer-than-twenty";
    let config = write_config(
        dir.path(),
        &format!(
            "host: {{adminAddress: '127.0.0.1:{port}', adminTokenFile: token, watchConfig: false}}\nplugins:\n  - name: a\n    wasm: {w}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n  - name: {long}\n    wasm: {w}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n    read: [{{apiVersion: apps/v1, kind: ReplicaSet}}]\n  - name: broken\n    wasm: nowhere.wasm\n    handles: [{{apiVersion: v1, kind: Pod}}]\n",
            w = guests::POD_LOGGER
        ),
    );
    let kubeconfig = dir.path().join("dev.kubeconfig");
    let log = std::fs::File::create(dir.path().join("log.json")).unwrap();
    let mut host = command(&[
        "--log-format",
        "json",
        "dev",
        "--config",
        &config,
        "--simulate",
        "20",
        "--run-for",
        "120s",
    ])
    .args(["--kubeconfig-out", kubeconfig.to_str().unwrap()])
    .stdout(Stdio::null())
    .stderr(log)
    .spawn()
    .unwrap();
    let admin = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while get(&format!("{admin}/readyz")).as_deref() != Some("ready") {
        assert!(
            started.elapsed() < Duration::from_secs(60) && host.try_wait().unwrap().is_none(),
            "the host did not get ready"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    let out = wasmformer(&["status", "--json", "--admin", &admin]);
    assert!(out.status.success(), "{}", text(&out));
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_machine_readable(&status, "status");
    let plugins = status["plugins"].as_array().unwrap();
    let names: Vec<&str> = plugins
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", long, "broken"], "in name order");
    let running = plugins.iter().find(|p| p["name"] == "a").unwrap();
    let expected_plugin = [
        ("name", "string"),
        ("version", "string"),
        ("contract", "string"),
        ("loadedAt", "string"),
        ("swaps", "number"),
        ("calls", "number"),
        ("failures", "number"),
        ("lastError", "null"),
        ("lastSwapError", "null"),
        ("queueDepth", "number"),
        ("synced", "bool"),
        ("writes", "object"),
        ("workQueue", "object"),
        ("instance", "string"),
        ("activations", "number"),
        ("savedStateBytes", "null"),
        ("lastStateError", "null"),
    ];
    assert_eq!(running["instance"], "loaded", "{running}");
    let sorted = |mut v: Vec<(String, &'static str)>| {
        v.sort();
        v
    };
    assert_eq!(
        sorted(shape(running)),
        sorted(
            expected_plugin
                .iter()
                .map(|(k, t)| (k.to_string(), *t))
                .collect()
        ),
        "{running}"
    );
    assert_eq!(
        sorted(shape(&running["writes"])),
        [
            ("failed".to_string(), "number"),
            ("forbiddenByServer".to_string(), "number"),
            ("ok".to_string(), "number"),
            ("refusedByGrant".to_string(), "number")
        ],
        "{running}"
    );
    assert_eq!(
        sorted(shape(&running["workQueue"])),
        sorted(
            [
                ("depth", "number"),
                ("scheduled", "number"),
                ("keysInBackoff", "number"),
                ("retries", "number"),
                ("reconciles", "number"),
                ("oldestKeyAgeMs", "null"),
                ("failing", "array"),
            ]
            .iter()
            .map(|(k, t)| (k.to_string(), *t))
            .collect()
        ),
        "{running}"
    );
    let broken = plugins.iter().find(|p| p["name"] == "broken").unwrap();
    assert_eq!(
        sorted(shape(&broken["lastError"])),
        [
            ("at".to_string(), "string"),
            ("message".to_string(), "string")
        ],
        "{broken}"
    );
    assert!(
        broken["lastError"]["message"]
            .as_str()
            .unwrap()
            .contains("nowhere.wasm"),
        "{broken}"
    );
    assert_eq!(broken["instance"], "none", "{broken}");
    let pods = status["informers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["resource"] == "pods")
        .expect("the Pod informer");
    let expected_informer = [
        ("resource", "string"),
        ("apiVersion", "string"),
        ("kind", "string"),
        ("namespace", "null"),
        ("labelSelector", "null"),
        ("fieldSelector", "null"),
        ("metadataOnly", "bool"),
        ("synced", "bool"),
        ("syncedAt", "string"),
        ("objects", "number"),
        ("subscribers", "number"),
        ("events", "number"),
        ("relists", "number"),
        ("errors", "number"),
        ("rejected", "number"),
        ("lists", "number"),
        ("undecodable", "number"),
        ("lastError", "null"),
        ("listStrategy", "string"),
        ("listEncoding", "string"),
    ];
    assert_eq!(
        sorted(shape(pods)),
        sorted(
            expected_informer
                .iter()
                .map(|(k, t)| (k.to_string(), *t))
                .collect()
        ),
        "{pods}"
    );
    assert_eq!(
        (
            pods["apiVersion"].as_str(),
            pods["kind"].as_str(),
            pods["subscribers"].as_u64()
        ),
        (Some("v1"), Some("Pod"), Some(2))
    );

    // The table: every row's cells start (or, for counters, end) where their header does.
    let out = wasmformer(&["status", "--admin", &admin]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    let header = lines[0];
    for (column, right) in [
        ("VERSION", false),
        ("INSTANCE", false),
        ("SWAPS", true),
        ("CALLS", true),
        ("FAILED", true),
        ("QUEUE", true),
        ("WRITES", true),
        ("SYNCED", false),
    ] {
        let start = header.find(column).unwrap();
        let end = start + column.len();
        for row in &lines[1..] {
            let row = row.as_bytes();
            let aligned = if right {
                row[end - 1] != b' ' && row.get(end) == Some(&b' ')
            } else {
                row[start - 1] == b' ' && row[start] != b' '
            };
            assert!(aligned, "column {column} does not line up:\n{table}");
        }
    }
    assert!(
        lines.iter().any(|l| l.starts_with(long))
            && lines
                .iter()
                .any(|l| l.starts_with("broken") && l.contains("nowhere.wasm")),
        "{table}"
    );

    // POST /reload: a list of objects, and the CLI's one line per plugin.
    let token = dir.path().join("token");
    let out = wasmformer(&[
        "reload",
        "--token-file",
        token.to_str().unwrap(),
        "--admin",
        &admin,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("a: unchanged")
            && stdout.contains(&format!("{long}: unchanged"))
            && stdout.contains("broken: failed: "),
        "{}",
        text(&out)
    );
    let answer = ureq::post(&format!("{admin}/reload?plugin=a"))
        .header("authorization", "Bearer secret")
        .send_empty()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_machine_readable(&answer, "reload");
    assert_eq!(
        answer,
        serde_json::json!({"plugins": [{"name": "a", "outcome": "unchanged"}]})
    );

    let _ = host.kill();
    let _ = host.wait();
    let log = std::fs::read_to_string(dir.path().join("log.json")).unwrap();
    let mut ours = 0;
    // `dev` prints its banner (cluster address, kubeconfig) as plain lines before logging starts.
    for line in log.lines().filter(|l| l.starts_with('{')) {
        let record: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let target = record["target"].as_str().unwrap_or_default();
        if target.starts_with("wasmformer") || target == "plugin" {
            ours += 1;
            assert_machine_readable(&record["fields"], &format!("log record {line}"));
            assert_machine_readable(&record["span"], &format!("log record {line}"));
        }
    }
    assert!(ours > 5, "{log}");
    assert!(log.contains("\"plugin.fromCache\""), "{log}");
}

#[test]
fn the_output_dropped_warning_shows_the_counts_in_both_log_formats() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    std::fs::write(
        &script,
        "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: boom, namespace: x}}\n",
    )
    .unwrap();
    let args = [
        "replay",
        "--plugin",
        guests::LOG_FLOOD,
        "--events",
        script.to_str().unwrap(),
        "--deadline",
        "10s",
    ];
    let out = command(&args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}", text(&out));
    let warning = stderr
        .lines()
        .find(|l| l.contains("per-call budget was dropped"))
        .unwrap_or_else(|| panic!("no warning: {stderr}"));
    for field in [
        "output.droppedLines=",
        "output.droppedBytes=",
        "output.budgetBytes=65536",
    ] {
        assert!(warning.contains(field), "{field} missing: {warning}");
    }
    let out = command(&["--log-format", "json"])
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let warning: Value = stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| {
            r["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("per-call budget"))
        })
        .unwrap_or_else(|| panic!("no warning: {stderr}"));
    assert!(
        warning["fields"]["output.droppedLines"].as_u64().unwrap() > 0,
        "{warning}"
    );
    assert!(
        warning["fields"]["output.droppedBytes"].as_u64().unwrap() > 0,
        "{warning}"
    );
}

#[test]
fn replay_reports_each_trap_on_one_line_with_its_cause_and_function() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    std::fs::write(&script, "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: boom, namespace: x}}\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: fine, namespace: x}}\n").unwrap();
    for (guest, cause) in [
        (
            guests::DEEP_RECURSION,
            "stack overflow in guest_deep_recursion::depth after ",
        ),
        (
            guests::LINEAR_STACK_OVERFLOW,
            "stack overflow in linear memory (out of bounds memory access) in guest_linear_stack_overflow::fill after ",
        ),
        (
            guests::PANIC,
            // The handler is inlined into the component's export (tests/build.rs builds with LTO).
            "panic or abort (wasm unreachable) in wasmformer:plugin/handler@0.3.3#on-add after ",
        ),
        (
            guests::MEMORY_HOG,
            "memory limit of 16777216 bytes exceeded",
        ),
    ] {
        // A generous deadline: what is tested is the report, not speed on a loaded machine.
        let args = ["--memory-bytes", "16777216", "--deadline", "5s"];
        let out = wasmformer(
            &[
                &[
                    "replay",
                    "--plugin",
                    guest,
                    "--events",
                    script.to_str().unwrap(),
                ][..],
                &args,
            ]
            .concat(),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let failed: Vec<&str> = stdout.lines().filter(|l| l.contains("FAILED")).collect();
        assert_eq!(failed.len(), 1, "{stdout}");
        assert!(failed[0].contains(cause), "expected {cause:?} in {stdout}");
        // The guest's own stderr lines (`  [guest] …`) may mention a backtrace; the host's may not print one.
        let host_lines: Vec<&str> = stdout.lines().filter(|l| !l.starts_with("  [")).collect();
        assert!(
            host_lines
                .iter()
                .all(|l| !l.contains("backtrace") && !l.starts_with("  0: ")),
            "no backtrace in replay's output: {stdout}"
        );
        assert!(
            stdout.contains("ok fine"),
            "the next event is delivered: {stdout}"
        );
    }
}

/// `host/tests/validate/NAME.yaml` are invalid configs; `NAME.out` beside each is what `validate`
/// must print for it (`WASMFORMER_BLESS=1` rewrites them from the current output, to review).
#[test]
fn validate_prints_the_expected_report_for_each_invalid_config() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/validate");
    let mut cases: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 3, "{cases:?}");
    for case in cases {
        let name = case.file_name().unwrap().to_str().unwrap();
        let out = command(&["validate", "--offline", "--config", name])
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{name}: {}", text(&out));
        let actual = String::from_utf8(out.stdout).unwrap();
        let expected_file = case.with_extension("out");
        if std::env::var_os("WASMFORMER_BLESS").is_some() {
            std::fs::write(&expected_file, &actual).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_file).unwrap_or_default();
        assert_eq!(
            actual,
            expected,
            "{name}: validate's report differs from {}",
            expected_file.display()
        );
    }
}

#[test]
fn validate_warns_when_owns_or_watches_are_set_for_a_plugin_without_a_reconciler() {
    let dir = tempfile::tempdir().unwrap();
    let entry = |name: &str, wasm: &str| {
        format!(
            "  - name: {name}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: ConfigMap}}]\n    \
             reconcile: {{owns: [{{apiVersion: v1, kind: Secret}}]}}\n"
        )
    };
    let config = write_config(
        dir.path(),
        &format!(
            "plugins:\n{}{}",
            entry("plain", guests::RECORDER),
            entry("controller", guests::RECONCILER)
        ),
    );
    let out = wasmformer(&["validate", "--config", &config]);
    let all = text(&out);
    let warnings: Vec<&str> = all.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 1, "{all}");
    assert!(
        warnings[0]
            .contains("plugins[0].reconcile: plain does not export wasmformer:plugin/reconciler")
            && warnings[0].contains("export!(Plugin, reconciler)"),
        "{all}"
    );
}
