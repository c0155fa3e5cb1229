// Builds one JavaScript plugin into a component with componentize-js's library API (the
// `jco componentize` CLI fails on Node 20). Run by `wasmformer build`:
//   node componentize.mjs ENTRY.js WIT_DIR OUT.wasm WORLD
//
// The WASI `http` and `fetch-event` features are disabled: with them the component imports
// `wasi:http`, which the host does not link (plugins get no network).
import { componentize } from "@bytecodealliance/componentize-js";
import { writeFile } from "node:fs/promises";

const [sourcePath, witPath, out, worldName] = process.argv.slice(2);
const { component } = await componentize({
  sourcePath,
  witPath,
  worldName,
  disableFeatures: ["http", "fetch-event"],
});
await writeFile(out, component);
