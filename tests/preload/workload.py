"""Allocation-heavy python3 workload for the hakmem LD_PRELOAD tests.

Run once without hakmem and once with it; run_program.sh compares the whole
stdout.  Everything printed must be deterministic: no addresses, no ids, no
timings, no iteration over sets/dicts whose order depends on string hashing
(run_program.sh also sets PYTHONHASHSEED=0).
"""

import collections
import gc
import hashlib
import json
import re
import sys
import threading

TOTAL = hashlib.sha256()


def lcg(seed):
    """Deterministic pseudo-random stream (no dependency on `random`)."""
    x = seed & 0xFFFFFFFF
    while True:
        x = (1103515245 * x + 12345) & 0x7FFFFFFF
        yield x


def report(name, value):
    data = repr(value).encode()
    h = hashlib.sha256(data).hexdigest()
    TOTAL.update(name.encode() + b"=" + h.encode() + b"\n")
    print("%-12s %s" % (name, h[:32]))


def words(n, seed):
    r = lcg(seed)
    alpha = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for _ in range(n):
        ln = 1 + next(r) % 24
        out.append("".join(alpha[next(r) % 26] for _ in range(ln)))
    return out


def section_dicts():
    # many small and a few large dicts, growing and shrinking
    r = lcg(1)
    big = {}
    for i in range(120000):
        big["k%d" % next(r)] = i
    for i, k in enumerate(list(big)):
        if i % 3 == 0:
            del big[k]
    small = [{"a": i, "b": str(i), "c": [i] * (i % 7)} for i in range(60000)]
    nested = {}
    for i in range(20000):
        nested.setdefault(i % 97, {}).setdefault(i % 13, []).append(i)
    return (len(big), sum(big.values()), sorted(big)[:50],
            sum(len(d["c"]) for d in small),
            sorted((k, sorted((kk, len(v)) for kk, v in d.items()))
                   for k, d in nested.items())[:20])


def section_lists():
    r = lcg(2)
    lst = []
    for _ in range(200000):
        lst.append(next(r) % 1000003)
    lst.sort()
    chunks = [lst[i:i + 1000] for i in range(0, len(lst), 1000)]
    while len(lst) > 1000:
        lst = lst[::2] + lst[1::7]
    tuples = sorted(((x % 101, -x, str(x)) for x in lst), reverse=True)
    dq = collections.deque()
    for i in range(100000):
        dq.append(i)
        if i % 3:
            dq.popleft()
    return (lst[:100], len(chunks), sum(map(sum, chunks)), tuples[:50],
            len(dq), list(dq)[:10])


def section_strings():
    ws = words(80000, 3)
    text = " ".join(ws)
    up = text.upper().replace("A", "<a>").split("<A>")
    joined = "|".join(w[::-1] for w in ws)
    fmt = ["%05d:%s:%r" % (i, w, w[:3]) for i, w in enumerate(ws[:30000])]
    enc = [w.encode("utf-16") for w in ws[:20000]]
    uni = "".join(chr(0x400 + (i % 200)) for i in range(50000))
    ba = bytearray()
    for w in ws:                       # many reallocs of one growing buffer
        ba += w.encode()
        if len(ba) > 300000:
            del ba[:150000]
    found = re.findall(r"\b[a-e][a-z]{3,5}\b", text)
    counts = collections.Counter(w[0] for w in ws)
    return (len(text), len(up), hashlib.md5(joined.encode()).hexdigest(),
            fmt[-3:], sum(map(len, enc)), hashlib.md5(uni.encode()).hexdigest(),
            hashlib.md5(bytes(ba)).hexdigest(), len(found), found[:20],
            sorted(counts.items()))


def section_json():
    r = lcg(4)
    ws = words(5000, 5)
    docs = []
    for i in range(3000):
        docs.append({
            "id": i,
            "name": ws[i % len(ws)],
            "tags": [ws[next(r) % len(ws)] for _ in range(next(r) % 8)],
            "score": (next(r) % 100000) / 7.0,
            "child": {"x": i * 3, "y": [None, True, False, "s" * (i % 50)]},
        })
    blob = json.dumps(docs, sort_keys=True)
    back = json.loads(blob)
    again = json.dumps(back, sort_keys=True, indent=1)
    return (len(blob), hashlib.sha256(blob.encode()).hexdigest(),
            hashlib.sha256(again.encode()).hexdigest(), back == docs)


class Node:
    __slots__ = ("key", "left", "right")

    def __init__(self, key):
        self.key = key
        self.left = None
        self.right = None


def section_objects():
    # a binary search tree plus reference cycles for the gc
    r = lcg(6)
    root = Node(500000)
    for _ in range(40000):
        k = next(r) % 1000000
        n = root
        while True:
            if k < n.key:
                if n.left is None:
                    n.left = Node(k)
                    break
                n = n.left
            else:
                if n.right is None:
                    n.right = Node(k)
                    break
                n = n.right
    out = []
    stack, n = [], root
    while stack or n is not None:
        while n is not None:
            stack.append(n)
            n = n.left
        n = stack.pop()
        out.append(n.key)
        n = n.right
    for _ in range(20):
        cyc = []
        for i in range(5000):
            a, b = [i], {"i": i}
            a.append(b)
            b["a"] = a
            cyc.append(a)
        del cyc
        gc.collect()
    big = 1
    for i in range(1, 3000):
        big *= i
    return (len(out), out[:30], out == sorted(out), big.bit_length(), len(hex(big)), big % 1000003)


def section_threads():
    results = [None] * 4

    def work(t):
        acc = []
        for i in range(30000):
            s = "t%d-%d" % (t, i)
            acc.append(s * (1 + i % 5))
            if len(acc) > 500:
                acc = acc[250:]
        d = {str(i): [t] * (i % 9) for i in range(20000)}
        results[t] = (len(acc), acc[-1], sum(len(v) for v in d.values()))

    th = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return results


def main():
    for name, fn in [("dicts", section_dicts), ("lists", section_lists),
                     ("strings", section_strings), ("json", section_json),
                     ("objects", section_objects), ("threads", section_threads)]:
        report(name, fn())
    print("digest       %s" % TOTAL.hexdigest())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
