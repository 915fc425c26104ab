"""Checks `rank` on long sequences with many ties against Python's stable sort.

usage: rank_check.py CAC RANK_CAC TMP_PREFIX

RANK_CAC outputs r = rank(x) and r2 = rank(0 - x * x). The batch: 12
sequences of 1..3000 tokens whose values come from a set of 7 (with -0.0 and
0.0, which tie) or, in every other sequence, are mostly distinct; rank is the
position in a descending sort, ties by the lower index. Runs `cac eval` on
the cpu backend in f64 and f32, and on gpu-sim (the GPU's block kernels,
whose block sorts in parallel) with the default blocks in f32 and with
blocks of 64 threads and of 4 in f64, and exits 1 on the first mismatch.
"""

import json
import random
import subprocess
import sys


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda t: -xs[t])  # stable
    r = [0] * len(xs)
    for k, t in enumerate(order):
        r[t] = k
    return r


def main():
    cac, source, tmp = sys.argv[1:4]
    rng = random.Random(7)
    pool = [-2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0]
    rows = []
    lengths = [1, 2, 255, 256, 257, 3000] + [rng.randint(3, 3000)
                                             for _ in range(6)]
    for i, n in enumerate(lengths):
        if i % 2 == 0:
            rows.append([rng.choice(pool) for _ in range(n)])
        else:  # quarter-steps: exact in f32, few ties
            rows.append([rng.randint(-4000, 4000) / 4.0 for _ in range(n)])
    with open(tmp + ".json", "w") as f:
        json.dump({"token": {"x": rows}}, f)
    runs = [("cpu", "f64", []), ("cpu", "f32", []), ("gpu-sim", "f32", []),
            ("gpu-sim", "f64", ["--seq-block=64", "--seq-items=2"]),
            ("gpu-sim", "f64", ["--seq-block=4", "--seq-items=3"])]
    for backend, dtype, extra in runs:
        label = " ".join([backend, dtype] + extra)
        out = subprocess.run(
            [cac, "eval", source, "--input", tmp + ".json", "--backend",
             backend, "--dtype", dtype] + extra,
            check=True, capture_output=True, text=True)
        got = json.loads(out.stdout)["token"]
        for b, xs in enumerate(rows):
            want = {"r": ranks(xs), "r2": ranks([0.0 - x * x for x in xs])}
            for name in ("r", "r2"):
                if [int(v) for v in got[name][b]] != want[name]:
                    print(f"{label}: {name} of sequence {b} ({len(xs)} tokens) "
                          f"differs from the stable sort")
                    return 1
        print(f"{label}: {len(rows)} sequences, "
              f"{sum(map(len, rows))} tokens agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
