"""A group that starts (or restarts) after another group finished the job
leaves instead of training on alone from the initial state: the coordinator
records the finishing step (run_finished) and passes it on in heartbeat acks
and quorum pushes. Without this a latecomer would redo the whole job by itself
and report a different final state."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, make_corpus, wait_until  # noqa: E402

TRAIN = ["--steps", "40", "--model", "tiny", "--global-batch", "8", "--micro-batch", "4"]


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-finished-data-"))
    job = Job(bindir, "finished")
    try:
        job.start_coordinator()
        first = job.start_worker("g0", 0, 1, ["--job", job.job, "--data", data] + TRAIN)
        check(first.wait(timeout=120) == 0, "the first group trains the job to its end")
        wait_until(lambda: [e for e in job.read_events() if e["type"] == "run_finished" and e["step"] == 40], 5,
                   "run_finished at step 40")
        late = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--coordinator", job.endpoint, "--job", job.job,
                               "--group", "g1", "--rank", "0", "--data", data] + TRAIN,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        check(late.returncode == 0, "the late group exits 0, got %d: %s" % (late.returncode, late.stderr[-400:]))
        check("job_finished_elsewhere" in late.stderr, "it says why it leaves: %r" % late.stderr[-400:])
        check("final " not in late.stdout and "progress " not in late.stdout,
              "it trained no step and reported no final state: %r" % late.stdout[-300:])
    finally:
        job.stop()


if __name__ == "__main__":
    main(test)
