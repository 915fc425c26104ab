#!/usr/bin/env python3
"""cacref: an independent reference implementation of the cac estimators and objectives.

Written from shared/docs/estimators.md (the section numbers below refer to it), in pure
Python 3 with the standard library only, in double precision (reductions use math.fsum;
the SPO-tree values use exact rational arithmetic so that "advantage != 0" is decided
exactly). It shares no code with the C++ compiler and is the oracle of the correctness
tests:

* ``evaluate(method, batch)`` takes a batch in the JSON format of ``cac eval``
  (docs/design.md, "The batch format of `cac eval`") and returns the output JSON that
  ``cac eval stdlib/METHOD.cac`` must print.
* ``objective(name, batch)`` returns a loss and its analytic gradient.
* ``random_batch(method, seed, ...)`` draws a random ragged batch for a method.

Command line (for debugging and for fake ``cac`` binaries in tests):

    python3 cacref.py eval METHOD --input batch.json     # prints the output JSON
    python3 cacref.py gen METHOD --seed 3 [--max-len 64] # prints a random batch
    python3 cacref.py objective NAME --input batch.json  # prints loss and gradient
"""

import argparse
import itertools
import json
import math
import random
import struct
import sys
from fractions import Fraction

REQUIRED = object()  # marks a parameter without a default


class RefError(ValueError):
    """An invalid batch or parameter."""


# ---------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------


def reject_non_json(name):
    """For json.loads(parse_constant=...): Python reads NaN and Infinity, JSON has neither,
    so output with them is not the valid JSON `cac eval` must print."""
    raise ValueError(f"{name} is not JSON")


def mean(xs):
    return math.fsum(xs) / len(xs)


def pop_var(xs):
    mu = mean(xs)
    return math.fsum((x - mu) ** 2 for x in xs) / len(xs)


def unbiased_var(xs):
    """Sample variance with n-1; defined as 0 for a single value."""
    if len(xs) < 2:
        return 0.0
    mu = mean(xs)
    return math.fsum((x - mu) ** 2 for x in xs) / (len(xs) - 1)


def f32(x):
    """Rounds a double to the nearest float32 (so that f32 backends see the same input)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def flag(x):
    """A 0/1 parameter: any non-zero number is true."""
    return x != 0


def as_int(name, x, lo=None):
    if x != int(x):
        raise RefError(f"parameter {name} must be an integer, got {x}")
    x = int(x)
    if lo is not None and x < lo:
        raise RefError(f"parameter {name} must be >= {lo}, got {x}")
    return x


def broadcast(per_seq, lengths):
    return [[float(v)] * n for v, n in zip(per_seq, lengths)]


def from_segments(seg_values, starts, T):
    """Token array from one value per segment; segment j covers [starts[j], starts[j+1])."""
    out = []
    for j, s in enumerate(starts):
        e = starts[j + 1] if j + 1 < len(starts) else T
        out.extend([float(seg_values[j])] * (e - s))
    return out


def reverse_scan(x, decay):
    """y[t] = x[t] + decay[t] * y[t+1], y[T] = 0 (estimators.md §10, P2)."""
    y = [0.0] * len(x)
    acc = 0.0
    for t in range(len(x) - 1, -1, -1):
        acc = x[t] + decay[t] * acc
        y[t] = acc
    return y


def p_old_of(logp):
    return [math.exp(v) for v in logp]


# ---------------------------------------------------------------------------------------
# Per-sequence estimators (pure functions of plain lists)
# ---------------------------------------------------------------------------------------


def td_errors(values, reward, gamma):
    """delta[t] = r[t] + gamma*V[t+1] - V[t], r = R on the last token, V[T] = 0 (§0.1)."""
    T = len(values)
    delta = []
    for t in range(T):
        r = reward if t == T - 1 else 0.0
        v_next = values[t + 1] if t + 1 < T else 0.0
        delta.append(r + gamma * v_next - values[t])
    return delta


def gae_dense_seq(values, rewards, gamma, lam):
    """GAE on a token reward r[t] (§1.1: R on the last token plus a KL penalty per token)."""
    T = len(values)
    delta = [rewards[t] + gamma * (values[t + 1] if t + 1 < T else 0.0) - values[t]
             for t in range(T)]
    adv = reverse_scan(delta, [gamma * lam] * T)
    return adv, [a + v for a, v in zip(adv, values)]


def gae_seq(values, reward, gamma, lam):
    """GAE (§1.1): A[t] = delta[t] + gamma*lambda*A[t+1]; returns A + V."""
    delta = td_errors(values, reward, gamma)
    adv = reverse_scan(delta, [gamma * lam] * len(values))
    return adv, [a + v for a, v in zip(adv, values)]


def sae_decay_lambdas(p_old, threshold, lam, literal):
    """lam_t of SAE (§4.3, §9.1). Chosen: lambda iff token t itself is low-probability.
    Literal array reading: lambda iff token t+1 is low-probability."""
    low = [p < threshold for p in p_old]
    T = len(p_old)
    if literal:
        return [lam if (t + 1 < T and low[t + 1]) else 1.0 for t in range(T)]
    return [lam if low[t] else 1.0 for t in range(T)]


def sae_seq(values, p_old, reward, gamma, lam, threshold, literal=False):
    """SAE (§4.3): GAE whose lambda-decay applies only across boundaries."""
    delta = td_errors(values, reward, gamma)
    lams = sae_decay_lambdas(p_old, threshold, lam, literal)
    adv = reverse_scan(delta, [gamma * l for l in lams])
    return adv, [a + v for a, v in zip(adv, values)]


def sae_boundary_form(values, p_old, reward, lam, threshold):
    """The "boundary form" of SAE (eq. 6, §4.3), gamma = 1, chosen convention.
    An independent oracle for sae_seq: A[t] = (1-lam) sum_{k<last} lam^k (V(S_tk) - V[t])
    + lam^last (R - V[t]), over the bootstrap states t_k > t."""
    T = len(values)
    boot = sorted({c + 1 for c in range(T) if p_old[c] < threshold and c + 1 < T})
    adv = []
    for t in range(T):
        states = [s for s in boot if s > t] + [T]
        terms = []
        for k, s in enumerate(states):
            if s == T:
                terms.append(lam ** k * (reward - values[t]))
            else:
                terms.append((1 - lam) * lam ** k * (values[s] - values[t]))
        adv.append(math.fsum(terms))
    return adv


def group_members(groups):
    """{group id: [sequence indices]} in ascending id order."""
    members = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    return dict(sorted(members.items()))


def group_normalized(rewards, groups, eps, unbiased, eps_in_sqrt):
    """GRPO (§1.2): (R - mean_g) / (std_g + eps), or / sqrt(var_g + eps) with eps_in_sqrt.
    std is the population std, or the unbiased one (n-1; 0 for a group of one). A group whose
    rewards are all equal (a group of one included) gets 0, also with eps = 0 (§1.2)."""
    adv = [0.0] * len(rewards)
    for idx in group_members(groups).values():
        rs = [rewards[i] for i in idx]
        if max(rs) == min(rs):
            continue
        mu = mean(rs)
        var = unbiased_var(rs) if unbiased else pop_var(rs)
        scale = math.sqrt(var + eps) if eps_in_sqrt else math.sqrt(var) + eps
        for i in idx:
            adv[i] = (rewards[i] - mu) / scale
    return adv


def rloo_advantages(rewards, groups):
    """RLOO (§1.3): R_i - mean of the other members of the group (0 for a group of one)."""
    adv = [0.0] * len(rewards)
    for idx in group_members(groups).values():
        if len(idx) < 2:
            continue
        total = math.fsum(rewards[i] for i in idx)
        for i in idx:
            adv[i] = rewards[i] - (total - rewards[i]) / (len(idx) - 1)
    return adv


def group_baselines(rewards, groups, lone, weights=None):
    """Per sequence, the mean of its group's rewards, weighted by `weights` when given
    (OPO: sum w R / sum w). A group of one gets its own reward as its baseline, or 0 with
    `lone` (verl's per-group loop: the mean of a group of one is 0)."""
    base = [0.0] * len(rewards)
    for idx in group_members(groups).values():
        if len(idx) == 1:
            base[idx[0]] = 0.0 if lone else rewards[idx[0]]
            continue
        w = [1.0] * len(idx) if weights is None else [weights[i] for i in idx]
        b = math.fsum(wi * rewards[i] for wi, i in zip(w, idx)) / math.fsum(w)
        for i in idx:
            base[i] = b
    return base


def masked_whiten(rows, eps=1e-8):
    """verl's masked_whiten over every token of the batch: (x - mean) / sqrt(var + eps) with
    the mean over all tokens and the unbiased (n-1) variance; one token has variance 0 here
    (verl divides by zero)."""
    flat = [x for row in rows for x in row]
    mu = mean(flat)
    var = unbiased_var(flat)
    scale = math.sqrt(var + eps)
    return [[(x - mu) / scale for x in row] for row in rows]


def chain_segment_advantages(mc, reward):
    """A_j = V(S_{b_{j+1}}) - V(S_{b_j}); the last segment gets R - V(S_{b_last}) (§2.3, §1.5)."""
    n = len(mc)
    return [(mc[j + 1] if j + 1 < n else reward) - mc[j] for j in range(n)]


def vineppo_segments(newline):
    """VinePPO steps (§1.5): a step ends at (and includes) a newline token, the next one starts
    after it, the last step ends at T-1. Returns the segment starts."""
    T = len(newline)
    return [0] + [t + 1 for t in range(T - 1) if newline[t] != 0]


def spo_chain_cutpoints(p_old, threshold, cut_last):
    """U = {t : p_old[t] < threshold}; the paper excludes t = T-1, the code (cut_last) does not."""
    T = len(p_old)
    return [t for t in range(T) if p_old[t] < threshold and (cut_last or t < T - 1)]


def spo_chain_segments(p_old, threshold=0.9, interval=5, cut_last=False, count=0):
    """SPO-chain partition (§2.2). Returns (starts, kind) where kind is
    "none" (no cutpoints: one segment, all advantages 0), "head" (interval mode with a head
    segment [0, u0) before the first boundary), "interval" (u0 = 0, no head) or "count"."""
    U = spo_chain_cutpoints(p_old, threshold, cut_last)
    if not U:
        return [0], "none"
    if count > 0:
        nseg = min(count, len(U))
        sizes = [len(U) // nseg + (1 if k < len(U) % nseg else 0) for k in range(nseg)]
        starts, first = [0], 0
        for k in range(1, nseg):
            first += sizes[k - 1]
            starts.append(U[first])
        return starts, "count"
    bounds = U[::interval]
    if bounds[0] > 0:
        return [0] + bounds, "head"
    return bounds, "interval"


def spo_chain_seq(p_old, reward, mc, threshold=0.9, interval=5, cut_last=False, head=False,
                  count=0):
    """SPO-chain advantages (§2.3). mc[j] = V_hat at the start state of segment j (for a head
    segment, V_hat(S_0)). Returns (token adv, segment adv, starts)."""
    starts, kind = spo_chain_segments(p_old, threshold, interval, cut_last, count)
    if len(mc) != len(starts):
        raise RefError(f"mc_value has {len(mc)} values but the sequence has {len(starts)} "
                       f"segments (starts {starts[:8]}...)")
    T = len(p_old)
    if kind == "none":
        seg_adv = [0.0]
    else:
        seg_adv = chain_segment_advantages(mc, reward)
        if kind == "head" and not head:
            seg_adv[0] = 0.0  # [code]: V(S_0) is not estimated
    return from_segments(seg_adv, starts, T), seg_adv, starts


def sapo_segments(entropy, k_percent):
    """SAPO segmentation (§7.2). The k_cnt = max(ceil(T*kpct/100), 1) highest-entropy tokens
    (ties: lower index first) are inclusive segment ends; T-1 is always an end.
    Returns (starts, ends)."""
    T = len(entropy)
    k = math.ceil(Fraction(T) * Fraction(k_percent) / 100)  # exact: no 3.0000000000000004
    k = min(max(k, 1), T)
    top = sorted(range(T), key=lambda t: (-entropy[t], t))[:k]
    ends = sorted(set(top) | {T - 1})
    starts = [0] + [e + 1 for e in ends[:-1]]
    return starts, ends


def sapo_seq(entropy, values, reward, gamma=1.0, lam=0.99, k_percent=30, v_at_end=False):
    """SAPO segment GAE (§7.3). Returns (seg adv, seg Rhat, starts, ends)."""
    starts, ends = sapo_segments(entropy, k_percent)
    n = len(starts)
    vseg = [values[ends[m]] if v_at_end else values[starts[m]] for m in range(n)]
    delta = [(reward if m == n - 1 else 0.0) + gamma * (vseg[m + 1] if m + 1 < n else 0.0)
             - vseg[m] for m in range(n)]
    adv = reverse_scan(delta, [gamma * lam] * n)
    rhat = [a + v for a, v in zip(adv, vseg)]
    return adv, rhat, starts, ends


def bce(v, r):
    """Binary cross-entropy -[R log v + (1-R) log(1-v)] (SPPO critic, §5.3)."""
    return -(r * math.log(v) + (1.0 - r) * math.log(1.0 - v))


# ---------------------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------------------


class Tree:
    """A rollout forest: parent[n] (-1 for roots) and, per sequence, the node of each token.
    Sequences are root-to-leaf paths; the leaf of a sequence is the node of its last token."""

    def __init__(self, parent, node_rows):
        self.parent = [int(p) for p in parent]
        K = len(self.parent)
        self.children = [[] for _ in range(K)]
        for n, p in enumerate(self.parent):
            if p < -1 or p >= K or p == n:
                raise RefError(f"tree.parent[{n}] = {p} is not a node id or -1")
            if p >= 0:
                self.children[p].append(n)
        self.depth = [self._depth(n) for n in range(K)]
        self.node_rows = [[int(x) for x in row] for row in node_rows]
        self.leaf_of_seq = []
        for b, row in enumerate(self.node_rows):
            if not row:
                raise RefError(f"sequence {b} has no tokens")
            for x in row:
                if not 0 <= x < K:
                    raise RefError(f"tree.node[{b}] holds {x}, not a node id")
            chain = self.ancestors(row[-1])[::-1]  # root .. leaf
            pos = {n: i for i, n in enumerate(chain)}
            last = -1
            for t, x in enumerate(row):
                if x not in pos or pos[x] < last:
                    raise RefError(f"tree.node[{b}][{t}] = {x} is not on the root-to-leaf "
                                   f"path of sequence {b} in order")
                last = pos[x]
            self.leaf_of_seq.append(row[-1])
        # Order: deepest first, for bottom-up passes.
        self.bottom_up = sorted(range(K), key=lambda n: -self.depth[n])

    def _depth(self, n):
        d, seen = 0, set()
        while self.parent[n] >= 0:
            if n in seen:
                raise RefError("tree.parent has a cycle")
            seen.add(n)
            n = self.parent[n]
            d += 1
        return d

    def ancestors(self, n):
        """n, parent(n), ..., root."""
        out = [n]
        while self.parent[n] >= 0:
            n = self.parent[n]
            out.append(n)
        return out

    def seqs_below(self):
        """For each node, the sequences whose leaf lies in its subtree."""
        below = [[] for _ in self.parent]
        for b, leaf in enumerate(self.leaf_of_seq):
            for n in self.ancestors(leaf):
                below[n].append(b)
        return below


def spo_tree_values(tree, rewards, normalize=False, eps=1e-8):
    """SPO-tree (§3.3) in exact rational arithmetic. V(leaf) = R, V(n) = mean of the children's
    V; A(n) = V(n) - V(parent), divided by (population std of the parent's children + eps)
    when normalize; roots get 0. Returns (V as floats, A as floats, exact "A != 0" flags)."""
    K = len(tree.parent)
    ends = [[] for _ in range(K)]
    for b, leaf in enumerate(tree.leaf_of_seq):
        ends[leaf].append(b)
    V = [None] * K
    for n in tree.bottom_up:
        ch = tree.children[n]
        if ch:
            if ends[n]:
                raise RefError(f"sequence {ends[n][0]} ends at node {n}, which has children")
            V[n] = sum((V[c] for c in ch), Fraction(0)) / len(ch)
        elif ends[n]:
            V[n] = sum((Fraction(rewards[b]) for b in ends[n]), Fraction(0)) / len(ends[n])
        else:
            raise RefError(f"node {n} has no children and no sequence ends at it")
    adv, nonzero = [0.0] * K, [False] * K
    for n in range(K):
        p = tree.parent[n]
        if p < 0:
            continue
        diff = V[n] - V[p]
        nonzero[n] = diff != 0
        if normalize:
            sib = tree.children[p]
            var = sum(((V[c] - V[p]) ** 2 for c in sib), Fraction(0)) / len(sib)
            # Siblings of equal V: 0, also with eps = 0.
            adv[n] = 0.0 if var == 0 else float(diff) / (math.sqrt(float(var)) + eps)
        else:
            adv[n] = float(diff)
    return [float(v) for v in V], adv, nonzero


def treeadv_values(tree, rewards, groups, delta=1e-6, use_max=False):
    """TreeAdv (§6.3): leaf advantages A_l = (R_l - mu_g)/sqrt(var_pop_g + delta) over the
    sequences of each group; node advantage = mean (or max) over the sequences whose leaf is
    in the node's subtree (0 for a node with none). Returns (node adv, seq adv)."""
    seq_adv = group_normalized(rewards, groups, delta, unbiased=False, eps_in_sqrt=True)
    node_adv = []
    for seqs in tree.seqs_below():
        if not seqs:
            node_adv.append(0.0)
        elif use_max:
            node_adv.append(max(seq_adv[b] for b in seqs))
        else:
            node_adv.append(mean([seq_adv[b] for b in seqs]))
    return node_adv, seq_adv


# ---------------------------------------------------------------------------------------
# Methods on batches (the `cac eval` interface)
# ---------------------------------------------------------------------------------------


class Batch:
    """Read-only view of a batch in the `cac eval` JSON format."""

    def __init__(self, data):
        self.data = data
        self.token = data.get("token", {})
        self.seq = data.get("seq", {})
        self.seg = data.get("seg", {})
        self.tree_data = data.get("tree")
        lengths = None
        for name, rows in sorted(self.token.items()):
            ls = [len(r) for r in rows]
            if lengths is not None and ls != lengths:
                raise RefError(f"token.{name} has row lengths different from the other inputs")
            lengths = ls
        if lengths is None and self.tree_data:
            lengths = [len(r) for r in self.tree_data["node"]]
        if lengths is None:
            raise RefError("the batch has no token arrays: the sequence lengths are unknown")
        if any(n == 0 for n in lengths):
            raise RefError("every sequence needs at least one token")
        self.lengths = lengths
        self.B = len(lengths)
        for name, vals in self.seq.items():
            if len(vals) != self.B:
                raise RefError(f"seq.{name} has {len(vals)} values for {self.B} sequences")
        self.groups = [int(g) for g in self.seq["group"]] if "group" in self.seq else [0] * self.B

    def tok(self, name):
        if name not in self.token:
            raise RefError(f"missing token input {name}")
        return [[float(x) for x in row] for row in self.token[name]]

    def sq(self, name):
        if name not in self.seq:
            raise RefError(f"missing seq input {name}")
        return [float(x) for x in self.seq[name]]

    def sg(self, name):
        if name not in self.seg:
            raise RefError(f"missing seg input {name}")
        return [[float(x) for x in row] for row in self.seg[name]]

    def tree(self):
        if not self.tree_data:
            raise RefError("missing tree input")
        t = Tree(self.tree_data["parent"], self.tree_data["node"])
        if [len(r) for r in t.node_rows] != self.lengths:
            raise RefError("tree.node rows differ in length from the token inputs")
        return t

    def distinct_groups(self):
        return sorted(set(self.groups))


def _output(batch, token=None, seq=None, seg=None, node=None, segments=None):
    out = {"token": token or {}, "seq": seq or {}, "seg": seg or {}, "group": {},
           "groups": batch.distinct_groups()}
    if node is not None:
        out["node"] = node
    if segments is not None:
        out["segments"] = segments
    return out


def eval_gae(b, p):
    V, R = b.tok("value"), b.sq("reward")
    adv, ret = zip(*[gae_seq(V[i], R[i], p["gamma"], p["lambda"]) for i in range(b.B)])
    return _output(b, token={"adv": list(adv), "ret": list(ret)})


def eval_gae_dense(b, p):
    V, r = b.tok("value"), b.tok("reward")
    adv, ret = zip(*[gae_dense_seq(V[i], r[i], p["gamma"], p["lambda"]) for i in range(b.B)]) \
        if b.B else ((), ())
    return _output(b, token={"adv": list(adv), "ret": list(ret)})


def eval_grpo(b, p):
    adv = group_normalized(b.sq("reward"), b.groups, p["eps"], flag(p["unbiased"]),
                           flag(p["eps_in_sqrt"]))
    return _output(b, token={"adv": broadcast(adv, b.lengths)})


def eval_rloo(b, p):
    return _output(b, token={"adv": broadcast(rloo_advantages(b.sq("reward"), b.groups),
                                              b.lengths)})


def eval_vineppo(b, p):
    nl, R, mc = b.tok("newline"), b.sq("reward"), b.sg("mc_value")
    adv, seg_adv, segments = [], [], []
    for i in range(b.B):
        starts = vineppo_segments(nl[i])
        if len(mc[i]) != len(starts):
            raise RefError(f"seg.mc_value[{i}] has {len(mc[i])} values for {len(starts)} steps")
        a = chain_segment_advantages(mc[i], R[i])
        adv.append(from_segments(a, starts, b.lengths[i]))
        seg_adv.append(a)
        segments.append(starts)
    return _output(b, token={"adv": adv}, seg={"adv": seg_adv}, segments=segments)


def eval_sae(b, p):
    V, lp, R = b.tok("value"), b.tok("logp"), b.sq("reward")
    adv, ret = [], []
    for i in range(b.B):
        a, r = sae_seq(V[i], p_old_of(lp[i]), R[i], p["gamma"], p["lambda"], p["threshold"],
                       flag(p["literal"]))
        adv.append(a)
        ret.append(r)
    return _output(b, token={"adv": adv, "ret": ret})


def eval_spo_chain(b, p):
    lp, R, mc = b.tok("logp"), b.sq("reward"), b.sg("mc_value")
    interval = as_int("interval", p["interval"], 1)
    count = as_int("count", p["count"], 0)
    adv, weight, seg_adv, segments = [], [], [], []
    for i in range(b.B):
        po = p_old_of(lp[i])
        a, sa, starts = spo_chain_seq(po, R[i], mc[i], p["threshold"], interval,
                                      flag(p["cut_last"]), flag(p["head"]), count)
        adv.append(a)
        weight.append([1.0 if x < p["threshold"] else 0.0 for x in po])
        seg_adv.append(sa)
        segments.append(starts)
    return _output(b, token={"adv": adv, "weight": weight}, seg={"adv": seg_adv},
                   segments=segments)


def eval_spo_tree(b, p):
    tree, lp, R = b.tree(), b.tok("logp"), b.sq("reward")
    V, A, nonzero = spo_tree_values(tree, R, flag(p["normalize"]), p["eps"])
    adv = [[A[n] for n in row] for row in tree.node_rows]
    weight = [[1.0 if (math.exp(l) < p["threshold"] and nonzero[n]) else 0.0
               for l, n in zip(lrow, row)] for lrow, row in zip(lp, tree.node_rows)]
    return _output(b, token={"adv": adv, "weight": weight}, node={"value": V, "adv": A})


def eval_sppo(b, p):
    R, v = b.sq("reward"), b.sq("value")
    for x in v:
        if not 0.0 < x < 1.0:
            raise RefError(f"seq.value must be a probability in (0, 1), got {x}")
    adv = [r - x for r, x in zip(R, v)]
    return _output(b, token={"adv": broadcast(adv, b.lengths)},
                   seq={"value_loss": [bce(x, r) for x, r in zip(v, R)]})


def eval_treeadv(b, p):
    tree, R = b.tree(), b.sq("reward")
    node_adv, _ = treeadv_values(tree, R, b.groups, p["delta"], flag(p["use_max"]))
    adv = [[node_adv[n] for n in row] for row in tree.node_rows]
    return _output(b, token={"adv": adv}, node={"adv": node_adv})


def eval_sapo(b, p):
    H, V, R = b.tok("entropy"), b.tok("value"), b.sq("reward")
    v_at_end = flag(p["v_at_end"])
    seg_adv, adv, ret, weight, segments = [], [], [], [], []
    for i in range(b.B):
        a, rhat, starts, ends = sapo_seq(H[i], V[i], R[i], p["gamma"], p["lambda"],
                                         p["k_percent"], v_at_end)
        T = b.lengths[i]
        seg_adv.append(a)
        adv.append(from_segments(a, starts, T))
        ret.append(from_segments(rhat, starts, T))
        w = [0.0] * T
        for t in (ends if v_at_end else starts):
            w[t] = 1.0
        weight.append(w)
        segments.append(starts)
    return _output(b, token={"adv": adv, "ret": ret, "value_weight": weight}, seg={"adv": seg_adv},
                   segments=segments)


def eval_drgrpo(b, p):
    R = b.sq("reward")
    base = group_baselines(R, b.groups, flag(p["lone"]))
    return _output(b, token={"adv": broadcast([r - m for r, m in zip(R, base)], b.lengths)})


def eval_maxrl(b, p):
    R = b.sq("reward")
    base = group_baselines(R, b.groups, flag(p["lone"]))
    adv = [(r - m) / (m + p["eps"]) for r, m in zip(R, base)]
    return _output(b, token={"adv": broadcast(adv, b.lengths)})


def eval_opo(b, p):
    R = b.sq("reward")
    base = group_baselines(R, b.groups, flag(p["lone"]), [float(n) for n in b.lengths])
    return _output(b, token={"adv": broadcast([r - m for r, m in zip(R, base)], b.lengths)})


def eval_gpg(b, p):
    """GPG: alpha (R - mean_g) / f_norm, alpha = B / #(R != 0) over the batch (1 when none)."""
    R = b.sq("reward")
    base = group_baselines(R, b.groups, flag(p["lone"]))
    alpha = len(R) / max(1, sum(1 for r in R if r != 0))
    adv = [alpha * (r - m) / p["f_norm"] for r, m in zip(R, base)]
    return _output(b, token={"adv": broadcast(adv, b.lengths)})


def eval_remax(b, p):
    R, g = b.sq("reward"), b.sq("greedy_reward")
    return _output(b, token={"adv": broadcast([r - x for r, x in zip(R, g)], b.lengths)})


def eval_reinforce_pp(b, p):
    """REINFORCE++: the discounted return of the outcome, G[t] = gamma^(T-1-t) R, whitened
    over the batch's tokens."""
    R, gamma = b.sq("reward"), p["gamma"]
    returns = [[gamma ** (n - 1 - t) * R[i] for t in range(n)] for i, n in enumerate(b.lengths)]
    return _output(b, token={"adv": masked_whiten(returns, p["eps"])})


def eval_reinforce_pp_baseline(b, p):
    R = b.sq("reward")
    base = group_baselines(R, b.groups, flag(p["lone"]))
    rows = broadcast([r - m for r, m in zip(R, base)], b.lengths)
    return _output(b, token={"adv": masked_whiten(rows, p["eps"])})


# --- verl registry additions: VAPO's decoupled GAE, V-trace, GDPO ---------------------------


def eval_vapo_gae(b, p):
    """VAPO (§3.2-3.3): adv = GAE with lambda = 1 - 1 / (alpha |y|); ret = GAE with
    lambda_value, plus V."""
    V, R = b.tok("value"), b.sq("reward")
    adv, ret = [], []
    for i in range(b.B):
        lam_p = 1.0 - 1.0 / (p["alpha"] * b.lengths[i])
        adv.append(gae_seq(V[i], R[i], p["gamma"], lam_p)[0])
        ret.append(gae_seq(V[i], R[i], p["gamma"], p["lambda_value"])[1])
    return _output(b, token={"adv": adv, "ret": ret})


def _vtrace_terms(values, logp, logp_mu, reward, gamma, lam, rho_bar, c_bar):
    """V-trace's per-token quantities: rho, c, r and delta (IMPALA eq. 1)."""
    T = len(values)
    ratio = [math.exp(a - b) for a, b in zip(logp, logp_mu)]
    rho = [min(rho_bar, x) for x in ratio]
    c = [lam * min(c_bar, x) for x in ratio]
    r = [reward if t == T - 1 else 0.0 for t in range(T)]
    vnext = [values[t + 1] if t + 1 < T else 0.0 for t in range(T)]
    delta = [r[t] + gamma * vnext[t] - values[t] for t in range(T)]
    return rho, c, r, delta


def _vtrace_adv(values, rho, r, v, gamma):
    T = len(values)
    return [rho[t] * (r[t] + gamma * (v[t + 1] if t + 1 < T else 0.0) - values[t])
            for t in range(T)]


def vtrace_seq_definition(values, logp, logp_mu, reward, gamma, lam, rho_bar, c_bar):
    """V-trace by the sum of its definition, O(T^2): v_t = V_t + sum_{s>=t}
    gamma^(s-t) (prod_{t<=i<s} c_i) rho_s delta_s. vectors_test.py checks
    vtrace_seq against it."""
    rho, c, r, delta = _vtrace_terms(values, logp, logp_mu, reward, gamma, lam, rho_bar,
                                     c_bar)
    v = []
    for t in range(len(values)):
        acc, prod = 0.0, 1.0
        for s in range(t, len(values)):
            acc += gamma ** (s - t) * prod * rho[s] * delta[s]
            prod *= c[s]
        v.append(values[t] + acc)
    return _vtrace_adv(values, rho, r, v, gamma), v


def vtrace_seq(values, logp, logp_mu, reward, gamma, lam, rho_bar, c_bar):
    """V-trace (IMPALA eq. 1, §4.2) on one sequence, the reward on the last token and
    V = v = 0 after it, by the paper's recursion (Remark 1), right to left:
    v_t - V_t = rho_t delta_t + gamma c_t (v_{t+1} - V_{t+1}). Returns (adv, v),
    adv_t = rho_t (r_t + gamma v_{t+1} - V_t)."""
    rho, c, r, delta = _vtrace_terms(values, logp, logp_mu, reward, gamma, lam, rho_bar,
                                     c_bar)
    T = len(values)
    v = [0.0] * T
    ahead = 0.0  # v_{t+1} - V_{t+1}
    for t in reversed(range(T)):
        ahead = rho[t] * delta[t] + gamma * c[t] * ahead
        v[t] = values[t] + ahead
    return _vtrace_adv(values, rho, r, v, gamma), v


def eval_vtrace_gae(b, p):
    V, lp, mu, R = b.tok("value"), b.tok("logp"), b.tok("logp_behavior"), b.sq("reward")
    adv, ret = [], []
    for i in range(b.B):
        a, v = vtrace_seq(V[i], lp[i], mu[i], R[i], p["gamma"], p["lambda"], p["rho_bar"],
                          p["c_bar"])
        adv.append(a)
        ret.append(v)
    return _output(b, token={"adv": adv, "ret": ret})


def grpo_loop_normalized(rewards, groups, eps, by_std, lone):
    """verl's compute_grpo_outcome_advantage (its per-group loop): (R - mean) / (std + eps)
    with torch.std (n - 1), or R - mean without by_std. A group of one has mean 0 and std 1
    in verl (lone = 1); with lone = 0 it gets 0, and so does a group of equal values."""
    out = [0.0] * len(rewards)
    for idx in group_members(groups).values():
        rs = [rewards[i] for i in idx]
        if len(idx) == 1:
            if lone:
                out[idx[0]] = rs[0] / (1.0 + eps) if by_std else rs[0]
            continue
        if max(rs) == min(rs):
            continue
        mu = math.fsum(rs) / len(rs)
        sd = math.sqrt(unbiased_var(rs))
        for i in idx:
            out[i] = (rewards[i] - mu) / (sd + eps) if by_std else rewards[i] - mu
    return out


def eval_gdpo(b, p):
    """GDPO (verl compute_gdpo_outcome_advantage): each component normalized per group as
    verl's GRPO, summed with weights, whitened over the batch's tokens."""
    by_std, lone = flag(p["std"]), flag(p["lone"])
    n1 = grpo_loop_normalized(b.sq("reward"), b.groups, p["eps"], by_std, lone)
    n2 = grpo_loop_normalized(b.sq("reward2"), b.groups, p["eps"], by_std, lone)
    s = [p["w1"] * x + p["w2"] * y for x, y in zip(n1, n2)]
    return _output(b, token={"adv": masked_whiten(broadcast(s, b.lengths), 1e-8)})


def eval_grpo_passk(b, p):
    """verl's compute_grpo_passk_outcome_advantage: the best rollout of each group gets
    (r_max - r_second_max) / (unbiased std + eps) (the margin alone with norm = 0), the
    others 0. A tied best has margin 0, so every advantage of its group is 0 (also with
    eps = 0); a group of one gets 0 (verl raises)."""
    R = b.sq("reward")
    adv = [0.0] * b.B
    for idx in group_members(b.groups).values():
        if len(idx) < 2:
            continue
        top = sorted((R[i] for i in idx), reverse=True)
        margin = top[0] - top[1]
        if margin == 0:
            continue
        if flag(p["norm"]):
            mean = math.fsum(R[i] for i in idx) / len(idx)
            var = math.fsum((R[i] - mean) ** 2 for i in idx) / (len(idx) - 1)
            margin /= math.sqrt(var) + p["eps"]
        adv[next(i for i in idx if R[i] == top[0])] = margin
    return _output(b, token={"adv": broadcast(adv, b.lengths)})


def eval_group_ops(b, p):
    """test/reference/lang/group_ops.cac: group_rank (descending, ties by the lower sequence
    index), group_second_max (the max once one holder of the max is set aside; the value
    itself for a group of one), group_pos_sum / mean / count over the group's sequences
    that reach each position."""
    R, lp, L = b.sq("reward"), b.tok("logp"), b.lengths
    rank, len_rank, second = [0.0] * b.B, [0.0] * b.B, [0.0] * b.B
    psum = [[0.0] * n for n in L]
    pmean = [[0.0] * n for n in L]
    pcount = [[0.0] * n for n in L]
    y = [[lp[i][t] * R[i] + t for t in range(L[i])] for i in range(b.B)]
    for idx in group_members(b.groups).values():
        for i in idx:
            rank[i] = float(sum(1 for j in idx if R[j] > R[i] or (R[j] == R[i] and j < i)))
            len_rank[i] = float(sum(1 for j in idx
                                    if L[j] > L[i] or (L[j] == L[i] and j < i)))
            second[i] = sorted((R[j] for j in idx), reverse=True)[min(1, len(idx) - 1)]
            for t in range(L[i]):
                at = [j for j in idx if L[j] > t]
                psum[i][t] = math.fsum(lp[j][t] for j in at)
                pmean[i][t] = math.fsum(y[j][t] for j in at) / len(at)
                pcount[i][t] = float(len(at))
    return _output(b, token={"psum": psum, "pmean": pmean, "pcount": pcount},
                   seq={"r_rank": rank, "len_rank": len_rank, "second": second})


def eval_group_keys(b, p):
    """test/reference/lang/group_keys.cac: group_key_sum / mean / count over the sequences of
    the group whose key equals the sequence's own (the key floor(|y| / 4), or the reward)."""
    R, lp, L = b.sq("reward"), b.tok("logp"), b.lengths
    y = [math.fsum(lp[i]) * R[i] for i in range(b.B)]
    ksum, kmean, kself, kcount = ([0.0] * b.B for _ in range(4))
    for idx in group_members(b.groups).values():
        for i in idx:
            same = [j for j in idx if L[j] // 4 == L[i] // 4]
            ksum[i] = math.fsum(R[j] for j in same)
            kmean[i] = math.fsum(y[j] for j in same) / len(same)
            ties = [j for j in idx if R[j] == R[i]]
            kself[i] = R[i]
            kcount[i] = float(len(ties))
    return _output(b, seq={"ksum": ksum, "kmean": kmean, "kself": kself, "kcount": kcount})


def eval_otb(b, p):
    """verl's compute_optimal_token_baseline_advantage on an outcome reward (returns G_t = R):
    w = 1 - 2 exp(logp) + sum_pi2, W = cumsum(w), per group of two or more and position t
    B_t = sum G W / (sum W + eps) over the sequences that reach t (its padded sums under the
    mask); a group of one keeps baseline 0. handle_zero_tail (zero_tail = 1): where the
    longest sequence is unique, baseline 0 on its positions from the second longest length."""
    R, lp, sp, L = b.sq("reward"), b.tok("logp"), b.tok("sum_pi2"), b.lengths
    W = [list(itertools.accumulate(1 - 2 * math.exp(lp[i][t]) + sp[i][t] for t in range(L[i])))
         for i in range(b.B)]
    base = [[0.0] * n for n in L]
    for idx in group_members(b.groups).values():
        if len(idx) == 1:
            continue
        for t in range(max(L[i] for i in idx)):
            at = [j for j in idx if L[j] > t]
            bt = math.fsum(R[j] * W[j][t] for j in at) / (math.fsum(W[j][t] for j in at)
                                                           + p["eps"])
            for j in at:
                base[j][t] = bt
        if flag(p["zero_tail"]):
            lens = sorted(L[i] for i in idx)
            longest = [i for i in idx if L[i] == lens[-1]]
            if len(longest) == 1 and lens[-1] > lens[-2]:
                for t in range(lens[-2], lens[-1]):
                    base[longest[0]][t] = 0.0
    adv = [[R[i] - base[i][t] for t in range(L[i])] for i in range(b.B)]
    return _output(b, token={"adv": adv})


# name -> (function, {param: default or REQUIRED}, inputs, required outputs, optional outputs)
# Outputs are (domain, name); optional ones are compared only when `cac eval` prints them.
def turn_starts_of(b):
    """Per sequence, the first token of each turn: the batch's token "turn_start" (as cac eval
    derives it from "obs"), the first token always; without it the sequence is one turn."""
    rows = b.tok("turn_start") if "turn_start" in b.token else [[0.0] * n for n in b.lengths]
    return [[t for t in range(len(r)) if t == 0 or r[t] > 0] for r in rows]


def bi_level_gae_seq(values, rewards, ends, gamma, lam, turn_gamma):
    """RAGEN's compute_bi_level_gae_advantage_return on one sequence (no whitening): the turn
    level over the turns' last tokens `ends`, then the token level inside each turn with the
    turn return as the reward of its last token. Returns (adv, ret)."""
    T = len(values)
    reward = list(rewards)
    last = 0.0
    for k in range(len(ends) - 1, -1, -1):
        e = ends[k]
        nv = values[ends[k + 1]] if k + 1 < len(ends) else 0.0
        last = reward[e] + turn_gamma * nv - values[e] + turn_gamma * lam * last
        reward[e] = last + values[e]  # the turn's return, the token level's reward there
    adv, last = [0.0] * T, 0.0
    for t in range(T - 1, -1, -1):
        if t in ends:
            nv, last = 0.0, 0.0
        else:
            nv = values[t + 1]
        last = reward[t] + gamma * nv - values[t] + gamma * lam * last
        adv[t] = last
    return adv, [a + v for a, v in zip(adv, values)]


def eval_turn_gae(b, p):
    V, r = b.tok("value"), b.tok("reward")
    adv, ret = [], []
    for i, starts in enumerate(turn_starts_of(b)):
        ends = [s - 1 for s in starts[1:]] + [b.lengths[i] - 1]
        a, g = bi_level_gae_seq(V[i], r[i], ends, p["gamma"], p["lambda"], p["turn_gamma"])
        adv.append(a)
        ret.append(g)
    if flag(p["whiten"]):
        adv = masked_whiten(adv)
    return _output(b, token={"adv": adv, "ret": ret})


def gigpo_norm(values, keys, eps, by_std, lone_mean):
    """verl-agent's episode_norm_reward / step_norm_reward loop: rows with the same key form a
    group; a group of one row gets mean `lone_mean(x)` and std 1, others their mean and
    unbiased std (torch.std); (x - mean) / (std + eps) with by_std, else x - mean. Zero
    spread gives 0 here also where verl-agent's eps would divide 0 by eps (the same 0)."""
    rows = {}
    for i, k in enumerate(keys):
        rows.setdefault(k, []).append(i)
    out = [0.0] * len(values)
    for idx in rows.values():
        xs = [values[i] for i in idx]
        if len(xs) == 1:
            m, sd = lone_mean(xs[0]), 1.0
        else:
            m, sd = mean(xs), math.sqrt(unbiased_var(xs))
        for i in idx:
            if len(xs) > 1 and sd == 0:
                out[i] = 0.0
            else:
                out[i] = (values[i] - m) / (sd + eps) if by_std else values[i] - m
    return out


def eval_gigpo(b, p):
    """GiGPO (verl-agent compute_gigpo_outcome_advantage): one sequence per step; the episode
    advantage over the group's rows, the step advantage over the group's rows of the same
    anchor state, adv = A_E + step_w * A_S. lone = 0: a group of one row is its own baseline."""
    R, G, anchor = b.sq("reward"), b.sq("step_return"), b.sq("anchor")
    by_std, eps = flag(p["std"]), p["eps"]
    a_ep = gigpo_norm(R, b.groups, eps, by_std,
                      (lambda x: 0.0) if flag(p["lone"]) else (lambda x: x))
    a_st = gigpo_norm(G, list(zip(b.groups, anchor)), eps, by_std, lambda x: x)
    adv = [e + p["step_w"] * s for e, s in zip(a_ep, a_st)]
    return _output(b, token={"adv": broadcast(adv, b.lengths)})


METHODS = {
    "gae": (eval_gae, {"gamma": 1.0, "lambda": 0.95},
            {"token": ["value"], "seq": ["reward"]},
            [("token", "adv"), ("token", "ret")], []),
    "gae_dense": (eval_gae_dense, {"gamma": 1.0, "lambda": 0.95},
                  {"token": ["value", "reward"]},
                  [("token", "adv"), ("token", "ret")], []),
    "grpo": (eval_grpo, {"eps": 1e-6, "unbiased": 0, "eps_in_sqrt": 0},
             {"seq": ["reward", "group"]}, [("token", "adv")], []),
    "rloo": (eval_rloo, {}, {"seq": ["reward", "group"]}, [("token", "adv")], []),
    "gspo": (eval_grpo, {"eps": 1e-6, "unbiased": 0, "eps_in_sqrt": 0},
             {"seq": ["reward", "group"]}, [("token", "adv")], []),
    "vineppo": (eval_vineppo, {}, {"token": ["newline"], "seq": ["reward"], "seg": ["mc_value"]},
                [("token", "adv"), ("segments", None)], [("seg", "adv")]),
    "sae": (eval_sae, {"gamma": 1.0, "lambda": REQUIRED, "threshold": 0.2, "literal": 0},
            {"token": ["value", "logp"], "seq": ["reward"]},
            [("token", "adv"), ("token", "ret")], []),
    "spo_chain": (eval_spo_chain,
                  {"threshold": 0.9, "interval": 5, "cut_last": 0, "head": 0, "count": 0},
                  {"token": ["logp"], "seq": ["reward"], "seg": ["mc_value"]},
                  [("token", "adv"), ("token", "weight"), ("segments", None)],
                  [("seg", "adv")]),
    "spo_tree": (eval_spo_tree, {"normalize": 0, "eps": 1e-8, "threshold": 0.9},
                 {"token": ["logp"], "seq": ["reward"], "tree": ["parent", "node"]},
                 [("node", "value"), ("token", "adv"), ("token", "weight")],
                 [("node", "adv")]),
    "sppo": (eval_sppo, {}, {"seq": ["reward", "value"]},
             [("token", "adv"), ("seq", "value_loss")], []),
    "treeadv": (eval_treeadv, {"delta": 1e-6, "use_max": 0},
                {"seq": ["reward", "group"], "tree": ["parent", "node"]},
                [("token", "adv")], [("node", "adv")]),
    "sapo": (eval_sapo, {"gamma": 1.0, "lambda": 0.99, "k_percent": 30, "v_at_end": 0},
             {"token": ["entropy", "value"], "seq": ["reward"]},
             [("token", "adv"), ("token", "ret"), ("token", "value_weight"), ("segments", None)],
             [("seg", "adv")]),
    "drgrpo": (eval_drgrpo, {"lone": 0}, {"seq": ["reward", "group"]}, [("token", "adv")], []),
    "maxrl": (eval_maxrl, {"eps": 1e-6, "lone": 0}, {"seq": ["reward", "group"]},
              [("token", "adv")], []),
    "opo": (eval_opo, {"lone": 0}, {"seq": ["reward", "group"]}, [("token", "adv")], []),
    "gpg": (eval_gpg, {"f_norm": 1.0, "lone": 0}, {"seq": ["reward", "group"]},
            [("token", "adv")], []),
    "remax": (eval_remax, {}, {"seq": ["reward", "greedy_reward"]}, [("token", "adv")], []),
    "reinforce_pp": (eval_reinforce_pp, {"gamma": 1.0, "eps": 1e-8}, {"seq": ["reward"]},
                     [("token", "adv")], []),
    "reinforce_pp_baseline": (eval_reinforce_pp_baseline, {"eps": 1e-8, "lone": 0},
                              {"seq": ["reward", "group"]}, [("token", "adv")], []),
}

METHODS.update({
    "otb": (eval_otb, {"eps": 1e-8, "zero_tail": 0},
            {"token": ["logp", "sum_pi2"], "seq": ["reward", "group"]}, [("token", "adv")], []),
    "group_ops": (eval_group_ops, {}, {"token": ["logp"], "seq": ["reward", "group"]},
                  [("seq", "r_rank"), ("seq", "len_rank"), ("seq", "second"),
                   ("token", "psum"), ("token", "pmean"), ("token", "pcount")], []),
    "grpo_passk": (eval_grpo_passk, {"eps": 1e-6, "norm": 1}, {"seq": ["reward", "group"]},
                   [("token", "adv")], []),
})


METHODS.update({
    "vapo_gae": (eval_vapo_gae, {"gamma": 1.0, "alpha": 0.05, "lambda_value": 1.0},
                 {"token": ["value"], "seq": ["reward"]},
                 [("token", "adv"), ("token", "ret")], []),
    "vtrace_gae": (eval_vtrace_gae, {"gamma": 1.0, "lambda": 1.0, "rho_bar": 1.0, "c_bar": 1.0},
                   {"token": ["value", "logp", "logp_behavior"], "seq": ["reward"]},
                   [("token", "adv"), ("token", "ret")], []),
    "gdpo": (eval_gdpo, {"w1": 1.0, "w2": 1.0, "eps": 1e-6, "std": 1, "lone": 0},
             {"seq": ["reward", "reward2", "group"]}, [("token", "adv")], []),
})


METHODS.update({
    "turn_gae": (eval_turn_gae, {"gamma": 1.0, "lambda": 1.0, "turn_gamma": 0.95, "whiten": 0},
                 {"token": ["value", "reward", "turn_start"]},
                 [("token", "adv"), ("token", "ret")], []),
})


METHODS.update({
    "group_keys": (eval_group_keys, {}, {"token": ["logp"], "seq": ["reward", "group"]},
                   [("seq", "ksum"), ("seq", "kmean"), ("seq", "kself"), ("seq", "kcount")],
                   []),
    "gigpo": (eval_gigpo, {"step_w": 1.0, "std": 0, "eps": 1e-6, "lone": 0},
              {"seq": ["reward", "step_return", "anchor", "group"]}, [("token", "adv")], []),
})


def resolve_params(declared, given, what):
    """Defaults overridden by `given`; fails on an unknown or a missing required parameter,
    as `cac eval` does."""
    for k in given:
        if k not in declared:
            raise RefError(f"unknown parameter '{k}' for {what}; declared: "
                           f"{', '.join(declared) or 'none'}")
    out = {}
    for k, d in declared.items():
        if k in given:
            out[k] = given[k]
        elif d is REQUIRED:
            raise RefError(f"parameter '{k}' of {what} has no default and no value")
        else:
            out[k] = d
    return out


def evaluate(method, data, params=None):
    """The output JSON of `cac eval stdlib/METHOD.cac --input <data>`.
    `params` (like --param) override the batch's "params"."""
    if method not in METHODS:
        raise RefError(f"unknown method {method}; known: {', '.join(METHODS)}")
    fn, declared = METHODS[method][0], METHODS[method][1]
    given = dict(data.get("params", {}))
    given.update(params or {})
    return fn(Batch(data), resolve_params(declared, given, method))


def optional_outputs(method):
    return METHODS[method][4]


# ---------------------------------------------------------------------------------------
# Objectives: loss and analytic gradient
# ---------------------------------------------------------------------------------------

AGG_MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
             "seq-mean-token-sum-norm"]


def agg_mode(x):
    """An aggregation mode by name or by number (its index in AGG_MODES)."""
    if isinstance(x, str):
        if x not in AGG_MODES:
            raise RefError(f"unknown aggregation mode {x}")
        return x
    return AGG_MODES[as_int("agg", x, 0)]


def agg_coefficients(weights, mode, norm_len=0):
    """c[i][t] such that the aggregated loss is sum c*l (estimators.md §0.2; verl agg_loss):
    token-mean           sum w*l / sum w                      (0 if sum w = 0)
    seq-mean-token-mean  (1/B) sum_i (sum_t w*l / sum_t w)
    seq-mean-token-sum   (1/B) sum_i sum_t w*l
    seq-mean-token-sum-norm  (1/B) sum_i sum_t w*l / L, L = norm_len or the longest sequence
        (Dr. GRPO's constant length with GRPO's 1/G; verl's agg_loss: the seq-mean, then
        / loss_scale_factor; verl up to its 0.5 releases had no 1/B: B times this).
    B counts the sequences with sum w > 0, as verl's seq_mask (a fully masked sequence adds
    nothing and does not count); 0 when there are none."""
    B = sum(1 for r in weights if math.fsum(r) > 0)
    if mode == "token-mean":
        W = math.fsum(math.fsum(r) for r in weights)
        return [[(w / W if W else 0.0) for w in r] for r in weights]
    if mode == "seq-mean-token-mean":
        out = []
        for r in weights:
            Wi = math.fsum(r)
            out.append([(w / (B * Wi) if Wi else 0.0) for w in r])
        return out
    if mode == "seq-mean-token-sum":
        return [[(w / B if B else 0.0) for w in r] for r in weights]
    if mode == "seq-mean-token-sum-norm":
        L = norm_len if norm_len > 0 else max(len(r) for r in weights)
        return [[(w / (B * L) if B else 0.0) for w in r] for r in weights]
    raise RefError(f"unknown aggregation mode {mode}")


def clipped_surrogate(r, A, eps_low=0.2, eps_high=0.2, dual_clip=0.0):
    """verl compute_policy_loss for one token: returns (loss, d loss / d ratio).
    loss = max(-A*r, -A*clip(r, 1-eps_low, 1+eps_high)); with dual_clip c > 0 and A < 0,
    loss = min(that, -A*c). The objective f of §0.2 is -loss."""
    lo, hi = 1.0 - eps_low, 1.0 + eps_high
    rc = min(max(r, lo), hi)
    l1, l2 = -A * r, -A * rc
    if l1 >= l2:
        loss, d = l1, -A  # unclipped (ties: r inside [lo, hi], both branches agree)
    else:
        loss, d = l2, 0.0  # the clipped branch is active, so r is outside [lo, hi]
    if dual_clip > 0 and A < 0 and -A * dual_clip < loss:
        loss, d = -A * dual_clip, 0.0
    return loss, d


def kl_term(d, kind):
    """KL estimators with d = logp - logp_ref (§0.2): returns (value, d value / d logp).
    1: k1 = d; 2: k2 = d^2/2; 3: k3 = exp(-d) + d - 1; 4: |d| (gradient 0 at 0)."""
    if kind == 4:
        return abs(d), (1.0 if d > 0 else -1.0 if d < 0 else 0.0)
    if kind == 1:
        return d, 1.0
    if kind == 2:
        return 0.5 * d * d, d
    if kind == 3:
        return math.exp(-d) + d - 1.0, 1.0 - math.exp(-d)
    raise RefError(f"unknown KL estimator k{kind}")


def policy_loss(logp_new, logp_old, adv, ratio="token", segments=None, weight=None,
                eps_low=0.2, eps_high=0.2, dual_clip=0.0, agg="token-mean", norm_len=0,
                clamp_log_ratio=0.0, logp_ref=None, kl=0, beta=0.0, seq_log_ratio_max=0.0,
                kl_straight=False):
    """Clipped policy loss and its gradient d loss / d logp_new (ragged lists).

    ratio = "token"     rho[t] = exp(x[t]), x = logp_new - logp_old (PPO, GRPO, SPO, SPPO)
            "seq"       s_i = exp(mean_t x[t]) on every token, gradient through the mean (GSPO)
            "seq_token" forward s_i, gradient s_i * d logp_new[t] (GSPO-token, §1.4)
            "seg"       s_m = exp(mean_{t in seg m} x[t]) (SAPO, §7.4); needs `segments`
    The per-token loss is clipped_surrogate(ratio, adv[t]); it is aggregated with the
    weights (the probability mask of SPO; default 1) by `agg`. With kl in {1,2,3,4} the term
    beta * token-mean(k) over all tokens (unweighted) is added (kl_straight: k's value with
    k2's gradient d, verl's "+" forms). clamp_log_ratio > 0 clamps
    x to [-c, c] first (verl uses 20; off by default). seq_log_ratio_max = c > 0 ("seq_token"
    only, verl's GSPO clamp at 10): a sequence whose mean log-ratio exceeds c has the ratio
    e^c and no gradient."""
    mode = agg_mode(agg)
    B = len(logp_new)
    if weight is None:
        weight = [[1.0] * len(r) for r in logp_new]
    coef = agg_coefficients(weight, mode, norm_len)
    grad = [[0.0] * len(r) for r in logp_new]
    terms = []
    for i in range(B):
        T = len(logp_new[i])
        x, dx = [], []
        for t in range(T):
            v = logp_new[i][t] - logp_old[i][t]
            if clamp_log_ratio > 0 and abs(v) > clamp_log_ratio:
                x.append(math.copysign(clamp_log_ratio, v))
                dx.append(0.0)
            else:
                x.append(v)
                dx.append(1.0)
        if ratio == "token":
            spans = [(t, t + 1) for t in range(T)]
        elif ratio in ("seq", "seq_token"):
            spans = [(0, T)]
        elif ratio == "seg":
            st = segments[i]
            if not st or st[0] != 0 or any(a >= c for a, c in zip(st, st[1:])) or st[-1] >= T:
                raise RefError(f"bad segment starts {st} for a sequence of {T} tokens")
            spans = [(st[j], st[j + 1] if j + 1 < len(st) else T) for j in range(len(st))]
        else:
            raise RefError(f"unknown ratio kind {ratio}")
        for s, e in spans:
            n = e - s
            m = math.fsum(x[s:e]) / n
            capped = ratio == "seq_token" and 0 < seq_log_ratio_max < m
            r = math.exp(seq_log_ratio_max if capped else m)
            g_ratio = []  # c_t * d l_t / d r for the tokens of the span
            for t in range(s, e):
                l, dl = clipped_surrogate(r, adv[i][t], eps_low, eps_high, dual_clip)
                terms.append(coef[i][t] * l)
                g_ratio.append(coef[i][t] * dl)
            if ratio == "seq_token":
                for k, t in enumerate(range(s, e)):
                    if not capped:  # d w_t / d logp_new[t] = s_i
                        grad[i][t] += g_ratio[k] * r * dx[t]
            else:
                g = math.fsum(g_ratio) * r / n  # d r / d x[u] = r / n for u in the span
                for t in range(s, e):
                    grad[i][t] += g * dx[t]
    loss = math.fsum(terms)
    if kl:
        if logp_ref is None:
            raise RefError("a KL term needs token input logp_ref")
        N = sum(len(r) for r in logp_new)
        kterms = []
        for i in range(B):
            for t in range(len(logp_new[i])):
                k, dk = kl_term(logp_new[i][t] - logp_ref[i][t], kl)
                if kl_straight:
                    dk = logp_new[i][t] - logp_ref[i][t]
                kterms.append(k)
                grad[i][t] += beta * dk / N
        loss += beta * math.fsum(kterms) / N
    return loss, grad


def value_loss_clipped(values, values_old, returns, eps_v=0.2, weight=None, agg="token-mean",
                       norm_len=0):
    """PPO critic loss (§1.1): 0.5*max((v-G)^2, (clip(v, v_old-eps_v, v_old+eps_v)-G)^2),
    aggregated (default masked token-mean). Returns (loss, d loss / d v)."""
    if weight is None:
        weight = [[1.0] * len(r) for r in values]
    coef = agg_coefficients(weight, agg_mode(agg), norm_len)
    terms, grad = [], []
    for i in range(len(values)):
        g_row = []
        for t in range(len(values[i])):
            v, vo, G = values[i][t], values_old[i][t], returns[i][t]
            vc = min(max(v, vo - eps_v), vo + eps_v)
            l1, l2 = (v - G) ** 2, (vc - G) ** 2
            if l1 >= l2:
                l, d = 0.5 * l1, v - G
            else:
                l, d = 0.5 * l2, (vc - G if vc == v else 0.0)
            terms.append(coef[i][t] * l)
            g_row.append(coef[i][t] * d)
        grad.append(g_row)
    return math.fsum(terms), grad


def bce_loss(values, rewards):
    """Mean over sequences of BCE(v, R) (SPPO critic). Returns (loss, d loss / d v)."""
    B = len(values)
    loss = math.fsum(bce(v, r) for v, r in zip(values, rewards)) / B
    grad = [(v - r) / (v * (1.0 - v)) / B for v, r in zip(values, rewards)]
    return loss, grad


def kl_loss(logp_new, logp_ref, kind, beta=1.0):
    """beta * token-mean of k1/k2/k3 (§0.2). Returns (loss, d loss / d logp_new)."""
    return policy_loss(logp_new, logp_new, [[0.0] * len(r) for r in logp_new],
                       logp_ref=logp_ref, kl=kind, beta=beta)


_POLICY_PARAMS = {"eps_low": 0.2, "eps_high": 0.2, "dual_clip": 0.0, "agg": "token-mean",
                  "norm_len": 0, "clamp_log_ratio": 0.0, "kl": 0, "beta": 0.0}


def _policy_objective(ratio, default_agg="token-mean"):
    def run(b, p, segments=None):
        return policy_loss(b.tok("logp_new"), b.tok("logp"), b.tok("adv"), ratio=ratio,
                           segments=segments,
                           weight=b.tok("weight") if "weight" in b.token else None,
                           eps_low=p["eps_low"], eps_high=p["eps_high"],
                           dual_clip=p["dual_clip"], agg=p["agg"], norm_len=p["norm_len"],
                           clamp_log_ratio=p["clamp_log_ratio"],
                           logp_ref=b.tok("logp_ref") if "logp_ref" in b.token else None,
                           kl=as_int("kl", p["kl"], 0), beta=p["beta"])
    params = dict(_POLICY_PARAMS, agg=default_agg)
    return run, params


def _obj_sapo(b, p):
    """SAPO segment ratio: segments given in the batch ("segments": starts per sequence) or
    computed from token entropy with k_percent (sapo's rule)."""
    if "segments" in b.data:
        segs = [[int(s) for s in row] for row in b.data["segments"]]
    else:
        segs = [sapo_segments(h, p["k_percent"])[0] for h in b.tok("entropy")]
    q = {k: v for k, v in p.items() if k != "k_percent"}
    return _policy_objective("seg")[0](b, q, segments=segs)


def _obj_value_mse(b, p):
    return value_loss_clipped(b.tok("value"), b.tok("value_old"), b.tok("ret"), p["eps_v"],
                              b.tok("weight") if "weight" in b.token else None, p["agg"])


def _obj_kl(b, p):
    return kl_loss(b.tok("logp_new"), b.tok("logp_ref"), as_int("kl", p["kl"], 1), p["beta"])


# name -> (function(batch, params) -> (loss, grad), params, (domain, variable of the gradient))
OBJECTIVES = {
    "ppo_clip": (*_policy_objective("token"), ("token", "logp_new")),
    "gspo": (*_policy_objective("seq", "seq-mean-token-mean"), ("token", "logp_new")),
    "gspo_token": (*_policy_objective("seq_token"), ("token", "logp_new")),
    "sapo": (_obj_sapo, dict(_POLICY_PARAMS, k_percent=30), ("token", "logp_new")),
    "kl": (_obj_kl, {"kl": 3, "beta": 1.0}, ("token", "logp_new")),
    "value_mse": (_obj_value_mse, {"eps_v": 0.2, "agg": "token-mean"}, ("token", "value")),
    "bce": (lambda b, p: bce_loss(b.sq("value"), b.sq("reward")), {}, ("seq", "value")),
}


# --- verl registry policy losses (core_algos.py), with hand-derived gradients -------------


def _clamped_ratio(x):
    """exp(clamp(x, -20, 20)) and its derivative by x (0 where the clamp holds)."""
    if abs(x) > 20.0:
        return math.exp(math.copysign(20.0, x)), 0.0
    r = math.exp(x)
    return r, r


def _token_objective(rows, per_token, agg, norm_len=0):
    """Aggregates per-token (loss, d loss / d logp_new) pairs by `agg` (agg_coefficients).
    rows: dict of token inputs; per_token(i, t) -> (l, dl)."""
    n = rows["logp_new"]
    coef = agg_coefficients([[1.0] * len(r) for r in n], agg_mode(agg), norm_len)
    terms, grad = [], []
    for i in range(len(n)):
        g = []
        for t in range(len(n[i])):
            l, dl = per_token(i, t)
            terms.append(coef[i][t] * l)
            g.append(coef[i][t] * dl)
        grad.append(g)
    return math.fsum(terms), grad


def verl_dual_clip_token(ln, lo, A, eps_low=0.2, eps_high=0.2, c=3.0):
    """verl compute_policy_loss_vanilla for one token: (loss, d loss / d logp_new). Ties of
    torch.maximum / torch.minimum split the gradient, as autograd."""
    r, dr = _clamped_ratio(ln - lo)
    lo_b, hi_b = 1.0 - eps_low, 1.0 + eps_high
    rc = min(max(r, lo_b), hi_b)
    drc = dr if lo_b <= r <= hi_b else 0.0
    l1, d1 = -A * r, -A * dr
    l2, d2 = -A * rc, -A * drc
    if l1 > l2:
        l, d = l1, d1
    elif l2 > l1:
        l, d = l2, d2
    else:
        l, d = l1, 0.5 * (d1 + d2)
    if A < 0:
        l3 = -A * c
        if l3 < l:
            l, d = l3, 0.0
        elif l3 == l:
            d = 0.5 * d
    return l, d


def verl_kl_penalty(ln, lref, kind, straight):
    """verl kl_penalty: kind 1 k1, 2 k2, 3 low_var_kl (clamps -d to +-20, k3 to +-10), 4 abs;
    straight: the "+" form, value of the kind, gradient of k2 (d). (value, d value / d ln)."""
    d = ln - lref
    if kind == 1:
        v, g = d, 1.0
    elif kind == 2:
        v, g = 0.5 * d * d, d
    elif kind == 3:
        k = min(max(-d, -20.0), 20.0)
        dk = -1.0 if abs(d) <= 20.0 else 0.0
        e = math.exp(k)
        raw = e - k - 1.0
        v = min(max(raw, -10.0), 10.0)
        g = (e - 1.0) * dk if -10.0 <= raw <= 10.0 else 0.0
    elif kind == 4:
        v, g = abs(d), (1.0 if d > 0 else -1.0 if d < 0 else 0.0)
    else:
        raise RefError(f"unknown KL penalty {kind}")
    if straight:
        g = d
    return v, g


def obj_ppo_dual_clip(t, agg, p):
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    kl = "logp_ref" in t and "kl_coef" in p

    def f(i, j):
        l, d = verl_dual_clip_token(n[i][j], o[i][j], A[i][j], p.get("eps_low", 0.2),
                                    p.get("eps_high", 0.2), p.get("dual_clip", 3.0))
        if kl:
            v, g = verl_kl_penalty(n[i][j], t["logp_ref"][i][j],
                                   as_int("kl_type", p.get("kl_type", 3), 1),
                                   flag(p.get("straight", 0)))
            l, d = l + p["kl_coef"] * v, d + p["kl_coef"] * g
        return l, d
    return _token_objective(t, f, agg)


def obj_cispo(t, agg, p):
    n, o, A = t["logp_new"], t["logp"], t["adv"]

    def f(i, j):
        r, _ = _clamped_ratio(n[i][j] - o[i][j])
        w = min(max(r, 1.0 - p.get("eps_low", 0.2)), 1.0 + p.get("eps_high", 0.2))
        return -w * A[i][j] * n[i][j], -w * A[i][j]
    return _token_objective(t, f, agg)


def obj_gpg_loss(t, agg, p):
    n, A = t["logp_new"], t["adv"]
    return _token_objective(t, lambda i, j: (-n[i][j] * A[i][j], -A[i][j]), agg)


def obj_dro(t, agg, p):
    """verl's `dro` policy loss: -(logp_new A - beta / 2 (logp_new - logp)^2)."""
    n, o, A, beta = t["logp_new"], t["logp"], t["adv"], p.get("beta", 0.1)
    return _token_objective(t, lambda i, j: (-(n[i][j] * A[i][j] -
                                               0.5 * beta * (n[i][j] - o[i][j]) ** 2),
                                             -A[i][j] + beta * (n[i][j] - o[i][j])), agg)


def obj_dppo(t, agg, p):
    """verl compute_policy_loss_dppo_tv (kind 0) / dppo_kl (kind 1)."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    el, eh = p.get("eps_low", 0.2), p.get("eps_high", 0.2)
    cap, kind = p.get("ratio_cap", 3.0), as_int("kind", p.get("kind", 0), 0)

    def f(i, j):
        r, _ = _clamped_ratio(n[i][j] - o[i][j])
        w = min(r, cap)
        pn, q = math.exp(n[i][j]), math.exp(o[i][j])
        if kind == 0:
            ok = (pn - q <= eh) if A[i][j] > 0 else (pn - q >= -el)
        else:
            d = q * (o[i][j] - n[i][j]) + (1 - q) * math.log((1 - q + 1e-8) / (1 - pn + 1e-8))
            ok = (d <= eh or pn <= q) if A[i][j] > 0 else (d <= el or pn >= q)
        v = 1.0 if ok else 0.0
        return -A[i][j] * w * n[i][j] * v, -A[i][j] * w * v
    return _token_objective(t, f, agg)


def obj_soft_gate(t, agg, p):
    """verl compute_policy_loss_sapo: -A sigmoid(tau (r - 1)) 4 / tau."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]

    def f(i, j):
        r, dr = _clamped_ratio(n[i][j] - o[i][j])
        tau = p.get("tau_pos", 1.0) if A[i][j] > 0 else p.get("tau_neg", 1.05)
        sig = 1.0 / (1.0 + math.exp(-tau * (r - 1.0)))
        return -A[i][j] * sig * 4.0 / tau, -A[i][j] * 4.0 * sig * (1.0 - sig) * dr
    return _token_objective(t, f, agg)


def obj_gmpo(t, p):
    """verl compute_policy_loss_geo_mean: a seq loss, the mean over sequences of -A_i s_i."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    el, eh = p.get("eps_low", 0.4), p.get("eps_high", 0.4)
    B = len(n)
    losses, grad = [], []
    for i in range(B):
        T = len(n[i])
        m, dm = [], []
        for j in range(T):
            x = n[i][j] - o[i][j]
            s = 1.0 if A[i][j] > 0 else -1.0 if A[i][j] < 0 else 0.0
            xc = min(max(x, -el), eh)
            dxc = 1.0 if -el <= x <= eh else 0.0
            a, b = s * x, s * xc
            if a < b:
                m.append(s * a), dm.append(s * s)
            elif b < a:
                m.append(s * b), dm.append(s * s * dxc)
            else:
                m.append(s * a), dm.append(s * s * 0.5 * (1.0 + dxc))
        den = T + 1e-8
        ratio = math.exp(math.fsum(m) / den)
        adv = math.fsum(A[i]) / den
        losses.append(-adv * ratio)
        grad.append([-adv * ratio / den * d / B for d in dm])
    return math.fsum(losses) / B, grad


# name -> (function(token rows, aggregation, params) -> (loss, grad), seq loss?)
VERL_OBJECTIVES = {
    "ppo_dual_clip": obj_ppo_dual_clip,
    "ppo_dual_clip_kl": lambda t, agg, p: obj_ppo_dual_clip(
        t, agg, dict({"kl_coef": 0.001, "kl_type": 3, "straight": 0}, **p)),
    "cispo": obj_cispo,
    "gpg_loss": obj_gpg_loss,
    "dro": obj_dro,
    "dppo": obj_dppo,
    "soft_gate": obj_soft_gate,
    "gmpo": lambda t, agg, p: obj_gmpo(t, p),
}


# --- Rollout importance-sampling correction (verl's rollout_corr_helper.py) ---------------

ROLLOUT_SAFETY_BOUND = 20.0


def _safe_exp(x):
    """exp(clamp(x, -20, 20)): verl's SAFETY_BOUND before every exponentiation."""
    return math.exp(min(max(x, -ROLLOUT_SAFETY_BOUND), ROLLOUT_SAFETY_BOUND))


def rollout_is_rows(logp, logp_rollout, p):
    """verl compute_rollout_correction_and_rejection_mask on ragged rows, returned as one
    weight per token: the IS weight (compute_rollout_correction_weights: token or sequence
    level, truncated at rollout_is_threshold, optionally divided by its batch mean) where
    the token survives rejection sampling (compute_rollout_rejection_mask: token, sequence or
    geometric ratio inside [lower, upper]) and the veto (no token of the sequence with
    log ratio < log(veto)); 0 where it does not (verl: modified_response_mask = 0).
    p: is_level 0/1/2 (off/token/sequence), is_threshold, is_normalize, rs_level 0/1/2/3
    (off/token/sequence/geometric), rs_threshold, rs_threshold_lower (0: 1/upper), veto
    (0: off)."""
    is_level = as_int("is_level", p["is_level"], 0)
    rs_level = as_int("rs_level", p["rs_level"], 0)
    C = p["is_threshold"]
    lr = [[a - b for a, b in zip(r, q)] for r, q in zip(logp, logp_rollout)]
    sums = [math.fsum(r) for r in lr]
    if is_level == 1:
        w = [[min(_safe_exp(x), C) for x in r] for r in lr]
    elif is_level == 2:
        w = [[min(_safe_exp(s), C)] * len(r) for s, r in zip(sums, lr)]
    else:
        w = [[1.0] * len(r) for r in lr]
    if is_level and flag(p["is_normalize"]):
        if is_level == 1:  # masked_mean over every valid token of the batch
            mean_w = math.fsum(x for r in w for x in r) / sum(len(r) for r in w)
        else:  # the mean of the per-sequence weights
            mean_w = math.fsum(r[0] for r in w) / len(w)
        if mean_w > 1e-8:
            w = [[x / mean_w for x in r] for r in w]
    upper = p["rs_threshold"]
    lower = p["rs_threshold_lower"] if p["rs_threshold_lower"] > 0 else 1.0 / upper
    out = []
    for i, r in enumerate(lr):
        keep = [True] * len(r)
        if rs_level == 1:
            keep = [lower <= _safe_exp(x) <= upper for x in r]
        elif rs_level in (2, 3):
            x = sums[i] if rs_level == 2 else sums[i] / len(r)
            keep = [lower <= _safe_exp(x) <= upper] * len(r)
        if p["veto"] > 0 and any(x < math.log(p["veto"]) for x in r):
            keep = [False] * len(r)
        out.append([wt if k else 0.0 for wt, k in zip(w[i], keep)])
    return out


def eval_rollout_is(b, p):
    return _output(b, token={"is_weight": rollout_is_rows(b.tok("logp"), b.tok("logp_rollout"),
                                                          p)})


METHODS["rollout_is"] = (eval_rollout_is,
                         {"is_level": 1, "is_threshold": 2.0, "is_normalize": 0, "rs_level": 0,
                          "rs_threshold": 2.0, "rs_threshold_lower": 0.0, "veto": 0.0},
                         {"token": ["logp", "logp_rollout"]}, [("token", "is_weight")], [])


def is_weighted_objective(t, agg, per_token, ratio_of=None):
    """A verl policy loss with rollout_is_weights w = t["is_weight"] (ragged rows): the
    per-token policy loss times w, plus an unweighted extra term (verl's kl_loss, aggregated
    over the same mask), aggregated by `agg` over the tokens with w > 0 (verl's response
    mask after rejection: a token of weight 0 is left out of the loss and its denominator).
    per_token(i, j, ctx) -> (pg loss, d pg / d logp_new, extra, d extra / d logp_new);
    ratio_of(i, keep_row) -> ctx, computed once per sequence (GSPO's sequence ratio)."""
    w = t["is_weight"]
    keep = [[1.0 if x > 0 else 0.0 for x in r] for r in w]
    coef = agg_coefficients(keep, agg_mode(agg))
    terms, grad = [], []
    for i in range(len(w)):
        ctx = ratio_of(i, keep[i]) if ratio_of else None
        g = []
        for j in range(len(w[i])):
            if not keep[i][j]:
                g.append(0.0)
                continue
            l, dl, e, de = per_token(i, j, ctx)
            terms.append(coef[i][j] * (l * w[i][j] + e))
            g.append(coef[i][j] * (dl * w[i][j] + de))
        grad.append(g)
    return math.fsum(terms), grad


def obj_is(name, t, agg, p):
    """The *_is objectives: ppo_clip, ppo_kl, gspo_token, ppo_dual_clip, ppo_dual_clip_kl
    with verl's rollout IS weights (is_weighted_objective)."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    el = p.get("eps_low", 3e-4 if name == "gspo_token_is" else 0.2)
    eh = p.get("eps_high", 4e-4 if name == "gspo_token_is" else 0.2)
    ratio_of = None
    if name in ("ppo_clip_is", "ppo_kl_is"):
        dual = p.get("dual_clip", 0.0) if name == "ppo_clip_is" else 0.0

        def f(i, j, ctx):
            r = math.exp(n[i][j] - o[i][j])
            l, dr = clipped_surrogate(r, A[i][j], el, eh, dual)
            e = de = 0.0
            if name == "ppo_kl_is":
                k, dk = kl_term(n[i][j] - t["logp_ref"][i][j],
                                as_int("kl_type", p.get("kl_type", 3), 1))
                if p.get("straight", 0) > 0:  # verl's "+" forms: k2's gradient
                    dk = n[i][j] - t["logp_ref"][i][j]
                e, de = p.get("kl_coef", 0.001) * k, p.get("kl_coef", 0.001) * dk
            return l, dr * r, e, de
    elif name == "gspo_token_is":
        def ratio_of(i, keep_row):
            # verl: the log ratio's mean over the (rejection-masked) response mask, its
            # count clamped to at least 1; forward s_i, gradient s_i d logp_new[t].
            # Past log_ratio_max (verl's clamp), s_i = e^c without a gradient.
            kept = [n[i][j] - o[i][j] for j in range(len(keep_row)) if keep_row[j]]
            m = math.fsum(kept) / max(len(kept), 1)
            c = p.get("log_ratio_max", 0.0)
            return (math.exp(c), 0.0) if 0 < c < m else (math.exp(m), math.exp(m))

        def f(i, j, ctx):
            s, ds = ctx
            l, dr = clipped_surrogate(s, A[i][j], el, eh, 0.0)
            return l, dr * ds, 0.0, 0.0
    elif name in ("ppo_dual_clip_is", "ppo_dual_clip_kl_is"):
        q = dict(p)
        if name == "ppo_dual_clip_kl_is":
            q = dict({"kl_coef": 0.001, "kl_type": 3, "straight": 0}, **p)

        def f(i, j, ctx):
            l, d = verl_dual_clip_token(n[i][j], o[i][j], A[i][j], el, eh,
                                        q.get("dual_clip", 3.0))
            e = de = 0.0
            if name == "ppo_dual_clip_kl_is":
                v, g = verl_kl_penalty(n[i][j], t["logp_ref"][i][j],
                                       as_int("kl_type", q["kl_type"], 1), flag(q["straight"]))
                e, de = q["kl_coef"] * v, q["kl_coef"] * g
            return l, d, e, de
    else:
        raise RefError(f"unknown rollout-IS objective {name}")
    return is_weighted_objective(t, agg, f, ratio_of)


IS_OBJECTIVES = ("ppo_clip_is", "ppo_kl_is", "gspo_token_is", "ppo_dual_clip_is",
                 "ppo_dual_clip_kl_is")


def objective(name, data, params=None):
    """{"loss": x, "grad": {domain: {variable: d loss / d variable}}} for an objective."""
    if name not in OBJECTIVES:
        raise RefError(f"unknown objective {name}; known: {', '.join(OBJECTIVES)}")
    fn, declared, (dom, var) = OBJECTIVES[name]
    given = dict(data.get("params", {}))
    given.update(params or {})
    loss, grad = fn(Batch(data), resolve_params(declared, given, name))
    return {"loss": loss, "grad": {dom: {var: grad}}}


# ---------------------------------------------------------------------------------------
# Random batches
# ---------------------------------------------------------------------------------------

# Parameter variants drawn for "random" parameters (defaults are used in "default" mode).
PARAM_CHOICES = {
    "gae": {"gamma": [1.0, 0.99, 0.9], "lambda": [0.95, 1.0, 0.0, 0.9, 0.5]},
    "gae_dense": {"gamma": [1.0, 0.99, 0.9], "lambda": [0.95, 1.0, 0.0, 0.9, 0.5]},
    "grpo": {"eps": [1e-6, 1e-8, 1e-4, 0.01], "unbiased": [0, 1], "eps_in_sqrt": [0, 1]},
    "gspo": {"eps": [1e-6, 1e-8, 1e-4, 0.01], "unbiased": [0, 1], "eps_in_sqrt": [0, 1]},
    "rloo": {},
    "vineppo": {},
    "sae": {"gamma": [1.0, 0.99], "lambda": [0.9, 0.95, 0.99, 1.0, 0.5],
            "threshold": [0.2, 0.05, 0.5, 0.9], "literal": [0, 1]},
    "spo_chain": {"threshold": [0.9, 0.5, 0.95], "interval": [1, 2, 5, 10],
                  "cut_last": [0, 1], "head": [0, 1], "count": [0, 0, 1, 3, 8]},
    "spo_tree": {"normalize": [0, 1], "eps": [1e-8, 1e-6], "threshold": [0.9, 0.5]},
    "sppo": {},
    "treeadv": {"delta": [1e-6, 1e-4, 1e-8], "use_max": [0, 1]},
    "sapo": {"gamma": [1.0, 0.99], "lambda": [0.99, 0.9, 0.95, 1.0],
             "k_percent": [30, 10, 20, 25, 50, 100, 1], "v_at_end": [0, 1]},
}
PARAM_CHOICES.update({
    "drgrpo": {"lone": [0, 1]},
    "maxrl": {"eps": [1e-6, 1e-4, 0.1], "lone": [0, 1]},
    "opo": {"lone": [0, 1]},
    "gpg": {"f_norm": [1.0, 2.0, 0.5], "lone": [0, 1]},
    "remax": {},
    "reinforce_pp": {"gamma": [1.0, 0.99, 0.9], "eps": [1e-8, 1e-6]},
    "reinforce_pp_baseline": {"eps": [1e-8, 1e-6], "lone": [0, 1]},
})
GROUP_METHODS = ("grpo", "gspo", "rloo", "drgrpo", "maxrl", "opo", "gpg",
                 "reinforce_pp_baseline")
PARAM_CHOICES.update({
    "otb": {"eps": [1e-8, 1e-6, 0.1], "zero_tail": [0, 1]},
    "group_ops": {},
    "grpo_passk": {"eps": [1e-6, 1e-4, 0.1], "norm": [0, 1]},
})
GROUP_METHODS += ("grpo_passk", "group_ops", "otb")

PARAM_CHOICES.update({
    "vapo_gae": {"gamma": [1.0, 0.99], "alpha": [0.05, 0.5, 2.0], "lambda_value": [1.0, 0.95]},
    "vtrace_gae": {"gamma": [1.0, 0.99], "lambda": [1.0, 0.95, 0.5], "rho_bar": [1.0, 2.0, 0.5],
                   "c_bar": [1.0, 0.8, 2.0]},
    "gdpo": {"w1": [1.0, 0.5, 2.0], "w2": [1.0, 0.25], "eps": [1e-6, 1e-4], "std": [0, 1],
             "lone": [0, 1]},
})
GROUP_METHODS = GROUP_METHODS + ("gdpo",)

PARAM_CHOICES.update({
    "turn_gae": {"gamma": [1.0, 0.99], "lambda": [1.0, 0.95, 0.5], "turn_gamma": [0.95, 1.0, 0.8],
                 "whiten": [0, 1]},
})

PARAM_CHOICES.update({
    "group_keys": {},
    "gigpo": {"step_w": [1.0, 0.5, 2.0], "std": [0, 1], "eps": [1e-6, 1e-4], "lone": [0, 1]},
})
GROUP_METHODS = GROUP_METHODS + ("gigpo", "group_keys")

PARAM_CHOICES.update({
    "rollout_is": {"is_level": [0, 1, 2], "is_threshold": [2.0, 1.0, 5.0, 1.5],
                   "is_normalize": [0, 1], "rs_level": [0, 1, 2, 3],
                   "rs_threshold": [2.0, 1.0, 3.0], "rs_threshold_lower": [0.0, 0.5, 1.0, 0.25],
                   "veto": [0.0, 1e-4, 0.5]},
})

REQUIRED_DEFAULTS = {"sae": {"lambda": 0.95}}  # used for a required parameter in default mode

THRESHOLD_MARGIN = 1e-5  # relative distance kept between p_old and any threshold


def _choose_params(method, rng, mode):
    if mode == "default":
        return dict(REQUIRED_DEFAULTS.get(method, {}))
    params = {k: rng.choice(v) for k, v in PARAM_CHOICES[method].items()}
    # Some random draws keep a few defaults, so that partial overrides are exercised.
    declared = METHODS[method][1]
    for k in list(params):
        if declared[k] is not REQUIRED and rng.random() < 0.25:
            del params[k]
    return params


def _lengths(rng, B, max_len):
    out = []
    for _ in range(B):
        u = rng.random()
        if u < 0.15:
            out.append(1)
        elif u < 0.4:
            out.append(rng.randint(1, min(8, max_len)))
        elif u < 0.85:
            out.append(rng.randint(1, max_len))
        else:
            out.append(max_len)
    if B >= 2:
        out[rng.randrange(B)] = 1
    if B >= 3:
        out[rng.randrange(B)] = max_len
    return out


def _p_old(rng, thresholds):
    """A token probability: mostly confident, with a spread around the thresholds."""
    u = rng.random()
    if u < 0.05:
        p = 1.0
    elif u < 0.45:
        p = rng.uniform(0.9, 1.0)
    elif u < 0.6:
        p = rng.uniform(0.5, 0.9)
    elif u < 0.72:
        p = rng.uniform(0.1, 0.5)
    elif u < 0.82:
        p = math.exp(rng.uniform(math.log(1e-4), math.log(0.1)))
    else:
        thr = rng.choice(thresholds) if thresholds else 0.5
        p = min(1.0, thr * (1.0 + rng.choice([-1, 1]) * rng.uniform(1e-3, 0.05)))
    return p


def _logp(rng, thresholds):
    """f32-exact log-probability <= 0 whose exp() keeps a relative margin from every threshold."""
    lp = min(0.0, f32(math.log(max(_p_old(rng, thresholds), 1e-30))))
    for _ in range(100):
        if all(abs(math.exp(lp) / thr - 1.0) > THRESHOLD_MARGIN for thr in thresholds):
            return lp
        lp = f32(lp - 4 * THRESHOLD_MARGIN)
    raise AssertionError("could not keep logp away from the thresholds")


def _rewards(rng, B, kind):
    if kind == "binary":
        return [float(rng.random() < 0.5) for _ in range(B)]
    if kind == "ternary":  # TreeAdv: -1 for overlong outputs
        return [float(rng.choice([-1, 0, 0, 1, 1])) for _ in range(B)]
    # Non-binary: dyadic grid k/16 in [-1, 2] so that sums are exact in f32 and f64.
    return [rng.randint(-16, 32) / 16 for _ in range(B)]


def _value(rng):
    return f32(rng.uniform(-0.3, 1.3))


def _groups(rng, B, rewards, reward_kind):
    """Random group ids (not contiguous, not sorted, interleaved), with a group of one and a
    group whose rewards are all equal when B allows. Modifies rewards in place."""
    sizes, left = [], B
    while left > 0:
        s = min(left, rng.choice([1, 2, 3, 4, 4, 8, 8, 16, rng.randint(1, 12)]))
        sizes.append(s)
        left -= s
    if B >= 3 and 1 not in sizes:
        sizes[-1] -= 1
        sizes.append(1)
        sizes = [s for s in sizes if s > 0]
    ids = rng.sample(range(0, 1000), len(sizes))
    groups = [g for g, s in zip(ids, sizes) for _ in range(s)]
    order = list(range(B))
    rng.shuffle(order)
    groups = [groups[i] for i in order]
    multi = [g for g, s in zip(ids, sizes) if s >= 2]
    if multi:  # one group with all-equal rewards
        g = rng.choice(multi)
        v = _rewards(rng, 1, reward_kind)[0]
        for i in range(B):
            if groups[i] == g:
                rewards[i] = v
    return groups


def _random_tree_forest(rng, n_leaves, max_len, seg_len=None, root_tokens=True):
    """One random tree with at most n_leaves leaves (node 0 is the root). Returns (parent, ntok,
    leaves). Random branching 1..4 and depth 1..5; a root with or without tokens; internal
    nodes may own no token; internal nodes get seg_len tokens when it is given (SPO-tree) and
    leaves then stop early (1..seg_len tokens); every leaf owns >= 1 token and every root-to-leaf
    path holds <= max_len tokens."""
    parent, ntok, depth, path_tokens = [-1], [0], [0], [0]
    if root_tokens and rng.random() < 0.6:
        ntok[0] = rng.randint(1, max(1, min(max_len // 4, 8)))
    path_tokens[0] = ntok[0]
    max_depth = rng.randint(1, 5)
    frontier, leaves = [0], []
    while frontier:
        n = frontier.pop(0)
        room = max_len - path_tokens[n]  # tokens left for n's descendants
        extra = n_leaves - len(leaves) - len(frontier) - 1  # leaves branching may still add
        if n == 0 and ntok[0] == 0:
            branch = True  # a token-less root needs children
        elif n == 0:
            branch = room >= 1 and rng.random() < 0.95
        else:
            branch = depth[n] < max_depth and room >= 2 and rng.random() < 0.6
        if not branch:
            leaves.append(n)
            continue
        k = max(1, min(rng.choice([1, 2, 2, 3, 3, 4]), extra + 1))
        for _ in range(k):
            parent.append(n)
            depth.append(depth[n] + 1)
            if seg_len is not None:
                want = seg_len
            else:
                want = rng.choice([0, 1, 1, 2, 3, rng.randint(1, max(1, max_len // 3))])
            ntok.append(max(0, min(want, room - 1)))
            path_tokens.append(path_tokens[n] + ntok[-1])
            frontier.append(len(parent) - 1)
    for n in leaves:
        if seg_len is not None and ntok[n] > 1 and rng.random() < 0.5:
            ntok[n] = rng.randint(1, ntok[n])  # stopped before seg_len tokens
        ntok[n] = max(1, ntok[n])  # fits: the parent kept room >= 2 (or a root, >= 1)
    return parent, ntok, leaves


def _tree_batch(rng, max_len, num_trees, leaves_per_tree, seg_len_for=None, node_order="shuffled",
                p_thresholds=()):
    """A forest of trees as a batch skeleton: parent, per-sequence node rows, per-sequence
    tree index, and per-token logp shared between the copies of a node's tokens."""
    parent, ntok, tree_of_leaf, leaf_nodes = [], [], [], []
    for k in range(num_trees):
        seg_len = seg_len_for(rng) if seg_len_for else None
        p, n, leaves = _random_tree_forest(rng, leaves_per_tree(rng), max_len, seg_len,
                                           root_tokens=True)
        off = len(parent)
        parent += [x + off if x >= 0 else -1 for x in p]
        ntok += n
        leaf_nodes += [x + off for x in leaves]
        tree_of_leaf += [k] * len(leaves)
    K = len(parent)
    node_logp = [[_logp(rng, list(p_thresholds)) for _ in range(ntok[n])] for n in range(K)]
    # Node ids: shuffled (any order) or breadth-first as built.
    perm = list(range(K))
    if node_order == "shuffled":
        rng.shuffle(perm)
    new_parent = [0] * K
    for n in range(K):
        new_parent[perm[n]] = perm[parent[n]] if parent[n] >= 0 else -1
    seqs = []
    for leaf, tree_k in zip(leaf_nodes, tree_of_leaf):
        chain, n = [], leaf
        while n >= 0:
            chain.append(n)
            n = parent[n]
        chain.reverse()
        nodes = [perm[n] for n in chain for _ in range(ntok[n])]
        logp = [x for n in chain for x in node_logp[n]]
        seqs.append((nodes, logp, tree_k))
    rng.shuffle(seqs)
    return new_parent, seqs


def _spo_tree_robust(parent, node_rows, rewards):
    """True when "node advantage != 0" cannot depend on rounding: every exact zero comes out
    exactly 0, and every non-zero is far from 0, in f64 and in f32, summing in either order,
    dividing or multiplying by the reciprocal, and shifting by the first term or not."""
    tree = Tree(parent, node_rows)
    _, _, nonzero = spo_tree_values(tree, rewards)
    ends = {}
    for b, leaf in enumerate(tree.leaf_of_seq):
        ends.setdefault(leaf, []).append(rewards[b])
    for rnd in (lambda x: x, f32):
        for rev, recip, shift in itertools.product((False, True), repeat=3):
            V = [0.0] * len(parent)
            for n in tree.bottom_up:
                xs = [V[c] for c in tree.children[n]] or ends[n]
                if rev:
                    xs = xs[::-1]
                x0 = xs[0] if shift else 0.0  # x0 + sum(x - x0) / n
                s = 0.0
                for x in xs:
                    s = rnd(s + rnd(x - x0))
                q = rnd(s * rnd(1.0 / len(xs))) if recip else rnd(s / len(xs))
                V[n] = rnd(x0 + q)
            for n, p in enumerate(parent):
                if p >= 0:
                    d = rnd(V[n] - V[p])
                    if nonzero[n] != (d != 0) or (d != 0 and abs(d) < 1e-6):
                        return False
    return True


def random_batch(method, seed, max_len=64, num_seqs=None, params="mixed",
                 node_order="shuffled"):
    """A random ragged batch for `method` in the `cac eval` JSON format.

    Lengths 1..max_len (with a length-1 and a max_len sequence when there are enough);
    num_seqs sequences (random 1..24 when None; for tree methods the number of leaves);
    params: "default" (only required ones), "random" (drawn from PARAM_CHOICES) or "mixed"
    (default for odd seeds, random for even ones). Every float is exactly representable in
    float32; log-probs stay a relative 1e-5 away from the thresholds; group rewards are dyadic
    so that all-equal groups stay exactly equal. node_order: "shuffled" node ids or "bfs"."""
    if method not in METHODS:
        raise RefError(f"unknown method {method}")
    rng = random.Random(f"cacref:{method}:{seed}")
    if params == "mixed":
        params = "default" if seed % 2 else "random"
    p = _choose_params(method, rng, params)
    full = resolve_params(METHODS[method][1], p, method)
    B = num_seqs if num_seqs is not None else rng.randint(1, 24)
    reward_kind = rng.choice(["binary", "binary", "ternary", "dyadic"])
    data = {"params": p, "token": {}, "seq": {}}

    def logp_rows(lengths, thresholds):
        return [[_logp(rng, thresholds) for _ in range(n)] for n in lengths]

    if method in ("spo_tree", "treeadv"):
        if method == "spo_tree":
            n_trees = rng.randint(1, max(1, B // 6 + 1))
            per_tree = lambda r: (max(1, B // n_trees) if r.random() < 0.7
                                  else r.randint(1, max(1, B // n_trees)))
            seg_len_for = lambda r: r.choice([1, 2, 3, r.randint(1, max(1, max_len // 4))])
            thresholds = sorted({full["threshold"], 0.9})
        else:
            n_trees = rng.randint(1, max(1, B // 4 + 1))
            per_tree = lambda r: (max(1, B // n_trees) if r.random() < 0.7
                                  else r.randint(1, max(1, B // n_trees)))
            seg_len_for = None
            thresholds = [0.9]
        parent, seqs = _tree_batch(rng, max_len, n_trees, per_tree, seg_len_for, node_order,
                                   thresholds)
        B = len(seqs)
        node_rows = [s[0] for s in seqs]
        data["token"]["logp"] = [s[1] for s in seqs]
        data["tree"] = {"parent": parent, "node": node_rows}
        if method == "spo_tree":
            kind = rng.choice(["binary", "binary", "ternary", "dyadic"])
            for attempt in range(50):
                rewards = _rewards(rng, B, kind)
                if _spo_tree_robust(parent, node_rows, rewards):
                    break
            else:
                rewards = [1.0] * B  # all equal: every advantage is exactly 0
            data["seq"]["reward"] = rewards
        else:
            rewards = _rewards(rng, B, reward_kind)
            # One group per prompt; a prompt holds one or more trees.
            tree_ids = sorted({s[2] for s in seqs})
            n_prompts = rng.randint(1, len(tree_ids))
            gid_of_prompt = rng.sample(range(1000), n_prompts)
            prompt_of_tree = {t: gid_of_prompt[min(i * n_prompts // len(tree_ids),
                                                   n_prompts - 1)]
                              for i, t in enumerate(tree_ids)}
            groups = [prompt_of_tree[s[2]] for s in seqs]
            if rng.random() < 0.3:  # a group with all-equal rewards
                g = rng.choice(groups)
                v = _rewards(rng, 1, reward_kind)[0]
                rewards = [v if gg == g else r for gg, r in zip(groups, rewards)]
            data["seq"]["reward"] = rewards
            data["seq"]["group"] = groups
        return data

    lengths = _lengths(rng, B, max_len)
    rewards = _rewards(rng, B, reward_kind)
    data["seq"]["reward"] = rewards
    if method in GROUP_METHODS:
        groups = _groups(rng, B, rewards, reward_kind)
        if rng.random() < 0.15:
            # No group ids: one group; give it equal rewards now and then.
            if rng.random() < 0.3:
                data["seq"]["reward"] = [rewards[0]] * B
        else:
            data["seq"]["group"] = groups
        data["token"]["logp"] = logp_rows(lengths, [0.9])  # the lengths; objectives use it
        if method == "otb":  # sum of squared probabilities: in [p^2, 1]
            data["token"]["sum_pi2"] = [[f32(math.exp(2 * x) + rng.random() * (1 - math.exp(2 * x)))
                                         for x in row] for row in data["token"]["logp"]]
    elif method == "sppo":
        data["seq"]["value"] = [f32(rng.choice([rng.uniform(0.02, 0.98), 0.001, 0.999, 0.5]))
                                for _ in range(B)]
        if reward_kind == "dyadic":  # soft labels in [0, 1]
            data["seq"]["reward"] = [rng.randint(0, 16) / 16 for _ in range(B)]
        elif reward_kind == "ternary":
            data["seq"]["reward"] = [float(rng.random() < 0.5) for _ in range(B)]
        data["token"]["logp"] = logp_rows(lengths, [0.9])
    elif method == "remax":
        greedy = _rewards(rng, B, reward_kind)
        for i in range(B):  # ties with the sampled reward now and then
            if rng.random() < 0.3:
                greedy[i] = rewards[i]
        data["seq"]["greedy_reward"] = greedy
        data["token"]["logp"] = logp_rows(lengths, [0.9])
    elif method == "reinforce_pp":
        if rng.random() < 0.1:  # all equal: every return is R, no spread
            data["seq"]["reward"] = [rewards[0]] * B
        data["token"]["logp"] = logp_rows(lengths, [0.9])
    elif method == "gae":
        data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
    elif method == "gae_dense":
        # A token reward: the outcome on the last token minus a KL penalty
        # coef * kl[t] on every token (kl >= 0, as k1 of a sampled token
        # mostly is), as cac-run builds it with `kl = k1(.., in_reward = 1)`.
        del data["seq"]["reward"]
        data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
        coef = rng.choice([0.0, 0.001, 0.01, 0.1])
        data["token"]["reward"] = [
            [f32(-coef * rng.uniform(0.0, 2.0) + (rewards[i] if t == n - 1 else 0.0))
             for t in range(n)] for i, n in enumerate(lengths)]
    elif method == "sae":
        data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
        data["token"]["logp"] = logp_rows(lengths, sorted({full["threshold"], 0.2}))
    elif method == "vineppo":
        rows = []
        for n in lengths:
            q = rng.choice([0.0, 0.05, 0.15, 0.4])
            row = [1.0 if rng.random() < q else 0.0 for _ in range(n)]
            if rng.random() < 0.3:
                row[-1] = 1.0  # a trailing newline
            rows.append(row)
        data["token"]["newline"] = rows
        n_mc = rng.choice([4, 9])
        data["seg"] = {"mc_value": [[f32(rng.randint(0, n_mc) / n_mc)
                                     for _ in vineppo_segments(r)] for r in rows]}
    elif method == "spo_chain":
        rows = logp_rows(lengths, sorted({full["threshold"], 0.9}))
        data["token"]["logp"] = rows
        n_mc = rng.choice([4, 9])
        mc = []
        for r in rows:
            starts, _ = spo_chain_segments(p_old_of(r), full["threshold"],
                                           as_int("interval", full["interval"], 1),
                                           flag(full["cut_last"]),
                                           as_int("count", full["count"], 0))
            mc.append([f32(rng.randint(0, n_mc) / n_mc) for _ in starts])
        data["seg"] = {"mc_value": mc}
    elif method == "sapo":
        data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
        # Entropies on a 1/64 grid: exact in f32, with deliberate ties (broken by index).
        data["token"]["entropy"] = [[rng.choice([0, 0, 1, 2, 3, 4, rng.randint(0, 320)]) / 64
                                     if rng.random() < 0.5 else rng.randint(0, 320) / 64
                                     for _ in range(n)] for n in lengths]
    _extend_batch(method, rng, data, lengths, reward_kind)
    return data


def _extend_batch(method, rng, data, lengths, reward_kind):
    """The inputs of the verl-registry additions (vapo_gae, vtrace_gae, gdpo)."""
    if method in ("vapo_gae", "vtrace_gae"):
        data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
    if method == "vtrace_gae":
        # Ratios pi/mu on both sides of rho_bar and c_bar; equal log-probs now and then.
        logp = [[_logp(rng, [0.9]) for _ in range(n)] for n in lengths]
        data["token"]["logp"] = logp
        data["token"]["logp_behavior"] = [
            [x if rng.random() < 0.2 else f32(min(0.0, x + rng.gauss(0, 0.5))) for x in r]
            for r in logp]
    if method == "rollout_is":
        data["token"]["logp"], data["token"]["logp_rollout"] = rollout_logp_rows(rng, lengths)
    if method == "turn_gae":
        _turn_batch(rng, data, lengths)
    if method == "gigpo":
        _gigpo_steps(rng, data)
    if method == "gdpo":
        B = len(lengths)
        r2 = _rewards(rng, B, rng.choice(["binary", "dyadic"]))
        groups = data["seq"].get("group", [0] * B)
        for g in sorted(set(groups)):
            if rng.random() < 0.3:  # this group's second component all equal
                v = r2[groups.index(g)]
                r2 = [v if gg == g else x for gg, x in zip(groups, r2)]
        data["seq"]["reward2"] = r2


def rollout_logp_rows(rng, lengths):
    """logp and logp_rollout rows whose log ratios are on the grid k/64 (exact in f32, so
    the ratios, sums and thresholds compare the same in every precision): mostly 0 (ratio 1
    exactly, at the thresholds 1 of the parameter draws), small moves of both signs and now
    and then a catastrophic one (below the veto's log 1e-4, past the +-20 clamp). A
    sequence whose mean log ratio comes within 1e-3 of a threshold's log gets its first
    ratio moved, so that the geometric mean never straddles one through rounding."""
    logs = [math.log(x) for x in (2.0, 0.5, 1.0, 3.0, 1 / 3, 0.25, 4.0, 1.5, 2 / 3)]
    old, roll = [], []
    for n in lengths:
        lr = []
        for _ in range(n):
            u = rng.random()
            if u < 0.5:
                lr.append(0.0)
            elif u < 0.97:
                lr.append(rng.randint(-48, 48) / 64)
            else:
                lr.append(rng.choice([-11.0, -22.0, 21.5, 0.5]))
        while any(abs(math.fsum(lr) / n - c) < 1e-3 for c in logs if abs(c) > 0) and n > 1:
            lr[0] += 1 / 64
        a = [-rng.randint(0, 512) / 256 for _ in range(n)]
        old.append(a)
        roll.append([x - d for x, d in zip(a, lr)])
    return old, roll


def _gigpo_steps(rng, data):
    """One row per step: a few anchor states per group (ids reused across groups, which must
    not join them), returns on a dyadic grid, now and then all equal for an anchor state."""
    B = len(data["seq"]["reward"])
    groups = data["seq"].get("group", [0] * B)
    n_states = rng.choice([1, 2, 3, 6])
    anchor = [float(rng.randrange(n_states)) for _ in range(B)]
    ret = [rng.randint(-16, 32) / 16 for _ in range(B)]
    for key in sorted(set(zip(groups, anchor))):
        if rng.random() < 0.3:  # this step group's returns all equal
            rows = [i for i in range(B) if (groups[i], anchor[i]) == key]
            ret = [ret[rows[0]] if i in rows else x for i, x in enumerate(ret)]
    data["seq"]["anchor"] = anchor
    data["seq"]["step_return"] = ret


def _turn_batch(rng, data, lengths):
    """Turns (token "turn_start"): none but the first in some rows, one-token turns in others;
    the turn's reward (dyadic) on its last token, now and then a token reward inside a turn."""
    del data["seq"]["reward"]
    starts, rewards = [], []
    for n in lengths:
        q = rng.choice([0.0, 0.05, 0.2, 0.6])
        row = [1.0 if t == 0 or rng.random() < q else 0.0 for t in range(n)]
        if rng.random() < 0.2:
            row[0] = 0.0  # the first token starts a turn anyway
        ends = {t - 1 for t in range(1, n) if row[t]} | {n - 1}
        rewards.append([rng.randint(-16, 32) / 16 if t in ends and rng.random() < 0.8
                        else (rng.randint(-4, 4) / 16 if rng.random() < 0.1 else 0.0)
                        for t in range(n)])
        starts.append(row)
    data["token"]["turn_start"] = starts
    data["token"]["reward"] = rewards
    data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]


# Rewards whose mean is inexact in binary: a group of them leaves a rounding residue in a
# plain sum / n, which a zero-spread convention must not turn into an advantage.
INEXACT_EQUAL = (0.1, 0.3, 0.7, -0.2, 1.0)
EDGE_METHODS = ("grpo", "treeadv", "spo_tree", "grpo_passk", "group_ops", "otb", "gigpo",
                "group_keys")


def edge_batch(method, seed, max_len=64, num_seqs=None):
    """A batch at the edges the conventions settle (§1.2, §3.3, §6.3), for EDGE_METHODS:
    no epsilon (grpo eps = 0, treeadv delta = 0, spo_tree normalize = 1 with eps = 0 half the
    time) on groups of equal rewards, inexact ones included (0.1: a plain mean is off by an
    ulp); spo_tree on trees whose rewards are all equal and on deep chains of one-token nodes
    (up to max_len deep) with leaves branching off. Expected: A = 0 wherever the spread is 0."""
    if method not in EDGE_METHODS:
        raise RefError(f"no edge batches for {method}; they exist for {', '.join(EDGE_METHODS)}")
    rng = random.Random(f"cacref-edge:{method}:{seed}")
    if method == "spo_tree" and seed % 2 == 0:
        return _deep_chain_batch(rng, max_len)
    data = random_batch(method, seed, max_len, num_seqs, params="random")
    rewards = data["seq"]["reward"]
    equal = f32(rng.choice(INEXACT_EQUAL))
    if method == "spo_tree":
        data["seq"]["reward"] = [equal] * len(rewards)
        data["params"]["normalize"] = rng.choice([0, 1])
        data["params"]["eps"] = rng.choice([0, 1e-8])
        return data
    groups = data["seq"].get("group", [0] * len(rewards))
    for g in sorted(set(groups)):
        if rng.random() < 0.5:  # this group's rewards all equal (inexact ones half the time)
            v = equal if rng.random() < 0.5 else rewards[groups.index(g)]
            rewards = [v if gg == g else r for gg, r in zip(groups, rewards)]
    data["seq"]["reward"] = rewards
    if method == "grpo":
        data["params"] = {"eps": 0, "unbiased": rng.choice([0, 1]),
                          "eps_in_sqrt": rng.choice([0, 1])}
    elif method == "grpo_passk":
        data["params"] = {"eps": 0, "norm": rng.choice([0, 1])}
    elif method in ("group_ops", "group_keys"):
        data["params"] = {}
    elif method == "gigpo":
        # No epsilon; the step returns of an anchor state all equal (inexact ones too).
        data["params"] = {"std": 1, "eps": 0, "lone": rng.choice([0, 1]),
                          "step_w": rng.choice([1.0, 0.5])}
        keys = list(zip(groups, data["seq"]["anchor"]))
        ret = data["seq"]["step_return"]
        for key in sorted(set(keys)):
            if rng.random() < 0.5:
                v = equal if rng.random() < 0.5 else ret[keys.index(key)]
                ret = [v if k == key else x for k, x in zip(keys, ret)]
        data["seq"]["step_return"] = ret
    elif method == "otb":
        data["params"] = {"eps": rng.choice([1e-8, 1e-12]), "zero_tail": rng.choice([0, 1])}
    else:
        data["params"] = {"delta": 0, "use_max": rng.choice([0, 1])}
    return data


def _deep_chain_batch(rng, max_len):
    """SPO-tree on a chain of D one-token nodes (D up to max_len) with one-token leaves
    branching off at random depths; node ids shuffled. Each inner chain node has one or two
    children, so its sibling sets are often of one (spread 0)."""
    D = rng.randint(max(2, max_len // 2), max(2, max_len - 1))
    parent = [-1] + list(range(D - 1))
    leaves = [D - 1]
    for d in sorted(rng.sample(range(D - 1), min(D - 1, rng.randint(1, 12)))):
        parent.append(d)
        leaves.append(len(parent) - 1)
    K = len(parent)
    perm = list(range(K))
    rng.shuffle(perm)
    logp = [_logp(rng, [0.9]) for _ in range(K)]
    node_rows, logp_rows = [], []
    for leaf in leaves:
        chain, n = [], leaf
        while n >= 0:
            chain.append(n)
            n = parent[n]
        chain.reverse()
        node_rows.append([perm[n] for n in chain])
        logp_rows.append([logp[n] for n in chain])
    new_parent = [0] * K
    for n in range(K):
        new_parent[perm[n]] = perm[parent[n]] if parent[n] >= 0 else -1
    for _ in range(50):
        rewards = _rewards(rng, len(leaves), "binary")
        if _spo_tree_robust(new_parent, node_rows, rewards):
            break
    else:
        rewards = [1.0] * len(leaves)
    return {"params": {"normalize": rng.choice([0, 1]), "eps": rng.choice([0, 1e-8])},
            "token": {"logp": logp_rows}, "seq": {"reward": rewards},
            "tree": {"parent": new_parent, "node": node_rows}}


def random_objective_batch(name, seed, max_len=32, num_seqs=None):
    """A random batch for an objective: token logp (old), logp_new, adv, weight, logp_ref;
    value, value_old, ret; seq value and reward for bce."""
    rng = random.Random(f"cacref-objective:{name}:{seed}")
    B = num_seqs if num_seqs is not None else rng.randint(1, 8)
    lengths = _lengths(rng, B, max_len)
    data = {"params": {}, "token": {}, "seq": {}}
    if name == "bce":
        data["seq"]["value"] = [f32(rng.uniform(0.02, 0.98)) for _ in range(B)]
        data["seq"]["reward"] = [rng.choice([0.0, 1.0, 0.25]) for _ in range(B)]
        data["token"]["logp"] = [[-0.1] * n for n in lengths]
        return data
    old = [[_logp(rng, [0.9]) for _ in range(n)] for n in lengths]
    data["token"]["logp"] = old
    data["token"]["logp_new"] = [[f32(min(0.0, x + rng.gauss(0, 0.2))) for x in r] for r in old]
    data["token"]["logp_ref"] = [[f32(min(0.0, x + rng.gauss(0, 0.3))) for x in r] for r in old]
    if rng.random() < 0.5:
        data["token"]["adv"] = [[f32(rng.uniform(-2, 2))] * n for n in lengths]
    else:
        data["token"]["adv"] = [[f32(rng.uniform(-2, 2)) for _ in range(n)] for n in lengths]
    if rng.random() < 0.5:
        data["token"]["weight"] = [[1.0 if math.exp(x) < 0.9 else 0.0 for x in r] for r in old]
    data["token"]["value"] = [[_value(rng) for _ in range(n)] for n in lengths]
    data["token"]["value_old"] = [[f32(v + rng.uniform(-0.4, 0.4)) for v in r]
                                  for r in data["token"]["value"]]
    data["token"]["ret"] = [[_value(rng) for _ in range(n)] for n in lengths]
    data["token"]["entropy"] = [[rng.randint(0, 320) / 64 for _ in range(n)] for n in lengths]
    return data


# ---------------------------------------------------------------------------------------
# Batch-wide top-k and the seeded uniform draw (docs/language.md, "Batch-wide top-k");
# KL-Cov and Clip-Cov (verl's compute_policy_loss_kl_cov / _clip_cov)
# ---------------------------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _splitmix(z):
    """splitmix64's output function of z + the golden gamma, modulo 2^64."""
    z = (z + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def uniform_draw(seed, i, t, digits=53):
    """uniform(seed) at position t of sequence i: the top `digits` bits of
    mix(mix(mix(s) ^ i) ^ t) over 2^digits (53 in f64, 24 in f32); s the seed truncated to
    an integer, clamped to +-2^62, NaN 0."""
    s = 0.0 if math.isnan(seed) else max(min(float(seed), 2.0 ** 62), -2.0 ** 62)
    h = _splitmix(_splitmix(_splitmix(int(s) & _M64) ^ i) ^ t)
    return (h >> (64 - digits)) / 2.0 ** digits


def batch_top_k(rows, k):
    """0/1 rows: the k largest values of all the tokens, ties by the lower (sequence,
    position); NaN above every number, -0.0 equal to 0.0; k rounded down and clamped to
    [0, N] (below 1 or NaN: no token)."""
    flat = [v for r in rows for v in r]
    kk = int(min(math.floor(k), len(flat))) if k >= 1 else 0
    order = sorted(range(len(flat)), key=lambda j: (not math.isnan(flat[j]),
                                                    0.0 if math.isnan(flat[j]) else -flat[j], j))
    chosen = set(order[:kk])
    out, j = [], 0
    for r in rows:
        out.append([1.0 if j + t in chosen else 0.0 for t in range(len(r))])
        j += len(r)
    return out


def eval_batch_ops(b, p):
    """test/reference/lang/batch_ops.cac: batch_top_k with ties (a coarse score, a seq value
    on every token), a runtime count, and a random subset drawn with uniform(seed)."""
    R, lp, L = b.sq("reward"), b.tok("logp"), b.lengths
    gmax = {}
    for idx in group_members(b.groups).values():
        for i in idx:
            gmax[i] = max(R[j] for j in idx)
    score = [[float(math.floor(x * 4)) for x in r] for r in lp]
    u = [[uniform_draw(p["seed"], i, t) for t in range(L[i])] for i in range(b.B)]
    band = [[1.0 if s > -2 else 0.0 for s in r] for r in score]
    k = p["k"]
    top_r = batch_top_k([[lp[i][t] * R[i] + t for t in range(L[i])] for i in range(b.B)],
                        math.floor(p["ratio"] * sum(L)))
    top_g = batch_top_k([[R[i] + gmax[i]] * L[i] for i in range(b.B)], k)
    pick = batch_top_k([[u[i][t] if band[i][t] else -1.0 for t in range(L[i])]
                        for i in range(b.B)], k)
    pick = [[x * y for x, y in zip(r, q)] for r, q in zip(pick, band)]
    return _output(b, token={"u": u, "top": batch_top_k(score, k), "top_r": top_r,
                             "top_g": top_g, "pick": pick})


METHODS.update({
    "batch_ops": (eval_batch_ops, {"k": 3, "seed": 7, "ratio": 0.25},
                  {"token": ["logp"], "seq": ["reward", "group"]},
                  [("token", "u"), ("token", "top"), ("token", "top_r"), ("token", "top_g"),
                   ("token", "pick")], []),
})
# k = 0, fractional, beyond N and negative; seeds negative, fractional and large (below
# 2^24, exact in f32, as parameters are f32 numbers in an f32 bundle).
PARAM_CHOICES.update({
    "batch_ops": {"k": [0, 1, 3, 2.5, 40, 1e9, -1], "seed": [7, 0, -5, 9876543, 2.9],
                  "ratio": [0.0, 0.25, 1.0, 2.0, 0.001]},
})
GROUP_METHODS += ("batch_ops",)


def _covariance(A, lp):
    """verl's cov of KL-Cov and Clip-Cov: (A - mean A)(logp - mean logp) on every token,
    the means over all the (valid) tokens."""
    fa, fl = [x for r in A for x in r], [x for r in lp for x in r]
    ma, ml = math.fsum(fa) / len(fa), math.fsum(fl) / len(fl)
    return [[(a - ma) * (x - ml) for a, x in zip(ra, rl)] for ra, rl in zip(A, lp)]


def obj_kl_cov(t, agg, p):
    """verl compute_policy_loss_kl_cov: -A r, plus coef |logp_new - logp| on the
    max(1, int(N ratio)) tokens of largest covariance (ties by the lower index)."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    ratio, coef = p.get("kl_cov_ratio", 0.0002), p.get("ppo_kl_coef", 0.1)
    N = sum(len(r) for r in n)
    picked = batch_top_k(_covariance(A, n), max(1, int(N * ratio)))

    def f(i, j):
        d = n[i][j] - o[i][j]
        r = math.exp(d)
        l, g = -A[i][j] * r, -A[i][j] * r
        if picked[i][j]:
            l, g = l + coef * abs(d), g + coef * (1.0 if d > 0 else -1.0 if d < 0 else 0.0)
        return l, g
    return _token_objective(t, f, agg)


def obj_clip_cov(t, agg, p):
    """verl compute_policy_loss_clip_cov: max(-A r, -A clamp(r)) times 0 on a random subset
    of max(1, int(N ratio)) of the tokens (fewer if fewer qualify) whose covariance lies in
    (lb, ub) and that the clip leaves alone; the subset by uniform(seed), not randperm."""
    n, o, A = t["logp_new"], t["logp"], t["adv"]
    el, eh = p.get("eps_low", 0.2), p.get("eps_high", 0.2)
    lb, ub = p.get("clip_cov_lb", 1.0), p.get("clip_cov_ub", 5.0)
    ratio, seed = p.get("clip_cov_ratio", 0.0002), p.get("seed", 0)
    cov = _covariance(A, n)
    terms = {}
    for i in range(len(n)):
        for j in range(len(n[i])):
            r = math.exp(n[i][j] - o[i][j])
            rc = min(max(r, 1.0 - el), 1.0 + eh)
            drc = r if 1.0 - el <= r <= 1.0 + eh else 0.0
            terms[i, j] = (-A[i][j] * r, -A[i][j] * r, -A[i][j] * rc, -A[i][j] * drc)
    band = [[lb < cov[i][j] < ub and not terms[i, j][2] > terms[i, j][0]
             for j in range(len(n[i]))] for i in range(len(n))]
    N = sum(len(r) for r in n)
    draw = [[uniform_draw(seed, i, j) if band[i][j] else -1.0 for j in range(len(n[i]))]
            for i in range(len(n))]
    picked = batch_top_k(draw, max(int(ratio * N), 1))

    def f(i, j):
        l1, d1, l2, d2 = terms[i, j]
        l, g = (l1, d1) if l1 > l2 else (l2, d2) if l2 > l1 else (l1, 0.5 * (d1 + d2))
        c = 0.0 if picked[i][j] and band[i][j] else 1.0
        return l * c, g * c
    return _token_objective(t, f, agg)


VERL_OBJECTIVES.update({"kl_cov": obj_kl_cov, "clip_cov": obj_clip_cov})


# ---------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------


def _parse_param(s):
    k, _, v = s.partition("=")
    return k, float(v)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("eval", help="print the output JSON of a method on a batch")
    e.add_argument("method")
    e.add_argument("--input", required=True)
    e.add_argument("--param", action="append", default=[], type=_parse_param)
    g = sub.add_parser("gen", help="print a random batch")
    g.add_argument("method")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--max-len", type=int, default=64)
    g.add_argument("--num-seqs", type=int)
    g.add_argument("--params", choices=["mixed", "default", "random"], default="mixed")
    g.add_argument("--node-order", choices=["shuffled", "bfs"], default="shuffled")
    o = sub.add_parser("objective", help="print loss and gradient of an objective")
    o.add_argument("name")
    o.add_argument("--input", required=True)
    o.add_argument("--param", action="append", default=[], type=_parse_param)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "eval":
            with open(args.input) as f:
                out = evaluate(args.method, json.load(f), dict(args.param))
        elif args.cmd == "objective":
            with open(args.input) as f:
                out = objective(args.name, json.load(f), dict(args.param))
        else:
            out = random_batch(args.method, args.seed, args.max_len, args.num_seqs,
                               args.params, args.node_order)
    except RefError as err:
        print(f"cacref: error: {err}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
