// A misbehaving JavaScript plugin: what it does depends on the object's name.
//
// `loop*` spins forever, `grow*` allocates without bound, `raise*` throws, `open*` tries to read a
// file, `flood*` logs far more than the host allows per call; any other object logs
// `ok <name> call <n>`, where n counts this instance's calls (state kept between calls; the plugin
// does not opt in to keeping state, so an unload starts the count over).

import { Plugin, exportPlugin, info } from "wasmformer";

class Hostile extends Plugin {
  calls = 0;

  onAdd(obj, initial) {
    this.calls += 1;
    const name = obj.name;
    if (name.startsWith("loop")) {
      for (;;) {}
    }
    if (name.startsWith("grow")) {
      const hoard = [];
      for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
    }
    if (name.startsWith("raise")) {
      throw new TypeError(`refusing ${name} on purpose`);
    }
    if (name.startsWith("open")) {
      // Node's way; the sandbox has no `require` and no `fs` (and `fetch`, disabled, traps).
      const text = globalThis.require("fs").readFileSync("/etc/hostname");
      info(`read a file: ${text}`);
    }
    if (name.startsWith("flood")) {
      for (let i = 0; i < 20000; i++) info(`flood line ${i} of 20000 for ${name}`);
      console.log("and stdout too");
    }
    info(`ok ${name} call ${this.calls}`);
  }
}

exportPlugin(Hostile);
