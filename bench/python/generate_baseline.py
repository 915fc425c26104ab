#!/usr/bin/env python3
"""The baseline of cac's generation benchmark: a plain PyTorch generate loop
(docs/benchmarks.md, "Generation at real shapes").

    python3 bench/python/generate_baseline.py --model qwen2.5-0.5b \\
        --dtype bf16 --device cuda --prompts 64 --samples 8 --prompt-len 64 \\
        --new 512 --iters 1 [--layers N] [--json FILE]

The same architecture as cac's TransformerLM (runtime/lib/Model), written in
plain torch, random weights (std 0.02; no download): token embedding, pre-norm
blocks of RMSNorm (statistics in float32) -> grouped-query attention with
rotary embeddings (angles in float32, HF's rotate_half) -> RMSNorm -> SwiGLU,
a final RMSNorm and the LM head tied to the embedding. Attention is
torch.nn.functional.scaled_dot_product_attention (enable_gqa where torch has
it, else the KV heads repeated), over a static KV cache preallocated for
prompt + new tokens; where torch has no SDPA (1.13, for a dry run on the CPU)
it is matmul and softmax.

The work is the cac benchmark's: random prompts of --prompt-len tokens, each
prefilled once and forked into --samples rows (its cache rows copied), then
exactly --new tokens per row sampled at temperature 1 from the float32
softmax of the logits (torch.multinomial), each chosen token's log-probability
recorded, and the sampled tokens copied to the host every step (a generate
loop's stop check; cac-run does the same). Tokens per second are generated
tokens over the wall time of the whole generation (prefill included, the
device synchronized), median of --iters after a warm-up run.
"""

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

# The config.json values of the public checkpoints (the same numbers as
# runtime/lib/Model/Architectures.cpp and cac-bench-generation's tiny):
# hidden, layers, heads, KV heads, SwiGLU, vocabulary, RoPE theta, RMSNorm
# eps, q/k/v biases.
ARCHITECTURES = {
    "qwen2.5-0.5b": dict(hidden=896, layers=24, heads=14, kv_heads=2,
                         ffn=4864, vocab=151936, theta=1e6, eps=1e-6,
                         qkv_bias=True),
    "qwen2.5-1.5b": dict(hidden=1536, layers=28, heads=12, kv_heads=2,
                         ffn=8960, vocab=151936, theta=1e6, eps=1e-6,
                         qkv_bias=True),
    "tiny": dict(hidden=64, layers=2, heads=4, kv_heads=2, ffn=192, vocab=99,
                 theta=1e4, eps=1e-5, qkv_bias=False),
}

DTYPES = {"float32": torch.float32, "f32": torch.float32,
          "fp32": torch.float32, "bfloat16": torch.bfloat16,
          "bf16": torch.bfloat16}

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


def sdpa_has_gqa():
    if not HAVE_SDPA:
        return False
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 5)


HAVE_GQA = sdpa_has_gqa()


class Model:
    """Weights and the forward pass of one decoder; no nn.Module needed."""

    def __init__(self, a, dtype, device, seed=1):
        g = torch.Generator(device="cpu").manual_seed(seed)
        self.a = a
        self.head_dim = a["hidden"] // a["heads"]
        H, D, KV = a["hidden"], self.head_dim, a["kv_heads"]

        def w(*shape):
            # Drawn on the CPU in float32 (reproducible on any device), then
            # moved and cast.
            return (torch.randn(*shape, generator=g) * 0.02).to(device, dtype)

        def zeros(n):
            return torch.zeros(n, device=device, dtype=dtype)

        self.embed = w(a["vocab"], H)
        self.layers = []
        for _ in range(a["layers"]):
            L = dict(q=w(a["heads"] * D, H), k=w(KV * D, H), v=w(KV * D, H),
                     o=w(H, a["heads"] * D), gate=w(a["ffn"], H),
                     up=w(a["ffn"], H), down=w(H, a["ffn"]),
                     ln1=torch.ones(H, device=device, dtype=dtype),
                     ln2=torch.ones(H, device=device, dtype=dtype))
            if a["qkv_bias"]:
                L.update(qb=zeros(a["heads"] * D), kb=zeros(KV * D),
                         vb=zeros(KV * D))
            self.layers.append(L)
        self.norm = torch.ones(H, device=device, dtype=dtype)
        idx = torch.arange(0, D, 2, dtype=torch.float32, device=device) / D
        self.inv_freq = 1.0 / (a["theta"] ** idx)

    def rms(self, x, weight):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.a["eps"])
        return weight * h.to(x.dtype)

    def rope(self, positions, dtype):
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # [T, D/2]
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos().to(dtype), emb.sin().to(dtype)  # [T, D]

    @staticmethod
    def rotate(x, cos, sin):
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def attend(self, q, k, v, causal):
        group = q.shape[1] // k.shape[1]
        if HAVE_GQA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=group > 1)
        k = k.repeat_interleave(group, 1)
        v = v.repeat_interleave(group, 1)
        if HAVE_SDPA:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            T, S = s.shape[-2:]
            keep = torch.ones(T, S, dtype=torch.bool, device=s.device)
            s = s.masked_fill(~keep.tril(S - T), float("-inf"))
        return torch.softmax(s.float(), -1).to(q.dtype) @ v

    def forward(self, ids, start, kcache, vcache):
        """Logits [B, V] of the last position of ids [B, T], whose tokens sit
        at positions start..start+T-1; their keys and values are written to
        the static caches (lists of [B, KV, S, D]) and attend to slots
        0..start+T-1."""
        a, D = self.a, self.head_dim
        B, T = ids.shape
        x = F.embedding(ids, self.embed)
        cos, sin = self.rope(
            torch.arange(start, start + T, device=ids.device), x.dtype)
        for i, L in enumerate(self.layers):
            h = self.rms(x, L["ln1"])
            q = F.linear(h, L["q"], L.get("qb"))
            k = F.linear(h, L["k"], L.get("kb"))
            v = F.linear(h, L["v"], L.get("vb"))
            q = self.rotate(q.view(B, T, a["heads"], D).transpose(1, 2), cos,
                            sin)
            k = self.rotate(k.view(B, T, a["kv_heads"], D).transpose(1, 2),
                            cos, sin)
            v = v.view(B, T, a["kv_heads"], D).transpose(1, 2)
            kcache[i][:, :, start:start + T] = k
            vcache[i][:, :, start:start + T] = v
            o = self.attend(q, kcache[i][:, :, :start + T],
                            vcache[i][:, :, :start + T], causal=T > 1)
            x = x + F.linear(o.transpose(1, 2).reshape(B, T, -1), L["o"])
            h = self.rms(x, L["ln2"])
            x = x + F.linear(F.silu(F.linear(h, L["gate"])) *
                             F.linear(h, L["up"]), L["down"])
        return F.linear(self.rms(x[:, -1], self.norm), self.embed)

    def caches(self, rows, slots, dtype, device):
        shape = (rows, self.a["kv_heads"], slots, self.head_dim)
        return ([torch.zeros(shape, dtype=dtype, device=device)
                 for _ in self.layers],
                [torch.zeros(shape, dtype=dtype, device=device)
                 for _ in self.layers])


def sample(logits, temperature, gen):
    logp = torch.log_softmax(logits.float() / temperature, -1)
    tok = torch.multinomial(logp.exp(), 1, generator=gen)
    return tok, logp.gather(-1, tok)


@torch.no_grad()
def generate(model, prompts, samples, new, temperature, dtype, gen):
    """Every row's tokens [rows, new] (on the host) and log-probabilities."""
    P, L = prompts.shape
    device = prompts.device
    # Prefill each prompt once, then fork its cache rows into `samples` rows
    # of the static cache of prompt + new slots.
    pk, pv = model.caches(P, L, dtype, device)
    first = model.forward(prompts, 0, pk, pv)
    kc, vc = model.caches(P * samples, L + new, dtype, device)
    for i in range(len(kc)):
        kc[i][:, :, :L] = pk[i].repeat_interleave(samples, 0)
        vc[i][:, :, :L] = pv[i].repeat_interleave(samples, 0)
    del pk, pv
    logits = first.repeat_interleave(samples, 0)
    tokens, logps = [], []
    for t in range(new):
        tok, lp = sample(logits, temperature, gen)
        tokens.append(tok.cpu())  # the host's per-step copy (stop checks)
        logps.append(lp)
        if t + 1 < new:
            logits = model.forward(tok, L + t, kc, vc)
    return torch.cat(tokens, 1), torch.cat(logps, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-0.5b",
                    choices=sorted(ARCHITECTURES))
    ap.add_argument("--layers", type=int, default=0,
                    help="keep the first N layers (0: all)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0,
                    help="CPU threads (0: torch's default)")
    ap.add_argument("--json", help="append one JSON object to this file")
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    a = dict(ARCHITECTURES[args.model])
    if args.layers > 0:
        a["layers"] = min(args.layers, a["layers"])
    model = Model(a, dtype, device)
    g = torch.Generator(device="cpu").manual_seed(7)
    prompts = torch.randint(3, a["vocab"], (args.prompts, args.prompt_len),
                            generator=g).to(device)
    gen = torch.Generator(device=device).manual_seed(11)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def run():
        sync()
        t0 = time.perf_counter()
        out = generate(model, prompts, args.samples, args.new,
                       args.temperature, dtype, gen)
        sync()
        return time.perf_counter() - t0, out

    run()  # warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(args.iters):
        dt, (tokens, logps) = run()
        times.append(dt)
    assert bool(torch.isfinite(logps).all()), "non-finite log-probabilities"
    seconds = statistics.median(times)
    rows = args.prompts * args.samples
    n_tokens = tokens.numel()
    params = sum(t.numel() for L in model.layers for t in L.values())
    params += model.embed.numel() + model.norm.numel()
    peak = (torch.cuda.max_memory_allocated(device) / 2**30
            if device.type == "cuda" else None)
    attention = ("sdpa, enable_gqa" if HAVE_GQA else
                 "sdpa, repeated KV heads" if HAVE_SDPA else "matmul/softmax")
    print(f"| {args.model} | {params / 1e6:.2f} M | {args.dtype} | {rows} | "
          f"{args.new} | {seconds:.3f} | {n_tokens / seconds:.0f} | "
          f"{'-' if peak is None else f'{peak:.2f}'} | torch {torch.__version__}, {attention} |")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(dict(
                impl="python", model=args.model,
                dtype=str(dtype).replace("torch.", ""),
                device=str(device), rows=rows, prompt_tokens=args.prompt_len,
                new_tokens=args.new, seconds=seconds,
                tokens_per_s=n_tokens / seconds, iters=args.iters,
                allocator_peak_gib=peak, torch=torch.__version__,
                attention=attention)) + "\n")


if __name__ == "__main__":
    main()
