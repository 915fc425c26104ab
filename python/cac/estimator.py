"""Estimators: a compiled .cac file run on torch tensors."""

import copy
import os

import torch

from . import _batch, _cac, _out
from ._compile import compile_bundle

_DOMAIN_SHAPE = {"token": "[B, T] padded or [N] packed", "seq": "[B]",
                 "group": "[G]", "node": "[K]",
                 "seg": "[B, S] padded or [sum(seg_count)] packed"}


class Estimator:
    """A .cac estimator loaded for Python (cac.load). Call it with its
    inputs by name plus the batch structure (docs/python.md)."""

    def __init__(self, path, params=None, *, threads=0, options=None,
                 compiler=None, cache_dir=None):
        self.path = str(path)
        self.threads = int(threads)
        self._compile_args = dict(options=options, compiler=compiler,
                                  cache_dir=cache_dir)
        self._bundles = {}
        b = self._interface()
        self.name = b.name
        self._buffers = b.buffers
        # Read once: a call looks them up per input and output.
        self._input_specs = [x for x in self._buffers if x["role"] == "input"]
        self._input_names = frozenset(x["name"] for x in self._input_specs)
        self._domains = {x["name"]: x["domain"] for x in self._buffers}
        self._output_names = tuple(
            x["name"] for x in self._buffers
            if x["role"] == "output" and not x["name"].startswith("_"))
        self._needs_groups = b.needs_groups
        self._needs_tree = b.needs_tree
        self._declared = dict(b.params)
        self._given = set()
        self._params = {}
        self.set_params(params or {})

    # The interface.

    @property
    def inputs(self):
        """{name: domain} of what a call takes (structure inputs included:
        `group` for group estimators, `tree_parent`/`tree_node` for trees)."""
        out = {b["name"]: b["domain"] for b in self._buffers if b["role"] == "input"}
        if self._needs_groups:
            out["group"] = "seq"
        if self._needs_tree:
            out["tree_parent"] = "node"
            out["tree_node"] = "token"
        return out

    @property
    def outputs(self):
        """{name: domain} of what a call returns."""
        return {name: self._domains[name] for name in self._output_names}

    @property
    def params(self):
        """{name: value} of every parameter (defaults filled in)."""
        return dict(self._params)

    @property
    def given_params(self):
        """The parameters set at load or by set_params (the others hold
        their defaults)."""
        return frozenset(self._given)

    def set_params(self, params):
        """Changes parameters (no recompile: they are kernel arguments)."""
        for name, value in params.items():
            if name not in self._declared:
                known = ", ".join(self._declared) or "none"
                raise ValueError(f"{self.path}: unknown parameter '{name}' "
                                 f"(parameters: {known})")
            self._params[name] = self._param_value(name, value)
            self._given.add(name)
        for name, default in self._declared.items():
            if name not in self._params:
                if default is None:
                    raise ValueError(f"{self.path}: missing required parameter"
                                     f" '{name}' (it has no default)")
                self._params[name] = float(default)

    def with_params(self, params):
        """A copy with `params` changed, sharing the compiled bundles (no
        compile, no copy of the kernels): for parameters that change per
        call, as verl's config does."""
        twin = copy.copy(self)
        twin._params = dict(self._params)
        twin._given = set(self._given)
        twin.set_params(params)
        return twin

    def _param_value(self, name, value):
        if isinstance(value, bool):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise TypeError(f"parameter '{name}' must be a number, got "
                            f"{value!r}") from None

    def _interface(self):
        """A bundle to read the interface from (both precisions share it)."""
        if not self._bundles and os.path.isdir(self.path):
            b = _cac.Bundle(self.path)
            self._bundles[b.dtype] = b
        if self._bundles:
            return next(iter(self._bundles.values()))
        return self._bundle(torch.float32)

    def _bundle(self, dtype):
        key = "f64" if dtype == torch.float64 else "f32"
        if key not in self._bundles:
            if os.path.isdir(self.path):
                # A bundle folder made elsewhere (a machine without the
                # compiler): one precision only.
                b = _cac.Bundle(self.path)
                if b.dtype != key:
                    raise TypeError(f"the bundle {self.path} is {b.dtype}; "
                                    f"{dtype} inputs need a bundle compiled "
                                    "for it (or load the .cac file)")
                self._bundles[key] = b
            else:
                d = compile_bundle(self.path, key, **self._compile_args)
                self._bundles[key] = _cac.Bundle(d)
        return self._bundles[key]

    def __repr__(self):
        return (f"cac.{type(self).__name__}({self.name!r}, inputs="
                f"{self.inputs}, outputs={self.outputs}, params={self.params})")

    # Running.

    def __call__(self, threads=None, out=None, **inputs):
        """Runs the estimator; returns {output: tensor} in the inputs'
        layout (token outputs [B, T] with 0 where the mask is 0, or [N]).
        out: {output: tensor} to write outputs into (tensors the caller
        reuses across calls), each of the shape, dtype and device the call
        would return; the result holds those tensors."""
        if out is None and (threads is None or type(threads) is int):
            # A packed call on CPU tensors in one step (python/src/
            # PackedCall.cpp): None unless the checks below would pass it
            # unchanged, so they stay the one home of the rules and errors.
            f32 = self._bundles.get("f32")
            if f32 is not None:
                res = _cac.run_packed(f32, inputs, self._params,
                                      self.threads if threads is None else threads)
                if res is not None:
                    return res
        out = _out.check_names(self, out)
        res, layout = self._run(inputs, self._params, threads, out=out)
        return {name: self._to_caller(name, res[name], layout, out.get(name))
                for name in self._output_names}

    def _to_caller(self, name, t, layout, into=None):
        if self._domains[name] in ("token", "seg"):
            return layout.to_caller(t, into)
        if into is None:
            return t
        return into.copy_(t)

    def _run(self, kw, params, threads, finish_params=None, out=None):
        """Checks the call, runs the kernels; packed outputs and the
        Layout. `finish_params(params, layout)` may set parameters that
        depend on the batch; `out` (checked here, before the run) are the
        caller's output tensors."""
        kw = dict(kw)
        layout = _batch.make_layout(kw)
        self._structure(kw, layout)
        seg_count = kw.pop("seg_count", None)
        tensors, seg_inputs, dtype = self._tensors(kw, layout)
        buffers = {}
        counts = None
        for spec in self._inputs():
            name, x = spec["name"], tensors[spec["name"]]
            if spec["domain"] == "seg":
                if counts is None:
                    counts = _batch.seg_counts(layout, seg_count,
                                               x.shape[1] if x.dim() == 2 else 0)
                x = _batch.seg_buffer(name, x, layout, counts)
            else:
                self._check_shape(name, spec["domain"], x, layout)
                if spec["domain"] == "token" and layout.padded:
                    x = layout.pack(x)
            buffers[name] = x if x.dtype == dtype else x.to(dtype)
        if seg_count is not None and not seg_inputs:
            raise TypeError(f"seg_count given but {self.name} has no seg input")
        if out:
            _out.check_tensors(self, out, layout, self._bundle(dtype).buffers)
        n = self.threads if threads is None else int(threads)
        if finish_params is not None:
            params = finish_params(dict(params), layout)
        if not layout.on_cpu:
            # The structure is built on the host and moves to the inputs'
            # device once, rather than inside the runtime's run.
            layout.batch = layout.batch.to(str(layout.device), True)
        out = self._bundle(dtype).run(buffers, layout.batch, params, n)
        if seg_inputs and "_seg_start" in out:
            _batch.check_segments(layout, counts, out["_seg_start"], seg_inputs[0])
        return out, layout

    def _inputs(self):
        return self._input_specs

    def _structure(self, kw, layout):
        """Groups and the rollout tree, when the bundle needs them."""
        group = kw.pop("group", None)
        parent, node = kw.pop("tree_parent", None), kw.pop("tree_node", None)
        if self._needs_groups:
            if group is None:
                raise TypeError(f"{self.name}: missing input 'group' ([B] = "
                                f"[{layout.B}] group ids: integers or "
                                "hashable ids such as uid strings)")
            layout.batch.set_groups(_batch.group_ids(group, layout.B))
        # Groups and trees describe the batch: an estimator that reads
        # neither ignores them, so a trainer may pass them to any method.
        if self._needs_tree:
            if parent is None or node is None:
                missing = "tree_parent" if parent is None else "tree_node"
                raise TypeError(f"{self.name}: missing input '{missing}' (a "
                                "rollout tree: tree_parent [K] and tree_node "
                                "like a token input)")
            _batch.set_tree(layout, parent, node)

    def _tensors(self, kw, layout):
        """The declared inputs as tensors, checked for presence, dtype and
        device; the names of seg inputs; the dtype to compute in."""
        specs = self._inputs()
        for name in kw:
            if name not in self._input_names:
                raise TypeError(f"{self.name}: unknown input '{name}' "
                                "(inputs: " + ", ".join(self.inputs) + ")")
        tensors, seg_inputs, floats = {}, [], {}
        for s in specs:
            name = s["name"]
            if name not in kw or kw[name] is None:
                raise TypeError(f"{self.name}: missing input '{name}' "
                                f"({s['domain']}: {self._expected(s['domain'], layout)})")
            x = _batch.as_tensor(name, kw[name])
            _batch.check_real(name, x)
            if not _batch.is_integer(x):
                floats[name] = x.dtype
            if s["domain"] == "seg":
                seg_inputs.append(name)
            tensors[name] = x
        _batch.settle_device(layout, tensors)
        dtypes = set(floats.values())
        if len(dtypes) > 1:
            a = next(n for n, d in floats.items() if d == torch.float32)
            b = next(n for n, d in floats.items() if d == torch.float64)
            raise TypeError(f"inputs '{a}' (float32) and '{b}' (float64) "
                            "differ in precision; give all float inputs one "
                            "dtype")
        dtype = dtypes.pop() if dtypes else torch.float32
        return tensors, seg_inputs, dtype

    def _expected(self, domain, layout):
        if domain == "token":
            return layout.token_expected()
        if domain == "seq":
            return f"[B] = [{layout.B}]"
        if domain == "group":
            return f"[G] = [{layout.batch.num_groups}]"
        if domain == "node":
            return f"[K] = [{layout.batch.num_nodes}]"
        return _DOMAIN_SHAPE.get(domain, domain)

    def _check_shape(self, name, domain, x, layout):
        if domain == "seq":
            want = (layout.B,)
        elif domain == "token":
            want = layout.token_shape()
        else:
            want = ((layout.batch.num_groups,) if domain == "group"
                    else (layout.batch.num_nodes,))
        if tuple(x.shape) != want:
            raise ValueError(f"{self.name}: input '{name}' ({domain}): "
                             f"expected {self._expected(domain, layout)}, got "
                             f"shape {_batch.shape_of(x)}")
