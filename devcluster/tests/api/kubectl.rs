//! kubectl (a subprocess, through a written kubeconfig) against the dev cluster: get, create,
//! apply, scale, delete, CRDs with `kubectl wait`, and `get -w`.

use std::{path::PathBuf, process::Stdio};

use serde_json::Value;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Command,
};
use wasmformer_devcluster::{DevCluster, ObjectKey, ResourceId};

use crate::common::{start, within};

const MANIFEST: &str = "\
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
  labels: {app: demo}
data:
  a: \"1\"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: app
        image: web:1
        env:
        - {name: A, value: \"1\"}
      - name: sidecar
        image: side:1
";

const CRD: &str = "\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
";

/// kubectl pointed at one dev cluster through a kubeconfig in a temporary directory.
struct Kubectl {
    binary: PathBuf,
    dir: tempfile::TempDir,
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(dev: &DevCluster) -> Self {
        let binary =
            PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
        assert!(
            binary.exists(),
            "kubectl not found at {}: install kubectl (or set KUBECTL) to run the kubectl compatibility tests",
            binary.display()
        );
        let dir = tempfile::tempdir().expect("temporary directory");
        dev.write_kubeconfig(dir.path().join("kubeconfig"))
            .expect("kubeconfig written");
        Self { binary, dir }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true);
        command
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, contents).expect("manifest written");
        path.display().to_string()
    }

    async fn run(&self, args: &[&str]) -> Output {
        let output = within(&format!("kubectl {args:?}"), self.command(args).output())
            .await
            .expect("kubectl runs");
        Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(
            output.success,
            "kubectl {args:?} failed:\n{}{}",
            output.stdout, output.stderr
        );
        output.stdout
    }

    async fn fails(&self, args: &[&str]) -> String {
        let output = self.run(args).await;
        assert!(
            !output.success,
            "kubectl {args:?} should fail:\n{}",
            output.stdout
        );
        output.stderr
    }
}

fn deployment(dev: &DevCluster, name: &str) -> Value {
    let key = ObjectKey::new(
        ResourceId::new("apps", "deployments"),
        Some("default"),
        name,
    );
    Value::clone(&dev.store().get(&key).unwrap())
}

#[tokio::test]
async fn kubectl_get_create_apply_scale_delete() {
    let dev = start().await;
    let kubectl = Kubectl::new(&dev);
    let empty = kubectl.run(&["get", "pods"]).await;
    assert!(
        empty.success
            && empty
                .stderr
                .contains("No resources found in default namespace."),
        "{}",
        empty.stderr
    );

    let manifest = kubectl.file("manifest.yaml", MANIFEST);
    let created = kubectl
        .ok(&["create", "-f", &manifest, "--validate=false"])
        .await;
    assert!(
        created.contains("configmap/demo created")
            && created.contains("deployment.apps/web created"),
        "{created}"
    );
    let again = kubectl
        .fails(&["create", "-f", &manifest, "--validate=false"])
        .await;
    assert!(
        again.contains("AlreadyExists") && again.contains("\"demo\" already exists"),
        "{again}"
    );
    let validated = kubectl.fails(&["create", "-f", &manifest]).await;
    assert!(
        validated.contains("AlreadyExists") && !validated.contains("openapi"),
        "validation finds the OpenAPI documents: {validated}"
    );

    let json: Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "configmap", "demo", "-o", "json"])
            .await,
    )
    .unwrap();
    assert_eq!(json["data"]["a"], "1");
    assert_eq!(json["metadata"]["labels"]["app"], "demo");
    let table = kubectl.ok(&["get", "deploy", "-l", "app!=nothing"]).await;
    let lines: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines[0],
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    assert_eq!(lines[1][..2], ["web", "0/2"]);

    // Client-side apply: the first apply records the last-applied configuration, the second
    // is a strategic merge PATCH that replaces env A by B and keeps the sidecar.
    let first = kubectl
        .run(&["apply", "-f", &manifest, "--validate=false"])
        .await;
    assert!(
        first.success && first.stdout.contains("deployment.apps/web configured"),
        "{}{}",
        first.stdout,
        first.stderr
    );
    let changed = MANIFEST
        .replace("web:1", "web:2")
        .replace("replicas: 2", "replicas: 3")
        .replace("{name: A, value: \"1\"}", "{name: B, value: \"2\"}");
    let applied = kubectl.file("applied.yaml", &changed);
    let out = kubectl
        .ok(&["apply", "-f", &applied, "--validate=false"])
        .await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let web = deployment(&dev, "web");
    assert_eq!(web["spec"]["replicas"], 3);
    let containers = &web["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "web:2");
    assert_eq!(
        containers[0]["env"],
        serde_json::json!([{"name": "B", "value": "2"}])
    );
    assert_eq!(containers[1]["name"], "sidecar");
    // The first apply added the last-applied annotation, which (as on the API server) bumps a
    // Deployment's generation too; the second changed the spec.
    assert_eq!(web["metadata"]["generation"], 3);
    let unchanged = kubectl
        .ok(&["apply", "-f", &applied, "--validate=false"])
        .await;
    assert!(
        unchanged.contains("deployment.apps/web unchanged"),
        "{unchanged}"
    );

    let scaled = kubectl
        .ok(&["scale", "deployment", "web", "--replicas=5"])
        .await;
    assert!(scaled.contains("scaled"), "{scaled}");
    assert_eq!(deployment(&dev, "web")["spec"]["replicas"], 5);
    kubectl
        .ok(&["label", "configmap", "demo", "tier=front"])
        .await;
    kubectl
        .ok(&[
            "patch",
            "configmap",
            "demo",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/data/b","value":"2"}]"#,
        ])
        .await;
    let demo: Value = serde_json::from_str(
        &kubectl
            .ok(&["get", "cm", "-l", "tier in (front)", "-o", "json"])
            .await,
    )
    .unwrap();
    assert_eq!(demo["items"][0]["data"]["b"], "2");

    let deleted = kubectl.ok(&["delete", "-f", &applied]).await;
    assert!(
        deleted.contains("configmap \"demo\" deleted")
            && deleted.contains("deployment.apps \"web\" deleted"),
        "{deleted}"
    );
    let missing = kubectl.fails(&["get", "configmap", "demo"]).await;
    assert!(
        missing.contains("configmaps \"demo\" not found"),
        "{missing}"
    );

    // Generator commands use typed clients that send protobuf.
    let protobuf = kubectl.ok(&["create", "namespace", "team"]).await;
    assert_eq!(protobuf.trim(), "namespace/team created");
    dev.shutdown().await.unwrap();
}

#[tokio::test]
async fn kubectl_serves_custom_resources_after_a_crd_is_applied() {
    let dev = start().await;
    let kubectl = Kubectl::new(&dev);
    kubectl
        .ok(&[
            "apply",
            "-f",
            &kubectl.file("crd.yaml", CRD),
            "--validate=false",
        ])
        .await;
    let met = kubectl
        .ok(&[
            "wait",
            "--for",
            "condition=established",
            "--timeout=10s",
            "crd/widgets.example.com",
        ])
        .await;
    assert!(met.contains("condition met"), "{met}");
    let widget =
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1}\nspec: {size: 3}\n";
    kubectl
        .ok(&[
            "apply",
            "-f",
            &kubectl.file("widget.yaml", widget),
            "--validate=false",
        ])
        .await;
    let listed = kubectl.ok(&["get", "wd"]).await;
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with("w1 ")),
        "{listed}"
    );
    assert_eq!(
        kubectl
            .ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"])
            .await,
        "3"
    );
    let resources = kubectl
        .ok(&["api-resources", "--api-group=example.com"])
        .await;
    assert!(
        resources.contains("widgets") && resources.contains("wd"),
        "{resources}"
    );
    dev.shutdown().await.unwrap();
}

#[tokio::test]
async fn kubectl_get_watch_streams_events() {
    let dev = start().await;
    let kubectl = Kubectl::new(&dev);
    dev.store()
        .create_object(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "before", "namespace": "default"}}))
        .unwrap();
    let mut child = kubectl
        .command(&["get", "configmaps", "--watch", "--output-watch-events"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl starts");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || {
        within("kubectl get -w output", lines.next_line())
            .await
            .unwrap()
            .expect("kubectl keeps watching")
    };
    let columns = |line: String| {
        line.split_whitespace()
            .take(2)
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(columns(next().await), ["EVENT", "NAME"]);
    assert_eq!(columns(next().await), ["ADDED", "before"]);

    let log = dev.request_log();
    within(
        "kubectl's watch",
        log.wait_for(0, |r| {
            r.is(wasmformer_devcluster::Verb::Watch, "configmaps")
        }),
    )
    .await;
    let configmaps = ResourceId::core("configmaps");
    dev.store()
        .create_object(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "live", "namespace": "default"}}))
        .unwrap();
    dev.store()
        .modify(
            &ObjectKey::new(configmaps.clone(), Some("default"), "live"),
            Default::default(),
            |o| o["data"] = serde_json::json!({"k": "v"}),
        )
        .unwrap();
    dev.store()
        .delete(
            &ObjectKey::new(configmaps, Some("default"), "live"),
            &Default::default(),
        )
        .unwrap();
    assert_eq!(columns(next().await), ["ADDED", "live"]);
    assert_eq!(columns(next().await), ["MODIFIED", "live"]);
    assert_eq!(columns(next().await), ["DELETED", "live"]);
    child.kill().await.unwrap();
    dev.shutdown().await.unwrap();
}
