/// <reference path="./wasmformer-plugin-types.d.ts" />
declare module 'wasmformer:plugin/lister@0.3.2' {
  /**
   * The object `namespace`/`name` (namespace empty for cluster-scoped kinds).
   */
  export function get(kind: Gvk, namespace: string, name: string): Object;
  /**
   * All objects of `kind` in `namespace` (`none`: all namespaces) that match `label-selector`
   * (Kubernetes syntax, e.g. `app=web,tier in (a,b),!canary`; empty matches everything).
   */
  export function list(kind: Gvk, namespace: string | undefined, labelSelector: string): Array<Object>;
  /**
   * All objects of `kind` whose index `index` (named in the host configuration, plus the
   * built-in `namespace` index) holds `value`.
   */
  export function byIndex(kind: Gvk, index: string, value: string): Array<Object>;
  export type Gvk = import('wasmformer:plugin/types@0.3.2').Gvk;
  export type Object = import('wasmformer:plugin/types@0.3.2').Object;
  /**
   * Why a lister call returned no objects.
   */
  export type Error = ErrorNotFound | ErrorForbidden | ErrorInvalidSelector | ErrorUnknownIndex;
  /**
   * No object with that namespace and name is in the cache.
   */
  export interface ErrorNotFound {
    tag: 'not-found',
  }
  /**
   * The plugin is not granted this kind; the text names the kind.
   */
  export interface ErrorForbidden {
    tag: 'forbidden',
    val: string,
  }
  /**
   * The label selector does not parse; the text says why.
   */
  export interface ErrorInvalidSelector {
    tag: 'invalid-selector',
    val: string,
  }
  /**
   * No index of that name is configured for the kind; the text names the index.
   */
  export interface ErrorUnknownIndex {
    tag: 'unknown-index',
    val: string,
  }
}
