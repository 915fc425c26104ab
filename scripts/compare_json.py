#!/usr/bin/env python3
"""Compares two `cac eval` outputs number by number; prints the largest error."""
import argparse
import json
import sys


def flatten(x, path=""):
    if isinstance(x, dict):
        for k in sorted(x):
            yield from flatten(x[k], f"{path}.{k}" if path else k)
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from flatten(v, f"{path}[{i}]")
    else:
        yield path, x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    a = dict(flatten(json.load(open(args.a))))
    b = dict(flatten(json.load(open(args.b))))
    if a.keys() != b.keys():
        print(f"{args.label}: different outputs: {sorted(a.keys() ^ b.keys())[:5]}")
        return 1
    worst, where = 0.0, ""
    for k in a:
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool)
                      for x in (a[k], b[k]))
        if not numbers:  # names (an objective's aggregation, wrt) must match
            err = 0.0 if a[k] == b[k] else float("inf")
        else:
            err = abs(a[k] - b[k]) / max(1.0, abs(b[k]))
        if err > worst:
            worst, where = err, k
    ok = worst <= args.tol
    print(f"{args.label}: {len(a)} values, max error {worst:.3g}"
          + (f" at {where}" if where else "") + (" OK" if ok else " FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
