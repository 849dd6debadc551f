"""Waiting for a coordinator that never answers is not silent and not
endless: a worker (and phalanx-launch --coordinator) says every few seconds
that it is waiting and for whom, and gives up after --connect-timeout with a
clear error and exit status 2. The timeout covers the first registration
only: once registered, a worker waits out a coordinator outage of any length
(coordinators restart)."""
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, Launch, check, die_with_test, free_port, main, make_corpus, wait_until  # noqa: E402

TIMEOUT_S = 8


def worker(bindir, endpoint, extra):
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--coordinator", endpoint, "--group", "g0",
                        "--rank", "0", "--connect-timeout", str(TIMEOUT_S)] + extra,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT_S + 30)
    return r, time.monotonic() - t0


def check_gave_up(what, r, took, endpoint):
    waiting = [l for l in r.stderr.splitlines() if "waiting_for_coordinator" in l]
    check(len(waiting) >= 2, "%s: says it is waiting every few seconds (%d lines): %r" % (what, len(waiting), r.stderr[-800:]))
    check(all(endpoint in l and "group=g0" in l and "rank=0" in l for l in waiting),
          "%s: each waiting line names the endpoint and group/rank: %r" % (what, waiting))
    check(r.returncode == 2, "%s: exits 2 after --connect-timeout, got %d: %r" % (what, r.returncode, r.stderr[-500:]))
    check("no answer from the coordinator at %s" % endpoint in r.stderr,
          "%s: the error says whom it waited for: %r" % (what, r.stderr[-500:]))
    check(TIMEOUT_S - 1 <= took < TIMEOUT_S + 20, "%s: gave up after about %d s, took %.1f s" % (what, TIMEOUT_S, took))


def test(bindir):
    nobody = "tcp://127.0.0.1:%d" % free_port()  # nothing listens there
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-connect-data-"))

    for bad in ("-1", "86401", "x"):
        r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--group", "g0", "--connect-timeout", bad],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        check(r.returncode == 2 and "--connect-timeout" in r.stderr, "--connect-timeout %s refused: %d %r" %
              (bad, r.returncode, r.stderr))

    # the default limit is a minute: a mistyped address is an error within one, said from the first line
    p = subprocess.Popen([os.path.join(bindir, "phalanx-worker"), "--coordinator", nobody, "--group", "g0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=die_with_test)
    try:
        first = ""
        while "waiting_for_coordinator" not in first:
            first = p.stderr.readline()
            if not first:
                break
    finally:
        p.kill()
        p.wait()
    check("waiting_for_coordinator coordinator=%s" % nobody in first and "timeout_s=60:" in first,
          "by default the first waiting line names the address and a 60 s limit: %r" % first)

    r, took = worker(bindir, nobody, [])
    check_gave_up("control-only worker", r, took, nobody)
    r, took = worker(bindir, nobody, ["--steps", "10", "--model", "tiny", "--data", data])
    check_gave_up("training worker", r, took, nobody)

    # phalanx-launch --coordinator: relays the waiting, then stops the job (no restarts) with the error.
    t0 = time.monotonic()
    launch = Launch(bindir, ["--coordinator", nobody, "--groups", "2", "--model", "tiny", "--steps", "10",
                             "--data", data, "--connect-timeout", str(TIMEOUT_S)], name="connect")
    try:
        rc = launch.wait(TIMEOUT_S + 40)
        took = time.monotonic() - t0
        out = launch.output()
        for g in ("g0", "g1"):
            check(any("waiting for the coordinator at %s" % nobody in l and "%s/0" % g in l for l in out),
                  "the launcher shows %s/0 waiting for %s:\n%s" % (g, nobody, launch.tail()))
        check(rc != 0, "phalanx-launch exits non-zero, got %d:\n%s" % (rc, launch.tail()))
        check(any("no answer from the coordinator at %s" % nobody in l for l in out),
              "the launcher shows the worker's error:\n%s" % launch.tail())
        check(not any("; restart " in l for l in out), "no worker restarted:\n%s" % launch.tail())
        check(took < TIMEOUT_S + 30, "the launcher gave up after about %d s, took %.1f s" % (TIMEOUT_S, took))
    finally:
        launch.terminate()

    # Registered once: an outage longer than --connect-timeout is waited out.
    job = Job(bindir, "connect")
    try:
        job.start_coordinator()
        w = job.start_worker("g0", 0, 1, ["--connect-timeout", "2"])
        wait_until(lambda: len(job.live_members()) == 1, 10, "the worker registered")
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        time.sleep(5)
        check(w.poll() is None, "the worker still waits after a 5 s outage (> --connect-timeout 2), exited %s" % w.poll())
        job.start_coordinator()
        wait_until(lambda: len(job.live_members()) == 1, 10, "the worker registered again after the restart")
    finally:
        job.stop()


if __name__ == "__main__":
    main(test)
