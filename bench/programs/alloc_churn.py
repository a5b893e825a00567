"""An allocation-heavy Python program for bench/run (workload python3).

Builds and drops dicts, lists, strings and objects the way interpreters of
real programs do: records parsed from text, indexes over them, string
building, object graphs replaced in waves. Many objects are bigger than
512 bytes (dict tables, list arrays, long strings), which CPython takes
from malloc rather than from its own small-object pool. Deterministic: the
lines it prints depend only on SCALE, so every allocator's stdout must match.

    python3 alloc_churn.py [SCALE]
"""

import sys


class Node:
    __slots__ = ("key", "value", "children")

    def __init__(self, key, value):
        self.key = key
        self.value = value
        self.children = []


def lcg(seed):
    """A small deterministic generator (the random module's state would
    be the same, but this keeps the output independent of its version)."""
    x = seed
    while True:
        x = (x * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        yield x >> 33


def records(rng, n):
    """Text lines parsed into dicts: many short-lived strings and dicts."""
    out = []
    for i in range(n):
        a, b, c = next(rng) % 1000, next(rng) % 97, next(rng) % 5000
        line = f"id={i};group=g{b};name=item{a};size={c};tags=" + ",".join(
            f"t{(a + k) % 50}" for k in range(c % 12))
        rec = dict(kv.split("=", 1) for kv in line.split(";"))
        rec["size"] = int(rec["size"])
        rec["tags"] = rec["tags"].split(",") if rec["tags"] else []
        out.append(rec)
    return out


def index(recs):
    """Group-by into dicts of lists, which grow by reallocation."""
    by_group, by_tag = {}, {}
    for r in recs:
        by_group.setdefault(r["group"], []).append(r)
        for t in r["tags"]:
            by_tag.setdefault(t, []).append(r["id"])
    return sum(len(v) for v in by_group.values()), sum(len(v) for v in by_tag.values())


def text(rng, n):
    """Long strings built, joined, split and replaced (blocks of 1-64 KiB)."""
    total = 0
    for _ in range(n):
        parts = ["%08x" % next(rng) for _ in range(64 + next(rng) % 1024)]
        s = "-".join(parts)
        s = s.upper().replace("A", "aa")
        total += len(s) + len(s.split("-"))
    return total


def tree(rng, n):
    """An object graph built, walked and dropped; a quarter kept for the
    next wave, so that old and new objects interleave in the heap."""
    kept, checksum = [], 0
    for wave in range(4):
        nodes = [Node(i, bytes(16 + next(rng) % 2000)) for i in range(n)]
        for i in range(1, n):
            nodes[next(rng) % i].children.append(nodes[i])
        stack, seen = [nodes[0]], 0
        while stack:
            node = stack.pop()
            seen += len(node.value)
            stack.extend(node.children)
        checksum += seen
        kept.extend(nodes[::4])
        kept = kept[-n:]
        del nodes, stack
    return checksum + len(kept)


def main():
    scale = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    rng = lcg(42)
    for step in range(scale):
        recs = records(rng, 40000)
        g, t = index(recs)
        print(f"step {step}: records {len(recs)} grouped {g} tagged {t}")
        del recs
        print(f"step {step}: text {text(rng, 600)}")
        print(f"step {step}: tree {tree(rng, 30000)}")


if __name__ == "__main__":
    main()
