//! A newcomer's kubectl session (kubectl as a subprocess) against the dev cluster with its
//! controllers, and the same session against the real kube-apiserver of the harness, which has
//! no controller-manager: there the objects and API answers are compared, and what controllers
//! would do (rollouts, garbage collection) is checked as Kubernetes documents it for a server
//! without them (e.g. a foreground deletion waits on its finalizer). Also: the owner-lookup
//! example resolves Pod → ReplicaSet → Deployment for `kubectl create deployment`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::runtime::{Runtime, RuntimeOptions};
use wasmformer_devcluster::{ControllerConfig, DevCluster, DevClusterConfig};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::{Recorded, guests};

const WAIT: Duration = Duration::from_secs(60);

const BAD_DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: api}
spec:
  replica: 2
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec:
      containers: [{name: api, image: \"api:1\"}]
";

/// kubectl with a kubeconfig and a private cache directory.
struct Kubectl {
    kubeconfig: PathBuf,
    cache: tempfile::TempDir,
    namespace: String,
}

struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

impl Kubectl {
    fn new(kubeconfig: &Path, namespace: &str) -> Self {
        assert!(
            Path::new(&binary()).exists(),
            "kubectl not found at {}: install kubectl (or set KUBECTL)",
            binary()
        );
        Self {
            kubeconfig: kubeconfig.to_owned(),
            cache: tempfile::tempdir().unwrap(),
            namespace: namespace.into(),
        }
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(binary());
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.cache.path())
            .arg("--namespace")
            .arg(&self.namespace)
            .args(args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true);
        let output = tokio::time::timeout(WAIT, command.output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} did not finish in {WAIT:?}"))
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

    async fn json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.ok(&args).await).expect("kubectl prints JSON")
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.cache.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.display().to_string()
    }
}

fn binary() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into())
}

/// Which server the session runs against.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Server {
    /// The dev cluster with its controllers.
    Dev,
    /// The harness's kube-apiserver: no controller-manager.
    Real,
}

/// The session; returns the Deployment `web` as the server stored it after creation.
async fn session(k: &Kubectl, server: Server) -> Value {
    let ns = k.namespace.as_str();
    // Typed generator commands (protobuf bodies).
    assert_eq!(
        k.ok(&["create", "namespace", ns]).await.trim(),
        format!("namespace/{ns} created")
    );
    assert!(
        k.ok(&[
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast"
        ])
        .await
        .contains("configmap/settings created")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "configmap",
            "settings",
            "-o",
            "jsonpath={.data.mode}"
        ])
        .await,
        "fast"
    );
    assert!(
        k.ok(&[
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=s3cret"
        ])
        .await
        .contains("secret/creds created")
    );
    assert_eq!(
        k.ok(&["get", "secret", "creds", "-o", "jsonpath={.data.password}"])
            .await,
        "czNjcmV0"
    );
    assert!(
        k.ok(&["create", "serviceaccount", "robot"])
            .await
            .contains("serviceaccount/robot created")
    );
    assert!(
        k.ok(&[
            "create",
            "role",
            "reader",
            "--verb=get,list",
            "--resource=pods"
        ])
        .await
        .contains("role.rbac.authorization.k8s.io/reader created")
    );
    let created = k
        .ok(&[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=3",
        ])
        .await;
    assert!(created.contains("deployment.apps/web created"), "{created}");
    let web = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(web["spec"]["replicas"], 3);
    assert_eq!(web["spec"]["selector"]["matchLabels"]["app"], "web");
    assert_eq!(
        web["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert!(
        k.ok(&["create", "service", "clusterip", "web", "--tcp=80:8080"])
            .await
            .contains("service/web created")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.ports[0].targetPort}"
        ])
        .await,
        "8080"
    );
    // An Ingress rule's value is an embedded Go struct: its `http` is written inline.
    assert!(
        k.ok(&["create", "ingress", "web", "--rule=web.example.com/=web:80"])
            .await
            .contains("ingress.networking.k8s.io/web created")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "ingress",
            "web",
            "-o",
            "jsonpath={.spec.rules[0].http.paths[0].backend.service.name}"
        ])
        .await,
        "web"
    );
    // Server-side apply by a second manager merges `ports` by its keys (port, protocol).
    let https = k.file("https.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{name: https, port: 443, protocol: TCP, targetPort: 8443}]\n");
    assert!(
        k.ok(&[
            "apply",
            "--server-side",
            "--field-manager=tls",
            "-f",
            &https
        ])
        .await
        .contains("service/web serverside-applied")
    );
    assert_eq!(
        k.ok(&[
            "get",
            "service",
            "web",
            "-o",
            "jsonpath={.spec.ports[*].port}"
        ])
        .await,
        "80 443"
    );

    // apply validates by default: the server's strict field validation names the typo.
    let bad = k.file("bad.yaml", BAD_DEPLOYMENT);
    let refused = k.fails(&["apply", "-f", &bad]).await;
    assert!(
        refused.contains("strict decoding error: unknown field \"spec.replica\""),
        "{refused}"
    );
    let good = k.file(
        "good.yaml",
        &BAD_DEPLOYMENT.replace("replica:", "replicas:"),
    );
    assert!(
        k.ok(&["apply", "-f", &good])
            .await
            .contains("deployment.apps/api created")
    );
    // A `kind: List` file (what `kubectl get -o yaml` writes) is validated by kubectl itself,
    // against the OpenAPI v2 document in protobuf.
    const LIST: &str = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: listed}\n  data: {mode: slow}\n";
    let list = k.file("list.yaml", LIST);
    let created = k.ok(&["create", "-f", &list]).await;
    assert!(created.contains("configmap/listed created"), "{created}");
    let bad_list = k.file("bad-list.yaml", &LIST.replace("data:", "datta:"));
    let refused = k.fails(&["create", "-f", &bad_list]).await;
    assert!(
        refused.contains("unknown field \"datta\" in io.k8s.api.core.v1.ConfigMap"),
        "{refused}"
    );
    let explained = k.ok(&["explain", "deployment.spec.replicas"]).await;
    assert!(
        explained.contains("FIELD: replicas <integer>"),
        "{explained}"
    );

    // Reading.
    let wide = k.ok(&["get", "deployments", "-o", "wide"]).await;
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    assert!(
        k.ok(&["get", "deployment", "web", "-o", "yaml"])
            .await
            .contains("image: nginx:1.27")
    );
    assert!(
        k.ok(&["label", "deployment", "web", "tier=front"])
            .await
            .contains("deployment.apps/web labeled")
    );
    assert!(
        k.ok(&["annotate", "deployment", "web", "note=hello"])
            .await
            .contains("deployment.apps/web annotated")
    );
    let labelled = k.json(&["get", "deployment", "web"]).await;
    assert_eq!(
        (
            labelled["metadata"]["labels"]["tier"].as_str(),
            labelled["metadata"]["annotations"]["note"].as_str()
        ),
        (Some("front"), Some("hello"))
    );
    assert_eq!(
        k.ok(&["auth", "can-i", "create", "pods"]).await.trim(),
        "yes"
    );

    // Scaling and rollouts: the object changes on both servers; only the dev cluster has a
    // deployment controller to roll it out.
    assert!(
        k.ok(&["scale", "deployment", "web", "--replicas=4"])
            .await
            .contains("deployment.apps/web scaled")
    );
    assert_eq!(
        k.json(&["get", "deployment", "web"]).await["spec"]["replicas"],
        4
    );
    assert!(
        k.ok(&["rollout", "restart", "deployment", "web"])
            .await
            .contains("deployment.apps/web restarted")
    );
    let restarted = k.json(&["get", "deployment", "web"]).await;
    assert!(restarted["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_string());
    assert_eq!(
        restarted["metadata"]["generation"], 4,
        "annotate, scale and restart each bump a Deployment's generation"
    );
    if server == Server::Dev {
        let status = k
            .ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
            .await;
        assert!(
            status.contains("deployment \"web\" successfully rolled out"),
            "{status}"
        );
        let replicasets = k.json(&["get", "replicasets", "-l", "app=web"]).await;
        let mut sizes: Vec<(i64, i64)> = replicasets["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|rs| {
                (
                    rs["spec"]["replicas"].as_i64().unwrap(),
                    rs["status"]["readyReplicas"].as_i64().unwrap_or(0),
                )
            })
            .collect();
        sizes.sort();
        assert_eq!(
            sizes,
            [(0, 0), (4, 4)],
            "the restart rolled every pod onto a new ReplicaSet"
        );
        let pods = k.json(&["get", "pods", "-l", "app=web"]).await;
        let pods = pods["items"].as_array().unwrap();
        assert_eq!(pods.len(), 4);
        for pod in pods {
            assert_eq!(pod["status"]["phase"], "Running", "{pod}");
            assert!(
                pod["spec"]["nodeName"]
                    .as_str()
                    .unwrap()
                    .starts_with("dev-node-"),
                "{pod}"
            );
            assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "ReplicaSet");
        }
        let events = k.ok(&["get", "events"]).await;
        assert!(
            events.contains("ScalingReplicaSet")
                && events.contains("Scheduled")
                && events.contains("SuccessfulCreate"),
            "{events}"
        );
    } else {
        assert!(
            k.json(&["get", "replicasets"]).await["items"]
                .as_array()
                .unwrap()
                .is_empty(),
            "no controller-manager"
        );
        k.ok(&["get", "events"]).await;
    }

    // Deletion with each propagation policy.
    if server == Server::Dev {
        k.ok(&["rollout", "status", "deployment/api", "--timeout=60s"])
            .await;
        let deleted = k
            .ok(&["delete", "deployment", "api", "--cascade=foreground"])
            .await;
        assert!(
            deleted.contains("deployment.apps \"api\" deleted"),
            "{deleted}"
        );
        assert!(
            k.json(&["get", "replicasets,pods", "-l", "app=api"]).await["items"]
                .as_array()
                .unwrap()
                .is_empty(),
            "foreground deletion removed the dependents first"
        );

        let old = k
            .ok(&["get", "replicasets", "-l", "app=web", "-o", "name"])
            .await;
        k.ok(&["delete", "deployment", "web", "--cascade=orphan"])
            .await;
        let orphans = k.json(&["get", "replicasets", "-l", "app=web"]).await;
        let orphans = orphans["items"].as_array().unwrap();
        assert_eq!(orphans.len(), 2, "orphaned ReplicaSets stay");
        assert!(
            orphans
                .iter()
                .all(|rs| rs["metadata"]["ownerReferences"].is_null()),
            "{orphans:?}"
        );

        assert_eq!(old.lines().count(), 2, "{old}");
        k.ok(&[
            "create",
            "deployment",
            "bg",
            "--image=nginx",
            "--replicas=2",
        ])
        .await;
        k.ok(&["rollout", "status", "deployment/bg", "--timeout=60s"])
            .await;
        let rs = k
            .ok(&["get", "replicasets", "-l", "app=bg", "-o", "name"])
            .await;
        k.ok(&["delete", "deployment", "bg", "--cascade=background"])
            .await;
        let gone = k
            .ok(&["wait", "--for=delete", rs.trim(), "--timeout=30s"])
            .await;
        assert!(gone.contains("condition met") || gone.is_empty(), "{gone}");

        k.ok(&["create", "job", "once", "--image=busybox", "--", "true"])
            .await;
        let complete = k
            .ok(&[
                "wait",
                "--for=condition=complete",
                "job/once",
                "--timeout=60s",
            ])
            .await;
        assert!(complete.contains("condition met"), "{complete}");
    } else {
        k.ok(&[
            "delete",
            "deployment",
            "api",
            "--cascade=foreground",
            "--wait=false",
        ])
        .await;
        let waiting = k.json(&["get", "deployment", "api"]).await;
        assert_eq!(
            waiting["metadata"]["finalizers"],
            serde_json::json!(["foregroundDeletion"]),
            "without a garbage collector the finalizer stays: {waiting}"
        );
        assert!(waiting["metadata"]["deletionTimestamp"].is_string());
        k.ok(&[
            "delete",
            "deployment",
            "web",
            "--cascade=orphan",
            "--wait=false",
        ])
        .await;
        assert_eq!(
            k.json(&["get", "deployment", "web"]).await["metadata"]["finalizers"],
            serde_json::json!(["orphan"])
        );
    }
    web
}

fn dev_config() -> DevClusterConfig {
    DevClusterConfig::default().controllers(Some(
        ControllerConfig::default()
            .nodes(2)
            .pod_start_delay(Duration::from_millis(200)),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomers_kubectl_session_on_the_dev_cluster() {
    let dev = DevCluster::start(dev_config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    let k = Kubectl::new(&kubeconfig, "team");
    session(&k, Server::Dev).await;
    let deleted = k.ok(&["delete", "namespace", "team"]).await;
    assert!(deleted.contains("namespace \"team\" deleted"), "{deleted}");
    let left = Kubectl::new(&kubeconfig, "team")
        .json(&["get", "configmaps,secrets,replicasets,pods"])
        .await;
    assert!(left["items"].as_array().unwrap().is_empty(), "{left}");
    dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_session_on_the_real_kube_apiserver() {
    let server = KubeApiserver::shared();
    let namespace = format!("newcomer-{}", std::process::id());
    let real = session(
        &Kubectl::new(&server.kubeconfig("admin"), &namespace),
        Server::Real,
    )
    .await;

    let dev = DevCluster::start(dev_config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    dev.write_kubeconfig(dir.path().join("kubeconfig")).unwrap();
    let ours = session(
        &Kubectl::new(&dir.path().join("kubeconfig"), &namespace),
        Server::Dev,
    )
    .await;
    // What kubectl sent decodes to the same object: the fields kubectl set agree (the real
    // server also fills in defaults, which the dev cluster does not).
    for pointer in [
        "/metadata/labels",
        "/spec/replicas",
        "/spec/selector",
        "/spec/template/metadata/labels",
        "/spec/template/spec/containers/0/name",
        "/spec/template/spec/containers/0/image",
    ] {
        assert_eq!(ours.pointer(pointer), real.pointer(pointer), "{pointer}");
    }
    dev.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_lookup_resolves_a_deployment_created_by_kubectl_create() {
    let dev = DevCluster::start(dev_config()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    let yaml = format!(
        "plugins:\n  - name: owner-lookup\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod}}]\n    read:\n      - {{apiVersion: apps/v1, kind: ReplicaSet}}\n      - {{apiVersion: apps/v1, kind: Deployment}}\n",
        guests::OWNER_LOOKUP
    );
    let config = HostConfig::parse(&yaml, PathBuf::from("/")).unwrap_or_else(|p| panic!("{p:#?}"));
    let recorded = Recorded::default();
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let engine = Arc::new(
        PluginEngine::new(Some(
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    );
    let runtime = Runtime::start(config, dev.client().unwrap(), engine, options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );

    let k = Kubectl::new(&kubeconfig, "default");
    k.ok(&["create", "deployment", "web", "--image=nginx"])
        .await;
    k.ok(&["rollout", "status", "deployment/web", "--timeout=60s"])
        .await;
    let rs = k
        .ok(&[
            "get",
            "replicasets",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .await;
    let pod = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .await;
    let expected = format!("pod default/{pod} -> ReplicaSet {rs} -> Deployment web");
    let deadline = std::time::Instant::now() + WAIT;
    while !recorded.messages("owner-lookup").contains(&expected) {
        assert!(
            std::time::Instant::now() < deadline,
            "owner-lookup never logged {expected:?}: {:#?}",
            recorded.messages("owner-lookup")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    runtime.shutdown().await;
    dev.shutdown().await.unwrap();
}
