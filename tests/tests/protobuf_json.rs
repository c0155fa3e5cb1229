//! `wasmformer-protobuf` writes a protobuf body as the JSON the real API server writes for the
//! same object: the informer reads LIST pages in protobuf through it, and the dev cluster
//! decodes kubectl's protobuf request bodies with it. Objects are created on the harness's
//! kube-apiserver and read back in both encodings, one by one and as LIST pages; the transcoded
//! protobuf must equal the server's JSON: embedded structs inline (a volume's source, a probe's
//! handler, an Ingress rule's value), empty fields left out or kept as the Go types say, unset
//! times `null`, a list's `resourceVersion` and `continue` token.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use wasmformer::informer::{
    InformerFactory, InformerKey, ListEncoding, StoreOptions, WatchSettings,
};
use wasmformer_protobuf::ManagedFields;
use wasmformer_tests::apiserver::KubeApiserver;

async fn call(client: &kube::Client, request: http::Request<Vec<u8>>) -> Vec<u8> {
    let what = format!("{} {}", request.method(), request.uri());
    let (status, body) = send(client, request).await;
    assert!(
        status.is_success(),
        "{what}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    body
}

async fn send(
    client: &kube::Client,
    request: http::Request<Vec<u8>>,
) -> (http::StatusCode, Vec<u8>) {
    let what = format!("{} {}", request.method(), request.uri());
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = response.status();
    (
        status,
        response.into_body().collect_bytes().await.unwrap().to_vec(),
    )
}

/// The transcoder's JSON for a protobuf body, parsed.
fn transcoded(what: &str, protobuf: &[u8]) -> Value {
    let json = wasmformer_protobuf::to_json(protobuf, ManagedFields::Keep)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    serde_json::from_slice(&json)
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {}", String::from_utf8_lossy(&json)))
}

/// Creates `object` at `collection` and returns its path.
async fn create(client: &kube::Client, collection: &str, object: &Value) -> String {
    let request = http::Request::post(collection)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(object).unwrap())
        .unwrap();
    call(client, request).await;
    format!(
        "{collection}/{}",
        object["metadata"]["name"].as_str().unwrap()
    )
}

async fn get(client: &kube::Client, path: &str, accept: &str) -> Vec<u8> {
    let request = http::Request::get(path)
        .header("Accept", accept)
        .body(Vec::new())
        .unwrap();
    call(client, request).await
}

/// Where `ours` differs from `theirs`, one line per field.
fn differences(path: &str, theirs: &Value, ours: &Value, out: &mut Vec<String>) {
    match (theirs, ours) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                match b.get(key) {
                    Some(other) => differences(&format!("{path}.{key}"), value, other, out),
                    None => out.push(format!("{path}.{key}: server {value}, transcoded none")),
                }
            }
            for (key, value) in b.iter().filter(|(key, _)| !a.contains_key(*key)) {
                out.push(format!("{path}.{key}: server none, transcoded {value}"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (value, other)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), value, other, out);
            }
        }
        _ if theirs == ours => {}
        _ => out.push(format!("{path}: server {theirs}, transcoded {ours}")),
    }
}

/// Creates in `ns` a running Pod, a Deployment, an Ingress, a Service, a ConfigMap and a Secret,
/// and returns their paths.
async fn create_objects(client: &kube::Client, ns: &str) -> Vec<String> {
    // A Pod with what a running one has: owner, probes, volumes, and a status (which a create
    // drops; the status subresource sets it).
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-7d9f8b6c5d-x2x4q", "labels": {"app": "web"},
            "annotations": {"prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": "web-7d9f8b6c5d", "uid": "6f1c2d3e-0000-4000-8000-000000000001",
                "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "containers": [{
                "name": "web", "image": "nginx:1.27",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web", "readOnly": true}],
                "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false}
            }],
            "volumes": [
                {"name": "config", "configMap": {"name": "web", "defaultMode": 420}},
                {"name": "token", "projected": {"sources": [
                    {"downwardAPI": {"items": [{"path": "labels",
                        "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}
            ],
            "nodeName": "node-1", "terminationGracePeriodSeconds": 30
        }
    });
    let pods = format!("/api/v1/namespaces/{ns}/pods");
    let pod_path = create(client, &pods, &pod).await;
    let status = json!({"status": {
        "phase": "Running", "hostIP": "10.0.0.4", "podIP": "10.244.1.7",
        "podIPs": [{"ip": "10.244.1.7"}], "startTime": "2026-12-07T06:00:00Z",
        "conditions": [{"type": "Ready", "status": "True",
            "lastProbeTime": null, "lastTransitionTime": "2026-12-07T06:00:05Z"}],
        "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
            "image": "nginx:1.27", "imageID": "", "started": true,
            "state": {"running": {"startedAt": "2026-12-07T06:00:02Z"}}}]
    }});
    let patch = http::Request::patch(format!("{pod_path}/status"))
        .header("Content-Type", "application/merge-patch+json")
        .body(serde_json::to_vec(&status).unwrap())
        .unwrap();
    call(client, patch).await;
    let mut paths = vec![pod_path];

    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "web", "image": "nginx:1.27",
                        "ports": [{"containerPort": 80, "name": "http"}],
                        "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                        "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}
                    }],
                    "volumes": [
                        {"name": "config", "configMap": {"name": "web"}},
                        {"name": "scratch", "emptyDir": {}}
                    ]
                }
            }
        }
    });
    let ingress = json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web"},
        "spec": {"rules": [{"host": "web.example.com", "http": {"paths": [{
            "path": "/", "pathType": "Prefix",
            "backend": {"service": {"name": "web", "port": {"number": 80}}}
        }]}}]}
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}
    });
    let configmap = json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "web"},
        "data": {"mode": "fast", "empty": ""}
    });
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web"},
        "type": "Opaque", "data": {"token": "c2VjcmV0"}
    });
    for (collection, object) in [
        (
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            deployment,
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses"),
            ingress,
        ),
        (format!("/api/v1/namespaces/{ns}/services"), service),
        (format!("/api/v1/namespaces/{ns}/configmaps"), configmap),
        (format!("/api/v1/namespaces/{ns}/secrets"), secret),
    ] {
        paths.push(create(client, &collection, &object).await);
    }
    paths
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_decode_to_the_json_the_api_server_writes() {
    let server = KubeApiserver::shared();
    let client = server.admin().await;
    let ns = server.namespace("protobuf").await;
    let mut paths = create_objects(&client, &ns).await;

    // LIST pages, read at one resourceVersion so that both encodings hold the same page and the
    // same continue token (the server's own writes move the latest one).
    let pods: Value = serde_json::from_slice(
        &get(
            &client,
            &format!("/api/v1/namespaces/{ns}/pods"),
            "application/json",
        )
        .await,
    )
    .unwrap();
    let version = pods["metadata"]["resourceVersion"].as_str().unwrap();
    let at = format!("limit=2&resourceVersion={version}&resourceVersionMatch=Exact");
    paths.push(format!("/api/v1/namespaces/{ns}/configmaps?{at}"));
    paths.push(format!("/api/v1/namespaces/{ns}/pods?{at}"));
    paths.push(format!("/apis/apps/v1/namespaces/{ns}/deployments?{at}"));

    let mut report = Vec::new();
    for path in &paths {
        let served: Value =
            serde_json::from_slice(&get(&client, path, "application/json").await).unwrap();
        let decoded = transcoded(
            path,
            &get(&client, path, wasmformer_protobuf::MEDIA_TYPE).await,
        );
        let mut out = Vec::new();
        differences("", &served, &decoded, &mut out);
        report.extend(out.into_iter().map(|line| format!("{path}: {line}")));
    }
    assert!(
        report.is_empty(),
        "the transcoded JSON differs from the API server's:\n{}",
        report.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_status_in_protobuf_decodes_to_the_json_one() {
    let server = KubeApiserver::shared();
    let client = server.admin().await;
    let ns = server.namespace("protobuf-status").await;
    let path = format!("/api/v1/namespaces/{ns}/pods/missing");
    let read = |accept: &'static str| {
        let request = http::Request::get(&path)
            .header("Accept", accept)
            .body(Vec::new())
            .unwrap();
        send(&client, request)
    };
    let (status, json) = read("application/json").await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
    let (status, protobuf) = read(wasmformer_protobuf::MEDIA_TYPE).await;
    assert_eq!(status, http::StatusCode::NOT_FOUND);
    let served: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(served["reason"], "NotFound", "{served}");
    assert_eq!(transcoded(&path, &protobuf), served);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_informer_lists_in_protobuf_and_caches_what_a_json_list_caches() {
    let server = KubeApiserver::shared();
    let client = server.admin().await;
    let ns = server.namespace("protobuf-list").await;
    create_objects(&client, &ns).await;
    for i in 0..5 {
        let configmap = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("page-{i}")}, "data": {"i": i.to_string()}});
        create(
            &client,
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            &configmap,
        )
        .await;
    }
    let keys: Vec<InformerKey> = [
        ApiResource::erase::<Pod>(&()),
        ApiResource::erase::<ConfigMap>(&()),
        ApiResource::erase::<Secret>(&()),
        ApiResource::erase::<Service>(&()),
        ApiResource::erase::<Deployment>(&()),
        ApiResource::erase::<Ingress>(&()),
    ]
    .into_iter()
    .map(|resource| InformerKey::new(resource, true).namespace(&ns))
    .collect();

    // Each informer's cached objects (by name) and how its last LIST page came; pages of 2, so
    // that lists go on with a continue token.
    let read = |list_encoding, options: StoreOptions| {
        let client = client.clone();
        let keys = keys.clone();
        async move {
            let settings = WatchSettings {
                page_size: 2,
                list_encoding,
                ..WatchSettings::default()
            };
            let factory = InformerFactory::new(client, settings);
            let mut read = Vec::new();
            for key in keys {
                let informer = factory.informer(key, &options).unwrap();
                tokio::time::timeout(Duration::from_secs(60), informer.wait_synced())
                    .await
                    .expect("synced");
                let objects: BTreeMap<String, Value> = informer
                    .store()
                    .snapshot()
                    .iter()
                    .map(|object| {
                        let body = serde_json::from_str(object.body()).unwrap();
                        (object.name().to_owned(), body)
                    })
                    .collect();
                read.push((informer.status().list_encoding, objects));
            }
            read
        }
    };
    // With managed fields stripped (the default; the protobuf page is written without them) and
    // kept.
    let mut report = Vec::new();
    for strip_managed_fields in [true, false] {
        let options = StoreOptions {
            strip_managed_fields,
            ..StoreOptions::default()
        };
        let protobuf = read(ListEncoding::Protobuf, options.clone()).await;
        let json = read(ListEncoding::Json, options).await;
        let pairs = keys.iter().zip(protobuf).zip(json);
        for ((key, (encoding, ours)), (json_encoding, theirs)) in pairs {
            let kind = &key.resource.kind;
            assert_eq!(encoding, Some(ListEncoding::Protobuf), "{kind}");
            assert_eq!(json_encoding, Some(ListEncoding::Json), "{kind}");
            assert!(!theirs.is_empty(), "{kind}: nothing listed");
            let managed = theirs
                .values()
                .all(|o| o["metadata"].get("managedFields").is_some());
            assert_eq!(managed, !strip_managed_fields, "{kind}");
            let (ours, theirs) = (json!(ours), json!(theirs));
            let at = format!("{kind} (managed fields stripped: {strip_managed_fields})");
            differences(&at, &theirs, &ours, &mut report);
        }
    }
    assert!(
        report.is_empty(),
        "the protobuf list cached other objects than the JSON list:\n{}",
        report.join("\n")
    );
}
