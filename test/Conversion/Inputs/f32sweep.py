"""Shared by exp-accuracy.py and log-accuracy.py: f32 rounding and spacing,
and one `cac eval --dtype f32` of an estimator of a token input x on a sweep
of x in rows of 4,000, with the special values as a last row."""
import json
import math
import struct
import subprocess


def f32(v):
    return struct.unpack("f", struct.pack("f", v))[0]


def ulp(v):
    """The spacing of f32 values at |v| (2^-149 below the normal range)."""
    v = abs(v)
    if v < 2.0 ** -126:
        return 2.0 ** -149
    return 2.0 ** (math.frexp(v)[1] - 24)


def evaluate(cac, source, batch, xs, specials):
    """The rows of xs and the specials, and the token outputs of `source`
    on them (the batch written to the file `batch`)."""
    rows = [xs[i:i + 4000] for i in range(0, len(xs), 4000)] + [specials]
    with open(batch, "w") as out:
        json.dump({"token": {"x": rows}}, out)
    proc = subprocess.run(
        [cac, "eval", source, "--input", batch, "--dtype", "f32"],
        capture_output=True, text=True, check=True)
    return rows, json.loads(proc.stdout)["token"]
