//! When a Node is cordoned (`spec.unschedulable` turns true), logs how many Pods sit on it, using
//! the custom index `pods-by-node` (Pods by `spec.nodeName`) configured in the host.

use wasmformer_guest::k8s_openapi::api::core::v1::{Node, Pod};
use wasmformer_guest::{Object, Plugin, Result, info, lister};

/// The index this plugin expects on Pods, keyed by `spec.nodeName`.
pub const POD_NODE_INDEX: &str = "pods-by-node";

#[derive(Default)]
pub struct NodePods;

fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

impl Plugin for NodePods {
    fn on_update(&mut self, old: &Object, new: &Object) -> Result<()> {
        let (before, after): (Node, Node) = (old.decode()?, new.decode()?);
        if cordoned(&before) || !cordoned(&after) {
            return Ok(());
        }
        let pods: Vec<Pod> = lister::by_index(POD_NODE_INDEX, new.name())?;
        info!(
            "node {} cordoned with {} pods on it",
            new.name(),
            pods.len()
        );
        Ok(())
    }
}

wasmformer_guest::export!(NodePods);
