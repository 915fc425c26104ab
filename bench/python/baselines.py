#!/usr/bin/env python3
"""cac through the Python package against what a verl user runs instead, on
the same device in the same run (docs/benchmarks.md, "Python package").

    PYTHONPATH=build/python /usr/bin/python3 bench/python/baselines.py \
        [--device cuda] [--shapes 4096x4096,256x4096] [--iters 21] \
        [--bundles DIR[:DIR]]   # bundle folders holding gae, verl_grpo and
                                # verl_rloo: no compiler needed

For each shape B x T (right-padded rows of ragged length T/2..T, float32,
groups of 8 by uid strings, the outcome reward on the last valid token as
verl puts it), each row the milliseconds per call in the caller's terms:
wall time from a synchronized device to the outputs ready (the host's work,
the launches and a synchronization included), median and minimum over
--iters calls after a warm-up.

  cac (verl adapter)  cac.verl.advantage_estimator on verl's padded tensors
                      and uid array, as a verl user swaps it in (GAE with
                      whiten=True: verl whitens GAE's advantages);
  cac (packed)        the estimator on packed tokens and lengths;
  verl loop           verl's own loop (test/python/verl_reference.py, a
                      transcription of verl's code, not verl);
  verl vectorized     grpo_vectorized / rloo_vectorized (the same file);
  torch.compile step  GAE's loop with its step compiled by torch.compile
                      (the whole loop unrolls T steps into one graph: at
                      T = 4096 its compilation does not finish in a device
                      session, so it is not a row).

Each baseline's output is checked against cac's before it is timed (GRPO and
RLOO on groups of two or more: verl's forms differ on a group of one).
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

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "test" / "python"))
from verl_reference import (ref_gae, ref_grpo, ref_grpo_vectorized,  # noqa: E402
                            ref_rloo, ref_rloo_vectorized)


def timed(iters, fn, sync=lambda: None):
    """(median, min) milliseconds over `iters` calls after a warm-up, each
    call from a synchronized device (`sync`) to its outputs ready: the
    median is the typical call, the minimum the call on an idle machine."""
    fn()
    sync()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def timed_in_turn(iters, fns, sync=lambda: None):
    """timed() for several functions called in turn, one call of each per
    round: [(median, min)] in the order of `fns`. Their ratios are then
    measured over the same moments, which on a shared machine whose speed
    drifts is fairer than one block of calls after another."""
    for fn in fns:
        fn()
    sync()
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, ts in zip(fns, times):
            t = time.perf_counter()
            fn()
            sync()
            ts.append((time.perf_counter() - t) * 1e3)
    return [(statistics.median(ts), min(ts)) for ts in times]


def make_batch(B, T, device, seed=1):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    reward = torch.randint(0, 2, (B,), generator=g).float()
    token_rewards = torch.zeros(B, T)
    token_rewards[torch.arange(B), lengths - 1] = reward
    values = torch.randn(B, T, generator=g) * mask
    uids = np.array([f"uid-{i // 8}" for i in range(B)], dtype=object)
    b = dict(mask=mask, token_rewards=token_rewards, values=values, reward=reward)
    b = {k: v.to(device) for k, v in b.items()}
    b.update(uids=uids, lengths=lengths.to(device), group=torch.arange(B, device=device) // 8)
    return b


def close(got, want, what, tol=2e-4):
    err = float(((got - want).abs() / want.abs().clamp(min=1)).max())
    if not err <= tol:
        raise SystemExit(f"{what}: differs from cac by {err:.3g} (tol {tol})")


def compiled_gae_step():
    """GAE's step as verl writes it, compiled; the loop stays in Python."""
    def step(r, v, m, next_v, run, gamma: float, lam: float):
        delta = r + gamma * next_v - v
        cand = delta + gamma * lam * run
        return v * m + (1 - m) * next_v, cand * m + (1 - m) * run
    step = torch.compile(step, dynamic=True)

    def gae(rewards, values, mask, gamma, lam):
        B, T = values.shape
        next_v = torch.zeros(B, device=values.device)
        run = torch.zeros(B, device=values.device)
        advs = [None] * T
        for t in reversed(range(T)):
            next_v, run = step(rewards[:, t], values[:, t], mask[:, t], next_v, run, gamma, lam)
            advs[t] = run
        adv = torch.stack(advs, dim=1)
        return cac.verl.masked_whiten(adv, mask), adv + values
    return gae


def rows_for(name, b, load, iters, sync, compiled):
    """{row: (median, min)} for one method on batch b."""
    mask, rewards, uids = b["mask"], b["token_rewards"], b["uids"]
    packed_mask = mask.bool()
    few = max(3, iters // 7)
    t = {}
    if name == "GAE":
        params = {"gamma": 1.0, "lambda": 0.95}
        fn = cac.verl.advantage_estimator(load("gae"), params, whiten=True)
        est = fn.estimator
        adv, _ = fn(rewards, mask, values=b["values"])
        t["cac (verl adapter)"] = timed(iters, lambda: fn(rewards, mask, values=b["values"]), sync)
        value = b["values"][packed_mask]
        t["cac (packed)"] = timed(iters, lambda: est(value=value, reward=b["reward"],
                                                      lengths=b["lengths"]), sync)
        loop = lambda: ref_gae(rewards, b["values"], mask, 1.0, 0.95)  # noqa: E731
        close(loop()[0][packed_mask], adv[packed_mask], "verl's GAE loop")
        t["verl loop"] = timed(few, loop, sync)
        if compiled:
            gae = compiled_gae_step()
            step = lambda: gae(rewards, b["values"], mask, 1.0, 0.95)  # noqa: E731
            close(step()[0][packed_mask], adv[packed_mask], "the compiled GAE step")
            t["torch.compile step"] = timed(few, step, sync)
        return t
    path, loop_ref, vec_ref = {"GRPO": ("verl_grpo", ref_grpo, ref_grpo_vectorized),
                               "RLOO": ("verl_rloo", ref_rloo, ref_rloo_vectorized)}[name]
    fn = cac.verl.advantage_estimator(load(path))
    est = fn.estimator
    adv, _ = fn(rewards, mask, index=uids)
    t["cac (verl adapter)"] = timed(iters, lambda: fn(rewards, mask, index=uids), sync)
    t["cac (packed)"] = timed(iters, lambda: est(reward=b["reward"], group=b["group"],
                                                  lengths=b["lengths"]), sync)
    for row, ref, n in [("verl loop", loop_ref, few), ("verl vectorized", vec_ref, iters)]:
        close(ref(rewards, mask, uids)[0], adv, f"verl's {name} ({row})")
        t[row] = timed(n, lambda: ref(rewards, mask, uids), sync)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shapes", default="256x1024")
    ap.add_argument("--iters", type=int, default=21)
    ap.add_argument("--bundles", help="folders of bundles, ':'-separated "
                    "(gae, verl_grpo, verl_rloo), else compiled from the sources")
    ap.add_argument("--no-compile", action="store_true", help="no torch.compile row")
    args = ap.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def load(name):
        if args.bundles:
            found = [d for d in args.bundles.split(":") if (Path(d) / name).is_dir()]
            if not found:
                raise SystemExit(f"no bundle '{name}' in {args.bundles}")
            return str(Path(found[0]) / name)
        return cac.verl.GRPO if name == "verl_grpo" else (
            cac.verl.RLOO if name == "verl_rloo" else str(REPO / "stdlib" / f"{name}.cac"))

    compiled = not args.no_compile and hasattr(torch, "compile")
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"{where}, torch {torch.__version__}; ms per call, median (min) of {args.iters} "
          f"(the loops and the compiled step: of {max(3, args.iters // 7)})")
    cols = ["cac (verl adapter)", "cac (packed)", "verl loop", "verl vectorized",
            "torch.compile step"]
    print("| method | B x T | " + " | ".join(cols) + " | best baseline / cac (verl adapter) |")
    print("| --- " * (len(cols) + 3) + "|")
    for shape in args.shapes.split(","):
        B, T = (int(x) for x in shape.split("x"))
        b = make_batch(B, T, device)
        for name in ("GAE", "GRPO", "RLOO"):
            t = rows_for(name, b, load, args.iters, sync, compiled)
            cells = [f"{t[c][0]:.3f} ({t[c][1]:.3f})" if c in t else "-" for c in cols]
            best = min(v[0] for k, v in t.items() if not k.startswith("cac"))
            print(f"| {name} | {B} x {T} | " + " | ".join(cells)
                  + f" | {best / t['cac (verl adapter)'][0]:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
