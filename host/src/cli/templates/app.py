"""{{name}}: a wasmformer plugin. Logs every object added, updated and deleted."""

from wasmformer import Object, Plugin, export, info


class {{class}}(Plugin):
    def __init__(self) -> None:
        # First values go here, not in `init`: with `export({{class}}, state=True)` they are kept
        # across idle unloads and hot swaps (the state is restored before `init` runs).
        self.seen = 0

    def init(self, config: dict) -> None:
        pass

    def on_add(self, obj: Object, initial: bool) -> None:
        self.seen += 1
        info(f"New Pod Added to Store: {obj.name}")

    def on_update(self, old: Object, new: Object) -> None:
        info(f"{old.name} Pod Updated to {new.name}")

    def on_delete(self, obj: Object, final_state_unknown: bool) -> None:
        info(f"Pod Deleted from Store: {obj.name}")


export({{class}})
