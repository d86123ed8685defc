"""Allocation-heavy Python workload for the LD_PRELOAD test.

Dicts, lists, strings, bytes, JSON, regular expressions, sorting and a few
threads, all deterministic: the output (digests and counts) must be
byte-identical with hakmem preloaded and without it.
"""

import collections
import hashlib
import json
import re
import threading


def lcg(seed):
    while True:
        seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        yield seed >> 33


def words(n, seed):
    rng = lcg(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyz"
    out = []
    for _ in range(n):
        r = next(rng)
        length = 1 + r % 12
        out.append("".join(alphabet[(r >> (5 * k)) % 26] for k in range(length)))
    return out


def digest(obj):
    return hashlib.sha256(repr(obj).encode()).hexdigest()[:16]


def dict_work():
    w = words(120_000, 1)
    counts = collections.Counter(w)
    index = {}
    for i, word in enumerate(w):
        index.setdefault(word[:2], []).append(i)
    nested = {k: {"n": len(v), "first": v[0], "tail": v[-3:]} for k, v in index.items()}
    for k in list(nested)[::3]:
        del nested[k]
    print("dict:", len(counts), counts.most_common(3), len(nested), digest(sorted(nested.items())))


def list_work():
    rng = lcg(2)
    data = [next(rng) % 1_000_000 for _ in range(200_000)]
    data.sort()
    chunks = [data[i : i + 1000] for i in range(0, len(data), 1000)]
    sums = [sum(c) for c in chunks]
    matrix = [[(i * j) % 97 for j in range(300)] for i in range(300)]
    transposed = list(map(list, zip(*matrix)))
    print("list:", len(chunks), sums[:3], digest(transposed[7]), data[len(data) // 2])


def string_work():
    w = words(60_000, 3)
    text = " ".join(w)
    upper = text.upper()
    replaced = re.sub(r"([aeiou])\1", r"<\1>", text)
    parts = re.findall(r"\b[a-z]{5}\b", text)
    joined = "|".join(sorted(set(parts)))
    built = []
    for i in range(50_000):
        built.append(f"{i}:{w[i % len(w)]}" * (1 + i % 3))
    blob = "".join(built).encode() * 2
    print("str:", len(text), digest(upper[:1000]), len(replaced), len(parts), digest(joined), len(blob))


def json_work():
    rng = lcg(4)
    doc = [{"id": i, "tags": [str(next(rng) % 100) for _ in range(i % 7)], "v": next(rng) / 7} for i in range(30_000)]
    text = json.dumps(doc, sort_keys=True)
    back = json.loads(text)
    print("json:", len(text), back == doc, digest(back[12345]))


def thread_work():
    results = [None] * 4

    def run(k):
        local = {}
        for i in range(40_000):
            local[f"{k}-{i}"] = [i] * (i % 5)
        results[k] = sum(len(v) for v in local.values())

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("threads:", results)


dict_work()
list_work()
string_work()
json_work()
thread_work()
print("done")
