#!/usr/bin/python3
"""PyTorch eager baseline for bench/train_step: one training step (forward,
backward, gradient clipping, AdamW) of the model and batch that
`bench_train_step --dump DIR` wrote, with the GPT-2 of
tests/reference/make_fixture.py (the model the C reference test is checked
against) in float32. Prints the same key=value line as the C benchmark:
ms_per_step is the best of --steps timed steps, the median is printed too,
cpu_ms the least process CPU time of a step.

    /usr/bin/python3 bench/train_step.py --dump DIR --threads N
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from make_fixture import GPT, read_llmc  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, help="directory written by bench_train_step --dump")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--cores", type=int, default=0,
                    help="cores the run is meant to use, for the report (default: --threads)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg, flat = read_llmc(os.path.join(args.dump, "model.bin"))
    raw = np.fromfile(os.path.join(args.dump, "batch.bin"), dtype=np.int32)
    B, T = int(raw[0]), int(raw[1])
    x = torch.from_numpy(raw[2:2 + B * T].reshape(B, T).astype(np.int64))
    y = torch.from_numpy(raw[2 + B * T:2 + 2 * B * T].reshape(B, T).astype(np.int64))

    model = GPT(cfg, dtype=torch.float32)
    model.load_flat(flat)
    opt = model.optimizer(1e-3, 0.9, 0.95, 1e-8, 0.1)
    times, cpu, first_loss = [], [], None
    for s in range(args.warmup + args.steps):
        c0 = time.process_time()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = (time.perf_counter() - t0) * 1000.0
        dc = (time.process_time() - c0) * 1000.0
        if s == 0:
            first_loss = loss.item()
        if s >= args.warmup:
            times.append(dt)
            cpu.append(dc)
    best, med = min(times), float(np.median(times))
    cores = args.cores or args.threads
    print(f"impl=pytorch-{torch.__version__} threads={args.threads} cores={cores} "
          f"ms_per_step={best:.1f} "
          f"median_ms={med:.1f} cpu_ms={min(cpu):.1f} tok_s={B * T / (best / 1000.0):.0f} first_loss={first_loss:.6f}")


if __name__ == "__main__":
    main()
