"""same_as_each.py [--tol T] SEVERAL ONE...: SEVERAL, the JSON array `cac eval`
prints for several --input batches, holds ONE... (each batch's output alone)
in order, numbers within T (0: equal); prints one line when it does, else
fails naming the first difference."""

import json
import sys

args = sys.argv[1:]
tol = 0.0
if args[0] == "--tol":
    tol, args = float(args[1]), args[2:]
several = json.load(open(args[0]))
each = [json.load(open(p)) for p in args[1:]]


def diff(a, b, path):
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return None if abs(a - b) <= tol * max(1.0, abs(b)) else f"{path}: {a} != {b}"
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


if not isinstance(several, list):
    sys.exit(f"{args[0]}: not a JSON array")
d = diff(several, each, "")
if d:
    sys.exit(f"differs at {d}")
print("the same outputs as each batch alone")
