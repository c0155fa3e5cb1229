"""A misbehaving Python plugin: what it does depends on the object's name.

`loop*` spins forever, `grow*` allocates without bound, `raise*` raises, `open*` tries to read a
file, `flood*` logs far more than the host allows per call; any other object logs
`ok <name> call <n>`, where n counts this instance's calls (state kept between calls; the plugin
does not opt in to keeping state, so an unload starts the count over).
"""

from wasmformer import Object, Plugin, export, info


class Hostile(Plugin):
    def __init__(self) -> None:
        self.calls = 0

    def on_add(self, obj: Object, initial: bool) -> None:
        self.calls += 1
        name = obj.name
        if name.startswith("loop"):
            while True:
                pass
        if name.startswith("grow"):
            hoard = []
            while True:
                hoard.append(bytearray(1 << 20))
        if name.startswith("raise"):
            raise ValueError(f"refusing {name} on purpose")
        if name.startswith("open"):
            with open("/etc/hostname") as f:
                info(f"read a file: {f.read()}")
        if name.startswith("flood"):
            for i in range(20000):
                info(f"flood line {i} of 20000 for {name}")
            print("and stdout too")
        info(f"ok {name} call {self.calls}")


export(Hostile)
