"""Checks `top_k` (a radix select) on long sequences with many ties against
Python's stable sort.

usage: top_k_check.py CAC TOP_K_CAC TMP_PREFIX

TOP_K_CAC (Inputs/top_k.cac) outputs top_k(x, k) for k a parameter (3), the
literal 1, the length, SAPO's max(ceil(0.3 * length), 1), a seq input kk
(each of a copy of x, so that each is a rank of its own, selected), and
top_k(0 - x * x, 2); and rank(x) beside rank(x) < kk (a rank read otherwise
than by top_k stays a sort). The batch: 16 sequences of 1..3000
tokens whose values come from a set of 7 (with -0.0 and 0.0, which tie) or,
in every other sequence, are mostly distinct, one sequence of a single
repeated value, and kk of 0, 1, 2.5, the length, beyond it and negative.
Runs `cac eval` on the cpu backend in f64 and f32, and on gpu-sim (the
GPU's block kernels, whose block selects with shared-memory histograms)
with the default blocks in f32, with blocks of 64 threads x 2 and of 4 x 3
in f64, and of 256 striped in f32; exits 1 on the first mismatch.
"""

import json
import math
import random
import subprocess
import sys


def ranks(xs):
    order = sorted(range(len(xs)), key=lambda t: -xs[t])  # stable
    r = [0] * len(xs)
    for k, t in enumerate(order):
        r[t] = k
    return r


def top(xs, k):
    return [1 if r < k else 0 for r in ranks(xs)]


def main():
    cac, source, tmp = sys.argv[1:4]
    rng = random.Random(11)
    pool = [-2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 3.0]
    rows, kks = [], []
    lengths = [1, 2, 3, 255, 256, 257, 1000, 3000] + [
        rng.randint(3, 3000) for _ in range(7)]
    for i, n in enumerate(lengths):
        if i % 2 == 0:
            rows.append([rng.choice(pool) for _ in range(n)])
        else:  # quarter-steps: exact in f32, few ties
            rows.append([rng.randint(-4000, 4000) / 4.0 for _ in range(n)])
    rows.append([0.5] * 777)  # every key ties
    for i, xs in enumerate(rows):
        kks.append([0.0, 1.0, 2.5, float(len(xs)), len(xs) + 5.0, -3.0,
                    float(rng.randint(1, len(xs)))][i % 7])
    with open(tmp + ".json", "w") as f:
        json.dump({"token": {n: rows for n in ("x", "xa", "xb", "xc", "xd",
                                               "xe")},
                   "seq": {"kk": kks}}, f)
    runs = [("cpu", "f64", []), ("cpu", "f32", []), ("gpu-sim", "f32", []),
            ("gpu-sim", "f64", ["--seq-block=64", "--seq-items=2"]),
            ("gpu-sim", "f64", ["--seq-block=4", "--seq-items=3"]),
            ("gpu-sim", "f32", ["--seq-block=256", "--seq-layout=striped"])]
    for backend, dtype, extra in runs:
        label = " ".join([backend, dtype] + extra)
        out = subprocess.run(
            [cac, "eval", source, "--input", tmp + ".json", "--backend",
             backend, "--dtype", dtype] + extra,
            check=True, capture_output=True, text=True)
        got = json.loads(out.stdout)["token"]
        for s, xs in enumerate(rows):
            n = len(xs)
            want = {
                "a": top(xs, 3),
                "b": top(xs, 1),
                "c": top(xs, n),
                "d": top(xs, max(math.ceil(n * 30 / 100), 1)),
                "e": top(xs, kks[s]),
                "f": top([0.0 - x * x for x in xs], 2),
                "r": ranks(xs),
                "g": top(xs, kks[s]),
            }
            for name, w in want.items():
                if [int(v) for v in got[name][s]] != w:
                    print(f"{label}: {name} of sequence {s} ({n} tokens, "
                          f"kk {kks[s]}) differs from the stable sort")
                    return 1
        print(f"{label}: {len(rows)} sequences, "
              f"{sum(map(len, rows))} tokens agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
