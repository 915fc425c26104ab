"""The examples of docs/python.md run and learn; the TRL example's
advantages and loss equal TRL's formulas."""

import importlib.util

import pytest
import torch

import cac
from conftest import REPO, assert_close


def _module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ppo_with_sae_learns_the_toy_task():
    ppo_sae = _module(REPO / "examples" / "python" / "ppo_sae.py")
    rewards = ppo_sae.train(steps=30, seed=1, log=lambda _: None)
    assert rewards[0] < 0.3
    assert sum(rewards[-5:]) / 5 > 0.7


# --- TRL (examples/python/trl_grpo.py) -----------------------------------
#
# TRL is not installable here, so the example's advantage function and loss
# are checked against the formulas of TRL's GRPOTrainer written out below
# (_generate_and_score_completions' advantages, _compute_loss's clipped loss
# with importance sampling per token and beta = 0), not against TRL itself.

TRL_EPS = 1e-4


def _trl():
    return _module(REPO / "examples" / "python" / "trl_grpo.py")


def trl_advantages(rewards, num_generations, scale_rewards):
    """TRL's GRPO advantage: the group's mean as baseline; the group's
    (torch.std, unbiased) or the batch's std plus 1e-4 as scale, or none;
    a std of one element is 0."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations)
    adv = rewards - mean
    if scale_rewards == "batch":
        std = (rewards.std() if rewards.numel() > 1
               else torch.zeros(())).expand_as(rewards)
    elif num_generations > 1:
        std = grouped.std(dim=1).repeat_interleave(num_generations)
    else:
        std = torch.zeros_like(rewards)
    if scale_rewards != "none":
        adv = adv / (std + TRL_EPS)
    return adv


def trl_loss(logp, old_logp, adv, mask, eps_low, eps_high, loss_type, max_len):
    """TRL's clipped loss (token-level ratios, no KL), its advantages [B]
    broadcast over the tokens as adv.unsqueeze(1) does, or [B, T]."""
    a = adv.unsqueeze(1) if adv.dim() == 1 else adv
    coef_1 = torch.exp(logp - old_logp)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    per_token = -torch.min(coef_1 * a, coef_2 * a)
    m = mask.to(logp.dtype)
    if loss_type == "grpo":
        return ((per_token * m).sum(-1) / m.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * m).sum() / m.sum().clamp(min=1.0)
    return (per_token * m).sum() / (per_token.size(0) * max_len)


def trl_rewards(seed, prompts=6, G=4):
    """Rewards in TRL's order: binary, continuous, and groups whose rewards
    are all equal (0, 1, 0.5: their float mean is exact)."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 2, (prompts, G), generator=g).float()
    r[1] = torch.rand(G, generator=g) * 3 - 1
    r[2] = 0.0
    r[3] = 1.0
    r[4] = 0.5
    return r.reshape(-1)


@pytest.mark.parametrize("scale", ["group", "batch", "none", True, False])
@pytest.mark.parametrize("G", [2, 4, 8])
def test_trl_advantages_equal_trls_formula(scale, G):
    trl = _trl()
    est = trl.trl_estimator(scale)
    mode = trl.scale_mode(scale)
    for seed in range(3):
        rewards = trl_rewards(seed, G=G)
        got = trl.advantages(est, rewards, None, G)
        want = trl_advantages(rewards, G, mode)
        assert got.dtype == torch.float32 and got.shape == rewards.shape
        assert_close(got, want, 2e-5, f"scale_rewards={scale!r} G={G}")
        equal = rewards.view(-1, G).eq(rewards.view(-1, G)[:, :1]).all(dim=1)
        assert bool((got.view(-1, G)[equal] == 0).all())
        assert bool((want.view(-1, G)[equal] == 0).all())


def test_trl_equal_rewards_without_an_exact_mean():
    # Eight rewards of 0.1: torch's float32 mean is not exactly 0.1, so
    # TRL's (r - mean) / (0 + 1e-4) is rounding noise; cac's GRPO gives 0.
    trl = _trl()
    rewards = torch.full((8,), 0.1)
    want = trl_advantages(rewards, 8, "group")
    got = trl.advantages(trl.trl_estimator("group"), rewards, None, 8)
    assert bool((got == 0).all())
    assert 0 < float(want.abs().max()) < 1e-3


def test_trl_advantages_per_token():
    trl = _trl()
    est = trl.trl_estimator("group")
    rewards = trl_rewards(5, prompts=6, G=2)
    B, T = rewards.shape[0], 7
    lengths = torch.tensor([3, 7, 0, 5, 1, 2, 7, 4, 6, 0, 1, 3])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).int()
    got = trl.advantages(est, rewards, mask, 2, per_token=True)
    # Rows 2 and 9 are all 0 (TRL's mask_truncated_completions): their
    # rewards still count in their groups, their advantages are 0.
    want = trl_advantages(rewards, 2, "group")[:, None] * mask
    assert float(want[3].abs().max()) > 0.5
    assert got.shape == (B, T)
    assert_close(got, want, 2e-5, "per-token advantages")
    assert bool((got[mask == 0] == 0).all())


def test_trl_advantages_bad_input():
    trl = _trl()
    est = trl.trl_estimator("group")
    with pytest.raises(ValueError, match="num_generations = 4"):
        trl.advantages(est, torch.zeros(10), None, 4)
    with pytest.raises(ValueError, match="scale_rewards"):
        trl.trl_estimator("std")
    gae = cac.load(REPO / "stdlib" / "gae.cac")
    with pytest.raises(ValueError, match="per_token=True"):
        trl.advantages(gae, torch.zeros(4), None, 2, value=torch.zeros(4, 3))
    ppo = cac.load(REPO / "stdlib" / "ppo_clip.cac")
    with pytest.raises(ValueError, match="loss_type 'dapo'"):
        trl.token_loss(ppo, torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2),
                       torch.ones(2, 3), "dapo")


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo"])
@pytest.mark.parametrize("per_token", [False, True])
def test_trl_token_loss_equals_trls_loss(loss_type, per_token):
    trl = _trl()
    eps_low, eps_high, max_len = 0.2, 0.28, 9
    ppo = cac.load(REPO / "stdlib" / "ppo_clip.cac",
                   params={"eps_low": eps_low, "eps_high": eps_high, "dual_clip": 0})
    g = torch.Generator().manual_seed(3)
    B, T = 8, 9
    lengths = torch.tensor([3, 9, 1, 5, 0, 2, 9, 4])  # row 4: no token
    mask = (torch.arange(T)[None, :] < lengths[:, None]).int()
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logp = (old + torch.randn(B, T, generator=g, dtype=torch.float64) * 0.4)
    adv = torch.randn((B, T) if per_token else (B,), generator=g, dtype=torch.float64)
    mine = logp.clone().requires_grad_(True)
    theirs = logp.clone().requires_grad_(True)
    got = trl.token_loss(ppo, mine, old, adv, mask, loss_type, max_len)
    want = trl_loss(theirs, old, adv, mask, eps_low, eps_high, loss_type, max_len)
    assert_close(got.detach(), want.detach(), 1e-10, f"{loss_type} loss")
    got.backward()
    want.backward()
    assert_close(mine.grad, theirs.grad, 1e-10, f"{loss_type} gradient")


def test_trl_subclass_is_a_grpo_trainer():
    trl_pkg = pytest.importorskip(
        "trl", reason="TRL is not installed (Debian has no trl): the subclass "
        "is not run here; its advantage function is tested above")
    trl = _trl()
    assert issubclass(trl.CacGRPOTrainer, trl_pkg.GRPOTrainer)
