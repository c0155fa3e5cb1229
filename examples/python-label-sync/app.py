"""label-sync: copies a label of each Namespace (default `team`; set `config: {label: ...}`) onto
every Pod in it, by server-side apply. The plugin owns that label on each Pod (field manager
`wasmformer/<plugin-name>`): another manager that sets it conflicts unless it forces.

It handles Namespaces and Pods: a Namespace's change is applied to its Pods (read from the cache),
a new or changed Pod gets its Namespace's label. Its own apply comes back as a Pod update whose
label already matches, so it writes once per change. Needs `write: [{apiVersion: v1, kind: Pod,
verbs: [apply]}]`."""

from typing import Any, Dict

from wasmformer import NotFound, Object, Plugin, export, gvk, info, lister, writer

POD = gvk("v1", "Pod")
NAMESPACE = gvk("v1", "Namespace")


class LabelSync(Plugin):
    def __init__(self) -> None:
        self.label = "team"

    def init(self, config: Dict[str, Any]) -> None:
        if isinstance(config.get("label"), str):
            self.label = config["label"]

    def sync_pod(self, pod: Object, value: str) -> None:
        """Applies `value` as the label on `pod` unless it already has it."""
        if pod.label(self.label) == value:
            return
        writer.apply({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "labels": {self.label: value}},
        })
        info(f"pod {pod.namespace}/{pod.name}: {self.label}={value}")

    def on_object(self, obj: Object) -> None:
        if obj.kind.kind == "Namespace":
            value = obj.label(self.label)
            if value is None:
                return
            for pod in lister.list(POD, obj.name):
                self.sync_pod(pod, value)
            return
        try:
            namespace = lister.get(NAMESPACE, "", obj.namespace)
        except NotFound:
            return
        value = namespace.label(self.label)
        if value is not None:
            self.sync_pod(obj, value)

    def on_add(self, obj: Object, initial: bool) -> None:
        self.on_object(obj)

    def on_update(self, old: Object, new: Object) -> None:
        self.on_object(new)


export(LabelSync)
