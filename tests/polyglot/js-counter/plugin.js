// A plugin whose state survives unloading and hot swap (`exportPlugin(Counter, { state: true })`):
// it counts the events it handled and logs one JSON line per event, `{"count": N, "names": [...],
// "tag": …, "restoredFrom": …}` (the first 12 hex digits of the version its state came from, or
// null), and `{"init": N}` from `init`. `tag` comes from the config and is not kept. An object
// named `unjson-*` gives the plugin a property that JSON cannot hold, so the next save fails.

import { Plugin, exportPlugin, info, restoredFrom } from "wasmformer";

class Counter extends Plugin {
  static transient = ["tag"];
  count = 0;
  names = [];

  init(config) {
    this.tag = config.tag ?? "";
    info(JSON.stringify({ init: this.count }));
  }

  onAdd(obj, initial) {
    this.count += 1;
    this.names.push(obj.name);
    if (obj.name.startsWith("unjson-")) this.unjson = new Map([[obj.name, 1]]);
    info(
      JSON.stringify({
        count: this.count,
        names: this.names,
        tag: this.tag,
        restoredFrom: restoredFrom()?.slice(0, 12) ?? null,
      }),
    );
  }
}

exportPlugin(Counter, { state: true });
