//! The writer against a real kube-apiserver + etcd: server-side apply creating and updating an
//! object, field ownership and the conflict with another field manager, `force`, the status
//! subresource, merge and JSON patches, create and delete with a stale uid precondition, Events
//! (and their aggregation), and how the server's refusals and failures reach the plugin.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmformer::plugin::Limits;
use wasmformer_tests::apiserver::KubeApiserver;
use wasmformer_tests::writer::{WriterProbe, apply, force_apply};

fn cm(ns: &str, name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": data})
}

const CONFIGMAPS: &str =
    "[{apiVersion: v1, kind: ConfigMap, verbs: [apply, patch, create, delete]}]";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_creates_then_updates_owned_by_the_plugins_field_manager() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-apply").await);
    let mut probe = WriterProbe::start(admin.clone(), CONFIGMAPS, false, false).await;
    let stored = probe
        .write(&ns, apply(cm(&ns, "settings", json!({"a": "1"}))))
        .await
        .unwrap();
    let stored: Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(
        stored["data"]["a"], "1",
        "the answer is the stored object: {stored}"
    );
    probe
        .write(&ns, apply(cm(&ns, "settings", json!({"a": "2", "b": "3"}))))
        .await
        .unwrap();
    let got = Api::<ConfigMap>::namespaced(admin, &ns)
        .get("settings")
        .await
        .unwrap();
    assert_eq!(
        got.data.unwrap().into_iter().collect::<Vec<_>>(),
        [
            ("a".to_owned(), "2".to_owned()),
            ("b".to_owned(), "3".to_owned())
        ]
    );
    let managers: Vec<(String, String)> = got
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        managers,
        [("wasmformer/probe".to_owned(), "Apply".to_owned())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_field_another_manager_owns_conflicts_naming_it_unless_forced() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-conflict").await);
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    cms.patch(
        "owned",
        &PatchParams::apply("kubectl"),
        &Patch::Apply(cm(&ns, "owned", json!({"team": "a"}))),
    )
    .await
    .unwrap();
    let mut probe = WriterProbe::start(admin.clone(), CONFIGMAPS, false, false).await;
    let error = probe
        .write(&ns, apply(cm(&ns, "owned", json!({"team": "b"}))))
        .await
        .unwrap_err();
    assert!(
        error.contains("conflict:")
            && error.contains("conflict with \"kubectl\"")
            && error.contains(".data.team"),
        "{error}"
    );
    assert_eq!(
        cms.get("owned").await.unwrap().data.unwrap()["team"],
        "a",
        "a conflict changes nothing"
    );
    probe
        .write(&ns, force_apply(cm(&ns, "owned", json!({"team": "b"}))))
        .await
        .unwrap();
    assert_eq!(
        cms.get("owned").await.unwrap().data.unwrap()["team"],
        "b",
        "force takes the field over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_and_patch_reach_the_status_subresource_only_when_asked() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-status").await);
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let grants = "[{apiVersion: v1, kind: Pod, verbs: [apply, patch], status: true}]";
    let mut probe = WriterProbe::start(admin.clone(), grants, false, false).await;
    let condition = json!({"type": "wasmformer.dev/Checked", "status": "True"});
    let manifest = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": ns}, "status": {"conditions": [condition]}});
    probe
        .write(
            &ns,
            json!({"op": "apply", "status": "true", "manifest": manifest.to_string()}),
        )
        .await
        .unwrap();
    let conditions = pods
        .get("web")
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "wasmformer.dev/Checked" && c.status == "True"),
        "{conditions:?}"
    );

    let patch = json!({"op": "patch", "apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "web",
                       "body": json!({"metadata": {"labels": {"seen": "yes"}}}).to_string()});
    probe.write(&ns, patch).await.unwrap();
    let json_patch = json!({"op": "json-patch", "apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": "web",
                            "body": json!([{"op": "add", "path": "/metadata/annotations", "value": {"by": "json-patch"}}]).to_string()});
    probe.write(&ns, json_patch).await.unwrap();
    let got = pods.get("web").await.unwrap();
    assert_eq!(got.metadata.labels.unwrap()["seen"], "yes");
    assert_eq!(got.metadata.annotations.unwrap()["by"], "json-patch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_and_delete_with_preconditions() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-delete").await);
    let cms = Api::<ConfigMap>::namespaced(admin.clone(), &ns);
    let mut probe = WriterProbe::start(admin.clone(), CONFIGMAPS, false, false).await;
    let create =
        json!({"op": "create", "manifest": cm(&ns, "made", json!({"k": "v"})).to_string()});
    probe.write(&ns, create.clone()).await.unwrap();
    let again = probe.write(&ns, create).await.unwrap_err();
    assert!(
        again.contains("conflict:") && again.contains("already exists"),
        "{again}"
    );

    let uid = cms.get("made").await.unwrap().metadata.uid.unwrap();
    let delete = |uid: &str| json!({"op": "delete", "apiVersion": "v1", "kind": "ConfigMap", "namespace": ns, "name": "made", "uid": uid});
    let stale = probe
        .write(&ns, delete("00000000-0000-0000-0000-000000000000"))
        .await
        .unwrap_err();
    assert!(
        stale.contains("conflict:")
            && stale.contains(
                "the UID in the precondition (00000000-0000-0000-0000-000000000000) does not match"
            ),
        "{stale}"
    );
    assert!(
        cms.get_opt("made").await.unwrap().is_some(),
        "a failed precondition deletes nothing"
    );
    probe.write(&ns, delete(&uid)).await.unwrap();
    assert!(cms.get_opt("made").await.unwrap().is_none());
    let gone = probe.write(&ns, delete(&uid)).await.unwrap_err();
    assert!(
        gone.starts_with("handler returned an error: writer: not found:"),
        "{gone}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_validation_errors_come_back_invalid_with_their_causes() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-invalid").await);
    let mut probe = WriterProbe::start(
        admin,
        "[{apiVersion: v1, kind: Pod, verbs: [apply]}]",
        false,
        false,
    )
    .await;
    let no_containers = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty", "namespace": ns}, "spec": {"containers": []}});
    let error = probe.write(&ns, apply(no_containers)).await.unwrap_err();
    assert!(
        error.contains("invalid:") && error.contains("spec.containers"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_recorded_reported_by_the_plugin_and_repeats_aggregate() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-events").await);
    let mut probe = WriterProbe::start(admin.clone(), "[]", true, false).await;
    let event = json!({"op": "event", "note": "something to see"});
    probe.write(&ns, event.clone()).await.unwrap();
    let events = Api::<Event>::namespaced(admin.clone(), &ns);
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let recorded = &listed[0];
    assert_eq!(
        recorded.reporting_controller.as_deref(),
        Some("wasmformer/probe")
    );
    assert_eq!(
        (
            recorded.type_.as_deref(),
            recorded.reason.as_deref(),
            recorded.action.as_deref()
        ),
        (Some("Warning"), Some("ProbeReason"), Some("Probe"))
    );
    assert_eq!(recorded.note.as_deref(), Some("something to see"));
    assert_eq!(
        recorded
            .regarding
            .as_ref()
            .and_then(|r| r.name.clone())
            .as_deref(),
        Some("probe-1")
    );
    // The same event about the same object again: still one Event, its series counting repeats.
    probe
        .write_about("probe-1", &ns, event.clone())
        .await
        .unwrap();
    probe.write_about("probe-1", &ns, event).await.unwrap();
    let listed = events.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(
        listed[0].series.as_ref().map(|s| s.count),
        Some(3),
        "{:#?}",
        listed[0]
    );
}

/// Answers every request with `status` and a Kubernetes Status body, on plain HTTP; returns its
/// port and how many requests it answered.
fn failing_server(status: u16) -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let counter = Arc::new(AtomicUsize::new(0));
    let answered = counter.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let requests = answered.clone();
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                requests.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "injected failure", "code": status}).to_string();
                let response = format!(
                    "HTTP/1.1 {status} Injected\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
                let _ = stream.shutdown(std::net::Shutdown::Write);
                let _ = stream.read(&mut buf);
            });
        }
    });
    (port, counter)
}

fn client_at(url: &str) -> kube::Client {
    let config = kube::Config::new(url.parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

fn short_timeout() -> Limits {
    Limits {
        deadline: Duration::from_secs(5),
        write_timeout: Duration::from_secs(2),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_error_or_an_absent_server_answers_unavailable_and_the_next_write_still_runs() {
    let (port, answered) = failing_server(500);
    for (url, expected) in [
        (
            format!("http://127.0.0.1:{port}"),
            "unavailable: the API server answered 500: injected failure",
        ),
        (
            "http://127.0.0.1:1".to_owned(),
            "unavailable: discover v1 ConfigMap default/x: ",
        ),
    ] {
        let mut probe =
            WriterProbe::start_with(client_at(&url), CONFIGMAPS, false, false, short_timeout())
                .await;
        for _ in 0..2 {
            let error = probe
                .write("default", apply(cm("default", "x", json!({}))))
                .await
                .unwrap_err();
            assert!(error.contains(expected), "{url}: {error}");
        }
    }
    assert_eq!(
        answered.load(Ordering::Relaxed),
        2,
        "a 500 is not retried: one request per write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_answering_429_is_retried_within_the_write_timeout() {
    let (port, answered) = failing_server(429);
    let mut probe = WriterProbe::start_with(
        client_at(&format!("http://127.0.0.1:{port}")),
        CONFIGMAPS,
        false,
        false,
        short_timeout(),
    )
    .await;
    let error = probe
        .write("default", apply(cm("default", "x", json!({}))))
        .await
        .unwrap_err();
    assert!(
        error.contains(
            "unavailable: no answer for v1 ConfigMap default/x within limits.writeTimeout (2s)"
        ),
        "{error}"
    );
    assert!(
        answered.load(Ordering::Relaxed) > 1,
        "kube's client retries 429 with backoff"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_over_its_write_rate_is_throttled_without_reaching_the_server() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-rate").await);
    let limits = Limits {
        deadline: Duration::from_secs(5),
        write_qps: 1,
        write_burst: 2,
        write_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let mut probe = WriterProbe::start_with(admin.clone(), CONFIGMAPS, false, false, limits).await;
    let three = json!({"op": "apply", "count": "3", "manifest": cm(&ns, "rated", json!({"a": "1"})).to_string()});
    let error = probe.write(&ns, three).await.unwrap_err();
    assert!(
        error.contains(
            "throttled: plugin probe is over its write rate (limits.writeQps/writeBurst)"
        ),
        "{error}"
    );
    assert!(
        Api::<ConfigMap>::namespaced(admin, &ns)
            .get_opt("rated")
            .await
            .unwrap()
            .is_some(),
        "the burst's writes went through"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_sends_dry_run_all_and_changes_nothing() {
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-dry").await);
    let mut probe = WriterProbe::start(admin.clone(), CONFIGMAPS, false, true).await;
    let stored = probe
        .write(&ns, apply(cm(&ns, "dry", json!({"a": "1"}))))
        .await
        .unwrap();
    assert!(
        stored.contains("\"a\":\"1\""),
        "the server validated and answered: {stored}"
    );
    assert!(
        Api::<ConfigMap>::namespaced(admin, &ns)
            .get_opt("dry")
            .await
            .unwrap()
            .is_none(),
        "dryRun=All stores nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_in_dry_run_mode_runs_label_sync_and_changes_nothing() {
    use k8s_openapi::api::core::v1::Namespace;
    let server = KubeApiserver::shared();
    let (admin, ns) = (server.admin().await, server.namespace("w-dry-host").await);
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}})).unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let yaml = format!(
        "plugins:\n  - name: label-sync\n    wasm: {}\n    handles: [{{apiVersion: v1, kind: Pod, namespace: {ns}}}, {{apiVersion: v1, kind: Namespace}}]\n    write: [{{apiVersion: v1, kind: Pod, verbs: [apply]}}]\n",
        wasmformer_tests::guests::LABEL_SYNC
    );
    let config = wasmformer::config::HostConfig::parse(&yaml, "/".into()).unwrap();
    let recorded = wasmformer_tests::Recorded::default();
    let engine = Arc::new(
        wasmformer::plugin::PluginEngine::new(Some(
            wasmformer_tests::repo_root().join("target/tmp/components"),
        ))
        .unwrap(),
    );
    let options = wasmformer::runtime::RuntimeOptions {
        log_observer: Some(recorded.observer()),
        dry_run: true,
        ..Default::default()
    };
    let runtime = wasmformer::runtime::Runtime::start(config, admin.clone(), engine, options).await;
    assert!(runtime.wait_synced(Duration::from_secs(60)).await);
    let labels = json!({"metadata": {"labels": {"team": "payments"}}});
    Api::<Namespace>::all(admin.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !recorded
        .messages("label-sync")
        .iter()
        .any(|m| m == &format!("pod {ns}/web: team=payments"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "label-sync did not apply: {:?} {:#?}",
            recorded.messages("label-sync"),
            runtime.statuses().await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(runtime.statuses().await.iter().all(|s| s.failures == 0));
    runtime.shutdown().await;
    let labels = pods
        .get("web")
        .await
        .unwrap()
        .metadata
        .labels
        .unwrap_or_default();
    assert!(
        !labels.contains_key("team"),
        "dryRun=All: the server validated the apply and stored nothing: {labels:?}"
    );
}
