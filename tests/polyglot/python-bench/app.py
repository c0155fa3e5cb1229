"""The benchmark handlers in Python, chosen by the config's `mode`: `empty` does nothing, `labels`
reads name, namespace and labels (like tests/guests/bench-labels), `decode` parses the whole
object and counts its containers (like tests/guests/bench-decode). `pages` goes through the Pods
of the event's namespace that match the config's `selector` with `lister.iter`, in pages of the
config's `page`, and logs the keys it read (like tests/guests/bench-lister with `log`)."""

from wasmformer import Object, Plugin, export, gvk, info, lister


class Bench(Plugin):
    def init(self, config: dict) -> None:
        self.mode = config.get("mode", "empty")
        self.labels = 0
        self.with_app = 0
        self.identity_bytes = 0
        self.containers = 0
        self.selector = config.get("selector", "")
        self.page = config.get("page", 64)

    def on_add(self, obj: Object, initial: bool) -> None:
        if self.mode == "labels":
            self.labels += len(obj.labels)
            self.with_app += obj.label("app") is not None
            self.identity_bytes += len(obj.name) + len(obj.namespace)
        elif self.mode == "decode":
            self.containers += len(obj.json().get("spec", {}).get("containers", []))
        elif self.mode == "pages":
            pods = lister.iter(gvk("v1", "Pod"), obj.namespace, self.selector, self.page)
            info("read " + " ".join(f"{p.namespace}/{p.name}" for p in pods))


export(Bench)
