/// <reference path="./interfaces/wasmformer-plugin-handler.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-lister.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-log.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-retry.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-state.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-types.d.ts" />
/// <reference path="./interfaces/wasmformer-plugin-writer.d.ts" />
declare module 'wasmformer:plugin/stateful-plugin@0.3.3' {
  export type * as WasmformerPluginLister033 from 'wasmformer:plugin/lister@0.3.3'; // import wasmformer:plugin/lister@0.3.3
  export type * as WasmformerPluginLog033 from 'wasmformer:plugin/log@0.3.3'; // import wasmformer:plugin/log@0.3.3
  export type * as WasmformerPluginRetry033 from 'wasmformer:plugin/retry@0.3.3'; // import wasmformer:plugin/retry@0.3.3
  export type * as WasmformerPluginTypes033 from 'wasmformer:plugin/types@0.3.3'; // import wasmformer:plugin/types@0.3.3
  export type * as WasmformerPluginWriter033 from 'wasmformer:plugin/writer@0.3.3'; // import wasmformer:plugin/writer@0.3.3
  export * as state from 'wasmformer:plugin/state@0.3.3'; // export wasmformer:plugin/state@0.3.3
  export * as handler from 'wasmformer:plugin/handler@0.3.3'; // export wasmformer:plugin/handler@0.3.3
}
