// The benchmark handlers in JavaScript, chosen by the config's `mode`: `empty` does nothing,
// `labels` reads name, namespace and labels (like tests/guests/bench-labels), `decode` parses the
// whole object and counts its containers (like tests/guests/bench-decode).

import { Plugin, exportPlugin } from "wasmformer";

class Bench extends Plugin {
  init(config) {
    this.mode = config.mode ?? "empty";
    this.labels = 0;
    this.withApp = 0;
    this.identityBytes = 0;
    this.containers = 0;
  }

  onAdd(obj, initial) {
    if (this.mode === "labels") {
      this.labels += Object.keys(obj.labels).length;
      this.withApp += obj.label("app") === undefined ? 0 : 1;
      this.identityBytes += obj.name.length + obj.namespace.length;
    } else if (this.mode === "decode") {
      this.containers += (obj.json().spec?.containers ?? []).length;
    }
  }
}

exportPlugin(Bench);
