// The JavaScript SDK for wasmformer plugins (an ES module).
//
// A plugin is a subclass of `Plugin` (every method defaults to doing nothing) and one
// `exportPlugin(MyPlugin)` line:
//
//     import { Plugin, exportPlugin, info } from "wasmformer";
//
//     class PodLogger extends Plugin {
//       onAdd(pod, initial) { info(`New Pod Added to Store: ${pod.name}`); }
//     }
//
//     exportPlugin(PodLogger);
//
// `wasmformer build` makes it a component with componentize-js (its WASI `http` and
// `fetch-event` features disabled: the host gives plugins no network). The host creates the
// plugin once per instance, calls `init` with its config, then one handler at a time; state on
// `this` lasts between calls (until a trap recreates the instance). A handler that throws fails
// its call with `"<ErrorType>: <message>"`. Writes to the cluster go through `writer` (apply,
// patch, create, delete, event); a failed write throws a `WriteError` whose `kind` names why.
//
// With `exportPlugin(MyPlugin, { state: true })` the plugin's own enumerable properties (less the
// names in its `static transient`) are its state: saved as JSON when the host unloads the idle
// instance or swaps in a new version, and assigned to a fresh `new MyPlugin()` in the next
// instance before `init` runs on it (see `restoredFrom`).

import { log as hostLog } from "wasmformer:plugin/log@0.3.3";
import * as witLister from "wasmformer:plugin/lister@0.3.3";
import * as witWriter from "wasmformer:plugin/writer@0.3.3";

/** The contract version this SDK builds plugins for (the WIT package version). */
export const CONTRACT_VERSION = "0.3.3";

/** The kind of a manifest's `apiVersion` and `kind`: `gvk("apps/v1", "ReplicaSet")`. */
export function gvk(apiVersion, kind) {
  const slash = apiVersion.lastIndexOf("/");
  return slash < 0
    ? { group: "", version: apiVersion, kind }
    : { group: apiVersion.slice(0, slash), version: apiVersion.slice(slash + 1), kind };
}

// The fixed fields at the start of an object's packed `meta`, in order (see wit/types.wit).
const FIXED = 7;

/**
 * One Kubernetes object from the host's cache. Kind, identity and labels come from one short
 * NUL-separated string; `json()` parses the body on first use.
 */
export class KubeObject {
  constructor(meta, body) {
    const fields = meta.split("\0");
    while (fields.length < FIXED) fields.push("");
    this._fields = fields;
    /** The whole object as compact JSON text. */
    this.body = body;
    this._parsed = undefined;
  }

  /** The object's `{group, version, kind}`. */
  get kind() {
    return { group: this._fields[0], version: this._fields[1], kind: this._fields[2] };
  }
  /** `metadata.namespace`; empty for cluster-scoped objects. */
  get namespace() {
    return this._fields[3];
  }
  /** `metadata.name`. */
  get name() {
    return this._fields[4];
  }
  /** `metadata.uid`. */
  get uid() {
    return this._fields[5];
  }
  /** `metadata.resourceVersion`. */
  get resourceVersion() {
    return this._fields[6];
  }
  /** `metadata.labels` as an object, in key order. */
  get labels() {
    const labels = {};
    for (let i = FIXED; i + 1 < this._fields.length; i += 2) labels[this._fields[i]] = this._fields[i + 1];
    return labels;
  }
  /** The value of label `key`, or `undefined`. */
  label(key) {
    for (let i = FIXED; i + 1 < this._fields.length; i += 2) {
      if (this._fields[i] === key) return this._fields[i + 1];
    }
    return undefined;
  }
  /** The whole object, parsed once. */
  json() {
    if (this._parsed === undefined) this._parsed = JSON.parse(this.body);
    return this._parsed;
  }
}

function fromWit(obj) {
  return new KubeObject(obj.meta, obj.body);
}

/** A plugin's event handlers, in client-go's terms. Every method defaults to doing nothing. */
export class Plugin {
  /**
   * With `exportPlugin(MyPlugin, { state: true })`: the properties *not* kept across unloading
   * and hot swap (e.g. what `init` derives from the config, or values that are not JSON).
   */
  static transient = [];
  /** Receives the plugin's `config` block from the host configuration (`{}` when absent). */
  init(config) {}
  /** An object was added; `initial` is true for objects from the initial list. */
  onAdd(obj, initial) {}
  /** An object changed; on a resync `oldObj` and `newObj` are the same object. */
  onUpdate(oldObj, newObj) {}
  /** An object was deleted; `finalStateUnknown` is true when the delete was inferred after a relist. */
  onDelete(obj, finalStateUnknown) {}
}

// --- logging -------------------------------------------------------------------------------

/** Writes one message into the host's log; `level` is trace, debug, info, warn or error. */
export function log(level, message) {
  hostLog(level, String(message));
}
export const trace = (message) => log("trace", message);
export const debug = (message) => log("debug", message);
export const info = (message) => log("info", message);
export const warn = (message) => log("warn", message);
export const error = (message) => log("error", message);

// --- the lister ----------------------------------------------------------------------------

/** Why a lister call returned nothing; `code` is not-found, forbidden, invalid-selector or unknown-index. */
export class ListerError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "ListerError";
    this.code = code;
  }
}

function listerError(e) {
  const payload = e && e.payload;
  if (!payload || typeof payload.tag !== "string") return e;
  switch (payload.tag) {
    case "not-found":
      return new ListerError("not-found", "not found");
    case "forbidden":
      return new ListerError("forbidden", `forbidden: ${payload.val}`);
    case "invalid-selector":
      return new ListerError("invalid-selector", `invalid label selector: ${payload.val}`);
    default:
      return new ListerError(payload.tag, `unknown index: ${payload.val}`);
  }
}

function reading(call) {
  try {
    return call();
  } catch (e) {
    throw listerError(e);
  }
}

/** Reads of the host's informer cache (never a call to the API server). */
export const lister = {
  /** The object `namespace`/`name` (namespace "" for cluster-scoped kinds); throws `ListerError`. */
  get(kind, namespace, name) {
    return fromWit(reading(() => witLister.get(kind, namespace, name)));
  },
  /** Objects of `kind` in `namespace` (undefined: all) matching `labelSelector` ("": all). */
  list(kind, namespace = undefined, labelSelector = "") {
    return reading(() => witLister.list(kind, namespace, labelSelector)).map(fromWit);
  },
  /**
   * The objects `list` answers, read from the cache a page of `pageSize` at a time as the loop
   * goes (contract 0.3.3), so going through any number of them takes the memory of one page. Each
   * page reads the cache as it is then: every object comes once at most, in key order.
   */
  *iter(kind, namespace = undefined, labelSelector = "", pageSize = 64) {
    let after = undefined;
    for (;;) {
      const page = reading(() =>
        witLister.listPage(kind, namespace, labelSelector, after, Math.max(1, pageSize)),
      );
      for (const obj of page.objects) yield fromWit(obj);
      if (page.next === undefined) return;
      after = page.next;
    }
  },
  /** Objects of `kind` whose index `index` holds `value`. */
  byIndex(kind, index, value) {
    return reading(() => witLister.byIndex(kind, index, value)).map(fromWit);
  },
};

// --- the writer ----------------------------------------------------------------------------

// What a `WriteError`'s message starts with, by kind (as the Rust SDK's `WriteError` prints).
const WRITE_PREFIX = {
  invalid: "invalid",
  conflict: "conflict",
  "not-found": "not found",
  throttled: "throttled",
  unavailable: "unavailable",
  encode: "cannot encode the object",
};

/**
 * Why a write failed. `kind` is forbidden, invalid, conflict, not-found, throttled, unavailable
 * or encode; `refusedBy` ("grant" or "server") says who refused a forbidden write (a "grant"
 * refusal never reached the server); `causes` are the server's `{field, reason, message}`.
 */
export class WriteError extends Error {
  constructor(kind, message, { refusedBy = undefined, causes = [] } = {}) {
    const prefix =
      kind === "forbidden"
        ? refusedBy === "grant"
          ? "forbidden (not granted)"
          : "forbidden (by the API server)"
        : WRITE_PREFIX[kind] ?? kind;
    super(`${prefix}: ${message}`);
    this.name = "WriteError";
    this.kind = kind;
    this.refusedBy = refusedBy;
    this.causes = causes;
    /** The host's or the server's text, without the kind. */
    this.detail = message;
  }

  /** For a conflict: the other field managers named in its causes (e.g. `kubectl`), sorted. */
  conflictingManagers() {
    if (this.kind !== "conflict") return [];
    const managers = new Set();
    for (const text of [...this.causes.map((c) => c.message), this.detail]) {
      for (const rest of text.split('conflict with "').slice(1)) managers.add(rest.split('"')[0]);
    }
    return [...managers].sort();
  }
}

function writeError(e) {
  const payload = e && e.payload;
  if (!payload || typeof payload.tag !== "string") return e;
  const v = payload.val;
  switch (payload.tag) {
    case "forbidden":
      return new WriteError("forbidden", v.message, { refusedBy: v.refusedBy });
    case "invalid":
    case "conflict":
      return new WriteError(payload.tag, v.message, { causes: v.causes });
    default:
      return new WriteError(payload.tag, v);
  }
}

function writing(call) {
  try {
    return call();
  } catch (e) {
    throw writeError(e);
  }
}

// An object as compact JSON; a string is sent as it is (already JSON).
function encode(obj) {
  if (typeof obj === "string") return obj;
  let text;
  try {
    text = JSON.stringify(obj);
  } catch (e) {
    throw new WriteError("encode", e.message);
  }
  if (text === undefined) throw new WriteError("encode", `${typeof obj} is not JSON`);
  return text;
}

const answer = (text) => (text ? JSON.parse(text) : {});

/**
 * Changes to the cluster, within the plugin's grants. Each write is synchronous and returns the
 * API server's answer (the stored object, parsed); the host sets the field manager
 * (`wasmformer/<plugin-name>`). Writes from `init` are refused.
 */
export const writer = {
  /**
   * Server-side apply of `manifest` (an object, or JSON text sent as it is, with apiVersion,
   * kind and metadata.name). `force` takes over fields another manager owns; `status` applies
   * to the status subresource.
   */
  apply(manifest, { force = false, status = false } = {}) {
    return answer(writing(() => witWriter.apply(encode(manifest), { force, status })));
  },
  /**
   * Patches the `kind` `namespace`/`name` (namespace "" for cluster-scoped kinds) with `body`:
   * a JSON merge patch by default, a JSON patch (a list of operations) with
   * `patchType: "json"`; `status` patches the status subresource.
   */
  patch(kind, namespace, name, body, { patchType = "merge", status = false } = {}) {
    const target = { kind, namespace, name };
    return answer(writing(() => witWriter.patch(target, patchType, encode(body), status)));
  },
  /** Creates `manifest`; returns the object as the server stored it. */
  create(manifest) {
    return answer(writing(() => witWriter.create(encode(manifest))));
  },
  /**
   * Deletes the `kind` `namespace`/`name`. `propagation` is default, background, foreground or
   * orphan; `preconditions` `{uid, resourceVersion}` must hold or the server answers conflict.
   */
  delete(kind, namespace, name, { propagation = "default", preconditions = {} } = {}) {
    const target = { kind, namespace, name };
    const { uid, resourceVersion } = preconditions;
    writing(() => witWriter.delete(target, propagation, { uid, resourceVersion }));
  },
  /**
   * Records an Event about `regarding` (an object a handler received), reported by
   * `wasmformer/<plugin-name>`; `type` is "normal" or "warning". Repeats aggregate into one
   * Event with a growing count.
   */
  event(regarding, type, reason, action, note) {
    const reference = {
      kind: regarding.kind,
      namespace: regarding.namespace,
      name: regarding.name,
      uid: regarding.uid,
    };
    writing(() => witWriter.event(reference, type, reason, action, note));
  },
};

// --- the export ----------------------------------------------------------------------------

let PluginClass = undefined;
// Whether the plugin's properties are its state (`exportPlugin(..., { state: true })`).
let keepsState = false;
let instance = undefined;
// The plugin made from a restored state, waiting for `init`.
let restored = undefined;
// The version whose state this instance restored.
let restoredVersion = undefined;

/**
 * Makes `pluginClass` the component's handler (one per plugin).
 *
 * With `{ state: true }` the plugin's own enumerable properties (less the names in its
 * `static transient`) are its state. When the host unloads the idle plugin or swaps in a new
 * version, they are saved as JSON: plain objects, arrays, strings, finite numbers, booleans and
 * null (a Map, a Set, a class instance or a Date fails the save, naming the property);
 * the next instance makes a fresh `new pluginClass()`, assigns them to it, then calls `init` with
 * the current config. So give kept properties their first value in class fields or the
 * constructor, not in `init`, which runs again after every restore; `restoredFrom()` says which
 * version saved them. A state that cannot be restored (not a JSON object, or the constructor
 * throws) is reported by the host, which starts the plugin over with `init`.
 */
export function exportPlugin(pluginClass, { state = false } = {}) {
  PluginClass = pluginClass;
  keepsState = Boolean(state);
  return pluginClass;
}

/**
 * The version (the BLAKE3 hash of its wasm) of the instance whose state this one restored, while
 * and after `init` runs; `undefined` when it started without one. Equal to this instance's own
 * version after an idle unload, the predecessor's after a hot swap: compare it to migrate the
 * properties of an older version.
 */
export function restoredFrom() {
  return restoredVersion;
}

function transientNames(pluginClass) {
  const names = pluginClass.transient ?? [];
  return new Set(typeof names === "string" ? [names] : names);
}

// Why JSON would not give `value` back as it is (a Map, a Set, a Date or a class instance, a
// number that is not finite), or undefined.
function notJson(value) {
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const proto = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null) return undefined;
  return `a ${value.constructor?.name || "object with a prototype"}`;
}

function failure(e) {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return `${typeof e === "string" ? "Error" : typeof e}: ${String(e)}`;
}

// componentize-js turns a thrown value into the `err` of a `result` export.
function calling(f) {
  if (instance === undefined) throw "plugin called before init";
  try {
    f(instance);
  } catch (e) {
    throw failure(e);
  }
}

/** The `handler` export componentize-js calls; forwards to the exported `Plugin`. */
export const handler = {
  init(config) {
    if (PluginClass === undefined) throw "no plugin exported: call exportPlugin(MyPlugin) in the plugin module";
    let parsed;
    try {
      parsed = config.trim() === "" ? {} : JSON.parse(config);
    } catch (e) {
      throw `plugin config is not JSON: ${e.message}`;
    }
    const fromState = restored;
    restored = undefined;
    try {
      const plugin = fromState ?? new PluginClass();
      plugin.init(parsed);
      instance = plugin;
    } catch (e) {
      throw failure(e);
    }
  },
  onAdd(obj, initial) {
    calling((p) => p.onAdd(fromWit(obj), initial));
  },
  onUpdate(oldObj, newObj) {
    calling((p) => p.onUpdate(fromWit(oldObj), fromWit(newObj)));
  },
  onDelete(obj, finalStateUnknown) {
    calling((p) => p.onDelete(fromWit(obj), finalStateUnknown));
  },
};

/**
 * The `state` export componentize-js calls: the plugin's properties as JSON, if it opted in with
 * `exportPlugin(..., { state: true })`; otherwise no state (empty), and a state handed over by a
 * previous version is ignored.
 */
export const state = {
  saveState() {
    if (!keepsState || instance === undefined) return new Uint8Array(0);
    const skip = transientNames(instance.constructor);
    const kept = {};
    for (const [name, value] of Object.entries(instance)) {
      // Functions (e.g. arrow-function fields) are code: the constructor makes them again.
      if (!skip.has(name) && typeof value !== "function") kept[name] = value;
    }
    let property;
    const text = JSON.stringify(kept, function (key, value) {
      if (this === kept) property = key;
      // `this[key]` is the value before its `toJSON` (a Date's would pass as a string).
      const wrong = notJson(this[key]);
      if (wrong !== undefined) {
        throw new TypeError(
          `${instance.constructor.name}.${property} cannot be saved as JSON (it holds ${wrong}): ` +
            "list it in the plugin's `static transient` to leave it out of the state",
        );
      }
      return value;
    });
    return new TextEncoder().encode(text);
  },
  restoreState(bytes, fromVersion) {
    if (!keepsState || PluginClass === undefined) return;
    let properties;
    try {
      properties = JSON.parse(new TextDecoder().decode(bytes));
    } catch (e) {
      throw `the saved state is not JSON: ${e.message}`;
    }
    if (properties === null || typeof properties !== "object" || Array.isArray(properties)) {
      throw "the saved state is not a JSON object of properties";
    }
    let plugin;
    try {
      plugin = new PluginClass();
    } catch (e) {
      throw failure(e);
    }
    const skip = transientNames(PluginClass);
    for (const [name, value] of Object.entries(properties)) {
      if (!skip.has(name)) plugin[name] = value;
    }
    restored = plugin;
    restoredVersion = fromVersion;
  },
};
