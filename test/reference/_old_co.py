#!/usr/bin/env python3
"""Checks the stdlib objectives' compiled gradients on random ragged batches.

    check_objective.py --cac build/bin/cac [--objective all|ppo_clip,...] [--seeds 1-6]
                       [--max-len 64] [--tol 1e-9]

For every objective, seed and aggregation mode (token losses: all four), it writes a random
batch and runs `cac eval` four ways:

  cpu       the compiled kernels (the gradient operations the compiler derived)
  gpu-sim   the GPU's block-per-sequence kernels, their threads simulated by CPU threads
            (`--seq-block`/`--seq-items` from --sim-block/--sim-items: small blocks, so that
            the short sequences still span several tiles)
  eager     the eager LibTorch backend evaluating the same gradient operations
  autograd  `--backend eager --grad autograd`: LibTorch autograd of the eager forward pass

and requires the loss and the gradient of all four to agree, and to agree with the
independent Python reference (cacref.py: verl's formulas with hand-derived gradients) where
that reference models the objective (the advantages of gspo and sapo_loss, which the
objectives compute by importing their estimators, are read from cac's own output: the
estimators are checked by check_eval.py). Each number must satisfy
|got - want| <= tol * max(1, |want|). One line per case, then "N passed, M failed".
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cacref  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def batch_for(name, seed, max_len):
    """A random batch with the inputs the stdlib objective declares."""
    base = cacref.random_objective_batch("ppo_clip", seed, max_len)
    rng = random.Random(f"check-objective:{name}:{seed}")
    tok, seq = base["token"], base["seq"]
    lengths = [len(r) for r in tok["logp"]]
    B = len(lengths)
    keep = {
        "ppo_clip": ["logp_new", "logp", "adv"],
        "ppo_kl": ["logp_new", "logp", "adv", "logp_ref"],
        "gspo_token": ["logp_new", "logp", "adv"],
        "spo_loss": ["logp_new", "logp", "adv"],
        "sapo_loss": ["logp_new", "logp", "entropy", "value"],
        "gspo": ["logp_new", "logp"],
        "value_mse": [],
        "value_bce": [],
        "ppo_dual_clip": ["logp_new", "logp", "adv"],
        "ppo_dual_clip_kl": ["logp_new", "logp", "adv", "logp_ref"],
        "cispo": ["logp_new", "logp", "adv"],
        "gpg_loss": ["logp_new", "adv"],
        "dro": ["logp_new", "logp", "adv"],
        "dppo": ["logp_new", "logp", "adv"],
        "soft_gate": ["logp_new", "logp", "adv"],
        "gmpo": ["logp_new", "logp", "adv"],
        "kl_cov": ["logp_new", "logp", "adv"],
        "clip_cov": ["logp_new", "logp", "adv"],
    }[name]
    out = {"token": {k: tok[k] for k in keep}, "seq": {}}
    if name in ("sapo_loss", "gspo"):
        out["seq"]["reward"] = [rng.choice([0.0, 1.0]) for _ in range(B)]
    if name == "gspo":
        out["seq"]["group"] = [rng.randint(0, max(1, B // 3)) for _ in range(B)]
    if name == "value_mse":
        out["token"]["value_new"] = tok["value"]
        out["token"]["value"] = tok["value_old"]
        out["token"]["ret"] = tok["ret"]
        out["token"]["weight"] = tok.get("weight") or [[float(rng.random() < 0.7) for _ in
                                                         range(n)] for n in lengths]
    if name == "value_bce":
        out["token"] = {}
        out["seq"]["value_new"] = [rng.uniform(0.02, 0.98) for _ in range(B)]
        out["seq"]["reward"] = [rng.choice([0.0, 1.0, 0.25]) for _ in range(B)]
        # A seq-only batch still needs its sequences' lengths: one token input.
        out["token"]["pad"] = [[0.0] * n for n in lengths]
    if name in ("ppo_dual_clip", "ppo_dual_clip_kl", "cispo", "soft_gate"):
        # Ratios past 1 + eps and past the dual clip's 3 (A < 0), and past the +-20 clamp.
        out["token"]["logp_new"] = [[x + rng.choice([0.0, 0.0, 0.5, 1.3, -0.6, 21.0, -21.0])
                                     if rng.random() < 0.3 else x for x in r]
                                    for r in out["token"]["logp_new"]]
    if name == "dppo":
        # Probability moves on both sides of the thresholds, logp_new <= 0.
        out["token"]["logp_new"] = [[min(0.0, x + rng.choice([0.0, 0.3, -0.3, 1.0, -1.0]))
                                     for x in r] for r in out["token"]["logp_new"]]
    if name == "gmpo" and rng.random() < 0.5:
        # verl's GMPO expects sequence-level advantages; token-level ones work as well.
        out["token"]["adv"] = [[r[0]] * len(r) for r in out["token"]["adv"]]
    if name in ("kl_cov", "clip_cov"):
        # Ties of the covariance (equal log-probs under a sequence's one advantage), ratios
        # beyond the clip.
        out["token"]["logp_new"] = [[x + rng.choice([0.0, 0.0, 0.4, -0.5, 1.2])
                                     if rng.random() < 0.3 else x for x in r]
                                    for r in out["token"]["logp_new"]]
        for r in out["token"]["logp_new"]:
            if len(r) > 2 and rng.random() < 0.5:
                r[1] = r[0]
    if name in ("gspo", "gspo_token"):
        # Keep sequence ratios near 1 so that both sides of the small clip occur.
        out["token"]["logp_new"] = [[x + rng.gauss(0, 2e-4) for x in r] for r in tok["logp"]]
    return out


def reference(name, batch, got, mode, params):
    """(loss, {domain: {var: grad}}) from cacref, or None where it has no model."""
    b = cacref.Batch(batch)
    t = batch["token"]
    if name == "ppo_clip":
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], t["adv"], agg=mode)
    elif name == "ppo_kl":
        if mode != "token-mean":
            return None  # the reference adds its KL term as a token-mean only
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], t["adv"], agg=mode,
                                     logp_ref=t["logp_ref"], kl=3, beta=0.001)
    elif name == "gspo_token":
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], t["adv"], ratio="seq_token",
                                     eps_low=3e-4, eps_high=4e-4, agg=mode)
    elif name == "spo_loss":
        w = [[1.0 if math.exp(x) < 0.9 else 0.0 for x in r] for r in t["logp"]]
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], t["adv"], weight=w, agg=mode,
                                     clamp_log_ratio=10)
    elif name == "sapo_loss":
        segs = [cacref.sapo_segments(h, 30)[0] for h in t["entropy"]]
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], got["token"]["adv"],
                                     ratio="seg", segments=segs, eps_low=0.2, eps_high=0.28,
                                     dual_clip=3, agg=mode, clamp_log_ratio=20)
    elif name == "gspo":
        adv = [[a] * len(r) for a, r in zip(got["seq"]["adv"], t["logp"])]
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], adv, ratio="seq",
                                     eps_low=3e-4, eps_high=4e-4, agg="seq-mean-token-mean")
    elif name == "value_mse":
        loss, g = cacref.value_loss_clipped(t["value_new"], t["value"], t["ret"], 0.2,
                                            t["weight"], mode)
    elif name == "value_bce":
        loss, g = cacref.bce_loss(batch["seq"]["value_new"], batch["seq"]["reward"])
        return loss, {"seq": {"value_new": g}}
    elif name in cacref.VERL_OBJECTIVES:
        loss, g = cacref.VERL_OBJECTIVES[name](t, mode, params)
    else:
        return None
    return loss, {"token": {WRT[name]: g}}


WRT = {"ppo_clip": "logp_new", "ppo_kl": "logp_new", "gspo_token": "logp_new",
       "spo_loss": "logp_new", "sapo_loss": "logp_new", "gspo": "logp_new",
       "value_mse": "value_new", "value_bce": "value_new"}
SEQ_LOSS = {"gspo", "value_bce"}
WRT.update({"ppo_dual_clip": "logp_new", "ppo_dual_clip_kl": "logp_new", "cispo": "logp_new",
            "gpg_loss": "logp_new", "dppo": "logp_new", "soft_gate": "logp_new",
            "gmpo": "logp_new", "dro": "logp_new"})
SEQ_LOSS |= {"gmpo"}
# Parameter sets each objective runs with besides its defaults ({}): --param k=v.
VARIANTS = {
    "ppo_dual_clip": [{"dual_clip": 1.5, "eps_high": 0.28}],
    "ppo_dual_clip_kl": [{"kl_type": k, "straight": st, "kl_coef": 0.1}
                         for k in (1, 2, 3, 4) for st in (0, 1)],
    "cispo": [{"eps_low": 1.0, "eps_high": 0.28}],
    "dppo": [{"kind": 1}, {"kind": 1, "eps_low": 0.05, "eps_high": 0.02, "ratio_cap": 20},
             {"eps_low": 0.05, "eps_high": 0.1}],
    "soft_gate": [{"tau_pos": 2.0, "tau_neg": 0.5}],
    "gmpo": [{"eps_low": 0.2, "eps_high": 0.1}],
    "dro": [{"beta": 2.0}, {"beta": 0.01}],
}


# KL-Cov and Clip-Cov: counts from one token to all of them, covariance bands that take
# tokens at the default bounds and at wide ones, other seeds.
WRT.update({"kl_cov": "logp_new", "clip_cov": "logp_new"})
VARIANTS.update({
    "kl_cov": [{"kl_cov_ratio": 0.1}, {"kl_cov_ratio": 0.5, "ppo_kl_coef": 1.0},
               {"kl_cov_ratio": 1.0}, {"kl_cov_ratio": 0.0}],
    "clip_cov": [{"clip_cov_lb": 0.0, "clip_cov_ratio": 0.2},
                 {"clip_cov_lb": -1.0, "clip_cov_ub": 1.0, "clip_cov_ratio": 0.5, "seed": 3},
                 {"clip_cov_lb": -5.0, "clip_cov_ub": 5.0, "clip_cov_ratio": 2.0,
                  "eps_low": 0.1, "eps_high": 0.28, "seed": -7}],
})


def flat(x):
    if isinstance(x, list):
        for v in x:
            yield from flat(v)
    else:
        yield x


def compare(a, b, tol):
    """Largest error of b against a, or None on a shape mismatch."""
    fa, fb = list(flat(a)), list(flat(b))
    if len(fa) != len(fb):
        return None
    err = 0.0
    for x, y in zip(fa, fb):
        if math.isnan(x) or math.isnan(y):
            return math.inf
        err = max(err, abs(x - y) / max(1.0, abs(x)))
    return err


def run(cac, path, backend, grad, mode, extra=()):
    cmd = [cac, "eval", path, "--input", mode[1], "--backend", backend, "--grad", grad]
    cmd += list(extra)
    if mode[0]:
        cmd += ["--aggregation", mode[0]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout, parse_constant=cacref.reject_non_json)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cac", required=True)
    ap.add_argument("--stdlib", default=os.path.join(REPO, "stdlib"))
    ap.add_argument("--objective", default="all")
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--tol", type=float, default=1e-9)
    ap.add_argument("--cac-arg", action="append", default=[],
                    help="an extra argument of every cac run (e.g. --cac-arg=--dtype=f32)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--sim-block", type=int, default=8,
                    help="threads per block of the gpu-sim run (default 8)")
    ap.add_argument("--sim-items", type=int, default=2,
                    help="tokens per thread per tile of the gpu-sim run (default 2)")
    args = ap.parse_args()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    names = list(WRT) if args.objective == "all" else args.objective.split(",")
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            path = os.path.join(args.stdlib, name + ".cac")
            var = WRT[name]
            dom = "seq" if name == "value_bce" else "token"
            for seed in seeds:
                batch = batch_for(name, seed, args.max_len)
                bpath = os.path.join(tmp, f"{name}-{seed}.json")
                with open(bpath, "w") as f:
                    json.dump(batch, f)
                modes = [None] if name in SEQ_LOSS else MODES
                # The parameter variants run in the first mode only: the aggregation is
                # independent of the per-token loss.
                for params, mode in [(q, m) for q in [{}] + VARIANTS.get(name, [])
                                     for m in (modes if not q else modes[:1])]:
                    pargs = [f"--param={k}={v}" for k, v in params.items()] + args.cac_arg
                    tag = f"{name} seed={seed} aggregation={mode or 'seq-mean'}" + "".join(
                        f" {k}={v}" for k, v in params.items())
                    try:
                        sim = (f"--seq-block={args.sim_block}", f"--seq-items={args.sim_items}")
                        ways = {"cpu": ("cpu", "compiled", tuple(pargs)),
                                "gpu-sim": ("gpu-sim", "compiled", sim + tuple(pargs)),
                                "eager": ("eager", "compiled", tuple(pargs)),
                                "autograd": ("eager", "autograd", tuple(pargs))}
                        futs = {k: pool.submit(run, args.cac, path, be, gr, (mode, bpath), ex)
                                for k, (be, gr, ex) in ways.items()}
                        outs = {k: f.result() for k, f in futs.items()}
                    except Exception as e:  # noqa: BLE001
                        print(f"FAIL {tag}: {e}")
                        failed += 1
                        continue
                    want = outs["autograd"]
                    errs = []
                    for k in ("cpu", "gpu-sim", "eager"):
                        errs.append((f"{k} loss vs autograd",
                                     compare(want["objective"]["loss"],
                                             outs[k]["objective"]["loss"], args.tol)))
                        errs.append((f"{k} grad vs autograd",
                                     compare(want[dom]["grad_" + var],
                                             outs[k][dom]["grad_" + var], args.tol)))
                    if name == "gspo":
                        # GSPO's advantage is GRPO's (stdlib/grpo.cac's defaults).
                        want_adv = cacref.group_normalized(batch["seq"]["reward"],
                                                           batch["seq"]["group"], 1e-6, 0, 0)
                        for k in ("cpu", "eager"):
                            errs.append((f"{k} adv vs reference",
                                         compare(want_adv, outs[k]["seq"]["adv"], args.tol)))
                    ref = reference(name, batch, outs["cpu"], mode or "seq-mean", params)
                    if ref is not None:
                        rloss, rgrad = ref
                        errs.append(("cpu loss vs reference",
                                     compare(rloss, outs["cpu"]["objective"]["loss"],
                                             args.tol)))
                        errs.append(("cpu grad vs reference",
                                     compare(rgrad[dom][var], outs["cpu"][dom]["grad_" + var],
                                             args.tol)))
                    bad = [(w, e) for w, e in errs if e is None or e > args.tol]
                    worst = max((e for _, e in errs if e is not None), default=0.0)
                    n = sum(len(r) for r in batch["token"].get(
                        "logp", batch["token"].get("value_new", batch["token"].get("pad", []))))
                    if bad:
                        failed += 1
                        print(f"FAIL {tag}: " + "; ".join(
                            f"{w}: {'shape' if e is None else f'{e:.3g}'}" for w, e in bad))
                    else:
                        passed += 1
                        print(f"PASS {tag} tokens={n} checks={len(errs)} max_err={worst:.3g}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
