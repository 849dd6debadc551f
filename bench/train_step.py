#!/usr/bin/env python3
"""PyTorch baseline for bench/train_step: one training step (forward,
backward, gradient clipping at 1.0, AdamW) of the model and batch that
`bench_train_step --dump DIR` wrote, in float32, with the nanoGPT-style model
of bench/torch_gpt.py, eager or under torch.compile. Prints the same
key=value line as the C benchmark: ms_per_step is the best of --steps timed
steps, the median is printed too, cpu_ms the least process CPU time of a
step. The --warmup steps before them are not timed; under --compile the first
of them compiles (its time is printed as compile_s).

--c-loss is the first-step loss the C benchmark printed for the same weights
and batch: the script exits 1, loudly, when its own first-step loss differs
by more than 1e-4 relative, because then the two sides do not compute the
same thing and no speed ratio means anything.

    python bench/train_step.py --dump DIR --threads N [--compile] [--c-loss X]
    python bench/train_step.py --info      (torch version, BLAS, CPU kernel; exits)
"""
import argparse
import os
import re
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from make_fixture import read_llmc  # noqa: E402
from torch_gpt import GPT, train_step  # noqa: E402

LOSS_RTOL = 1e-4


def info():
    """One key=value line: what this torch is and which BLAS it calls."""
    cfg = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=([^,\s]+)", cfg)
    mkl = re.search(r"Math Kernel Library Version ([^\s]+)", cfg)
    onednn = re.search(r"(?:oneDNN|MKL-DNN) v([^\s]+)", cfg)
    par = re.search(r"ATen parallel backend: ([^\n]+)", torch.__config__.parallel_info())
    cap = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else "?"
    print(f"pytorch: version={torch.__version__} python={sys.version.split()[0]} "
          f"blas={blas.group(1) if blas else '?'} "
          f"mkl={mkl.group(1) if mkl else 'no'} onednn={onednn.group(1) if onednn else 'no'} "
          f"parallel={par.group(1).strip() if par else '?'} cpu_capability={cap} "
          f"path={os.path.dirname(torch.__file__)}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", help="directory written by bench_train_step --dump")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (at least 1 "
                    "with --compile, 2 is better: the backward compiles on the first too)")
    ap.add_argument("--cores", type=int, default=0,
                    help="cores the run is meant to use, for the report (default: --threads)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (mode default)")
    ap.add_argument("--c-loss", type=float, default=None,
                    help="the C side's first-step loss; exit 1 when ours differs by > 1e-4 relative")
    ap.add_argument("--info", action="store_true", help="print torch version and BLAS, exit")
    args = ap.parse_args()
    if args.info:
        info()
        return 0
    if not args.dump:
        ap.error("--dump is required")
    if args.compile and args.warmup < 1:
        ap.error("--compile needs --warmup >= 1 (the compile must not be timed)")
    torch.set_num_threads(args.threads)

    cfg, flat = read_llmc(os.path.join(args.dump, "model.bin"))
    raw = np.fromfile(os.path.join(args.dump, "batch.bin"), dtype=np.int32)
    B, T = int(raw[0]), int(raw[1])
    x = torch.from_numpy(raw[2:2 + B * T].reshape(B, T).astype(np.int64))
    y = torch.from_numpy(raw[2 + B * T:2 + 2 * B * T].reshape(B, T).astype(np.int64))

    model = GPT(cfg)
    model.load_llmc(flat)
    del flat
    opt, opt_kind = model.configure_optimizer(1e-3, (0.9, 0.95), 1e-8, 0.1)
    step_model = torch.compile(model) if args.compile else model
    mode = "compile" if args.compile else "eager"

    times, cpu, first_loss, compile_s = [], [], None, 0.0
    for s in range(args.warmup + args.steps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        loss = train_step(model, step_model, opt, x, y)
        dt = (time.perf_counter() - t0) * 1000.0
        dc = (time.process_time() - c0) * 1000.0
        if s == 0:
            first_loss = loss.item()
            compile_s = dt / 1000.0
        if s >= args.warmup:
            times.append(dt)
            cpu.append(dc)
    best, med = min(times), float(np.median(times))
    cores = args.cores or args.threads
    print(f"impl=pytorch-{mode} torch={torch.__version__} optimizer=adamw-{opt_kind} "
          f"threads={args.threads} cores={cores} ms_per_step={best:.1f} median_ms={med:.1f} "
          f"cpu_ms={min(cpu):.1f} tok_s={B * T / (best / 1000.0):.0f} "
          + (f"compile_s={compile_s:.1f} " if args.compile else "")
          + f"first_loss={first_loss:.6f}", flush=True)
    if args.c_loss is not None:
        rel = abs(first_loss - args.c_loss) / max(abs(args.c_loss), 1e-30)
        if not rel <= LOSS_RTOL:
            print(f"FAIL: first-step loss pytorch-{mode}={first_loss:.6f} phalanx={args.c_loss:.6f} "
                  f"relative difference {rel:.2e} > {LOSS_RTOL:.0e}: the two sides do not compute "
                  f"the same step, so no speed ratio is meaningful", file=sys.stderr, flush=True)
            return 1
        print(f"loss_check impl=pytorch-{mode} first_loss={first_loss:.6f} "
              f"phalanx_first_loss={args.c_loss:.6f} rel_diff={rel:.2e} ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
