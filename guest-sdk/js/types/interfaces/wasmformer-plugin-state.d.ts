declare module 'wasmformer:plugin/state@0.3.3' {
  /**
   * The state to keep: at most the plugin's `limits.stateBytes` bytes (a larger state is
   * refused and reported, and the plugin stays loaded); empty: nothing to keep. Called between
   * two events, under the plugin's deadline.
   */
  export function saveState(): Uint8Array;
  /**
   * Receives what `save-state` returned in the instance before this one, and that instance's
   * version (the BLAKE3 hash of its wasm, as `wasmformer status` shows it: this instance's own
   * version after an unload, the predecessor's after a hot swap). Called before `init`. An `err`
   * or a trap discards the state: the host reports it and starts a fresh instance with `init`
   * alone.
   */
  export function restoreState(state: Uint8Array, fromVersion: string): void;
}
