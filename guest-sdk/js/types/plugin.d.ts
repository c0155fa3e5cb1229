/// <reference path="./interfaces/wasmformer-plugin-handler.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-lister.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-log.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-retry.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-types.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-writer.d.ts" />
declare module 'wasmformer:plugin/plugin@0.3.1' {
  export type * as WasmformerPluginLister031 from 'wasmformer:plugin/lister@0.3.1'; // import wasmformer:plugin/lister@0.3.1
  export type * as WasmformerPluginLog031 from 'wasmformer:plugin/log@0.3.1'; // import wasmformer:plugin/log@0.3.1
  export type * as WasmformerPluginRetry031 from 'wasmformer:plugin/retry@0.3.1'; // import wasmformer:plugin/retry@0.3.1
  export type * as WasmformerPluginTypes031 from 'wasmformer:plugin/types@0.3.1'; // import wasmformer:plugin/types@0.3.1
  export type * as WasmformerPluginWriter031 from 'wasmformer:plugin/writer@0.3.1'; // import wasmformer:plugin/writer@0.3.1
  export * as handler from 'wasmformer:plugin/handler@0.3.1'; // export wasmformer:plugin/handler@0.3.1
}
