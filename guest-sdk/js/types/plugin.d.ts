/// <reference path="./interfaces/wasmformer-plugin-handler.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-lister.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-log.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-types.d.ts" />
declare module 'wasmformer:plugin/plugin@0.2.0' {
  export type * as WasmformerPluginLister020 from 'wasmformer:plugin/lister@0.2.0'; // import wasmformer:plugin/lister@0.2.0
  export type * as WasmformerPluginLog020 from 'wasmformer:plugin/log@0.2.0'; // import wasmformer:plugin/log@0.2.0
  export type * as WasmformerPluginTypes020 from 'wasmformer:plugin/types@0.2.0'; // import wasmformer:plugin/types@0.2.0
  export * as handler from 'wasmformer:plugin/handler@0.2.0'; // export wasmformer:plugin/handler@0.2.0
}
