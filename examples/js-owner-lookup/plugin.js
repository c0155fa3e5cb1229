// On a Pod event, follows the Pod's owner references through the lister (Pod -> ReplicaSet ->
// Deployment) and logs the chain. Needs lister grants for ReplicaSets and Deployments.

import { ListerError, Plugin, exportPlugin, gvk, info, lister } from "wasmformer";

const REPLICA_SET = gvk("apps/v1", "ReplicaSet");
const DEPLOYMENT = gvk("apps/v1", "Deployment");

/** The name of `obj`'s controlling owner of kind `kind`, if any. */
function ownerNamed(obj, kind) {
  const ref = (obj.metadata?.ownerReferences ?? []).find((r) => r.kind === kind && r.controller === true);
  return ref?.name;
}

/** `lister.get`, with `undefined` for an object not in the cache. */
function getOrUndefined(kind, namespace, name) {
  try {
    return lister.get(kind, namespace, name);
  } catch (e) {
    if (e instanceof ListerError && e.code === "not-found") return undefined;
    throw e;
  }
}

class OwnerLookup extends Plugin {
  logChain(obj) {
    const pod = `pod ${obj.namespace}/${obj.name}`;
    const rsName = ownerNamed(obj.json(), "ReplicaSet");
    if (rsName === undefined) {
      info(`${pod}: no owning ReplicaSet`);
      return;
    }
    const rs = getOrUndefined(REPLICA_SET, obj.namespace, rsName);
    if (rs === undefined) {
      info(`${pod} -> ReplicaSet ${rsName} (not in cache)`);
      return;
    }
    const deployName = ownerNamed(rs.json(), "Deployment");
    if (deployName === undefined) {
      info(`${pod} -> ReplicaSet ${rsName}`);
      return;
    }
    if (getOrUndefined(DEPLOYMENT, obj.namespace, deployName) === undefined) {
      info(`${pod} -> ReplicaSet ${rsName} -> Deployment ${deployName} (not in cache)`);
    } else {
      info(`${pod} -> ReplicaSet ${rsName} -> Deployment ${deployName}`);
    }
  }

  onAdd(obj, initial) {
    this.logChain(obj);
  }

  onUpdate(oldObj, newObj) {
    this.logChain(newObj);
  }
}

exportPlugin(OwnerLookup);
