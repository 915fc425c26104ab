"""log on the CPU in f32 (cac-cpu-math) against the exact value: runs
`cac eval --dtype f32` of log.cac on a sweep of x over every binade of the
positive floats (subnormals, around 1, the largest), prints the largest
error in ulps of the exact result rounded to f32, then each special value's
result.

  python3 log-accuracy.py CAC LOG.CAC WORKDIR
"""
import math
import sys

from f32sweep import evaluate, f32, ulp

cac, source, work = sys.argv[1:4]

# 160 points in each binade from 2^-149 to 2^128, 1,000 more from 0.5 to 2
# (where log is near 0), and the specials.
xs = [f32(2.0 ** (-149 + k / 160)) for k in range(277 * 160)]
xs += [f32(0.5 + 1.5 * k / 999) for k in range(1000)]
specials = [1.0, 2.0, 0.5, 0.0, -0.0, -1.0, 1e-45, 3.4028234e38, 1e39,
            -1e39, 2.718281828]
rows, out = evaluate(cac, source, f"{work}/log-batch.json", xs, specials)
ys, kinds = out["y"], out["kind"]

worst, at = 0.0, None
for row, yrow in zip(rows[:-1], ys[:-1]):
    for x, y in zip(row, yrow):
        if x <= 0.0 or x == math.inf:
            continue
        exact = math.log(x)
        err = 0.0 if exact == 0.0 and y == 0.0 else abs(y - exact) / ulp(
            exact if exact != 0.0 else 2.0 ** -149)
        if err > worst:
            worst, at = err, x
print(f"max error {worst:.2f} ulp at x = {at!r}")
names = {1.0: "nan", 2.0: "inf", 3.0: "-inf"}
for x, y, k in zip(specials, ys[-1], kinds[-1]):
    print(f"log({x!r}) = {names.get(k, y)!r}")
