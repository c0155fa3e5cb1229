/// <reference path="./wasmformer-plugin-types.d.ts" />
declare module 'wasmformer:plugin/writer@0.3.3' {
  /**
   * Server-side apply of `manifest` (a whole object as JSON, with apiVersion, kind and
   * metadata.name). Returns the object as the server stored it, as JSON.
   */
  export function apply(manifest: string, options: ApplyOptions): string;
  /**
   * Patches `target` (its `status` subresource if `status`) with `body`. Returns the object
   * as the server stored it, as JSON.
   */
  export function patch(target: Target, patchType: PatchType, body: string, status: boolean): string;
  /**
   * Creates `manifest`. Returns the object as the server stored it, as JSON.
   */
  export function create(manifest: string): string;
  /**
   * Deletes `target`.
   */
  export { _delete as delete };
  function _delete(target: Target, propagation: Propagation, preconditions: Preconditions): void;
  /**
   * Records an `events.k8s.io/v1` Event about `regarding`, reported by controller
   * `wasmformer/<plugin-name>`. Repeats of the same event (same object, type, reason, action
   * and note) within 6 minutes become one Event whose `series.count` grows, as client-go's
   * recorder does.
   */
  export function event(regarding: ObjectReference, type: EventType, reason: string, action: string, note: string): void;
  export type Gvk = import('wasmformer:plugin/types@0.3.3').Gvk;
  /**
   * The object a patch or delete is about.
   */
  export interface Target {
    /**
     * Its kind.
     */
    kind: Gvk,
    /**
     * `metadata.namespace`; empty for cluster-scoped kinds.
     */
    namespace: string,
    /**
     * `metadata.name`.
     */
    name: string,
  }
  /**
   * The object an Event is about (its `regarding`).
   */
  export interface ObjectReference {
    /**
     * Its kind.
     */
    kind: Gvk,
    /**
     * `metadata.namespace`; empty for cluster-scoped kinds.
     */
    namespace: string,
    /**
     * `metadata.name`.
     */
    name: string,
    /**
     * `metadata.uid`; empty if unknown.
     */
    uid: string,
  }
  /**
   * How `apply` is sent.
   */
  export interface ApplyOptions {
    /**
     * Take ownership of fields another field manager owns instead of answering `conflict`.
     */
    force: boolean,
    /**
     * Apply to the `status` subresource instead of the object.
     */
    status: boolean,
  }
  /**
   * The format of a patch body.
   * # Variants
   * 
   * ## `"merge"`
   * 
   * JSON merge patch (RFC 7386), `application/merge-patch+json`.
   * ## `"json"`
   * 
   * JSON patch (RFC 6902), a list of operations, `application/json-patch+json`.
   */
  export type PatchType = 'merge' | 'json';
  /**
   * What happens to a deleted object's dependents.
   * # Variants
   * 
   * ## `"default"`
   * 
   * The server's default for the kind.
   * ## `"background"`
   * 
   * Dependents are deleted in the background.
   * ## `"foreground"`
   * 
   * The object stays until its dependents are deleted.
   * ## `"orphan"`
   * 
   * Dependents are kept (their owner reference removed).
   */
  export type Propagation = 'default' | 'background' | 'foreground' | 'orphan';
  /**
   * Conditions a delete must meet; the server answers `conflict` if one fails.
   */
  export interface Preconditions {
    /**
     * The object's `metadata.uid` must be this.
     */
    uid?: string,
    /**
     * The object's `metadata.resourceVersion` must be this.
     */
    resourceVersion?: string,
  }
  /**
   * The type of an Event.
   * # Variants
   * 
   * ## `"normal"`
   * 
   * ## `"warning"`
   */
  export type EventType = 'normal' | 'warning';
  /**
   * Who refused a write.
   * # Variants
   * 
   * ## `"grant"`
   * 
   * The host: the plugin's `write:` / `events:` grant does not cover it. Never sent.
   * ## `"server"`
   * 
   * The API server's authorization (RBAC): the host's own credentials lack the permission.
   */
  export type RefusedBy = 'grant' | 'server';
  /**
   * Why a write was forbidden.
   */
  export interface Forbidden {
    /**
     * The host's grant or the server's RBAC.
     */
    refusedBy: RefusedBy,
    /**
     * What was refused: the plugin, verb, kind and namespace, and what to change.
     */
    message: string,
  }
  /**
   * One reason the API server gave for refusing a write.
   */
  export interface Cause {
    /**
     * The field, e.g. `metadata.name` or `.metadata.labels.team`; empty if none.
     */
    field: string,
    /**
     * A machine-readable reason, e.g. `FieldValueRequired` or `FieldManagerConflict`.
     */
    reason: string,
    /**
     * What is wrong.
     */
    message: string,
  }
  /**
   * The API server's account of a refused write.
   */
  export interface Details {
    /**
     * Its message.
     */
    message: string,
    /**
     * Its causes, if any.
     */
    causes: Array<Cause>,
  }
  /**
   * Why a write failed.
   */
  export type Error = ErrorForbidden | ErrorInvalid | ErrorConflict | ErrorNotFound | ErrorThrottled | ErrorUnavailable;
  /**
   * Not granted to this plugin (`refused-by: grant`, checked by the host before sending),
   * or refused by the API server's RBAC (`refused-by: server`).
   */
  export interface ErrorForbidden {
    tag: 'forbidden',
    val: Forbidden,
  }
  /**
   * The manifest or patch is malformed (not JSON; no apiVersion, kind or name), over the
   * plugin's limits (manifest size, writes per call), made during `init`, or refused by the
   * server's validation (422/400, with its causes).
   */
  export interface ErrorInvalid {
    tag: 'invalid',
    val: Details,
  }
  /**
   * An apply conflict (a cause per field, naming the other field manager), a failed delete
   * precondition, or an object that already exists on create.
   */
  export interface ErrorConflict {
    tag: 'conflict',
    val: Details,
  }
  /**
   * The object (or its namespace) does not exist.
   */
  export interface ErrorNotFound {
    tag: 'not-found',
    val: string,
  }
  /**
   * The plugin's write rate limit (`limits.writeQps`/`writeBurst`) could not give a token
   * within the write timeout, or the server answered 429.
   */
  export interface ErrorThrottled {
    tag: 'throttled',
    val: string,
  }
  /**
   * The server could not be reached, answered 5xx, or did not answer within
   * `limits.writeTimeout`. The write may or may not have happened.
   */
  export interface ErrorUnavailable {
    tag: 'unavailable',
    val: string,
  }
}
