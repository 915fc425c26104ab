"""Adapters with verl's signatures (docs/python.md, "verl").

    import cac.verl
    cac.verl.register(cac.verl.GRPO, "cac_grpo")       # adv estimator
    cac.verl.register("stdlib/ppo_clip.cac", "cac_ppo", {"dual_clip": 3})

then `algorithm.adv_estimator=cac_grpo` and
`actor_rollout_ref.actor.policy_loss.loss_mode=cac_ppo` in verl's config.
"""

from pathlib import Path

import torch

from . import load

_METHODS = Path(__file__).resolve().parent / "methods"
#: GRPO with verl's conventions (torch.std, groups of one: mean 0, std 1).
GRPO = str(_METHODS / "verl_grpo.cac")
#: RLOO with verl's conventions (a group of one keeps its reward).
RLOO = str(_METHODS / "verl_rloo.cac")


def masked_whiten(values, mask):
    """verl's masked_whiten: (x - mean) / sqrt(var + 1e-8) over the masked
    elements, var unbiased; the means divide by (count + 1e-8) as verl's
    masked_mean does."""
    m = mask.to(values.dtype)
    count = m.sum()
    if count < 2:
        raise ValueError("whitening needs at least two tokens with mask 1")
    mean = (values * m).sum() / (count + 1e-8)
    var = ((values - mean) ** 2 * m).sum() / (count + 1e-8)
    var = var * count / (count - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


#: verl's algorithm config (AlgoConfig: `algorithm.*`) -> the estimator
#: parameter of the same meaning; the first key the config holds, not None,
#: gives the value.
ESTIMATOR_CONFIG = {
    "gamma": ("gamma",),
    "lambda": ("lam",),
    "norm_by_std": ("norm_adv_by_std_in_grpo",),
}

#: verl's actor config (ActorConfig: `actor_rollout_ref.actor.*`) -> the
#: objective parameter of the same meaning, as verl's vanilla loss reads it
#: (clip_ratio_low and clip_ratio_high fall back to clip_ratio; the dual clip
#: is clip_ratio_c, which verl's vanilla loss always applies).
POLICY_LOSS_CONFIG = {
    "eps_low": ("clip_ratio_low", "clip_ratio"),
    "eps_high": ("clip_ratio_high", "clip_ratio"),
    "dual_clip": ("clip_ratio_c",),
    "norm_len": ("loss_scale_factor",),
}


def _config_value(config, key):
    """config[key] for verl's configs: an OmegaConf DictConfig, a verl
    dataclass config, a dict or any object with the attribute; None when
    absent."""
    if isinstance(config, dict):
        return config.get(key)
    if hasattr(config, "get"):
        try:
            return config.get(key, None)
        except (TypeError, KeyError, AttributeError):
            pass
    return getattr(config, key, None)


def config_params(config, table, runner):
    """The parameters `runner` (an estimator or objective) takes from verl's
    `config` through `table` ({param: config keys}): only declared
    parameters that were not given at load (those stay fixed)."""
    if config is None or not table:
        return {}
    out = {}
    for param, keys in table.items():
        if param not in runner.params or param in runner.given_params:
            continue
        for key in (keys,) if isinstance(keys, str) else keys:
            value = _config_value(config, key)
            if value is None:
                continue
            try:
                out[param] = float(value)
            except (TypeError, ValueError):
                raise TypeError(f"verl config '{key}' (for the parameter "
                                f"'{param}' of {runner.name}) must be a "
                                f"number, got {value!r}") from None
            break
    return out


def _input(name, kwargs, who):
    if name not in kwargs or kwargs[name] is None:
        raise TypeError(f"{who}: missing input '{name}' (pass it as a "
                        f"keyword argument: {name}=...)")
    return kwargs[name]


def advantage_estimator(path, params=None, *, whiten=False,
                        config_map=ESTIMATOR_CONFIG, **load_args):
    """A function with verl's advantage-estimator signature
    fn(token_level_rewards, response_mask, index=None, config=None,
    values=None, **kwargs) -> (advantages, returns) running the .cac
    estimator `path`.

    The estimator's `reward` is the row sum of token_level_rewards (verl
    puts the outcome on the last valid token) for a seq reward, or
    token_level_rewards itself for a token reward; `value` is `values`,
    `group` is `index` (verl's uid array); other inputs come from kwargs by
    name. `advantages` is the output `adv` (whitened over the mask as
    verl's GAE does when whiten=True), `returns` the output `ret` or else
    `adv` (as verl's outcome estimators return it twice). Both are 0 where
    response_mask is 0.

    Parameters not given in `params` follow verl's `config` per call through
    `config_map` ({param: config keys}, ESTIMATOR_CONFIG by default: gamma,
    lam -> lambda, norm_adv_by_std_in_grpo -> norm_by_std); `{}` turns that
    off. Parameters given in `params` stay fixed."""
    est = load(path, params, **load_args)
    if "adv" not in est.outputs:
        raise ValueError(f"{path}: an advantage estimator needs an output "
                         f"'adv' (outputs: {', '.join(est.outputs)})")
    who = f"cac advantage estimator {est.name}"

    def fn(token_level_rewards, response_mask, index=None, config=None,
           values=None, **kwargs):
        given = dict(kwargs)
        kw = {"mask": response_mask}
        for name, domain in est.inputs.items():
            if name == "reward":
                kw[name] = (token_level_rewards if domain == "token"
                            else token_level_rewards.sum(dim=-1))
            elif name == "value":
                if values is None:
                    raise TypeError(f"{who}: missing input 'value' (verl's "
                                    "values [B, T]; verl passes values= only "
                                    "to its own GAE)")
                kw[name] = values
            elif name == "group":
                if index is None:
                    raise TypeError(f"{who}: missing input 'group' (verl's "
                                    "index: the uid of each sequence's prompt)")
                kw[name] = index
            else:
                kw[name] = _input(name, given, who)
        from_config = config_params(config, config_map, est)
        out = (est.with_params(from_config) if from_config else est)(**kw)
        adv = out["adv"]
        returns = out.get("ret", adv)
        if whiten:
            adv = masked_whiten(adv, response_mask) * (response_mask != 0)
        return adv, returns

    fn.estimator = est
    fn.__name__ = f"cac_{est.name}"
    return fn


def policy_loss(path, params=None, *, config_map=POLICY_LOSS_CONFIG,
                **load_args):
    """A function with verl's policy-loss signature
    fn(old_log_prob, log_prob, advantages, response_mask,
    loss_agg_mode="token-mean", config=None, rollout_is_weights=None,
    **kwargs) -> (loss, metrics) running the .cac objective `path`:
    logp_new = log_prob (the gradient flows to it), logp = old_log_prob,
    adv = advantages; other inputs (logp_ref, entropy, ...) from kwargs by
    name. loss_agg_mode is the objective's aggregation; for
    seq-mean-token-sum-norm the divisor is norm_len from params, else the
    mask's width T (verl's default loss_scale_factor). metrics holds
    actor/ppo_kl and, when the objective outputs `clipped`,
    actor/pg_clipfrac.

    rollout_is_weights (verl's rollout importance-sampling weights) go to
    the objective's `is_weight` input (stdlib/*_is.cac), which multiplies
    the per-token policy loss; without them such an objective gets weights
    1. Rows whose response_mask is all 0 (verl's rejection sampling or veto
    removed the sequence) are left out: they add nothing to verl's loss
    and do not count in its seq-mean modes.

    Parameters not given in `params` follow verl's actor `config` per call
    through `config_map` (POLICY_LOSS_CONFIG by default: clip_ratio_low /
    clip_ratio_high (else clip_ratio) -> eps_low / eps_high, clip_ratio_c ->
    dual_clip, loss_scale_factor -> norm_len); `{}` turns that off.
    Parameters given in `params` stay fixed."""
    obj = load(path, params, **load_args)
    if not hasattr(obj, "loss"):
        raise ValueError(f"{path}: a policy loss needs an objective (a file "
                         "with loss(...) = ...); this is an estimator")
    fixed_norm = "norm_len" in (params or {})
    who = f"cac policy loss {obj.name}"

    def fn(old_log_prob, log_prob, advantages, response_mask,
           loss_agg_mode="token-mean", config=None, rollout_is_weights=None,
           **kwargs):
        given = {"logp_new": log_prob, "logp": old_log_prob,
                 "adv": advantages, **kwargs}
        if "is_weight" in obj.inputs:
            given["is_weight"] = (torch.ones_like(log_prob) if rollout_is_weights
                                  is None else rollout_is_weights)
        elif rollout_is_weights is not None:
            raise ValueError(
                f"{who}: rollout_is_weights needs an objective with an input "
                "'is_weight' (stdlib/ppo_clip_is.cac, ppo_kl_is, gspo_token_is, "
                "ppo_dual_clip_is, ppo_dual_clip_kl_is; docs/stdlib.md)")
        kw = {"mask": response_mask}
        for name in obj.inputs:
            kw[name] = _input(name, given, who)
        m = (response_mask != 0).to(log_prob.dtype)
        n = m.sum().clamp(min=1)
        metrics = {"actor/ppo_kl": ((old_log_prob - log_prob.detach()) * m).sum() / n}
        rows = m.sum(dim=-1) > 0
        if not bool(rows.any()):
            return (log_prob * 0).sum(), metrics
        if not bool(rows.all()):
            kw = {k: _rows(v, rows) for k, v in kw.items()}
        from_config = config_params(config, config_map, obj)
        extra_args = {}
        if "aggregation" in obj.params:
            extra_args["aggregation"] = loss_agg_mode
            if not fixed_norm:
                extra_args["norm_len"] = from_config.pop("norm_len",
                                                         response_mask.shape[-1])
        run = obj.with_params(from_config) if from_config else obj
        loss, extra = run.loss(return_outputs=True, **kw, **extra_args)
        clipped = extra.get("clipped")
        if clipped is not None and clipped.shape == kw["mask"].shape:
            full = torch.zeros_like(m)
            full[rows] = clipped.to(m.dtype)
            metrics["actor/pg_clipfrac"] = (full * m).sum() / n
        return loss, metrics

    fn.objective = obj
    fn.__name__ = f"cac_{obj.name}"
    return fn


def _rows(x, rows):
    """The rows `rows` (a [B] bool tensor) of a per-sequence input: a tensor
    or array whose first dimension is B; anything else as it is."""
    if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == rows.shape[0]:
        return x[rows.to(x.device)]
    if hasattr(x, "shape") and len(x.shape) >= 1 and x.shape[0] == rows.shape[0]:
        return x[rows.cpu().numpy()]
    if isinstance(x, (list, tuple)) and len(x) == rows.shape[0]:
        return [v for v, keep in zip(x, rows.tolist()) if keep]
    return x


def _core_algos():
    try:
        from verl.trainer.ppo import core_algos
    except ImportError as e:
        raise ImportError("cac.verl.register needs verl (its module "
                          "verl.trainer.ppo.core_algos); use "
                          "advantage_estimator()/policy_loss() without it") from e
    return core_algos


def register(path, name, params=None, **kwargs):
    """Registers the .cac file under `name` in verl: an estimator with
    register_adv_est (algorithm.adv_estimator=NAME), an objective with
    register_policy_loss (actor_rollout_ref.actor.policy_loss.loss_mode=NAME).
    Returns the registered function."""
    core = _core_algos()
    probe = load(path, params, **{k: v for k, v in kwargs.items()
                                  if k not in ("whiten", "config_map")})
    if hasattr(probe, "loss"):
        fn = policy_loss(path, params, **kwargs)
        core.register_policy_loss(name)(fn)
    else:
        fn = advantage_estimator(path, params, **kwargs)
        core.register_adv_est(name)(fn)
    return fn
