"""phalanx-launch reports success only when the job reached --steps: at
least one group printed its final line with steps equal to --steps. A job
whose workers all left early (here: every worker stopped with SIGTERM, which
a worker answers by leaving and exiting 0; a forged run_finished does the
same), whose worker died with no restart left (--max-restarts), or whose
workers finished a different number of steps, makes it exit non-zero with a
message saying how far the job got."""
import os
import signal
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402

WORKER = ["--", "--global-batch", "8", "--micro-batch", "4"]


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(d))
    return out


def run(bindir, args, name, during=None):
    launch = Launch(bindir, args, name=name)
    try:
        if during:
            try:
                during(launch)
            except Fail as e:
                raise Fail("%s: %s\n%s" % (name, e, launch.tail()))
        rc = launch.wait(120)
        return rc, launch
    finally:
        launch.terminate()


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-incomplete-data-"))
    base = ["--groups", "2", "--model", "tiny", "--data", data, "--max-restarts", "0"]

    # The control: a job that reaches --steps exits 0 and says completed.
    rc, launch = run(bindir, base + ["--steps", "10"] + WORKER, "complete")
    check(rc == 0, "a job reaching --steps exits 0, got %d:\n%s" % (rc, launch.tail()))
    check(launch.summary()["completed"] is True, "completed: %s" % launch.summary())

    # Every worker leaves at once, long before --steps.
    def stop_workers(launch):
        wait_until(lambda: launch.last_step() >= 3, 90, "training (step 3)")
        workers = wait_until(lambda: len(children(launch.proc.pid)) == 3 and children(launch.proc.pid), 10,
                             "a coordinator and 2 workers")
        coordinator = launch.status()  # the coordinator answers; its pid is not a worker's
        pids = [m["pid"] for m in coordinator["members"] if m["state"] != "lost"]
        check(len(pids) == 2 and set(pids) <= set(workers), "2 worker pids %s among %s" % (pids, workers))
        for pid in pids:
            os.kill(pid, signal.SIGTERM)

    rc, launch = run(bindir, base + ["--steps", "100000"] + WORKER, "left", stop_workers)
    out = "\n".join(launch.output())
    check(rc != 0, "workers leaving at step %d of 100000 make the launcher exit non-zero, got %d:\n%s" %
          (launch.last_step(), rc, launch.tail()))
    check("did not reach step 100000" in out, "it says the job did not reach --steps:\n%s" % launch.tail())
    check(launch.summary()["completed"] is False, "completed is false: %s" % launch.summary())

    # A worker dies with no restart left: the launcher gives up, says so, and exits 1 (it used to
    # pretend it had been sent SIGTERM and exit 143).
    def kill_one(launch):
        wait_until(lambda: launch.last_step() >= 3, 90, "training (step 3)")
        os.kill(wait_until(lambda: launch.pid_of("g1"), 10, "g1's pid"), signal.SIGKILL)

    rc, launch = run(bindir, base + ["--steps", "100000"] + WORKER, "gaveup", kill_one)
    out = "\n".join(launch.output())
    check(rc == 1, "a worker past --max-restarts 0 makes the launcher exit 1, got %d:\n%s" % (rc, launch.tail()))
    check("reached --max-restarts 0" in out and "did not reach step 100000" in out,
          "it says it gave up and how far the job got:\n%s" % launch.tail())

    # The workers finish, but not the launcher's --steps (a worker flag overrides it).
    rc, launch = run(bindir, base + ["--steps", "40"] + WORKER + ["--steps", "5"], "short")
    out = "\n".join(launch.output())
    check(rc != 0, "groups finishing at step 5 of --steps 40 make the launcher exit non-zero, got %d:\n%s" %
          (rc, launch.tail()))
    check("did not reach step 40" in out, "it says the job did not reach --steps:\n%s" % launch.tail())
    check(launch.summary()["completed"] is False, "completed is false: %s" % launch.summary())


if __name__ == "__main__":
    main(test)
