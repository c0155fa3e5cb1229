"""The Python SDK for wasmformer plugins.

A plugin is a subclass of `Plugin` (every method defaults to doing nothing) and one
`export(MyPlugin)` line::

    from wasmformer import Object, Plugin, export, info

    class PodLogger(Plugin):
        def on_add(self, pod: Object, initial: bool) -> None:
            info(f"New Pod Added to Store: {pod.name}")

    export(PodLogger)

`wasmformer build` turns the module (`app.py`) into a component with componentize-py; the WIT
bindings it generates (`wit_world`) are wrapped here so a plugin never sees them. The host creates
the plugin once per instance, calls `init` with its config, then one handler at a time; the
instance is kept in this module, so state on `self` lasts between calls (until a trap recreates
the instance). An exception a handler raises becomes the call's error, `"<Type>: <message>"`.
Writes to the cluster go through `wasmformer.writer` (apply, patch, create, delete, event).
"""

import json as _json
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type, Union

from componentize_py_types import Err
from wit_world.imports import lister as _lister
from wit_world.imports import log as _log
from wit_world.imports import types as _types

__all__ = [
    "CONTRACT_VERSION", "Gvk", "Object", "Plugin", "export", "gvk", "lister", "restored_from",
    "ListerError", "NotFound", "Forbidden", "InvalidSelector", "UnknownIndex",
    "log", "trace", "debug", "info", "warn", "error", "writer",
]

#: The contract version this SDK builds plugins for (the WIT package version).
CONTRACT_VERSION = "0.3.3"

#: A kind of object: `group` (empty for the core group), `version`, `kind`.
Gvk = _types.Gvk


def gvk(api_version: str, kind: str) -> Gvk:
    """The kind of a manifest's `apiVersion` and `kind`: `gvk("apps/v1", "ReplicaSet")`."""
    group, _, version = api_version.rpartition("/")
    return Gvk(group, version, kind)


# The fixed fields at the start of an object's packed `meta`, in order (see wit/types.wit).
_FIXED = 7


class Object:
    """One Kubernetes object from the host's cache.

    Kind, identity and labels are read from one short string the host sends (NUL-separated);
    `json()` parses the body on first use.
    """

    __slots__ = ("_fields", "body", "_parsed")

    def __init__(self, meta: str, body: str) -> None:
        fields = meta.split("\0")
        if len(fields) < _FIXED:
            fields += [""] * (_FIXED - len(fields))
        self._fields = fields
        #: The whole object as compact JSON text.
        self.body = body
        self._parsed: Optional[Dict[str, Any]] = None

    @classmethod
    def _from_wit(cls, obj: "_types.Object") -> "Object":
        return cls(obj.meta, obj.body)

    @property
    def kind(self) -> Gvk:
        """The object's group, version and kind."""
        return Gvk(self._fields[0], self._fields[1], self._fields[2])

    @property
    def namespace(self) -> str:
        """`metadata.namespace`; empty for cluster-scoped objects."""
        return self._fields[3]

    @property
    def name(self) -> str:
        """`metadata.name`."""
        return self._fields[4]

    @property
    def uid(self) -> str:
        """`metadata.uid`."""
        return self._fields[5]

    @property
    def resource_version(self) -> str:
        """`metadata.resourceVersion`."""
        return self._fields[6]

    @property
    def labels(self) -> Dict[str, str]:
        """`metadata.labels`, in key order."""
        rest = self._fields[_FIXED:]
        return dict(zip(rest[0::2], rest[1::2]))

    def label(self, key: str) -> Optional[str]:
        """The value of label `key`, or None."""
        rest = self._fields[_FIXED:]
        for i in range(0, len(rest) - 1, 2):
            if rest[i] == key:
                return rest[i + 1]
        return None

    def json(self) -> Dict[str, Any]:
        """The whole object as a dict (parsed once)."""
        if self._parsed is None:
            self._parsed = _json.loads(self.body)
        return self._parsed

    def __repr__(self) -> str:
        k = self.kind
        return f"Object({k.kind} {self.namespace}/{self.name} rv={self.resource_version})"


class Plugin:
    """A plugin's event handlers, in client-go's terms. Every method defaults to doing nothing.

    Raise an exception to fail a call: the host logs and counts it; the event is not retried.
    """

    #: With `export(MyPlugin, state=True)`: the attributes *not* kept across unloading and hot
    #: swap (e.g. what `init` derives from the config, or values that are not JSON).
    transient: Tuple[str, ...] = ()

    def init(self, config: Dict[str, Any]) -> None:
        """Receives the plugin's `config` block from the host configuration (`{}` when absent)."""

    def on_add(self, obj: Object, initial: bool) -> None:
        """An object was added; `initial` is true for objects from the initial list."""

    def on_update(self, old: Object, new: Object) -> None:
        """An object changed; on a resync `old` and `new` are the same object."""

    def on_delete(self, obj: Object, final_state_unknown: bool) -> None:
        """An object was deleted; `final_state_unknown` is true when the delete was inferred
        after a relist, and `obj` is then the last state the cache knew."""


# --- logging ---------------------------------------------------------------------------------

Level = _log.Level


def log(level: "_log.Level", message: str) -> None:
    """Writes one message into the host's log at `level`. `print` works too (info level)."""
    _log.log(level, str(message))


def trace(message: str) -> None:
    _log.log(Level.TRACE, str(message))


def debug(message: str) -> None:
    _log.log(Level.DEBUG, str(message))


def info(message: str) -> None:
    _log.log(Level.INFO, str(message))


def warn(message: str) -> None:
    _log.log(Level.WARN, str(message))


def error(message: str) -> None:
    _log.log(Level.ERROR, str(message))


# --- the lister ------------------------------------------------------------------------------


class ListerError(Exception):
    """Why a lister call returned nothing."""


class NotFound(ListerError):
    """No such object in the cache."""

    def __init__(self) -> None:
        super().__init__("not found")


class Forbidden(ListerError):
    """The plugin is not granted this kind; the message names it."""


class InvalidSelector(ListerError):
    """The label selector does not parse; the message says why."""


class UnknownIndex(ListerError):
    """No index of that name is configured for the kind; the message names it."""


def _lister_error(e: Err) -> ListerError:
    v = e.value
    if isinstance(v, _lister.Error_NotFound):
        return NotFound()
    if isinstance(v, _lister.Error_Forbidden):
        return Forbidden(f"forbidden: {v.value}")
    if isinstance(v, _lister.Error_InvalidSelector):
        return InvalidSelector(f"invalid label selector: {v.value}")
    return UnknownIndex(f"unknown index: {v.value}")


class _Lister:
    """Reads of the host's informer cache (never a call to the API server)."""

    @staticmethod
    def get(kind: Gvk, namespace: str, name: str) -> Object:
        """The object `namespace`/`name` (namespace "" for cluster-scoped kinds); raises
        `NotFound`, `Forbidden`."""
        try:
            return Object._from_wit(_lister.get(kind, namespace, name))
        except Err as e:
            raise _lister_error(e) from None

    @staticmethod
    def list(kind: Gvk, namespace: Optional[str] = None, label_selector: str = "") -> List[Object]:
        """Objects of `kind` in `namespace` (None: all) matching `label_selector` ("": all)."""
        try:
            return [Object._from_wit(o) for o in _lister.list(kind, namespace, label_selector)]
        except Err as e:
            raise _lister_error(e) from None

    @staticmethod
    def iter(
        kind: Gvk, namespace: Optional[str] = None, label_selector: str = "", page_size: int = 64
    ) -> Iterator[Object]:
        """The objects `list` answers, read from the cache a page of `page_size` at a time as the
        loop goes (contract 0.3.3), so going through any number of them takes the memory of one
        page. Each page reads the cache as it is then: every object comes once at most, in key
        order."""
        after: Optional[str] = None
        while True:
            try:
                page = _lister.list_page(kind, namespace, label_selector, after, max(1, page_size))
            except Err as e:
                raise _lister_error(e) from None
            for o in page.objects:
                yield Object._from_wit(o)
            if page.next is None:
                return
            after = page.next

    @staticmethod
    def by_index(kind: Gvk, index: str, value: str) -> List[Object]:
        """Objects of `kind` whose index `index` holds `value`."""
        try:
            return [Object._from_wit(o) for o in _lister.by_index(kind, index, value)]
        except Err as e:
            raise _lister_error(e) from None


#: `lister.get(kind, namespace, name)`, `lister.list(kind, namespace, selector)`,
#: `lister.iter(kind, namespace, selector, page_size)`, `lister.by_index(kind, index, value)`.
lister = _Lister()


# The writer imports `Gvk` and `Object` from this module, so it comes after them.
from . import writer  # noqa: E402

# --- the export ------------------------------------------------------------------------------

_plugin_class: Optional[Type[Plugin]] = None
# Whether the plugin's attributes are its state (`export(..., state=True)`).
_keeps_state = False
# The one plugin instance: componentize-py makes a new `Handler` per call, so state lives here.
_instance: Optional[Plugin] = None
# The plugin made from a restored state, waiting for `init`.
_restored: Optional[Plugin] = None
# The version whose state this instance restored.
_restored_from: Optional[str] = None


def export(plugin_class: Optional[Type[Plugin]] = None, *, state: bool = False):
    """Makes `plugin_class` the component's handler (one per plugin). Usable as a decorator, also
    as `@export(state=True)`.

    With `state=True` the plugin's attributes (`vars(self)`, less the names in its `transient`)
    are its state. When the host unloads the idle plugin or swaps in a new version, they are saved
    as JSON (so: dicts with string keys, lists, strings, numbers, booleans, None; a tuple comes
    back a list); the next instance makes a fresh `plugin_class()`, sets them on it, then calls
    `init` with the current config. So give kept attributes their first value in `__init__` (or as
    class attributes), not in `init`, which runs again after every restore; `restored_from()`
    says which version saved them. A state that cannot be restored (not a JSON object, or
    `plugin_class()` raises) is reported by the host, which starts the plugin over with `init`.
    """
    if plugin_class is None:
        return lambda cls: export(cls, state=state)
    global _plugin_class, _keeps_state
    _plugin_class = plugin_class
    _keeps_state = bool(state)
    return plugin_class


def restored_from() -> Optional[str]:
    """The version (the BLAKE3 hash of its wasm) of the instance whose state this one restored,
    while and after `init` runs; None when it started without one. Equal to this instance's own
    version after an idle unload, the predecessor's after a hot swap: compare it to migrate the
    attributes of an older version."""
    return _restored_from


def _failure(e: BaseException) -> Err:
    return Err(f"{type(e).__name__}: {e}")


def _plugin() -> Plugin:
    if _instance is None:
        raise Err("plugin called before init")
    return _instance


class Handler:
    """The `handler` export componentize-py calls; forwards to the exported `Plugin`."""

    def init(self, config: str) -> None:
        global _instance, _restored
        if _plugin_class is None:
            raise Err("no plugin exported: call wasmformer.export(MyPlugin) in the plugin module")
        try:
            parsed = _json.loads(config) if config.strip() else {}
        except ValueError as e:
            raise Err(f"plugin config is not JSON: {e}") from None
        plugin, _restored = _restored, None
        try:
            if plugin is None:
                plugin = _plugin_class()
            plugin.init(parsed)
        except Exception as e:
            raise _failure(e) from None
        _instance = plugin

    def on_add(self, obj: "_types.Object", is_in_initial_list: bool) -> None:
        plugin = _plugin()
        try:
            plugin.on_add(Object._from_wit(obj), is_in_initial_list)
        except Exception as e:
            raise _failure(e) from None

    def on_update(self, old: "_types.Object", new: "_types.Object") -> None:
        plugin = _plugin()
        try:
            plugin.on_update(Object._from_wit(old), Object._from_wit(new))
        except Exception as e:
            raise _failure(e) from None

    def on_delete(self, obj: "_types.Object", final_state_unknown: bool) -> None:
        plugin = _plugin()
        try:
            plugin.on_delete(Object._from_wit(obj), final_state_unknown)
        except Exception as e:
            raise _failure(e) from None


class State:
    """The `state` export componentize-py calls: the plugin's attributes as JSON, if it opted in
    with `export(..., state=True)`; otherwise no state (empty), and a state handed over by a
    previous version is ignored."""

    def save_state(self) -> bytes:
        if not _keeps_state or _instance is None:
            return b""
        kept = _kept(_instance)
        try:
            return _json.dumps(kept, separators=(",", ":")).encode()
        except (TypeError, ValueError):
            pass
        # Name the attribute that is not JSON (this raise traps the call: the host reports it).
        for name, value in kept.items():
            try:
                _json.dumps(value)
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"{type(_instance).__name__}.{name} cannot be saved as JSON ({e}): "
                    "list it in the plugin's `transient` to leave it out of the state"
                ) from None
        raise TypeError(f"{type(_instance).__name__}'s state cannot be saved as JSON")

    def restore_state(self, state: bytes, from_version: str) -> None:
        global _restored, _restored_from
        if not _keeps_state or _plugin_class is None:
            return
        try:
            attributes = _json.loads(state)
        except ValueError as e:
            raise Err(f"the saved state is not JSON: {e}") from None
        if not isinstance(attributes, dict):
            raise Err("the saved state is not a JSON object of attributes")
        try:
            plugin = _plugin_class()
        except Exception as e:
            raise _failure(e) from None
        transient = _transient(_plugin_class)
        vars(plugin).update((k, v) for k, v in attributes.items() if k not in transient)
        _restored = plugin
        _restored_from = from_version


def _kept(plugin: Plugin) -> Dict[str, Any]:
    """The attributes of `plugin` that are its state."""
    transient = _transient(type(plugin))
    return {k: v for k, v in vars(plugin).items() if k not in transient}


def _transient(plugin_class: Type[Plugin]) -> set:
    names = plugin_class.transient
    return {names} if isinstance(names, str) else set(names)
