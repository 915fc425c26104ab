#!/usr/bin/env python3
"""TRL's GRPOTrainer with its advantages from a `.cac` file
(docs/python.md, "TRL").

    from trl import GRPOConfig
    from trl_grpo import CacGRPOTrainer
    trainer = CacGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=reward,
                             args=GRPOConfig(num_generations=8), train_dataset=dataset,
                             cac_estimator="stdlib/rloo.cac")
    trainer.train()

Two parts. `advantages()` takes what TRL's GRPOTrainer holds when it
computes advantages (the rewards [B] of B = prompts x num_generations in
TRL's order, each prompt's completions next to each other, and the
completion mask [B, T]) and runs a `.cac` estimator on them through the
package; `trl_estimator(scale_rewards)` is the estimator that computes
TRL's own advantage for each `scale_rewards` choice (the tests check it
against TRL's formula). `CacGRPOTrainer`, defined only when `trl` imports,
is a GRPOTrainer whose `_generate_and_score_completions` puts the `.cac`
estimator's advantages where TRL's own were.

TRL's loss takes one advantage per completion (it multiplies the
per-token ratios by `advantages.unsqueeze(1)`), which is what outcome
estimators give (GRPO, Dr. GRPO, RLOO, ...). A method whose advantage
differs from token to token needs the loss per token as well:
`advantages(..., per_token=True)` returns [B, T] and `token_loss()` is
TRL's clipped loss on such advantages through stdlib/ppo_clip.cac, for a
`_compute_loss` of your own (docs/python.md says how).
"""

from pathlib import Path

import torch

import cac

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent

#: What TRL adds to the standard deviation before dividing by it.
TRL_EPS = 1e-4
#: TRL's loss_type -> (cac aggregation, whether its mean runs over every
#: completion of the batch, empty ones included).
LOSS_TYPES = {"grpo": ("seq-mean-token-mean", True),
              "bnpo": ("token-mean", False),
              "dr_grpo": ("seq-mean-token-sum-norm", True)}


def scale_mode(scale_rewards):
    """TRL's scale_rewards as one of "group", "batch", "none" (older TRL
    took a bool: True is "group", False "none")."""
    if scale_rewards is True:
        return "group"
    if scale_rewards is False:
        return "none"
    if scale_rewards in ("group", "batch", "none"):
        return scale_rewards
    raise ValueError(f"scale_rewards must be 'group', 'batch', 'none' or a bool, "
                     f"got {scale_rewards!r}")


def trl_estimator(scale_rewards="group", **load_args):
    """The `.cac` estimator that computes TRL's GRPO advantage for
    `scale_rewards`: stdlib/grpo.cac with torch.std's unbiased std and TRL's
    1e-4 ("group"), stdlib/drgrpo.cac ("none"), trl_grpo_batch.cac beside
    this file ("batch")."""
    mode = scale_mode(scale_rewards)
    if mode == "group":
        return cac.load(REPO / "stdlib" / "grpo.cac",
                        params={"unbiased": 1, "eps": TRL_EPS}, **load_args)
    if mode == "none":
        return cac.load(REPO / "stdlib" / "drgrpo.cac", **load_args)
    return cac.load(HERE / "trl_grpo_batch.cac", params={"eps": TRL_EPS},
                    **load_args)


def prompt_groups(B, num_generations):
    """TRL's groups: completion i answers prompt i // num_generations."""
    if num_generations < 1 or B % num_generations:
        raise ValueError(f"{B} completions do not split into groups of "
                         f"num_generations = {num_generations}")
    return torch.arange(B) // num_generations


def _token_inputs(est):
    return [n for n, d in est.inputs.items()
            if d == "token" and n not in ("tree_node",)]


def advantages(est, rewards, completion_mask, num_generations, *,
               per_token=False, output="adv", **inputs):
    """The estimator's advantages for TRL's batch.

    rewards: [B] in TRL's order; completion_mask: [B, T] (1 on the
    completion's tokens; TRL's mask_truncated_completions leaves a row all
    0; not read, may be None, when per_token=False); num_generations:
    completions per prompt. Other inputs of the
    estimator by name (seq inputs [B], token inputs [B, T]).

    per_token=False returns [B], one advantage per completion, as TRL's
    loss takes it: for estimators without token inputs whose advantage is
    the same on every token of a completion. The call runs packed, one
    token per completion, so the mask is not read. per_token=True returns
    [B, T], 0 where the mask is 0; a row with no token enters the call as
    one token, so that its reward still counts in its group as in TRL, and
    gets 0."""
    group = prompt_groups(rewards.shape[0], num_generations)
    if not per_token:
        tokens = _token_inputs(est)
        if tokens:
            raise ValueError(f"{est.name} reads token inputs ({', '.join(tokens)}): "
                             "its advantages differ per token; call with "
                             "per_token=True and take the loss per token "
                             "(token_loss)")
        ones = torch.ones(rewards.shape[0], dtype=torch.long)
        return est(reward=rewards, group=group, lengths=ones, **inputs)[output]
    mask = completion_mask != 0
    empty = ~mask.any(dim=1)
    if bool(empty.any()):
        mask = mask.clone()
        mask[empty, 0] = True
    adv = est(reward=rewards, group=group, mask=mask, **inputs)[output]
    return adv.masked_fill(completion_mask == 0, 0.0)


def token_loss(objective, per_token_logps, old_per_token_logps, advantages,
               completion_mask, loss_type="grpo", max_completion_length=None):
    """TRL's clipped policy loss with advantages [B] or [B, T], through a
    `.cac` objective (stdlib/ppo_clip.cac loaded with eps_low = TRL's
    epsilon_low, eps_high = epsilon_high, dual_clip = 0): the compiled
    gradient flows to per_token_logps. loss_type is TRL's "grpo" (each
    completion's token mean, averaged over the B completions), "bnpo" (the
    mean over all tokens) or "dr_grpo" (the token sum over B x
    max_completion_length). Importance sampling per token; TRL's KL term
    (beta > 0) is not part of it."""
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r}: token_loss knows "
                         + ", ".join(LOSS_TYPES))
    aggregation, over_all = LOSS_TYPES[loss_type]
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' divides by max_completion_length; "
                         "give it")
    B = completion_mask.shape[0]
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(per_token_logps)
    mask = completion_mask != 0
    keep = mask.any(dim=1)
    if not bool(keep.any()):
        # No token in the batch: TRL's loss is 0 (a sum over nothing).
        return (per_token_logps * 0).sum()
    rows = keep.nonzero().squeeze(1)
    loss = objective.loss(logp_new=per_token_logps.index_select(0, rows),
                          logp=old_per_token_logps.index_select(0, rows),
                          adv=advantages.index_select(0, rows),
                          mask=mask.index_select(0, rows),
                          aggregation=aggregation,
                          norm_len=max_completion_length if loss_type == "dr_grpo" else None)
    # The package's seq-mean modes average over the rows it saw; TRL's over
    # all B, the empty rows' 0 included.
    return loss * (rows.numel() / B) if over_all else loss


def _define_trainer():
    try:
        from trl import GRPOTrainer
    except ImportError:
        return None

    class CacGRPOTrainer(GRPOTrainer):
        """GRPOTrainer whose advantages come from a `.cac` estimator.

        cac_estimator: a .cac file or bundle folder (default: TRL's own
        GRPO for args.scale_rewards, trl_estimator); cac_params: its
        parameters; cac_load_args: further cac.load arguments. The
        estimator reads `reward` (the weighted sum of the reward functions,
        gathered over the processes, as TRL normalizes it) and `group` (the
        prompt), and must give one advantage per completion."""

        def __init__(self, *args, cac_estimator=None, cac_params=None,
                     cac_load_args=None, **kwargs):
            super().__init__(*args, **kwargs)
            if not hasattr(GRPOTrainer, "_calculate_rewards"):
                raise TypeError("CacGRPOTrainer needs a TRL whose GRPOTrainer "
                                "has _calculate_rewards (it reads the gathered "
                                "rewards there)")
            aggregation = getattr(self, "multi_objective_aggregation",
                                  "sum_then_normalize")
            if aggregation != "sum_then_normalize":
                raise ValueError(f"multi_objective_aggregation={aggregation!r}: "
                                 "CacGRPOTrainer gives the estimator the "
                                 "weighted sum of the rewards "
                                 "('sum_then_normalize')")
            load_args = dict(cac_load_args or {})
            if cac_estimator is None:
                self.cac_estimator = trl_estimator(self.scale_rewards, **load_args)
            else:
                self.cac_estimator = cac.load(cac_estimator, cac_params, **load_args)
            tokens = _token_inputs(self.cac_estimator)
            if tokens:
                raise ValueError(f"{self.cac_estimator.name} reads token inputs "
                                 f"({', '.join(tokens)}); TRL's loss takes one "
                                 "advantage per completion (see token_loss)")
            self._cac_rewards_per_func = None

        def _calculate_rewards(self, *args, **kwargs):
            # [B over all processes, reward functions], as TRL normalizes it.
            rewards_per_func = super()._calculate_rewards(*args, **kwargs)
            self._cac_rewards_per_func = rewards_per_func
            return rewards_per_func

        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            per_func = self._cac_rewards_per_func
            self._cac_rewards_per_func = None
            weights = self.reward_weights.to(per_func.device)
            rewards = (per_func * weights.unsqueeze(0)).nansum(dim=1)
            training = self.model.training
            n = self.num_generations if training else (
                getattr(self, "num_generations_eval", None) or self.num_generations)
            adv = advantages(self.cac_estimator, rewards, None, n)
            local = output["advantages"].shape[0]
            start = self.accelerator.process_index * local
            output["advantages"] = adv[start:start + local].to(output["advantages"].dtype)
            return output

    return CacGRPOTrainer


CacGRPOTrainer = _define_trainer()
