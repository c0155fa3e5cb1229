// label-sync: copies a label of each Namespace (default `team`; set `config: {label: ...}`) onto
// every Pod in it, by server-side apply. The plugin owns that label on each Pod (field manager
// `wasmformer/<plugin-name>`): another manager that sets it conflicts unless it forces.
//
// It handles Namespaces and Pods: a Namespace's change is applied to its Pods (read from the
// cache), a new or changed Pod gets its Namespace's label. Its own apply comes back as a Pod
// update whose label already matches, so it writes once per change. Needs
// `write: [{apiVersion: v1, kind: Pod, verbs: [apply]}]`.

import { ListerError, Plugin, exportPlugin, gvk, info, lister, writer } from "wasmformer";

const POD = gvk("v1", "Pod");
const NAMESPACE = gvk("v1", "Namespace");

class LabelSync extends Plugin {
  constructor() {
    super();
    this.label = "team";
  }

  init(config) {
    if (typeof config.label === "string") this.label = config.label;
  }

  /** Applies `value` as the label on `pod` unless it already has it. */
  syncPod(pod, value) {
    if (pod.label(this.label) === value) return;
    writer.apply({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: pod.name, namespace: pod.namespace, labels: { [this.label]: value } },
    });
    info(`pod ${pod.namespace}/${pod.name}: ${this.label}=${value}`);
  }

  onObject(obj) {
    if (obj.kind.kind === "Namespace") {
      const value = obj.label(this.label);
      if (value === undefined) return;
      for (const pod of lister.list(POD, obj.name)) this.syncPod(pod, value);
      return;
    }
    let namespace;
    try {
      namespace = lister.get(NAMESPACE, "", obj.namespace);
    } catch (e) {
      if (e instanceof ListerError && e.code === "not-found") return;
      throw e;
    }
    const value = namespace.label(this.label);
    if (value !== undefined) this.syncPod(obj, value);
  }

  onAdd(obj, initial) {
    this.onObject(obj);
  }

  onUpdate(oldObj, newObj) {
    this.onObject(newObj);
  }
}

exportPlugin(LabelSync);
