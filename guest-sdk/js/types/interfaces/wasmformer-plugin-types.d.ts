declare module 'wasmformer:plugin/types@0.3.3' {
  /**
   * A kind of Kubernetes object, as in a manifest's `apiVersion` and `kind`.
   * `group` is empty for the core group (`v1` Pods, ConfigMaps, …).
   */
  export interface Gvk {
    /**
     * API group, e.g. `apps`; empty for the core group.
     */
    group: string,
    /**
     * API version within the group, e.g. `v1`.
     */
    version: string,
    /**
     * Kind, e.g. `Pod`.
     */
    kind: string,
  }
  /**
   * One Kubernetes object from the host's cache.
   * 
   * Kind, identity and labels cross packed in one string, so a call copies two strings whatever
   * the object's number of labels (each string costs the guest an allocation, and that, not the
   * bytes, is what a call costs; see docs/object-crossing.md). A handler that reads only those
   * never parses the body.
   */
  export interface Object {
    /**
     * Fields separated by NUL (`\0`), in this order: group (empty for the core group),
     * version, kind, `metadata.namespace` (empty for cluster-scoped objects),
     * `metadata.name`, `metadata.uid`, `metadata.resourceVersion`, then each label's key and
     * value, in key order. None of these can hold a NUL: the host refuses such objects.
     */
    meta: string,
    /**
     * The whole object as compact JSON, exactly as the API server sent it, except that
     * `metadata.managedFields` is removed unless the host is configured to keep it.
     */
    body: string,
  }
}
