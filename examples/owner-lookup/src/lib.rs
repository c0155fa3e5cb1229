//! On a Pod event, follows the Pod's owner references through the lister (Pod → ReplicaSet →
//! Deployment) and logs the chain. Needs lister grants for ReplicaSets and Deployments.

use wasmformer_guest::k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use wasmformer_guest::k8s_openapi::api::core::v1::Pod;
use wasmformer_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use wasmformer_guest::{ListerError, Object, Plugin, Result, info, lister};

#[derive(Default)]
pub struct OwnerLookup;

/// The name of `meta`'s controlling owner of kind `kind`, if any.
fn owner_named<'a>(meta: &'a ObjectMeta, kind: &str) -> Option<&'a str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.kind == kind && r.controller == Some(true))
        .map(|r| r.name.as_str())
}

impl OwnerLookup {
    fn log_chain(&self, obj: &Object) -> Result<()> {
        let pod: Pod = obj.decode()?;
        let namespace = obj.namespace();
        let Some(rs_name) = owner_named(&pod.metadata, "ReplicaSet") else {
            info!("pod {namespace}/{}: no owning ReplicaSet", obj.name());
            return Ok(());
        };
        let rs: ReplicaSet = match lister::get(namespace, rs_name) {
            Ok(rs) => rs,
            Err(ListerError::NotFound) => {
                info!(
                    "pod {namespace}/{} -> ReplicaSet {rs_name} (not in cache)",
                    obj.name()
                );
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let Some(deploy_name) = owner_named(&rs.metadata, "Deployment") else {
            info!("pod {namespace}/{} -> ReplicaSet {rs_name}", obj.name());
            return Ok(());
        };
        match lister::get::<Deployment>(namespace, deploy_name) {
            Ok(_) => info!(
                "pod {namespace}/{} -> ReplicaSet {rs_name} -> Deployment {deploy_name}",
                obj.name()
            ),
            Err(ListerError::NotFound) => info!(
                "pod {namespace}/{} -> ReplicaSet {rs_name} -> Deployment {deploy_name} (not in cache)",
                obj.name()
            ),
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}

impl Plugin for OwnerLookup {
    fn on_add(&mut self, obj: &Object, _initial: bool) -> Result<()> {
        self.log_chain(obj)
    }

    fn on_update(&mut self, _old: &Object, new: &Object) -> Result<()> {
        self.log_chain(new)
    }
}

wasmformer_guest::export!(OwnerLookup);
