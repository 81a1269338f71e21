"""Stacks of layers that exercise the OCI layer rules, for the differential test of the entry's
root against `umoci raw unpack`: whiteouts, opaque directories, hard links, files overwritten
across layers, files turned into directories and back, symbolic links, setuid files and device
nodes, chosen by a seeded random walk so that each seed is one reproducible stack.

The walk keeps a rough picture of the tree so far only to choose paths that exist (to remove,
overwrite or link to); what the stack must unpack to is never taken from it: that is umoci's
answer, which the test compares with vmjudge's.
"""

from __future__ import annotations

import random

from .oci_images import Layer, Member, device, directory, fifo, file, hardlink, opaque, symlink, whiteout

NAMES = ["a", "b", "c", "data", "lib", "x.txt", "y.bin", "run", "etc", "Ω"]


class _Walk:
    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.tree: dict[str, str] = {}  # path → "dir" | "file" | "other", as far as the walk knows
        self.layer: list[Member] = []
        self.touched: set[str] = set()  # paths this layer has an entry for (each at most once)
        self.layer_files: list[str] = []  # regular files of this layer, which hard links may name

    def _data(self) -> bytes:
        return bytes(self.rng.randrange(256) for _ in range(self.rng.choice([0, 1, 10, 700, 5000])))

    def _dirs(self) -> list[str]:
        return [""] + sorted(p for p, k in self.tree.items() if k == "dir")

    def _new_path(self) -> str | None:
        parent = self.rng.choice(self._dirs())
        path = f"{parent}/{self.rng.choice(NAMES)}" if parent else self.rng.choice(NAMES)
        if path in self.tree or path in self.touched or any(p in self.touched and self.tree.get(p) != "dir"
                                                          for p in _parents(path)):
            return None
        return path

    def _ensure_parents(self, path: str) -> None:
        for parent in _parents(path):
            if parent not in self.touched and self.rng.random() < 0.5 and self.tree.get(parent) == "dir":
                self.layer.append(directory(parent, self.rng.choice([0o755, 0o750, 0o2775])))
                self.touched.add(parent)

    def _add(self, member: Member, kind: str) -> None:
        path = member.info.name
        self._ensure_parents(path)
        self.layer.append(member)
        self.touched.add(path)
        for gone in [p for p in self.tree if p.startswith(path + "/")] if kind != "dir" else []:
            del self.tree[gone]
        self.tree[path] = kind
        if kind == "file" and member.info.isreg():
            self.layer_files.append(path)

    def step(self) -> None:
        op = self.rng.choice(["file", "file", "dir", "overwrite", "whiteout", "opaque", "hardlink", "symlink",
                              "retype", "special"])
        existing = sorted(p for p in self.tree if p not in self.touched
                          and not any(q in self.touched for q in _parents(p)))
        if op in ("file", "dir", "symlink", "hardlink", "special"):
            path = self._new_path()
            if path is None:
                return
            if op == "file":
                mode = self.rng.choice([0o644, 0o755, 0o600, 0o4755, 0o2755])
                self._add(file(path, self._data(), mode, uid=self.rng.choice([0, 1000]), gid=self.rng.choice([0, 100])),
                          "file")
            elif op == "dir":
                self._add(directory(path, self.rng.choice([0o755, 0o700, 0o1777])), "dir")
            elif op == "symlink":
                target = self.rng.choice(["/etc/passwd", "../" * self.rng.randrange(1, 6) + "x", "a", "/"])
                self._add(symlink(path, target), "other")
            elif op == "hardlink" and self.layer_files:
                self._add(hardlink(path, self.rng.choice(self.layer_files)), "file")
            elif op == "special":
                self._add(self.rng.choice([device(path), device(path, "b", 7, 0), fifo(path)]), "other")
        elif not existing:
            return
        elif op == "overwrite":
            path = self.rng.choice([p for p in existing if self.tree[p] == "file"] or [""])
            if path:
                self._add(file(path, self._data(), self.rng.choice([0o644, 0o4711])), "file")
        elif op == "whiteout":
            path = self.rng.choice(existing)
            self._ensure_parents(path)
            self.layer.append(whiteout(path))
            self.touched.add(path)
            for gone in [p for p in self.tree if p == path or p.startswith(path + "/")]:
                del self.tree[gone]
        elif op == "opaque":
            path = self.rng.choice([p for p in existing if self.tree[p] == "dir"] or [""])
            if path and path not in self.touched:
                self.layer += [directory(path), opaque(path)]
                self.touched.add(path)
                for gone in [p for p in self.tree if p.startswith(path + "/")]:
                    del self.tree[gone]
        elif op == "retype":  # a file becomes a directory, or a directory a file
            path = self.rng.choice(existing)
            if self.tree[path] == "dir":
                self._add(file(path, b"was a directory"), "file")
            else:
                self._add(directory(path), "dir")
                self._add(file(f"{path}/inside", b"was a file"), "file")

    def next_layer(self) -> list[Member]:
        members, self.layer, self.touched, self.layer_files = self.layer, [], set(), []
        return members


def _parents(path: str) -> list[str]:
    parts = path.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def random_stack(seed: int, layers: int = 5, steps: int = 30) -> list[Layer]:
    """A reproducible stack of `layers` layers of about `steps` changes each."""
    walk = _Walk(seed)
    out = []
    for i in range(layers):
        for _ in range(steps):
            walk.step()
        out.append(Layer.of(walk.next_layer(), "gzip" if i % 2 == 0 else None))
    return out


def named_stack() -> list[Layer]:
    """The rules one by one, each where a reader can see it."""
    return [
        Layer.of([directory("etc"), file("etc/keep", b"keep"), file("etc/gone", b"gone"), directory("opt"),
                  file("opt/old1", b"1"), directory("opt/sub"), file("opt/sub/old2", b"2"), file("turns-dir", b"f"),
                  directory("turns-file"), file("turns-file/child", b"c"), file("bin-su", b"#!", 0o4755),
                  file("shared", b"one inode"), hardlink("shared-link", "shared"), symlink("to-etc", "/etc"),
                  device("dev/null", "c", 1, 3), device("dev/loop0", "b", 7, 0), fifo("run/fifo"),
                  directory("setgid-dir", 0o2775)]),
        Layer.of([whiteout("etc/gone"), opaque("opt"), file("opt/new", b"new"), directory("turns-dir"),
                  file("turns-dir/inside", b"i"), file("turns-file", b"now a file"), file("etc/keep", b"kept, new"),
                  file("to-etc", b"a file where a link was")], None),
        Layer.of([file("shared", b"rewritten: the link keeps the old inode")]),
    ]
