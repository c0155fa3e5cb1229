// The next version of `js-counter`, with a new state format that reads the old one: the count is
// now `total` (the old `count`, moved in `init`), and `sinceV2` counts the events since the swap.
// Logs `{"total": N, "sinceV2": M, "restoredFrom": …}` per event.

import { Plugin, exportPlugin, info, restoredFrom } from "wasmformer";

class Counter extends Plugin {
  total = 0;
  sinceV2 = 0;

  init(config) {
    // A state saved by the first version: take its count, drop what this one does not keep.
    if ("count" in this) {
      this.total = this.count;
      delete this.count;
      delete this.names;
    }
  }

  onAdd(obj, initial) {
    this.total += 1;
    this.sinceV2 += 1;
    info(
      JSON.stringify({
        total: this.total,
        sinceV2: this.sinceV2,
        kept: Object.keys(this).sort(),
        restoredFrom: restoredFrom()?.slice(0, 12) ?? null,
      }),
    );
  }
}

exportPlugin(Counter, { state: true });
