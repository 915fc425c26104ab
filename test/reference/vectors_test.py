#!/usr/bin/env python3
"""Self-tests of cacref: every worked vector of estimators.md §11 (11.1-11.9) within 1e-6,
finite-difference checks of every analytic gradient, independent cross-checks (SAE against
its boundary form, TreeAdv's redistribution invariant, ...) and properties of the random
batches. Run: python3 test/reference/vectors_test.py   (exit status 1 on any failure)."""

import json
import math
import os
import random
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cacref as R  # noqa: E402

TOL = 1e-6
_results = {"passed": 0, "failed": 0}
_tests = []


def test(fn):
    _tests.append(fn)
    return fn


def close(got, want, tol=TOL, what=""):
    """Asserts that two numbers or (nested) lists agree within tol (absolute)."""
    if isinstance(want, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(got) == len(want), \
            f"{what}: length {len(got) if isinstance(got, (list, tuple)) else got} != {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            close(g, w, tol, f"{what}[{i}]")
        return
    assert abs(got - want) <= tol, f"{what}: got {got!r}, want {want!r}"


def one_seq_batch(token, seq, params=None, seg=None, tree=None):
    d = {"params": params or {}, "token": {k: [v] for k, v in token.items()},
         "seq": {k: [v] for k, v in seq.items()}}
    if seg:
        d["seg"] = {k: [v] for k, v in seg.items()}
    if tree:
        d["tree"] = tree
    return d


# --------------------------------------------------------------------------------------
# 11.1 GAE
# --------------------------------------------------------------------------------------

V11 = [0.5, 0.6, 0.4, 0.7]


@test
def gae_11_1():
    close(R.td_errors(V11, 1.0, 1.0), [0.1, -0.2, 0.3, 0.3], what="delta")
    for lam, A, ret in [(0.9, [0.381700, 0.313000, 0.570000, 0.300000], [0.8817, 0.913, 0.97, 1.0]),
                        (1.0, [0.5, 0.4, 0.6, 0.3], [1, 1, 1, 1]),
                        (0.0, [0.1, -0.2, 0.3, 0.3], [0.6, 0.4, 0.7, 1.0])]:
        out = R.evaluate("gae", one_seq_batch({"value": V11}, {"reward": 1.0},
                                              {"lambda": lam}))
        close(out["token"]["adv"][0], A, what=f"A lambda={lam}")
        close(out["token"]["ret"][0], ret, what=f"ret lambda={lam}")


# --------------------------------------------------------------------------------------
# 11.2 SAE
# --------------------------------------------------------------------------------------

V12 = [0.50, 0.55, 0.30, 0.35, 0.40, 0.80]
P12 = [0.95, 0.10, 0.90, 0.99, 0.15, 0.85]


@test
def sae_11_2():
    close(R.td_errors(V12, 1.0, 1.0), [0.05, -0.25, 0.05, 0.05, 0.40, 0.20], what="delta")
    close(R.sae_decay_lambdas(P12, 0.2, 0.9, False), [1, 0.9, 1, 1, 0.9, 1], what="lam chosen")
    close(R.sae_decay_lambdas(P12, 0.2, 0.9, True), [0.9, 1, 1, 0.9, 1, 1], what="lam literal")
    batch = one_seq_batch({"value": V12, "logp": [math.log(p) for p in P12]}, {"reward": 1.0},
                          {"lambda": 0.9})
    out = R.evaluate("sae", batch)
    close(out["token"]["adv"][0], [0.412, 0.362, 0.680, 0.630, 0.580, 0.200], what="A chosen")
    close(out["token"]["ret"][0], [0.912, 0.912, 0.98, 0.98, 0.98, 1.0], what="ret")
    close(R.sae_boundary_form(V12, P12, 1.0, 0.9, 0.2)[0], 0.412, what="boundary form A[0]")
    close(0.1 * (0.30 - 0.50) + 0.09 * (0.80 - 0.50) + 0.81 * (1 - 0.50), 0.412, what="doc")
    out = R.evaluate("sae", batch, {"literal": 1})
    close(out["token"]["adv"][0], [0.401, 0.390, 0.640, 0.590, 0.600, 0.200], what="A literal")
    gae = R.gae_seq(V12, 1.0, 1.0, 0.9)[0]
    close(gae, [0.282488, 0.258320, 0.564800, 0.572000, 0.580000, 0.200000], what="GAE(0.9)")


@test
def sae_required_lambda():
    batch = one_seq_batch({"value": V12, "logp": [math.log(p) for p in P12]}, {"reward": 1.0})
    try:
        R.evaluate("sae", batch)
    except R.RefError as e:
        assert "lambda" in str(e)
    else:
        raise AssertionError("sae without lambda must fail")


@test
def sae_matches_boundary_form_on_random_inputs():
    rng = random.Random(7)
    for _ in range(200):
        T = rng.randint(1, 30)
        V = [rng.uniform(-1, 2) for _ in range(T)]
        P = [rng.random() for _ in range(T)]
        Rw, lam, thr = rng.choice([0.0, 1.0, 0.5]), rng.choice([0.0, 0.5, 0.9, 1.0]), 0.3
        a = R.sae_seq(V, P, Rw, 1.0, lam, thr)[0]
        close(a, R.sae_boundary_form(V, P, Rw, lam, thr), 1e-12, "sae vs boundary form")
        # Special cases of §4.3: no boundary -> R - V; all flagged -> GAE(lambda).
        close(R.sae_seq(V, [1.0] * T, Rw, 1.0, lam, thr)[0], [Rw - v for v in V], 1e-12, "MC")
        close(R.sae_seq(V, [0.0] * T, Rw, 1.0, lam, thr)[0], R.gae_seq(V, Rw, 1.0, lam)[0],
              1e-12, "GAE")


# --------------------------------------------------------------------------------------
# 11.3 GRPO / RLOO / SPPO
# --------------------------------------------------------------------------------------

R13 = [1, 0, 0, 1, 1, 0, 0, 0]


def grpo_pair(**params):
    out = R.evaluate("grpo", {"params": params, "token": {"logp": [[-0.1]] * 8},
                              "seq": {"reward": R13, "group": [5] * 8}})
    adv = [row[0] for row in out["token"]["adv"]]
    succ = {adv[i] for i in range(8) if R13[i] == 1}
    fail = {adv[i] for i in range(8) if R13[i] == 0}
    assert len(succ) == 1 and len(fail) == 1
    return succ.pop(), fail.pop()


@test
def grpo_11_3():
    close(R.mean(R13), 0.375, what="mean")
    close(math.sqrt(R.pop_var(R13)), 0.484123, what="pop std")
    close(math.sqrt(R.unbiased_var(R13)), 0.517549, what="unbiased std")
    close(grpo_pair(eps=1e-8), [1.290994, -0.774597], what="pop std + 1e-8")
    p = 0.375
    close([math.sqrt((1 - p) / p), -math.sqrt(p / (1 - p))], [1.290994, -0.774597], what="closed")
    close(grpo_pair(unbiased=1, eps=1e-6), [1.207612, -0.724567], what="unbiased + 1e-6")
    close(grpo_pair(eps_in_sqrt=1, eps=1e-6), [1.290992, -0.774595], what="sqrt(var + 1e-6)")
    out = R.evaluate("rloo", {"token": {"logp": [[-0.1]] * 8}, "seq": {"reward": R13}})
    adv = [row[0] for row in out["token"]["adv"]]
    close([adv[0], adv[1]], [0.714286, -0.428571], what="RLOO")
    for name in ("grpo", "gspo", "rloo"):
        for params in ({}, {"unbiased": 1}, {"eps_in_sqrt": 1}) if name != "rloo" else ({},):
            out = R.evaluate(name, {"params": params, "token": {"logp": [[-0.1, -0.2]] * 4},
                                    "seq": {"reward": [1, 1, 1, 1]}})
            close(out["token"]["adv"], [[0.0, 0.0]] * 4, what=f"{name} all equal")


@test
def field_methods_by_hand():
    # Groups 5: R = [1, 0, 0] with lengths [2, 1, 1]; 8: a group of one, R = 2.
    batch = {"token": {"logp": [[-0.1, -0.2], [-0.1], [-0.3], [-0.2, -0.1, -0.4]]},
             "seq": {"reward": [1, 0, 0, 2], "group": [5, 5, 5, 8],
                     "greedy_reward": [0, 0, 1, 2]}}
    first = lambda out: [row[0] for row in out["token"]["adv"]]
    close(first(R.evaluate("drgrpo", batch)), [2 / 3, -1 / 3, -1 / 3, 0.0], what="drgrpo")
    close(first(R.evaluate("drgrpo", dict(batch, params={"lone": 1}))),
          [2 / 3, -1 / 3, -1 / 3, 2.0], what="drgrpo lone")
    mu = 1 / 3
    close(first(R.evaluate("maxrl", batch)),
          [(1 - mu) / (mu + 1e-6), -mu / (mu + 1e-6), -mu / (mu + 1e-6), 0.0], what="maxrl")
    # OPO: the baseline sum(|y| R) / sum(|y|) = 2 / 4.
    close(first(R.evaluate("opo", batch)), [0.5, -0.5, -0.5, 0.0], what="opo")
    # GPG: alpha = 4 sequences / 2 non-zero rewards.
    close(first(R.evaluate("gpg", batch)), [4 / 3, -2 / 3, -2 / 3, 0.0], what="gpg")
    close(first(R.evaluate("remax", batch)), [1.0, 0.0, -1.0, 0.0], what="remax")
    # REINFORCE++ with gamma 0.5: returns [[0.5, 1], [0], [0], [0.5, 1, 2]] (lengths 2, 1, 1,
    # 3), 7 tokens of mean 5/7; unbiased variance by fsum.
    out = R.evaluate("reinforce_pp", dict(batch, params={"gamma": 0.5}))
    G = [0.5, 1.0, 0.0, 0.0, 0.5, 1.0, 2.0]
    m = sum(G) / 7
    sd = math.sqrt(sum((g - m) ** 2 for g in G) / 6 + 1e-8)
    flat = [x for row in out["token"]["adv"] for x in row]
    close(flat, [(g - m) / sd for g in G], what="reinforce_pp")
    # REINFORCE++-baseline: s = [2/3, 2/3, -1/3, -1/3, 0, 0, 0] on the tokens.
    out = R.evaluate("reinforce_pp_baseline", batch)
    S = [2 / 3, 2 / 3, -1 / 3, -1 / 3, 0.0, 0.0, 0.0]
    m = sum(S) / 7
    sd = math.sqrt(sum((x - m) ** 2 for x in S) / 6 + 1e-8)
    flat = [x for row in out["token"]["adv"] for x in row]
    close(flat, [(x - m) / sd for x in S], what="reinforce_pp_baseline")
    # One token in the batch: variance 0, advantage 0.
    one = {"token": {"logp": [[-0.1]]}, "seq": {"reward": [3]}}
    close(R.evaluate("reinforce_pp", one)["token"]["adv"], [[0.0]], what="one token")


@test
def turn_gae_by_hand():
    # Turns [0, 1], [2], [3, 4]; V = [.5, .4, .2, .6, .3]; the turns' rewards 1, 0, 2 on their
    # last tokens; gamma 1, lambda 0.5, turn_gamma 0.5. Turn level (V at the ends .4, .2, .3):
    # A_2 = 2 - .3 = 1.7; A_1 = 0 + .5 * .3 - .2 + .25 * 1.7 = .375;
    # A_0 = 1 + .5 * .2 - .4 + .25 * .375 = .79375. The turn returns A + V(end) are the rewards
    # of the ends, so adv = A_k there; inside the turns: adv_3 = .3 - .6 + .5 * 1.7 = .55,
    # adv_0 = .4 - .5 + .5 * .79375 = .296875.
    V = [0.5, 0.4, 0.2, 0.6, 0.3]
    batch = one_seq_batch({"value": V, "reward": [0, 1, 0, 0, 2],
                           "turn_start": [1, 0, 1, 1, 0]}, {},
                          {"gamma": 1.0, "lambda": 0.5, "turn_gamma": 0.5})
    out = R.evaluate("turn_gae", batch)
    adv = [0.296875, 0.79375, 0.375, 0.55, 1.7]
    close(out["token"]["adv"], [adv], what="turn_gae adv")
    close(out["token"]["ret"], [[a + v for a, v in zip(adv, V)]], what="turn_gae ret")
    # Whitened over the tokens (verl's masked_whiten), ret unchanged.
    out = R.evaluate("turn_gae", dict(batch, params={"gamma": 1.0, "lambda": 0.5,
                                                     "turn_gamma": 0.5, "whiten": 1}))
    m = sum(adv) / 5
    sd = math.sqrt(sum((a - m) ** 2 for a in adv) / 4 + 1e-8)
    close(out["token"]["adv"], [[(a - m) / sd for a in adv]], what="turn_gae whitened")
    # One-token turns only: every token ends its turn, adv = A_k, a GAE over the tokens
    # with turn_gamma as the discount.
    one = one_seq_batch({"value": [0.5, 0.25], "reward": [1, 2], "turn_start": [1, 1]}, {},
                        {"lambda": 1.0, "turn_gamma": 0.5})
    close(R.evaluate("turn_gae", one)["token"]["adv"],
          [[1 + 0.5 * 0.25 - 0.5 + 0.5 * (2 - 0.25), 2 - 0.25]], what="turn_gae one-token turns")


@test
def turn_gae_one_turn_is_gae_dense():
    # Without turn starts a sequence is one turn: its turn return is the last reward, and
    # the token level is GAE on the token reward (gae_dense), whatever turn_gamma is.
    for seed in range(1, 6):
        b = R.random_batch("turn_gae", seed, 48)
        del b["token"]["turn_start"]
        p = dict({"gamma": 1.0, "lambda": 1.0}, **b["params"])
        p.update(turn_gamma=0.7, whiten=0)
        got = R.evaluate("turn_gae", dict(b, params=p))
        want = R.evaluate("gae_dense", dict(b, params={k: p[k] for k in ("gamma", "lambda")}))
        close(got["token"]["adv"], want["token"]["adv"], 1e-12, f"seed {seed} adv")
        close(got["token"]["ret"], want["token"]["ret"], 1e-12, f"seed {seed} ret")


@test
def gigpo_by_hand():
    # One row per step. Group 7: R = [1, 1, 0, 0], returns G = [1, .5, 0, .25], anchors
    # [5, 5, 3, 5]; group 9: one row with anchor 5 again (ids do not join groups).
    # Episode: mean .5, A_E = [.5, .5, -.5, -.5]; group 9 alone: 0 (lone 1: R = 2).
    # Step: anchor 5 of group 7 holds rows 0, 1, 3, mean 1.75 / 3: A_S = [5, -1, -4] / 12;
    # anchor 3 holds row 2 alone: 0; group 9's row: 0.
    batch = {"token": {"logp": [[-0.1], [-0.2, -0.3], [-0.1], [-0.5], [-0.1, -0.2]]},
             "seq": {"reward": [1, 1, 0, 0, 2], "step_return": [1, 0.5, 0, 0.25, 3],
                     "anchor": [5, 5, 3, 5, 5], "group": [7, 7, 7, 7, 9]}}
    first = lambda out: [row[0] for row in out["token"]["adv"]]
    close(first(R.evaluate("gigpo", batch)), [0.5 + 5 / 12, 0.5 - 1 / 12, -0.5, -0.5 - 4 / 12, 0],
          what="gigpo mean_norm")
    close(first(R.evaluate("gigpo", dict(batch, params={"lone": 1, "step_w": 0.5}))),
          [0.5 + 5 / 24, 0.5 - 1 / 24, -0.5, -0.5 - 4 / 24, 2], what="gigpo lone step_w")
    # std = 1: the episode std of [1, 1, 0, 0] is sqrt(1/3); the step std of [1, .5, .25]
    # is sqrt((25 + 1 + 16) / 144 / 2); a lone row with lone = 1: R / (1 + eps).
    eps = 1e-6
    se, ss = math.sqrt(1 / 3) + eps, math.sqrt(42 / 288) + eps
    close(first(R.evaluate("gigpo", dict(batch, params={"std": 1, "lone": 1}))),
          [0.5 / se + 5 / 12 / ss, 0.5 / se - 1 / 12 / ss, -0.5 / se,
           -0.5 / se - 4 / 12 / ss, 2 / (1 + eps)], what="gigpo mean_std_norm")
    # Every return of a step group equal, eps = 0: 0, not 0 / 0.
    same = {"token": {"logp": [[-0.1], [-0.2]]},
            "seq": {"reward": [0.1, 0.1], "step_return": [0.3, 0.3], "anchor": [1, 1]}}
    close(first(R.evaluate("gigpo", dict(same, params={"std": 1, "eps": 0}))), [0.0, 0.0],
          what="gigpo zero spread")


@test
def grpo_groups_and_singletons():
    # Groups are per prompt id; a group of one gets 0 with every std convention.
    batch = {"token": {"logp": [[-0.1], [-0.1, -0.2], [-0.3], [-0.1]]},
             "seq": {"reward": [1, 0, 1, 0.5], "group": [7, 3, 7, 11]}}
    for params in ({}, {"unbiased": 1}, {"eps_in_sqrt": 1}, {"unbiased": 1, "eps_in_sqrt": 1}):
        out = R.evaluate("grpo", dict(batch, params=params))
        close(out["token"]["adv"], [[0.0], [0.0, 0.0], [0.0], [0.0]], what=str(params))
        assert out["groups"] == [3, 7, 11]
    out = R.evaluate("rloo", batch)
    close(out["token"]["adv"], [[0.0], [0.0, 0.0], [0.0], [0.0]], what="rloo")
    out = R.evaluate("grpo", {"token": {"logp": [[0.0]] * 3},
                              "seq": {"reward": [1, 0, 2], "group": [1, 1, 2]}})
    close([r[0] for r in out["token"]["adv"]], [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0],
          what="two groups")


@test
def sppo_11_3():
    out = R.evaluate("sppo", {"token": {"logp": [[-0.5, -0.1], [-0.2]]},
                              "seq": {"reward": [0, 1], "value": [0.7, 0.7]}})
    close(out["token"]["adv"], [[-0.7, -0.7], [0.3]], what="A")
    close(out["seq"]["value_loss"], [1.203973, 0.356675], what="BCE")


# --------------------------------------------------------------------------------------
# 11.4 PPO clip
# --------------------------------------------------------------------------------------


@test
def ppo_clip_11_4():
    for (r, A), (f, clipped) in [((1.3, 1), (1.2, True)), ((1.3, -1), (-1.3, False)),
                                 ((0.7, 1), (0.7, False)), ((0.7, -1), (-0.8, True)),
                                 ((1.1, 0.5), (0.55, False))]:
        loss, d = R.clipped_surrogate(r, A)
        close(-loss, f, what=f"f({r}, {A})")
        assert (d == 0.0) == clipped, f"gradient cut at ({r}, {A})"
        # Through the objective: one token, token-mean.
        out = R.objective("ppo_clip", {"token": {"logp": [[-1.0]], "logp_new": [[-1.0 + math.log(r)]],
                                                 "adv": [[A]]}})
        close(out["loss"], -f, what="objective loss")
        g = out["grad"]["token"]["logp_new"][0][0]
        close(g, 0.0 if clipped else -A * r, 1e-12, "objective gradient")


@test
def ppo_dual_clip():
    # verl: for A < 0, loss = min(max(-A r, -A clip(r)), -A c).
    loss, d = R.clipped_surrogate(5.0, -1.0, dual_clip=3.0)
    assert (loss, d) == (3.0, 0.0)
    loss, d = R.clipped_surrogate(2.0, -1.0, dual_clip=3.0)
    assert (loss, d) == (2.0, 1.0)
    loss, d = R.clipped_surrogate(5.0, 1.0, dual_clip=3.0)  # A > 0: no dual clip
    close(loss, -1.2, what="A>0")
    assert d == 0.0
    loss, d = R.clipped_surrogate(1.5, 1.0, eps_low=0.2, eps_high=0.28)
    close(loss, -1.28, what="asymmetric clip")


@test
def aggregation_modes():
    # loss per token = -A r with r = 1 (unclipped): l = -A.
    A = [[1.0, 2.0, 3.0], [4.0]]
    batch = {"token": {"logp": [[0.0] * 3, [0.0]], "logp_new": [[0.0] * 3, [0.0]], "adv": A}}
    want = {"token-mean": -10 / 4, "seq-mean-token-mean": -(2 + 4) / 2,
            "seq-mean-token-sum": -(6 + 4) / 2,
            # (1/B) sum / L with L the longest sequence (docs/language.md)
            "seq-mean-token-sum-norm": -10 / (2 * 3)}
    for mode, w in want.items():
        close(R.objective("ppo_clip", dict(batch, params={"agg": mode}))["loss"], w, 1e-12, mode)
        k = R.AGG_MODES.index(mode)
        close(R.objective("ppo_clip", dict(batch, params={"agg": k}))["loss"], w, 1e-12, mode)
    close(R.objective("ppo_clip", dict(batch, params={"agg": 3, "norm_len": 5}))["loss"], -1.0,
          1e-12, "norm_len")
    # Masked token-mean (SPO): only the weighted tokens count.
    wb = dict(batch, token=dict(batch["token"], weight=[[1, 0, 1], [0]]))
    close(R.objective("ppo_clip", wb)["loss"], -2.0, 1e-12, "masked token-mean")
    # A fully masked sequence neither adds nor counts in B (verl's seq_mask): -(1 + 3) / 2
    # over the one sequence left.
    close(R.objective("ppo_clip", dict(wb, params={"agg": 1}))["loss"], -2.0, 1e-12,
          "masked seq-mean-token-mean (a fully masked sequence is left out)")
    close(R.objective("ppo_clip", dict(wb, params={"agg": 2}))["loss"], -4.0, 1e-12,
          "masked seq-mean-token-sum (a fully masked sequence is left out)")


# --------------------------------------------------------------------------------------
# 11.5 SPO-chain
# --------------------------------------------------------------------------------------

P15 = [0.99, 0.95, 0.62, 0.97, 0.99, 0.41, 0.93, 0.88, 0.99, 0.97, 0.55, 0.98, 0.99, 0.72, 0.96,
       0.99]


@test
def spo_chain_11_5():
    assert R.spo_chain_cutpoints(P15, 0.9, False) == [2, 5, 7, 10, 13]
    starts, kind = R.spo_chain_segments(P15, 0.9, 2)
    assert (starts, kind) == ([0, 2, 7, 13], "head"), (starts, kind)
    mc = [0.5, 4 / 9, 6 / 9, 3 / 9]  # mc[0] = V(S_0), unused by default
    batch = one_seq_batch({"logp": [math.log(p) for p in P15]}, {"reward": 0.0},
                          {"interval": 2}, seg={"mc_value": mc})
    out = R.evaluate("spo_chain", batch)
    a, b = 2 / 9, -3 / 9
    close(out["token"]["adv"][0], [0, 0] + [a] * 5 + [b] * 6 + [b] * 3, what="token adv")
    close(out["token"]["adv"][0], [0, 0, .2222, .2222, .2222, .2222, .2222, -.3333, -.3333,
                                   -.3333, -.3333, -.3333, -.3333, -.3333, -.3333, -.3333],
          1e-4, "doc's 4-decimal row")
    close(out["seg"]["adv"][0], [0.0, 0.222222, -0.333333, -0.333333], what="seg adv")
    assert out["segments"] == [[0, 2, 7, 13]]
    M = [0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0]
    close(out["token"]["weight"][0], M, 0, "mask")
    assert sum(M) == 5
    trained = {t: out["token"]["adv"][0][t] for t in range(16) if M[t]}
    close([trained[t] for t in (2, 5, 7, 10, 13)], [a, a, b, b, b], what="trained tokens")
    # head=1: the head gets V(S_2) - V(S_0).
    out = R.evaluate("spo_chain", batch, {"head": 1})
    close(out["seg"]["adv"][0][0], 4 / 9 - 0.5, what="head option")
    # Fixed-count K = 3: counts [2,2,1], starts [0,7,13], the first segment uses V(S_0).
    starts, kind = R.spo_chain_segments(P15, 0.9, count=3)
    assert (starts, kind) == ([0, 7, 13], "count"), starts
    out = R.evaluate("spo_chain", one_seq_batch({"logp": [math.log(p) for p in P15]},
                                                {"reward": 0.0}, {"count": 3},
                                                seg={"mc_value": [0.5, 6 / 9, 3 / 9]}))
    close(out["seg"]["adv"][0], [6 / 9 - 0.5, -3 / 9, -3 / 9], what="count mode")


@test
def spo_chain_edge_cases():
    # No cutpoints: one segment, all advantages 0.
    out = R.evaluate("spo_chain", one_seq_batch({"logp": [0.0, -0.01]}, {"reward": 1.0},
                                                seg={"mc_value": [0.3]}))
    close(out["token"]["adv"], [[0.0, 0.0]], 0, "no cutpoints")
    assert out["segments"] == [[0]]
    # u0 = 0: no head; segment 0 uses mc[0] = V(S_0).
    lp = [math.log(0.5), 0.0, 0.0, 0.0]
    out = R.evaluate("spo_chain", one_seq_batch({"logp": lp}, {"reward": 1.0},
                                                seg={"mc_value": [0.25]}))
    close(out["token"]["adv"], [[0.75] * 4], 1e-15, "u0 = 0")
    # The last token: excluded by the paper (cut_last=0), a cutpoint in the code (cut_last=1).
    lp = [0.0, 0.0, math.log(0.5)]
    assert R.evaluate("spo_chain", one_seq_batch({"logp": lp}, {"reward": 1.0},
                                                 seg={"mc_value": [0.1]}))["segments"] == [[0]]
    out = R.evaluate("spo_chain", one_seq_batch({"logp": lp}, {"reward": 1.0}, {"cut_last": 1},
                                                seg={"mc_value": [0.1, 0.5]}))
    assert out["segments"] == [[0, 2]]
    close(out["token"]["adv"], [[0.0, 0.0, 0.5]], 1e-15, "cut_last")
    # Count mode with fewer cutpoints than K: one segment per cutpoint.
    P = [0.5, 0.99, 0.5, 0.99, 0.99]
    assert R.spo_chain_segments(P, 0.9, count=8) == ([0, 2], "count")
    assert R.spo_chain_segments(P, 0.9, count=1) == ([0], "count")
    # Interval 1: every cutpoint starts a segment.
    assert R.spo_chain_segments(P15, 0.9, 1) == ([0, 2, 5, 7, 10, 13], "head")


@test
def vineppo_steps():
    nl = [0, 1, 0, 0, 1, 1, 0, 1]  # steps [0,1] [2..4] [5] [6,7]; the trailing newline adds none
    assert R.vineppo_segments(nl) == [0, 2, 5, 6]
    out = R.evaluate("vineppo", one_seq_batch({"newline": nl}, {"reward": 1.0},
                                              seg={"mc_value": [0.5, 0.25, 0.75, 1.0]}))
    close(out["token"]["adv"][0], [-0.25] * 2 + [0.5] * 3 + [0.25] + [0.0] * 2, 1e-15, "adv")
    assert out["segments"] == [[0, 2, 5, 6]]
    assert R.vineppo_segments([0, 0, 0]) == [0]
    assert R.vineppo_segments([1]) == [0]


# --------------------------------------------------------------------------------------
# 11.6 SPO-tree
# --------------------------------------------------------------------------------------


def spo_tree_11_6_batch():
    # Nodes: 0 root (the prompt, no tokens), 1 A, 2 B, 3 C (leaf, R=1), 4-6 A1-A3, 7-9 B1-B3.
    parent = [-1, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    seg = 2  # tokens per internal node
    paths = {3: [3], 4: [1, 4], 5: [1, 5], 6: [1, 6], 7: [2, 7], 8: [2, 8], 9: [2, 9]}
    rewards = {3: 1, 4: 1, 5: 0, 6: 1, 7: 0, 8: 0, 9: 1}
    rows = [[n for n in paths[leaf] for _ in range(seg)] for leaf in paths]
    lp = [[math.log(0.5 if t % 2 == 0 else 0.95) for t in range(len(r))] for r in rows]
    return {"token": {"logp": lp}, "seq": {"reward": [float(rewards[k]) for k in paths]},
            "tree": {"parent": parent, "node": rows}}


@test
def spo_tree_11_6():
    batch = spo_tree_11_6_batch()
    out = R.evaluate("spo_tree", batch)
    V = out["node"]["value"]
    close(V[:4], [2 / 3, 2 / 3, 1 / 3, 1.0], what="V(root, A, B, C)")
    assert abs(V[0] - 4 / 7) > 0.05  # not the mean over the 7 leaves
    tree = R.Tree(batch["tree"]["parent"], batch["tree"]["node"])
    stds = [math.sqrt(R.pop_var([V[c] for c in tree.children[n]])) for n in (0, 1, 2)]
    close(stds, [0.272166, 0.471405, 0.471405], what="sibling std")
    unnorm = [0, -0.333333, 0.333333, 0.333333, -0.666667, 0.333333, -0.333333, -0.333333,
              0.666667]
    close(out["node"]["adv"][1:], unnorm, what="unnormalized A (A, B, C, A1..A3, B1..B3)")
    assert out["node"]["adv"][0] == 0.0
    norm = [0, -1.224745, 1.224745, 0.707107, -1.414214, 0.707107, -0.707107, -0.707107,
            1.414214]
    out_n = R.evaluate("spo_tree", dict(batch, params={"normalize": 1}))
    close(out_n["node"]["adv"][1:], norm, what="normalized A")
    # 8 training samples: every non-root node but A.
    _, _, nonzero = R.spo_tree_values(tree, batch["seq"]["reward"])
    assert [n for n in range(10) if nonzero[n]] == [2, 3, 4, 5, 6, 7, 8, 9]
    # Token outputs: A's tokens (the first two of each A-path) have weight 0, the rest follow
    # the probability mask (p = 0.5 on even positions).
    for b, row in enumerate(batch["tree"]["node"]):
        for t, n in enumerate(row):
            close(out["token"]["adv"][b][t], out["node"]["adv"][n], 0, "token adv")
            want = 1.0 if (t % 2 == 0 and n != 1) else 0.0
            assert out["token"]["weight"][b][t] == want, (b, t, n)


# --------------------------------------------------------------------------------------
# 11.7 TreeAdv
# --------------------------------------------------------------------------------------


def treeadv_11_7_batch():
    # Nodes: 0 root1(3), 1 c1(2), 2 L3(3), 3 L1(2), 4 L2(1), 5 root2(2), 6 L4(2), 7 L5(1), 8 L6(3)
    parent = [-1, 0, 0, 1, 1, -1, 5, 5, 5]
    ntok = [3, 2, 3, 2, 1, 2, 2, 1, 3]
    leaves = {"L1": 3, "L2": 4, "L3": 2, "L4": 6, "L5": 7, "L6": 8}
    rewards = {"L1": 1, "L2": 0, "L3": 1, "L4": 0, "L5": 0, "L6": 1}
    rows = []
    for name, leaf in leaves.items():
        chain, n = [], leaf
        while n >= 0:
            chain.append(n)
            n = parent[n]
        rows.append([n for n in reversed(chain) for _ in range(ntok[n])])
    return {"params": {"delta": 0.0}, "token": {"logp": [[-0.1] * len(r) for r in rows]},
            "seq": {"reward": [float(rewards[k]) for k in leaves], "group": [4] * 6},
            "tree": {"parent": parent, "node": rows}}


@test
def treeadv_11_7():
    batch = treeadv_11_7_batch()
    out = R.evaluate("treeadv", batch)
    na = out["node"]["adv"]
    close([na[0], na[1], na[5]], [1 / 3, 0.0, -1 / 3], what="root1, c1, root2")
    close([na[3], na[4], na[2], na[6], na[7], na[8]], [1, -1, 1, -1, -1, 1], what="leaves")
    t = 1 / 3
    want = [[t, t, t, 0, 0, 1, 1], [t, t, t, 0, 0, -1], [t, t, t, 1, 1, 1],
            [-t, -t, -1, -1], [-t, -t, -1], [-t, -t, 1, 1, 1]]
    close(out["token"]["adv"], want, what="flattened paths")
    close(out["token"]["adv"], [[round(x, 4) for x in r] for r in want], 1e-4, "doc rounding")
    assert sum(len(r) for r in batch["tree"]["node"]) == 31
    ntok = {}
    for r in batch["tree"]["node"]:
        for n in set(r):
            ntok[n] = r.count(n)
    assert sum(ntok.values()) == 19  # distinct generated tokens
    # Invariant: copies of root1's tokens carry 3 x 1/3 = 1 = 1 - 1 + 1.
    close(3 * na[0], 1.0, what="invariant")
    out = R.evaluate("treeadv", dict(batch, params={"use_max": 1, "delta": 0.0}))
    na = out["node"]["adv"]
    close([na[0], na[1], na[5]], [1, 1, 1], what="max strategy")
    # Default delta = 1e-6 inside the sqrt.
    out = R.evaluate("treeadv", dict(batch, params={}))
    close(out["node"]["adv"][3], 0.5 / math.sqrt(0.25 + 1e-6), 1e-12, "delta default")


@test
def treeadv_invariant_on_random_batches():
    # §6.4: summed over the copies of a node's tokens, the advantages equal the sum of its
    # descendant leaves' advantages (mean strategy).
    for seed in range(1, 30):
        batch = R.random_batch("treeadv", seed, max_len=24, params="default")
        tree = R.Tree(batch["tree"]["parent"], batch["tree"]["node"])
        out = R.evaluate("treeadv", batch)
        _, seq_adv = R.treeadv_values(tree, batch["seq"]["reward"], batch["seq"]["group"])
        below = tree.seqs_below()
        copies = {}
        for b, row in enumerate(tree.node_rows):
            for n in set(row):
                copies[n] = copies.get(n, 0) + 1
        for n, c in copies.items():
            assert c == len(below[n])
            close(c * out["node"]["adv"][n], math.fsum(seq_adv[b] for b in below[n]), 1e-9,
                  "invariant")


# --------------------------------------------------------------------------------------
# 11.8 GSPO-token
# --------------------------------------------------------------------------------------


@test
def gspo_token_11_8():
    x = [0.1, -0.2, 0.05, 0.15]
    old = [-1.0, -0.5, -0.3, -2.0]
    new = [o + d for o, d in zip(old, x)]
    close(math.exp(sum(x) / 4), 1.025315, what="w_i")
    for A in (1.0, -1.0):
        out = R.objective("gspo_token", {"token": {"logp": [old], "logp_new": [new],
                                                   "adv": [[A] * 4]},
                                         "params": {"eps_low": 0.2, "eps_high": 0.2}})
        close(-out["loss"], A * 1.025315, what=f"objective A={A}")
        close(out["grad"]["token"]["logp_new"][0], [-A * math.exp(0.025) / 4] * 4, 1e-12,
              "gradient: w_i * dlogp per token, token-mean")
    x = [0.3, 0.4, 0.5]
    close(math.exp(0.4), 1.491825, what="w")
    out = R.objective("gspo_token", {"token": {"logp": [[0.0] * 3], "logp_new": [x],
                                               "adv": [[1.0] * 3]}})
    close(-out["loss"], 1.2, what="clipped")
    assert out["grad"]["token"]["logp_new"] == [[0.0] * 3]
    out = R.objective("gspo", {"token": {"logp": [[0.0] * 3], "logp_new": [x],
                                         "adv": [[1.0] * 3]}})
    close(-out["loss"], 1.2, what="gspo clipped")
    assert out["grad"]["token"]["logp_new"] == [[0.0] * 3]


# --------------------------------------------------------------------------------------
# 11.9 SAPO
# --------------------------------------------------------------------------------------

H19 = [0.2, 1.5, 0.1, 0.3, 2.0, 0.4, 0.2, 1.1, 0.3, 0.5]
V19 = [0.40, 0.42, 0.45, 0.47, 0.50, 0.60, 0.58, 0.55, 0.70, 0.72]
X19 = [0.10, -0.05, 0.02, 0.00, 0.07, -0.30, 0.10, 0.05, 0.20, 0.40]


@test
def sapo_11_9_segments_and_advantages():
    starts, ends = R.sapo_segments(H19, 30)
    assert ends == [1, 4, 7, 9] and starts == [0, 2, 5, 8], (starts, ends)
    batch = one_seq_batch({"entropy": H19, "value": V19}, {"reward": 1.0})
    rows = [
        (0, 0.9, [0.4847, 0.483, 0.37, 0.30], [0.8847, 0.933, 0.97, 1.0]),
        (0, 0.99, [0.5876, 0.54303, 0.397, 0.30], None),
        (1, 0.9, [0.46682, 0.4298, 0.422, 0.28], [0.88682, 0.9298, 0.972, 1.0]),
        (1, 0.99, [0.567801, 0.492728, 0.4472, 0.28], None),
    ]
    for v_at_end, lam, A, rhat in rows:
        out = R.evaluate("sapo", batch, {"lambda": lam, "v_at_end": v_at_end})
        close(out["seg"]["adv"][0], A, what=f"A v_at_end={v_at_end} lambda={lam}")
        close(out["token"]["adv"][0], R.from_segments(A, starts, 10), what="token adv")
        if rhat:
            close(out["token"]["ret"][0], R.from_segments(rhat, starts, 10), what="Rhat")
        assert out["segments"] == [starts]
        pos = ends if v_at_end else starts
        assert out["token"]["value_weight"][0] == [1.0 if t in pos else 0.0 for t in range(10)]
    a, _, _, _ = R.sapo_seq(H19, V19, 1.0, lam=0.9)
    vseg = [V19[s] for s in starts]
    close(vseg, [0.40, 0.45, 0.60, 0.70], what="Vseg paper")
    close([V19[e] for e in ends], [0.42, 0.50, 0.55, 0.72], what="Vseg code")


@test
def sapo_11_9_segment_ratio_objective():
    starts, _ = R.sapo_segments(H19, 30)
    A, _, _, _ = R.sapo_seq(H19, V19, 1.0, lam=0.9)
    old = [-0.5 - 0.1 * t for t in range(10)]
    new = [o + x for o, x in zip(old, X19)]
    adv = R.from_segments(A, starts, 10)
    means = [R.mean(X19[s:e]) for s, e in zip(starts, starts[1:] + [10])]
    close(means, [0.025, 0.030, -0.050, 0.300], what="mean x")
    close([math.exp(m) for m in means], [1.025315, 1.030455, 0.951229, 1.349859], what="s_m")
    per_tok = [0.496970, 0.497710, 0.351955, 0.360000]
    for m in range(4):
        loss, d = R.clipped_surrogate(math.exp(means[m]), A[m])
        close(-loss, per_tok[m], what=f"segment {m} objective")
        assert (d == 0.0) == (m == 3)
    batch = {"token": {"logp": [old], "logp_new": [new], "adv": [adv], "entropy": [H19]}}
    for agg in ("token-mean", "seq-mean-token-mean"):  # the same for one sequence: 1/T
        out = R.objective("sapo", dict(batch, params={"agg": agg}))
        close(-out["loss"], 0.426293, what=f"J ({agg})")
    out = R.objective("sapo", dict(batch, segments=[starts]))
    close(-out["loss"], 0.426293, what="J with given segments")
    # Gradient (eq. 13): token i gets -(1/T) s_m A_m when unclipped, 0 in the clipped segment.
    want = [-(1 / 10) * math.exp(means[m]) * A[m] if m < 3 else 0.0
            for m in range(4) for _ in range(starts[m + 1] - starts[m] if m < 3 else 2)]
    close(out["grad"]["token"]["logp_new"][0], want, 1e-12, "eq. 13 gradient")
    naive = R.objective("ppo_clip", batch)
    close(-naive["loss"], 0.428250, what="naive token ratio")


# --------------------------------------------------------------------------------------
# Gradients by finite differences
# --------------------------------------------------------------------------------------


def _kink_free(batch, name, params, margin=2e-3):
    """True when no ratio of the objective sits within `margin` of a clip or dual-clip kink."""
    p = dict(R.OBJECTIVES[name][1])
    p.update(params)
    kinks = [1 - p.get("eps_low", 0.2), 1 + p.get("eps_high", 0.2)]
    if p.get("dual_clip", 0):
        kinks.append(p["dual_clip"])
    new, old = batch["token"]["logp_new"], batch["token"]["logp"]
    ratios = []
    for i in range(len(new)):
        x = [a - b for a, b in zip(new[i], old[i])]
        if name == "ppo_clip":
            ratios += [math.exp(v) for v in x]
        elif name in ("gspo", "gspo_token"):
            ratios.append(math.exp(R.mean(x)))
        elif name == "sapo":
            st = R.sapo_segments(batch["token"]["entropy"][i], p.get("k_percent", 30))[0]
            for s, e in zip(st, st[1:] + [len(x)]):
                ratios.append(math.exp(R.mean(x[s:e])))
    return all(abs(r - k) > margin for r in ratios for k in kinks)


def _fd_check(name, batch, params, var_dom, var, h=1e-6, tol=2e-7):
    out = R.objective(name, batch, params)
    grad = out["grad"][var_dom][var]
    src = batch[var_dom][var]
    flat = [(i, t) for i in range(len(src)) for t in range(len(src[i]))] if var_dom == "token" \
        else [(i, None) for i in range(len(src))]
    for i, t in flat:
        vals = []
        for s in (h, -h):
            b2 = json.loads(json.dumps(batch))
            if t is None:
                b2[var_dom][var][i] += s
            else:
                b2[var_dom][var][i][t] += s
            vals.append(R.objective(name, b2, params)["loss"])
        fd = (vals[0] - vals[1]) / (2 * h)
        g = grad[i] if t is None else grad[i][t]
        assert abs(fd - g) <= tol * (1 + abs(g)), \
            f"{name} {params}: d/d{var}[{i}][{t}] analytic {g!r} vs finite difference {fd!r}"


@test
def finite_differences_policy_objectives():
    variants = [{}, {"agg": 1}, {"agg": 2}, {"agg": 3}, {"eps_low": 0.1, "eps_high": 0.28},
                {"dual_clip": 1.15, "eps_high": 0.1}, {"kl": 1, "beta": 0.3},
                {"kl": 2, "beta": 0.5}, {"kl": 3, "beta": 0.7, "agg": 1}]
    checked = 0
    for name in ("ppo_clip", "gspo", "sapo"):
        for seed in range(1, 60):
            params = variants[seed % len(variants)]
            batch = R.random_objective_batch(name, seed, max_len=6, num_seqs=3)
            if not _kink_free(batch, name, params):
                continue
            _fd_check(name, batch, params, "token", "logp_new")
            checked += 1
    assert checked >= 60, checked
    for kind in (1, 2, 3):
        batch = R.random_objective_batch("kl", kind, max_len=6, num_seqs=3)
        _fd_check("kl", batch, {"kl": kind, "beta": 0.5}, "token", "logp_new")


@test
def clamp_log_ratio_gradient():
    batch = {"token": {"logp": [[-5.0, -0.1]], "logp_new": [[-0.1, -0.2]], "adv": [[-1.0, 1.0]]},
             "params": {"clamp_log_ratio": 2.0}}
    out = R.objective("ppo_clip", batch)
    close(out["loss"], 0.5 * (math.exp(2.0) * 1 + -math.exp(-0.1)), 1e-12, "clamped loss")
    assert out["grad"]["token"]["logp_new"][0][0] == 0.0
    _fd_check("ppo_clip", batch, {}, "token", "logp_new")


@test
def finite_differences_gspo_token_is_stop_gradient():
    # GSPO-token's gradient is that of the surrogate with sg[s_i] frozen: at the current point
    # it equals the token-ratio (PPO) gradient with old log-probs logp_new - log s_i, whose own
    # finite differences are checked too.
    checked = 0
    for seed in range(1, 40):
        batch = R.random_objective_batch("gspo_token", seed, max_len=6, num_seqs=3)
        params = [{}, {"agg": 1}, {"agg": 2}, {"eps_high": 0.28}][seed % 4]
        if not _kink_free(batch, "gspo_token", params):
            continue
        out = R.objective("gspo_token", batch, params)
        new, old = batch["token"]["logp_new"], batch["token"]["logp"]
        frozen = json.loads(json.dumps(batch))
        for i in range(len(new)):
            log_s = R.mean([a - b for a, b in zip(new[i], old[i])])
            frozen["token"]["logp"][i] = [a - log_s for a in new[i]]
        ref = R.objective("ppo_clip", frozen, params)
        close(out["loss"], ref["loss"], 1e-12, "forward value")
        close(out["grad"]["token"]["logp_new"], ref["grad"]["token"]["logp_new"], 1e-12,
              "surrogate gradient")
        if _kink_free(frozen, "ppo_clip", params):
            _fd_check("ppo_clip", frozen, params, "token", "logp_new")
        checked += 1
    assert checked >= 20, checked


def _is_batch(seed):
    """A small objective batch with rollout IS weights: zeros on single tokens and on a
    whole sequence, the TIS threshold 2 itself."""
    batch = R.random_objective_batch("ppo_clip", seed, max_len=6, num_seqs=4)
    rng = random.Random(f"vectors-is:{seed}")
    w = [[rng.choice([0.0, 2.0, 0.5, rng.uniform(0.3, 2.0)]) for _ in r]
         for r in batch["token"]["logp"]]
    w[0] = [0.0] * len(w[0])
    w[-1][-1] = 1.0
    batch["token"]["is_weight"] = w
    return batch


def _is_loss(name, t, agg, params):
    return R.obj_is(name, t, agg, params)


@test
def rollout_is_objectives_with_unit_weights_are_the_plain_ones():
    for seed in range(1, 12):
        batch = _is_batch(seed)
        t = dict(batch["token"])
        t["is_weight"] = [[1.0] * len(r) for r in t["logp"]]
        for agg in R.AGG_MODES:
            got = _is_loss("ppo_dual_clip_is", t, agg, {})
            want = R.VERL_OBJECTIVES["ppo_dual_clip"](t, agg, {})
            close(got[0], want[0], 1e-12, "ppo_dual_clip_is loss")
            close(got[1], want[1], 1e-12, "ppo_dual_clip_is gradient")
            got = _is_loss("ppo_clip_is", t, agg, {"dual_clip": 3.0})
            want = R.policy_loss(t["logp_new"], t["logp"], t["adv"], agg=agg, dual_clip=3.0)
            close(got[0], want[0], 1e-12, "ppo_clip_is loss")
            close(got[1], want[1], 1e-12, "ppo_clip_is gradient")
        got = _is_loss("gspo_token_is", t, "token-mean", {"eps_low": 0.2, "eps_high": 0.2})
        want = R.policy_loss(t["logp_new"], t["logp"], t["adv"], ratio="seq_token")
        close(got[0], want[0], 1e-12, "gspo_token_is loss")
        close(got[1], want[1], 1e-12, "gspo_token_is gradient")


@test
def finite_differences_rollout_is_objectives():
    # Token-local losses and GSPO's ratio over the kept tokens, with the sequence ratio's
    # stop-gradient: its finite differences run on the frozen-ratio surrogate, so the
    # gradient of gspo_token_is is checked against autograd in check_objective.py only.
    h = 1e-6
    for seed in range(1, 10):
        batch = _is_batch(seed)
        for name, params in [("ppo_clip_is", {"dual_clip": 3.0}), ("ppo_dual_clip_is", {}),
                             ("ppo_kl_is", {"kl_type": 2, "kl_coef": 0.3}),
                             ("ppo_dual_clip_kl_is", {"kl_type": 4, "kl_coef": 0.3})]:
            for agg in R.AGG_MODES:
                t = batch["token"]
                loss, grad = _is_loss(name, t, agg, params)
                for i in range(len(t["logp_new"])):
                    for j in range(len(t["logp_new"][i])):
                        vals = []
                        for d in (h, -h):
                            t2 = json.loads(json.dumps(t))
                            t2["logp_new"][i][j] += d
                            vals.append(_is_loss(name, t2, agg, params)[0])
                        fd = (vals[0] - vals[1]) / (2 * h)
                        assert abs(fd - grad[i][j]) <= 2e-7 * (1 + abs(grad[i][j])), \
                            f"{name} {agg} seed {seed} [{i}][{j}]: {grad[i][j]} vs {fd}"
                if name == "ppo_clip_is" and agg == "token-mean":
                    # Weights scale the loss, zeros leave the denominator: w = 2c on the
                    # kept tokens gives twice the loss of w = c.
                    t2 = json.loads(json.dumps(t))
                    t2["is_weight"] = [[2 * x for x in r] for r in t["is_weight"]]
                    close(_is_loss(name, t2, agg, params)[0], 2 * loss, 1e-12, "scaling")


@test
def finite_differences_value_losses():
    for seed in range(1, 20):
        batch = R.random_objective_batch("value_mse", seed, max_len=6, num_seqs=3)
        eps_v = [0.2, 0.05, 0.5][seed % 3]
        new, old = batch["token"]["value"], batch["token"]["value_old"]
        # keep v away from the clip edges v_old +- eps_v and from the max() switch
        ok = all(abs(abs(a - b) - eps_v) > 1e-3 for r, q in zip(new, old) for a, b in zip(r, q))
        if ok:
            _fd_check("value_mse", batch, {"eps_v": eps_v}, "token", "value")
        batch = R.random_objective_batch("bce", seed, max_len=4, num_seqs=4)
        _fd_check("bce", batch, {}, "seq", "value", h=1e-7, tol=1e-6)


@test
def value_loss_values():
    # 0.5*max((v-G)^2, (clip(v, v_old +- 0.2) - G)^2)
    b = {"token": {"value": [[1.0, 0.5]], "value_old": [[0.5, 0.5]], "ret": [[0.0, 1.0]]}}
    out = R.objective("value_mse", b)
    close(out["loss"], (0.5 * 1.0 + 0.5 * 0.25) / 2, 1e-12, "loss")
    close(out["grad"]["token"]["value"], [[0.5, -0.25]], 1e-12, "grad")
    b = {"token": {"value": [[1.0]], "value_old": [[0.5]], "ret": [[2.0]]}}
    out = R.objective("value_mse", b)  # clipped 0.7 is farther from 2.0 -> no gradient
    close(out["loss"], 0.5 * 1.3 ** 2, 1e-12, "clipped loss")
    assert out["grad"]["token"]["value"] == [[0.0]]


# --------------------------------------------------------------------------------------
# Random batches
# --------------------------------------------------------------------------------------


@test
def random_batches_are_valid_and_varied():
    for method in R.METHODS:
        saw_len1 = saw_single_group = saw_equal_group = False
        for seed in range(1, 41):
            batch = R.random_batch(method, seed, max_len=48)
            again = R.random_batch(method, seed, max_len=48)
            assert batch == again, "random_batch must be deterministic"
            text = json.dumps(batch)
            out = R.evaluate(method, json.loads(text))
            b = R.Batch(batch)
            assert max(b.lengths) <= 48 and min(b.lengths) >= 1
            saw_len1 |= 1 in b.lengths
            for rows in batch["token"].values():
                for row in rows:
                    for x in row:
                        assert x == R.f32(x), "inputs must be exact in float32"
            if "logp" in batch["token"]:
                assert all(x <= 0 for r in batch["token"]["logp"] for x in r)
            for dom, name in R.METHODS[method][3]:
                if dom == "segments":
                    assert len(out["segments"]) == b.B
                else:
                    assert name in out[dom], (method, dom, name)
            for v in batch["params"]:
                assert v in R.METHODS[method][1]
            if "group" in batch["seq"]:
                members = R.group_members(batch["seq"]["group"])
                rw = batch["seq"]["reward"]
                saw_single_group |= any(len(m) == 1 for m in members.values())
                saw_equal_group |= any(len(m) > 1 and len({rw[i] for i in m}) == 1
                                       for m in members.values())
        assert saw_len1, method
        if method in R.GROUP_METHODS + ("treeadv",):
            assert saw_single_group and saw_equal_group, method


@test
def random_trees_are_paths_with_shared_tokens():
    for method in ("spo_tree", "treeadv"):
        for seed in range(1, 40):
            batch = R.random_batch(method, seed, max_len=30)
            tree = R.Tree(batch["tree"]["parent"], batch["tree"]["node"])
            leaves = tree.leaf_of_seq
            assert len(set(leaves)) == len(leaves), "one sequence per leaf"
            assert all(not tree.children[n] for n in leaves)
            # Shared tokens: every copy of a node holds the same tokens (count and logp).
            seen = {}
            for row, lp in zip(batch["tree"]["node"], batch["token"]["logp"]):
                for n in set(row):
                    vals = [l for x, l in zip(row, lp) if x == n]
                    assert seen.setdefault(n, vals) == vals
            if method == "spo_tree":
                assert R._spo_tree_robust(batch["tree"]["parent"], batch["tree"]["node"],
                                          batch["seq"]["reward"])


@test
def thresholds_keep_a_margin():
    for method in ("sae", "spo_chain", "spo_tree"):
        for seed in range(1, 20):
            batch = R.random_batch(method, seed, max_len=64)
            thr = R.resolve_params(R.METHODS[method][1], batch["params"], method)["threshold"]
            for row in batch["token"]["logp"]:
                for x in row:
                    assert abs(math.exp(x) / thr - 1) > R.THRESHOLD_MARGIN


@test
def sapo_ties_and_counts():
    # Ties broken by the lower index; k_cnt = max(ceil(T*kpct/100), 1).
    starts, ends = R.sapo_segments([1.0, 1.0, 1.0, 1.0], 50)
    assert ends == [0, 1, 3], ends
    assert R.sapo_segments([0.5], 30) == ([0], [0])
    assert R.sapo_segments([0.1, 0.2, 0.3], 1)[1] == [2]  # ceil(0.03) = 1
    assert R.sapo_segments([3.0, 2.0, 1.0], 100) == ([0, 1, 2], [0, 1, 2])
    # k_cnt from T*kpct/100 in exact arithmetic (T = 10: ceil(3.0) = 3, never 4).
    for T in range(1, 300):
        for kpct in (1, 10, 20, 25, 30, 50, 70, 100):
            k = max(-(-T * kpct // 100), 1)
            ends = R.sapo_segments([float(T - t) for t in range(T)], kpct)[1]
            assert ends == sorted(set(range(k)) | {T - 1}), (T, kpct)


@test
def vtrace_recursion_equals_definition():
    # The reference's O(T) recursion against the sum of IMPALA's eq. 1, on random
    # sequences and every parameter value check_eval draws.
    rng = random.Random(11)
    for T in list(range(1, 12)) + [64, 257]:
        for gamma in (1.0, 0.99):
            for lam in (1.0, 0.95, 0.5):
                for rho_bar, c_bar in ((1.0, 1.0), (2.0, 0.5), (0.5, 2.0)):
                    V = [rng.uniform(-1, 1) for _ in range(T)]
                    lp = [rng.uniform(-3, 0) for _ in range(T)]
                    mu = [x + rng.uniform(-1, 1) for x in lp]
                    R_ = rng.choice([0.0, 1.0, rng.uniform(-2, 2)])
                    args = (V, lp, mu, R_, gamma, lam, rho_bar, c_bar)
                    fast, slow = R.vtrace_seq(*args), R.vtrace_seq_definition(*args)
                    for a, b in zip(fast[0] + fast[1], slow[0] + slow[1]):
                        assert abs(a - b) <= 1e-12 * max(1.0, abs(b)), (T, a, b)
    # Hand-computed, T = 2, gamma = 1, lambda = 1, rho_bar = c_bar = 1, pi/mu = [2, 0.5]:
    # rho = c = [1, 0.5]; delta = [0 + 0.5 - 0.2, 1 - 0.5] = [0.3, 0.5];
    # v_1 = 0.5 + 0.5*0.5 = 0.75; v_0 = 0.2 + 0.3 + 1*(0.75 - 0.5) = 0.75;
    # adv = [1*(0 + 0.75 - 0.2), 0.5*(1 - 0.5)] = [0.55, 0.25].
    adv, v = R.vtrace_seq([0.2, 0.5], [math.log(2.0), math.log(0.5)], [0.0, 0.0], 1.0,
                          1.0, 1.0, 1.0, 1.0)
    assert all(abs(a - b) < 1e-15 for a, b in zip(v, [0.75, 0.75])), v
    assert all(abs(a - b) < 1e-15 for a, b in zip(adv, [0.55, 0.25])), adv


@test
def batch_errors():
    for bad, what in [({"token": {"value": [[0.1], []]}, "seq": {"reward": [1, 0]}}, "empty"),
                      ({"params": {"nope": 1}, "token": {"value": [[0.1]]},
                        "seq": {"reward": [1]}}, "unknown param")]:
        try:
            R.evaluate("gae", bad)
        except R.RefError:
            pass
        else:
            raise AssertionError(what)
    # A token's node must lie on its sequence's root-to-leaf path, in order.
    try:
        R.Tree([-1, 0, 0], [[0, 2, 1]])
    except R.RefError:
        pass
    else:
        raise AssertionError("bad path")


def main():
    for fn in _tests:
        try:
            fn()
        except Exception:  # noqa: BLE001 - report every failure, keep going
            _results["failed"] += 1
            print(f"FAIL {fn.__name__}")
            traceback.print_exc()
        else:
            _results["passed"] += 1
            print(f"ok   {fn.__name__}")
    print(f"{_results['passed']} passed, {_results['failed']} failed")
    return 1 if _results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
