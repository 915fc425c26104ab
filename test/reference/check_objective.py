#!/usr/bin/env python3
"""Checks the stdlib objectives' compiled gradients on random ragged batches.

    check_objective.py --cac build/bin/cac [--objective all|ppo_clip,...] [--seeds 1-6]
                       [--max-len 64] [--tol 1e-9]

For every objective, seed and aggregation mode (token losses: all four), it writes a random
batch (the mode and the parameter variant in its "params") and runs `cac eval` four ways,
each once on all of an objective's batches (several --input files):

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
    if name in cacref.IS_OBJECTIVES:
        return with_is_weight(batch_for(name[:-len("_is")], seed, max_len), name, seed)
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


def with_is_weight(batch, name, seed):
    """The base objective's batch plus verl's rollout_is_weights as `is_weight`: per token
    min(exp(k/64), 2) (TIS), the threshold 2 itself, 0 (rejected tokens); whole sequences
    of one weight (sequence-level IS), of weight 0 (rejected sequences: out of B in the
    seq-mean modes), length-1 sequences among them; at least one token kept."""
    rng = random.Random(f"check-objective-is:{name}:{seed}")
    rows = []
    for r in batch["token"]["logp_new"]:
        u = rng.random()
        if u < 0.15:
            rows.append([0.0] * len(r))
        elif u < 0.4:
            rows.append([rng.choice([2.0, 0.5, min(math.exp(rng.randint(-48, 48) / 64), 2.0)])]
                        * len(r))
        else:
            rows.append([rng.choice([0.0, 2.0, min(math.exp(rng.randint(-48, 48) / 64), 2.0)])
                         if rng.random() < 0.35 else min(math.exp(rng.randint(-48, 48) / 64), 2.0)
                         for _ in r])
    if not any(x > 0 for r in rows for x in r):
        i = rng.randrange(len(rows))
        rows[i] = [1.0] * len(rows[i])
    batch["token"]["is_weight"] = [[cacref.f32(x) for x in r] for r in rows]
    return batch


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
                                     logp_ref=t["logp_ref"], kl=int(params.get("kl_type", 3)),
                                     beta=params.get("kl_coef", 0.001),
                                     kl_straight=params.get("straight", 0) > 0)
    elif name == "gspo_token":
        loss, g = cacref.policy_loss(t["logp_new"], t["logp"], t["adv"], ratio="seq_token",
                                     eps_low=3e-4, eps_high=4e-4, agg=mode,
                                     seq_log_ratio_max=params.get("log_ratio_max", 0.0))
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
    elif name in cacref.IS_OBJECTIVES:
        loss, g = cacref.obj_is(name, t, mode, params)
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
    # Every KL estimator of ppo_kl, plain and straight-through.
    "ppo_kl": [{"kl_type": k, "straight": st, "kl_coef": 0.1} for k in (1, 2, 3, 4)
               for st in (0, 1)],
    # verl's GSPO clamp, low enough that some sequences' mean log-ratio passes it.
    "gspo_token": [{"log_ratio_max": 1e-5}],
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


# verl's rollout importance-sampling correction (an is_weight input; 0 drops the token).
WRT.update({n: "logp_new" for n in cacref.IS_OBJECTIVES})
VARIANTS.update({
    "ppo_clip_is": [{"dual_clip": 3.0, "eps_high": 0.28}],
    "ppo_kl_is": [{"kl_type": 1, "kl_coef": 0.1}, {"kl_type": 2, "kl_coef": 0.1},
                  {"kl_type": 4, "kl_coef": 0.1}, {"kl_type": 3, "straight": 1, "kl_coef": 0.1}],
    "ppo_dual_clip_is": [{"dual_clip": 1.5, "eps_high": 0.28}],
    "ppo_dual_clip_kl_is": [{"kl_type": k, "straight": st, "kl_coef": 0.1}
                            for k in (1, 3, 4) for st in (0, 1)],
    "gspo_token_is": [{"eps_low": 0.2, "eps_high": 0.2},
                      {"eps_low": 0.2, "eps_high": 0.2, "log_ratio_max": 1e-5}],
})


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


def run(cac, path, backend, grad, batch_paths, extra=()):
    """cac eval on the batches in one call: their outputs, in order."""
    cmd = [cac, "eval", path]
    for bp in batch_paths:
        cmd += ["--input", bp]
    cmd += ["--backend", backend, "--grad", grad] + list(extra)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600 * len(batch_paths))
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()[-400:]}")
    out = json.loads(p.stdout, parse_constant=cacref.reject_non_json)
    return out if len(batch_paths) > 1 else [out]


def cases_of(args, name, tmp):
    """Every (seed, parameters, aggregation) case of one objective: (tag, batch, mode,
    params, path of its batch file). The parameters and the aggregation travel in the
    batch's "params" (as --param and --aggregation would set them), so that one cac call
    runs every case."""
    modes = [None] if name in SEQ_LOSS else MODES
    lo, _, hi = args.seeds.partition("-")
    cases = []
    for seed in range(int(lo), int(hi or lo) + 1):
        batch = batch_for(name, seed, args.max_len)
        # The parameter variants run in the first mode only: the aggregation is
        # independent of the per-token loss.
        for i, (params, mode) in enumerate([(q, m) for q in [{}] + VARIANTS.get(name, [])
                                            for m in (modes if not q else modes[:1])]):
            tag = f"{name} seed={seed} aggregation={mode or 'seq-mean'}" + "".join(
                f" {k}={v}" for k, v in params.items())
            case = dict(batch, params={**batch.get("params", {}), **params})
            if mode:
                case["params"]["aggregation"] = MODES.index(mode)
            bpath = os.path.join(tmp, f"{name}-{seed}-{i}.json")
            with open(bpath, "w") as f:
                json.dump(case, f)
            cases.append((tag, batch, mode, params, bpath))
    return cases


def outputs_of(args, name, cases):
    """The four ways' outputs of every case ({way: output} each), or an exception per case
    where a way failed (each case then runs alone, so that the failure names it)."""
    path = os.path.join(args.stdlib, name + ".cac")
    sim = (f"--seq-block={args.sim_block}", f"--seq-items={args.sim_items}")
    extra = tuple(args.cac_arg)
    ways = {"cpu": ("cpu", "compiled", extra),
            "gpu-sim": ("gpu-sim", "compiled", sim + extra),
            "eager": ("eager", "compiled", extra),
            "autograd": ("eager", "autograd", extra)}
    paths = [c[4] for c in cases]
    try:
        per_way = {k: run(args.cac, path, be, gr, paths, ex) for k, (be, gr, ex) in ways.items()}
        return [{k: per_way[k][i] for k in ways} for i in range(len(cases))]
    except Exception:  # noqa: BLE001
        if len(cases) == 1:
            raise
    results = []
    for case in cases:
        try:
            results.append(outputs_of(args, name, [case])[0])
        except Exception as e:  # noqa: BLE001
            results.append(e)
    return results


def check_case(args, name, case, outs):
    """(ok, line) of one case: the four ways against autograd and the reference."""
    tag, batch, mode, params, _ = case
    var = WRT[name]
    dom = "seq" if name == "value_bce" else "token"
    want = outs["autograd"]
    errs = []
    for k in ("cpu", "gpu-sim", "eager"):
        errs.append((f"{k} loss vs autograd",
                     compare(want["objective"]["loss"], outs[k]["objective"]["loss"],
                             args.tol)))
        errs.append((f"{k} grad vs autograd",
                     compare(want[dom]["grad_" + var], outs[k][dom]["grad_" + var],
                             args.tol)))
    if name == "gspo":
        # GSPO's advantage is GRPO's (stdlib/grpo.cac's defaults).
        want_adv = cacref.group_normalized(batch["seq"]["reward"], batch["seq"]["group"],
                                           1e-6, 0, 0)
        for k in ("cpu", "eager"):
            errs.append((f"{k} adv vs reference",
                         compare(want_adv, outs[k]["seq"]["adv"], args.tol)))
    ref = reference(name, batch, outs["cpu"], mode or "seq-mean", params)
    if ref is not None:
        rloss, rgrad = ref
        errs.append(("cpu loss vs reference",
                     compare(rloss, outs["cpu"]["objective"]["loss"], args.tol)))
        errs.append(("cpu grad vs reference",
                     compare(rgrad[dom][var], outs["cpu"][dom]["grad_" + var], args.tol)))
    bad = [(w, e) for w, e in errs if e is None or e > args.tol]
    worst = max((e for _, e in errs if e is not None), default=0.0)
    n = sum(len(r) for r in batch["token"].get(
        "logp", batch["token"].get("value_new", batch["token"].get("pad", []))))
    if bad:
        return False, f"FAIL {tag}: " + "; ".join(
            f"{w}: {'shape' if e is None else f'{e:.3g}'}" for w, e in bad)
    return True, f"PASS {tag} tokens={n} checks={len(errs)} max_err={worst:.3g}"


def check_objective(args, name):
    """Every case of one objective, in a worker process: a list of (ok, line)."""
    with tempfile.TemporaryDirectory() as tmp:
        cases = cases_of(args, name, tmp)
        try:
            results = outputs_of(args, name, cases)
        except Exception as e:  # noqa: BLE001
            results = [e]
        lines = []
        for case, outs in zip(cases, results):
            if isinstance(outs, Exception):
                lines.append((False, f"FAIL {case[0]}: {outs}"))
            else:
                lines.append(check_case(args, name, case, outs))
        return lines


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
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                    help="worker processes; each checks one objective")
    ap.add_argument("--sim-block", type=int, default=8,
                    help="threads per block of the gpu-sim run (default 8)")
    ap.add_argument("--sim-items", type=int, default=2,
                    help="tokens per thread per tile of the gpu-sim run (default 2)")
    args = ap.parse_args()
    names = list(WRT) if args.objective == "all" else args.objective.split(",")
    passed = failed = 0
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(check_objective, args, name) for name in names]
        for fut in futures:  # in submission order: deterministic output
            for ok, line in fut.result():
                print(line, flush=True)
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
