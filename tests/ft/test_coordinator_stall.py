"""A frozen coordinator must not drop healthy members when it wakes.

Three training groups run; the coordinator is SIGSTOPped for 10 s. Training
goes on committing steps meanwhile (no coordinator round trip per step).
After SIGCONT the coordinator must judge silence only over time it was
listening: no member is lost, no group dropped, and the quorum is the same.
Afterwards a real failure is still detected promptly (SIGKILL of one worker:
member_lost within a few seconds), so the stall credit did not blind it."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, make_corpus, wait_until  # noqa: E402

GROUPS = ["g0", "g1", "g2"]


def progress_step(job, group):
    """The last step the worker's own log shows committed (it logs to a file)."""
    step = 0
    try:
        with open(os.path.join(job.dir, "worker-%s-0.log" % group)) as f:
            for line in f:
                if line.startswith("progress step="):
                    step = int(line.split()[1].split("=")[1])
    except OSError:
        pass
    return step


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-cstall-data-"))
    job = Job(bindir, "cstall")
    job.start_coordinator()
    try:
        for g in GROUPS:
            job.start_worker(g, 0, 1, ["--steps", "100000", "--model", "tiny", "--data", data, "--global-batch", "12",
                                       "--micro-batch", "4"])
        wait_until(lambda: sorted(job.status()["quorum"]["groups"]) == GROUPS, 30, "3 groups in the quorum")
        wait_until(lambda: progress_step(job, "g0") >= 5, 60, "5 committed steps")
        qid = job.status()["quorum"]["id"]
        n_events = len(job.read_events())

        job.coord.send_signal(signal.SIGSTOP)
        at_stop = progress_step(job, "g0")
        time.sleep(10)
        during = progress_step(job, "g0")
        job.coord.send_signal(signal.SIGCONT)
        check(during > at_stop, "training committed steps while the coordinator was stopped (%d -> %d)" %
              (at_stop, during))
        time.sleep(3)  # three heartbeat timeouts after waking
        after = job.read_events()[n_events:]
        lost = [e for e in after if e["type"] in ("member_lost", "group_dropped")]
        check(not lost, "no member lost after the coordinator woke: %r" % lost)
        st = job.status()
        check(st["quorum"]["id"] == qid and sorted(st["quorum"]["groups"]) == GROUPS,
              "quorum unchanged: %r" % st["quorum"])
        now = progress_step(job, "g0")
        wait_until(lambda: progress_step(job, "g0") > now, 30, "training goes on after the stall")

        # A real death is still caught promptly.
        victim = job.workers[("g2", 0)]
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        wait_until(lambda: any(e["type"] == "member_lost" and e["group"] == "g2" for e in job.read_events()), 5,
                   "the killed member is lost within 5 s")
    finally:
        if job.coord and job.coord.poll() is None:
            job.coord.send_signal(signal.SIGCONT)
        job.stop()


if __name__ == "__main__":
    main(test)
