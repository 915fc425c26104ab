#!/usr/bin/env python3
"""Runs cac PTX bundles on an NVIDIA GPU and checks them against PyTorch.

For use on a GPU machine that has PyTorch with CUDA but no cac build: the PTX
and manifest come from `cac compile --bundle` on the build machine. The kernels
are loaded with the CUDA driver API (ctypes on libcuda.so.1, cuModuleLoadData)
and launched exactly as docs/bundle.md says the runtime launches them. Prints,
per estimator and batch shape, the largest error against a float64 PyTorch
reference and the kernel time with the bandwidth it reaches.

usage: check_ptx.py BUNDLE_DIR... [--seqs B] [--len T]
"""
import argparse
import ctypes
import json
import math
import os
import sys

import torch

cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        s = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(s))
        raise RuntimeError(f"{what}: {s.value.decode() if s.value else rc}")


class Bundle:
    def __init__(self, path):
        self.manifest = json.load(open(os.path.join(path, "manifest.json")))
        ptx = open(os.path.join(path, "kernels.ptx"), "rb").read() + b"\0"
        torch.zeros(1, device="cuda")  # creates the primary context
        self.module = ctypes.c_void_p()
        check(cuda.cuModuleLoadData(ctypes.byref(self.module), ptx), "cuModuleLoadData")
        self.funcs = {}
        for k in self.manifest["kernels"]:
            f = ctypes.c_void_p()
            check(cuda.cuModuleGetFunction(ctypes.byref(f), self.module, k["name"].encode()),
                  "cuModuleGetFunction " + k["name"])
            self.funcs[k["name"]] = f

    def run(self, lengths, group, inputs, params, stream=None):
        m = self.manifest
        dev = "cuda"
        dt = torch.float32 if m["dtype"] == "f32" else torch.float64
        B = len(lengths)
        offsets = torch.zeros(B + 1, dtype=torch.int32)
        offsets[1:] = torch.cumsum(torch.tensor(lengths), 0)
        N = int(offsets[-1])
        gid = torch.tensor(group)
        uniq, dense = torch.unique(gid, return_inverse=True)
        G = len(uniq)
        order = torch.argsort(dense, stable=True)
        counts = torch.bincount(dense, minlength=G)
        goff = torch.zeros(G + 1, dtype=torch.int32)
        goff[1:] = torch.cumsum(counts, 0)
        structs = {
            "seq_offsets": offsets.to(dev),
            "seq_group": dense.to(torch.int32).to(dev),
            "group_offsets": goff.to(dev),
            "group_members": order.to(torch.int32).to(dev),
        }
        size = {"token": N, "seg": N, "seq": B, "group": G}
        bufs = {}
        for b in m["buffers"]:
            if b["role"] == "input":
                bufs[b["name"]] = inputs[b["name"]].to(dev, dt).contiguous()
            else:
                bufs[b["name"]] = torch.zeros(max(size[b["domain"]], 1), dtype=dt, device=dev)
        scalars = {"unit_begin": 0, "unit_end": 0, "num_seqs": B, "num_groups": G,
                   "num_tokens": N, "num_nodes": 0}
        holders = []
        unit_end = None
        for a in m["args"]:
            n, kind = a["name"], a["kind"]
            if kind == "i64":
                h = ctypes.c_int64(scalars[n])
                if n == "unit_end":
                    unit_end = h
            elif kind == "ptr":
                t = structs.get(n, bufs.get(n))
                h = ctypes.c_void_p(t.data_ptr() if t is not None else 0)
            else:
                p = next(p for p in m["params"] if p["name"] == n)
                v = params.get(n, p["default"])
                h = ctypes.c_float(v) if m["dtype"] == "f32" else ctypes.c_double(v)
            holders.append(h)
        argv = (ctypes.c_void_p * len(holders))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

        def launch():
            for k in m["kernels"]:
                units = G if k["grid"] == "group" else B
                unit_end.value = units
                block = k["block"]
                # docs/bundle.md: one block per unit ("unit": "block", the
                # block-per-sequence kernels) or one thread per unit.
                if k.get("unit") == "block":
                    if "split" in k:  # docs/bundle.md: min(ceil(split / B), 64) per sequence
                        units *= min(-(-k["split"] // max(B, 1)), 64)
                        unit_end.value = units
                    grid = max(1, units)
                else:
                    grid = max(1, math.ceil(units / block))
                check(cuda.cuLaunchKernel(self.funcs[k["name"]], grid, 1, 1, block, 1, 1, 0,
                                          stream, argv, None), "cuLaunchKernel")
        launch()
        torch.cuda.synchronize()
        return bufs, launch, N


def reference(name, lengths, group, inputs, params):
    """float64 PyTorch reference, written independently of the compiler."""
    out = {}
    if name == "gae":
        gamma, lam = params.get("gamma", 1.0), params.get("lambda", 0.95)
        adv, ret = [], []
        start = 0
        for b, T in enumerate(lengths):
            v = inputs["value"][start:start + T].double()
            r = torch.zeros(T, dtype=torch.float64)
            r[-1] = inputs["reward"][b]
            vn = torch.cat([v[1:], torch.zeros(1, dtype=torch.float64)])
            delta = r + gamma * vn - v
            a = torch.zeros(T, dtype=torch.float64)
            acc = 0.0
            for t in range(T - 1, -1, -1):
                acc = float(delta[t]) + gamma * lam * acc
                a[t] = acc
            adv.append(a)
            ret.append(a + v)
            start += T
        out["adv"], out["ret"] = torch.cat(adv), torch.cat(ret)
    elif name == "grpo":
        eps = params.get("eps", 1e-6)
        r = inputs["reward"].double()
        g = torch.tensor(group)
        adv_seq = torch.zeros_like(r)
        for gv in torch.unique(g):
            idx = (g == gv).nonzero().flatten()
            rr = r[idx]
            adv_seq[idx] = (rr - rr.mean()) / (rr.std(unbiased=False) + eps)
        out["adv"] = torch.repeat_interleave(adv_seq, torch.tensor(lengths))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundles", nargs="+")
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--len", type=int, default=512)
    ap.add_argument("--bench", action="append", default=[],
                    help="BxT shapes to time, e.g. 4096x4096")
    args = ap.parse_args()
    torch.manual_seed(0)
    ok = True
    for path in args.bundles:
        bundle = Bundle(path)
        name = bundle.manifest["estimator"]
        lengths = torch.randint(1, args.len + 1, (args.seqs,)).tolist()
        N = sum(lengths)
        group = [i // 8 for i in range(args.seqs)]
        inputs = {"value": torch.rand(N), "reward": (torch.rand(args.seqs) < 0.4).float()}
        params = {}
        bufs, _, _ = bundle.run(lengths, group, inputs, params)
        ref = reference(name, lengths, group, inputs, params)
        for k, v in ref.items():
            got = bufs[k][:v.numel()].double().cpu()
            err = ((got - v).abs() / v.abs().clamp(min=1.0)).max().item()
            good = err < 1e-4
            ok &= good
            print(f"{name}.{k}: B={args.seqs} max len {args.len} N={N}: max rel err {err:.2e} "
                  f"{'OK' if good else 'FAILED'}")
        for shape in args.bench:
            B, T = map(int, shape.split("x"))
            lengths = [T] * B
            N = B * T
            group = [i // 8 for i in range(B)]
            inputs = {"value": torch.rand(N), "reward": (torch.rand(B) < 0.4).float()}
            bufs, launch, _ = bundle.run(lengths, group, inputs, {})
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            for _ in range(3):
                launch()
            torch.cuda.synchronize()
            reps = 20
            start.record()
            for _ in range(reps):
                launch()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end) / reps
            tok_bytes = sum(4 for b in bundle.manifest["buffers"]
                            if b["domain"] == "token" and b["role"] != "scratch")
            gbs = tok_bytes * N / (ms * 1e-3) / 1e9
            x = torch.empty(N * 4, dtype=torch.float32, device="cuda")
            y = torch.empty_like(x)
            y.copy_(x)
            torch.cuda.synchronize()
            start.record()
            for _ in range(reps):
                y.copy_(x)
            end.record()
            torch.cuda.synchronize()
            copy_ms = start.elapsed_time(end) / reps
            copy_gbs = 2 * x.numel() * 4 / (copy_ms * 1e-3) / 1e9
            print(f"{name} B={B} T={T} ({N/1e6:.1f}M tokens): {ms:.3f} ms, "
                  f"{gbs:.0f} GB/s of token traffic ({tok_bytes} B/token); "
                  f"device copy {copy_gbs:.0f} GB/s -> {100*gbs/copy_gbs:.1f}%")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
