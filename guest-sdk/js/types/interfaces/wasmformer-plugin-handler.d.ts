/// <reference path="./wasmformer-plugin-types.d.ts" />
declare module 'wasmformer:plugin/handler@0.3.3' {
  /**
   * Called once per instance, before any event, with the plugin's `config` block from the host
   * configuration as JSON (`{}` when there is none). An `err` stops the plugin from loading.
   */
  export function init(config: string): void;
  /**
   * An object was added. `is-in-initial-list` is true for objects delivered from the initial
   * list (at start, after a plugin is added, or when a new version replays the cache).
   */
  export function onAdd(obj: Object, isInInitialList: boolean): void;
  /**
   * An object changed. On a resync, `old` and `new` are the same object.
   */
  export function onUpdate(old: Object, new_: Object): void;
  /**
   * An object was deleted. `final-state-unknown` is true when the delete was inferred after a
   * relist (the watch missed it); `obj` is then the last state the cache knew.
   */
  export function onDelete(obj: Object, finalStateUnknown: boolean): void;
  export type Object = import('wasmformer:plugin/types@0.3.3').Object;
}
