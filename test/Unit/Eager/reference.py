#!/usr/bin/env python3
"""An independent, pure-Python reference for inputs/ops.cac and
inputs/regressions.cac, written from docs/language.md, to check the eager
backend itself (compare.py only checks that eager and cpu agree).

  reference.py CAC_BINARY BATCH.json...

Runs `cac eval --backend eager` (f64) and compares within 1e-9.
"""
import json
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def rscan(x, c):
    y, acc = [0.0] * len(x), 0.0
    for t in reversed(range(len(x))):
        acc = x[t] + c[t] * acc
        y[t] = acc
    return y


def scan(x, c):
    y, acc = [0.0] * len(x), 0.0
    for t in range(len(x)):
        acc = x[t] + c[t] * acc
        y[t] = acc
    return y


def nxt(x, fill):
    return [x[t + 1] if t + 1 < len(x) else fill[t] for t in range(len(x))]


def prv(x, fill):
    return [x[t - 1] if t >= 1 else fill[t] for t in range(len(x))]


def group_stats(reward, groups):
    ids = sorted(set(groups))
    members = {g: [i for i, h in enumerate(groups) if h == g] for g in ids}
    out = {}
    for g in ids:
        xs = [reward[i] for i in members[g]]
        n = len(xs)
        mean = sum(xs) / n
        ss = sum((x - mean) ** 2 for x in xs)
        out[g] = dict(n=n, sum=sum(xs), mean=mean, var=ss / n,
                      var_u=ss / max(n - 1, 1), min=min(xs), max=max(xs))
    return ids, members, out


def ops(batch, lam=0.9, eps=1e-6, thr=0.25):
    V, L = batch["token"]["value"], batch["token"]["logp"]
    R = batch["seq"]["reward"]
    groups = batch["seq"].get("group", [0] * len(R))
    ids, members, gs = group_stats(R, groups)
    out = {k: [] for k in ("sae", "fwd", "nxt", "ent", "flagf")}
    seq = {k: [] for k in ("sums", "ext", "loo", "gstat", "gu")}
    seq_mean_v = []
    for b, (v, lp) in enumerate(zip(V, L)):
        T, r = len(v), R[b]
        p = [math.exp(x) for x in lp]
        flag = [p[t] < thr or (t == 0 and t != T - 1) for t in range(T)]
        c = [lam if f else 1.0 for f in flag]
        delta = [(r if t == T - 1 else 0.0) + n - x
                 for t, (x, n) in enumerate(zip(v, nxt(v, [0.0] * T)))]
        out["sae"].append(rscan(delta, c))
        out["fwd"].append(scan([x * 0.5 for x in v], [lam] * T))
        np_, nv = nxt(p, [r] * T), nxt(v, [0.25 * x for x in v])
        out["nxt"].append([a - b_ for a, b_ in zip(np_, nv)])
        cs, rcs = scan(p, [1.0] * T), rscan(p, [1.0] * T)
        ent = []
        for t in range(T):
            e = (-p[t] * lp[t] + 1 / (1 + math.exp(-v[t])) - abs(v[t] - 0.5)
                 + math.sqrt(p[t]))
            clp = min(max(v[t], 0.2), 0.8) + min(v[t], p[t]) * max(lp[t], -2.0)
            pw = p[t] ** 1.5 / (1.0 + t) + cs[t] / T - rcs[t]
            ent.append(e + clp + pw)
        out["ent"].append(ent)
        out["flagf"].append([float(f) for f in flag])
        seq["sums"].append(sum(v) + sum(p) / T * 2.0)
        seq["ext"].append(min(lp) - max(v))
        g = gs[groups[b]]
        loo = (g["sum"] - r) / (g["n"] - 1) if g["n"] > 1 else 0.0
        seq["loo"].append(loo + g["n"] * 0.01)
        seq["gstat"].append((r - g["mean"]) / (math.sqrt(g["var"]) + eps))
        seq["gu"].append(g["var_u"] + math.sqrt(g["var_u"]) + g["var"])
        seq_mean_v.append(sum(v) / T)
    out["ne"] = [[float(x != 0.5) + float(x >= R[b]) +
                  float(R[b] > 0.5 and x <= 0.3) for x in v]
                 for b, v in enumerate(V)]
    gext = [min(seq_mean_v[i] for i in members[g]) + gs[g]["max"] * gs[g]["sum"]
            for g in ids]
    seq["grank"], out["gpos"] = [], []
    for b, v in enumerate(V):
        m = members[groups[b]]
        rank = sum(1 for j in m if R[j] > R[b] or (R[j] == R[b] and j < b))
        second = sorted((R[j] for j in m), reverse=True)[min(1, len(m) - 1)]
        seq["grank"].append(rank + second * 0.5)
        row = []
        for t in range(len(v)):
            at = [j for j in m if len(V[j]) > t]
            row.append(sum(V[j][t] * math.exp(L[j][t]) for j in at) / len(at) + len(at))
        out["gpos"].append(row)
    return {"token": out, "seq": seq, "group": {"gext": gext}}


def regressions(batch):
    V, R = batch["token"]["value"], batch["seq"]["reward"]
    tok = {"prv": []}
    seq = {k: [] for k in ("first", "last", "vfirst", "vlast")}
    for v, r in zip(V, R):
        T = len(v)
        a = rscan([(r if t == T - 1 else 0.0) - v[t] for t in range(T)],
                  [0.9] * T)
        tok["prv"].append(prv(v, [-1.0] * T))
        seq["first"].append(a[0])
        seq["last"].append(a[-1])
        seq["vfirst"].append(v[0])
        seq["vlast"].append(v[-1])
    return {"token": tok, "seq": seq, "group": {}}


def flat(d):
    r = {}
    for dom in ("token", "seq", "group"):
        for k, v in d.get(dom, {}).items():
            r[f"{dom}.{k}"] = [x for row in v for x in row] if dom == "token" else v
    return r


def main():
    cac, failed = sys.argv[1], False
    for path in sys.argv[2:]:
        batch = json.load(open(path))
        for est, ref in (("ops.cac", ops), ("regressions.cac", regressions)):
            r = subprocess.run([cac, "eval", os.path.join(HERE, "inputs", est),
                                "--input", path, "--backend", "eager"],
                               capture_output=True, text=True, check=True)
            got, want = flat(json.loads(r.stdout)), flat(ref(batch))
            assert got.keys() == want.keys(), (sorted(got), sorted(want))
            worst = max((abs(a - b) for k in got
                         for a, b in zip(got[k], want[k])), default=0.0)
            assert all(len(got[k]) == len(want[k]) for k in got)
            ok = worst <= 1e-9
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(path)} {est}: "
                  f"eager vs Python reference max abs err {worst:.3g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
