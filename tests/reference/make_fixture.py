#!/usr/bin/python3
"""Builds the PyTorch reference fixture for the C model (tests/model/test_reference.c).

The same GPT-2 as model/gpt.c, written plainly in PyTorch, is run on the same
weights and batch, in float64 so the fixture is the exact answer and any
difference the test sees is the C model's own float32 error. It writes:

  tests/reference/tiny_gpt2.bin     llm.c model file (version 3): the weights,
                                    float32, in llm.c's tensor order; the C test
                                    loads it with px_gpt_load, so the file
                                    format is checked against an outside writer.
  tests/reference/tiny_fixture.bin  int32[256] header, float32[16] hyperparameters,
                                    inputs and targets (int32, B*T), logits
                                    (float32, B*T*Vp), loss, every parameter
                                    gradient (float32, llm.c order), and the loss
                                    and pre-clip gradient norm of each of NSTEPS
                                    AdamW steps on that batch.

Both are committed, so the test needs no PyTorch. Regenerate with
    /usr/bin/python3 tests/reference/make_fixture.py
(Debian's python3-torch 1.13 imports only under /usr/bin/python3.)

bench/train_step.py imports only read_llmc from here; its PyTorch baseline
is bench/torch_gpt.py, the per-layer model a PyTorch user would write.
"""
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

LLMC_MAGIC, LLMC_VERSION = 20240326, 3
FIXTURE_MAGIC, FIXTURE_VERSION = 20241103, 1
TENSOR_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
MATRICES = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # weight-decayed

# The fixture's run: preset `tiny` (L=2 C=64 NH=4 maxT=64 V=256), batch below.
TINY = dict(max_seq_len=64, vocab_size=256, padded_vocab_size=256, num_layers=2,
            num_heads=4, channels=64)
B, T, NSTEPS = 4, 32, 10
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP = 1e-3, 0.9, 0.95, 1e-8, 0.1, 1.0


def tensor_shapes(cfg):
    """Shapes of the parameter tensors in llm.c order (stacked over layers)."""
    Vp, C, L, maxT = (cfg["padded_vocab_size"], cfg["channels"], cfg["num_layers"],
                      cfg["max_seq_len"])
    return [(Vp, C), (maxT, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


class GPT(torch.nn.Module):
    """GPT-2: pre-LayerNorm blocks, learned positions, lm head tied to wte.
    Parameters are kept as the 16 stacked llm.c tensors so they map one to one
    onto the C model's buffer."""

    def __init__(self, cfg, dtype=torch.float32):
        super().__init__()
        self.cfg = cfg
        self.names = TENSOR_NAMES
        for name, shape in zip(TENSOR_NAMES, tensor_shapes(cfg)):
            setattr(self, name, torch.nn.Parameter(torch.zeros(shape, dtype=dtype)))

    def tensors(self):
        return [getattr(self, n) for n in TENSOR_NAMES]

    def load_flat(self, flat):
        off = 0
        with torch.no_grad():
            for p in self.tensors():
                n = p.numel()
                p.copy_(torch.from_numpy(flat[off:off + n].reshape(p.shape)))
                off += n
        assert off == len(flat)

    def flat_grads(self):
        return np.concatenate([p.grad.detach().reshape(-1).numpy() for p in self.tensors()])

    def forward(self, idx, targets=None):
        cfg = self.cfg
        C, NH, V = cfg["channels"], cfg["num_heads"], cfg["vocab_size"]
        Bb, Tt = idx.shape
        hs = C // NH
        x = self.wte[idx] + self.wpe[:Tt]
        mask = torch.tril(torch.ones(Tt, Tt, dtype=torch.bool))
        for l in range(cfg["num_layers"]):
            h = F.layer_norm(x, (C,), self.ln1w[l], self.ln1b[l], eps=1e-5)
            qkv = F.linear(h, self.qkvw[l], self.qkvb[l])
            q, k, v = qkv.split(C, dim=2)
            q = q.view(Bb, Tt, NH, hs).transpose(1, 2)
            k = k.view(Bb, Tt, NH, hs).transpose(1, 2)
            v = v.view(Bb, Tt, NH, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(Bb, Tt, C)
            x = x + F.linear(y, self.attprojw[l], self.attprojb[l])
            h = F.layer_norm(x, (C,), self.ln2w[l], self.ln2b[l], eps=1e-5)
            h = F.gelu(F.linear(h, self.fcw[l], self.fcb[l]), approximate="tanh")
            x = x + F.linear(h, self.fcprojw[l], self.fcprojb[l])
        x = F.layer_norm(x, (C,), self.lnfw, self.lnfb, eps=1e-5)
        logits = F.linear(x, self.wte)  # (B, T, Vp), tied embedding
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits[:, :, :V].reshape(-1, V), targets.reshape(-1))
        return logits, loss

    def optimizer(self, lr, beta1, beta2, eps, weight_decay):
        """AdamW with decay on the 2-D matrices only, as px_gpt_adamw_step."""
        decay = [getattr(self, n) for n in TENSOR_NAMES if n in MATRICES]
        no_decay = [getattr(self, n) for n in TENSOR_NAMES if n not in MATRICES]
        return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                  {"params": no_decay, "weight_decay": 0.0}],
                                 lr=lr, betas=(beta1, beta2), eps=eps)


def read_llmc(path):
    """(config, flat float32 params) of an llm.c model file, version 3."""
    with open(path, "rb") as f:
        h = np.frombuffer(f.read(1024), dtype=np.int32)
        assert h[0] == LLMC_MAGIC and h[1] == LLMC_VERSION, f"{path}: not an llm.c v3 model"
        cfg = dict(max_seq_len=int(h[2]), vocab_size=int(h[3]), num_layers=int(h[4]),
                   num_heads=int(h[5]), channels=int(h[6]), padded_vocab_size=int(h[7]))
        params = np.frombuffer(f.read(), dtype=np.float32).copy()
    n = sum(int(np.prod(s)) for s in tensor_shapes(cfg))
    assert params.size == n, f"{path}: {params.size} params, expected {n}"
    return cfg, params


def write_llmc(path, cfg, flat):
    h = np.zeros(256, dtype=np.int32)
    h[:8] = [LLMC_MAGIC, LLMC_VERSION, cfg["max_seq_len"], cfg["vocab_size"],
             cfg["num_layers"], cfg["num_heads"], cfg["channels"], cfg["padded_vocab_size"]]
    with open(path, "wb") as f:
        f.write(h.tobytes())
        f.write(flat.astype(np.float32).tobytes())


def random_weights(cfg, seed):
    """Weights with every tensor non-trivial (LayerNorm weights away from 1,
    biases away from 0, wider than the N(0, 0.02) init so attention is not
    near-uniform), so a mixed-up tensor or a wrong mask cannot hide."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for name, shape in zip(TENSOR_NAMES, tensor_shapes(cfg)):
        if name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name in MATRICES:
            t = 0.08 * torch.randn(shape, generator=g)
        else:
            t = 0.05 * torch.randn(shape, generator=g)
        parts.append(t.reshape(-1))
    return torch.cat(parts).numpy().astype(np.float32)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    torch.manual_seed(0)
    cfg = TINY
    flat = random_weights(cfg, seed=1234)
    write_llmc(os.path.join(here, "tiny_gpt2.bin"), cfg, flat)

    g = torch.Generator().manual_seed(99)
    inputs = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)
    targets = torch.randint(0, cfg["vocab_size"], (B, T), generator=g)

    model = GPT(cfg, dtype=torch.float64)
    model.load_flat(flat.astype(np.float64))
    logits, loss = model(inputs, targets)
    loss.backward()
    grads = model.flat_grads()
    logits0, loss0 = logits.detach().numpy(), loss.item()

    model.zero_grad(set_to_none=True)
    opt = model.optimizer(LR, BETA1, BETA2, EPS, WEIGHT_DECAY)
    losses, norms = [], []
    for _ in range(NSTEPS):
        opt.zero_grad(set_to_none=True)
        _, l = model(inputs, targets)
        l.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        losses.append(l.item())
        norms.append(float(norm))

    h = np.zeros(256, dtype=np.int32)
    h[:12] = [FIXTURE_MAGIC, FIXTURE_VERSION, B, T, NSTEPS, flat.size, cfg["vocab_size"],
              cfg["padded_vocab_size"], cfg["num_layers"], cfg["num_heads"], cfg["channels"],
              cfg["max_seq_len"]]
    hp = np.zeros(16, dtype=np.float32)
    hp[:6] = [LR, BETA1, BETA2, EPS, WEIGHT_DECAY, GRAD_CLIP]
    out = os.path.join(here, "tiny_fixture.bin")
    with open(out, "wb") as f:
        for arr in (h, hp, inputs.numpy().astype(np.int32), targets.numpy().astype(np.int32),
                    logits0.astype(np.float32), np.array([loss0], dtype=np.float32),
                    grads.astype(np.float32), np.array(losses, dtype=np.float32),
                    np.array(norms, dtype=np.float32)):
            f.write(arr.tobytes())
    print(f"wrote {out}: loss {loss0:.6f}, step losses {', '.join(f'{x:.5f}' for x in losses)}")
    print(f"grad norms {', '.join(f'{x:.4f}' for x in norms)}")


if __name__ == "__main__":
    sys.exit(main())
