"""Reference implementations of verl's formulas (verl/trainer/ppo/
core_algos.py), written here from verl's semantics for the tests
(test_verl.py) and the benchmark (bench/python/bench.py): GAE's loop with
observation tokens skipped and masked whitening, GRPO's and RLOO's
per-uid loops with their groups of one, the vanilla PPO loss with the dual
clip and agg_loss's modes. A transcription of verl's loops, not verl."""

import torch


def ref_masked_whiten(x, m):
    n = m.sum()
    mean = (x * m).sum() / (n + 1e-8)
    var = ((x - mean) ** 2 * m).sum() / (n + 1e-8) * n / (n - 1)
    return (x - mean) * torch.rsqrt(var + 1e-8)


def ref_gae(rewards, values, mask, gamma, lam):
    """verl's GAE loop: right to left; a token with mask 0 (observation or
    padding) carries the next value and the running advantage unchanged."""
    m = mask.to(values.dtype)
    B, T = values.shape
    next_v = torch.zeros(B, dtype=values.dtype)
    run = torch.zeros(B, dtype=values.dtype)
    advs = []
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * next_v - values[:, t]
        cand = delta + gamma * lam * run
        next_v = values[:, t] * m[:, t] + (1 - m[:, t]) * next_v
        run = cand * m[:, t] + (1 - m[:, t]) * run
        advs.append(run)
    adv = torch.stack(advs[::-1], dim=1)
    returns = adv + values
    return ref_masked_whiten(adv, m), returns


def _by_uid(index):
    groups = {}
    for i, u in enumerate(index):
        groups.setdefault(u, []).append(i)
    return groups.values()


def ref_grpo(rewards, mask, index, eps=1e-6, norm_by_std=True):
    scores = rewards.sum(dim=-1)
    out = scores.clone()
    for members in _by_uid(index):
        s = scores[members]
        if len(members) == 1:
            mean, std = torch.tensor(0.0, dtype=s.dtype), torch.tensor(1.0, dtype=s.dtype)
        else:
            mean, std = s.mean(), s.std()
        out[members] = (s - mean) / (std + eps) if norm_by_std else s - mean
    adv = out[:, None] * mask
    return adv, adv


def ref_rloo(rewards, mask, index):
    scores = rewards.sum(dim=-1)
    out = scores.clone()
    for members in _by_uid(index):
        n = len(members)
        if n > 1:
            s = scores[members]
            out[members] = s * n / (n - 1) - s.mean() * n / (n - 1)
    adv = out[:, None] * mask
    return adv, adv


def ref_agg(lmat, mask, mode):
    m = mask.to(lmat.dtype)
    if mode == "token-mean":
        return (lmat * m).sum() / m.sum()
    if mode == "seq-mean-token-sum":
        return (lmat * m).sum(1).mean()
    if mode == "seq-mean-token-mean":
        return ((lmat * m).sum(1) / m.sum(1)).mean()
    return ((lmat * m).sum(1) / mask.shape[-1]).mean()


def ref_vanilla_policy_loss(old, new, adv, mask, mode, low=0.2, high=0.2, c=3.0):
    ratio = torch.exp(new - old)
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.minimum(-adv * c, clip1)
    losses = torch.where(adv < 0, clip2, clip1)
    return ref_agg(losses, mask, mode)
