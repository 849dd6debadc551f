#!/usr/bin/env python3
"""Data-parallel gradient reduction in buckets overlapped with the backward
(--bucket-mb, worker/reducer.c) against the one-shot reduction after it, in
the same run.

  python3 bench/dp_buckets.py [BINDIR] [--model small] [--groups 3] [--steps 20]
                              [--warmup 5] [--rounds 3] [--bucket-mb 25]
                              [--global-batch 12] [--micro-batch 4] [--seq 128]
                              [--coretype NAME]

Both sides are the full fault-tolerant trainer (a coordinator and one
phalanx-worker per group, bench/ft_overhead.py's ft side), one OpenMP thread
per process; they differ only in --bucket-mb. Rounds alternate which side
goes first. Printed per side: the median and the quietest round's median of
the per-step time (mean over groups of the ms= each rank prints) and the CPU
time per step summed over the processes; then the ratio buckets / one-shot.
The final parameter norms of the two sides must agree to 1e-5 (the same
training; bucket sums only add in another order)."""
import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import BenchError, blas_env, environment, prepare_data, run_bench  # noqa: E402
from ft_overhead import measure, run_ft  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--model", default="small")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bucket-mb", type=float, default=25.0)
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process of both sides")
    ap.add_argument("--data", default="")
    ap.add_argument("--timeout", type=float, default=600)
    a = ap.parse_args()
    if a.warmup >= a.steps or a.rounds < 1:
        ap.error("need --warmup < --steps and --rounds >= 1")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)
    print("dp_buckets: model %s, %d groups x 1 rank, global batch %d (micro-batch %d, T %d), buckets of %g MiB "
          "vs one-shot, 1 OpenMP thread per process" % (a.model, a.groups, a.global_batch, a.micro_batch, a.seq,
                                                        a.bucket_mb))
    print("  " + environment(blas_note), flush=True)
    sides = {"oneshot": [], "buckets": []}
    cpu = {"oneshot": [], "buckets": []}
    norms = {}
    for r in range(a.rounds):
        order = ["oneshot", "buckets"] if r % 2 == 0 else ["buckets", "oneshot"]
        for side in order:
            extra = ["--bucket-mb", str(a.bucket_mb)] if side == "buckets" else []
            seen, fin, c, _ = run_ft(a, env, extra=extra)
            ms, _ = measure(seen, a.groups, a.warmup, a.steps)
            if not ms:
                raise BenchError("%s: no measured steps" % side)
            sides[side].append(statistics.median(ms))
            if c:
                cpu[side].append(c[0])
            norms.setdefault(side, fin)
            print("  round %d %-7s median step %8.1f ms  cpu/step %8.1f ms" %
                  (r + 1, side, statistics.median(ms), c[0] if c else float("nan")), flush=True)
    for g in norms["oneshot"]:
        a_, b_ = norms["oneshot"][g], norms["buckets"].get(g, float("nan"))
        if not abs(a_ - b_) <= 1e-5 * abs(a_):
            raise BenchError("group %s: param_norm %.9g one-shot vs %.9g buckets" % (g, a_, b_))
    for side in ("oneshot", "buckets"):
        print("%-7s step ms: median of rounds %8.1f, quietest round %8.1f | cpu ms/step %8.1f" %
              (side, statistics.median(sides[side]), min(sides[side]),
               statistics.median(cpu[side]) if cpu[side] else float("nan")))
    print("ratio buckets/one-shot: step %.3f (quietest %.3f), cpu %.3f" %
          (statistics.median(sides["buckets"]) / statistics.median(sides["oneshot"]),
           min(sides["buckets"]) / min(sides["oneshot"]),
           (statistics.median(cpu["buckets"]) / statistics.median(cpu["oneshot"])) if cpu["buckets"] else float("nan")))


if __name__ == "__main__":
    run_bench(main, "dp_buckets")
