"""exp on the CPU in f32 (cac-cpu-math) against the exact value: runs
`cac eval --dtype f32` of exp.cac on a sweep of x over [-110, 95] (every
float region: overflow, normal results, subnormal results, underflow) and
prints the largest error in ulps of the exact result rounded to f32 (for a
subnormal result, in units of the smallest subnormal), then each special
value's result.

  python3 exp-accuracy.py CAC EXP.CAC WORKDIR
"""
import math
import sys

from f32sweep import evaluate, f32, ulp

cac, source, work = sys.argv[1:4]

# 40,000 points from -110 to 95 (f32 inputs), and the specials.
xs = [f32(-110.0 + 205.0 * k / 39999) for k in range(40000)]
specials = [0.0, -0.0, 1.0, -1.0, 1e-30, 88.72283, 88.72284, 89.0, -87.3,
            -103.97, -103.98, -104.0, 1e30, -1e30]
rows, out = evaluate(cac, source, f"{work}/exp-batch.json", xs, specials)
ys = out["y"]

worst, at = 0.0, None
for row, yrow in zip(rows[:-1], ys[:-1]):
    for x, y in zip(row, yrow):
        try:
            exact = math.exp(x)
        except OverflowError:
            exact = math.inf
        ref = f32(exact) if exact < 3.4028235677973366e38 else math.inf
        if ref == math.inf:
            err = 0.0 if y is None else math.inf  # printed as null: inf
        else:
            err = abs(y - exact) / ulp(exact)
        if err > worst:
            worst, at = err, x
print(f"max error {worst:.2f} ulp at x = {at!r}")
for x, y in zip(specials, ys[-1]):
    print(f"exp({x!r}) = {y!r}")
