/// <reference path="./wasmformer-plugin-types.d.ts" />
declare module 'wasmformer:plugin/lister@0.3.3' {
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
   * What `list` answers, a page at a time (since 0.3.3), so a plugin can go through any number
   * of objects in bounded memory: at most `limit` objects (0: all the rest) whose key comes
   * after `after` (`none`: from the first). A key is `namespace/name`, or `name` for a
   * cluster-scoped object, as `page.next` gives it.
   * 
   * Each page reads the cache as it is when asked, as client-go's lister does on every call:
   * across pages every object comes once at most, in key order, in the state it had when its
   * page was read; an object added or deleted between two pages shows if its key comes after
   * the page it would have been in.
   */
  export function listPage(kind: Gvk, namespace: string | undefined, labelSelector: string, after: string | undefined, limit: number): Page;
  /**
   * All objects of `kind` whose index `index` (named in the host configuration, plus the
   * built-in `namespace` index) holds `value`.
   */
  export function byIndex(kind: Gvk, index: string, value: string): Array<Object>;
  export type Gvk = import('wasmformer:plugin/types@0.3.3').Gvk;
  export type Object = import('wasmformer:plugin/types@0.3.3').Object;
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
  /**
   * One page of a `list-page` answer (since 0.3.3).
   */
  export interface Page {
    /**
     * At most `limit` objects, in key order: by namespace, then name.
     */
    objects: Array<Object>,
    /**
     * Where the next page starts (pass it as `after`): the key of the last object, when the
     * page is full. `none` when the page holds fewer than `limit` objects: the list is done.
     */
    next?: string,
  }
}
