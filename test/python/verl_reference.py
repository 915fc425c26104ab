"""Reference implementations of verl's formulas (verl/trainer/ppo/
core_algos.py), written here from verl's semantics for the tests
(test_verl.py) and the benchmark (bench/python/bench.py): GAE's loop with
observation tokens skipped and masked whitening, GRPO's and RLOO's
per-uid loops with their groups of one, their vectorized forms
(grpo_vectorized, rloo_vectorized: uids to group numbers on the host, then
index_add_/bincount on the tensors' device), the vanilla PPO loss with the
dual clip and agg_loss's modes. A transcription of verl's code, not verl."""

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
    next_v = torch.zeros(B, dtype=values.dtype, device=values.device)
    run = torch.zeros(B, dtype=values.dtype, device=values.device)
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


def ref_uid_index(index, device):
    """verl's as_torch_index for uid strings: group numbers from np.unique
    on the host, copied to the device."""
    import numpy as np
    _, inv = np.unique(np.asarray(index, dtype=object), return_inverse=True)
    return torch.from_numpy(inv.astype(np.int64)).to(device)


def ref_grpo_vectorized(rewards, mask, index, eps=1e-6, norm_by_std=True):
    """verl's compute_grpo_vectorized_outcome_advantage with its
    group_mean_std: sums by index_add_, the unbiased variance floored at
    eps, and a group of one with mean 0 and std 1."""
    scores = rewards.sum(dim=-1)
    g = ref_uid_index(index, scores.device)
    G = int(g.max()) + 1
    zeros = torch.zeros(G, dtype=scores.dtype, device=scores.device)
    count = zeros.index_add(0, g, torch.ones_like(scores))
    s1 = zeros.index_add(0, g, scores)
    s2 = zeros.index_add(0, g, scores * scores)
    mean = s1 / count.clamp_min(1)
    var = (s2 - s1 * s1 / count.clamp_min(1)) / (count - 1).clamp_min(1)
    std = var.clamp_min(eps).sqrt()
    single = count <= 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    s = scores - mean[g]
    adv = (s / (std[g] + eps) if norm_by_std else s)[:, None] * mask
    return adv, adv


def ref_rloo_vectorized(rewards, mask, index):
    """verl's compute_rloo_vectorized_outcome_advantage: with c the group's
    size, (c * R - group sum) / (c - 1), 0 for a group of one."""
    scores = rewards.sum(dim=-1)
    g = ref_uid_index(index, scores.device)
    c = torch.bincount(g)[g].to(scores.dtype)
    sums = torch.bincount(g, weights=scores)[g].to(scores.dtype)
    adv = (c * scores - sums) / (c - 1).clamp_min(1) * (c > 1)
    adv = adv[:, None] * mask
    return adv, adv


# --- rollout correction (verl/trainer/ppo/rollout_corr_helper.py) --------


def ref_rollout_correction(old, rollout, mask, rollout_is=None, is_threshold=2.0,
                           batch_normalize=False, rollout_rs=None, rs_threshold=2.0,
                           rs_threshold_lower=None, veto=None):
    """verl's compute_rollout_correction_and_rejection_mask: (rollout_is_weights or
    None, modified_response_mask). The weights: exp of the clamped token log ratio
    (rollout_is="token") or of its masked row sum ("sequence"), times the mask,
    truncated at is_threshold, detached, optionally divided by their batch mean. The
    mask: rejection of tokens / sequences whose ratio (token, sequence or geometric)
    leaves [lower, upper], and the veto of sequences with a token ratio below veto."""
    m = mask.to(old.dtype)
    log_ratio = old - rollout
    weights = None
    if rollout_is is not None:
        if rollout_is == "token":
            w = torch.exp(log_ratio.clamp(-20.0, 20.0))
        else:
            w = torch.exp((log_ratio * m).sum(-1, keepdim=True).clamp(-20.0, 20.0))
            w = w.expand_as(log_ratio)
        w = (w * m).clamp(max=is_threshold).detach()
        if batch_normalize:
            if rollout_is == "token":
                mean = (w * m).sum() / m.sum()
            else:
                seq_w = (w * m).sum(-1) / m.sum(-1)
                seq_m = (m.sum(-1) > 0).to(w.dtype)
                mean = (seq_w * seq_m).sum() / seq_m.sum()
            if mean > 1e-8:
                w = w / mean
        weights = w
    out_mask = m.clone()
    if rollout_rs is not None:
        lower = rs_threshold_lower if rs_threshold_lower is not None else 1.0 / rs_threshold
        if rollout_rs == "token":
            r = torch.exp(log_ratio.clamp(-20.0, 20.0))
        elif rollout_rs == "sequence":
            r = torch.exp((log_ratio * m).sum(-1, keepdim=True).clamp(-20.0, 20.0))
        else:
            r = torch.exp(((log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True))
                          .clamp(-20.0, 20.0))
        keep = ((r >= lower) & (r <= rs_threshold)).to(m.dtype)
        out_mask = m * keep.expand_as(m)
    if veto is not None:
        bad = ((log_ratio < torch.log(torch.tensor(veto, dtype=old.dtype))) & (m != 0))
        out_mask = out_mask * (~bad.any(-1, keepdim=True)).to(m.dtype)
    return weights, out_mask


def ref_agg_seq_mask(lmat, mask, mode):
    """verl's agg_loss with one process: the seq-mean modes leave fully masked
    sequences out of B (seq_mask); seq-mean-token-mean divides by count + 1e-8;
    seq-mean-token-sum-norm divides by the width T (loss_scale_factor unset)."""
    m = mask.to(lmat.dtype)
    if mode == "token-mean":
        return (lmat * m).sum() / m.sum()
    count = m.sum(-1)
    seq_m = (count > 0).to(lmat.dtype)
    if mode == "seq-mean-token-mean":
        seq = (lmat * m).sum(-1) / (count + 1e-8)
    else:
        seq = (lmat * m).sum(-1)
    loss = (seq * seq_m).sum() / seq_m.sum()
    return loss / mask.shape[-1] if mode == "seq-mean-token-sum-norm" else loss


def ref_vanilla_pg_losses(old, new, adv, low=0.2, high=0.2, c=3.0):
    """compute_policy_loss_vanilla's pg_losses before rollout_is_weights and agg_loss."""
    ratio = torch.exp((new - old).clamp(-20.0, 20.0))
    l1 = -adv * ratio
    l2 = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clip1 = torch.maximum(l1, l2)
    clip2 = torch.minimum(-adv * c, clip1)
    return torch.where(adv < 0, clip2, clip1)
