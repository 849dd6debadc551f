"""GPT-2 as a PyTorch user writes it (nanoGPT's layout), for the CPU baseline
of bench/train_step.py.

This is deliberately not the model of tests/reference/make_fixture.py. That
one keeps the 16 stacked llm.c tensors (qkvw is one (L, 3C, C) parameter) so
that it maps one to one onto the C buffer, which is right for a reference
test and wrong for a speed baseline: indexing qkvw[l] in the forward makes
autograd zero-fill and accumulate a full (L, 3C, C) gradient for every layer,
about a third of a gpt2-124m step. Here every layer is its own nn.Module with
nn.Linear and nn.LayerNorm, attention is F.scaled_dot_product_attention with
is_causal=True, the lm head is tied to wte, and the optimizer is AdamW (fused
when this torch has it on CPU). Only load_llmc knows the C layout: it copies
the llm.c tensors into the modules once, before any timing.

The math is the C model's (model/gpt.c): pre-LayerNorm blocks (eps 1e-5),
GELU with the tanh approximation, learned positions, logits over the padded
vocabulary Vp with the loss over the first V of them, weight decay on the
2-D tensors only.
"""
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.n_head = NH
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, NH, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = CausalSelfAttention(C, NH)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg):
        """cfg: the dict read_llmc returns (max_seq_len, vocab_size,
        padded_vocab_size, num_layers, num_heads, channels)."""
        super().__init__()
        self.cfg = cfg
        C, NH, L = cfg["channels"], cfg["num_heads"], cfg["num_layers"]
        self.vocab_size = cfg["vocab_size"]
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["padded_vocab_size"], C),
            wpe=nn.Embedding(cfg["max_seq_len"], C),
            h=nn.ModuleList([Block(C, NH) for _ in range(L)]),
            ln_f=nn.LayerNorm(C, eps=1e-5),
        ))
        self.lm_head = nn.Linear(C, cfg["padded_vocab_size"], bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx, targets=None):
        T = idx.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, Vp)
        if targets is None:
            return logits, None
        V = self.vocab_size
        if V < logits.size(-1):  # padded vocabulary: the padding takes no part in the loss
            loss = F.cross_entropy(logits[..., :V].reshape(-1, V), targets.view(-1))
        else:
            loss = F.cross_entropy(logits.view(-1, V), targets.view(-1))
        return logits, loss

    def load_llmc(self, flat):
        """Copies the flat float32 parameters of an llm.c model file (llm.c
        order, per-layer tensors stacked over L) into the modules."""
        cfg = self.cfg
        Vp, C, L, maxT = (cfg["padded_vocab_size"], cfg["channels"], cfg["num_layers"],
                          cfg["max_seq_len"])
        shapes = [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C),
                  (L, C), (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C),
                  (C,), (C,)]
        parts, off = [], 0
        for s in shapes:
            n = math.prod(s)
            parts.append(torch.from_numpy(np.ascontiguousarray(flat[off:off + n])).view(s))
            off += n
        assert off == flat.size, f"{flat.size} parameters, the config needs {off}"
        (wte, wpe, ln1w, ln1b, qkvw, qkvb, attprojw, attprojb, ln2w, ln2b, fcw, fcb, fcprojw,
         fcprojb, lnfw, lnfb) = parts
        t = self.transformer
        with torch.no_grad():
            t.wte.weight.copy_(wte)
            t.wpe.weight.copy_(wpe)
            for l, b in enumerate(t.h):
                for dst, src in ((b.ln_1.weight, ln1w), (b.ln_1.bias, ln1b),
                                 (b.attn.c_attn.weight, qkvw), (b.attn.c_attn.bias, qkvb),
                                 (b.attn.c_proj.weight, attprojw), (b.attn.c_proj.bias, attprojb),
                                 (b.ln_2.weight, ln2w), (b.ln_2.bias, ln2b),
                                 (b.mlp.c_fc.weight, fcw), (b.mlp.c_fc.bias, fcb),
                                 (b.mlp.c_proj.weight, fcprojw), (b.mlp.c_proj.bias, fcprojb)):
                    dst.copy_(src[l])
            t.ln_f.weight.copy_(lnfw)
            t.ln_f.bias.copy_(lnfb)

    def configure_optimizer(self, lr, betas, eps, weight_decay):
        """AdamW with decay on the 2-D tensors (embeddings and Linear weights),
        as nanoGPT and px_gpt_adamw_step do. Fused when this torch supports a
        fused AdamW on CPU, else foreach. Returns (optimizer, "fused"|"foreach")."""
        params = [p for p in self.parameters() if p.requires_grad]  # the tied weight once
        groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
        try:
            opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True)
            return opt, "fused"
        except (RuntimeError, TypeError, ValueError):
            pass
        return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, foreach=True), "foreach"


def train_step(model, step_model, opt, x, y, bf16=False):
    """One training step as the baselines time it: forward (through
    step_model, the model or its torch.compile), backward, clipping of the
    global gradient norm at 1.0 (phalanx's default), AdamW. bf16: the forward
    under autocast to bfloat16 (weights and optimizer state stay float32).
    Returns the loss."""
    opt.zero_grad(set_to_none=True)
    if bf16:
        with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
            _, loss = step_model(x, y)
    else:
        _, loss = step_model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss
