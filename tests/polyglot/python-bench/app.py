"""The benchmark handlers in Python, chosen by the config's `mode`: `empty` does nothing, `labels`
reads name, namespace and labels (like tests/guests/bench-labels), `decode` parses the whole
object and counts its containers (like tests/guests/bench-decode)."""

from wasmformer import Object, Plugin, export


class Bench(Plugin):
    def init(self, config: dict) -> None:
        self.mode = config.get("mode", "empty")
        self.labels = 0
        self.with_app = 0
        self.identity_bytes = 0
        self.containers = 0

    def on_add(self, obj: Object, initial: bool) -> None:
        if self.mode == "labels":
            self.labels += len(obj.labels)
            self.with_app += obj.label("app") is not None
            self.identity_bytes += len(obj.name) + len(obj.namespace)
        elif self.mode == "decode":
            self.containers += len(obj.json().get("spec", {}).get("containers", []))


export(Bench)
