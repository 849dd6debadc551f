#!/usr/bin/env python3
"""Fault-tolerance overhead: step time of the full protocol against plain
data-parallel training, in the same run.

  python3 bench/ft_overhead.py [BINDIR] [--model small] [--groups 3] [--steps 30]
                               [--warmup 6] [--rounds 3] [--global-batch 12]
                               [--micro-batch 4] [--seq 128] [--coretype NAME]

Two sides, the same training (model, seed, global batch and its split over
the groups, micro-batches, AdamW schedule, one OpenMP thread per process):
  ft     a phalanx-coordinator and one phalanx-worker per group: the whole
         step protocol (commit vote folded into the gradient allreduce, agent
         thread heartbeating, quorum fencing). The coordinator runs with
         --min-replicas G so the first quorum already holds every group.
  plain  G ft_plain processes: the same per-step compute and one Gloo
         allreduce of the gradients, rendezvous through a directory, nothing
         else (see bench/ft_plain.c).
The sides run one after the other, R rounds, alternating which goes first
(plain, ft, ft, plain, plain, ...) so that a drift in the machine's load
falls on both. Per step, the step time is the mean over the groups of the
`ms=` each rank prints (compute + allreduce + optimizer, timed inside the
process the same way on both sides); the first W steps of each run are not
counted (rendezvous, first-touch allocation). Also printed: the interval
between consecutive commits as the lines arrive here (everything a step
costs, printing included). Overhead = ft / plain - 1, on the median and the
mean; target < 2% (DESIGN.md, "Anchors and targets").

On a machine shared with other work the pooled numbers move with that
work's bursts (a whole run can be 50% slower than the next). Since such
load only ever adds time, the script also prints noise-robust estimates:
the quietest round's median on each side, the 10th percentile of all step
times, and the median of the per-round ratios; and the CPU time per step
summed over the rank processes (/proc/PID/task/*/schedstat sampled at each
progress line over exactly the measured steps, plus the coordinator's),
which contention inflates much less than wall time.

With --coretype NAME, OPENBLAS_CORETYPE=NAME is set for every process of
both sides (never for one side only), and the output says so."""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import (BenchError, Job, Proc, blas_env, environment, kv,  # noqa: E402
                    percentile, prepare_data, run_bench, summary)


def collect(procs):
    """{step: {group: (arrival time, ms, line fields)}} from progress lines."""
    out = {}
    for p in procs:
        for t, line in p.snapshot():
            if line.startswith("progress "):
                f = kv(line)
                out.setdefault(int(f["step"]), {})[f["group"]] = (t, float(f["ms"]), f)
    return out


def finals(procs):
    norms = {}
    for p in procs:
        for _, line in p.snapshot():
            if line.startswith("final "):
                f = kv(line)
                norms[f["group"]] = float(f["param_norm"])
    return norms


def measure(steps_seen, groups, warmup, total):
    """Per-step times (mean over groups of ms=) and commit intervals, for the
    steps after warm-up that every group committed with every group taking part."""
    ms, iv = [], []
    for s in range(warmup + 1, total + 1):
        row, prev = steps_seen.get(s, {}), steps_seen.get(s - 1, {})
        if len(row) != groups or any(int(f["groups"]) != groups for _, _, f in row.values()):
            continue
        if len({f["quorum"] for _, _, f in row.values()}) != 1:
            continue
        ms.append(sum(m for _, m, _ in row.values()) / groups)
        if len(prev) == groups:
            iv.append(1000.0 * (max(t for t, _, _ in row.values()) - max(t for t, _, _ in prev.values())))
    return ms, iv


def cpu_per_step(procs, warmup, total):
    """(CPU ms per step summed over the processes, CPU ms per step of the
    extra sampled process (the coordinator) or 0), over steps warmup..total."""
    own, extra = 0.0, 0.0
    for i, p in enumerate(procs):
        c = p.cpu_by_step()
        if warmup not in c or total not in c:
            return None
        own += (c[total][0] - c[warmup][0]) / 1e6 / (total - warmup)
        if i == 0 and c[total][1]:
            extra = (c[total][1][0] - c[warmup][1][0]) / 1e6 / (total - warmup)
    return own, extra


def train_flags(a):
    return ["--model", a.model, "--data", a.data, "--steps", str(a.steps), "--global-batch", str(a.global_batch),
            "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--seed", str(a.seed), "--threads", "1"]


def run_ft(a, env):
    job = Job(a.bindir, "overhead", coord_args=["--min-replicas", str(a.groups)], env=env)
    try:
        procs = [job.start_worker("g%d" % g, train_flags(a) + ["--eval-batches", "0"]) for g in range(a.groups)]
        for p in procs:
            rc = p.wait(a.timeout)
            if rc != 0:
                raise BenchError("%s exited %d; see %s" % (p.name, rc, p.log_path))
        return collect(procs), finals(procs), cpu_per_step(procs, a.warmup, a.steps), job.dir
    finally:
        job.stop()


def run_plain(a, env):
    d = tempfile.mkdtemp(prefix="phalanx-ftbench-plain-")
    procs = []
    try:
        for r in range(a.groups):
            args = [os.path.join(a.bindir, "ft_plain"), "--rank", str(r), "--ranks", str(a.groups), "--store",
                    os.path.join(d, "store")] + train_flags(a)
            procs.append(Proc(args, os.path.join(d, "rank-%d.log" % r), env=env, name="ft_plain rank %d" % r))
        for p in procs:
            rc = p.wait(a.timeout)
            if rc != 0:
                raise BenchError("%s exited %d; see %s" % (p.name, rc, p.log_path))
        return collect(procs), finals(procs), cpu_per_step(procs, a.warmup, a.steps), d
    finally:
        for p in procs:
            p.stop()


def fmt(s):
    return "median %8.1f  mean %8.1f  p95 %8.1f  (n=%d)" % (s["median"], s["mean"], s["p95"], s["n"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--model", default="small")
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process of both sides")
    ap.add_argument("--data", default="", help="token shards [the demo corpus, prepared in /tmp]")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one run may take")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories (logs)")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)

    print("ft_overhead: model %s, %d groups x 1 rank, global batch %d (micro-batch %d, T %d), seed %d, "
          "1 OpenMP thread per process" % (a.model, a.groups, a.global_batch, a.micro_batch, a.seq, a.seed))
    print("  %d steps per run, the first %d not counted; %d rounds, sides alternating" % (a.steps, a.warmup, a.rounds))
    print("  " + environment(blas_note), flush=True)
    t_start = time.monotonic()
    ms = {"plain": [], "ft": []}
    iv = {"plain": [], "ft": []}
    cpu_ms = {"plain": [], "ft": []}
    round_ratio, round_med = [], []
    norms = {}
    order = ["plain", "ft"]
    for r in range(a.rounds):
        med = {}
        for side in order:
            seen, fin, cpu, d = (run_ft if side == "ft" else run_plain)(a, env)
            m, i = measure(seen, a.groups, a.warmup, a.steps)
            if not m:
                raise BenchError("%s run %d: no step after warm-up was committed by all %d groups (logs in %s)"
                                 % (side, r + 1, a.groups, d))
            ms[side] += m
            iv[side] += i
            if cpu:
                cpu_ms[side].append(cpu)
            norms.setdefault(side, []).append(fin)
            med[side] = statistics.median(m)
            print("round %d %-5s step ms %s | commit interval median %7.1f | CPU ms/step %7.1f%s" %
                  (r + 1, side, fmt(summary(m)), statistics.median(i) if i else float("nan"),
                   cpu[0] if cpu else float("nan"), " + coordinator %.2f" % cpu[1] if cpu and side == "ft" else ""),
                  flush=True)
            if a.keep:
                print("  logs: %s" % d)
            else:
                shutil.rmtree(d, ignore_errors=True)
        round_ratio.append(med["ft"] / med["plain"] - 1)
        round_med.append(med)
        order.reverse()
    sp, sf = summary(ms["plain"]), summary(ms["ft"])
    ip, ifa = summary(iv["plain"]), summary(iv["ft"])
    print()
    print("all rounds, step time (ms, mean over groups of each rank's ms=):")
    print("  plain Gloo allreduce  %s" % fmt(sp))
    print("  fault-tolerant        %s" % fmt(sf))
    print("commit interval (ms, as the lines arrive):")
    print("  plain Gloo allreduce  %s" % fmt(ip))
    print("  fault-tolerant        %s" % fmt(ifa))
    om, oa = sf["median"] / sp["median"] - 1, sf["mean"] / sp["mean"] - 1
    oi = ifa["median"] / ip["median"] - 1
    print("overhead ft/plain - 1: step median %+.2f%%, step mean %+.2f%%, commit interval median %+.2f%%"
          % (100 * om, 100 * oa, 100 * oi))
    print("  per round (median): %s" % ", ".join("%+.2f%%" % (100 * x) for x in round_ratio))
    print("  target < 2%%: %s (on the median step time over all rounds)" % ("met" if om < 0.02 else "NOT met"))
    # Load from other work only ever slows a run down, so the least disturbed
    # runs are the best estimate of each side's own cost.
    qp = min(r["plain"] for r in round_med)
    qf = min(r["ft"] for r in round_med)
    pr = statistics.median(round_ratio)
    p10p, p10f = percentile(ms["plain"], 10), percentile(ms["ft"], 10)
    print("noise-robust estimates (other load only adds time):")
    print("  quietest round's median: plain %.1f ms, ft %.1f ms: %+.2f%%   target < 2%%: %s"
          % (qp, qf, 100 * (qf / qp - 1), "met" if qf / qp - 1 < 0.02 else "NOT met"))
    print("  10th percentile of step times: plain %.1f ms, ft %.1f ms: %+.2f%%" % (p10p, p10f, 100 * (p10f / p10p - 1)))
    print("  median of the per-round ratios: %+.2f%%" % (100 * pr))
    if cpu_ms["plain"] and cpu_ms["ft"]:
        cp = statistics.fmean(c[0] for c in cpu_ms["plain"])
        cf = statistics.fmean(c[0] for c in cpu_ms["ft"])
        cc = statistics.fmean(c[1] for c in cpu_ms["ft"])
        print("CPU time per step, summed over the %d rank processes (less sensitive to the machine's load):" % a.groups)
        print("  plain %.1f ms, ft %.1f ms + coordinator %.2f ms: overhead %+.2f%% (%+.2f%% without the coordinator)"
              % (cp, cf, cc, 100 * ((cf + cc) / cp - 1), 100 * (cf / cp - 1)))
    pn = [v for f in norms["plain"] for v in f.values()]
    fn = [v for f in norms["ft"] for v in f.values()]
    if pn and fn:
        print("same training: final parameter norm plain %.9g, ft %.9g (relative difference %.1e)"
              % (pn[0], fn[0], abs(pn[0] - fn[0]) / abs(pn[0])))
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))


if __name__ == "__main__":
    run_bench(main, "ft_overhead")
