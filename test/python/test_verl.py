"""cac.verl's adapters against reference implementations of verl's
formulas, written here from verl's semantics (core_algos: GAE with
observation tokens skipped and masked whitening, GRPO and RLOO by uid with
their loops' groups of one, the vanilla PPO loss with the dual clip and
agg_loss's modes)."""

import random
import sys

import numpy as np
import pytest
import torch

import cac
import cac.verl
from conftest import STDLIB, assert_close
from verl_reference import (ref_agg_seq_mask, ref_gae, ref_grpo, ref_grpo_vectorized,
                            ref_rloo, ref_rloo_vectorized, ref_rollout_correction,
                            ref_vanilla_pg_losses, ref_vanilla_policy_loss)

# --- batches -----------------------------------------------------------


def verl_batch(seed, B=12, T=10, holes=False, dtype=torch.float32):
    """Right-padded responses (optionally with observation tokens), an
    outcome reward on the last valid token, uids with groups of one."""
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    mask = torch.zeros(B, T, dtype=dtype)
    rewards = torch.zeros(B, T, dtype=dtype)
    for b in range(B):
        n = rng.randint(2, T)
        mask[b, :n] = 1
        if holes:
            for t in range(1, n - 1):
                if rng.random() < 0.2:
                    mask[b, t] = 0
        rewards[b, n - 1] = rng.choice([0.0, 1.0, 0.5])
    uids = np.array([f"uid-{rng.randint(0, 4)}" for _ in range(B)], dtype=object)
    values = torch.randn(B, T, generator=g, dtype=dtype)
    return rewards, mask, uids, values


def on_mask(x, mask):
    return x[mask != 0]


# --- the adapters --------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_grpo_equals_verl_groups_of_one_included(seed):
    rewards, mask, uids, _ = verl_batch(seed)
    fn = cac.verl.advantage_estimator(cac.verl.GRPO)
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=uids)
    want, _ = ref_grpo(rewards, mask, uids)
    assert_close(adv, want, 1e-5, "advantages")
    assert_close(ret, want, 1e-5, "returns")


def test_grpo_without_std_normalisation():
    rewards, mask, uids, _ = verl_batch(4)
    fn = cac.verl.advantage_estimator(cac.verl.GRPO, {"norm_by_std": 0})
    adv, _ = fn(rewards, mask, index=uids)
    want, _ = ref_grpo(rewards, mask, uids, norm_by_std=False)
    assert_close(adv, want, 1e-5, "advantages")


def test_stdlib_grpo_equals_verl_when_every_group_has_two():
    rewards, mask, _, _ = verl_batch(5)
    uids = np.array([f"p{b // 3}" for b in range(rewards.shape[0])], dtype=object)
    fn = cac.verl.advantage_estimator(STDLIB / "grpo.cac", {"unbiased": 1})
    adv, _ = fn(rewards, mask, index=uids)
    want, _ = ref_grpo(rewards, mask, uids)
    assert_close(adv, want, 1e-5, "advantages")


@pytest.mark.parametrize("seed", [1, 2])
def test_rloo_equals_verl(seed):
    rewards, mask, uids, _ = verl_batch(seed)
    fn = cac.verl.advantage_estimator(cac.verl.RLOO)
    adv, _ = fn(rewards, mask, index=uids)
    want, _ = ref_rloo(rewards, mask, uids)
    assert_close(adv, want, 1e-5, "advantages")


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_verl_vectorized_estimators_equal_the_loops_and_cac(seed):
    """bench/python/baselines.py times verl's vectorized GRPO and RLOO. GRPO's
    equals the loop and the adapter (its variance floor eps only changes
    groups of equal rewards, whose advantage is 0 either way). RLOO's equals
    them except for a group of one, where verl's two forms differ: the loop
    keeps R (so does cac.verl.RLOO), the vectorized form gives 0."""
    rewards, mask, uids, _ = verl_batch(seed, B=24)
    uids[0] = "uid-alone"
    rewards[0] = rewards[0] + 0.25 * mask[0] / mask[0].sum()
    got, _ = ref_grpo_vectorized(rewards, mask, uids)
    assert_close(got, ref_grpo(rewards, mask, uids)[0], 1e-5, "grpo_vectorized")
    adv, _ = cac.verl.advantage_estimator(cac.verl.GRPO)(rewards, mask, index=uids)
    assert_close(adv, got, 1e-5, "cac.verl.GRPO against grpo_vectorized")

    sizes = {u: list(uids).count(u) for u in uids}
    alone = torch.tensor([sizes[u] == 1 for u in uids])
    assert alone.any() and (~alone).any()
    got, _ = ref_rloo_vectorized(rewards, mask, uids)
    want, _ = ref_rloo(rewards, mask, uids)
    assert_close(got[~alone], want[~alone], 1e-5, "rloo_vectorized, groups of two or more")
    assert (got[alone] == 0).all()
    assert_close(want[alone], rewards[alone].sum(-1, keepdim=True) * mask[alone], 0,
                 "verl's RLOO loop keeps R in a group of one")
    adv, _ = cac.verl.advantage_estimator(cac.verl.RLOO)(rewards, mask, index=uids)
    assert_close(adv, want, 1e-5, "cac.verl.RLOO against the loop")


@pytest.mark.parametrize("holes", [False, True])
def test_gae_equals_verl_with_whitening(holes):
    rewards, mask, _, values = verl_batch(6, holes=holes, dtype=torch.float64)
    fn = cac.verl.advantage_estimator(STDLIB / "gae.cac", {"gamma": 0.99, "lambda": 0.9},
                                      whiten=True)
    adv, ret = fn(rewards, mask, values=values)
    want_adv, want_ret = ref_gae(rewards, values, mask, 0.99, 0.9)
    assert_close(on_mask(adv, mask), on_mask(want_adv, mask), 1e-9, "advantages")
    assert_close(on_mask(ret, mask), on_mask(want_ret, mask), 1e-9, "returns")
    assert (adv[mask == 0] == 0).all() and (ret[mask == 0] == 0).all()


def test_gae_dense_equals_verl_with_kl_in_the_reward():
    rewards, mask, _, values = verl_batch(7, holes=True, dtype=torch.float64)
    rewards = rewards - 0.01 * torch.rand(rewards.shape, dtype=torch.float64) * mask
    fn = cac.verl.advantage_estimator(STDLIB / "gae_dense.cac", {"gamma": 1.0, "lambda": 0.95},
                                      whiten=True)
    adv, ret = fn(rewards, mask, values=values)
    want_adv, want_ret = ref_gae(rewards, values, mask, 1.0, 0.95)
    assert_close(on_mask(adv, mask), on_mask(want_adv, mask), 1e-9, "advantages")
    assert_close(on_mask(ret, mask), on_mask(want_ret, mask), 1e-9, "returns")


def test_estimator_without_values_says_so():
    rewards, mask, _, _ = verl_batch(8)
    fn = cac.verl.advantage_estimator(STDLIB / "gae.cac")
    with pytest.raises(TypeError, match="missing input 'value'"):
        fn(rewards, mask)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean",
                                  "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_policy_loss_equals_verl_vanilla(mode):
    _, mask, _, _ = verl_batch(9, holes=True, dtype=torch.float64)
    g = torch.Generator().manual_seed(9)
    old = -torch.rand(mask.shape, generator=g, dtype=torch.float64) * 2
    new = old + 0.4 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    fn = cac.verl.policy_loss(STDLIB / "ppo_clip.cac",
                              {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 3.0})
    x = new.clone().requires_grad_()
    loss, metrics = fn(old, x, adv, mask, loss_agg_mode=mode)
    loss.backward()
    y = new.clone().requires_grad_()
    want = ref_vanilla_policy_loss(old, y, adv, mask, mode, 0.2, 0.28, 3.0)
    want.backward()
    assert_close(loss.detach(), want.detach(), 1e-12, f"loss ({mode})")
    assert_close(x.grad, y.grad, 1e-12, f"gradient ({mode})")
    m = mask
    assert_close(metrics["actor/ppo_kl"], ((old - new) * m).sum() / m.sum(), 1e-12, "ppo_kl")
    assert 0 <= float(metrics["actor/pg_clipfrac"]) <= 1


# verl's rollout correction: (rollout_is, batch_normalize, rollout_rs, rs_threshold,
# rs_threshold_lower, veto). The geometric and sequence rejections remove whole rows.
ROLLOUT_CONFIGS = [
    ("token", False, None, 2.0, None, None),
    ("sequence", False, None, 2.0, None, None),
    ("token", True, "token", 1.5, None, None),
    ("sequence", True, "geometric", 1.1, None, None),
    (None, False, "sequence", 3.0, 0.5, None),
    ("token", False, None, 2.0, None, 0.3),
]


def rollout_batch(seed):
    """A verl batch with rollout log-probs that differ from old_log_prob: most
    tokens a little, some a lot (ratios past the thresholds, a catastrophic one
    for the veto)."""
    _, mask, _, _ = verl_batch(seed, holes=True, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(mask.shape, generator=g, dtype=torch.float64) * 2
    rollout = old + 0.15 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    far = torch.rand(mask.shape, generator=g, dtype=torch.float64) < 0.05
    rollout = torch.where(far, old + 2.5, rollout)
    new = old + 0.4 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    return old, rollout, new, adv, mask


@pytest.mark.parametrize("config", ROLLOUT_CONFIGS)
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean",
                                  "seq-mean-token-sum", "seq-mean-token-sum-norm"])
def test_policy_loss_with_rollout_is_weights_equals_verl(config, mode):
    rollout_is, normalize, rollout_rs, rs_hi, rs_lo, veto = config
    old, rollout, new, adv, mask = rollout_batch(11)
    weights, rs_mask = ref_rollout_correction(old, rollout, mask, rollout_is, 2.0, normalize,
                                              rollout_rs, rs_hi, rs_lo, veto)
    if rollout_rs is not None or veto is not None:
        assert 0 < rs_mask.sum() < mask.sum(), "the rejection should remove some tokens"
    if rollout_rs in ("sequence", "geometric") or veto is not None:
        assert (rs_mask.sum(-1) == 0).any(), "the rejection should remove whole rows"
    fn = cac.verl.policy_loss(STDLIB / "ppo_dual_clip_is.cac",
                              {"eps_low": 0.2, "eps_high": 0.28, "dual_clip": 3.0})
    x = new.clone().requires_grad_()
    loss, _ = fn(old, x, adv, rs_mask, loss_agg_mode=mode, rollout_is_weights=weights)
    loss.backward()
    y = new.clone().requires_grad_()
    pg = ref_vanilla_pg_losses(old, y, adv, 0.2, 0.28, 3.0)
    if weights is not None:
        pg = pg * weights
    want = ref_agg_seq_mask(pg, rs_mask, mode)
    want.backward()
    assert_close(loss.detach(), want.detach(), 1e-7, f"loss ({mode}, {config})")
    assert_close(x.grad, y.grad, 1e-7, f"gradient ({mode}, {config})")


@pytest.mark.parametrize("config", ROLLOUT_CONFIGS)
def test_rollout_is_estimator_equals_verls_weights_and_mask(config):
    """stdlib/rollout_is.cac: verl's weights where its rejection keeps the
    token, 0 where it does not."""
    rollout_is, normalize, rollout_rs, rs_hi, rs_lo, veto = config
    old, rollout, _, _, mask = rollout_batch(12)
    weights, rs_mask = ref_rollout_correction(old, rollout, mask, rollout_is, 2.0, normalize,
                                              rollout_rs, rs_hi, rs_lo, veto)
    levels = {None: 0, "token": 1, "sequence": 2, "geometric": 3}
    est = cac.load(STDLIB / "rollout_is.cac", {
        "is_level": levels[rollout_is], "is_threshold": 2.0, "is_normalize": int(normalize),
        "rs_level": levels[rollout_rs], "rs_threshold": rs_hi,
        "rs_threshold_lower": rs_lo or 0.0, "veto": veto or 0.0})
    got = est(logp=old, logp_rollout=rollout, mask=mask)["is_weight"]
    want = (weights if weights is not None else mask) * rs_mask
    assert_close(got, want, 1e-12, f"is_weight ({config})")


def test_rollout_is_weights_and_a_fully_rejected_batch():
    """Every row rejected: verl's loss is 0 and so is the gradient; an
    objective without is_weight refuses the weights and names the *_is files."""
    old, rollout, new, adv, mask = rollout_batch(13)
    fn = cac.verl.policy_loss(STDLIB / "ppo_clip_is.cac")
    x = new.clone().requires_grad_()
    loss, _ = fn(old, x, adv, torch.zeros_like(mask), rollout_is_weights=torch.ones_like(old))
    loss.backward()
    assert float(loss) == 0.0 and float(x.grad.abs().sum()) == 0.0
    plain = cac.verl.policy_loss(STDLIB / "ppo_clip.cac")
    with pytest.raises(ValueError, match="ppo_clip_is.cac"):
        plain(old, new, adv, mask, rollout_is_weights=torch.ones_like(old))


def test_is_objective_without_weights_equals_the_plain_objective():
    """No rollout_is_weights: an *_is objective gets weights 1 and gives
    verl's vanilla loss."""
    old, _, new, adv, mask = rollout_batch(14)
    fn = cac.verl.policy_loss(STDLIB / "ppo_dual_clip_is.cac")
    x = new.clone().requires_grad_()
    loss, metrics = fn(old, x, adv, mask, loss_agg_mode="seq-mean-token-mean")
    loss.backward()
    y = new.clone().requires_grad_()
    want = ref_agg_seq_mask(ref_vanilla_pg_losses(old, y, adv), mask, "seq-mean-token-mean")
    want.backward()
    assert_close(loss.detach(), want.detach(), 1e-7, "loss")
    assert_close(x.grad, y.grad, 1e-7, "gradient")
    assert 0 <= float(metrics["actor/pg_clipfrac"]) <= 1


# --- verl's config ----------------------------------------------------------


class AttrConfig:
    """verl's dataclass configs (AlgoConfig, ActorConfig): attributes, and a
    get() that returns the default for a missing key."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def get(self, key, default=None):
        return getattr(self, key, default)


class PlainObject:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@pytest.mark.parametrize("make", [dict, AttrConfig, PlainObject])
def test_gae_takes_gamma_and_lam_from_verls_config(make):
    rewards, mask, _, values = verl_batch(15, holes=True, dtype=torch.float64)
    fn = cac.verl.advantage_estimator(STDLIB / "gae.cac", whiten=True)
    cfg = make(gamma=0.9, lam=0.8, adv_estimator="cac_gae")
    adv, ret = fn(rewards, mask, config=cfg, values=values)
    want_adv, want_ret = ref_gae(rewards, values, mask, 0.9, 0.8)
    assert_close(on_mask(adv, mask), on_mask(want_adv, mask), 1e-9, "advantages")
    assert_close(on_mask(ret, mask), on_mask(want_ret, mask), 1e-9, "returns")
    # The estimator itself keeps its parameters: the config applies per call.
    assert fn.estimator.params["gamma"] == 1.0 and fn.estimator.params["lambda"] == 0.95
    adv, _ = fn(rewards, mask, values=values)
    want_adv, _ = ref_gae(rewards, values, mask, 1.0, 0.95)
    assert_close(on_mask(adv, mask), on_mask(want_adv, mask), 1e-9, "defaults without config")


def test_parameters_given_at_load_win_over_verls_config():
    rewards, mask, _, values = verl_batch(16, dtype=torch.float64)
    fn = cac.verl.advantage_estimator(STDLIB / "gae.cac", {"gamma": 0.99}, whiten=True)
    adv, _ = fn(rewards, mask, config={"gamma": 0.5, "lam": 0.7}, values=values)
    want, _ = ref_gae(rewards, values, mask, 0.99, 0.7)
    assert_close(on_mask(adv, mask), on_mask(want, mask), 1e-9, "gamma from params, lam from config")
    off = cac.verl.advantage_estimator(STDLIB / "gae.cac", whiten=True, config_map={})
    adv, _ = off(rewards, mask, config={"gamma": 0.5, "lam": 0.7}, values=values)
    want, _ = ref_gae(rewards, values, mask, 1.0, 0.95)
    assert_close(on_mask(adv, mask), on_mask(want, mask), 1e-9, "config_map={} ignores the config")


def test_grpo_follows_norm_adv_by_std_in_grpo():
    rewards, mask, uids, _ = verl_batch(17)
    fn = cac.verl.advantage_estimator(cac.verl.GRPO)
    for norm in (True, False):
        adv, _ = fn(rewards, mask, index=uids, config=AttrConfig(norm_adv_by_std_in_grpo=norm))
        want, _ = ref_grpo(rewards, mask, uids, norm_by_std=norm)
        assert_close(adv, want, 1e-5, f"norm_adv_by_std_in_grpo={norm}")


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum-norm"])
def test_policy_loss_takes_clip_ratios_from_verls_actor_config(mode):
    """verl's vanilla loss reads clip_ratio_low/high (else clip_ratio) and
    always applies clip_ratio_c; so does ppo_clip under the config."""
    _, mask, _, _ = verl_batch(18, holes=True, dtype=torch.float64)
    g = torch.Generator().manual_seed(18)
    old = -torch.rand(mask.shape, generator=g, dtype=torch.float64) * 2
    new = old + 0.6 * torch.randn(mask.shape, generator=g, dtype=torch.float64)
    adv = torch.randn(mask.shape, generator=g, dtype=torch.float64)
    fn = cac.verl.policy_loss(STDLIB / "ppo_clip.cac")
    cfg = AttrConfig(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=0.28,
                     clip_ratio_c=2.0, loss_scale_factor=7)
    x = new.clone().requires_grad_()
    loss, _ = fn(old, x, adv, mask, loss_agg_mode=mode, config=cfg)
    loss.backward()
    y = new.clone().requires_grad_()
    pg = ref_vanilla_pg_losses(old, y, adv, 0.1, 0.28, 2.0)
    m = mask.to(pg.dtype)
    want = ((pg * m).sum() / m.sum() if mode == "token-mean"
            else ((pg * m).sum(1) / 7).mean())
    want.backward()
    assert_close(loss.detach(), want.detach(), 1e-12, f"loss ({mode})")
    assert_close(x.grad, y.grad, 1e-12, f"gradient ({mode})")
    without_dual = ref_vanilla_pg_losses(old, new, adv, 0.1, 0.28, 1e30)
    assert not torch.equal(pg.detach(), without_dual), "the batch should reach the dual clip"


def test_a_config_value_that_is_not_a_number_is_named():
    rewards, mask, _, values = verl_batch(19)
    fn = cac.verl.advantage_estimator(STDLIB / "gae.cac")
    with pytest.raises(TypeError, match="verl config 'lam'.*'lambda'"):
        fn(rewards, mask, config={"lam": "high"}, values=values)


def test_with_params_leaves_the_estimator_unchanged():
    est = cac.load(STDLIB / "gae.cac", {"gamma": 0.99})
    twin = est.with_params({"lambda": 0.5})
    assert twin.params["lambda"] == 0.5 and est.params["lambda"] == 0.95
    assert twin.given_params == {"gamma", "lambda"} and est.given_params == {"gamma"}
    with pytest.raises(ValueError, match="unknown parameter 'lam'"):
        est.with_params({"lam": 0.5})


def test_register_puts_both_into_verls_registries(tmp_path, monkeypatch):
    """A stand-in for verl's registry module (verl itself is not a
    dependency): register_adv_est / register_policy_loss decorators."""
    core = tmp_path / "verl" / "trainer" / "ppo"
    core.mkdir(parents=True)
    for d in (tmp_path / "verl", tmp_path / "verl" / "trainer", core):
        (d / "__init__.py").write_text("")
    (core / "core_algos.py").write_text(
        "ADV, LOSS = {}, {}\n"
        "def register_adv_est(name):\n"
        "    def deco(fn):\n        ADV[name] = fn\n        return fn\n    return deco\n"
        "def register_policy_loss(name):\n"
        "    def deco(fn):\n        LOSS[name] = fn\n        return fn\n    return deco\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, m)
    cac.verl.register(cac.verl.GRPO, "cac_grpo")
    cac.verl.register(STDLIB / "ppo_clip.cac", "cac_ppo", {"dual_clip": 3})
    from verl.trainer.ppo import core_algos
    rewards, mask, uids, _ = verl_batch(10)
    adv, _ = core_algos.ADV["cac_grpo"](rewards, mask, index=uids)
    assert_close(adv, ref_grpo(rewards, mask, uids)[0], 1e-5, "registered GRPO")
    assert "cac_ppo" in core_algos.LOSS


def test_register_without_verl_says_so(monkeypatch):
    for m in [m for m in sys.modules if m.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, m)
    monkeypatch.setitem(sys.modules, "verl", None)
    with pytest.raises(ImportError, match="needs verl"):
        cac.verl.register(cac.verl.GRPO, "x")
