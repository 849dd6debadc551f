#!/usr/bin/env python3
"""Fault-tolerance overhead: step time of the full protocol against plain
data-parallel training, in the same run.

  python3 bench/ft_overhead.py [BINDIR] [--model small] [--groups 3] [--steps 30]
                               [--warmup 6] [--rounds 3] [--global-batch 12]
                               [--micro-batch 4] [--seq 128] [--coretype NAME]
                               [--instructions [--count-steps 4,12]]

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
mean; target < 2% (docs/architecture.md, "Targets").

On a machine shared with other work the pooled numbers move with that
work's bursts (a whole run can be 50% slower than the next). Since such
load only ever adds time, the script also prints noise-robust estimates:
the quietest round's median on each side, the 10th percentile of all step
times, and the median of the per-round ratios; and the CPU time per step
summed over the rank processes (/proc/PID/task/*/schedstat sampled at each
progress line over exactly the measured steps, plus the coordinator's),
which contention inflates much less than wall time.

With --instructions, each side also runs twice more with its rank 0 (g0,
r0) under valgrind's callgrind, for S1 and S2 steps (--count-steps, 4,12),
the other ranks and the coordinator natively. Instructions are counted per
thread, the same on every run of the same work however loaded the machine
is. The training thread's count per step is the difference of the two runs
over S2 - S1 (start-up, rendezvous and the final report cancel out). The
other threads (agent, ZeroMQ and Gloo I/O, watchdog) wake on the clock, and
under callgrind the clock runs ~100x slower than the work, so they are
given per second of the traced run and, when timed rounds ran, also added
at the native commit interval. --rounds 0 --instructions counts only.
Callgrind sees user space only: the kernel's side of system calls and
context switches is not in these counts.

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
from ft_lib import (BenchError, Job, Proc, blas_env, callgrind_cmd, callgrind_threads,  # noqa: E402
                    environment, kv, percentile, prepare_data, run_bench, summary)


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


def train_flags(a, steps=None):
    return ["--model", a.model, "--data", a.data, "--steps", str(steps or a.steps),
            "--global-batch", str(a.global_batch), "--micro-batch", str(a.micro_batch), "--seq", str(a.seq),
            "--seed", str(a.seed), "--threads", "1"]


# Under callgrind a process runs ~100x slower and valgrind runs one thread
# at a time, so the traced worker's agent can go seconds without a
# heartbeat: the coordinator of a counting run waits 20 s for one (it also
# waits that long after its start before it forms the first quorum: the
# window for workers of a restarted coordinator), and every rank of a
# counting run allows slow collectives. Neither changes the work of a step.
COUNT_COORD = ["--heartbeat-timeout-ms", "20000", "--stall-timeout-ms", "3600000"]
COUNT_COMM = ["--comm-timeout-ms", "600000"]


def run_ft(a, env, steps=None, wrap0=(), extra=()):
    """The ft side; wrap0: a command group 0's worker runs under; extra:
    more worker flags (bench/dp_buckets.py)."""
    steps = steps or a.steps
    job = Job(a.bindir, "overhead", coord_args=["--min-replicas", str(a.groups)] + (COUNT_COORD if wrap0 else []),
              env=env)
    try:
        flags = train_flags(a, steps) + ["--eval-batches", "0"] + (COUNT_COMM if wrap0 else []) + list(extra)
        procs = [job.start_worker("g%d" % g, flags, wrap=wrap0 if g == 0 else ()) for g in range(a.groups)]
        for p in procs:
            rc = p.wait(a.timeout if not wrap0 else max(a.timeout, 3600))
            if rc != 0:
                raise BenchError("%s exited %d; see %s" % (p.name, rc, p.log_path))
        return collect(procs), finals(procs), cpu_per_step(procs, a.warmup, steps), job.dir
    finally:
        job.stop()


def run_plain(a, env, steps=None, wrap0=()):
    """The plain side; wrap0: a command rank 0 runs under."""
    steps = steps or a.steps
    d = tempfile.mkdtemp(prefix="phalanx-ftbench-plain-")
    procs = []
    try:
        for r in range(a.groups):
            args = [os.path.join(a.bindir, "ft_plain"), "--rank", str(r), "--ranks", str(a.groups), "--store",
                    os.path.join(d, "store")] + train_flags(a, steps) + (COUNT_COMM if wrap0 else [])
            procs.append(Proc(list(wrap0 if r == 0 else ()) + args, os.path.join(d, "rank-%d.log" % r), env=env,
                              name="ft_plain rank %d" % r))
        for p in procs:
            rc = p.wait(a.timeout if not wrap0 else max(a.timeout, 3600))
            if rc != 0:
                raise BenchError("%s exited %d; see %s" % (p.name, rc, p.log_path))
        return collect(procs), finals(procs), cpu_per_step(procs, a.warmup, steps), d
    finally:
        for p in procs:
            p.stop()


def count_instructions(a, env, side):
    """Instructions per step of rank 0 of one side, with callgrind: two runs
    of --count-steps S1 and S2 steps, everything else the same, so that
    start-up, rendezvous and the final report cancel out:
    (I(S2) - I(S1)) / (S2 - S1). Returns (training thread per step, the
    other threads per second of the traced runs (difference over the
    difference of their wall times), that difference in seconds, whether
    every step of both runs was committed by every group in one quorum)."""
    s1, s2 = a.count_steps
    res = {}
    for steps in (s1, s2):
        d = tempfile.mkdtemp(prefix="phalanx-ftbench-count-")
        out = os.path.join(d, "callgrind.out")
        t0 = time.monotonic()
        seen, _, _, logs = (run_ft if side == "ft" else run_plain)(a, env, steps, callgrind_cmd(out))
        wall = time.monotonic() - t0
        threads = callgrind_threads(out)
        if not threads or threads[0][0] != 1:
            raise BenchError("%s: no callgrind output in %s" % (side, d))
        clean = all(len(seen.get(s, {})) == a.groups and len({f["quorum"] for _, _, f in seen[s].values()}) == 1
                    for s in range(1, steps + 1))
        res[steps] = (threads[0][1], sum(n for _, n in threads[1:]), wall, clean)
        if a.keep:
            print("  callgrind output and logs: %s %s" % (d, logs))
        else:
            shutil.rmtree(d, ignore_errors=True)
            shutil.rmtree(logs, ignore_errors=True)
    main = (res[s2][0] - res[s1][0]) / float(s2 - s1)
    # The other threads' one-off work (start-up, the join's hashing) cancels
    # out in the difference too; what is left follows the clock.
    other = (res[s2][1] - res[s1][1]) / max(res[s2][2] - res[s1][2], 1.0)
    return main, other, res[s2][2] - res[s1][2], res[s1][3] and res[s2][3]


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
    ap.add_argument("--instructions", action="store_true",
                    help="also count instructions per step of each side's rank 0 with valgrind's callgrind")
    ap.add_argument("--count-steps", default="4,12", metavar="S1,S2",
                    help="step counts of the two callgrind runs per side; per step = difference / (S2 - S1)")
    a = ap.parse_args()
    if a.warmup >= a.steps:
        ap.error("--warmup must be below --steps")
    if a.rounds < 0 or (a.rounds == 0 and not a.instructions):
        ap.error("--rounds must be at least 1 (0 only with --instructions)")
    try:
        a.count_steps = tuple(int(x) for x in a.count_steps.split(","))
        if len(a.count_steps) != 2 or not 1 <= a.count_steps[0] < a.count_steps[1]:
            raise ValueError
    except ValueError:
        ap.error("--count-steps must be S1,S2 with 1 <= S1 < S2")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)

    print("ft_overhead: model %s, %d groups x 1 rank, global batch %d (micro-batch %d, T %d), seed %d, "
          "1 OpenMP thread per process" % (a.model, a.groups, a.global_batch, a.micro_batch, a.seq, a.seed))
    print("  %d steps per run, the first %d not counted; %d rounds, sides alternating" % (a.steps, a.warmup, a.rounds))
    print("  " + environment(blas_note), flush=True)
    t_start = time.monotonic()
    step_ms = timed_rounds(a, env) if a.rounds else {}
    if a.instructions:
        report_instructions(a, env, step_ms)
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))


def report_instructions(a, env, step_ms):
    """Instructions per step of each side's rank 0 (callgrind), printed with
    the other threads' rate, which follows the clock, not the steps."""
    s1, s2 = a.count_steps
    print()
    print("instructions per step, rank 0 of each side under callgrind (user space only; the difference of a "
          "%d- and a %d-step run):" % (s1, s2), flush=True)
    got = {}
    for side in ("plain", "ft"):
        got[side] = count_instructions(a, env, side)
        main, other_s, wall, clean = got[side]
        print("  %-5s training thread %12.0f per step | other threads %9.0f per second of the traced runs (over %.0f s)%s"
              % (side, main, other_s, wall, "" if clean else "  [NOT every step committed by every group in one quorum]"),
              flush=True)
    mp, mf = got["plain"][0], got["ft"][0]
    print("  training thread: ft/plain - 1 = %+.3f%% (%+.0f instructions per step)" % (100 * (mf / mp - 1), mf - mp))
    if step_ms:
        # The other threads (agent, ZeroMQ and Gloo I/O, watchdog) wake on
        # timers and messages: per native step they cost their rate times
        # the native step time, not the rate inside the slowed-down run.
        ep = mp + got["plain"][1] * step_ms["plain"] / 1000
        ef = mf + got["ft"][1] * step_ms["ft"] / 1000
        print("  with the other threads at the timed rounds' median commit interval (plain %.1f ms, ft %.1f ms): "
              "plain %.0f, ft %.0f per step: %+.3f%%" % (step_ms["plain"], step_ms["ft"], ep, ef, 100 * (ef / ep - 1)))
    print("  note: callgrind counts each byte of a `rep movsb`/`rep stosb` (glibc's memcpy and memset of large "
          "blocks) as one instruction, so copies weigh more here than in time")


def timed_rounds(a, env):
    """The timed comparison; returns {side: median commit interval in ms over all rounds}."""
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
    return {"plain": ip["median"], "ft": ifa["median"]}


if __name__ == "__main__":
    run_bench(main, "ft_overhead")
