#!/usr/bin/env python3
"""Sharded replica groups (FSDP, TP, both, HSDP) on one model: step time,
bytes sent per rank per step against the theory, and the losses against one
rank holding the whole model.

  python3 bench/sharded.py [BINDIR] [--model small] [--steps 12] [--warmup 2]
                           [--global-batch 8] [--seq 256] [--only NAME,...]
                           [--coretype NAME] [--keep]

Each layout trains the same job (model, seed, global batch, data) for S
steps with a real coordinator and real workers on loopback, one OpenMP
thread per rank and --eval-batches 0 (the final eval's forwards would
gather parameters too). The global batch is split over groups x data ranks
(fsdp ranks, or the W ranks of a replicated group; tp ranks share their
samples), and --micro-batch is set to each rank's share, so that a step is
one forward and one backward per rank.

Printed per layout:
  step ms   median of the `ms=` rank 0 of group g0 prints, steps --warmup+1..S
            (the first ones are start-up: first-touch allocation, the first quorum);
            min ms the fastest of those steps (load from other work on the
            machine only adds time, so the minimum is the least disturbed);
            CPU ms/step the CPU time of all ranks together (every thread,
            /proc/PID/task/*/schedstat, sampled at rank 0's progress lines)
            over the same steps: the work, much less moved by other load
  fsdp      bytes sent per rank per step by the fsdp all-gathers and
            reduce-scatters. exact: this schedule, unit by unit: the forward
            gathers every unit, the backward gathers every layer again except
            the last (unit 0 and the last layer stay gathered), every unit's
            gradients are reduce-scattered: (3 N - N_unit0 - N_last) (F-1)/F
            floats, 2 N (F-1)/F with --fsdp-keep-params; N = the floats of
            this rank's tp slice of the model, each unit padded to a multiple
            of F. textbook: 3 N (F-1)/F (ZeRO-3 without the two kept units).
  tp        bytes sent per rank per step by the tensor-parallel sums: 4 per
            block (2 forward, 2 backward) of B x T x C floats (B the rank's
            micro-batch), each a ring all-reduce: 2 (T-1)/T of the buffer.
  dp        bytes sent per rank per step by the gradient all-reduces: inside
            a replicated group 2 (W-1)/W N, across P groups 2 (P-1)/P of the
            rank's gradient (its shard under FSDP/TP, the whole model for
            plain DP).
  loss      largest relative difference of a step's loss (the progress line,
            6 decimals) from the single rank's at the same step.

The measured bytes come from the `comm_sent` line each worker logs at the
end: counters the worker adds up from the sizes of the collectives it runs,
with the ring algorithm's share per rank; they are not read off the network.
So they check the schedule (which collectives run, how large), not the wire
traffic. Not in them: the few floats of the commit vote and the gradient
norm that a sharded group sums inside (the dp counters do include the
vote's 5 floats riding on the gradient all-reduce). A row PASSes when every
rank's bytes are within 10% of the exact theory and every loss within 1e-5
relative of the single rank's; the script exits 1 if any row fails. Times are printed, never checked: on a small
machine the ranks of a 4-rank layout share the cores."""
import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import BenchError, Proc, blas_env, environment, free_port, kv, prepare_data, run_bench  # noqa: E402

# name, groups, ranks per group, worker layout flags
LAYOUTS = [
    ("single", 1, 1, []),
    ("dp2 (replicated)", 1, 2, []),
    ("fsdp2", 1, 2, ["--fsdp", "2"]),
    ("fsdp4", 1, 4, ["--fsdp", "4"]),
    ("tp2", 1, 2, ["--tp", "2"]),
    ("tp4", 1, 4, ["--tp", "4"]),
    ("fsdp2xtp2", 1, 4, ["--fsdp", "2", "--tp", "2"]),
    ("fsdp2 keep-params", 1, 2, ["--fsdp", "2", "--fsdp-keep-params"]),
    ("hsdp 2g x fsdp2", 2, 2, ["--fsdp", "2"]),
    ("dp 2g x 1", 2, 1, []),
]
PRESETS = {  # model/gpt.c
    "tiny": dict(L=2, C=64, NH=4, maxT=64, V=256, Vp=256),
    "small": dict(L=4, C=256, NH=8, maxT=256, V=256, Vp=256),
}
TOLERANCE = 0.10   # measured bytes / exact theory
LOSS_REL = 1e-5
COMM_RE = re.compile(r"comm_sent group=(\S+) rank=(\d+) steps=(\d+) fsdp_bytes=(\S+) tp_bytes=(\S+) "
                     r"group_bytes=(\S+) cross_bytes=(\S+)")


def flag(flags, name, default=1):
    return int(flags[flags.index(name) + 1]) if name in flags else default


# ---- theory ------------------------------------------------------------------

def padded(n, F):
    return -(-n // F) * F


def units(m, T):
    """Floats of each unit of one tp rank's slice: [unit 0, layer 0, ...].
    A layer's qkvw, qkvb, attprojw, fcw, fcb, fcprojw (12C^2 + 7C) are split
    over the T ranks; its LayerNorms and the two row-parallel biases (6C) and
    unit 0 (wte, wpe, lnfw, lnfb) are replicated."""
    C = m["C"]
    unit0 = m["Vp"] * C + m["maxT"] * C + 2 * C
    layer = (12 * C * C + 7 * C) // T + 6 * C
    return [unit0] + [layer] * m["L"]


def theory(m, groups, W, flags, batch, seq):
    """Bytes per rank per step: dict with fsdp (exact), fsdp_textbook, tp, dp."""
    F, T = flag(flags, "--fsdp"), flag(flags, "--tp")
    keep = "--fsdp-keep-params" in flags
    u = [padded(x, F) for x in units(m, T)]
    n = sum(u)
    sharded = F > 1 or T > 1
    if keep:
        moved = 2 * n
    else:
        moved = 3 * n - u[0] - u[-1]
    out = {
        "fsdp": 4.0 * moved * (F - 1) / F,
        "fsdp_textbook": 4.0 * 3 * n * (F - 1) / F,
        "tp": 4.0 * 4 * m["L"] * 2 * (T - 1) / T * batch * seq * m["C"],
    }
    dp = 0.0
    if not sharded and W > 1:  # a replicated group all-reduces the whole gradient inside
        dp += 4.0 * 2 * (W - 1) / W * n
    if groups > 1:
        dp += 4.0 * 2 * (groups - 1) / groups * (n // F)
    out["dp"] = dp
    return out


# ---- one run -------------------------------------------------------------------

def run_layout(a, env, name, groups, W, flags):
    """Trains one layout; returns (g0 rank 0's progress fields by step,
    [comm_sent fields of every rank], final lines, CPU ms per timed step
    summed over the ranks, scratch dir, the ranks' micro-batch)."""
    d = tempfile.mkdtemp(prefix="phalanx-shbench-")
    endpoint = "tcp://127.0.0.1:%d" % free_port()
    coord = Proc([os.path.join(a.bindir, "phalanx-coordinator"), "--bind", endpoint, "--job", "sharded",
                  "--min-replicas", str(groups), "--events", "file:" + os.path.join(d, "events.jsonl")],
                 os.path.join(d, "coordinator.log"), env=env, name="coordinator")
    data_ranks = groups * (W if not flags else flag(flags, "--fsdp"))
    batch = a.global_batch // data_ranks
    common = ["--coordinator", endpoint, "--connect-timeout", "60", "--ranks-per-group", str(W),
              "--model", a.model, "--data", a.data, "--steps", str(a.steps), "--global-batch", str(a.global_batch),
              "--micro-batch", str(batch), "--seq", str(a.seq), "--seed", str(a.seed), "--threads", "1",
              "--eval-batches", "0"] + flags
    procs = []
    try:
        # g0 rank 0 (the one that prints progress) starts last, so that at
        # each of its progress lines it samples the CPU time of every rank
        for g, r in [(g, r) for g in range(groups) for r in range(W) if (g, r) != (0, 0)] + [(0, 0)]:
            procs.append(Proc([os.path.join(a.bindir, "phalanx-worker"), "--group", "g%d" % g, "--rank", str(r)]
                              + common, os.path.join(d, "worker-g%d-%d.log" % (g, r)), env=env,
                              name="worker g%d rank %d" % (g, r), cpu_pids=[p.pid for p in procs]))
        for p in procs:
            rc = p.wait(a.timeout)
            if rc != 0:
                raise BenchError("%s: %s exited %d; see %s" % (name, p.name, rc, p.log_path))
    finally:
        for p in procs:
            p.stop()
        coord.stop()
    rank0 = procs[-1]
    progress, finals = {}, []
    for p in procs:
        for _, line in p.snapshot():
            if line.startswith("final "):
                finals.append(kv(line))
            if p is rank0 and line.startswith("progress "):
                f = kv(line)
                progress[int(f["step"])] = f
    sent = []
    for p in procs:
        with open(p.log_path) as f:
            m = COMM_RE.search(f.read())
        if not m:
            raise BenchError("%s: no comm_sent line in %s" % (name, p.log_path))
        sent.append({"group": m.group(1), "rank": int(m.group(2)), "steps": int(m.group(3)),
                     "fsdp": float(m.group(4)), "tp": float(m.group(5)),
                     "dp": float(m.group(6)) + float(m.group(7))})
    if sorted(progress) != list(range(1, a.steps + 1)):
        raise BenchError("%s: rank 0 printed progress for steps %s, not 1..%d (logs in %s)"
                         % (name, sorted(progress), a.steps, d))
    c = rank0.cpu_by_step()
    lo, hi = c.get(a.warmup) if a.warmup else None, c.get(a.steps)
    cpu = float("nan")
    if hi and (lo or not a.warmup):
        before = lo[0] + sum(lo[1]) if lo else 0
        cpu = (hi[0] + sum(hi[1]) - before) / 1e6 / (a.steps - a.warmup)
    return progress, sent, finals, cpu, d, batch


# ---- report -------------------------------------------------------------------

def ratio_cell(measured, exact):
    """'measured/exact' as text, and whether it is within the tolerance
    (an exact 0 must be measured 0)."""
    if exact == 0:
        return ("-" if measured == 0 else "%.3g != 0" % measured), measured == 0
    r = measured / exact
    return "%.4f" % r, abs(r - 1) <= TOLERANCE


def mb(x):
    return "%.3f" % (x / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--model", default="small", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2, help="steps not timed [2]")
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--only", default="", help="comma-separated layout names (the single rank always runs)")
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process")
    ap.add_argument("--data", default="", help="token shards [the demo corpus, prepared in /tmp]")
    ap.add_argument("--timeout", type=float, default=300, help="seconds one layout may take")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directories (logs)")
    a = ap.parse_args()
    if not 0 <= a.warmup < a.steps:
        ap.error("--warmup must be below --steps")
    m = PRESETS[a.model]
    if not 1 <= a.seq <= m["maxT"]:
        ap.error("--seq must be 1..%d for %s" % (m["maxT"], a.model))
    layouts = LAYOUTS
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {n for n, _, _, _ in LAYOUTS}
        if unknown:
            ap.error("--only: unknown layout(s) %s; known: %s" % (", ".join(sorted(unknown)),
                                                                  ", ".join(n for n, _, _, _ in LAYOUTS)))
        layouts = [l for l in LAYOUTS if l[0] == "single" or l[0] in want]
    for name, groups, W, flags in layouts:
        data_ranks = groups * (W if not flags else flag(flags, "--fsdp"))
        if a.global_batch % data_ranks:
            ap.error("--global-batch %d does not split evenly over %s's %d data ranks" % (a.global_batch, name,
                                                                                         data_ranks))
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)

    N = sum(units(m, 1))
    print("sharded: model %s (N = %d parameters), global batch %d, T %d, %d steps per layout, step ms = median "
          "of steps %d..%d, 1 OpenMP thread per rank, seed %d" % (a.model, N, a.global_batch, a.seq, a.steps,
                                                                  a.warmup + 1, a.steps, a.seed))
    print("  bytes: MB (1e6) sent per rank per step, from the workers' comm_sent counters (ring estimates from the "
          "collective sizes); ratio = measured / exact theory, must be within %.0f%%" % (100 * TOLERANCE))
    print("  " + environment(blas_note), flush=True)
    t_start = time.monotonic()
    head = ("| layout | groups x ranks | batch/rank | step ms | min ms | CPU ms/step | fsdp MB | exact | ratio | textbook 3N(F-1)/F | fsdp / textbook "
            "| tp MB | theory | ratio | dp MB | theory | ratio | loss max rel diff | result |")
    print()
    print(head)
    print("|" + "---|" * (head.count("|") - 1), flush=True)
    failed, base = [], None
    for name, groups, W, flags in layouts:
        progress, sent, finals, cpu, d, batch = run_layout(a, env, name, groups, W, flags)
        th = theory(m, groups, W, flags, batch, a.seq)
        ok = True
        per = {}
        for kind in ("fsdp", "tp", "dp"):
            vals = [s[kind] / s["steps"] for s in sent]
            per[kind] = statistics.fmean(vals)
            ok &= all(ratio_cell(v, th[kind])[1] for v in vals)  # every rank, not only the mean
        fails = sum(int(f.get("failures", "0")) for f in finals)
        timed = [float(progress[s]["ms"]) for s in range(a.warmup + 1, a.steps + 1)]
        losses = {s: float(f["loss"]) for s, f in progress.items()}
        if base is None:
            base = losses
        worst = max(abs(losses[s] - base[s]) / max(abs(base[s]), 1e-30) for s in base)
        ok &= worst <= LOSS_REL and fails == 0
        cells = [name, "%d x %d" % (groups, W), str(batch), "%.1f" % statistics.median(timed), "%.1f" % min(timed), "%.0f" % cpu]
        for kind in ("fsdp", "tp", "dp"):
            cells += [mb(per[kind]), mb(th[kind]), ratio_cell(per[kind], th[kind])[0]]
            if kind == "fsdp":
                tb = th["fsdp_textbook"]
                cells += [mb(tb), "%.3f" % (per["fsdp"] / tb) if tb else "-"]
        cells += ["%.1e" % worst, ("PASS" if ok else "FAIL") + ("" if not fails else " (%d failed steps)" % fails)]
        print("| " + " | ".join(cells) + " |", flush=True)
        if not ok:
            failed.append(name)
        if a.keep or not ok:
            print("  logs of %s: %s" % (name, d), flush=True)
        else:
            shutil.rmtree(d, ignore_errors=True)
    print()
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))
    if failed:
        raise BenchError("FAIL: %s (bytes off the exact theory by more than %.0f%%, a loss off the single rank's "
                         "by more than %g, or a failed step)" % (", ".join(failed), 100 * TOLERANCE, LOSS_REL))
    print("PASS: every layout's bytes within %.0f%% of the exact theory and its losses within %g of one rank's"
          % (100 * TOLERANCE, LOSS_REL))


if __name__ == "__main__":
    run_bench(main, "sharded")
