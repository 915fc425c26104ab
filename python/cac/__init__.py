"""cac estimators and objectives on torch tensors (docs/python.md).

    import cac
    gae = cac.load("stdlib/gae.cac", params={"gamma": 1.0, "lambda": 0.95})
    out = gae(value=V, reward=R, mask=M)      # out["adv"], out["ret"]: [B, T]

`cac.load` compiles the file with the `cac` tool (once; bundles are cached
by content) and runs its kernels through the cac runtime: CPU tensors on
the compiled host code with a thread pool.
"""

import os

import torch  # noqa: F401  (loads LibTorch before the extension)

from . import _cac
from ._compile import CompileError, compile_bundle, find_compiler
from .estimator import Estimator
from .objective import AGGREGATIONS, Objective

__all__ = ["load", "Estimator", "Objective", "CompileError", "compile_bundle",
           "find_compiler", "AGGREGATIONS"]


def load(path, params=None, *, threads=0, options=None, compiler=None,
         cache_dir=None):
    """Compiles (or takes from the cache) the .cac file `path` and returns
    an Estimator, or an Objective when the file declares a loss. `path` may
    also be a bundle folder (`cac compile --bundle DIR`), which then runs
    in its one precision without the compiler.

    params: {name: value} overriding the file's defaults (unknown names are
    an error). threads: CPU threads per call (0: by batch size). options:
    `cac compile` options as {"seq_block": 256, "fuse_groups": False}.
    compiler: the cac executable (else $CAC_COMPILER, the build's bin/cac,
    or PATH). cache_dir: where bundles are kept (else $CAC_CACHE_DIR or
    ~/.cache/cac)."""
    args = dict(threads=threads, options=options, compiler=compiler,
                cache_dir=cache_dir)
    if os.path.isdir(path):
        bundle = _cac.Bundle(str(path))
    else:
        bundle = _cac.Bundle(compile_bundle(path, "f32", options, compiler,
                                            cache_dir))
    cls = Objective if bundle.objective is not None else Estimator
    return cls(path, params, **args)
