//! The `wasmformer` command as a user runs it: replay, inspect, validate and dev, with their
//! output and exit codes.

use std::path::Path;
use std::process::{Command, Output};

use wasmformer_tests::{guests, repo_root};

fn wasmformer(args: &[&str]) -> Output {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache");
    Command::new(env!("CARGO_BIN_EXE_wasmformer")).args(args).env("WASMFORMER_CACHE_DIR", cache).output().expect("run wasmformer")
}

fn text(output: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
}

fn example(name: &str) -> String {
    repo_root().join("examples").join(name).join("events.yaml").display().to_string()
}

#[test]
fn replay_prints_plugin_logs_and_outcomes_and_exits_zero() {
    let out = wasmformer(&["replay", "--plugin", guests::OWNER_LOOKUP, "--events", &example("owner-lookup")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("[owner_lookup] info: pod shop/web-5d8-x2x -> ReplicaSet web-5d8 -> Deployment web"), "{stdout}");
    assert!(stdout.contains("add    Pod shop/standalone (rv 4) ok"), "{stdout}");
    assert!(stdout.trim_end().ends_with("3 calls, 0 failed"), "{stdout}");
}

#[test]
fn replay_exits_one_when_a_call_fails_and_names_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    std::fs::write(&script, "events:\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: boom, namespace: x}}\n  - add: {apiVersion: v1, kind: Pod, metadata: {name: fine, namespace: x}}\n").unwrap();
    let out = wasmformer(&["replay", "--plugin", guests::PANIC, "--events", script.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(stdout.contains("FAILED") && stdout.contains("boom: the plugin panicked on purpose"), "{stdout}");
    assert!(stdout.contains("[guest_panic] info: ok fine"), "the next event is delivered: {stdout}");
}

#[test]
fn replay_marks_initial_adds_and_refuses_an_impossible_script_before_the_plugin_starts() {
    let out = wasmformer(&["replay", "--plugin", guests::POD_LOGGER, "--events", &example("pod-logger")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(&out));
    assert!(stdout.contains("add    Pod shop/web-0 (rv 1, initial) ok"), "{stdout}");

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("events.yaml");
    let pod = "{apiVersion: v1, kind: Pod, metadata: {name: a, namespace: x}}";
    std::fs::write(&script, format!("events:\n  - add: {pod}\n  - delete: {pod}\n  - delete: {pod}\n")).unwrap();
    let out = wasmformer(&["replay", "--plugin", guests::POD_LOGGER, "--events", script.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("events[2] (line 4): delete of Pod x/a, which is not in the cache at this point"), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("init"), "nothing ran: {}", text(&out));
}

#[test]
fn a_file_that_is_not_a_component_is_refused_with_exit_two() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.wasm");
    std::fs::write(&bogus, "hello").unwrap();
    let out = wasmformer(&["replay", "--plugin", bogus.to_str().unwrap(), "--events", &example("pod-logger")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("plugin bogus:") && text(&out).contains("is not a WebAssembly file"), "{}", text(&out));
}

#[test]
fn inspect_shows_the_contract_version() {
    let out = wasmformer(&["inspect", guests::POD_LOGGER]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("contract: wasmformer:plugin@0.3.0"));
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
    assert!(stdout.contains("plugins[1].wasm: plugin wrong:") && stdout.contains("is not a wasmformer plugin"), "{stdout}");
    assert!(stdout.contains("plugins[2].wasm: plugin missing: cannot read"), "{stdout}");

    let bad = write_config(dir.path(), "plugins:\n  - name: x\n    wasm: a.wasm\n    handles: [{apiVersion: v1, kind: Pod, labelSelector: 'a in b'}]\n    limits: {deadlin: 1s}\n");
    let out = wasmformer(&["validate", "--offline", "--config", &bad]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("plugins[0].handles[0].labelSelector") && stdout.contains("plugins[0].limits.deadlin"), "{stdout}");
}

#[test]
fn dev_runs_the_examples_against_the_embedded_cluster_with_simulated_churn() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(
        dir.path(),
        &format!("plugins:\n  - name: pod-logger\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n", guests::POD_LOGGER),
    );
    let kubeconfig = dir.path().join("dev.kubeconfig");
    let out = wasmformer(&[
        "dev", "--config", &config, "--simulate", "50", "--run-for", "4s", "--kubeconfig-out", kubeconfig.to_str().unwrap(),
    ]);
    let all = text(&out);
    assert!(out.status.success(), "{all}");
    assert!(all.contains("New Pod Added to Store:"), "{all}");
    assert!(all.contains("plugin synced"), "{all}");
    assert!(std::fs::read_to_string(&kubeconfig).unwrap().contains("wasmformer-dev"));
}

#[test]
fn validate_checks_the_kinds_against_the_cluster() {
    let tokio = tokio::runtime::Runtime::new().unwrap();
    let dev = tokio.block_on(wasmformer_devcluster::DevCluster::start(Default::default())).unwrap();
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
    assert!(stdout.contains("plugins[0].handles[1]: plugin p: the cluster does not serve apps/v1 Gadget"), "{stdout}");
    assert!(stdout.contains("plugins[0].read[0]: plugin p: the cluster does not serve nope.example.com/v1 Thing"), "{stdout}");
    assert!(!stdout.contains("handles[0]"), "v1 Pod is served: {stdout}");
    tokio.block_on(dev.shutdown()).unwrap();
}
