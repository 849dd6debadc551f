#!/usr/bin/env python3
"""One GPU, one training step of GPT-2: phalanx's CUDA model
(`phalanx-worker --standalone --device cuda`) against the nanoGPT-style
PyTorch model of bench/torch_gpt.py on the same GPU, same model, batch and
sequence length, in the same script. Both sides do forward, backward,
gradient clipping at 1.0 and AdamW, at one --precision:
  fp32  full FP32 (TF32 off on the PyTorch side, as phalanx's cuBLAS calls
        use CUBLAS_COMPUTE_32F);
  bf16  phalanx --precision bf16; PyTorch's forward under autocast to
        bfloat16 (flash SDPA, fused AdamW, FP32 weights and moments).

Each line also gives MFU: the model's FLOPs per step (6 x parameters +
12 x layers x channels x T per token, the PaLM count) over --peak-tflops
(default 989, an H100's dense bf16), and PyTorch's peak allocated memory.

phalanx's figure is the `ms=` of its per-step lines (wall time of a whole
step, data loading included); PyTorch's is timed around the step with
torch.cuda.synchronize(). Both: the median and the best of --steps steps
after --warmup untimed ones.

    python3 bench/gpu_step.py --bindir build/bin --data DIR [--model gpt2-124m]
                              [--batch 4] [--seq 1024] [--precision fp32|bf16] [--compile]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

# The presets of model/gpt.c that this benchmark knows.
PRESETS = {
    "gpt2-124m": dict(max_seq_len=1024, vocab_size=50257, padded_vocab_size=50304,
                      num_layers=12, num_heads=12, channels=768),
}


def phalanx(args):
    n = args.warmup + args.steps
    cmd = [os.path.join(args.bindir, "phalanx-worker"), "--standalone", "--device", "cuda",
           "--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq),
           "--steps", str(n), "--eval-batches", "0", "--data", args.data, "--precision", args.precision]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("phalanx-worker failed (%d):\n%s" % (r.returncode, r.stdout[-3000:]))
    ms = [float(m.group(2)) for m in re.finditer(r"^step=(\d+)/\d+ .* ms=([0-9.]+)", r.stdout, re.M)
          if int(m.group(1)) > args.warmup]
    loss = re.search(r"^step=1/\d+ loss=([0-9.]+)", r.stdout, re.M)
    cfg = re.search(r"^config .*", r.stdout, re.M)
    return ms, float(loss.group(1)) if loss else float("nan"), cfg.group(0) if cfg else ""


def pytorch(args, cfg, compile_):
    import torch
    from torch_gpt import GPT, train_step
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1337)
    torch.cuda.reset_peak_memory_stats()
    dev = torch.device("cuda")
    model = GPT(cfg).to(dev)
    opt, kind = model.configure_optimizer(1e-3, (0.9, 0.95), 1e-8, 0.1)
    step_model = torch.compile(model) if compile_ else model
    x = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), device=dev)
    y = torch.randint(0, cfg["vocab_size"], (args.batch, args.seq), device=dev)
    times = []
    for s in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step(model, step_model, opt, x, y, bf16=args.precision == "bf16")
        torch.cuda.synchronize()
        if s >= args.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
    peak = torch.cuda.max_memory_allocated() / 2**30
    del model, opt, step_model
    return times, kind, torch.__version__, torch.cuda.get_device_name(0), peak


def flops_per_step(cfg, batch, seq):
    C, L, V = cfg["channels"], cfg["num_layers"], cfg["padded_vocab_size"]
    params = V * C + cfg["max_seq_len"] * C + L * (12 * C * C + 13 * C) + 2 * C
    return (6 * params + 12 * L * C * seq) * batch * seq


def line(name, ms, tokens, flops, peak_tflops, mem_gib=None):
    med = statistics.median(ms)
    mfu = flops / (med / 1000.0) / (peak_tflops * 1e12)
    mem = " peak_mem_gib=%.2f" % mem_gib if mem_gib is not None else ""
    print("impl=%s median_ms=%.2f best_ms=%.2f tok_s=%.0f mfu=%.3f%s" %
          (name, med, min(ms), tokens / (med / 1000.0), mfu, mem), flush=True)
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bindir", required=True)
    ap.add_argument("--data", required=True, help="token shards (phalanx-data's output)")
    ap.add_argument("--model", default="gpt2-124m", choices=["gpt2-124m"])
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--compile", action="store_true", help="also time PyTorch under torch.compile")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32", help="both sides' precision")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's peak, for MFU (H100 dense bf16)")
    args = ap.parse_args()
    cfg = PRESETS[args.model]
    tokens = args.batch * args.seq
    flops, peak = flops_per_step(cfg, args.batch, args.seq), args.peak_tflops

    ms, loss, config = phalanx(args)
    print(config, flush=True)
    px = line("phalanx-cuda-%s" % args.precision, ms, tokens, flops, peak)
    print("phalanx first_loss=%.4f" % loss, flush=True)
    t, kind, ver, gpu, mem = pytorch(args, cfg, False)
    print("gpu=%r torch=%s optimizer=adamw-%s precision=%s tf32=off B=%d T=%d" %
          (gpu, ver, kind, args.precision, args.batch, args.seq), flush=True)
    eager = line("pytorch-eager-%s" % args.precision, t, tokens, flops, peak, mem)
    print("ratio pytorch_eager/phalanx=%.2f" % (eager / px), flush=True)
    if args.compile:
        t, _, _, _, mem = pytorch(args, cfg, True)
        comp = line("pytorch-compile-%s" % args.precision, t, tokens, flops, peak, mem)
        print("ratio pytorch_compile/phalanx=%.2f" % (comp / px), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
