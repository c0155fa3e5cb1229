//! The dev cluster's OpenAPI documents are the real kube-apiserver's: the checked-in copy
//! (`devcluster/openapi/kubernetes.json.gz`) must equal what the harness serves, and `/version`
//! must report the harness's Kubernetes version. To refresh the copy after a harness upgrade:
//! `WASMFORMER_CAPTURE_OPENAPI=1 cargo test -p wasmformer-tests --test integration devcluster_openapi::`.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use wasmformer_devcluster::openapi::{self, Captured};
use wasmformer_devcluster::{DevCluster, DevClusterConfig};
use wasmformer_tests::apiserver::KubeApiserver;

fn raw(kubeconfig: &Path, path: &str) -> Value {
    let output =
        Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["get", "--raw", path])
            .env_remove("KUBECONFIG")
            .output()
            .expect("kubectl runs");
    assert!(
        output.status.success(),
        "kubectl get --raw {path}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
}

#[test]
fn the_checked_in_openapi_documents_are_what_the_harness_serves() {
    // A server of its own: a CRD another test creates adds its definitions to the shared one's.
    let server = KubeApiserver::start();
    let kubeconfig = server.kubeconfig("admin");
    let served = Captured {
        v2: raw(&kubeconfig, "/openapi/v2"),
        v3: openapi::captured_paths()
            .into_iter()
            .map(|p| (p.clone(), raw(&kubeconfig, &format!("/openapi/v3/{p}"))))
            .collect(),
    };
    let file = wasmformer_tests::repo_root().join("devcluster/openapi/kubernetes.json.gz");
    if std::env::var_os("WASMFORMER_CAPTURE_OPENAPI").is_some() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(&serde_json::to_vec(&served).unwrap()).unwrap();
        std::fs::write(&file, gz.finish().unwrap()).unwrap();
        eprintln!("wrote {}", file.display());
    }
    let checked_in = openapi::captured().expect("the checked-in documents load");
    assert!(
        *checked_in == served,
        "{} differs from the harness's documents; refresh it with WASMFORMER_CAPTURE_OPENAPI=1 cargo test -p wasmformer-tests --test integration devcluster_openapi::",
        file.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dev_cluster_reports_the_harness_kubernetes_version_and_serves_its_documents() {
    let real = raw(&KubeApiserver::shared().kubeconfig("admin"), "/version");
    let dev = DevCluster::start(DevClusterConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    let kubeconfig_for_blocking = kubeconfig.clone();
    let (ours, index, apps) = tokio::task::spawn_blocking(move || {
        let k = &kubeconfig_for_blocking;
        (
            raw(k, "/version"),
            raw(k, "/openapi/v3"),
            raw(k, "/openapi/v3/apis/apps/v1"),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        (&ours["major"], &ours["minor"]),
        (&real["major"], &real["minor"]),
        "dev {ours} vs harness {real}"
    );
    assert_eq!(ours["emulationMinor"], real["emulationMinor"]);
    assert!(
        index["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/apis/apps/v1?hash="),
        "{index}"
    );
    assert_eq!(apps, openapi::captured().unwrap().v3["apis/apps/v1"]);
    dev.shutdown().await.unwrap();
}
