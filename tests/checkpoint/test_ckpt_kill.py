"""SIGKILL of the writing worker at random points during a save (20 fixed
seeds) never leaves a checkpoint that loads wrong, and the previous one loads.

A reference job (1 group, model `small`: a 40 MB state, saved every step)
records each step's data-file checksum: training is deterministic, so a
checkpoint of step N must hold exactly those bytes in every run. Then, per
seed, the same job is started on an empty folder; once a save of a seeded
step is in flight (its `.tmp-step_*` folder exists) the writer is SIGKILLed
after a seeded delay. Afterwards every published checkpoint must verify
(`phalanx-ckpt verify`) and carry the reference checksum of its step, no
torn folder may be visible, and the worker that phalanx-launch restarts must
restore the newest published step."""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Launch, check, main, make_corpus, wait_until  # noqa: E402

SEEDS = range(1, 21)
REF_STEPS = 14
WORKER = ["--", "--global-batch", "2", "--micro-batch", "2", "--seq", "32", "--threads", "1"]


def args(data, ckpt, steps):
    return ["--groups", "1", "--model", "small", "--data", data, "--steps", str(steps),
            "--checkpoint-dir", ckpt, "--checkpoint-every", "1", "--checkpoint-keep", "0"] + WORKER


def published(ckpt):
    return sorted(int(d[5:]) for d in os.listdir(ckpt) if d.startswith("step_"))


def data_sum(ckpt, step):
    with open(os.path.join(ckpt, "step_%08d" % step, "manifest.json")) as f:
        return json.load(f)["files"][0]["xxh3_64"]


def in_flight(ckpt, step):
    return any(d.startswith(".tmp-step_%08d-" % step) for d in os.listdir(ckpt))


def one_seed(bindir, data, ref, seed):
    rnd = random.Random(seed)
    target = rnd.randint(2, REF_STEPS - 3)
    delay = rnd.uniform(0, 0.08)
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-kill-")
    launch = Launch(bindir, args(data, ckpt, 1000), name="ckpt-kill")
    try:
        wait_until(lambda: in_flight(ckpt, target), 60, "the save of step %d in flight" % target, interval_s=0.001)
        time.sleep(delay)
        pid = launch.pid_of("g0")
        os.kill(pid, signal.SIGKILL)
        at_kill = published(ckpt)  # final: the writer is dead, and its restart is 200 ms away
        # The folder as the kill left it (the restarted worker restores, then writes more).
        # Step target-1 was published before the save of target began (one
        # save at a time), so the restarted worker always has one to restore.
        wait_until(lambda: "restored step" in "\n".join(launch.output()), 30, "the restarted worker restoring")
        lines = "\n".join(launch.output())
    finally:
        launch.terminate()
    steps = published(ckpt)
    check(steps, "seed %d: nothing published before step %d" % (seed, target))
    for s in steps:
        if s > REF_STEPS:
            continue  # written by the restarted worker after the kill
        r = subprocess.run([os.path.join(bindir, "phalanx-ckpt"), "verify", os.path.join(ckpt, "step_%08d" % s)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0, "seed %d: step %d does not verify: %s" % (seed, s, r.stdout.strip()))
        check(data_sum(ckpt, s) == ref[s], "seed %d: step %d holds other bytes than the reference's" % (seed, s))
    m = re.findall(r"restored step (\d+) from", lines)
    check(at_kill and at_kill[-1] in (target - 1, target),
          "seed %d: published at the kill: %s, expected up to step %d or %d" % (seed, at_kill, target - 1, target))
    check(m and int(m[0]) == at_kill[-1],
          "seed %d: the restarted worker restored %s; the newest published at the kill was %d" % (seed, m, at_kill[-1]))
    shutil.rmtree(ckpt, ignore_errors=True)
    shutil.rmtree(launch.dir, ignore_errors=True)
    return target, delay, int(m[0])


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-kill-data-"))
    ref_dir = tempfile.mkdtemp(prefix="phalanx-ckpt-kill-ref-")
    launch = Launch(bindir, args(data, ref_dir, REF_STEPS), name="ckpt-kill-ref")
    try:
        check(launch.wait(120) == 0, "the reference job completes:\n%s" % launch.tail())
    finally:
        launch.terminate()
    ref = {s: data_sum(ref_dir, s) for s in published(ref_dir)}
    check(sorted(ref) == list(range(1, REF_STEPS + 1)), "reference saved every step: %s" % sorted(ref))
    for seed in SEEDS:
        try:
            target, delay, restored = one_seed(bindir, data, ref, seed)
        except Exception:
            print("FAILED at seed %d (rerun with SEEDS = [%d])" % (seed, seed))
            raise
        print("seed %2d: killed %3.0f ms into the save of step %2d; restored step %d"
              % (seed, delay * 1000, target, restored))


if __name__ == "__main__":
    main(test)
