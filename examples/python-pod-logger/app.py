"""The classic informer example: logs every Pod added, updated and deleted."""

from wasmformer import Object, Plugin, export, info


class PodLogger(Plugin):
    def on_add(self, pod: Object, initial: bool) -> None:
        info(f"New Pod Added to Store: {pod.name}")

    def on_update(self, old: Object, new: Object) -> None:
        info(f"{old.name} Pod Updated to {new.name}")

    def on_delete(self, pod: Object, final_state_unknown: bool) -> None:
        info(f"Pod Deleted from Store: {pod.name}")


export(PodLogger)
