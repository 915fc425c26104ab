#!/usr/bin/env python3
"""Time `cac eval` of a tree estimator on chains of one-token nodes (the
deepest tree a token count allows), per backend: what a node kernel's cost per
node shows when the depth grows. One root-to-leaf sequence of D tokens, the
node ids in chain order; the minimum of --repeat runs, end to end (compile,
JIT and run; eager loads LibTorch too).

    bench/trees/chain.py --cac build/bin/cac --depths 1000,2000,4096
"""
import argparse
import json
import os
import subprocess
import tempfile
import time


def chain_batch(depth):
    return {"token": {"logp": [[-2.0] * depth]}, "seq": {"reward": [1.0]},
            "tree": {"parent": [-1] + list(range(depth - 1)),
                     "node": [list(range(depth))]}}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cac", default="build/bin/cac")
    ap.add_argument("--method", default="stdlib/spo_tree.cac")
    ap.add_argument("--depths", default="1000,2000,4096")
    ap.add_argument("--backends", default="cpu,gpu-sim,eager")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    backends = args.backends.split(",")
    print("| depth | " + " | ".join(f"{b} s" for b in backends) + " |")
    print("| --- |" + " --- |" * len(backends))
    with tempfile.TemporaryDirectory() as tmp:
        for depth in (int(d) for d in args.depths.split(",")):
            path = os.path.join(tmp, f"chain{depth}.json")
            with open(path, "w") as f:
                json.dump(chain_batch(depth), f)
            row = []
            for backend in backends:
                best = float("inf")
                for _ in range(args.repeat):
                    start = time.perf_counter()
                    subprocess.run([args.cac, "eval", args.method, "--input", path,
                                    "--backend", backend, "--dtype", args.dtype],
                                   check=True, stdout=subprocess.DEVNULL)
                    best = min(best, time.perf_counter() - start)
                row.append(f"{best:.2f}")
            print(f"| {depth} | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
