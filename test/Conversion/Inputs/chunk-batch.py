"""A batch whose sequences end around the CPU's chunks of 256 tokens.

chunk-batch.py make FILE: writes a `cac eval` batch (token value and x, logp,
logp_behavior, sum_pi2, entropy (two decimals: ties); seq reward, group:
groups of 3, 4 and 3 members)
with sequences of 1, 2, 255, 256, 257, 258, 263, 512, 513 and 777 tokens.
chunk-batch.py close A B TOL: exits 1 when two `cac eval` outputs differ by
more than TOL anywhere (or in shape), naming the first difference.
"""
import json
import math
import sys

LENGTHS = [1, 2, 255, 256, 257, 258, 263, 512, 513, 777]


def make(path):
    value = [[math.sin(0.37 * t + s) for t in range(n)]
             for s, n in enumerate(LENGTHS)]
    logp = [[-abs(math.cos(0.61 * t + s)) - 0.05 for t in range(n)]
            for s, n in enumerate(LENGTHS)]
    behavior = [[x - 0.3 * math.sin(1.3 * t) for t, x in enumerate(row)]
                for row in logp]
    sum_pi2 = [[0.5 + 0.4 * math.sin(0.11 * t * (s + 1)) for t in range(n)]
               for s, n in enumerate(LENGTHS)]
    entropy = [[round(abs(math.sin(0.53 * t + 2 * s)), 2) for t in range(n)]
               for s, n in enumerate(LENGTHS)]
    reward = [float(s % 3) - 1.0 for s in range(len(LENGTHS))]
    group = [0, 0, 0, 1, 1, 1, 1, 2, 2, 2]
    token = {"value": value, "x": value, "logp": logp,
             "logp_behavior": behavior, "sum_pi2": sum_pi2, "entropy": entropy}
    with open(path, "w") as f:
        json.dump({"token": token, "seq": {"reward": reward, "group": group}},
                  f)


def leaves(x, at):
    if isinstance(x, dict):
        for k in sorted(x):
            yield from leaves(x[k], at + "." + k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, "%s[%d]" % (at, i))
    else:
        yield at, x


def close(a, b, tol):
    with open(a) as fa, open(b) as fb:
        xs = list(leaves(json.load(fa), ""))
        ys = list(leaves(json.load(fb), ""))
    if [k for k, _ in xs] != [k for k, _ in ys]:
        print("the outputs differ in shape")
        return 1
    for (k, x), (_, y) in zip(xs, ys):
        if isinstance(x, (int, float)) and abs(x - y) > tol:
            print("%s: %r against %r" % (k, x, y))
            return 1
    print("%d values within %g" % (len(xs), tol))
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        sys.exit(close(sys.argv[2], sys.argv[3], float(sys.argv[4])))
