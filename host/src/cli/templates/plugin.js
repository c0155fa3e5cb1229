// {{name}}: a wasmformer plugin. Logs every object added, updated and deleted.

import { Plugin, exportPlugin, info } from "wasmformer";

class {{class}} extends Plugin {
  init(config) {
    this.seen = 0;
  }

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
