"""Shared helpers of the Python package's tests: the repository, the cac
tool, `cac eval` on a JSON batch, and JSON batches as package calls.

ctest (test/python/CMakeLists.txt) sets PYTHONPATH to build/python,
CAC_COMPILER to build/bin/cac and CAC_CACHE_DIR to a folder of the build.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
STDLIB = REPO / "stdlib"
sys.path.insert(0, str(REPO / "test" / "reference"))


def compiler():
    path = os.environ.get("CAC_COMPILER")
    if not path:
        pytest.skip("CAC_COMPILER is not set (run through ctest)")
    return path


def cac_eval(path, batch, *extra):
    """`cac eval path --input batch.json` (f64) as parsed JSON."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(batch, f)
    try:
        r = subprocess.run([compiler(), "eval", str(path), "--input", f.name,
                            *extra], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _rows(batch):
    if batch.get("token"):
        return next(iter(batch["token"].values()))
    return batch["tree"]["node"]


PAD = 7.0  # what padding holds in the tests: never read


def padded_call(est, batch, dtype=torch.float64, extra_width=2):
    """The package call of a `cac eval` JSON batch in the padded layout:
    observation tokens ("obs") are 0 inside the mask's rows."""
    rows = _rows(batch)
    B = len(rows)
    T = max(len(r) for r in rows) + extra_width
    obs = batch.get("obs") or [[0] * len(r) for r in rows]
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, r in enumerate(rows):
        for t in range(len(r)):
            mask[b, t] = not obs[b][t]
    kw = {"mask": mask}
    for name, domain in est.inputs.items():
        if domain == "token" and name != "tree_node":
            x = torch.full((B, T), PAD, dtype=dtype)
            for b, r in enumerate(batch["token"][name]):
                x[b, :len(r)] = torch.tensor(r, dtype=dtype)
            kw[name] = x
        elif name == "group":
            # A batch without groups is one group, as cac eval reads it.
            kw[name] = torch.tensor(batch["seq"].get("group", [0] * B))
        elif name == "tree_parent":
            kw[name] = torch.tensor(batch["tree"]["parent"])
        elif name == "tree_node":
            node = torch.full((B, T), -5, dtype=torch.long)
            for b, r in enumerate(batch["tree"]["node"]):
                node[b, :len(r)] = torch.tensor(r)
            kw[name] = node
        elif domain == "seq":
            kw[name] = torch.tensor(batch["seq"][name], dtype=dtype)
        elif domain == "seg":
            segs = batch["seg"][name]
            S = max(len(s) for s in segs) + 1
            x = torch.full((B, S), PAD, dtype=dtype)
            for b, s in enumerate(segs):
                x[b, :len(s)] = torch.tensor(s, dtype=dtype)
            kw[name] = x
            kw["seg_count"] = torch.tensor([len(s) for s in segs])
    return kw


def packed_call(est, batch, dtype=torch.float64):
    """The same batch (without observations) in the packed layout."""
    assert not batch.get("obs")
    kw = padded_call(est, batch, dtype, extra_width=0)
    mask = kw.pop("mask")
    kw["lengths"] = mask.sum(dim=1)
    for name, domain in est.inputs.items():
        if domain == "token":
            kw[name] = kw[name][mask]
        elif domain == "seg":
            x, c = kw[name], kw["seg_count"]
            kw[name] = x[torch.arange(x.shape[1])[None, :] < c[:, None]]
    return kw


def assert_close(got, want, tol, what):
    want = torch.as_tensor(want, dtype=torch.float64)
    got = got.to(torch.float64)
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = (got - want).abs() / want.abs().clamp(min=1.0)
    assert torch.isfinite(got).all(), f"{what}: not finite: {got}"
    worst = float(err.max()) if err.numel() else 0.0
    assert worst <= tol, f"{what}: off by {worst:.3g} (tol {tol})\n got {got}\nwant {want}"
