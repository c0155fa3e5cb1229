// The benchmark handlers in JavaScript, chosen by the config's `mode`: `empty` does nothing,
// `labels` reads name, namespace and labels (like tests/guests/bench-labels), `decode` parses the
// whole object and counts its containers (like tests/guests/bench-decode). `pages` goes through the
// Pods of the event's namespace that match the config's `selector` with `lister.iter`, in pages of
// the config's `page`, and logs the keys it read (like tests/guests/bench-lister with `log`).

import { Plugin, exportPlugin, gvk, info, lister } from "wasmformer";

class Bench extends Plugin {
  init(config) {
    this.mode = config.mode ?? "empty";
    this.labels = 0;
    this.withApp = 0;
    this.identityBytes = 0;
    this.containers = 0;
    this.selector = config.selector ?? "";
    this.page = config.page ?? 64;
  }

  onAdd(obj, initial) {
    if (this.mode === "labels") {
      this.labels += Object.keys(obj.labels).length;
      this.withApp += obj.label("app") === undefined ? 0 : 1;
      this.identityBytes += obj.name.length + obj.namespace.length;
    } else if (this.mode === "decode") {
      this.containers += (obj.json().spec?.containers ?? []).length;
    } else if (this.mode === "pages") {
      const keys = [];
      for (const pod of lister.iter(gvk("v1", "Pod"), obj.namespace, this.selector, this.page)) {
        keys.push(`${pod.namespace}/${pod.name}`);
      }
      info(`read ${keys.join(" ")}`);
    }
  }
}

exportPlugin(Bench);
