//! The dev cluster renders a protobuf request body (what kubectl's typed clients send) as the JSON
//! the real API server writes for the same object. Objects are created on the harness's
//! kube-apiserver and read back in both encodings; the dev cluster's decoding of the protobuf must
//! equal the server's JSON: embedded structs inline (a volume's source, a probe's handler, an
//! Ingress rule's value), empty fields left out or kept as the Go types say, unset times `null`.

use serde_json::{Value, json};
use wasmformer_devcluster::protobuf;
use wasmformer_tests::apiserver::KubeApiserver;

async fn call(client: &kube::Client, request: http::Request<Vec<u8>>) -> Vec<u8> {
    let what = format!("{} {}", request.method(), request.uri());
    let response = client
        .send(request.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let status = response.status();
    let body = response.into_body().collect_bytes().await.unwrap().to_vec();
    assert!(
        status.is_success(),
        "{what}: {status} {}",
        String::from_utf8_lossy(&body)
    );
    body
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
                    None => out.push(format!("{path}.{key}: server {value}, dev cluster none")),
                }
            }
            for (key, value) in b.iter().filter(|(key, _)| !a.contains_key(*key)) {
                out.push(format!("{path}.{key}: server none, dev cluster {value}"));
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (value, other)) in a.iter().zip(b).enumerate() {
                differences(&format!("{path}[{i}]"), value, other, out);
            }
        }
        _ if theirs == ours => {}
        _ => out.push(format!("{path}: server {theirs}, dev cluster {ours}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_bodies_decode_to_the_json_the_api_server_writes() {
    let server = KubeApiserver::shared();
    let client = server.admin().await;
    let ns = server.namespace("protobuf").await;

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
    let pod_path = create(&client, &pods, &pod).await;
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
    call(&client, patch).await;
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
        paths.push(create(&client, &collection, &object).await);
    }

    let mut report = Vec::new();
    for path in &paths {
        let served: Value =
            serde_json::from_slice(&get(&client, path, "application/json").await).unwrap();
        let decoded = protobuf::decode(&get(&client, path, protobuf::MEDIA_TYPE).await)
            .unwrap_or_else(|e| panic!("{path}: {}", e.chain_message()));
        let mut out = Vec::new();
        differences("", &served, &decoded, &mut out);
        report.extend(out.into_iter().map(|line| format!("{path}: {line}")));
    }
    assert!(
        report.is_empty(),
        "the dev cluster's JSON differs from the API server's:\n{}",
        report.join("\n")
    );
}
