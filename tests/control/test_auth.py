"""Job token: with --token-file the coordinator refuses workers without the
token, with a wrong one, or with one that is a prefix or an extension of it
(AUTH_REJECTED, an auth_rejected event, the worker exits 1 saying why), and
accepts workers that present it. (The comparison is constant-time; that is
not asserted here: see test_auth_keys.c for its table.)"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, wait_until  # noqa: E402


def test(bindir):
    job = Job(bindir, "auth")
    good = os.path.join(job.dir, "token")
    bad = os.path.join(job.dir, "wrong")
    with open(good, "w") as f:
        f.write("s3cret-token\n")
    with open(bad, "w") as f:
        f.write("guess\n")
    prefix = os.path.join(job.dir, "prefix")
    longer = os.path.join(job.dir, "longer")
    with open(prefix, "w") as f:
        f.write("s3cret-toke\n")
    with open(longer, "w") as f:
        f.write("s3cret-token-and-more\n")
    job.extra = ["--token-file", good]
    try:
        job.start_coordinator()
        for name, extra in (("none", []), ("wrong", ["--token-file", bad]), ("prefix", ["--token-file", prefix]),
                            ("longer", ["--token-file", longer])):
            r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--coordinator", job.endpoint, "--group",
                                "intruder", "--rank", "0"] + extra, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, timeout=20)
            check(r.returncode == 2 and "AUTH_REJECTED" in r.stdout,
                  "worker with %s token refused and exits 2 (a configuration error, not retried): %d %r" %
                  (name, r.returncode, r.stdout[-300:]))
        check(not job.status()["members"], "no member admitted without the token")
        job.start_worker("g0", 0, 1, ["--token-file", good])
        wait_until(lambda: job.status()["quorum"]["groups"] == ["g0"], 10, "the worker with the token joins")
        evs = wait_until(lambda: [e for e in job.read_events() if e["type"] == "auth_rejected"], 5, "auth_rejected events")
        check(len(evs) >= 4, "an auth_rejected event per refused message: %d" % len(evs))
        check(job.metrics()["phalanx_auth_rejected_total"] >= 4, "auth rejections counted in /metrics")
    finally:
        job.stop()


if __name__ == "__main__":
    main(test)
