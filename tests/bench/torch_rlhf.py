#!/usr/bin/python3
# torch_rlhf.py - timing, not a test: the PyTorch peer of `mlsys-lab run ch13/rlhf-loop -w 1`
# (PPO, one process, one thread), written the way one writes it with PyTorch (as TRL and
# OpenRLHF do, minimally): the same four roles at the same sizes on the shipped model, the
# reward model from `mlsys-lab train --reward-model`, the same batch and updates. It prints one
# line per iteration (seconds, CPU seconds, the phases) and the medians after the first.
# --row-len 0 pads the scoring and training rows only to the batch's longest (TRL's way; the
# reward model's lines too), N pads them to N tokens. --verify prints the greedy continuation
# of a prompt through its KV cache, to compare with `mlsys-lab generate --temperature 0`.
# Prints one "skipped: ..." line and exits 0 when torch is not importable.
# Usage: OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tests/bench/torch_rlhf.py --repo DIR
#        --reward-model FILE [--iterations 8] [--row-len 0] | --verify [--prompt P] [-n 20]
import argparse
import math
import os
import re
import statistics
import struct
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

BOS = 1
RM_T = 16           # tokens of a reward-model line at most (core/rl/rlhf.h RL_RM_T)


# ---- the tokenizer: llama2.c's tokenizer.bin and its encoder (run.c's greedy merges) ----

class Tokenizer:
    def __init__(self, path, vocab):
        raw = open(path, "rb").read()
        off = 4                                 # max_token_length, unused here
        self.piece, self.score = [], []
        for _ in range(vocab):
            sc, n = struct.unpack_from("fi", raw, off)
            self.piece.append(raw[off + 8:off + 8 + n])
            self.score.append(sc)
            off += 8 + n
        self.id_of = {}
        for i, p in enumerate(self.piece):
            self.id_of.setdefault(p, i)
        byte_piece = re.compile(rb"<0x([0-9A-Fa-f]{2})>")
        self.text = []                          # what each token writes
        for i, p in enumerate(self.piece):
            m = byte_piece.fullmatch(p)
            self.text.append(b"" if i < 3 else bytes([int(m.group(1), 16)]) if m else p)

    def encode(self, s):
        """BOS + the pieces of " " + s: each UTF-8 character is a piece when the vocabulary
        has it (else its bytes, ids 3..258), then the best-scoring merge of two neighbours,
        leftmost on ties, until no pair merges."""
        b = (" " + s).encode()
        ids, i = [], 0
        while i < len(b):
            j = i + 1
            while j < len(b) and j - i < 4 and b[j] & 0xC0 == 0x80:
                j += 1
            ids += [self.id_of[b[i:j]]] if b[i:j] in self.id_of else [c + 3 for c in b[i:j]]
            i = j
        while True:
            best = None
            for k in range(len(ids) - 1):
                z = self.id_of.get(self.piece[ids[k]] + self.piece[ids[k + 1]])
                if z is not None and (best is None or self.score[z] > self.score[best[1]]):
                    best = (k, z)
            if best is None:
                return [BOS] + ids
            ids[best[0]:best[0] + 2] = [best[1]]

    def token_text(self, prev, t):
        out = self.text[t]
        return out[1:] if prev == BOS and out.startswith(b" ") else out


# ---- the model: llama2.c's Llama (RMSNorm, RoPE on pairs, grouped KV heads, SwiGLU) ----

class Config:
    def __init__(self, hdr):
        self.dim, self.hidden, self.layers, self.heads, self.kv_heads, v, self.seq = hdr
        self.shared, self.vocab = v > 0, abs(v)
        self.hs = self.dim // self.heads
        self.kv_dim = self.kv_heads * self.hs


class Norm(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


def turn(x, cos, sin):
    # x [B, T, H, HS]: each pair (2i, 2i+1) turned by the angle of its position
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.n1, self.n2 = Norm(c.dim), Norm(c.dim)
        self.wq, self.wk, self.wv = lin(c.dim, c.dim), lin(c.dim, c.kv_dim), lin(c.dim, c.kv_dim)
        self.wo = lin(c.dim, c.dim)
        self.w1, self.w2, self.w3 = lin(c.dim, c.hidden), lin(c.hidden, c.dim), lin(c.dim, c.hidden)

    def forward(self, x, cos, sin, mask, cache=None, at=0):
        c, (B, T, _) = self.c, x.shape
        h = self.n1(x)
        q = turn(self.wq(h).view(B, T, c.heads, c.hs), cos, sin).transpose(1, 2)
        k = turn(self.wk(h).view(B, T, c.kv_heads, c.hs), cos, sin).transpose(1, 2)
        v = self.wv(h).view(B, T, c.kv_heads, c.hs).transpose(1, 2)
        if cache is not None:                   # [B, NKV, S, HS] each, filled up to at + T
            cache[0][:, :, at:at + T], cache[1][:, :, at:at + T] = k, v
            k, v = cache[0][:, :, :at + T], cache[1][:, :, :at + T]
        rep = c.heads // c.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(c.hs) + mask, dim=-1)
        x = x + self.wo((att @ v).transpose(1, 2).reshape(B, T, c.dim))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(torch.nn.Module):
    """head False: the body alone, up to the final norm (a critic's, a reward model's)."""

    def __init__(self, c, head=True):
        super().__init__()
        self.c = c
        self.emb = torch.nn.Embedding(c.vocab, c.dim)
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c.layers))
        self.norm = Norm(c.dim)
        self.out = torch.nn.Linear(c.dim, c.vocab, bias=False) if head else None
        if head and c.shared:
            self.out.weight = self.emb.weight
        ang = torch.arange(c.seq, dtype=torch.float32)[:, None] * \
            (1.0 / torch.pow(torch.tensor(10000.0), torch.arange(0, c.hs, 2) / c.hs))[None]
        self.cos, self.sin = torch.cos(ang), torch.sin(ang)

    def hidden(self, ids):
        T = ids.shape[1]
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, self.cos[None, :T, None], self.sin[None, :T, None], mask)
        return self.norm(x)

    def forward(self, ids):
        return self.out(self.hidden(ids))

    def decode(self, ids, pos, cache, at, seen):
        """ids [B, T] at positions pos [B, T], written to cache columns at..at+T-1; seen
        [B, S]: the columns a row may attend to (its left padding is not). Logits of the
        last column."""
        B, T = ids.shape
        col = torch.arange(at + T)
        ok = (col[None, :] <= (at + torch.arange(T))[:, None])[None] & seen[:, None, :at + T]
        mask = torch.zeros(B, 1, T, at + T).masked_fill_(~ok[:, None], -1e30)
        x = self.emb(ids)
        cos, sin = self.cos[pos][:, :, None], self.sin[pos][:, :, None]
        for layer, kv in zip(self.layers, cache):
            x = layer(x, cos, sin, mask, kv, at)
        return self.out(self.norm(x[:, -1]))


def read_weights(m, raw, off):
    """llama2.c's payload from raw[off:] into m; the offset after it."""
    c = m.c
    D, KV, H, L, V = c.dim, c.kv_dim, c.hidden, c.layers, c.vocab
    n = [V * D, L * D, L * D * D, L * KV * D, L * KV * D, L * D * D, L * D, L * H * D,
         L * D * H, L * H * D, D, c.seq * c.hs // 2, c.seq * c.hs // 2, 0 if c.shared else V * D]
    t = torch.frombuffer(bytearray(raw[off:off + 4 * sum(n)]), dtype=torch.float32).split(n)
    shapes = [(D,), (D, D), (KV, D), (KV, D), (D, D), (D,), (H, D), (D, H), (H, D)]
    names = ["n1", "wq", "wk", "wv", "wo", "n2", "w1", "w2", "w3"]
    with torch.no_grad():
        m.emb.weight.copy_(t[0].view(V, D))
        for k, (name, shp) in enumerate(zip(names, shapes)):
            per = t[1 + k].view(L, *shp)
            for l, layer in enumerate(m.layers):
                getattr(layer, name).weight.copy_(per[l])
        m.norm.weight.copy_(t[10])
        if m.out is not None and not c.shared:
            m.out.weight.copy_(t[13].view(V, D))
    return off + 4 * sum(n)


def load_llama(path, head=True):
    raw = open(path, "rb").read()
    m = Llama(Config(struct.unpack_from("7i", raw, 0)), head)
    read_weights(m, raw, 28)
    return m


class Scalar(torch.nn.Module):
    """A body with a linear head on its final hidden state: the critic, the reward model."""

    def __init__(self, body):
        super().__init__()
        self.body, self.head = body, torch.nn.Linear(body.c.dim, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, ids):
        return self.head(self.body.hidden(ids)).squeeze(-1)


def load_reward_model(path):
    raw = open(path, "rb").read()
    if raw[:8] != b"MLSYSRM1":
        sys.exit(f"torch_rlhf.py: {path}: not a reward model (no MLSYSRM1 header)")
    rm = Scalar(Llama(Config(struct.unpack_from("7i", raw, 8)), head=False))
    off = read_weights(rm.body, raw, 36)
    D = rm.body.c.dim
    head = torch.frombuffer(bytearray(raw[off:off + 4 * (D + 1)]), dtype=torch.float32)
    with torch.no_grad():
        rm.head.weight.copy_(head[:D][None])
        rm.head.bias.copy_(head[D:])
    return rm


# ---- the loop ----

def token_logprobs(model, ids, at, tok):
    """log pi of tok [b, M] at the rows at [b, M] of a forward over ids [b, T]."""
    logits = model(ids)
    rows = logits.gather(1, at[:, :, None].expand(-1, -1, logits.shape[-1]))
    return torch.log_softmax(rows, -1).gather(2, tok[:, :, None]).squeeze(2)


class Loop:
    def __init__(self, a):
        self.a = a
        path = os.path.join(a.repo, "assets/models/model.bin")
        self.actor = load_llama(path)
        self.ref = load_llama(path).requires_grad_(False)
        self.gen = load_llama(path).requires_grad_(False)
        self.critic = Scalar(load_llama(path, head=False))
        self.rm = load_reward_model(a.reward_model).requires_grad_(False)
        self.c = self.actor.c
        self.tok = Tokenizer(os.path.join(a.repo, "assets/models/tokenizer.bin"), self.c.vocab)
        kw = dict(betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0)
        self.aopt = torch.optim.AdamW(self.actor.parameters(), lr=a.lr, **kw)
        self.copt = torch.optim.AdamW(self.critic.parameters(), lr=a.critic_lr, **kw)
        self.g = torch.Generator().manual_seed(a.seed)
        self.rng = torch.Generator().manual_seed(a.seed + 1)

    def problems(self):
        a, out = self.a, []
        for _ in range(a.prompts):
            x, y, s = torch.randint(0, a.max_operand + 1, (3,), generator=self.rng).tolist()
            op = "-" if s % 3 == 0 else "+"            # a third are differences, a >= b
            if op == "-" and y > x:
                x, y = y, x
            out += [f"{x} {op} {y} ="] * a.group
        return out

    @torch.no_grad()
    def generate(self, prompts):
        """Left-padded batch, one prefill and max_new - 1 decode forwards through the KV
        cache; each answer cut after its first token that holds a newline."""
        a, c = self.a, self.c
        P = [self.tok.encode(p) for p in prompts]
        N, W, M = len(P), max(len(p) for p in P), a.max_new
        ids = torch.tensor([[0] * (W - len(p)) + p for p in P])
        pad = torch.tensor([W - len(p) for p in P])
        seen = torch.arange(W + M)[None] >= pad[:, None]
        cache = [(torch.zeros(N, c.kv_heads, W + M, c.hs), torch.zeros(N, c.kv_heads, W + M, c.hs))
                 for _ in range(c.layers)]
        logits = self.gen.decode(ids, (torch.arange(W)[None] - pad[:, None]).clamp(min=0),
                                 cache, 0, seen)
        out = torch.zeros(N, M, dtype=torch.long)
        for s in range(M):
            out[:, s] = torch.multinomial(torch.softmax(logits / a.temperature, -1), 1,
                                          generator=self.g).squeeze(1)
            if s + 1 < M:
                logits = self.gen.decode(out[:, s:s + 1], (W - pad + s)[:, None], cache, W + s,
                                         seen)
        resp = []
        for row in out.tolist():
            n = next((j + 1 for j in range(M)
                      if b"\n" in self.tok.token_text(row[j - 1] if j else -1, row[j])), M)
            resp.append(row[:n])
        return P, resp

    @torch.no_grad()
    def score(self, prompts, P, resp):
        a, M, N = self.a, self.a.max_new, len(P)
        T = a.row_len or max(len(p) + len(r) for p, r in zip(P, resp))
        ids = torch.full((N, T), BOS)
        at, tok, mask = torch.zeros(N, M, dtype=torch.long), torch.zeros(N, M, dtype=torch.long), \
            torch.zeros(N, M)
        lines = []
        for b, (p, r) in enumerate(zip(P, resp)):
            ids[b, :len(p) + len(r)] = torch.tensor(p + r)
            for j in range(M):
                at[b, j] = min(len(p) - 1 + j, T - 1)
                tok[b, j] = r[j] if j < len(r) else 0
                mask[b, j] = j < len(r)
            text = b"".join(self.tok.text[t] for t in r).decode("utf-8", "replace")
            lines.append(prompts[b] + text.split("\n")[0])
        enc = [self.tok.encode(ln[:100])[:RM_T] for ln in lines]
        R = max(len(e) for e in enc) if a.row_len == 0 else RM_T
        rm_ids = torch.full((N, R), BOS)
        for b, e in enumerate(enc):
            rm_ids[b, :len(e)] = torch.tensor(e)
        last = torch.tensor([len(e) - 1 for e in enc])
        mb, parts = N // a.minibatches, {"ref": [], "old": [], "val": [], "score": []}
        for m in range(a.minibatches):
            s = slice(m * mb, (m + 1) * mb)
            parts["ref"].append(token_logprobs(self.ref, ids[s], at[s], tok[s]))
            parts["old"].append(token_logprobs(self.actor, ids[s], at[s], tok[s]))
            parts["val"].append(self.critic(ids[s]).gather(1, at[s]))
            parts["score"].append(self.rm(rm_ids[s]).gather(1, last[s][:, None]).squeeze(1))
        self.batch = dict(ids=ids, at=at, tok=tok, mask=mask,
                          **{k: torch.cat(v) for k, v in parts.items()})

    @torch.no_grad()
    def advantage(self):
        """Per-token reward -beta (lp - lp_ref), the score added at the last token; GAE; returns
        A + V; advantages normalised over every response token of the batch."""
        a, B = self.a, self.batch
        mask = B["mask"]
        rew = -a.kl_coef * (B["old"] - B["ref"]) * mask
        rew.scatter_add_(1, (mask.sum(1).long() - 1)[:, None], B["score"][:, None])
        val = B["val"] * mask
        adv, run = torch.zeros_like(rew), torch.zeros(rew.shape[0])
        for t in reversed(range(a.max_new)):
            nxt = val[:, t + 1] if t + 1 < a.max_new else torch.zeros_like(run)
            run = (rew[:, t] + a.gamma * nxt - val[:, t] + a.gamma * a.lam * run) * mask[:, t]
            adv[:, t] = run
        n = mask.sum()
        mean = (adv * mask).sum() / n
        sd = ((adv * adv * mask).sum() / n - mean * mean).clamp(min=0).sqrt()
        B.update(adv=(adv - mean) / (sd + 1e-8) * mask, ret=adv + val, val=val)
        self.reward = float(B["score"].mean())

    def train(self):
        a, B = self.a, self.batch
        mb = B["ids"].shape[0] // a.minibatches
        body, head = list(self.critic.body.parameters()), list(self.critic.head.parameters())
        for _ in range(a.epochs):
            for m in range(a.minibatches):
                s = slice(m * mb, (m + 1) * mb)
                mask, n = B["mask"][s], B["mask"][s].sum()
                lp = token_logprobs(self.actor, B["ids"][s], B["at"][s], B["tok"][s])
                ratio, A = torch.exp((lp - B["old"][s]) * mask), B["adv"][s]
                loss = (-torch.min(ratio * A, ratio.clamp(1 - a.clip, 1 + a.clip) * A) * mask).sum() / n
                self.aopt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.actor.parameters(), 1.0)
                self.aopt.step()
                v, vo, R = self.critic(B["ids"][s]).gather(1, B["at"][s]), B["val"][s], B["ret"][s]
                vc = vo + (v - vo).clamp(-a.clip, a.clip)
                vloss = (0.5 * torch.max((v - R) ** 2, (vc - R) ** 2) * mask).sum() / n
                self.copt.zero_grad(set_to_none=True)
                vloss.backward()
                torch.nn.utils.clip_grad_norm_(body, 1.0)     # body and head apart, as ours
                torch.nn.utils.clip_grad_norm_(head, 1.0)
                self.copt.step()

    @torch.no_grad()
    def sync(self):
        for g, w in zip(self.gen.parameters(), self.actor.parameters()):
            g.copy_(w)

    def iterate(self):
        t, cpu0 = [time.perf_counter()], time.process_time()
        prompts = self.problems()
        P, resp = self.generate(prompts)
        t.append(time.perf_counter())
        self.score(prompts, P, resp)
        t.append(time.perf_counter())
        self.advantage()
        t.append(time.perf_counter())
        self.train()
        t.append(time.perf_counter())
        self.sync()
        t.append(time.perf_counter())
        return t[-1] - t[0], time.process_time() - cpu0, [t[i + 1] - t[i] for i in range(5)]


def verify(a):
    """Greedy through the KV cache, printed as `mlsys-lab generate` prints it."""
    m = load_llama(os.path.join(a.repo, "assets/models/model.bin"))
    tok = Tokenizer(os.path.join(a.repo, "assets/models/tokenizer.bin"), m.c.vocab)
    ids, c = tok.encode(a.prompt), m.c
    W = len(ids)
    cache = [(torch.zeros(1, c.kv_heads, W + a.n, c.hs), torch.zeros(1, c.kv_heads, W + a.n, c.hs))
             for _ in range(c.layers)]
    seen = torch.ones(1, W + a.n, dtype=torch.bool)
    text, prev = a.prompt.encode(), ids[-1]
    with torch.no_grad():
        logits = m.decode(torch.tensor([ids]), torch.arange(W)[None], cache, 0, seen)
        for s in range(a.n):
            t = int(logits.argmax(-1))
            text += tok.token_text(prev, t)
            prev = t
            if s + 1 < a.n:
                logits = m.decode(torch.tensor([[t]]), torch.tensor([[W + s]]), cache, W + s, seen)
    print(text.decode("utf-8", "replace"))


def main():
    ap = argparse.ArgumentParser(description="the PyTorch peer of ch13/rlhf-loop")
    ap.add_argument("--repo", default=".")
    ap.add_argument("--reward-model")
    ap.add_argument("--iterations", type=int, default=8)
    ap.add_argument("--row-len", type=int, default=24,
                    help="training row length; 0: the batch's longest row (and line)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=1)
    ap.add_argument("--max-new", type=int, default=4)
    ap.add_argument("--max-operand", type=int, default=9)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--kl-coef", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--critic-lr", type=float, default=1e-4)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--minibatches", type=int, default=2)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--lam", type=float, default=0.95)
    ap.add_argument("--clip", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--prompt", default="Once upon")
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.verify:
        return verify(a)
    if not a.reward_model:
        sys.exit("torch_rlhf.py: --reward-model FILE is needed (mlsys-lab train --reward-model)")
    loop = Loop(a)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread; PPO, {a.prompts} "
          f"problems x {a.group}, rows of {a.row_len or 'the batch longest'} tokens")
    print("%4s %8s %7s %7s  %s" % ("iter", "reward", "s/it", "cpu s",
                                   "generate/score/advantage/train/sync s"))
    runs = []
    for i in range(a.iterations):
        wall, cpu, ph = loop.iterate()
        runs.append((wall, cpu))
        print("%4d %+8.3f %7.4f %7.4f  %s" % (i + 1, loop.reward, wall, cpu,
                                             "/".join("%.4f" % p for p in ph)), flush=True)
    later = runs[1:] or runs
    print("median after the first: %.4f s per iteration, %.4f s of CPU"
          % (statistics.median(r[0] for r in later), statistics.median(r[1] for r in later)))


if __name__ == "__main__":
    main()
