"""Checkpoints in real jobs (phalanx-launch: a coordinator and workers, real
processes, killed with real signals).

resume    every process of a job is SIGKILLed (coordinator included); the job
          started again with the same flags resumes at the newest checkpoint
          and its losses and final state checksum equal, bit for bit, those
          of a job that never stopped. Its saves' snapshots were taken by the
          optimizer steps (resume_overlap: by the saver during the next step).
corrupt   the newest checkpoint is damaged before the restart: it is rejected
          (event naming the file and the fault), moved aside (kept byte for
          byte through the save of its step and retention), the previous one
          is restored, and the continuation is still identical.
fewer     a 3-group job restored into 2 groups: the fixed global batch is
          re-split (the sample ledger covers every sample of every step once).
pergroup  a folder per group (%g): only the writer's holds checkpoints; after
          a whole-job kill it restores and the other group heals from it.
mixed     per-group folders holding different steps: the group with the
          older one heals to the newest, so every group starts from one step.
sigterm   SIGTERM stops the job: the writer saves the step it reached, and a
          restart continues from exactly that step.
rotate    the writer (g0) is SIGKILLed: the next quorum lists g1 first, and g1
          saves at its next commit instead of waiting for the next interval.
diskfull  saves fail (RLIMIT_FSIZE: EFBIG) with checkpoint_failed while the job
          trains on to the end; the checkpoint from before stays intact.
schedule  a resume under a longer --steps and another --lr is refused (exit
          2, each flag named with both values, nobody joins); the same flags
          resume; --allow-schedule-change resumes under the new schedule,
          which the next checkpoints record.
slowdisk  the writer's checkpoint data is paced to 1 MB/s (--checkpoint-write-mb-s,
          a disk slower than the interval): a save falling due while the
          previous one still writes is deferred (checkpoint_deferred, the
          /metrics counter, a hint at a longer interval) and training goes on:
          steps past the next due step commit before the slow save ends (a
          waiting trainer could not commit them); the deferred save is taken
          after it, checkpoints keep being published and every one verifies.
slowdisk_sharded  the same with groups of two fsdp ranks, each writing its
          part: the ranks defer the same saves (the commit vote carries
          "my saver still writes"), so every published checkpoint is whole.
every_s   --checkpoint-every-s alone, groups of two fsdp ranks: saves come by
          time, at steps the quorum agrees on through the commit vote (every
          rank of the writing group writes its part of the same step, so
          each published checkpoint verifies), not at the step default.
allcorrupt every checkpoint damaged: the job refuses to start (the workers
          exit 2 naming each checkpoint's fault and --allow-fresh-start),
          moves them aside byte for byte and refuses again when restarted;
          with --allow-fresh-start it trains from the initial state and saves
          the same steps beside them."""
import glob
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import (Launch, check, full_quorum_env, main_scenarios, make_corpus,  # noqa: E402
                          metrics_by_series, wait_until)

# The scenarios name the steps they expect saved: a save that fell due while
# a slow fsync still held the one before would be deferred a step or two
# (the default), so they wait for it instead; slowdisk tests the deferral.
WORKER_DEFER = ["--", "--global-batch", "12", "--micro-batch", "2", "--threads", "1"]
WORKER = WORKER_DEFER + ["--checkpoint-when-busy", "wait"]
STEPS = 60
BOTH_GROUPS = full_quorum_env(2)  # the jobs compared bit for bit


def base(data, ckpt, groups=2, steps=STEPS, every=10, keep=0):
    return ["--groups", str(groups), "--model", "tiny", "--data", data, "--steps", str(steps),
            "--checkpoint-dir", ckpt, "--checkpoint-every", str(every), "--checkpoint-keep", str(keep)]


def run(bindir, args, name, timeout=180, env=None):
    launch = Launch(bindir, args, env=env, name=name)
    try:
        rc = launch.wait(timeout)
    finally:
        launch.terminate()
    return rc, launch


def losses(launch):
    """step -> loss as phalanx-launch printed it."""
    out = {}
    for line in launch.output():
        m = re.search(r"\bstep\s+(\d+) \| groups \S+ \| loss (\S+)", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def checksum(launch):
    sums = {kv["checksum"] for kv in launch.finals().values()}
    check(len(sums) == 1, "every group ends with one state checksum: %s" % launch.finals())
    return sums.pop()


def restored_steps(launch):
    return [int(m.group(1)) for line in launch.output()
            for m in [re.search(r"restored step (\d+) from", line)] if m]


def kill_when(bindir, args, name, ready, env=None):
    """Starts a job and SIGKILLs phalanx-launch (its whole tree dies with it)
    once ready() holds."""
    launch = Launch(bindir, args, env=env, name=name)
    try:
        wait_until(ready, 120, "the moment to kill (%s)" % name)
        os.kill(launch.proc.pid, signal.SIGKILL)
        launch.proc.wait(10)
    finally:
        launch.terminate()
    return launch


def has(ckpt, step):
    return os.path.isdir(os.path.join(ckpt, "step_%08d" % step))


def reference(bindir, data, **kw):
    ref_dir = tempfile.mkdtemp(prefix="phalanx-ckpt-ref-")
    rc, ref = run(bindir, base(data, ref_dir, **kw) + WORKER, "ckpt-ref", env=BOTH_GROUPS)
    check(rc == 0, "the reference job completes:\n%s" % ref.tail())
    return ref


def check_continuation(ref, again, after):
    check(checksum(again) == checksum(ref), "final state checksum %s after the restart, %s without one"
          " (summaries: %s; %s)\n%s" % (checksum(again), checksum(ref), again.summary(), ref.summary(), again.tail()))
    a, r = losses(again), losses(ref)
    later = [s for s in a if s > after]
    check(later and all(a[s] == r.get(s) for s in later),
          "losses after step %d differ: %s" % (after, [(s, a[s], r.get(s)) for s in later if a[s] != r.get(s)]))
    print("continuation identical: %d steps after step %d, checksum %s" % (len(later), after, checksum(ref)))


def killed_and_resumed(bindir, data, ckpt, kill_at, damage=None, restart_args=None, worker=()):
    kill_when(bindir, base(data, ckpt) + WORKER + list(worker), "ckpt-killed", lambda: has(ckpt, kill_at),
              env=BOTH_GROUPS)
    check(not os.path.exists(os.path.join(ckpt, "step_%08d" % STEPS)), "the kill came before the end")
    if damage:
        damage(ckpt)
    rc, again = run(bindir, restart_args or base(data, ckpt) + WORKER + list(worker), "ckpt-again", env=BOTH_GROUPS)
    check(rc == 0 and again.summary()["completed"], "the restarted job completes:\n%s" % again.tail())
    return again


def snapshot_kinds(launch):
    """How the saves of a job took their snapshots (checkpoint_started
    snapshot= in its workers' logs): step, held or overlap, in order."""
    kinds = []
    for name in sorted(os.listdir(launch.dir)):
        if name.endswith(".log"):
            with open(os.path.join(launch.dir, name), errors="replace") as f:
                kinds += re.findall(r"checkpoint_started .* snapshot=(\w+)", f.read())
    return kinds


def test_resume(bindir, worker=()):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ref = reference(bindir, data)
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    again = killed_and_resumed(bindir, data, ckpt, 30, worker=worker)
    # The continuation below checks the snapshots' contents: on the CPU the
    # optimizer step of each step to be saved takes them (held copy), the
    # saver with --checkpoint-copy overlap.
    kinds = snapshot_kinds(again)
    want = "overlap" if "overlap" in worker else "step"
    check(kinds and all(k == want for k in kinds), "the resumed job's saves took their snapshots by %s: %s" % (want, kinds))
    got = restored_steps(again)
    check(len(got) == 2 and len(set(got)) == 1 and got[0] >= 30, "both groups restored one step >= 30: %s" % got)
    check(again.summary()["steps"] == STEPS, "summary: %s" % again.summary())
    check_continuation(ref, again, got[0])
    evs = [e for e in again.read_events() if e["type"] == "checkpoint_restored"]
    check(len(evs) == 2 and all(e["step"] == got[0] and e["path"].endswith("step_%08d" % got[0]) for e in evs),
          "checkpoint_restored events: %s" % evs)
    saved = [e for e in again.read_events() if e["type"] == "checkpoint_saved"]
    check(saved and all(e["group"] == "g0" and e["bytes"] > 0 and e["mb_per_s"] > 0 for e in saved),
          "one writer (g0) saves, with bytes and MB/s: %s" % saved)


def flip_byte(folder):
    path = os.path.join(folder, "data00000.bin")
    with open(path, "r+b") as f:
        f.seek(4096)
        b = f.read(1)
        f.seek(4096)
        f.write(bytes([b[0] ^ 0x40]))
    print("flipped a byte of %s" % path)


def flip_newest(ckpt):
    newest = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))[-1]
    flip_byte(os.path.join(ckpt, newest))
    flip_newest.damaged = int(newest[5:])


def aside(ckpt, step):
    """The folders step `step` was moved aside to as damaged."""
    return sorted(glob.glob(os.path.join(ckpt, "step_%08d.corrupt-*" % step)))


def test_corrupt(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ref = reference(bindir, data)
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    digests = {}

    def damage(ckpt):
        flip_newest(ckpt)
        digests["bad"] = digest(os.path.join(ckpt, "step_%08d" % flip_newest.damaged))

    # The restarted job keeps 2 checkpoints: retention deletes valid ones
    # around the damaged one, never the damaged one.
    again = killed_and_resumed(bindir, data, ckpt, 30, damage=damage,
                               restart_args=base(data, ckpt, keep=2) + WORKER)
    bad = flip_newest.damaged
    got = restored_steps(again)
    check(got and all(s == bad - 10 for s in got), "restored the previous checkpoint (%d): %s" % (bad - 10, got))
    rej = [e for e in again.read_events() if e["type"] == "checkpoint_rejected"]
    check(rej and all(e["file"] == "data00000.bin" and "checksum mismatch" in e["fault"]
                      and e["path"].endswith("step_%08d" % bad) for e in rej),
          "checkpoint_rejected names the folder, the file and the fault: %s" % rej)
    check_continuation(ref, again, bad - 10)
    # The damaged folder was moved aside, once, before the job saved its step
    # again: it is kept byte for byte beside the new one.
    moved = aside(ckpt, bad)
    evs = [e for e in again.read_events() if e["type"] == "checkpoint_moved_aside"]
    check(len(moved) == 1 and digest(moved[0]) == digests["bad"],
          "step %d moved aside unchanged: %s" % (bad, sorted(os.listdir(ckpt))))
    check(len(evs) == 1 and evs[0]["path"].endswith("step_%08d" % bad)
          and evs[0]["moved_to"] == os.path.basename(moved[0]), "checkpoint_moved_aside event: %s" % evs)
    left = sorted(d for d in os.listdir(ckpt) if not d.startswith("."))
    check(left == sorted(["step_%08d" % (STEPS - 10), "step_%08d" % STEPS, os.path.basename(moved[0])]),
          "retention kept the 2 newest and the damaged one: %s" % left)
    print("step %d damaged: moved aside to %s, kept through the re-save and retention" % (bad, moved[0]))


def ledger_steps(path):
    steps = {}
    with open(path) as f:
        for line in f:
            kv = dict(p.split("=", 1) for p in line.split())
            steps.setdefault(int(kv["step"]), []).append((int(kv["lo"]), int(kv["hi"]), int(kv["of"])))
    return steps


def test_fewer(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    kill_when(bindir, base(data, ckpt, groups=3) + WORKER, "ckpt-three", lambda: has(ckpt, 20))
    ledger = os.path.join(tempfile.mkdtemp(prefix="phalanx-ckpt-ledger-"), "ledger")
    rc, again = run(bindir, base(data, ckpt, groups=2) + ["--sample-ledger", ledger] + WORKER, "ckpt-two")
    check(rc == 0 and again.summary()["completed"], "the 2-group job completes:\n%s" % again.tail())
    got = restored_steps(again)
    check(len(got) == 2 and got[0] >= 20 and len(set(got)) == 1, "both groups restored one step >= 20: %s" % got)
    steps = ledger_steps(ledger)
    check(sorted(steps) == list(range(got[0], STEPS)), "ledger steps %s..%s, expected %d..%d"
          % (min(steps), max(steps), got[0], STEPS - 1))
    for s, parts in steps.items():
        covered = sorted((lo, hi) for lo, hi, of in parts)
        check(all(of == 2 for _, _, of in parts) and covered == [(0, 6), (6, 12)],
              "step %d: the global batch of 12 split in two halves, got %s" % (s, parts))
    print("restored step %d into 2 groups; %d steps re-split" % (got[0], len(steps)))


def test_pergroup(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ref = reference(bindir, data)
    root = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    ckpt = os.path.join(root, "%g")
    kill_when(bindir, base(data, ckpt) + WORKER, "ckpt-pergroup", lambda: has(os.path.join(root, "g0"), 30),
              env=BOTH_GROUPS)
    check(not os.path.exists(os.path.join(root, "g1")) or not os.listdir(os.path.join(root, "g1")),
          "only the writer (g0) saved: %s" % os.listdir(root))
    rc, again = run(bindir, base(data, ckpt) + WORKER, "ckpt-pergroup-again", env=BOTH_GROUPS)
    check(rc == 0 and again.summary()["completed"], "the restarted job completes:\n%s" % again.tail())
    got = restored_steps(again)
    check(len(got) == 1 and got[0] >= 30, "g0 alone restored (g1 has no checkpoint): %s" % got)
    heals = [e for e in again.read_events() if e["type"] == "heal_finished" and e["group"] == "g1"]
    check(heals and heals[0]["step"] == got[0] and heals[0]["peer_group"] == "g0",
          "g1 healed from g0 at step %d: %s" % (got[0], heals))
    check_continuation(ref, again, got[0])


def test_mixed(bindir):
    """Per-group folders holding different steps: g1 restores an older
    checkpoint than g0. The first quorum names the newest step as the job's
    (its max_step), g1 heals to it from g0, and the continuation is the
    reference's, bit for bit: every group starts from the same step."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ref = reference(bindir, data)
    root = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    ckpt = os.path.join(root, "%g")
    kill_when(bindir, base(data, ckpt) + WORKER, "ckpt-mixed", lambda: has(os.path.join(root, "g0"), 30),
              env=BOTH_GROUPS)
    g0 = sorted(d for d in os.listdir(os.path.join(root, "g0")) if d.startswith("step_"))
    check(len(g0) >= 2, "g0 saved at least two checkpoints: %s" % g0)
    os.makedirs(os.path.join(root, "g1"), exist_ok=True)
    shutil.copytree(os.path.join(root, "g0", g0[0]), os.path.join(root, "g1", g0[0]))
    older, newest = int(g0[0][5:]), int(g0[-1][5:])
    rc, again = run(bindir, base(data, ckpt) + WORKER, "ckpt-mixed-again", env=BOTH_GROUPS)
    check(rc == 0 and again.summary()["completed"], "the restarted job completes:\n%s" % again.tail())
    got = sorted(restored_steps(again))
    check(got == sorted([older, newest]), "g1 restored step %d and g0 step %d: %s" % (older, newest, got))
    heals = [e for e in again.read_events() if e["type"] == "heal_finished" and e["group"] == "g1"]
    check(heals and heals[0]["step"] == newest and heals[0]["peer_group"] == "g0",
          "g1 healed from g0 to the newest step %d: %s" % (newest, heals))
    check_continuation(ref, again, newest)
    print("g1 restored %d, g0 %d; both trained on from %d" % (older, newest, newest))


def test_sigterm(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    args = base(data, ckpt, steps=400, every=0) + WORKER
    launch = Launch(bindir, args, name="ckpt-term")
    try:
        wait_until(lambda: launch.last_step() >= 15, 120, "step 15")
        launch.proc.send_signal(signal.SIGTERM)
        launch.wait(60)
    finally:
        launch.terminate()
    saved = [d for d in os.listdir(ckpt) if d.startswith("step_")]
    check(len(saved) == 1, "SIGTERM saved one checkpoint: %s" % os.listdir(ckpt))
    step = int(saved[0][5:])
    check(15 <= step < 400, "the checkpoint is of the step reached (%d)" % step)
    again = Launch(bindir, args, name="ckpt-term-again")
    try:
        wait_until(lambda: len(restored_steps(again)) == 2, 60, "both groups restoring")
        check(set(restored_steps(again)) == {step}, "restored %s, saved %d" % (restored_steps(again), step))
        wait_until(lambda: again.last_step() > step, 60, "a step after the restored one")
    finally:
        again.terminate()
    print("SIGTERM at step %d saved it; the restart continued from it" % step)


def test_rotate(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    # g0 comes back only after 5 s, so that g1 trains (and saves) alone meanwhile.
    launch = Launch(bindir, base(data, ckpt, steps=400) + ["--restart-backoff-ms", "5000"] + WORKER,
                    name="ckpt-rotate")
    try:
        # Early in an interval: without the catch-up, g1's first save would
        # wait for the next multiple of 10.
        wait_until(lambda: launch.last_step() >= 21 and launch.last_step() % 10 in (1, 2, 3), 120, "step 2x")
        os.kill(launch.pid_of("g0"), signal.SIGKILL)
        killed_at = launch.last_step()
        wait_until(lambda: [e for e in launch.read_events() if e["type"] == "checkpoint_saved" and e["group"] == "g1"],
                   60, "a checkpoint saved by g1")
    finally:
        launch.terminate()
    first = [e for e in launch.read_events() if e["type"] == "checkpoint_saved" and e["group"] == "g1"][0]
    check(killed_at < first["step"] <= killed_at + 3,
          "g1 saved at its next commit after the writer died (step %d, killed near %d)" % (first["step"], killed_at))
    check(has(ckpt, first["step"]), "g1's checkpoint is published: %s" % os.listdir(ckpt))
    print("writer g0 killed near step %d; g1 saved step %d" % (killed_at, first["step"]))


def digest(folder):
    h = hashlib.sha256()
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + f.read())
    return h.hexdigest()


def test_diskfull(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    rc, first = run(bindir, base(data, ckpt, steps=20) + WORKER, "ckpt-fill")
    check(rc == 0 and has(ckpt, 20), "the first job saved step 20:\n%s" % first.tail())
    before = digest(os.path.join(ckpt, "step_00000020"))
    # Every process of the second job inherits a 256 KiB file-size limit:
    # each save (1.4 MB, in data files of 480 KB) fails with EFBIG. Python
    # ignores SIGXFSZ and so do they.
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
    try:
        launch = Launch(bindir, base(data, ckpt, steps=40) + WORKER + ["--allow-schedule-change"], name="ckpt-full")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    try:
        rc = launch.wait(180)
    finally:
        launch.terminate()
    check(rc == 0 and launch.summary()["completed"], "the job trains on to the end:\n%s" % launch.tail())
    failed = [line for line in launch.output() if ": checkpoint_failed " in line]
    check(len(failed) >= 2 and all("File too large" in line for line in failed),
          "saves at 30 and 40 fail with EFBIG: %s" % failed)
    evs = [e for e in launch.read_events() if e["type"] == "checkpoint_failed"]
    check(len(evs) >= 2 and all("too large" in e["reason"] for e in evs), "checkpoint_failed events: %s" % evs)
    check(sorted(os.listdir(ckpt)) == ["step_00000010", "step_00000020"],
          "nothing published, nothing left behind: %s" % os.listdir(ckpt))
    check(digest(os.path.join(ckpt, "step_00000020")) == before, "step 20 changed")
    print("saves failed (%s); step 20 intact" % failed[0].split("reason=")[-1])


def test_allcorrupt(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    rc, first = run(bindir, base(data, ckpt, steps=20) + WORKER, "ckpt-allcorrupt-first")
    saved = sorted(d for d in os.listdir(ckpt) if d.startswith("step_"))
    check(rc == 0 and saved == ["step_00000010", "step_00000020"], "the first job saved steps 10 and 20: %s\n%s"
          % (saved, first.tail()))
    for d in saved:
        flip_byte(os.path.join(ckpt, d))
    before = {d: digest(os.path.join(ckpt, d)) for d in saved}

    rc, again = run(bindir, base(data, ckpt, steps=40) + WORKER, "ckpt-allcorrupt", timeout=120)
    logs = ""
    for path in sorted(glob.glob(os.path.join(again.dir, "worker-*.log"))):
        with open(path) as f:
            logs += f.read()
    s = again.summary()
    check(rc != 0 and not (s and s["completed"]), "a job whose checkpoints are all corrupt does not run: rc %s, %s\n%s"
          % (rc, s, again.tail()))
    # Both groups share the folder and restore at once: each names what it
    # rejected itself, and one may find a checkpoint, or both, already moved
    # aside by the other (the "only N moved aside" refusal). The first
    # refusal ends the job, so the other worker may be stopped before it
    # says anything: one refusal at least, and (below) a rejection of each
    # checkpoint by someone.
    refusals = re.findall(r"none of its checkpoints verifies \(\d rejected by this worker"
                          r"|holds no checkpoint that verifies, only \d moved aside", logs)
    check(refusals and "--allow-fresh-start" in logs,
          "the workers say why and how to go on:\n%s" % logs[-2000:])
    for d in saved:
        check(re.search(r"checkpoint_rejected path=\S*%s file=\S*data00000.bin fault=\"checksum mismatch" % d, logs),
              "the rejection of %s names its file and fault:\n%s" % (d, logs[-2000:]))
    check(again.last_step() == 0, "no step was trained (last %d)" % again.last_step())
    moved = {d: aside(ckpt, int(d[5:])) for d in saved}
    check(not [d for d in os.listdir(ckpt) if re.fullmatch(r"step_\d+", d)]
          and all(len(m) == 1 and digest(m[0]) == before[d] for d, m in moved.items()),
          "the corrupt checkpoints are moved aside, byte for byte: %s" % sorted(os.listdir(ckpt)))
    # The workers refused before registering: the coordinator never heard of
    # them, their logs say what was moved where.
    told = sorted(set(re.findall(r"checkpoint_moved_aside path=\S+ moved_to=\S+/(\S+):", logs)))
    check(told == sorted(os.path.basename(m[0]) for m in moved.values()),
          "a checkpoint_moved_aside line for each: %s\n%s" % (told, logs[-2000:]))
    check(not [e for e in again.read_events() if e["type"].startswith("member_")],
          "the refused workers never joined: %s" % again.read_events())

    # Started again as it was (a restart policy would): still refused, the
    # folders moved aside count as checkpoints that did not verify.
    rc, third = run(bindir, base(data, ckpt, steps=40) + WORKER, "ckpt-allcorrupt-again", timeout=120)
    logs = ""
    for path in sorted(glob.glob(os.path.join(third.dir, "worker-*.log"))):
        with open(path) as f:
            logs += f.read()
    check(rc != 0 and third.last_step() == 0 and "only 2 moved aside as damaged" in logs,
          "restarted, it refuses again: rc %s\n%s" % (rc, logs[-2000:]))

    # The operator's way on: the job trains from the initial state and saves
    # steps 10 and 20 again, beside the damaged copies, which stay.
    rc, fresh = run(bindir, base(data, ckpt, steps=40) + WORKER + ["--allow-fresh-start"], "ckpt-fresh")
    check(rc == 0 and fresh.summary()["completed"], "with --allow-fresh-start the job completes:\n%s" % fresh.tail())
    check(not restored_steps(fresh) and all(has(ckpt, s) for s in (10, 20, 30, 40)),
          "it restored nothing and saved steps 10 to 40: %s" % sorted(os.listdir(ckpt)))
    check(all(aside(ckpt, int(d[5:])) == m and digest(m[0]) == before[d] for d, m in moved.items()),
          "the damaged copies of steps 10 and 20 stay byte for byte: %s" % sorted(os.listdir(ckpt)))
    print("all %d checkpoints corrupt: refused twice, moved aside and kept; --allow-fresh-start trained 40 steps"
          % len(saved))


def test_schedule(bindir):
    """A resume under another schedule is refused, naming each flag and both
    values, before any worker joins; --allow-schedule-change resumes under the
    new one and the next checkpoints record it."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    rc, first = run(bindir, base(data, ckpt, steps=20) + WORKER, "ckpt-schedule-first")
    check(rc == 0 and has(ckpt, 20), "the first job saved step 20:\n%s" % first.tail())
    with open(os.path.join(ckpt, "step_%08d" % 20, "manifest.json")) as f:
        recorded = json.load(f).get("schedule")
    check(recorded and recorded["steps"] == 20 and recorded["global_batch"] == 12 and recorded["warmup"] == 10 and
          abs(recorded["lr"] - 0.001) < 1e-9 and abs(recorded["min_lr"] - 0.0001) < 1e-9 and recorded["seq_len"] > 0,
          "the checkpoint records the schedule: %s" % recorded)

    rc, longer = run(bindir, base(data, ckpt, steps=40) + WORKER + ["--lr", "0.002"], "ckpt-schedule-refused",
                     timeout=120)
    out = "\n".join(longer.output())
    check(rc == 2 and "--steps 40 (the checkpoint's: 20)" in out and "--lr 0.002 (the checkpoint's: 0.001)" in out
          and "--allow-schedule-change" in out,
          "a longer --steps and another --lr are refused, each named with both values: rc %s\n%s" % (rc, out[-2500:]))
    check("--warmup" not in out.split("another schedule:")[-1].split("\n")[0],
          "flags that did not change are not named:\n%s" % out[-1500:])
    check(longer.last_step() == 0 and not [e for e in longer.read_events() if e["type"] == "member_joined"],
          "nothing trained, nobody joined: %s" % longer.read_events())

    rc, same = run(bindir, base(data, ckpt, steps=20) + WORKER, "ckpt-schedule-same", timeout=120)
    check(rc == 0 and restored_steps(same) and set(restored_steps(same)) == {20},
          "the same flags resume as before: rc %s, restored %s\n%s" % (rc, restored_steps(same), same.tail()))

    rc, changed = run(bindir, base(data, ckpt, steps=40) + WORKER + ["--lr", "0.002", "--allow-schedule-change"],
                      "ckpt-schedule-allowed")
    logs = ""
    for path in sorted(glob.glob(os.path.join(changed.dir, "worker-*.log"))):
        with open(path) as f:
            logs += f.read()
    check(rc == 0 and changed.summary()["completed"] and set(restored_steps(changed)) == {20} and
          changed.last_step() == 40, "with --allow-schedule-change it resumes at 20 and trains to 40: rc %s\n%s" %
          (rc, changed.tail()))
    check("schedule_changed step=20 --steps 40 (the checkpoint's: 20), --lr 0.002 (the checkpoint's: 0.001)" in logs,
          "the change is logged:\n%s" % logs[-1500:])
    with open(os.path.join(ckpt, "step_%08d" % 40, "manifest.json")) as f:
        now = json.load(f)["schedule"]
    check(now["steps"] == 40 and abs(now["lr"] - 0.002) < 1e-9, "the next checkpoints record the new schedule: %s" % now)
    print("schedule: a longer --steps and another --lr refused naming both values; the same flags resume; "
          "--allow-schedule-change resumes under the new schedule, recorded")


def saved_steps(ckpt):
    return sorted(int(d[5:]) for d in os.listdir(ckpt) if re.fullmatch(r"step_\d{8}", d))


def verify_all(bindir, ckpt, what):
    steps = saved_steps(ckpt)
    for st in steps:
        r = subprocess.run([os.path.join(bindir, "phalanx-ckpt"), "verify", os.path.join(ckpt, "step_%08d" % st)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        check(r.returncode == 0, "%s: step %d verifies: %s" % (what, st, r.stdout[-600:]))
    return steps


def test_slowdisk(bindir, sharded=False):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    every, name = 4, "slowdisk_sharded" if sharded else "slowdisk"
    # 1.47 MB a save at 1 MB/s: about 1.5 s (half of it a rank, in parts),
    # while a step of tiny takes milliseconds, so many due steps pass during
    # each write.
    layout = (["--ranks-per-group", "2"], ["--fsdp", "2", "--comm-timeout-ms", "20000"]) if sharded else ([], [])
    launch = Launch(bindir, base(data, ckpt, steps=400, every=every) + layout[0] + WORKER_DEFER + layout[1] +
                    ["--checkpoint-write-mb-s", "1"], name="ckpt-" + name)
    try:
        wait_until(lambda: [e for e in launch.read_events() if e["type"] == "checkpoint_deferred"], 120,
                   "a deferred checkpoint")
        with urllib.request.urlopen("http://%s/metrics" % launch.http, timeout=5) as r:
            m = metrics_by_series(r.read().decode())
        rc = launch.wait(180)
    finally:
        launch.terminate()
    check(rc == 0 and launch.summary()["completed"], "the job completes:\n%s" % launch.tail())
    check(m.get("phalanx_checkpoints_deferred_total", 0) >= 1, "/metrics counts the deferral: %s" %
          {k: v for k, v in m.items() if "checkpoint" in k})
    deferred = [e for e in launch.read_events() if e["type"] == "checkpoint_deferred"]
    check(deferred and all(e["writing_step"] < e["step"] and e["step"] % every == 0 for e in deferred),
          "checkpoint_deferred names a due step and the earlier step still being written: %s" % deferred)
    with open(os.path.join(launch.dir, "worker-g0-0.out")) as f:
        out = f.read().splitlines()
    committed, overtaken = 0, []
    for line in out:  # the writer's own order of events: commits and finished saves
        mp = re.match(r"progress step=(\d+) ", line)
        if mp:
            committed = int(mp.group(1))
        ms = re.match(r"event kind=checkpoint_saved .*\bstep=(\d+) ", line)
        if ms:
            overtaken.append((int(ms.group(1)), committed))
    # Waiting for the disk, the commit of the next due step (W + every)
    # would hold until W's save ended: nothing past it could commit before
    # W's checkpoint_saved. Not waiting, the job runs on.
    check(any(c >= w + 2 * every for w, c in overtaken if w < 400),
          "steps past the next due step committed while a save was still writing (save step, last commit before "
          "its end): %s" % overtaken)
    check(any("would keep up with this disk" in line for line in launch.output()),
          "the launcher shows the hint at a longer interval:\n%s" % launch.tail())
    steps = verify_all(bindir, ckpt, name)
    off = [st for st in steps if st % every]
    check(len(steps) >= 3 and 400 in steps and off,
          "checkpoints keep being published, deferred ones at the first step after the slow write (not a multiple "
          "of %d): %s" % (every, steps))
    print("%s: %d deferrals, saves published at %s, each verifies; a save overtaken by %d steps" %
          (name, len(deferred), steps, max(c - w for w, c in overtaken)))


def test_every_s(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ckpt-data-"))
    ckpt = tempfile.mkdtemp(prefix="phalanx-ckpt-")
    steps = 150
    args = ["--groups", "2", "--ranks-per-group", "2", "--model", "tiny", "--data", data, "--steps", str(steps),
            "--checkpoint-dir", ckpt, "--checkpoint-every-s", "0.5", "--checkpoint-keep", "0", "--", "--fsdp", "2",
            "--global-batch", "8", "--micro-batch", "2", "--seq", "64", "--comm-timeout-ms", "20000"]
    rc, launch = run(bindir, args, "ckpt-every-s", timeout=300)
    check(rc == 0 and launch.summary()["completed"], "the job completes:\n%s" % launch.tail())
    evs = launch.read_events()
    check(not [e for e in evs if e["type"] == "checkpoint_failed"], "no save failed (every rank of the writing "
          "group wrote its part of the same step): %s" % [e for e in evs if e["type"] == "checkpoint_failed"])
    saved = verify_all(bindir, ckpt, "every_s")
    mid = [st for st in saved if st < steps]
    check(len(mid) >= 2 and [st for st in mid if st % 100], "saves came by time during the job, not at the step "
          "default of 100: %s" % saved)
    print("every_s: checkpoints at steps %s, each verifies" % saved)


if __name__ == "__main__":
    main_scenarios({"resume": test_resume,
                    # the saver copying the state while the next step computes (--checkpoint-copy overlap)
                    "resume_overlap": lambda bindir: test_resume(bindir, ["--checkpoint-copy", "overlap"]), "corrupt": test_corrupt, "fewer": test_fewer,
                    "pergroup": test_pergroup, "mixed": test_mixed, "sigterm": test_sigterm, "rotate": test_rotate, "diskfull": test_diskfull,
                    "allcorrupt": test_allcorrupt, "schedule": test_schedule, "slowdisk": test_slowdisk,
                    "slowdisk_sharded": lambda bindir: test_slowdisk(bindir, sharded=True), "every_s": test_every_s})
