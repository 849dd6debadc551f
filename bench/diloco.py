#!/usr/bin/env python3
"""DiLoCo against synchronous data parallel on the same token budget.

Runs, in this one script and on this machine, a job of G groups of the
`small` model on the demo corpus in sync mode, then the same job (same
steps, global batch, seed, learning-rate schedule) with --mode diloco for
each H given, and prints for each: the final eval loss, its ratio to sync's,
and the cross-group bytes every worker counted (comm_sent cross_bytes=, ring
estimates) with the reduction factor against sync.

    python3 bench/diloco.py --build build --steps 400 --inner 20,50

OPENBLAS_CORETYPE is left as the environment has it, the same for every
run. The loss figures are deterministic for given flags; times are not.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from phalanx_test import Launch  # noqa: E402


def cross_bytes(launch):
    total = 0
    for path in glob.glob(os.path.join(launch.dir, "worker-*.log")):
        with open(path) as f:
            for line in f:
                m = re.search(r"comm_sent .*cross_bytes=(\d+)", line)
                if m:
                    total += int(m.group(1))
    return total


def run(bindir, data, a, extra, name):
    t0 = time.time()
    launch = Launch(bindir, ["--groups", str(a.groups), "--model", "small", "--steps", str(a.steps), "--data", data,
                             "--quiet", "--", "--global-batch", str(a.global_batch), "--micro-batch", "4", "--seq",
                             str(a.seq), "--lr", str(a.lr), "--warmup", "20", "--eval-batches", "8", "--seed", "1"]
                    + extra, name=name)
    rc = launch.wait(3600)
    s = launch.summary()
    if rc != 0 or not s or not s["completed"]:
        sys.exit("%s: the job did not complete (rc %s): %s" % (name, rc, launch.tail(10)))
    return s["eval_loss"], cross_bytes(launch), time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--global-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.002)
    ap.add_argument("--inner", default="20,50", help="comma-separated H values")
    ap.add_argument("--outer-lr", default="0.7")
    ap.add_argument("--outer-momentum", default="0.9")
    a = ap.parse_args()
    bindir = os.path.join(a.build, "bin")
    data = os.path.join(tempfile.mkdtemp(prefix="phalanx-bench-diloco-"), "demo")
    subprocess.run([os.path.join(bindir, "phalanx-data"), "--demo", "--out", data], check=True,
                   stdout=subprocess.DEVNULL)
    print("groups=%d steps=%d global_batch=%d seq=%d lr=%g outer_lr=%s outer_momentum=%s" %
          (a.groups, a.steps, a.global_batch, a.seq, a.lr, a.outer_lr, a.outer_momentum))
    ev, cb, secs = run(bindir, data, a, [], "sync")
    print("sync          eval_loss=%.4f cross_bytes=%d wall_s=%.0f" % (ev, cb, secs))
    for h in [int(x) for x in a.inner.split(",")]:
        e, c, s = run(bindir, data, a, ["--mode", "diloco", "--inner-steps", str(h), "--outer-lr", a.outer_lr,
                                        "--outer-momentum", a.outer_momentum], "diloco%d" % h)
        print("diloco H=%-4d eval_loss=%.4f (%.3fx sync) cross_bytes=%d (%.1fx fewer) wall_s=%.0f" %
              (h, e, e / ev, c, cb / c if c else float("inf"), s))


if __name__ == "__main__":
    main()
