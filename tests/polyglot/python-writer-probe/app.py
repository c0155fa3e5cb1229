"""The Rust writer-probe (tests/guests/writer-probe) in Python: makes the writes a labelled
ConfigMap's `data` describes, so one replay script drives every writer call in Rust, Python and
JavaScript and their recorded writes compare equal. `op` is none, apply, create, patch,
json-patch, delete, event or raw-apply; a failed write logs its error's class, kind and refuser,
then fails the handler."""

import json
from typing import Any, Dict

from wasmformer import Object, Plugin, export, gvk, info, writer


def write(obj: Object) -> Any:
    data: Dict[str, str] = obj.json().get("data") or {}
    get = data.get
    kind = gvk(get("apiVersion", ""), get("kind", ""))
    force, status = get("force") == "true", get("status") == "true"
    last: Any = ""
    for _ in range(int(get("count", "1"))):
        op = get("op", "")
        if op == "none":
            last = ""
        elif op == "apply":
            last = writer.apply(json.loads(get("manifest", "")), force=force, status=status)
        elif op == "raw-apply":
            last = writer.apply(get("manifest", ""), force=force, status=status)
        elif op == "create":
            last = writer.create(json.loads(get("manifest", "")))
        elif op == "patch":
            last = writer.patch(kind, get("namespace", ""), get("name", ""),
                                json.loads(get("body", "")), status=status)
        elif op == "json-patch":
            last = writer.patch(kind, get("namespace", ""), get("name", ""),
                                json.loads(get("body", "")), writer.PatchType.JSON, status)
        elif op == "delete":
            pre = writer.Preconditions(uid=get("uid"), resource_version=get("resourceVersion"))
            writer.delete(kind, get("namespace", ""), get("name", ""),
                          writer.Propagation.BACKGROUND, pre)
            last = ""
        elif op == "event":
            writer.event(obj, writer.EventType.WARNING, "ProbeReason", "Probe", get("note", ""))
            last = ""
        else:
            raise ValueError(f"unknown op {op!r}")
    return last


class Probe(Plugin):
    def init(self, config: Dict[str, Any]) -> None:
        if config.get("writeInInit") is True:
            writer.apply({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": "x", "namespace": "default"}})

    def on_add(self, obj: Object, initial: bool) -> None:
        if obj.kind.kind != "ConfigMap" or obj.label("probe") is None:
            return
        try:
            answer = write(obj)
        except writer.WriteError as e:
            refused_by = e.refused_by.name.lower() if isinstance(e, writer.Forbidden) else "-"
            info(f"write failed: {type(e).__name__} kind={e.kind} refusedBy={refused_by}")
            raise
        info(f"ok {answer.get('metadata', {}).get('name', '') if answer else ''}")


export(Probe)
