declare module 'wasmformer:plugin/retry@0.3.3' {
  /**
   * Marks the current handler call: if it returns `err`, the host delivers the object again
   * later, with its newest cached state (an `on-update` with the same object as old and new,
   * or nothing if it was deleted meanwhile), after the plugin's per-key backoff
   * (`reconcile.backoff`, exponential, within its `qps`/`burst`). A later success of that
   * object forgets its failures. Ignored if the call returns `ok`, and during `init`.
   */
  export function request(): void;
}
