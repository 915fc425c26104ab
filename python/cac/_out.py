"""Caller-provided output tensors: `est(..., out={name: tensor})` writes
an output into a tensor the caller owns (a field of its own batch, or one
reused across calls) instead of a new one, checked before the run.
"""

import torch

from ._batch import shape_of

_DTYPES = {"f32": torch.float32, "f64": torch.float64, "i32": torch.int32,
           "i64": torch.int64}


def check_names(est, out):
    """`out` as a dict {output name: tensor}; names and types checked."""
    if out is None:
        return {}
    if not isinstance(out, dict):
        raise TypeError(f"out must be a dict {{output name: tensor}}, got "
                        f"{type(out).__name__}")
    outputs = est.outputs
    for name, t in out.items():
        if name not in outputs:
            raise TypeError(f"{est.name}: out has unknown output '{name}' "
                            "(outputs: " + ", ".join(outputs) + ")")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"out['{name}'] must be a torch.Tensor, got "
                            f"{type(t).__name__}")
    return out


def check_tensors(est, out, layout, buffers):
    """Each out tensor has the shape the call returns for its output, the
    precision of the run's bundle (`buffers`: its manifest) and the inputs'
    device, is contiguous and needs no gradient: checked before the run."""
    specs = {b["name"]: b for b in buffers}
    for name, t in out.items():
        spec = specs[name]
        domain = spec["domain"]
        want = {"token": layout.token_shape(), "seg": layout.token_shape(),
                "seq": (layout.B,), "group": (layout.batch.num_groups,),
                "node": (layout.batch.num_nodes,)}[domain]
        dtype = _DTYPES[spec["dtype"]]
        problem = None
        if tuple(t.shape) != tuple(want):
            problem = f"shape {shape_of(t)}"
        elif t.dtype != dtype:
            problem = f"dtype {t.dtype}"
        elif t.device != layout.device:
            problem = f"device {t.device}"
        elif not t.is_contiguous():
            problem = "a non-contiguous tensor"
        elif t.requires_grad:
            problem = "a tensor that requires grad"
        if problem:
            shape = "[" + ", ".join(str(s) for s in want) + "]"
            raise ValueError(f"{est.name}: out['{name}'] ({domain}): expected a "
                             f"contiguous {dtype} tensor of shape {shape} on "
                             f"{layout.device}, got {problem}")

