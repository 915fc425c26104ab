#!/usr/bin/env python3
"""SAE inside a plain PyTorch PPO loop: advantages from stdlib/sae.cac and
the clipped loss (with its compiled gradient) from stdlib/ppo_clip.cac,
everything else ordinary PyTorch.

The toy task: a policy writes a sequence of 4..12 tokens from a vocabulary
of 8, one categorical per position (a learned table of logits); the reward
at the end is the fraction of tokens equal to the target token 3. A token
critic (one value per position) learns the returns. The mean reward rises
from about 1/8 toward 1.

    PYTHONPATH=build/python CAC_COMPILER=build/bin/cac \
        /usr/bin/python3 examples/python/ppo_sae.py [--steps 40] [--seed 1]
"""

import argparse
from pathlib import Path

import torch

import cac

REPO = Path(__file__).resolve().parents[2]
VOCAB, MAX_LEN, TARGET = 8, 12, 3


def rollout(policy, batch, gen):
    """Sampled tokens [B, T], their log-probabilities, the mask and the
    rewards [B]."""
    lengths = torch.randint(4, MAX_LEN + 1, (batch,), generator=gen)
    mask = torch.arange(MAX_LEN)[None, :] < lengths[:, None]
    with torch.no_grad():
        dist = torch.distributions.Categorical(logits=policy.expand(batch, -1, -1))
        tokens = dist.sample()
        logp = dist.log_prob(tokens)
    hits = ((tokens == TARGET) & mask).sum(1).float()
    return tokens, logp, mask, hits / lengths.float()


def train(steps=40, batch=64, seed=1, log=print):
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    policy = torch.zeros(1, MAX_LEN, VOCAB, requires_grad=True)
    critic = torch.zeros(MAX_LEN, requires_grad=True)
    opt = torch.optim.Adam([policy, critic], lr=0.05)
    sae = cac.load(REPO / "stdlib" / "sae.cac", params={"lambda": 0.95, "threshold": 0.2})
    ppo = cac.load(REPO / "stdlib" / "ppo_clip.cac", params={"eps_low": 0.2, "eps_high": 0.2})
    rewards = []
    for step in range(steps):
        tokens, old_logp, mask, reward = rollout(policy, batch, gen)
        value = critic.detach().expand(batch, -1)
        out = sae(value=value, logp=old_logp, reward=reward, mask=mask)
        for _ in range(2):  # PPO epochs
            dist = torch.distributions.Categorical(logits=policy.expand(batch, -1, -1))
            logp = dist.log_prob(tokens)
            loss = ppo.loss(logp_new=logp, logp=old_logp, adv=out["adv"], mask=mask)
            m = mask.float()
            value_loss = (((critic - out["ret"]) ** 2) * m).sum() / m.sum()
            opt.zero_grad()
            (loss + 0.5 * value_loss).backward()
            opt.step()
        rewards.append(float(reward.mean()))
        if step % 10 == 0 or step == steps - 1:
            log(f"step {step:3d}  reward {rewards[-1]:.3f}  loss {float(loss):+.4f}")
    return rewards


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    train(args.steps, seed=args.seed)


if __name__ == "__main__":
    main()
