#!/usr/bin/env python3
"""DiLoCo against synchronous data parallel on the same token budget.

Runs, in this one script and on this machine, a job of G groups of the
`small` model (--model) on the demo corpus in sync mode, then the same job
(same steps, global batch, seed, learning-rate schedule) with --mode diloco
for each H given, and prints for each: the final eval loss, its ratio to
sync's, and the cross-group bytes every worker counted (comm_sent
cross_bytes=, ring estimates, summed over the workers) with the reduction
factor against sync.

    python3 bench/diloco.py --build build --steps 400 --inner 20,50

With --link-mbps LIST it does all that once per link speed, the workers'
cross-group communicators paced to that many megabits/s per rank
(phalanx-worker --cross-link-mbps; 0: loopback, unpaced), and adds per
run: cross-group bytes per token, wall time per 1k tokens and, for DiLoCo,
its wall time over sync's at the same link speed in this same script run
(the machine is noisy: only ratios within one run are compared). Tokens =
steps x global batch x seq. Wall time is training time: from the first
worker's quorum_joined to the last worker's comm_sent log line (process
start-up and the first rendezvous left out, the final eval in).

    python3 bench/diloco.py --build build --model tiny --groups 2 --steps 200 \
        --inner 20,50 --link-mbps 0,100,20

With --fragments LIST it also runs Streaming DiLoCo (--fragments F) at each
H that F divides: the same bytes per H steps in F smaller outer steps, each
synchronous, so its wall time through a paced link is about DiLoCo's. With
--overlap it runs each DiLoCo and streaming job again with --outer-overlap
(each round's transfer while the next round trains) and prints its wall
time over the synchronous run's. OPENBLAS_CORETYPE is left as the environment has it, the same
for every run (sync and DiLoCo alike). The loss figures are deterministic
for given flags, pacing or not; times are not.
"""
import argparse
import datetime
import glob
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from phalanx_test import Launch  # noqa: E402


def log_ts(line):
    m = re.match(r"ts=(\S+)Z ", line)
    return datetime.datetime.fromisoformat(m.group(1)).timestamp() if m else None


def worker_logs(launch):
    """Cross-group bytes summed over the workers, and the training time:
    first quorum_joined to last comm_sent, over every worker's log."""
    total, start, end = 0, None, None
    for path in glob.glob(os.path.join(launch.dir, "worker-*.log")):
        with open(path) as f:
            for line in f:
                m = re.search(r"comm_sent .*cross_bytes=(\d+)", line)
                if m:
                    total += int(m.group(1))
                    end = max(end or 0, log_ts(line))
                elif " quorum_joined " in line and log_ts(line):
                    start = min(start or float("inf"), log_ts(line))
    return total, (end - start if start and end else float("nan"))


def run(bindir, data, a, extra, name):
    launch = Launch(bindir, ["--groups", str(a.groups), "--model", a.model, "--steps", str(a.steps), "--data", data,
                             "--quiet", "--", "--global-batch", str(a.global_batch), "--micro-batch", str(a.micro_batch), "--seq",
                             str(a.seq), "--lr", str(a.lr), "--warmup", "20", "--eval-batches", "8", "--seed", "1"]
                    + extra, name=name)
    rc = launch.wait(3600)
    s = launch.summary()
    if rc != 0 or not s or not s["completed"]:
        sys.exit("%s: the job did not complete (rc %s): %s" % (name, rc, launch.tail(10)))
    cb, secs = worker_logs(launch)
    return s["eval_loss"], cb, secs


def link_rows(bindir, data, a, mbps, outer):
    """Sync, then DiLoCo at each H, through a link of mbps (0: unpaced)."""
    link = ["--cross-link-mbps", str(mbps)] if mbps else []
    tokens = a.steps * a.global_batch * a.seq
    per_1k = 1e6 / tokens  # seconds of the run -> ms per 1k tokens
    ev, cb, secs = run(bindir, data, a, link, "sync-%gmbps" % mbps)
    print("sync          eval_loss=%.4f cross_bytes=%d bytes_per_token=%.0f ms_per_1k_tokens=%.1f" %
          (ev, cb, cb / tokens, secs * per_1k), flush=True)
    for h in [int(x) for x in a.inner.split(",")]:
        e, c, s = run(bindir, data, a, link + ["--mode", "diloco", "--inner-steps", str(h)] + outer,
                      "diloco%d-%gmbps" % (h, mbps))
        print("diloco H=%-4d eval_loss=%.4f (%.3fx sync) cross_bytes=%d (%.1fx fewer) bytes_per_token=%.0f "
              "ms_per_1k_tokens=%.1f wall=%.3fx sync" % (h, e, e / ev, c, cb / c if c else float("inf"), c / tokens,
                                                         s * per_1k, s / secs), flush=True)
        if a.overlap:
            eo, co, so = run(bindir, data, a, link + ["--mode", "diloco", "--inner-steps", str(h), "--outer-overlap"]
                             + outer, "overlap%d-%gmbps" % (h, mbps))
            print("overlapped H=%-4d F=1 eval_loss=%.4f (%.3fx sync) cross_bytes=%d (%.1fx fewer) bytes_per_token=%.0f "
                  "ms_per_1k_tokens=%.1f wall=%.3fx sync, %.3fx diloco" %
                  (h, eo, eo / ev, co, cb / co if co else float("inf"), co / tokens, so * per_1k, so / secs, so / s),
                  flush=True)
        for f in [int(x) for x in a.fragments.split(",") if x and int(x) > 1 and h % int(x) == 0]:
            e, c, s = run(bindir, data, a, link + ["--mode", "diloco", "--inner-steps", str(h), "--fragments", str(f)]
                          + outer, "stream%d-%d-%gmbps" % (h, f, mbps))
            print("streaming H=%-4d F=%d eval_loss=%.4f (%.3fx sync) cross_bytes=%d (%.1fx fewer) bytes_per_token=%.0f "
                  "ms_per_1k_tokens=%.1f wall=%.3fx sync" % (h, f, e, e / ev, c, cb / c if c else float("inf"),
                                                             c / tokens, s * per_1k, s / secs), flush=True)
            if a.overlap:
                eo, co, so = run(bindir, data, a, link + ["--mode", "diloco", "--inner-steps", str(h), "--fragments",
                                                          str(f), "--outer-overlap"] + outer,
                                 "overlap%d-%d-%gmbps" % (h, f, mbps))
                print("overlapped H=%-4d F=%d eval_loss=%.4f (%.3fx sync) cross_bytes=%d (%.1fx fewer) "
                      "bytes_per_token=%.0f ms_per_1k_tokens=%.1f wall=%.3fx sync, %.3fx streaming" %
                      (h, f, eo, eo / ev, co, cb / co if co else float("inf"), co / tokens, so * per_1k, so / secs,
                       so / s), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="small")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--micro-batch", type=int, default=4,
                    help="samples per forward (the eval loss averages --eval-batches 8 of them) [4]")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--inner", default="20,50", help="comma-separated H values")
    ap.add_argument("--outer-lr", default="0.7")
    ap.add_argument("--outer-momentum", default="0.9")
    ap.add_argument("--diloco-flags", default="", help="more worker flags for the DiLoCo runs, e.g. '--sync-warmup 100'")
    ap.add_argument("--fragments", default="",
                    help="comma-separated F values: Streaming DiLoCo (--fragments F) at each H that F divides")
    ap.add_argument("--overlap", action="store_true",
                    help="also run each Streaming DiLoCo job with --outer-overlap")
    ap.add_argument("--link-mbps", default="0",
                    help="comma-separated link speeds between groups, megabits/s per rank (0: loopback, unpaced)")
    a = ap.parse_args()
    bindir = os.path.join(a.build, "bin")
    data = os.path.join(tempfile.mkdtemp(prefix="phalanx-bench-diloco-"), "demo")
    subprocess.run([os.path.join(bindir, "phalanx-data"), "--demo", "--out", data], check=True,
                   stdout=subprocess.DEVNULL)
    print("model=%s groups=%d steps=%d global_batch=%d seq=%d lr=%g outer_lr=%s outer_momentum=%s tokens=%d%s" %
          (a.model, a.groups, a.steps, a.global_batch, a.seq, a.lr, a.outer_lr, a.outer_momentum,
           a.steps * a.global_batch * a.seq, " diloco_flags='%s'" % a.diloco_flags if a.diloco_flags else ""))
    outer = ["--outer-lr", a.outer_lr, "--outer-momentum", a.outer_momentum] + a.diloco_flags.split()
    for mbps in [float(x) for x in a.link_mbps.split(",")]:
        print("link %s" % ("%g Mbit/s per rank" % mbps if mbps else "loopback (unpaced)"), flush=True)
        link_rows(bindir, data, a, mbps, outer)


if __name__ == "__main__":
    main()
