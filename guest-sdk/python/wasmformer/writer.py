"""Changes to the cluster, within the plugin's grants: server-side apply, patch, create, delete
and Events (the Rust SDK's `writer`)::

    from wasmformer import writer

    writer.apply({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": "web-1", "namespace": "shop", "labels": {"team": "a"}}})
    writer.patch(gvk("v1", "Pod"), "shop", "web-1", {"metadata": {"annotations": {"seen": "yes"}}})
    writer.event(pod, writer.EventType.WARNING, "ContainerRestarted", "Restart", "web restarted")

Writes are synchronous: each returns the API server's answer (the stored object as a dict). The
host sets the field manager (`wasmformer/<plugin-name>`). A failed write raises a `WriteError`
subclass whose `kind` names the error: a write the plugin's config does not grant raises
`Forbidden` with `refused_by == RefusedBy.GRANT` without reaching the server. Writes from `init`
are refused. A write's effect comes back to the plugin as an ordinary event if it handles that
kind.
"""

import json as _json
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Union

from componentize_py_types import Err
from wit_world.imports import writer as _wit

from . import Gvk, Object

__all__ = [
    "apply", "patch", "create", "delete", "event",
    "PatchType", "Propagation", "EventType", "RefusedBy", "Preconditions", "Cause",
    "WriteError", "Forbidden", "Invalid", "Conflict", "NotFound", "Throttled", "Unavailable",
    "EncodeError",
]

#: The format of a patch body: `MERGE` (RFC 7386) or `JSON` (RFC 6902, a list of operations).
PatchType = _wit.PatchType
#: What happens to a deleted object's dependents: `DEFAULT`, `BACKGROUND`, `FOREGROUND`, `ORPHAN`.
Propagation = _wit.Propagation
#: The type of an Event: `NORMAL` or `WARNING`.
EventType = _wit.EventType
#: Who refused a write: `GRANT` (the host, never sent) or `SERVER` (the API server's RBAC).
RefusedBy = _wit.RefusedBy


@dataclass
class Preconditions:
    """Conditions a delete must meet; the server answers `Conflict` if one fails."""

    #: The object's `metadata.uid` must be this.
    uid: Optional[str] = None
    #: The object's `metadata.resourceVersion` must be this.
    resource_version: Optional[str] = None


@dataclass
class Cause:
    """One reason the API server gave for refusing a write."""

    #: The field (e.g. `.metadata.labels.team`); empty if none.
    field: str
    #: Machine-readable reason (e.g. `FieldManagerConflict`).
    reason: str
    #: What is wrong.
    message: str


class WriteError(Exception):
    """Why a write failed. `kind` is forbidden, invalid, conflict, not-found, throttled,
    unavailable or encode; `message` the host's or server's text; `causes` the server's causes."""

    kind = ""
    _prefix = ""

    def __init__(self, message: str, causes: Optional[List[Cause]] = None) -> None:
        super().__init__(f"{self._prefix}: {message}")
        self.message = message
        self.causes: List[Cause] = causes or []


class Forbidden(WriteError):
    """Not granted to this plugin (`refused_by` is `RefusedBy.GRANT`), or refused by the API
    server's RBAC (`RefusedBy.SERVER`)."""

    kind = "forbidden"

    def __init__(self, refused_by: "RefusedBy", message: str) -> None:
        self.refused_by = refused_by
        self._prefix = (
            "forbidden (not granted)"
            if refused_by == RefusedBy.GRANT
            else "forbidden (by the API server)"
        )
        super().__init__(message)


class Invalid(WriteError):
    """Malformed, over a limit, made during `init`, or refused by the server's validation."""

    kind = "invalid"
    _prefix = "invalid"


class Conflict(WriteError):
    """An apply conflict (one cause per field, naming the other manager), a failed delete
    precondition, or an object that already exists."""

    kind = "conflict"
    _prefix = "conflict"

    def conflicting_managers(self) -> List[str]:
        """The other field managers named in the causes (e.g. `kubectl`), sorted."""
        managers = set()
        for text in [c.message for c in self.causes] + [self.message]:
            for rest in text.split('conflict with "')[1:]:
                managers.add(rest.split('"', 1)[0])
        return sorted(managers)


class NotFound(WriteError):
    """The object or its namespace does not exist."""

    kind = "not-found"
    _prefix = "not found"


class Throttled(WriteError):
    """Over the plugin's write rate, or the server answered 429."""

    kind = "throttled"
    _prefix = "throttled"


class Unavailable(WriteError):
    """The server could not be reached, failed, or did not answer in time; the write may or may
    not have happened."""

    kind = "unavailable"
    _prefix = "unavailable"


class EncodeError(WriteError):
    """The object could not be encoded as JSON (nothing was sent)."""

    kind = "encode"
    _prefix = "cannot encode the object"


def _causes(causes: List["_wit.Cause"]) -> List[Cause]:
    return [Cause(c.field, c.reason, c.message) for c in causes]


def _write_error(e: Err) -> WriteError:
    v = e.value
    if isinstance(v, _wit.Error_Forbidden):
        return Forbidden(v.value.refused_by, v.value.message)
    if isinstance(v, _wit.Error_Invalid):
        return Invalid(v.value.message, _causes(v.value.causes))
    if isinstance(v, _wit.Error_Conflict):
        return Conflict(v.value.message, _causes(v.value.causes))
    if isinstance(v, _wit.Error_NotFound):
        return NotFound(v.value)
    if isinstance(v, _wit.Error_Throttled):
        return Throttled(v.value)
    return Unavailable(v.value)


def _encode(obj: Any) -> str:
    """`obj` as compact JSON; a `str` is sent as it is (already JSON)."""
    if isinstance(obj, str):
        return obj
    try:
        return _json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise EncodeError(str(e)) from None


def _answer(text: str) -> Dict[str, Any]:
    return _json.loads(text) if text else {}


def _call(f, *args):
    try:
        return f(*args)
    except Err as e:
        raise _write_error(e) from None


Manifest = Union[Dict[str, Any], str]


def apply(manifest: Manifest, force: bool = False, status: bool = False) -> Dict[str, Any]:
    """Server-side apply of `manifest` (a dict, or JSON text sent as it is, with apiVersion, kind
    and metadata.name); `force` takes over fields another manager owns, `status` applies to the
    status subresource. Returns the object as the server stored it."""
    options = _wit.ApplyOptions(force=force, status=status)
    return _answer(_call(_wit.apply, _encode(manifest), options))


def patch(
    kind: Gvk,
    namespace: str,
    name: str,
    body: Any,
    patch_type: "PatchType" = PatchType.MERGE,
    status: bool = False,
) -> Dict[str, Any]:
    """Patches the `kind` `namespace`/`name` (namespace "" for cluster-scoped kinds) with `body`:
    a JSON merge patch (a dict) by default, a JSON patch (a list of operations) with
    `patch_type=PatchType.JSON`; `status` patches the status subresource. Returns the object as
    the server stored it."""
    target = _wit.Target(kind=kind, namespace=namespace, name=name)
    return _answer(_call(_wit.patch, target, patch_type, _encode(body), status))


def create(manifest: Manifest) -> Dict[str, Any]:
    """Creates `manifest`; returns the object as the server stored it."""
    return _answer(_call(_wit.create, _encode(manifest)))


def delete(
    kind: Gvk,
    namespace: str,
    name: str,
    propagation: "Propagation" = Propagation.DEFAULT,
    preconditions: Optional[Preconditions] = None,
) -> None:
    """Deletes the `kind` `namespace`/`name`, with a propagation policy for its dependents and
    preconditions on its uid and resourceVersion."""
    target = _wit.Target(kind=kind, namespace=namespace, name=name)
    pre = preconditions or Preconditions()
    wit_pre = _wit.Preconditions(uid=pre.uid, resource_version=pre.resource_version)
    _call(_wit.delete, target, propagation, wit_pre)


def event(regarding: Object, type: "EventType", reason: str, action: str, note: str) -> None:
    """Records an Event about `regarding` (an object a handler received), reported by
    `wasmformer/<plugin-name>`; repeats aggregate into one Event with a growing count."""
    reference = _wit.ObjectReference(
        kind=regarding.kind,
        namespace=regarding.namespace,
        name=regarding.name,
        uid=regarding.uid,
    )
    _call(_wit.event, reference, type, reason, action, note)
