#!/usr/bin/env python3
"""The Python package on a GPU (scripts/gpu/python/run.sh runs it): staged
stdlib bundles (f32, no compiler on that machine) on CUDA tensors against
the same bundles on CPU tensors, padded (also into the caller's tensors,
out=) and packed; an objective's loss and
gradient; a launch on a side stream; the packed path under torch's sync
debug mode (no host synchronisation). Prints one line per check; exit 0
only if all pass (2: no CUDA device)."""

import argparse
import sys

import torch

import cac

FAILED = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        FAILED.append(name)


def close(a, b, tol=1e-5):
    a, b = a.double().cpu(), b.double().cpu()
    err = float(((a - b).abs() / b.abs().clamp(min=1)).max()) if a.numel() else 0.0
    return a.shape == b.shape and err <= tol, f"(max rel err {err:.2e})"


def batch(B, T, seed):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None, :] < lengths[:, None]
    mask[:, 1] &= torch.rand(B, generator=g) > 0.3  # observation tokens
    mask[:, 0] = True
    data = {
        "value": torch.randn(B, T, generator=g),
        "logp": -torch.rand(B, T, generator=g) * 3,
        "reward": torch.randint(0, 2, (B,), generator=g).float(),
        "group": torch.arange(B) // 4,
    }
    return mask, data


def estimators(bundles):
    for name, params in [("gae", {}), ("sae", {"lambda": 0.95}), ("grpo", {}),
                         ("rloo", {}), ("gae_dense", {})]:
        est = cac.load(f"{bundles}/{name}", params=params)
        mask, data = batch(64, 300, 1)
        if name == "gae_dense":
            data["reward"] = torch.randn(64, 300)
        kw = {k: data[k] for k in est.inputs}
        cpu = est(mask=mask, **kw)
        gpu = est(mask=mask.cuda(), **{k: v.cuda() for k, v in kw.items()})
        for out in est.outputs:
            ok, d = close(gpu[out], cpu[out])
            check(f"{name}.{out} padded cuda == cpu", ok and gpu[out].is_cuda, d)
        # out=: the caller's CUDA tensors (filled with NaN first) hold the
        # same outputs, and the result is those tensors.
        mine = {k: torch.full_like(v, float("nan")) for k, v in gpu.items()}
        got = est(mask=mask.cuda(), out=mine, **{k: v.cuda() for k, v in kw.items()})
        for out in est.outputs:
            ok, d = close(got[out], gpu[out])
            same = got[out].data_ptr() == mine[out].data_ptr()
            check(f"{name}.{out} padded out= cuda", ok and same, d)
        packed = {k: (v[mask] if est.inputs[k] == "token" else v) for k, v in kw.items()}
        lengths = mask.sum(1)
        gpu = est(lengths=lengths, **{k: v.cuda() for k, v in packed.items()})
        for out in est.outputs:
            want = cpu[out][mask] if est.outputs[out] == "token" else cpu[out]
            ok, d = close(gpu[out], want)
            check(f"{name}.{out} packed cuda == cpu", ok, d)


def objective(bundles):
    obj = cac.load(f"{bundles}/ppo_clip", params={"dual_clip": 3})
    mask, data = batch(32, 200, 2)
    new = data["logp"] + 0.2 * torch.randn(32, 200)
    for device in ("cpu", "cuda"):
        x = new.to(device).detach().requires_grad_()
        loss = obj.loss(logp_new=x, logp=data["logp"].to(device),
                        adv=data["value"].to(device), mask=mask.to(device),
                        aggregation="seq-mean-token-mean")
        loss.backward()
        if device == "cpu":
            want_loss, want_grad = loss.detach(), x.grad
    ok1, d1 = close(loss.detach().reshape(1), want_loss.reshape(1))
    ok2, d2 = close(x.grad, want_grad)
    check("ppo_clip loss cuda == cpu", ok1, d1)
    check("ppo_clip gradient cuda == cpu", ok2, d2)


def streams_and_syncs(bundles):
    est = cac.load(f"{bundles}/gae")
    mask, data = batch(256, 4096, 3)
    lengths = mask.sum(1)
    value, reward = data["value"][mask].cuda(), data["reward"].cuda()
    want = est(value=value, reward=reward, lengths=lengths)["adv"]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        got = est(value=value, reward=reward, lengths=lengths)["adv"]
    torch.cuda.current_stream().wait_stream(side)
    check("gae on a side stream", torch.equal(got, want))
    torch.cuda.set_sync_debug_mode("error")
    try:
        est(value=value, reward=reward, lengths=lengths)
        check("packed path: no sync torch reports", True)
    except RuntimeError as e:
        check("packed path: no sync torch reports", False, str(e).splitlines()[0])
    finally:
        torch.cuda.set_sync_debug_mode("default")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bundles", required=True)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}, "
          f"runtime on LibTorch's streams: {cac._cac.built_with_torch_cuda()}")
    if not torch.cuda.is_available():
        print("no CUDA device: the CUDA checks did not run")
        return 2
    estimators(args.bundles)
    objective(args.bundles)
    streams_and_syncs(args.bundles)
    print(f"{len(FAILED)} failed" if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
