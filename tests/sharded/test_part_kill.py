"""A rank of the writing group SIGKILLed while the group writes a checkpoint
in parts (one file per rank, rank 0 publishing once every part is on disk):
2 groups of fsdp2 of `small` under phalanx-launch, one shared checkpoint
folder, a save every 2 steps. The kill lands once g0's temporary folder of a
save exists and its rank 1 has not finished its part.

Afterwards:
  - that step is either never published (rank 0 stopped waiting for the
    part when its group's step failed, and reported checkpoint_failed
    naming it) or published whole;
  - every published checkpoint verifies (phalanx-ckpt verify), so none is
    torn;
  - saves go on after the kill (a later step is published);
  - the job completes, the killed group healed, both groups with one state.
The seed is fixed (the step to hit) and printed on failure."""
import os
import random
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402

SEED = int(os.environ.get("PX_CHAOS_SEED", "5"))
STEPS = 40


def published(ck):
    return sorted(int(d[5:]) for d in os.listdir(ck) if d.startswith("step_")) if os.path.isdir(ck) else []


def cutting(ck, first):
    """The step of a g0 part save of step >= first whose rank 1 is not done yet, else None."""
    for d in os.listdir(ck) if os.path.isdir(ck) else []:
        m = re.match(r"\.tmp-step_(\d{8})-g0-", d)
        if m and int(m.group(1)) >= first and not os.path.exists(os.path.join(ck, d, "rank00001.done")):
            return int(m.group(1))
    return None


def test(bindir):
    target = random.Random(SEED).randrange(6, 20, 2)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-partkill-data-"))
    ck = os.path.join(tempfile.mkdtemp(prefix="phalanx-partkill-"), "ck")
    launch = Launch(bindir, ["--groups", "2", "--ranks-per-group", "2", "--model", "small", "--steps", str(STEPS),
                             "--data", data, "--checkpoint-dir", ck, "--checkpoint-every", "2", "--checkpoint-keep",
                             "0", "--", "--fsdp", "2", "--global-batch", "8", "--micro-batch", "2", "--seq", "64",
                             "--comm-timeout-ms", "20000"], name="partkill")
    try:
        step = wait_until(lambda: cutting(ck, target), 240, "a g0 save of step >= %d in flight" % target,
                          interval_s=0.001)
        pid = launch.pid_of("g0", 1)
        check(pid, "g0 rank 1 is running")
        os.kill(pid, signal.SIGKILL)
        rc = launch.wait(600)
        check(rc == 0, "phalanx-launch exited %s" % rc)
        s = launch.summary()
        check(s and s["completed"] and s["steps"] == STEPS, "completed %d steps: %s" % (STEPS, s))
        cks = {g: f["checksum"] for g, f in launch.finals().items()}
        check(sorted(cks) == ["g0", "g1"] and len(set(cks.values())) == 1, "both groups end with one state: %s" % cks)
        steps = published(ck)
        for p in steps:
            path = os.path.join(ck, "step_%08d" % p)
            r = subprocess.run([os.path.join(bindir, "phalanx-ckpt"), "verify", path], capture_output=True, text=True)
            check(r.returncode == 0, "step %d does not verify: %s %s" % (p, r.stdout, r.stderr))
        check(any(p > step for p in steps), "a save after the cut one was published: %s" % steps)
        events = launch.read_events()
        failed = [e for e in events if e.get("type") == "checkpoint_failed" and e.get("step") == step]
        if step in steps:
            outcome = "published whole (rank 1's part was on disk before the kill)"
        else:
            check(failed, "step %d was neither published nor reported failed (events: %s)" % (step, launch.events_path))
            reason = failed[0].get("reason", "")
            check("rank 1" in reason, "the failure names the missing part: %r" % reason)
            outcome = "not published; checkpoint_failed: %s" % reason
        print("killed g0 rank 1 during the part save of step %d: %s; published %s, all verify; checksums %s; "
              "time lost %.1f s, heals %d" % (step, outcome, steps, cks, s.get("time_lost_s", 0), s.get("heals", 0)))
    except Fail as e:
        raise Fail("%s (seed %d, target step %d)\n%s" % (e, SEED, target, launch.tail(30)))
    finally:
        launch.terminate()


if __name__ == "__main__":
    main(test)
