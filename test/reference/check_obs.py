#!/usr/bin/env python3
"""Observation tokens: an estimator sees the actions only.

    check_obs.py --cac build/bin/cac [--backend cpu,eager,gpu-sim] [--seeds 1-4] [--max-len 256]
                 [--cac-arg=--seq-block=64]...

For each stdlib file and seed it draws a random batch of action tokens (cacref's generator),
then inserts random observation tokens (tool output, with arbitrary values in every token
array) at random places and marks them in "obs". `cac eval` of the batch with observations
(one cac call per file and backend over every seed's two batches) must print, on the action
tokens, exactly what it prints for the batch without them, 0 on the observation tokens, the
same seq/group/node/seg values and objective, and segment starts moved to the tokens'
original positions. An estimator that reads `turn_start` (TURN_METHODS)
is compared with the plain batch whose turns start where observations were inserted.
Exit status 1 on a mismatch.
"""

import argparse
import concurrent.futures
import json
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cacref  # noqa: E402
import check_objective  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = ["gae", "sae", "grpo", "spo_chain", "sapo", "spo_tree", "vineppo", "reinforce_pp",
           "reinforce_pp_baseline", "opo", "otb"]
OBJECTIVES = ["ppo_clip", "sapo_loss", "gspo"]
OBJECTIVES += ["kl_cov", "clip_cov"]  # batch_top_k over the actions, uniform at their positions
# Estimators that read turn_start: the observations make their turns. The plain batch gives
# "turn_start" where the observations were inserted; the batch with them leaves it to cac
# eval to derive (docs/language.md, "Observation tokens").
TURN_METHODS = ["turn_gae"]


def turns_from_observations(plain, full, where):
    """1 on the first action and on each action with an observation just before it."""
    plain["token"]["turn_start"] = [
        [1.0 if k == 0 or pos[k] - pos[k - 1] > 1 else 0.0 for k in range(len(pos))]
        for pos in where]
    del full["token"]["turn_start"]


def with_observations(batch, rng):
    """(batch with observation tokens, where[b] = full positions of the actions)."""
    out = json.loads(json.dumps(batch))
    rows = next(iter(batch["token"].values())) if batch.get("token") else batch["tree"]["node"]
    where, obs = [], []
    for b, row in enumerate(rows):
        n, flags, pos = len(row), [], []
        for t in range(n):
            while rng.random() < 0.25:  # runs of observation tokens, anywhere
                flags.append(1)
            pos.append(len(flags))
            flags.append(0)
        while rng.random() < 0.2:
            flags.append(1)
        where.append(pos)
        obs.append(flags)

    def spread(row, pos, flags, fill):
        full, k = [], 0
        for t, f in enumerate(flags):
            if f:
                full.append(fill(full, t))
            else:
                full.append(row[k])
                k += 1
        return full

    for name, arr in batch.get("token", {}).items():
        out["token"][name] = [spread(r, where[b], obs[b], lambda full, t: rng.uniform(-5, 5))
                              for b, r in enumerate(arr)]
    if "tree" in batch:
        # An observation belongs to the node of the action before it (or after, at the start).
        rows_n = batch["tree"]["node"]
        out["tree"]["node"] = [spread(r, where[b], obs[b],
                                      lambda full, t, r=r: full[-1] if full else r[0])
                               for b, r in enumerate(rows_n)]
    out["obs"] = obs
    return out, where, obs


def run(cac, path, batch_paths, backend, extra=()):
    """cac eval on the batches in one call: their outputs, in order."""
    cmd = [cac, "eval", path]
    for bp in batch_paths:
        cmd += ["--input", bp]
    p = subprocess.run(cmd + ["--backend", backend, *extra], capture_output=True, text=True,
                       timeout=600 * len(batch_paths))
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-400:])
    out = json.loads(p.stdout, parse_constant=cacref.reject_non_json)
    return out if len(batch_paths) > 1 else [out]


def check(plain, full, where, obs):
    errors = []
    for name, rows in plain.get("token", {}).items():
        for b, row in enumerate(rows):
            got = full["token"][name][b]
            want = [0.0] * len(obs[b])
            for k, t in enumerate(where[b]):
                want[t] = row[k]
            if got != want:
                errors.append(f"token.{name}[{b}]")
    for dom in ("seq", "group", "node", "seg", "groups", "objective"):
        if plain.get(dom) != full.get(dom):
            errors.append(dom)
    if "segments" in plain:
        moved = [[where[b][s] for s in row] for b, row in enumerate(plain["segments"])]
        if moved != full.get("segments"):
            errors.append("segments")
    return errors


def cases_of(args, name, tmp):
    """Each seed's (seed, plain batch path, batch with observations' path, where, obs)."""
    lo, _, hi = args.seeds.partition("-")
    cases = []
    for seed in range(int(lo), int(hi or lo) + 1):
        rng = random.Random(f"check-obs:{name}:{seed}")
        if name in METHODS + TURN_METHODS:
            plain_b = cacref.random_batch(name, seed, args.max_len)
        else:
            plain_b = check_objective.batch_for(name, seed, args.max_len)
        full_b, where, obs = with_observations(plain_b, rng)
        if name in TURN_METHODS:
            turns_from_observations(plain_b, full_b, where)
        paths = []
        for tag, b in (("plain", plain_b), ("full", full_b)):
            paths.append(os.path.join(tmp, f"{name}-{seed}-{tag}.json"))
            with open(paths[-1], "w") as f:
                json.dump(b, f)
        cases.append((seed, paths[0], paths[1], where, obs))
    return cases


def errors_on(args, src, backend, cases):
    """Each case's errors on one backend, from one cac call over every batch (each case
    alone when that call fails, so that the failure names it)."""
    paths = [p for c in cases for p in c[1:3]]
    try:
        outs = run(args.cac, src, paths, backend, args.cac_arg)
        return [check(outs[2 * i], outs[2 * i + 1], c[3], c[4]) for i, c in enumerate(cases)]
    except Exception as e:  # noqa: BLE001
        if len(cases) == 1:
            return [[str(e)]]
    return [errors_on(args, src, backend, [c])[0] for c in cases]


def check_name(args, name):
    """Every seed and backend of one stdlib file, in a worker process: (ok, line) each."""
    src = os.path.join(REPO, "stdlib", name + ".cac")
    with tempfile.TemporaryDirectory() as tmp:
        cases = cases_of(args, name, tmp)
        results = {b: errors_on(args, src, b, cases) for b in args.backend.split(",")}
    lines = []
    for i, (seed, _, _, _, obs) in enumerate(cases):
        for backend, errs in results.items():
            errors = errs[i]
            tag = f"{name} seed={seed} backend={backend} observations={sum(sum(r) for r in obs)}"
            lines.append((not errors, f"FAIL {tag}: " + ", ".join(errors[:8]) if errors
                          else f"PASS {tag}"))
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cac", required=True)
    ap.add_argument("--backend", default="cpu", help="cpu, eager, gpu-sim or a comma list")
    ap.add_argument("--seeds", default="1-4")
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--cac-arg", action="append", default=[],
                    help="an extra argument of cac eval, e.g. --cac-arg=--seq-block=8 "
                         "(repeatable)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                    help="worker processes; each checks one stdlib file")
    args = ap.parse_args()
    passed = failed = 0
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(check_name, args, name)
                   for name in METHODS + TURN_METHODS + OBJECTIVES]
        for fut in futures:  # in submission order: deterministic output
            for ok, line in fut.result():
                print(line, flush=True)
                passed += ok
                failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
