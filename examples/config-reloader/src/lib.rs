//! The "reloader" controller: when a ConfigMap changes, every Deployment in its namespace whose
//! pod template references it (a `configMap` volume or a container's `envFrom`) gets the
//! annotation `wasmformer.io/config-hash` on its pod template, a hash of the content of the
//! ConfigMaps it references, by server-side apply, so the Deployment rolls.
//!
//! It reconciles Deployments (`handles`); the host maps a changed ConfigMap to the Deployments
//! that reference it through two indexes on Deployments (`reconcile.watches`, see
//! `config.yaml`), so no plugin code runs per ConfigMap event. An unchanged hash writes nothing
//! (its own apply comes back as a Deployment update); a conflict or an unavailable server is
//! retried after the key's backoff.

use wasmformer_guest::k8s_openapi::api::apps::v1::Deployment;
use wasmformer_guest::k8s_openapi::api::core::v1::ConfigMap;
use wasmformer_guest::serde_json::json;
use wasmformer_guest::{Action, ObjectRef, Plugin, Reconciler, Result, info, lister, writer};

/// The pod-template annotation the plugin owns.
pub const ANNOTATION: &str = "wasmformer.io/config-hash";

#[derive(Default)]
struct ConfigReloader;

impl Plugin for ConfigReloader {}

impl Reconciler for ConfigReloader {
    fn reconcile(&mut self, key: &ObjectRef) -> Result<Action> {
        let Some(object) = key.get()? else {
            return Ok(Action::done()); // deleted
        };
        let deployment: Deployment = object.decode()?;
        let names = referenced_config_maps(&deployment);
        if names.is_empty() {
            return Ok(Action::done());
        }
        let mut hash = Fnv64::default();
        for name in &names {
            hash.write(name.as_bytes());
            // A missing ConfigMap hashes as absent: creating it later changes the hash.
            if let Ok(cm) = lister::get::<ConfigMap>(&key.namespace, name) {
                for (k, v) in cm.data.unwrap_or_default() {
                    hash.write(k.as_bytes());
                    hash.write(v.as_bytes());
                }
            }
        }
        let value = format!("{:016x}", hash.0);
        let current = deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.annotations.as_ref())
            .and_then(|a| a.get(ANNOTATION));
        if current == Some(&value) {
            return Ok(Action::done());
        }
        let manifest = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": key.name, "namespace": key.namespace},
            "spec": {"template": {"metadata": {"annotations": {ANNOTATION: value}}}},
        });
        writer::apply(&manifest).map_err(|e| wasmformer_guest::Error::from(e).retried())?;
        info!("{key}: {ANNOTATION}={value} (ConfigMaps {names:?})");
        Ok(Action::done())
    }
}

/// The ConfigMaps a Deployment's pod template references, sorted, each once.
fn referenced_config_maps(deployment: &Deployment) -> Vec<String> {
    let Some(pod) = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
    else {
        return Vec::new();
    };
    let volumes = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.config_map.as_ref().map(|c| c.name.clone()));
    let env_from = pod
        .containers
        .iter()
        .flat_map(|c| c.env_from.iter().flatten())
        .filter_map(|e| e.config_map_ref.as_ref().map(|c| c.name.clone()));
    let mut names: Vec<String> = volumes.chain(env_from).collect();
    names.sort();
    names.dedup();
    names
}

/// FNV-1a, 64 bits: a stable content hash without a dependency.
struct Fnv64(u64);

impl Default for Fnv64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv64 {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes.iter().chain([&0u8]) {
            self.0 ^= u64::from(*byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

wasmformer_guest::export!(ConfigReloader, reconciler);
