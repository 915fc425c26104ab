"""Objectives: the loss and the compiled gradient (through backward())
against PyTorch autograd of the same formula, and every stdlib objective
against `cac eval` on the same batch."""

import random

import pytest
import torch

import cac
from conftest import STDLIB, assert_close, cac_eval

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
         "seq-mean-token-sum-norm"]


def ragged_mask(rng, B, T, holes=True):
    """[B, T] masks with ragged lengths (at least 1) and, with holes,
    observation tokens inside the rows."""
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b in range(B):
        n = rng.randint(1, T)
        mask[b, :n] = True
        if holes:
            for t in range(1, n - 1):
                if rng.random() < 0.2:
                    mask[b, t] = False
    return mask


def ppo_clip_reference(lpn, lp, adv, mask, mode, eps_low, eps_high, dual, norm_len):
    """PPO's clipped surrogate with the dual clip, aggregated as verl's
    agg_loss, written in PyTorch (autograd gives its gradient)."""
    ratio = torch.exp(lpn - lp)
    f = torch.minimum(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)
    if dual > 0:
        f = torch.where(adv < 0, torch.maximum(f, dual * adv), f)
    m = mask.to(lpn.dtype)
    lm = -f * m
    if mode == "token-mean":
        return lm.sum() / m.sum()
    if mode == "seq-mean-token-mean":
        return (lm.sum(1) / m.sum(1)).mean()
    if mode == "seq-mean-token-sum":
        return lm.sum(1).mean()
    return (lm.sum(1) / norm_len).mean()


def batch_tensors(seed, B=6, T=9, dtype=torch.float64):
    rng = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    mask = ragged_mask(rng, B, T)
    lp = -torch.rand(B, T, generator=g, dtype=dtype) * 2
    lpn = lp + torch.randn(B, T, generator=g, dtype=dtype) * 0.3
    adv = torch.randn(B, T, generator=g, dtype=dtype)
    return mask, lp, lpn, adv


@pytest.mark.parametrize("dual", [0.0, 3.0])
@pytest.mark.parametrize("mode", MODES)
def test_ppo_clip_loss_and_gradient_equal_pytorch(mode, dual):
    obj = cac.load(STDLIB / "ppo_clip.cac",
                   params={"eps_low": 0.2, "eps_high": 0.28, "dual_clip": dual})
    mask, lp, lpn, adv = batch_tensors(11)
    x = lpn.clone().requires_grad_()
    loss = obj.loss(logp_new=x, logp=lp, adv=adv, mask=mask, aggregation=mode)
    loss.backward()
    y = lpn.clone().requires_grad_()
    longest = float(mask.sum(1).max())
    want = ppo_clip_reference(y, lp, adv, mask, mode, 0.2, 0.28, dual, longest)
    want.backward()
    assert loss.dim() == 0 and loss.dtype == torch.float64
    assert_close(loss.detach(), want.detach(), 1e-12, f"loss ({mode})")
    assert_close(x.grad, y.grad, 1e-12, f"gradient ({mode})")


def test_aggregation_as_a_load_parameter_and_norm_len():
    mask, lp, lpn, adv = batch_tensors(12)
    obj = cac.load(STDLIB / "ppo_clip.cac",
                   params={"aggregation": "seq-mean-token-sum-norm", "norm_len": 20})
    x = lpn.clone().requires_grad_()
    loss = obj.loss(logp_new=x, logp=lp, adv=adv, mask=mask)
    want = ppo_clip_reference(lpn, lp, adv, mask, MODES[3], 0.2, 0.2, 0, 20.0)
    assert_close(loss.detach(), want, 1e-12, "loss")


def test_float32_and_packed():
    mask, lp, lpn, adv = batch_tensors(13, dtype=torch.float32)
    obj = cac.load(STDLIB / "ppo_clip.cac")
    x = lpn[mask].clone().requires_grad_()
    loss = obj.loss(logp_new=x, logp=lp[mask], adv=adv[mask], lengths=mask.sum(1))
    loss.backward()
    y = lpn.clone().requires_grad_()
    want = ppo_clip_reference(y, lp, adv, mask, "token-mean", 0.2, 0.2, 0, 0)
    want.backward()
    assert loss.dtype == torch.float32 and x.grad.dtype == torch.float32
    assert_close(loss.detach(), want.detach(), 1e-5, "loss")
    assert_close(x.grad, y.grad[mask], 1e-5, "gradient")


def test_gradient_is_scaled_by_the_upstream_gradient():
    mask, lp, lpn, adv = batch_tensors(14)
    obj = cac.load(STDLIB / "ppo_clip.cac")
    x = lpn.clone().requires_grad_()
    (3.0 * obj.loss(logp_new=x, logp=lp, adv=adv, mask=mask)).backward()
    y = lpn.clone().requires_grad_()
    (3.0 * ppo_clip_reference(y, lp, adv, mask, "token-mean", 0.2, 0.2, 0, 0)).backward()
    assert_close(x.grad, y.grad, 1e-12, "gradient")


def test_other_outputs():
    mask, lp, lpn, adv = batch_tensors(15)
    obj = cac.load(STDLIB / "ppo_clip.cac")
    _, extra = obj.loss(logp_new=lpn, logp=lp, adv=adv, mask=mask, return_outputs=True)
    ratio = torch.exp(lpn - lp)
    cut = (torch.clamp(ratio, 0.8, 1.2) * adv < ratio * adv) & mask
    assert torch.equal(extra["clipped"] != 0, cut)


def _random_inputs(obj, rng, B, T):
    """A JSON batch for `obj` with plausible values per input name."""
    lengths = [rng.randint(1, T) for _ in range(B)]
    data = {"params": {}, "token": {}, "seq": {}}

    def value(name):
        if name.startswith("logp"):
            return -rng.uniform(0.01, 3.0)
        if name in ("entropy",):
            return rng.uniform(0.0, 3.0)
        if name.startswith("value"):
            return rng.uniform(0.05, 0.95)
        if name in ("weight",):
            return float(rng.random() < 0.8)
        if name == "reward":
            return float(rng.choice([0, 1, 0.5]))
        return rng.uniform(-1.5, 1.5)

    for name, domain in obj.inputs.items():
        if name == "group":
            data["seq"]["group"] = [rng.randint(0, 2) for _ in range(B)]
        elif domain == "token":
            data["token"][name] = [[value(name) for _ in range(n)] for n in lengths]
        elif domain == "seq":
            data["seq"][name] = [value(name) for _ in range(B)]
    if not data["token"]:
        data["token"]["_len"] = [[0.0] * n for n in lengths]
    return data, lengths


OBJECTIVES = ["ppo_clip", "ppo_kl", "gspo", "gspo_token", "spo_loss",
              "sapo_loss", "value_mse", "value_bce"]


@pytest.mark.parametrize("name", OBJECTIVES)
def test_stdlib_objectives_equal_cac_eval(name):
    obj = cac.load(STDLIB / f"{name}.cac")
    rng = random.Random(f"objective:{name}")
    data, lengths = _random_inputs(obj, rng, B=5, T=8)
    want = cac_eval(STDLIB / f"{name}.cac", data)
    B, T = len(lengths), max(lengths) + 1
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    kw = {"mask": mask}
    for inp, domain in obj.inputs.items():
        if inp == "group":
            kw["group"] = torch.tensor(data["seq"]["group"])
        elif domain == "token":
            x = torch.zeros(B, T, dtype=torch.float64)
            for b, r in enumerate(data["token"][inp]):
                x[b, :len(r)] = torch.tensor(r, dtype=torch.float64)
            kw[inp] = x
        else:
            kw[inp] = torch.tensor(data["seq"][inp], dtype=torch.float64)
    wrt = obj.wrt
    kw[wrt] = kw[wrt].clone().requires_grad_()
    loss = obj.loss(**kw)
    loss.backward()
    assert_close(loss.detach(), want["objective"]["loss"], 1e-9, f"{name} loss")
    grad = want[obj.inputs[wrt]][f"grad_{wrt}"]
    if obj.inputs[wrt] == "token":
        for b, r in enumerate(grad):
            assert_close(kw[wrt].grad[b, :len(r)], r, 1e-9, f"{name} grad[{b}]")
    else:
        assert_close(kw[wrt].grad, grad, 1e-9, f"{name} grad")
