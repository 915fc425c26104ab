#!/usr/bin/env python3
"""The Python package's call overhead (docs/python.md, "Speed").

    PYTHONPATH=build/python CAC_COMPILER=build/bin/cac \
        /usr/bin/python3 bench/python/bench.py [--shape 256x4096] [--iters 21] [--threads 2]

For each method at B x T (ragged lengths T/2..T, float32, groups of 8), the
median milliseconds of:
  runtime   the runtime's call, BundleEstimator::run on packed inputs with
            the batch built beforehand (through the extension's thin
            binding: what cac-run's C++ pays);
  packed    est(value=[N], reward=[B], lengths=[B]): the package's checks,
            the batch from the lengths, the run;
  padded    est(value=[B, T], reward=[B], mask=[B, T]): the same from the
            padded layout, outputs unpacked to [B, T];
  pad<->pack  the padded path's own work alone: the batch from the mask,
            packing the inputs and unpacking the outputs;
  verl      the same method as verl's loop (test/python/verl_reference.py, a
            transcription of verl's core_algos loops in PyTorch, not verl).
A benchmark, not a test; it checks only that the package's outputs equal
the runtime's.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import cac
import cac.verl
from cac import _cac

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "python"))
from verl_reference import ref_gae, ref_grpo  # noqa: E402


def median_ms(iters, fn):
    fn()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def make_batch(B, T, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    value = torch.randn(B, T, generator=g)
    reward = torch.randint(0, 2, (B,), generator=g).float()
    token_rewards = torch.zeros(B, T)
    token_rewards[torch.arange(B), lengths - 1] = reward
    logp = -torch.rand(B, T, generator=g) * 3
    group = torch.arange(B) // 8
    uids = np.array([f"uid-{int(i)}" for i in group], dtype=object)
    return dict(lengths=lengths, mask=mask, value=value, reward=reward, logp=logp,
                token_rewards=token_rewards, group=group, uids=uids)


def bench_method(name, est, b, iters, threads):
    mask, lengths = b["mask"], b["lengths"]
    inputs = {k: b[k] for k in est.inputs if k != "group"}
    packed = {k: (v[mask] if est.inputs[k] == "token" else v) for k, v in inputs.items()}
    structure = {"group": b["group"]} if "group" in est.inputs else {}

    bundle = est._bundle(torch.float32)
    batch = _cac.Batch.from_lengths(lengths)
    if structure:
        batch.set_groups(b["group"])
    runtime = median_ms(iters, lambda: bundle.run(packed, batch, est.params, threads))
    packed_ms = median_ms(iters, lambda: est(lengths=lengths, threads=threads,
                                             **packed, **structure))
    padded_ms = median_ms(iters, lambda: est(mask=mask, threads=threads,
                                             **inputs, **structure))

    def convert():
        pb = _cac.Batch.from_mask(mask)
        for v in inputs.values():
            if v.dim() == 2:
                pb.pack(v)
        for _ in est.outputs:
            pb.unpack(torch.empty(pb.num_tokens))
    convert_ms = median_ms(iters, convert)

    out = est(mask=mask, threads=threads, **inputs, **structure)
    want = bundle.run(packed, batch, est.params, threads)
    for k in est.outputs:
        assert torch.equal(out[k][mask], want[k]), f"{name}.{k} differs"

    if name == "gae":
        verl = median_ms(max(3, iters // 4), lambda: ref_gae(
            b["token_rewards"], b["value"], mask.float(), 1.0, 0.95))
    elif name == "verl_grpo":
        verl = median_ms(max(3, iters // 4), lambda: ref_grpo(
            b["token_rewards"], mask.float(), b["uids"]))
    else:
        verl = float("nan")
    return runtime, packed_ms, padded_ms, convert_ms, verl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="256x4096")
    ap.add_argument("--iters", type=int, default=21)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    B, T = (int(x) for x in args.shape.split("x"))
    b = make_batch(B, T)
    methods = {"gae": cac.load(REPO / "stdlib" / "gae.cac"),
               "sae": cac.load(REPO / "stdlib" / "sae.cac", params={"lambda": 0.95}),
               "verl_grpo": cac.load(cac.verl.GRPO)}
    print(f"B x T = {B} x {T} (ragged, {int(b['lengths'].sum())} tokens), float32, "
          f"{args.threads} threads, median of {args.iters}; torch {torch.__version__}")
    print("| method | runtime ms | packed ms | packed over runtime | padded ms "
          "| pad<->pack ms | verl loop ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, est in methods.items():
        r, p, d, c, v = bench_method(name, est, b, args.iters, args.threads)
        print(f"| {name} | {r:.2f} | {p:.2f} | {100 * (p / r - 1):+.1f}% | {d:.2f} "
              f"| {c:.2f} | {v:.1f} |")


if __name__ == "__main__":
    main()
