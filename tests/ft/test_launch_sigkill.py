"""A phalanx-launch killed with SIGKILL leaves no process of its job behind.

The launcher cannot clean up after SIGKILL, so its children must die with it
(each child sets a parent-death signal after fork). Without that the
coordinator and the workers are re-parented to init and train on forever
with nobody to stop them.

The job's processes are found by the job's own ZeroMQ endpoint (a free port
chosen by the test), which is on the command line of the coordinator
(--bind) and of every worker (--coordinator)."""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402


def job_processes(endpoint, exclude):
    """Live (not zombie) processes whose command line names endpoint."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in exclude:
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            with open("/proc/%s/stat" % d) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # it exited while we looked
        if state != "Z" and endpoint.encode() in argv:
            found[int(d)] = b" ".join(argv).decode(errors="replace")[:160]
    return found


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-sigkill-data-"))
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "1000000", "--data", data,
                             "--", "--global-batch", "12", "--micro-batch", "4"], name="sigkill")
    endpoint = "tcp://127.0.0.1:%d" % launch.zmq_port
    me = {os.getpid(), launch.proc.pid}
    try:
        wait_until(lambda: launch.last_step() >= 5, 90, "the job training (step 5)")
        before = job_processes(endpoint, me)
        check(len(before) == 4, "a coordinator and 3 workers run before the kill: %s" % before)
        os.kill(launch.proc.pid, signal.SIGKILL)
        launch.proc.wait(timeout=10)
        try:
            wait_until(lambda: not job_processes(endpoint, me), 10, "every process of the job gone", 0.1)
        except Fail:
            left = job_processes(endpoint, me)
            check(False, "%d process(es) outlived the SIGKILLed launcher by 10 s:\n  %s" %
                  (len(left), "\n  ".join("%d %s" % kv for kv in left.items())))
    finally:
        for pid in job_processes(endpoint, me):  # whatever this test started must end with it
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        launch.terminate()


if __name__ == "__main__":
    main(test)
