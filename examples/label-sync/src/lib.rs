//! label-sync: copies a label of each Namespace (default `team`; set `config: {label: ...}`) onto
//! every Pod in it, by server-side apply. The plugin owns that label on each Pod (field manager
//! `wasmformer/label-sync`): another manager that sets it conflicts unless it forces.
//!
//! It handles Namespaces and Pods: a Namespace's change is applied to its Pods (read from the
//! cache), a new or changed Pod gets its Namespace's label. Its own apply comes back as a Pod
//! update whose label already matches, so it writes once per change.

use wasmformer_guest::k8s_openapi::api::core::v1::{Namespace, Pod};
use wasmformer_guest::lister::{self, gvk_of};
use wasmformer_guest::serde_json::json;
use wasmformer_guest::{Object, Plugin, Result, info, writer};

pub struct LabelSync {
    label: String,
}

impl Default for LabelSync {
    fn default() -> Self {
        Self {
            label: "team".to_owned(),
        }
    }
}

impl LabelSync {
    /// Applies `value` as the label on `pod` unless it already has it.
    fn sync_pod(&self, pod: &Object, value: &str) -> Result<()> {
        if pod.label(&self.label) == Some(value) {
            return Ok(());
        }
        let manifest = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name(), "namespace": pod.namespace(), "labels": {&self.label: value}},
        });
        writer::apply(&manifest)?;
        info!(
            "pod {}/{}: {}={value}",
            pod.namespace(),
            pod.name(),
            self.label
        );
        Ok(())
    }

    fn on_object(&self, obj: &Object) -> Result<()> {
        if obj.kind().kind == "Namespace" {
            let Some(value) = obj.label(&self.label) else {
                return Ok(());
            };
            for pod in lister::list_objects(&gvk_of::<Pod>(), Some(obj.name()), "")? {
                self.sync_pod(&pod, value)?;
            }
            return Ok(());
        }
        let namespace = match lister::get_object(&gvk_of::<Namespace>(), "", obj.namespace()) {
            Ok(namespace) => namespace,
            Err(wasmformer_guest::ListerError::NotFound) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match namespace.label(&self.label) {
            Some(value) => self.sync_pod(obj, value),
            None => Ok(()),
        }
    }
}

impl Plugin for LabelSync {
    fn init(&mut self, config: wasmformer_guest::serde_json::Value) -> Result<()> {
        if let Some(label) = config.get("label").and_then(|l| l.as_str()) {
            self.label = label.to_owned();
        }
        Ok(())
    }

    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        self.on_object(obj)
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<()> {
        self.on_object(new)
    }
}

wasmformer_guest::export!(LabelSync);
