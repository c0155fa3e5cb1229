//! Plugins from an OCI registry, against a real one (the CNCF distribution registry, see
//! `wasmformer_tests::registry`) and the whole host in-process on the embedded dev cluster:
//! `wasmformer push` publishes in the Wasm OCI layout; plugins run by tag and by digest; a wrong
//! digest, a missing tag and an unreachable registry fail with errors naming the plugin while the
//! running version keeps serving; a new push to the tag is swapped in on reload.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmformer::config::HostConfig;
use wasmformer::oci::sha256_digest;
use wasmformer::plugin::{PluginEngine, content_digest};
use wasmformer::runtime::{ReloadOutcome, Runtime, RuntimeOptions};
use wasmformer_devcluster::{DevCluster, DevClusterConfig};
use wasmformer_tests::registry::{OciRegistry, free_port};
use wasmformer_tests::{Recorded, guests, with_custom_section};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "oci";

/// `wasmformer push --insecure FILE oci://…`; returns the manifest digest it prints.
fn push(file: &Path, reference: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wasmformer"))
        .args(["push", "--insecure"])
        .arg(file)
        .arg(reference)
        .env(
            "WASMFORMER_CACHE_DIR",
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache"),
        )
        .output()
        .expect("run wasmformer push");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "push failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let wasm = std::fs::read(file).unwrap();
    assert!(
        stdout.contains(&format!("version: {}", content_digest(&wasm))),
        "push names the version status will show: {stdout}"
    );
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("digest: "))
        .unwrap_or_else(|| panic!("no digest in {stdout}"))
        .to_owned()
}

fn config(registry: &str, tagged: &str, pinned: &str) -> HostConfig {
    let entry = |name: &str, wasm: &str| {
        format!(
            "  - name: {name}\n    wasm: {wasm}\n    handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {NS}}}]\n    config: {{tag: {name}}}\n"
        )
    };
    let yaml = format!(
        "host:\n  insecureRegistries: [\"{registry}\"]\nplugins:\n{}{}",
        entry("by-tag", tagged),
        entry("by-digest", pinned)
    );
    HostConfig::parse(&yaml, "/".into()).unwrap_or_else(|p| panic!("{p:#?}"))
}

async fn version(runtime: &Runtime, name: &str) -> String {
    let status = runtime
        .statuses()
        .await
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no plugin {name}"));
    status.version
}

/// Creates a ConfigMap and waits until both plugins logged it.
async fn probe(cms: &Api<ConfigMap>, recorded: &Recorded, name: &str) {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deadline = Instant::now() + WAIT;
    for plugin in ["by-tag", "by-digest"] {
        while !recorded.events(plugin).iter().any(|e| e["name"] == name) {
            assert!(Instant::now() < deadline, "{plugin} did not receive {name}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn failed(outcome: &ReloadOutcome) -> &str {
    match outcome {
        ReloadOutcome::Failed { error } => error,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_run_from_a_registry_by_tag_and_digest_and_a_new_tag_is_swapped_in() {
    let registry = OciRegistry::start();
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let v1 = std::fs::read(guests::RECORDER).unwrap();
    let v2 = with_custom_section(&v1, "wasmformer-test-version", b"v2");
    let (v1_file, v2_file) = (dir.path().join("v1.wasm"), dir.path().join("v2.wasm"));
    std::fs::write(&v1_file, &v1).unwrap();
    std::fs::write(&v2_file, &v2).unwrap();
    // A plugin's version in `/status` is its BLAKE3 hash (`push` prints it).
    let hex = |wasm: &[u8]| content_digest(wasm);

    let tag = format!("oci://{host}/plugins/recorder:stable");
    let digest = push(&v1_file, &tag);
    let pinned = format!("oci://{host}/plugins/recorder@{digest}");

    // The layout wasm tooling uses: a wasm config and one application/wasm layer.
    let manifest: Value = ureq::get(&format!(
        "http://{host}/v2/plugins/recorder/manifests/stable"
    ))
    .header("Accept", "application/vnd.oci.image.manifest.v1+json")
    .call()
    .unwrap()
    .body_mut()
    .read_json()
    .unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(manifest["layers"][0]["digest"], sha256_digest(&v1));

    // `wasmformer validate` pulls and checks an oci:// plugin like a file, and names a missing tag.
    let validate = |tagged: &str| {
        let file = dir.path().join("validate.yaml");
        std::fs::write(
            &file,
            format!(
                "host: {{insecureRegistries: [\"{host}\"]}}\nplugins:\n  - {{name: rec, wasm: \"{tagged}\", handles: [{{apiVersion: v1, kind: ConfigMap}}]}}\n"
            ),
        )
        .unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["validate", "--offline", "--config"])
            .arg(&file)
            .env("WASMFORMER_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let (ok, stdout) = validate(&tag);
    assert!(ok, "{stdout}");
    let (ok, stdout) = validate(&format!("oci://{host}/plugins/recorder:missing"));
    assert!(
        !ok && stdout.contains("plugins[0].wasm: plugin rec: oci://")
            && stdout.contains("does not exist in its registry (no such tag)"),
        "{stdout}"
    );

    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .expect("dev cluster starts");
    let client = dev.client().expect("client");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": NS}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let cms = Api::<ConfigMap>::namespaced(client.clone(), NS);
    let recorded = Recorded::default();
    let cache = tempfile::tempdir().unwrap();
    let engine = Arc::new(PluginEngine::new(Some(cache.path().join("components"))).unwrap());
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config(&host, &tag, &pinned), client, engine, options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );
    assert_eq!(version(&runtime, "by-tag").await, hex(&v1));
    assert_eq!(version(&runtime, "by-digest").await, hex(&v1));
    probe(&cms, &recorded, "first").await;

    // A wrong digest and a missing tag: refused, naming the plugin; v1 keeps serving.
    let wrong = format!("oci://{host}/plugins/recorder@sha256:{}", "0".repeat(64));
    let missing = format!("oci://{host}/plugins/recorder:missing");
    let report = runtime.apply_config(config(&host, &missing, &wrong)).await;
    let outcome = |name: &str| {
        report
            .plugins
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, o)| o.clone())
            .unwrap()
    };
    assert_eq!(
        failed(&outcome("by-digest")),
        format!("plugin by-digest: {wrong} does not exist in its registry (no such digest)")
    );
    assert_eq!(
        failed(&outcome("by-tag")),
        format!("plugin by-tag: {missing} does not exist in its registry (no such tag)")
    );
    assert_eq!(version(&runtime, "by-tag").await, hex(&v1));
    probe(&cms, &recorded, "after-bad-references").await;
    let report = runtime.apply_config(config(&host, &tag, &pinned)).await;
    assert!(
        report
            .plugins
            .iter()
            .all(|(_, o)| *o == ReloadOutcome::Unchanged),
        "{report:?}"
    );

    // A new version pushed to the tag: a reload swaps it in; the pinned plugin stays.
    let digest2 = push(&v2_file, &tag);
    assert_ne!(digest, digest2);
    let swapped = runtime.reload_plugin("by-tag", false).await.unwrap();
    assert!(
        matches!(&swapped, ReloadOutcome::Swapped { version, .. } if *version == hex(&v2)),
        "{swapped:?}"
    );
    assert_eq!(
        runtime.reload_plugin("by-digest", false).await.unwrap(),
        ReloadOutcome::Unchanged
    );
    probe(&cms, &recorded, "after-push").await;

    // The registry goes away: the tag cannot be resolved, v2 keeps serving; the pinned digest
    // loads from the cache without a request.
    registry.stop();
    let outcome = runtime.reload_plugin("by-tag", true).await.unwrap();
    assert!(
        failed(&outcome).starts_with(&format!(
            "plugin by-tag: cannot reach the registry of {tag}: "
        )),
        "{outcome:?}"
    );
    assert_eq!(version(&runtime, "by-tag").await, hex(&v2));
    assert!(matches!(
        runtime.reload_plugin("by-digest", true).await.unwrap(),
        ReloadOutcome::Swapped { .. }
    ));
    probe(&cms, &recorded, "registry-down").await;
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}

#[test]
fn push_names_an_unreachable_registry_and_refuses_what_is_not_a_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "not wasm").unwrap();
    let run = |file: &Path, reference: &str| {
        Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(["push", "--insecure"])
            .arg(file)
            .arg(reference)
            .output()
            .unwrap()
    };
    let out = run(&text, "oci://127.0.0.1:1/p:1");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a WebAssembly file"),
        "{out:?}"
    );
    let port = free_port();
    let reference = format!("oci://127.0.0.1:{port}/plugins/recorder:1");
    let out = run(Path::new(guests::RECORDER), &reference);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("error: pushing to {reference} failed: ")),
        "{stderr}"
    );
}

/// A private registry: credentials come from a Docker `config.json` (`push --registry-auth`,
/// `host.registryAuth`); none, or wrong ones, are refused with an error naming the plugin, the
/// reference and how access was attempted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_registry_takes_credentials_from_a_docker_config() {
    let registry = OciRegistry::start_with_login("ci", "s3cret");
    let host = registry.host();
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("recorder.wasm");
    std::fs::copy(guests::RECORDER, &wasm).unwrap();
    // `docker login`'s format: base64("user:password") under the registry's host.
    let docker_config = |name: &str, login: &str| {
        let file = dir.path().join(name);
        let auth = base64::engine::general_purpose::STANDARD.encode(login);
        std::fs::write(
            &file,
            json!({"auths": {host.clone(): {"auth": auth}}}).to_string(),
        )
        .unwrap();
        file
    };
    let (good, wrong) = (
        docker_config("good.json", "ci:s3cret"),
        docker_config("wrong.json", "ci:guess"),
    );
    let tag = format!("oci://{host}/private/recorder:1");
    // No Docker CLI config of the machine's may leak in.
    let no_docker = dir.path().join("no-docker");
    let wasmformer = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_wasmformer"))
            .args(args)
            .env("DOCKER_CONFIG", &no_docker)
            .env("WASMFORMER_CACHE_DIR", dir.path().join("cache"))
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };

    // push: refused anonymously, accepted with the credentials.
    let (ok, text) = wasmformer(&["push", "--insecure", wasm.to_str().unwrap(), &tag]);
    assert!(
        !ok && text.contains(&format!("pushing to {tag} failed")),
        "{text}"
    );
    let (ok, text) = wasmformer(&[
        "push",
        "--insecure",
        "--registry-auth",
        good.to_str().unwrap(),
        wasm.to_str().unwrap(),
        &tag,
    ]);
    assert!(ok, "{text}");

    // validate pulls: with host.registryAuth it loads; without, or with a wrong password, the
    // error says the registry refused and how access was attempted.
    let validate = |auth: Option<&Path>| {
        let auth = auth.map_or_else(String::new, |f| {
            format!(", registryAuth: \"{}\"", f.display())
        });
        let file = dir.path().join("validate.yaml");
        std::fs::write(
            &file,
            format!(
                "host: {{insecureRegistries: [\"{host}\"]{auth}}}\nplugins:\n  - {{name: rec, wasm: \"{tag}\", handles: [{{apiVersion: v1, kind: ConfigMap}}]}}\n"
            ),
        )
        .unwrap();
        wasmformer(&["validate", "--offline", "--config", file.to_str().unwrap()])
    };
    let (ok, text) = validate(Some(&good));
    assert!(ok, "{text}");
    let (ok, text) = validate(None);
    assert!(
        !ok && text.contains(&format!(
            "plugin rec: the registry refused access to {tag} (anonymously: "
        )),
        "{text}"
    );
    let (ok, text) = validate(Some(&wrong));
    assert!(
        !ok && text.contains(&format!(
            "plugin rec: the registry refused access to {tag} (with the credentials for {host} in {}",
            wrong.display()
        )),
        "{text}"
    );
    let (ok, text) = validate(Some(&dir.path().join("absent.json")));
    assert!(
        !ok && text.contains("plugin rec: no credentials for ")
            && text.contains("cannot read host.registryAuth "),
        "{text}"
    );

    // The running host pulls with host.registryAuth (relative to the config file) too.
    let (dev, client) = wasmformer_tests::dev_cluster_with_namespace(NS).await;
    let yaml = format!(
        "host: {{insecureRegistries: [\"{host}\"], registryAuth: good.json}}\nplugins:\n  - {{name: rec, wasm: \"{tag}\", handles: [{{apiVersion: v1, kind: ConfigMap, namespace: {NS}}}]}}\n"
    );
    let config = HostConfig::parse(&yaml, dir.path().to_owned()).unwrap();
    let engine = Arc::new(PluginEngine::new(Some(dir.path().join("components"))).unwrap());
    let runtime = Runtime::start(config, client, engine, RuntimeOptions::default()).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );
    let recorder = std::fs::read(guests::RECORDER).unwrap();
    assert_eq!(version(&runtime, "rec").await, content_digest(&recorder));
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
