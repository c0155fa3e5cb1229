//! `wasmformer manifests`: the Kubernetes objects that run a configuration in a cluster, as pure
//! functions from the config to JSON objects (printed as YAML by the CLI).
//!
//! The set: a ServiceAccount, the RBAC the config needs (exactly [`crate::rbac::objects`], bound
//! to that ServiceAccount), a ConfigMap holding the config file's text, a Deployment that runs
//! `wasmformer run` on it (probes on `/healthz` and `/readyz` at `host.adminAddress`, non-root,
//! read-only root filesystem, resource requests, an `emptyDir` for the compile and OCI caches), a
//! Service for `/metrics`, and optionally a Prometheus Operator ServiceMonitor. Everything carries
//! the same `app.kubernetes.io/*` labels; [`kustomization`] lists the files of a `--out` folder.

use std::net::SocketAddr;

use serde_json::{Value, json};
use thiserror::Error;

use crate::config::HostConfig;

/// Where the ConfigMap is mounted in the container; the config is `config.yaml` in it.
pub const CONFIG_DIR: &str = "/etc/wasmformer";
/// Where the compile and OCI caches live (an `emptyDir`: the root filesystem is read-only).
pub const CACHE_DIR: &str = "/var/cache/wasmformer";
/// The user and group the container runs as (no root; the image has no `/etc/passwd`).
pub const RUN_AS: u32 = 65532;

/// What to generate.
#[derive(Debug, Clone)]
pub struct ManifestOptions {
    /// The name of every object (`wasmformer`).
    pub name: String,
    /// The namespace the host runs in.
    pub namespace: String,
    /// The container image.
    pub image: String,
    /// Deployment replicas.
    pub replicas: u32,
    /// Also generate a `monitoring.coreos.com/v1` ServiceMonitor.
    pub service_monitor: bool,
}

/// Why a config cannot be deployed as generated.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ManifestError {
    /// The probes and `/metrics` are served on the admin address, which the config leaves unset.
    #[error(
        "host.adminAddress is not set: the probes (/healthz, /readyz) and /metrics are served there; set it to 0.0.0.0:9090"
    )]
    NoAdminAddress,
    /// The admin address is loopback: the kubelet and Prometheus reach the pod on its IP.
    #[error(
        "host.adminAddress {0} is a loopback address: the kubelet's probes and Prometheus cannot reach it; use 0.0.0.0:{port}",
        port = .0.port()
    )]
    LoopbackAdminAddress(SocketAddr),
}

/// One generated object and the file `--out` writes it to.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// `deployment.yaml`.
    pub file: &'static str,
    /// The objects in that file (the RBAC file has several).
    pub objects: Vec<Value>,
}

/// What an operator should know about the config in a cluster (printed as warnings).
pub fn warnings(config: &HostConfig, options: &ManifestOptions) -> Vec<String> {
    let mut out = Vec::new();
    for plugin in &config.plugins {
        let wasm = plugin.wasm.to_string_lossy();
        if !wasm.starts_with("oci://") {
            out.push(format!(
                "plugin {}: wasm {wasm} is a file: in the container it must exist at {}; publish it with `wasmformer push` and use an oci:// reference",
                plugin.name,
                std::path::Path::new(CONFIG_DIR).join(&plugin.wasm).display()
            ));
        }
    }
    if config.cluster.kubeconfig.is_some() || config.cluster.context.is_some() {
        out.push(
            "cluster.kubeconfig/context are set: in the pod the host needs cluster.inCluster: true (or no cluster section)"
                .into(),
        );
    }
    if config.host.admin_token_file.is_some() {
        out.push(format!(
            "host.adminTokenFile is relative to {CONFIG_DIR}: mount a Secret there (not generated)"
        ));
    }
    if options.replicas > 1 && !crate::rbac::leader_election(config) {
        out.push(format!(
            "--replicas {} without leader election: every replica runs every plugin",
            options.replicas
        ));
    }
    out
}

/// The objects for `config`, given its RBAC objects (from [`crate::rbac::objects`] with the
/// ServiceAccount `options.name` in `options.namespace`) and the config file's text.
pub fn manifests(
    config: &HostConfig,
    config_text: &str,
    rbac: Vec<Value>,
    options: &ManifestOptions,
) -> Result<Vec<Manifest>, ManifestError> {
    let admin = config
        .host
        .admin_address
        .ok_or(ManifestError::NoAdminAddress)?;
    if admin.ip().is_loopback() {
        return Err(ManifestError::LoopbackAdminAddress(admin));
    }
    let (name, namespace) = (options.name.as_str(), options.namespace.as_str());
    let labels = labels(name);
    let meta = json!({"name": name, "namespace": namespace, "labels": labels});
    let selector = json!({
        "app.kubernetes.io/name": "wasmformer",
        "app.kubernetes.io/instance": name,
    });
    let mut out = vec![
        Manifest {
            file: "serviceaccount.yaml",
            objects: vec![json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": meta,
            })],
        },
        Manifest {
            file: "rbac.yaml",
            objects: rbac,
        },
        Manifest {
            file: "configmap.yaml",
            objects: vec![json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": meta,
                "data": {"config.yaml": config_text},
            })],
        },
        Manifest {
            file: "deployment.yaml",
            objects: vec![deployment(options, &meta, &selector, admin.port())],
        },
        Manifest {
            file: "service.yaml",
            objects: vec![json!({
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": meta,
                "spec": {
                    "selector": selector,
                    "ports": [{"name": "metrics", "port": admin.port(), "targetPort": "admin", "protocol": "TCP"}],
                },
            })],
        },
    ];
    if options.service_monitor {
        out.push(Manifest {
            file: "servicemonitor.yaml",
            objects: vec![json!({
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "ServiceMonitor",
                "metadata": meta,
                "spec": {
                    "selector": {"matchLabels": selector},
                    "endpoints": [{"port": "metrics", "path": "/metrics"}],
                },
            })],
        });
    }
    Ok(out)
}

fn labels(name: &str) -> Value {
    json!({
        "app.kubernetes.io/name": "wasmformer",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/version": env!("CARGO_PKG_VERSION"),
        "app.kubernetes.io/managed-by": "wasmformer-manifests",
    })
}

fn deployment(options: &ManifestOptions, meta: &Value, selector: &Value, port: u16) -> Value {
    let probe = |path: &str, period: u32| {
        json!({
            "httpGet": {"path": path, "port": "admin"},
            "periodSeconds": period,
            "failureThreshold": 3,
        })
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": options.replicas,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels(&options.name)},
                "spec": {
                    "serviceAccountName": options.name,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": RUN_AS,
                        "runAsGroup": RUN_AS,
                        "fsGroup": RUN_AS,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [{
                        "name": "wasmformer",
                        "image": options.image,
                        "args": ["run", "--config", format!("{CONFIG_DIR}/config.yaml")],
                        "env": [
                            {"name": "WASMFORMER_CACHE_DIR", "value": CACHE_DIR},
                            {"name": "WASMFORMER_LOG_FORMAT", "value": "json"},
                        ],
                        "ports": [{"name": "admin", "containerPort": port, "protocol": "TCP"}],
                        "livenessProbe": probe("/healthz", 10),
                        "readinessProbe": probe("/readyz", 5),
                        "startupProbe": {
                            "httpGet": {"path": "/healthz", "port": "admin"},
                            "periodSeconds": 2,
                            "failureThreshold": 60,
                        },
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "128Mi"},
                            "limits": {"memory": "512Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true,
                            "capabilities": {"drop": ["ALL"]},
                        },
                        "volumeMounts": [
                            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": true},
                            {"name": "cache", "mountPath": CACHE_DIR},
                        ],
                    }],
                    "volumes": [
                        {"name": "config", "configMap": {"name": options.name}},
                        {"name": "cache", "emptyDir": {}},
                    ],
                },
            },
        },
    })
}

/// The `kustomization.yaml` of a `--out` folder: every generated file as a resource. It sets no
/// `namespace:` — that would move the Roles a config binds to other namespaces; every object
/// already carries its own.
pub fn kustomization(manifests: &[Manifest]) -> Value {
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": manifests.iter().map(|m| m.file).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(admin: &str) -> HostConfig {
        let yaml = format!(
            "host: {{adminAddress: \"{admin}\"}}\nplugins:\n  - {{name: a, wasm: \"oci://r.example/a:1\", handles: [{{apiVersion: v1, kind: Pod}}]}}\n"
        );
        HostConfig::parse(&yaml, "/".into()).unwrap()
    }

    fn options() -> ManifestOptions {
        ManifestOptions {
            name: "wf".into(),
            namespace: "ops".into(),
            image: "wasmformer:test".into(),
            replicas: 1,
            service_monitor: true,
        }
    }

    #[test]
    fn the_probes_and_the_service_use_the_admin_port() {
        let set = manifests(&config("0.0.0.0:9191"), "x: 1\n", vec![], &options()).unwrap();
        let files: Vec<&str> = set.iter().map(|m| m.file).collect();
        assert_eq!(
            files,
            [
                "serviceaccount.yaml",
                "rbac.yaml",
                "configmap.yaml",
                "deployment.yaml",
                "service.yaml",
                "servicemonitor.yaml"
            ]
        );
        let deployment = &set[3].objects[0];
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["ports"][0]["containerPort"], 9191);
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(
            deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"],
            true
        );
        assert_eq!(set[2].objects[0]["data"]["config.yaml"], "x: 1\n");
        assert_eq!(set[4].objects[0]["spec"]["ports"][0]["port"], 9191);
        assert_eq!(kustomization(&set)["resources"][5], "servicemonitor.yaml");
    }

    #[test]
    fn an_unreachable_admin_address_is_refused() {
        let err = manifests(&config("127.0.0.1:9090"), "", vec![], &options()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "host.adminAddress 127.0.0.1:9090 is a loopback address: the kubelet's probes and Prometheus cannot reach it; use 0.0.0.0:9090"
        );
        let none = HostConfig::parse(
            "plugins:\n  - {name: a, wasm: a.wasm, handles: [{apiVersion: v1, kind: Pod}]}\n",
            "/".into(),
        )
        .unwrap();
        assert_eq!(
            manifests(&none, "", vec![], &options()),
            Err(ManifestError::NoAdminAddress)
        );
        assert!(warnings(&none, &options())[0].starts_with("plugin a: wasm a.wasm is a file"));
    }
}
