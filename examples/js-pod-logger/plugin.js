// The classic informer example: logs every Pod added, updated and deleted.

import { Plugin, exportPlugin, info } from "wasmformer";

class PodLogger extends Plugin {
  onAdd(pod, initial) {
    info(`New Pod Added to Store: ${pod.name}`);
  }

  onUpdate(oldPod, newPod) {
    info(`${oldPod.name} Pod Updated to ${newPod.name}`);
  }

  onDelete(pod, finalStateUnknown) {
    info(`Pod Deleted from Store: ${pod.name}`);
  }
}

exportPlugin(PodLogger);
