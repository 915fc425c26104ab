"""Objectives: a compiled loss whose backward is the compiled gradient."""

import torch

from .estimator import Estimator

#: The aggregation modes of token losses, in the order of their codes
#: (docs/language.md, Objectives).
AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                "seq-mean-token-sum-norm")


def aggregation_code(mode):
    """A mode name ("token-mean", ...) or its code 0-3 -> the code."""
    if isinstance(mode, str):
        if mode not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}"
                             f", got {mode!r}")
        return AGGREGATIONS.index(mode)
    code = int(mode)
    if code != mode or not 0 <= code < len(AGGREGATIONS):
        raise ValueError(f"aggregation must be a mode name or 0-3, got {mode!r}")
    return code


class _CompiledLoss(torch.autograd.Function):
    """loss = compute(); d loss / d wrt = the compiled gradient, scaled by
    the incoming gradient."""

    @staticmethod
    def forward(ctx, wrt, compute):
        loss, grad = compute()
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        return g * grad, None


class Objective(Estimator):
    """A .cac objective (`loss(X) = ...`): `loss()` returns the aggregated
    scalar; its backward() puts the compiled gradient on the input X."""

    def _param_value(self, name, value):
        if name == "aggregation":
            return float(aggregation_code(value))
        return super()._param_value(name, value)

    @property
    def wrt(self):
        """The input the loss is differentiated by."""
        return self._objective()["wrt"]

    def _objective(self):
        return self._interface().objective

    def loss(self, *, aggregation=None, norm_len=None, return_outputs=False,
             threads=None, **inputs):
        """The scalar loss (a tensor on the inputs' device, in their float
        dtype). Gradients flow to the input `wrt` only. With
        return_outputs, also the objective's other outputs by name (e.g.
        ppo_clip's `clipped`), in the inputs' layout."""
        spec = self._objective()
        wrt = spec["wrt"]
        if wrt not in inputs or inputs[wrt] is None:
            raise TypeError(f"{self.name}: missing input '{wrt}' (the loss is "
                            f"differentiated by it)")
        x = inputs[wrt]
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"input '{wrt}' must be a torch.Tensor, got "
                            f"{type(x).__name__}")
        params = self._call_params(aggregation, norm_len)
        detached = {k: (v.detach() if isinstance(v, torch.Tensor) else v)
                    for k, v in inputs.items()}
        extra = {}

        def longest(params, layout):
            # As cac eval: without norm_len, seq-mean-token-sum-norm divides
            # by the longest sequence (in action tokens).
            if int(params.get("aggregation", 0)) == 3 and norm_len is None \
                    and "norm_len" not in self._given:
                params["norm_len"] = float(layout.batch.max_length)
            return params

        def compute():
            out, layout = self._run(detached, params, threads, longest)
            n = self._normalizer(spec, params, out, layout)
            scale = torch.where(n > 0, 1.0 / n, torch.zeros_like(n))
            loss = (out["loss"].sum() * scale).to(x.dtype)
            grad = self._to_caller(spec["gradient"], out[spec["gradient"]] * scale, layout)
            for name in self.outputs:
                if name not in ("loss", "loss_count", spec["gradient"]):
                    extra[name] = self._to_caller(name, out[name], layout)
            return loss, grad.to(x.dtype)

        loss = _CompiledLoss.apply(x, compute)
        return (loss, extra) if return_outputs else loss

    def _call_params(self, aggregation, norm_len):
        params = dict(self._params)
        if aggregation is not None:
            if "aggregation" not in self._declared:
                raise ValueError(f"{self.name}: aggregation applies to token "
                                 "losses (a seq loss is averaged over the "
                                 "sequences)")
            params["aggregation"] = float(aggregation_code(aggregation))
        if norm_len is not None:
            params["norm_len"] = float(norm_len)
        return params

    @staticmethod
    def _normalizer(spec, params, out, layout):
        """Σ loss_count for token-mean and seq losses, else the number of
        sequences with loss_count > 0 (verl's seq_mask;
        cac::objectiveNormalizer)."""
        count = out["loss_count"]
        if spec["loss_domain"] == "seq" or int(params.get("aggregation", 0)) == 0:
            return count.sum()
        return (count > 0).sum().to(count.dtype)
