#!/usr/bin/python3
# torch_llama.py - timing, not a test: the yardstick for `mlsys-lab train`. The same Llama
# architecture (RMSNorm, RoPE on interleaved pairs as llama2.c, grouped KV heads, SwiGLU,
# tied classifier), batch and AdamW + clipping step in PyTorch on one thread. Prints training
# tokens per second; prints one "skipped: ..." line and exits 0 when torch is not importable.
# Usage: /usr/bin/python3 tests/bench/torch_llama.py [--seconds S] [--dim N] [--layers N]
#        [--heads N] [--kv-heads N] [--hidden N] [--seq-len N] [--vocab N] [--batch N]
import argparse
import math
import os
import sys
import time

# both must be in the environment before torch (and the BLAS it loads) is imported
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch
    import torch.nn.functional as F
except Exception as exc:  # ImportError, or a broken install that fails while loading
    print(f"skipped: torch not importable ({exc.__class__.__name__}: {exc})")
    sys.exit(0)


class RMSNorm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.g = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.g


def rope(x, cos, sin):
    # x [B, T, H, HS]: pairs (2i, 2i+1) turned by t * theta_i
    xr, xi = x[..., 0::2], x[..., 1::2]
    out = torch.stack((xr * cos - xi * sin, xr * sin + xi * cos), dim=-1)
    return out.flatten(-2)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.nh, self.nkv, self.hs = a.heads, a.kv_heads, a.dim // a.heads
        self.wq = torch.nn.Linear(a.dim, a.dim, bias=False)
        self.wk = torch.nn.Linear(a.dim, self.nkv * self.hs, bias=False)
        self.wv = torch.nn.Linear(a.dim, self.nkv * self.hs, bias=False)
        self.wo = torch.nn.Linear(a.dim, a.dim, bias=False)
        self.w1 = torch.nn.Linear(a.dim, a.hidden, bias=False)
        self.w2 = torch.nn.Linear(a.hidden, a.dim, bias=False)
        self.w3 = torch.nn.Linear(a.dim, a.hidden, bias=False)
        self.n1, self.n2 = RMSNorm(a.dim), RMSNorm(a.dim)

    def forward(self, x, cos, sin, mask):
        B, T, C = x.shape
        h = self.n1(x)
        q = rope(self.wq(h).view(B, T, self.nh, self.hs), cos, sin)
        k = rope(self.wk(h).view(B, T, self.nkv, self.hs), cos, sin)
        v = self.wv(h).view(B, T, self.nkv, self.hs)
        g = self.nh // self.nkv
        k = k.repeat_interleave(g, dim=2)
        v = v.repeat_interleave(g, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(self.hs) + mask
        y = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + self.wo(y)
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.emb = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.dim)
        hs = a.dim // a.heads
        freq = 1.0 / (10000.0 ** (torch.arange(0, hs, 2).float() / hs))
        ang = torch.arange(a.seq_len).float()[:, None] * freq[None, :]
        self.cos = ang.cos()[None, :, None, :]
        self.sin = ang.sin()[None, :, None, :]
        self.mask = torch.full((a.seq_len, a.seq_len), float("-inf")).triu(1)

    def forward(self, idx, tgt):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin, self.mask)
        logits = self.norm(x) @ self.emb.weight.t()        # tied classifier
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=5)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=352)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--batch", type=int, default=16)
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    model = Llama(a)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq_len))
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq_len))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    step()                                        # warm-up: allocations, first-touch
    n, t0 = 0, time.perf_counter()
    while True:
        step()
        n += 1
        el = time.perf_counter() - t0
        if el >= a.seconds and n >= 3:
            break
    params = sum(x.numel() for x in model.parameters())
    tps = n * a.batch * a.seq_len / el
    print(f"torch {torch.__version__} (1 thread): {params} parameters, batch {a.batch} x "
          f"{a.seq_len}: {n} steps in {el:.2f} s, {tps:.0f} tok/s")


if __name__ == "__main__":
    main()
