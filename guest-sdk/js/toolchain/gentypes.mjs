// Generates the TypeScript declarations of the WIT contract (guest-sdk/js/types/) with jco's
// bindgen, which componentize-js depends on. The `jco guest-types` CLI cannot read files on
// Node 20, so the WIT is handed over as text. The world is the one `wasmformer build` builds
// JavaScript plugins in (`plugin` with the `state` export). Run in the JS toolchain's folder:
//   node gentypes.mjs WIT_DIR OUT_DIR
// The bindgen is not among the package's exports: import it by its file.
import { $init, generateTypes } from "./node_modules/@bytecodealliance/jco-transpile/vendor/js-component-bindgen-component.js";
import { mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const [witDir, outDir] = process.argv.slice(2);
let pkg;
const bodies = [];
for (const file of readdirSync(witDir).filter((f) => f.endsWith(".wit")).sort()) {
  const text = readFileSync(join(witDir, file), "utf8");
  pkg = text.match(/^package [^;]+;/m)[0];
  bodies.push(text.replace(pkg, ""));
}
await $init;
const files = generateTypes("plugin", {
  wit: { tag: "source", val: `${pkg}\n${bodies.join("\n")}` },
  world: "stateful-plugin",
  guest: true,
  tlaCompat: false,
  features: { tag: "list", val: [] },
});
for (const [name, text] of files) {
  const path = join(outDir, name);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, text);
  console.log(path);
}
