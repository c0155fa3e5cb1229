//! `wasmformer rbac` against a real kube-apiserver: the host, authenticated as a ServiceAccount
//! bound only to the roles generated from its config, runs both write examples (label-sync's
//! server-side apply, restart-alert's Events) with no 403; a write outside a plugin's grant is
//! refused by the host, and one inside the grant but outside the generated RBAC comes back as the
//! server's 403, told apart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use wasmformer::config::HostConfig;
use wasmformer::plugin::PluginEngine;
use wasmformer::rbac::{self, RbacOptions, Resource};
use wasmformer::runtime::{self, Runtime, RuntimeOptions};
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::writer::{WriterProbe, apply};
use wasmformer_tests::{Recorded, guests};

const WAIT: Duration = Duration::from_secs(60);

fn config(ns: &str, run: &str) -> HostConfig {
    let yaml = format!(
        r#"
plugins:
  - name: label-sync
    wasm: {label_sync}
    handles:
      - {{apiVersion: v1, kind: Namespace, labelSelector: "e2e={run}"}}
      - {{apiVersion: v1, kind: Pod, namespace: {ns}}}
    write:
      - {{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [{ns}]}}
    config: {{label: team}}
  - name: restart-alert
    wasm: {restart_alert}
    handles:
      - {{apiVersion: v1, kind: Pod, namespace: {ns}}}
    events: true
"#,
        label_sync = guests::LABEL_SYNC,
        restart_alert = guests::RESTART_ALERT,
    );
    HostConfig::parse(&yaml, "/".into()).unwrap_or_else(|p| panic!("{p:#?}"))
}

/// Creates the objects `wasmformer rbac` prints for `config`, bound to ServiceAccount `runner`.
async fn install_rbac(admin: &kube::Client, config: &HostConfig, ns: &str) -> String {
    let discovery = runtime::Discovery::new(admin.clone());
    let mut resolved = Vec::new();
    for plugin in &config.plugins {
        for (_, kind) in plugin.kinds() {
            let (r, namespaced) = discovery
                .resolve(plugin.name.as_str(), &kind)
                .await
                .unwrap();
            resolved.push((
                kind,
                Resource {
                    group: r.group,
                    plural: r.plural,
                    namespaced,
                },
            ));
        }
    }
    let options = RbacOptions {
        name: format!("wf-{ns}"),
        service_account: Some("runner".into()),
        namespace: ns.to_owned(),
    };
    let objects = rbac::objects(config, &options, |k| {
        Ok(resolved
            .iter()
            .find(|(kind, _)| kind == k)
            .unwrap()
            .1
            .clone())
    })
    .unwrap();
    let yaml = rbac::to_yaml(&objects);
    let pp = PostParams::default();
    for object in objects {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match object["kind"].as_str().unwrap() {
            "ClusterRole" => drop(
                Api::<ClusterRole>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(object).unwrap())
                    .await
                    .unwrap(),
            ),
            "ClusterRoleBinding" => drop(
                Api::<ClusterRoleBinding>::all(admin.clone())
                    .create(&pp, &serde_json::from_value(object).unwrap())
                    .await
                    .unwrap(),
            ),
            "Role" => drop(
                Api::<Role>::namespaced(admin.clone(), &namespace)
                    .create(&pp, &serde_json::from_value(object).unwrap())
                    .await
                    .unwrap(),
            ),
            "RoleBinding" => drop(
                Api::<RoleBinding>::namespaced(admin.clone(), &namespace)
                    .create(&pp, &serde_json::from_value(object).unwrap())
                    .await
                    .unwrap(),
            ),
            other => panic!("unexpected {other}"),
        }
    }
    yaml
}

/// A client authenticated as ServiceAccount `ns/runner`, with a token from the TokenRequest API.
async fn service_account_client(
    server: &KubeApiserver,
    admin: &kube::Client,
    ns: &str,
) -> kube::Client {
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "runner"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    let request: TokenRequest =
        serde_json::from_value(json!({"spec": {"audiences": [], "expirationSeconds": 3600}}))
            .unwrap();
    let issued: TokenRequest = accounts
        .create_subresource("token", "runner", &PostParams::default(), &request)
        .await
        .unwrap();
    let token = issued.status.unwrap().token;
    let admin_kubeconfig = std::fs::read_to_string(server.kubeconfig("admin")).unwrap();
    let text: String = admin_kubeconfig
        .lines()
        .map(|line| match line.trim_start().starts_with("token:") {
            true => format!(
                "{}token: {token}",
                &line[..line.len() - line.trim_start().len()]
            ),
            false => line.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let kubeconfig: kube::config::Kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

async fn eventually<T>(what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_bound_to_the_generated_rules_runs_the_write_examples_without_a_403() {
    let server = KubeApiserver::shared();
    let admin = server.admin().await;
    let ns = server.namespace("rbac").await;
    let run = format!("rbac-{}", std::process::id());
    let config = config(&ns, &run);
    let yaml = install_rbac(&admin, &config, &ns).await;
    assert!(
        yaml.contains("kind: ClusterRole") && yaml.contains("kind: RoleBinding"),
        "{yaml}"
    );
    let client = service_account_client(server, &admin, &ns).await;

    let recorded = Recorded::default();
    let engine = Arc::new(
        PluginEngine::new(Some(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("components"),
        ))
        .unwrap(),
    );
    let options = RuntimeOptions {
        log_observer: Some(recorded.observer()),
        ..RuntimeOptions::default()
    };
    let runtime = Runtime::start(config, client.clone(), engine, options).await;
    assert!(
        runtime.wait_synced(WAIT).await,
        "{:#?}",
        runtime.statuses().await
    );

    let namespaces = Api::<Namespace>::all(admin.clone());
    let labels = json!({"metadata": {"labels": {"e2e": run, "team": "payments"}}});
    namespaces
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let labelled = eventually("label-sync's apply", async || {
        let pod = pods.get("web").await.ok()?;
        (pod.metadata
            .labels
            .as_ref()?
            .get("team")
            .map(String::as_str)
            == Some("payments"))
        .then_some(pod)
    })
    .await;
    let owner = labelled
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .find(|m| m.manager.as_deref() == Some("wasmformer/label-sync"));
    assert!(
        owner.is_some(),
        "the label is owned by the plugin's field manager"
    );

    let status = json!({"status": {"containerStatuses": [{"name": "c", "image": "nginx", "imageID": "", "ready": false, "restartCount": 1,
                                                         "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}});
    pods.patch_status("web", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let events = Api::<Event>::namespaced(admin.clone(), &ns);
    let event = eventually("restart-alert's Event", async || {
        let listed = events.list(&ListParams::default()).await.ok()?.items;
        listed
            .into_iter()
            .find(|e| e.reporting_controller.as_deref() == Some("wasmformer/restart-alert"))
    })
    .await;
    assert_eq!(
        (event.type_.as_deref(), event.reason.as_deref()),
        (Some("Warning"), Some("ContainerRestarted"))
    );
    assert!(
        event
            .note
            .unwrap_or_default()
            .contains("container c restarted (restart count 1, was 0)")
    );

    for status in runtime.statuses().await {
        assert!(
            status.failures == 0 && status.last_error.is_none(),
            "no call failed (no 403): {status:#?}"
        );
    }
    runtime.shutdown().await;

    // Beyond the generated rules: a grant the config does not have is refused by the host; a
    // grant the config does not have either, but given to the probe, reaches the server's RBAC.
    let grants = format!(
        "[{{apiVersion: v1, kind: Pod, verbs: [apply], namespaces: [{ns}]}}, {{apiVersion: v1, kind: Secret, verbs: [apply]}}]"
    );
    let mut probe = WriterProbe::start(client, &grants, false, false).await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": ns}, "stringData": {"k": "v"}});
    let by_server = probe.write(&ns, apply(secret)).await.unwrap_err();
    assert!(
        by_server.contains("forbidden (by the API server)")
            && by_server.contains("RBAC refused apply v1 Secret"),
        "{by_server}"
    );
    let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": ns}});
    let by_host = probe.write(&ns, apply(configmap)).await.unwrap_err();
    assert!(
        by_host
            .contains("forbidden (not granted): plugin probe is not granted apply on v1 ConfigMap"),
        "{by_host}"
    );
    let pod_label = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": ns, "labels": {"probe": "x"}}});
    probe.write(&ns, apply(pod_label)).await.unwrap();
}
