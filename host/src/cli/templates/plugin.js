// {{name}}: a wasmformer plugin. Logs every object added, updated and deleted.

import { Plugin, exportPlugin, info } from "wasmformer";

class {{class}} extends Plugin {
  // First values go here, not in `init`: with `exportPlugin({{class}}, { state: true })` they are
  // kept across idle unloads and hot swaps (the state is restored before `init` runs).
  seen = 0;

  init(config) {}

  onAdd(obj, initial) {
    this.seen += 1;
    info(`New Pod Added to Store: ${obj.name}`);
  }

  onUpdate(oldObj, newObj) {
    info(`${oldObj.name} Pod Updated to ${newObj.name}`);
  }

  onDelete(obj, finalStateUnknown) {
    info(`Pod Deleted from Store: ${obj.name}`);
  }
}

exportPlugin({{class}});
