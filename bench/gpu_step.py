#!/usr/bin/env python3
"""One GPU, one training step of GPT-2: phalanx's CUDA model
(`phalanx-worker --standalone --device cuda`) against the nanoGPT-style
PyTorch model of bench/torch_gpt.py on the same GPU, same model, batch and
sequence length, in the same script. Both sides do forward, backward,
gradient clipping at 1.0 and AdamW, at one --precision:
  fp32  full FP32 (TF32 off on the PyTorch side, as phalanx's cuBLAS calls
        use CUBLAS_COMPUTE_32F);
  bf16  phalanx --precision bf16 (--attention fused, unfused, or both:
        two phalanx runs and their ratio);
        PyTorch's forward under autocast to bfloat16 (flash SDPA, fused
        AdamW, FP32 weights and moments).

Each line also gives MFU: the model's FLOPs per step (6 x parameters +
12 x layers x channels x T per token, the PaLM count) over --peak-tflops
(default 989, an H100's dense bf16), and the peak GPU memory of the step:
the device's used memory (nvidia-smi, sampled every 0.1 s while that side
runs) above what was used before it started, so both sides are measured
the same way, CUDA context included.

phalanx's figure is the `ms=` of its per-step lines (wall time of a whole
step, data loading included); PyTorch's is timed around the step with
torch.cuda.synchronize(). Both: the median and the best of --steps steps
after --warmup untimed ones.

    python3 bench/gpu_step.py --bindir build/bin --data DIR [--model gpt2-124m]
                              [--batch 4] [--seq 1024] [--precision fp32|bf16] [--compile]
                              [--attention fused|unfused|both] [--phalanx-only]
"""
import argparse
import json
import os
import threading
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


class MemPeak:
    """The peak of GPU 0's used memory (MiB, nvidia-smi) above its level at
    start, sampled every 0.1 s from a thread while the block runs; None when
    nvidia-smi is not there."""

    def __enter__(self):
        self.base = self.peak = used_mib()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self):
        while not self.stop.wait(0.1):
            u = used_mib()
            if u is not None and self.peak is not None:
                self.peak = max(self.peak, u)

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    def gib(self):
        return None if self.base is None else (self.peak - self.base) / 1024.0


def used_mib():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10)
        return float(r.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def phalanx(args, attention):
    n = args.warmup + args.steps
    cmd = [os.path.join(args.bindir, "phalanx-worker"), "--standalone", "--device", "cuda",
           "--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq),
           "--steps", str(n), "--eval-batches", "0", "--data", args.data, "--precision", args.precision]
    if args.precision == "bf16":
        cmd += ["--attention", attention]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit("phalanx-worker failed (%d):\n%s" % (r.returncode, r.stdout[-3000:]))
    ms = [float(m.group(2)) for m in re.finditer(r"^step=(\d+)/\d+ .* ms=([0-9.]+)", r.stdout, re.M)
          if int(m.group(1)) > args.warmup]
    loss = re.search(r"^step=1/\d+ loss=([0-9.]+)", r.stdout, re.M)
    cfg = re.search(r"^config .*", r.stdout, re.M)
    acts = re.search(r"gpu_model .*activations=(\w+)", r.stdout)
    desc = (cfg.group(0) if cfg else "") + (" activations=%s" % acts.group(1) if acts else "")
    return ms, float(loss.group(1)) if loss else float("nan"), desc


def pytorch(args, cfg, compile_):
    import torch
    from torch_gpt import GPT, train_step
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(1337)
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
    return times, kind, torch.__version__, torch.cuda.get_device_name(0)


def pytorch_process(args, compile_):
    """pytorch() in a process of its own (this script, --side), so that its
    memory is measured as phalanx's is: a whole process, CUDA context
    included."""
    cmd = [sys.executable, os.path.abspath(__file__), "--bindir", args.bindir, "--data", args.data,
           "--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--precision", args.precision,
           "--side", "torch-compile" if compile_ else "torch-eager"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    last = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 0 or not last.startswith("{"):
        sys.exit("the PyTorch side failed (%d):\n%s" % (r.returncode, r.stdout[-3000:]))
    d = json.loads(last)
    return d["times"], d["kind"], d["torch"], d["gpu"]


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
    ap.add_argument("--attention", choices=["fused", "unfused", "both"], default="fused",
                    help="phalanx's attention under --precision bf16 (both: a run of each)")
    ap.add_argument("--phalanx-only", action="store_true", help="time phalanx alone (no PyTorch side)")
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the GPU's peak, for MFU (H100 dense bf16)")
    ap.add_argument("--side", choices=["torch-eager", "torch-compile"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    cfg = PRESETS[args.model]
    if args.side:  # one PyTorch side, in its own process: a JSON line
        t, kind, ver, gpu = pytorch(args, cfg, args.side == "torch-compile")
        print(json.dumps({"times": t, "kind": kind, "torch": ver, "gpu": gpu}), flush=True)
        return 0
    tokens = args.batch * args.seq
    flops, peak = flops_per_step(cfg, args.batch, args.seq), args.peak_tflops

    kinds = ["fused", "unfused"] if args.attention == "both" else [args.attention]
    if args.precision != "bf16":
        kinds = kinds[:1]  # fp32 has one attention
    runs = {}
    for kind in kinds:
        with MemPeak() as mem:
            ms, loss, config = phalanx(args, kind)
        print(config, flush=True)
        name = "phalanx-cuda-%s" % args.precision + ("-%s" % kind if args.precision == "bf16" else "")
        runs[kind] = line(name, ms, tokens, flops, peak, mem.gib())
        print("phalanx first_loss=%.4f" % loss, flush=True)
    if len(runs) == 2:
        print("ratio phalanx_unfused/phalanx_fused=%.2f" % (runs["unfused"] / runs["fused"]), flush=True)
    px = min(runs.values())
    if args.phalanx_only:
        return 0
    with MemPeak() as mem:
        t, kind, ver, gpu = pytorch_process(args, False)
    print("gpu=%r torch=%s optimizer=adamw-%s precision=%s tf32=off B=%d T=%d" %
          (gpu, ver, kind, args.precision, args.batch, args.seq), flush=True)
    eager = line("pytorch-eager-%s" % args.precision, t, tokens, flops, peak, mem.gib())
    print("ratio pytorch_eager/phalanx=%.2f" % (eager / px), flush=True)
    if args.compile:
        with MemPeak() as mem:
            t, _, _, _ = pytorch_process(args, True)
        comp = line("pytorch-compile-%s" % args.precision, t, tokens, flops, peak, mem.gib())
        print("ratio pytorch_compile/phalanx=%.2f" % (comp / px), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
