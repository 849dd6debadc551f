#!/usr/bin/env python3
"""A planned leave: what taking a group out of a running job costs the others,
`phalanxctl drain` against the worker's own SIGTERM (the baseline), in the
same script.

  python3 bench/ft_drain.py [BINDIR] [--reps 5] [--model small] [--global-batch 12]
                            [--micro-batch 4] [--seq 128] [--coretype NAME]

Per rep and per side (alternated, drain first): a phalanx-coordinator and
three phalanx-workers (g0, g1, g2, one rank each) train; once every group has
committed --settle-steps steps together, g2 leaves: by `phalanxctl drain g2`
over the control plane, or by SIGTERM to its worker. Every progress line of
g0 is time-stamped as it arrives. Measured on g0:
  - the leave's cost: the time from g0's last step before the leave to its
    --window-th step after it, minus that many steps at g0's median step
    time once the two survivors train alone (the same for both sides: the
    survivors take g2's share of the same global batch);
  - the steps g0 retried (its final line's failures=) and the step_failed
    events of the survivors.
The drain is expected to cost one rendezvous of the new quorum and no retried
step; SIGTERM a retried step as well (the step in flight fails when g2's
connections close). OPENBLAS_CORETYPE (--coretype) is set alike for every
process of both sides, or left as the environment has it; printed either way."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import BenchError, Job, blas_env, environment, kv, prepare_data, run_bench, wait_for  # noqa: E402


def steps_of(proc):
    """{step: arrival time} of a worker's progress lines (the first of each step)."""
    out = {}
    for t, l in proc.snapshot():
        if l.startswith("progress "):
            out.setdefault(int(kv(l)["step"]), t)
    return out


def one(a, env, side):
    """One job; g2 leaves by `side` ('drain' or 'sigterm'). Returns (cost s, g0 retries, survivor step_failed)."""
    steps = a.settle_steps + a.window + 40
    flags = ["--model", a.model, "--data", a.data, "--steps", str(steps), "--global-batch", str(a.global_batch),
             "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--threads", "1", "--eval-batches", "0"]
    job = Job(a.bindir, "drain-bench", env=env)
    try:
        ws = {g: job.start_worker(g, flags) for g in ("g0", "g1", "g2")}
        wait_for(lambda: any(int(kv(l).get("groups", 0)) == 3 and int(kv(l)["step"]) >= a.settle_steps
                             for _, l in ws["g0"].snapshot() if l.startswith("progress ")), 600,
                 "%d steps of all three groups" % a.settle_steps)
        before = max(steps_of(ws["g0"]))
        if side == "drain":
            r = subprocess.run([os.path.join(a.bindir, "phalanxctl"), "drain", "g2", "--coordinator", job.endpoint,
                                "--wait-s", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
            if r.returncode != 0:
                raise BenchError("phalanxctl drain: %s" % r.stdout)
        else:
            os.kill(ws["g2"].pid, signal.SIGTERM)
        for g in ("g0", "g1"):
            if ws[g].wait(600) != 0:
                raise BenchError("%s failed; see %s" % (g, ws[g].log_path))
        at = steps_of(ws["g0"])
        final = [kv(l[len("final "):]) for _, l in ws["g0"].snapshot() if l.startswith("final ")]
        with open(os.path.join(job.dir, "events.jsonl")) as f:
            evs = [json.loads(l) for l in f if l.strip()]
    finally:
        job.stop()
    end = before + a.window
    if end + 10 > steps or any(s not in at for s in range(before, steps + 1)):
        raise BenchError("g0 printed steps %s" % sorted(at))
    alone = sorted(at[s] - at[s - 1] for s in range(end + 1, steps + 1))
    median = alone[len(alone) // 2]
    cost = at[end] - at[before] - a.window * median
    retries = int(final[0]["failures"]) if final else -1
    failed = sum(1 for e in evs if e["type"] == "step_failed" and e.get("group") in ("g0", "g1")
                 and e.get("reason") not in ("finished",))
    return cost, retries, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--reps", type=int, default=5, help="jobs per side [5]")
    ap.add_argument("--model", default="small", help="model [small]")
    ap.add_argument("--global-batch", type=int, default=12, help="[12]")
    ap.add_argument("--micro-batch", type=int, default=4, help="[4]")
    ap.add_argument("--seq", type=int, default=128, help="[128]")
    ap.add_argument("--settle-steps", type=int, default=10, help="steps of all three groups before the leave [10]")
    ap.add_argument("--window", type=int, default=10, help="g0's steps after the leave counted in its cost [10]")
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process (both sides alike)")
    ap.add_argument("--data", default="", help="token shards [the demo corpus, prepared once]")
    a = ap.parse_args()
    if a.reps < 1 or a.window < 2 or a.settle_steps < 1:
        ap.error("--reps >= 1, --window >= 2, --settle-steps >= 1")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join("/tmp", "phalanx-ftbench-data"))
    env, note = blas_env(a.coretype)
    print("bench/ft_drain: %s, 3 groups x 1 rank, global batch %d, seq %d, %d reps per side"
          % (a.model, a.global_batch, a.seq, a.reps))
    print("  " + environment(note), flush=True)
    t0 = time.monotonic()
    res = {"drain": [], "sigterm": []}
    for i in range(a.reps):
        for side in ("drain", "sigterm"):
            cost, retries, failed = one(a, env, side)
            res[side].append((cost, retries, failed))
            print("  rep %d %-7s: cost %6.0f ms over %d steps of g0; g0 retried %d step(s); survivors' step_failed %d"
                  % (i + 1, side, cost * 1e3, a.window, retries, failed), flush=True)
    print()
    for side, rows in res.items():
        costs = [c for c, _, _ in rows]
        print("%-7s: cost median %.0f ms (min %.0f, max %.0f); retried steps of g0 %d in %d leaves; survivors' "
              "step_failed %d" % (side, statistics.median(costs) * 1e3, min(costs) * 1e3, max(costs) * 1e3,
                                 sum(r for _, r, _ in rows), len(rows), sum(f for _, _, f in rows)))
    d, s = (statistics.median(c for c, _, _ in res[k]) for k in ("drain", "sigterm"))
    print("drain / SIGTERM, median cost: %.2f" % (d / s if s > 0 else float("nan")))
    print("  " + environment(note))
    print("elapsed %.0f s" % (time.monotonic() - t0))


if __name__ == "__main__":
    run_bench(main, "bench/ft_drain")
