//! `wasmformer manifests` against the real kube-apiserver: the printed stream and the `--out`
//! kustomize folder both pass `kubectl apply --dry-run=server` (the ServiceMonitor against a
//! minimal CRD of its kind), and the RBAC part is exactly `wasmformer rbac`'s output.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use wasmformer_tests::apiserver::KubeApiserver;

/// A minimal `servicemonitors.monitoring.coreos.com` CRD: enough for the API server to accept a
/// ServiceMonitor (the Prometheus Operator installs the real one).
const SERVICE_MONITOR_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names: {kind: ServiceMonitor, plural: servicemonitors, singular: servicemonitor, listKind: ServiceMonitorList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn wasmformer(args: &[&str], kubeconfig: &Path) -> Output {
    let cache = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-cache");
    Command::new(env!("CARGO_BIN_EXE_wasmformer"))
        .args(args)
        .env("WASMFORMER_CACHE_DIR", cache)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("run wasmformer")
}

fn kubectl(args: &[&str], kubeconfig: &Path, stdin: Option<&str>) -> Output {
    let kubectl = std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into());
    let cache = tempfile::tempdir().unwrap();
    let mut child = Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(cache.path())
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    let input = stdin.unwrap_or_default().to_owned();
    let mut pipe = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        pipe.write_all(input.as_bytes()).unwrap();
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

fn ok(output: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what} failed:\n{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The documents of a YAML stream whose `kind` is one of `kinds`, joined as `wasmformer rbac`
/// prints them.
fn documents_of(stream: &str, kinds: &[&str]) -> String {
    stream
        .split("---\n")
        .filter(|doc| {
            doc.lines()
                .any(|l| kinds.iter().any(|k| l == format!("kind: {k}")))
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_apply_to_a_real_api_server_and_carry_the_rbac_output() {
    let server = KubeApiserver::shared();
    let ns = server.namespace("manifests").await;
    // The plugins' namespace-bound grants live in another namespace than the host.
    let shop = server.namespace("shop").await;
    let kubeconfig = server.kubeconfig("admin");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wasmformer.yaml");
    std::fs::write(
        &config,
        format!(
            r#"host:
  adminAddress: 0.0.0.0:9090
plugins:
  - name: label-sync
    wasm: oci://registry.example/plugins/label-sync:1.0.0
    handles:
      - {{apiVersion: v1, kind: Namespace}}
      - {{apiVersion: v1, kind: Pod, namespace: {shop}}}
    write:
      - {{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [{shop}]}}
      - {{apiVersion: apps/v1, kind: Deployment, verbs: [patch], status: true}}
  - name: restart-alert
    wasm: oci://registry.example/plugins/restart-alert@sha256:{digest}
    handles:
      - {{apiVersion: v1, kind: Pod}}
    events: true
"#,
            digest = "0".repeat(64)
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap();

    let crd = kubectl(
        &["apply", "-f", "-"],
        &kubeconfig,
        Some(SERVICE_MONITOR_CRD),
    );
    ok(&crd, "installing the ServiceMonitor CRD");
    let established = kubectl(
        &[
            "wait",
            "--for",
            "condition=established",
            "--timeout",
            "60s",
            "crd/servicemonitors.monitoring.coreos.com",
        ],
        &kubeconfig,
        None,
    );
    ok(&established, "waiting for the CRD");

    let printed = wasmformer(
        &[
            "manifests",
            "--config",
            config,
            "--namespace",
            &ns,
            "--image",
            "registry.example/wasmformer:test",
            "--replicas",
            "1",
            "--service-monitor",
        ],
        &kubeconfig,
    );
    let stream = ok(&printed, "wasmformer manifests");
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "ServiceMonitor",
    ] {
        assert!(
            stream.contains(&format!("\nkind: {kind}\n")),
            "{kind}: {stream}"
        );
    }
    let applied = kubectl(
        &["apply", "--dry-run=server", "-f", "-"],
        &kubeconfig,
        Some(&stream),
    );
    let applied = ok(&applied, "kubectl apply --dry-run=server of the stream");
    assert!(
        applied.contains("deployment.apps/wasmformer created (server dry run)"),
        "{applied}"
    );
    assert!(
        applied
            .contains("servicemonitor.monitoring.coreos.com/wasmformer created (server dry run)"),
        "{applied}"
    );

    let rbac = wasmformer(
        &[
            "rbac",
            "--config",
            config,
            "--namespace",
            &ns,
            "--service-account",
            "wasmformer",
            "--name",
            "wasmformer",
        ],
        &kubeconfig,
    );
    let rbac = ok(&rbac, "wasmformer rbac");
    let kinds = ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];
    assert_eq!(documents_of(&stream, &kinds), rbac);

    // The kustomize folder: the same objects, one file each, applied with `kubectl -k`.
    let out = dir.path().join("deploy");
    let written = wasmformer(
        &[
            "manifests",
            "--config",
            config,
            "--namespace",
            &ns,
            "--service-monitor",
            "--out",
            out.to_str().unwrap(),
        ],
        &kubeconfig,
    );
    ok(&written, "wasmformer manifests --out");
    assert_eq!(
        std::fs::read_to_string(out.join("rbac.yaml")).unwrap(),
        rbac
    );
    let kustomized = kubectl(
        &["apply", "--dry-run=server", "-k", out.to_str().unwrap()],
        &kubeconfig,
        None,
    );
    let kustomized = ok(&kustomized, "kubectl apply --dry-run=server -k");
    assert!(
        kustomized.contains("configmap/wasmformer created (server dry run)")
            && kustomized.contains(
                "rolebinding.rbac.authorization.k8s.io/wasmformer created (server dry run)"
            ),
        "{kustomized}"
    );
    let role = std::fs::read_to_string(out.join("rbac.yaml")).unwrap();
    assert!(role.contains(&format!("namespace: {shop}")), "{role}");
    let config_map = std::fs::read_to_string(out.join("configmap.yaml")).unwrap();
    assert!(config_map.contains("oci://registry.example/plugins/label-sync:1.0.0"));
}

#[test]
fn a_loopback_admin_address_is_refused_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("wasmformer.yaml");
    std::fs::write(
        &config,
        "host: {adminAddress: 127.0.0.1:9090}\nplugins:\n  - {name: a, wasm: a.wasm, handles: [{apiVersion: v1, kind: Pod}]}\n",
    )
    .unwrap();
    let out = wasmformer(
        &[
            "manifests",
            "--offline",
            "--config",
            config.to_str().unwrap(),
        ],
        Path::new("/nonexistent"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: host.adminAddress 127.0.0.1:9090 is a loopback address: the kubelet's probes and Prometheus cannot reach it; use 0.0.0.0:9090\n"
    );
}
