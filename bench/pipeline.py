#!/usr/bin/env python3
"""Pipeline bubble, measured against the theory (docs/architecture.md,
"Pipeline schedules"; results in docs/benchmarks.md, "Pipeline bubble").

For each schedule (gpipe, 1f1b, zb-h1), P stages and M micro-batches, one
group of P ranks trains `small` (4 layers, --seq 64, 2 samples per
micro-batch, one thread per rank) for a few steps on a real coordinator;
every stage logs its busy time (forwards and backwards) and the time inside
its steps (pipeline_time). The measured bubble is the stages' mean idle
share, 1 - busy/total, which also holds the time spent moving activations
over the links; the theory is the schedule's under unit costs
(`phalanx-worker --print-schedule`: (P-1)/(M+P-1) for gpipe and 1f1b with a
backward twice a forward, (P-1)/(3M+P-1) for zb-h1 with F = BI = W).

The same script also runs one rank on the same batch (no pipeline) and
prints each pipeline's step time against it, and (--memory) each stage's
activation memory (the slots its schedule's peak in flight needs, as the
stage allocated them) with --recompute none and block.

Caveat printed with the results: with P ranks on fewer cores than P the
stages share cores, busy time stretches and the idle share understates the
bubble; compare runs of one P with each other, not across machines.

Usage: bench/pipeline.py BINDIR [--P 2,4] [--M 4,8,16] [--steps 6] [--memory P:M]"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "lib"))
from phalanx_test import Job, make_corpus  # noqa: E402

KINDS = ["gpipe", "1f1b", "zb-h1"]


def theory(bindir, kind, P, M):
    out = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--print-schedule", "--pp", str(P),
                          "--microbatches", str(M), "--schedule", kind], capture_output=True, text=True, check=True)
    return float(re.search(r"theory=(\S+)", out.stdout).group(1))


def run(bindir, data, P, M, kind, steps, extra=()):
    """(mean idle share over the stages, median step ms on rank 0, activation MB by stage)."""
    job = Job(bindir, name="bench-pp%d-m%d-%s" % (P, M, kind))
    try:
        job.start_coordinator()
        flags = ["--steps", str(steps), "--model", "small", "--seq", "64", "--data", data, "--global-batch",
                 str(2 * M), "--micro-batch", "2", "--threads", "1", "--eval-batches", "0"]
        if P > 1:
            flags += ["--pp", str(P), "--microbatches", str(M), "--schedule", kind]
        flags += list(extra)
        for r in range(P):
            job.start_worker("g0", r, P, flags)
        for p in job.workers.values():
            if p.wait(timeout=900) != 0:
                raise SystemExit("a rank failed; logs in %s" % job.dir)
        idle, mem = [], {}
        for r in range(P):
            with open(os.path.join(job.dir, "worker-g0-%d.log" % r)) as f:
                text = f.read()
            idle += [float(x) for x in re.findall(r"pipeline_time .* idle=(\S+)", text)]
            for st, mb in re.findall(r"pipeline_time .*? stage=(\d+) .* activation_mb=(\S+)", text):
                mem[int(st)] = float(mb)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            ms = [float(x) for x in re.findall(r"^progress step=\d+ .*? ms=(\S+)", f.read(), re.M)]
        return (statistics.mean(idle) if idle else 0.0), statistics.median(ms[1:] or ms), mem
    finally:
        job.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir")
    ap.add_argument("--P", default="2,4")
    ap.add_argument("--M", default="4,8,16")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--memory", default="", help="P:M: only the activation memory table, at P stages, M micro-batches")
    a = ap.parse_args()
    data = make_corpus(a.bindir, tempfile.mkdtemp(prefix="phalanx-bench-pp-"))
    print("cores=%d (OPENBLAS_CORETYPE %s, the same for every run)" % (os.cpu_count(), os.environ.get(
        "OPENBLAS_CORETYPE", "unset")))
    if a.memory:
        P, M = (int(x) for x in a.memory.split(":"))
        print("activation MB per stage, P=%d M=%d (small, 2 samples x 64 positions per micro-batch)" % (P, M))
        print("%-6s %5s %10s %10s %7s" % ("kind", "stage", "none", "block", "ratio"))
        for kind in KINDS:
            off = run(a.bindir, data, P, M, kind, 2)[2]
            on = run(a.bindir, data, P, M, kind, 2, ["--recompute", "block"])[2]
            for st in sorted(off):
                print("%-6s %5d %10.2f %10.2f %7.3f" % (kind, st, off[st], on[st], on[st] / off[st]), flush=True)
        return
    print("%-6s %3s %3s %9s %9s %9s %11s" % ("kind", "P", "M", "measured", "theory", "ratio", "step_vs_1"))
    for P in [int(x) for x in a.P.split(",")]:
        for M in [int(x) for x in a.M.split(",")]:
            one_ms = run(a.bindir, data, 1, M, "none", a.steps)[1]
            for kind in KINDS:
                idle, ms, _ = run(a.bindir, data, P, M, kind, a.steps)
                th = theory(a.bindir, kind, P, M)
                print("%-6s %3d %3d %9.3f %9.3f %9.2f %11.2f" % (kind, P, M, idle, th, idle / th if th else 0,
                                                                  ms / one_ms), flush=True)
        if P > os.cpu_count():
            print("  (P=%d ranks on %d cores: stages share cores, the idle share understates the bubble)" %
                  (P, os.cpu_count()))


if __name__ == "__main__":
    main()
