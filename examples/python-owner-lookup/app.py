"""On a Pod event, follows the Pod's owner references through the lister (Pod -> ReplicaSet ->
Deployment) and logs the chain. Needs lister grants for ReplicaSets and Deployments."""

from typing import Any, Dict, Optional

from wasmformer import NotFound, Object, Plugin, export, gvk, info, lister

REPLICA_SET = gvk("apps/v1", "ReplicaSet")
DEPLOYMENT = gvk("apps/v1", "Deployment")


def owner_named(obj: Dict[str, Any], kind: str) -> Optional[str]:
    """The name of `obj`'s controlling owner of kind `kind`, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller") is True:
            return ref.get("name")
    return None


class OwnerLookup(Plugin):
    def log_chain(self, obj: Object) -> None:
        pod = f"pod {obj.namespace}/{obj.name}"
        rs_name = owner_named(obj.json(), "ReplicaSet")
        if rs_name is None:
            info(f"{pod}: no owning ReplicaSet")
            return
        try:
            rs = lister.get(REPLICA_SET, obj.namespace, rs_name)
        except NotFound:
            info(f"{pod} -> ReplicaSet {rs_name} (not in cache)")
            return
        deploy_name = owner_named(rs.json(), "Deployment")
        if deploy_name is None:
            info(f"{pod} -> ReplicaSet {rs_name}")
            return
        try:
            lister.get(DEPLOYMENT, obj.namespace, deploy_name)
            info(f"{pod} -> ReplicaSet {rs_name} -> Deployment {deploy_name}")
        except NotFound:
            info(f"{pod} -> ReplicaSet {rs_name} -> Deployment {deploy_name} (not in cache)")

    def on_add(self, obj: Object, initial: bool) -> None:
        self.log_chain(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self.log_chain(new)


export(OwnerLookup)
