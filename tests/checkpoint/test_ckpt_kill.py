"""SIGKILL of the writing worker at random points during a save (20 fixed
seeds) never leaves a checkpoint that loads wrong, and the previous one loads.

A reference job (1 group, model `small`: a 40 MB state in several data files,
saved every step: --checkpoint-when-busy wait) records each step's data-file
checksums and how long its saves took: training is deterministic, so a
checkpoint of step N must hold exactly those bytes in every run. Then, per
seed, the same job is started on an empty folder; once a save of a seeded step
(or a later one) is in flight, its `.tmp-step_*` folder exists, and the writer
is SIGKILLed after a seeded fraction of 1.25 times the reference's median save
time: most kills land inside the write, some in the fsyncs and the rename at
its end, some just after the publish. Afterwards:
  - the steps published at the kill are 1..k with k >= s-1 (s: the save seen in
    flight; one save at a time, so s-1 was published before s began; on a quick
    run the kill can land a save or two later), and the cut save's folder, if
    one is left, is the temporary one of step k+1: never a published name;
  - every published checkpoint, including those the restarted worker writes,
    verifies (`phalanx-ckpt verify`: every file's size and XXH3, the manifest
    against the model) and holds the reference's bytes for its step, so none
    is torn or mixed, and holds exactly the files its manifest names (more
    than one: a kill can land between two files);
  - the worker phalanx-launch restarts restores the newest one published at
    the kill, never the folder of the save that was cut.
A failure names its seed; SEEDS = [n] below reruns just that one."""
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402

SEEDS = range(1, 21)
STEPS = 14
WORKER = ["--", "--global-batch", "2", "--micro-batch", "2", "--seq", "32", "--threads", "1"]


def job_args(data, ckpt):
    return ["--groups", "1", "--model", "small", "--data", data, "--steps", str(STEPS),
            "--checkpoint-dir", ckpt, "--checkpoint-every", "1", "--checkpoint-keep", "0"] + WORKER + [
                "--checkpoint-when-busy", "wait"]  # every step saved, one at a time


def published(ckpt):
    return sorted(int(d[5:]) for d in os.listdir(ckpt) if d.startswith("step_"))


def manifest_files(ckpt, step):
    with open(os.path.join(ckpt, "step_%08d" % step, "manifest.json")) as f:
        return json.load(f)["files"]


def data_sum(ckpt, step):
    """The checksums of every data file, in order."""
    return [f["xxh3_64"] for f in manifest_files(ckpt, step)]


def saving(ckpt, first):
    """(step, writer pid) of a save of step >= first in flight, else None."""
    for d in os.listdir(ckpt):
        m = re.match(r"\.tmp-step_(\d{8})-.*-(\d+)$", d)
        if m and int(m.group(1)) >= first:
            return int(m.group(1)), int(m.group(2))
    return None


def dead(pid):
    """The process is gone or a zombie: none of its threads runs any more."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def verify(bindir, ckpt, step, ref, seed):
    path = os.path.join(ckpt, "step_%08d" % step)
    r = subprocess.run([os.path.join(bindir, "phalanx-ckpt"), "verify", path],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "seed %d: step %d does not verify: %s" % (seed, step, r.stdout.strip()))
    names = [f["name"] for f in manifest_files(ckpt, step)]
    check(len(names) > 1 and sorted(os.listdir(path)) == sorted(["manifest.json"] + names),
          "seed %d: step %d holds %s" % (seed, step, sorted(os.listdir(path))))
    check(data_sum(ckpt, step) == ref[step], "seed %d: step %d holds other bytes than the reference's" % (seed, step))


def one_seed(bindir, data, ref, window_s, seed):
    rnd = random.Random(seed)
    target = rnd.randint(2, STEPS - 3)
    frac = rnd.random()
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-kill-")
    launch = Launch(bindir, job_args(data, ckpt), name="ckpt-kill")
    try:
        step, pid = wait_until(lambda: saving(ckpt, target), 60, "a save of step %d or later in flight" % target,
                               interval_s=0.001)
        time.sleep(frac * window_s)
        os.kill(pid, signal.SIGKILL)  # the folder's name carries the writer's pid
        wait_until(lambda: dead(pid), 10, "the killed writer gone", interval_s=0.001)
        at_kill = published(ckpt)  # the restarted worker is 200 ms away
        cut = sorted(int(d[10:18]) for d in os.listdir(ckpt) if d.startswith(".tmp-step_"))
        wait_until(lambda: re.search(r"restored step \d+", "\n".join(launch.output())), 30,
                   "the restarted worker restoring:\n%s" % launch.tail())
    finally:
        launch.terminate()  # the restarted worker saves its step on SIGTERM: one more to verify
    lines = "\n".join(launch.output())
    what = "seed %d: killed %.0f ms (%.2f of %.0f ms) into the save of step %d" % (
        seed, frac * window_s * 1000, frac, window_s * 1000, step)
    check(len(at_kill) >= step - 1 and at_kill == list(range(1, len(at_kill) + 1)),
          "%s: published at the kill: %s" % (what, at_kill))
    check(cut in ([], [len(at_kill) + 1]), "%s: published %s, cut saves left %s" % (what, at_kill, cut))
    for s in published(ckpt):
        verify(bindir, ckpt, s, ref, seed)
    restored = [int(x) for x in re.findall(r"restored step (\d+) from", lines)]
    check(restored == [at_kill[-1]], "%s: the restarted worker restored %s; the newest published at the kill was %d"
          % (what, restored, at_kill[-1]))
    shutil.rmtree(ckpt)
    shutil.rmtree(launch.dir)
    return "%s; restored step %d" % (what, restored[0])


def test(bindir):
    data_dir = tempfile.mkdtemp(prefix="phalanx-ckpt-kill-data-")
    ref_dir = tempfile.mkdtemp(prefix="phalanx-ckpt-kill-ref-")
    try:
        data = make_corpus(bindir, data_dir)
        launch = Launch(bindir, job_args(data, ref_dir), name="ckpt-kill-ref")
        try:
            check(launch.wait(120) == 0, "the reference job completes:\n%s" % launch.tail())
        finally:
            launch.terminate()
        ref = {s: data_sum(ref_dir, s) for s in published(ref_dir)}
        check(sorted(ref) == list(range(1, STEPS + 1)), "reference saved every step: %s" % sorted(ref))
        saves = [e["seconds"] for e in launch.read_events() if e.get("type") == "checkpoint_saved"]
        check(len(saves) == STEPS, "the reference reported %d saves, not %d" % (len(saves), STEPS))
        window_s = 1.25 * statistics.median(saves)
        print("reference: %d steps, median save %.0f ms; kills up to %.0f ms into a save"
              % (STEPS, statistics.median(saves) * 1000, window_s * 1000))
        shutil.rmtree(launch.dir)
        for seed in SEEDS:
            try:
                print(one_seed(bindir, data, ref, window_s, seed), flush=True)
            except (Fail, OSError):
                print("FAILED at seed %d (rerun with SEEDS = [%d]); its folders are kept" % (seed, seed))
                raise
    finally:
        shutil.rmtree(ref_dir, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main(test)
