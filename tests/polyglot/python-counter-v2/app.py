"""The next version of `python-counter`, with a new state format that reads the old one: the count
is now `total` (the old `count`, moved in `init`), and `since_v2` counts the events since the swap.
Logs `{"total": N, "sinceV2": M, "restoredFrom": …}` per event.
"""

import json

from wasmformer import Object, Plugin, export, info, restored_from


class Counter(Plugin):
    def __init__(self) -> None:
        self.total = 0
        self.since_v2 = 0

    def init(self, config: dict) -> None:
        # A state saved by the first version: take its count, drop what this one does not keep.
        old = vars(self)
        if "count" in old:
            self.total = old.pop("count")
            old.pop("names", None)

    def on_add(self, obj: Object, initial: bool) -> None:
        self.total += 1
        self.since_v2 += 1
        restored = restored_from()
        info(json.dumps({
            "total": self.total, "sinceV2": self.since_v2, "kept": sorted(vars(self)),
            "restoredFrom": restored[:12] if restored else None,
        }))


export(Counter, state=True)
