//! The writer's commands as a user runs them: `replay --output writes` of the write examples
//! against their golden files, and `rbac --offline`.

use std::process::{Command, Output};

use wasmformer_tests::{guests, repo_root};

fn wasmformer(args: &[&str]) -> Output {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache");
    Command::new(env!("CARGO_BIN_EXE_wasmformer"))
        .args(args)
        .env("WASMFORMER_CACHE_DIR", cache)
        .output()
        .expect("run wasmformer")
}

fn golden(example: &str, wasm: &str, config: &str) {
    let dir = repo_root().join("examples").join(example);
    let events = dir.join("events.yaml").display().to_string();
    let out = wasmformer(&[
        "replay", "--name", example, "--plugin", wasm, "--events", &events, "--config", config,
        "--output", "writes",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = std::fs::read_to_string(dir.join("writes.golden.yaml")).unwrap();
    assert_eq!(
        stdout, expected,
        "examples/{example}/writes.golden.yaml differs from the replay's writes"
    );
}

#[test]
fn label_sync_replays_to_its_golden_writes() {
    golden("label-sync", guests::LABEL_SYNC, r#"{"label": "team"}"#);
}

#[test]
fn restart_alert_replays_to_its_golden_writes() {
    golden("restart-alert", guests::RESTART_ALERT, "{}");
}

#[test]
fn replay_lists_each_calls_writes_under_it() {
    let events = repo_root()
        .join("examples/label-sync/events.yaml")
        .display()
        .to_string();
    let out = wasmformer(&[
        "replay",
        "--name",
        "label-sync",
        "--plugin",
        guests::LABEL_SYNC,
        "--events",
        &events,
        "--config",
        r#"{"label": "team"}"#,
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("add    Pod shop/web-1 (rv 3) ok")
            && stdout.contains("  write apply  v1 Pod shop/web-1\n"),
        "{stdout}"
    );
}

#[test]
fn rbac_prints_the_roles_a_config_needs() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "plugins:\n  - name: label-sync\n    wasm: x.wasm\n    handles: [{apiVersion: v1, kind: Namespace}, {apiVersion: v1, kind: Pod, namespace: shop}]\n    write: [{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [shop]}]\n    events: true\n",
    )
    .unwrap();
    let out = wasmformer(&[
        "rbac",
        "--offline",
        "--config",
        config.to_str().unwrap(),
        "--service-account",
        "runner",
        "--namespace",
        "ops",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<&str> = stdout.split("---\n").collect();
    assert_eq!(docs.len(), 4, "{stdout}");
    assert!(
        docs[0].contains("kind: ClusterRole")
            && docs[0].contains("- namespaces")
            && docs[0].contains("- events.k8s.io"),
        "{stdout}"
    );
    assert!(
        docs[2].contains("kind: Role")
            && docs[2].contains("namespace: shop")
            && docs[2].contains("- pods"),
        "{stdout}"
    );
    for verb in ["create", "get", "list", "patch", "watch"] {
        assert!(
            docs[2].contains(&format!("- {verb}\n")),
            "{verb} in {}",
            docs[2]
        );
    }
    assert!(!docs[2].contains("- delete"), "{stdout}");
    assert!(
        docs[3].contains("kind: RoleBinding")
            && docs[3].contains("name: runner")
            && docs[3].contains("namespace: ops"),
        "{stdout}"
    );
}

#[test]
fn validate_reports_bad_write_grants_and_limits_with_their_locations() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "plugins:\n  - name: a\n    wasm: a.wasm\n    handles: [{apiVersion: v1, kind: Pod}]\n    write:\n      - {apiVersion: v1, kind: Pod, verbs: [apply, replace]}\n    limits: {writeQps: 0}\n  - name: b\n    wasm: b.wasm\n    handles: [{apiVersion: v1, kind: Pod}]\n    write:\n      - {apiVersion: v1, kind: '', verbs: []}\n      - {apiVersion: events.k8s.io/v1, kind: Event, verbs: [create]}\n    limits: {writeTimeout: 0s, manifestBytes: 0}\n",
    )
    .unwrap();
    let out = wasmformer(&[
        "validate",
        "--offline",
        "--config",
        config.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    for expected in [
        "plugins[0].write[0].verbs[1]: unknown variant `replace`, expected one of `apply`, `patch`, `create`, `delete`",
        "plugins[1].write[0].kind: must not be empty",
        "plugins[1].write[0].verbs: list at least one of apply, patch, create, delete",
        "plugins[1].write[1]: Events are granted with `events: true`, not `write:`",
        "plugins[1].limits.manifestBytes: must be more than 0",
        "plugins[1].limits.writeTimeout: must be more than 0s",
    ] {
        assert!(stdout.contains(expected), "{expected:?} in\n{stdout}");
    }
}
