#!/usr/bin/env python3
"""The Python package's call overhead (docs/python.md, "Speed").

    PYTHONPATH=build/python CAC_COMPILER=build/bin/cac \
        /usr/bin/python3 bench/python/bench.py [--shape 256x4096] [--iters 21] [--threads 2]

For each method at B x T (ragged lengths T/2..T, float32, groups of 8), the
median (and minimum) milliseconds of:
  runtime   the runtime's call, BundleEstimator::run on packed inputs with
            the batch built beforehand (through the extension's thin
            binding);
  runtime+batch  the same with the PackedBatch built from the lengths (and
            group ids) in the call, as a C++ trainer pays per batch;
  packed    est(value=[N], reward=[B], lengths=[B]): the package's checks,
            the batch from the lengths, the run;
  padded    est(value=[B, T], reward=[B], mask=[B, T]): the same from the
            padded layout, outputs unpacked to [B, T];
  padded out=  the same writing the outputs into [B, T] tensors the caller
            keeps across calls (est(..., out={...}));
  pad<->pack  the padded path's own work alone: the batch from the mask,
            packing the token inputs and unpacking the token outputs;
  verl      the same method as verl's loop (test/python/verl_reference.py, a
            transcription of verl's core_algos loops in PyTorch, not verl).
Then the minor page faults per padded call, plain and with out= (memory
the allocator gave back to the kernel and touches again; getrusage).
The first three columns are timed in turn, one call of each per round,
and so are the three padded ones (baselines.timed_in_turn), so that their
ratios are measured over the same moments of a shared machine.
A benchmark, not a test; it checks only that the package's outputs equal
the runtime's.
"""

import argparse
import resource
import sys
from pathlib import Path

import numpy as np
import torch

import cac
import cac.verl
from cac import _batch, _cac

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "python"))
from verl_reference import ref_gae, ref_grpo  # noqa: E402

from baselines import timed, timed_in_turn  # noqa: E402


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


def faults(iters, fn):
    """Minor page faults per call of fn, after a warm-up."""
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(iters):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / iters


def bench_method(name, est, b, iters, threads):
    mask, lengths = b["mask"], b["lengths"]
    inputs = {k: b[k] for k in est.inputs if k != "group"}
    packed = {k: (v[mask] if est.inputs[k] == "token" else v) for k, v in inputs.items()}
    structure = {"group": b["group"]} if "group" in est.inputs else {}

    bundle = est._bundle(torch.float32)
    batch = _cac.Batch.from_lengths(lengths)
    if structure:
        batch.set_groups(b["group"])

    def runtime_with_batch():
        pb = _cac.Batch.from_lengths(lengths)
        if structure:
            pb.set_groups(b["group"])
        bundle.run(packed, pb, est.params, threads)

    def packed_call():
        est(lengths=lengths, threads=threads, **packed, **structure)

    # The calls on packed inputs in turn (the columns compared), then the
    # padded ones in turn: a padded call's copies would evict the packed
    # calls' inputs from the cache.
    t = dict(zip(("runtime", "runtime+batch", "packed"), timed_in_turn(
        iters, [lambda: bundle.run(packed, batch, est.params, threads),
                runtime_with_batch, packed_call])))
    kept = {k: torch.empty_like(v) for k, v in
            est(mask=mask, threads=threads, **inputs, **structure).items()}

    def convert():
        layout = _batch.make_layout({"mask": mask})
        for v in inputs.values():
            if v.dim() == 2:
                layout.pack(v)
        for _ in est.outputs:
            layout.to_caller(torch.empty(layout.N))
    t.update(zip(("padded", "padded out=", "pad<->pack"), timed_in_turn(
        iters, [lambda: est(mask=mask, threads=threads, **inputs, **structure),
                lambda: est(mask=mask, threads=threads, out=kept, **inputs,
                            **structure),
                convert])))

    t["faults"] = (faults(iters, lambda: est(mask=mask, threads=threads, **inputs,
                                             **structure)),
                   faults(iters, lambda: est(mask=mask, threads=threads, out=kept,
                                             **inputs, **structure)))

    out = est(mask=mask, threads=threads, **inputs, **structure)
    want = bundle.run(packed, batch, est.params, threads)
    for k in est.outputs:
        assert torch.equal(out[k][mask], want[k]), f"{name}.{k} differs"

    few = max(3, iters // 8)
    if name == "gae":
        t["verl"] = timed(few, lambda: ref_gae(b["token_rewards"], b["value"],
                                               mask.float(), 1.0, 0.95))
    elif name == "verl_grpo":
        t["verl"] = timed(few, lambda: ref_grpo(b["token_rewards"], mask.float(),
                                                b["uids"]))
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="256x4096")
    ap.add_argument("--iters", type=int, default=41)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    B, T = (int(x) for x in args.shape.split("x"))
    b = make_batch(B, T)
    methods = {"gae": cac.load(REPO / "stdlib" / "gae.cac"),
               "sae": cac.load(REPO / "stdlib" / "sae.cac", params={"lambda": 0.95}),
               "verl_grpo": cac.load(cac.verl.GRPO)}
    print(f"B x T = {B} x {T} (ragged, {int(b['lengths'].sum())} tokens), float32, "
          f"{args.threads} threads, median (min) of {args.iters} calls; torch {torch.__version__}")
    cols = ["runtime", "runtime+batch", "packed", "padded", "padded out=", "pad<->pack",
            "verl"]
    print("| method | " + " | ".join(f"{c} ms" for c in cols)
          + " | packed over runtime+batch | faults: padded, out= |")
    print("| --- " * (len(cols) + 3) + "|")
    for name, est in methods.items():
        t = bench_method(name, est, b, args.iters, args.threads)
        cells = [f"{t[c][0]:.2f} ({t[c][1]:.2f})" if c in t else "-" for c in cols]
        over = [100 * (t["packed"][i] / t["runtime+batch"][i] - 1) for i in (0, 1)]
        print(f"| {name} | " + " | ".join(cells) + f" | {over[0]:+.0f}% ({over[1]:+.0f}%) | "
              f"{t['faults'][0]:.0f}, {t['faults'][1]:.0f} |")


if __name__ == "__main__":
    main()
