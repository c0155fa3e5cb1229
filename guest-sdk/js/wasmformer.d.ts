// TypeScript declarations of the JavaScript SDK (`wasmformer.js`). The contract's own types,
// generated from the WIT by `gentypes.mjs`, are in types/.
/// <reference path="./types/plugin.d.ts" />

import type { Gvk } from "wasmformer:plugin/types@0.3.3";

export type { Gvk };
export type Level = import("wasmformer:plugin/log@0.3.3").Level;

/** The contract version this SDK builds plugins for (the WIT package version). */
export const CONTRACT_VERSION: string;

/** The kind of a manifest's `apiVersion` and `kind`: `gvk("apps/v1", "ReplicaSet")`. */
export function gvk(apiVersion: string, kind: string): Gvk;

/** One Kubernetes object from the host's cache. */
export class KubeObject {
  /** The object's group, version and kind. */
  readonly kind: Gvk;
  /** `metadata.namespace`; empty for cluster-scoped objects. */
  readonly namespace: string;
  /** `metadata.name`. */
  readonly name: string;
  /** `metadata.uid`. */
  readonly uid: string;
  /** `metadata.resourceVersion`. */
  readonly resourceVersion: string;
  /** `metadata.labels`, in key order. */
  readonly labels: Record<string, string>;
  /** The whole object as compact JSON text. */
  readonly body: string;
  /** The value of label `key`, or `undefined`. */
  label(key: string): string | undefined;
  /** The whole object, parsed once. */
  json(): any;
}

/** A plugin's event handlers. Every method defaults to doing nothing; throw to fail a call. */
export class Plugin {
  /**
   * With `exportPlugin(MyPlugin, { state: true })`: the properties *not* kept across unloading
   * and hot swap (e.g. what `init` derives from the config, or values that are not JSON).
   */
  static transient: readonly string[];
  init(config: Record<string, unknown>): void;
  onAdd(obj: KubeObject, initial: boolean): void;
  onUpdate(oldObj: KubeObject, newObj: KubeObject): void;
  onDelete(obj: KubeObject, finalStateUnknown: boolean): void;
}

/**
 * Makes `pluginClass` the component's handler (one per plugin). With `{ state: true }` its own
 * enumerable properties (less `static transient`) are kept, as JSON, across unloading and hot
 * swap: a fresh `new pluginClass()` gets them before `init` runs on it.
 */
export function exportPlugin<T extends new () => Plugin>(pluginClass: T, options?: { state?: boolean }): T;

/**
 * The version (BLAKE3 hash of its wasm) of the instance whose state this one restored, while and
 * after `init` runs; `undefined` when it started without one.
 */
export function restoredFrom(): string | undefined;

export function log(level: Level, message: unknown): void;
export function trace(message: unknown): void;
export function debug(message: unknown): void;
export function info(message: unknown): void;
export function warn(message: unknown): void;
export function error(message: unknown): void;

/** Why a lister call returned nothing. */
export class ListerError extends Error {
  readonly code: "not-found" | "forbidden" | "invalid-selector" | "unknown-index";
}

/** Reads of the host's informer cache (never a call to the API server). */
export const lister: {
  get(kind: Gvk, namespace: string, name: string): KubeObject;
  list(kind: Gvk, namespace?: string, labelSelector?: string): KubeObject[];
  /** `list`'s objects read a page at a time as the loop goes (contract 0.3.3); `pageSize` 64. */
  iter(kind: Gvk, namespace?: string, labelSelector?: string, pageSize?: number): Generator<KubeObject, void, undefined>;
  byIndex(kind: Gvk, index: string, value: string): KubeObject[];
};

/** The `handler` export componentize-js calls (generated entry modules re-export it). */
export const handler: typeof import("wasmformer:plugin/handler@0.3.3");

/** The `state` export componentize-js calls (generated entry modules re-export it). */
export const state: typeof import("wasmformer:plugin/state@0.3.3");

/** What `writer.delete` checks before deleting. */
export interface Preconditions {
  uid?: string;
  resourceVersion?: string;
}

/** One reason the API server gave for refusing a write. */
export type Cause = import("wasmformer:plugin/writer@0.3.3").Cause;

/** Why a write failed; `refusedBy` is set for `forbidden`, `causes` for invalid and conflict. */
export class WriteError extends Error {
  readonly kind: "forbidden" | "invalid" | "conflict" | "not-found" | "throttled" | "unavailable" | "encode";
  readonly refusedBy: import("wasmformer:plugin/writer@0.3.3").RefusedBy | undefined;
  readonly causes: Cause[];
  /** The host's or the server's text, without the kind. */
  readonly detail: string;
  /** For a conflict: the other field managers named in its causes, sorted. */
  conflictingManagers(): string[];
}

/** Changes to the cluster, within the plugin's grants; each returns the stored object. */
export const writer: {
  apply(manifest: object | string, options?: { force?: boolean; status?: boolean }): any;
  patch(
    kind: Gvk,
    namespace: string,
    name: string,
    body: unknown,
    options?: { patchType?: import("wasmformer:plugin/writer@0.3.3").PatchType; status?: boolean },
  ): any;
  create(manifest: object | string): any;
  delete(
    kind: Gvk,
    namespace: string,
    name: string,
    options?: { propagation?: import("wasmformer:plugin/writer@0.3.3").Propagation; preconditions?: Preconditions },
  ): void;
  event(
    regarding: KubeObject,
    type: import("wasmformer:plugin/writer@0.3.3").EventType,
    reason: string,
    action: string,
    note: string,
  ): void;
};
