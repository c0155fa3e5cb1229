"""A plugin whose state survives unloading and hot swap (`export(Counter, state=True)`): it counts
the events it handled and logs one JSON line per event, `{"count": N, "names": [...], "tag": …,
"restoredFrom": …}` (the first 12 hex digits of the version its state came from, or null), and
`{"init": N}` from `init`. `tag` comes from the config and is not kept. An object named
`unjson-*` gives the plugin an attribute that JSON cannot hold, so the next save fails.
"""

import json

from wasmformer import Object, Plugin, export, info, restored_from


class Counter(Plugin):
    transient = ("tag",)

    def __init__(self) -> None:
        self.count = 0
        self.names = []

    def init(self, config: dict) -> None:
        self.tag = config.get("tag", "")
        info(json.dumps({"init": self.count}))

    def on_add(self, obj: Object, initial: bool) -> None:
        self.count += 1
        self.names.append(obj.name)
        if obj.name.startswith("unjson-"):
            self.unjson = {obj.name}
        restored = restored_from()
        info(json.dumps({
            "count": self.count, "names": self.names, "tag": self.tag,
            "restoredFrom": restored[:12] if restored else None,
        }))


export(Counter, state=True)
