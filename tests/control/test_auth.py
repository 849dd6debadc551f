"""Job token: with --token-file the coordinator refuses workers without the
token, with a wrong one, or with one that is a prefix or an extension of it
(AUTH_REJECTED, an auth_rejected event, the worker exits 1 saying why), and
accepts workers that present it. (The comparison is constant-time; that is
not asserted here: see test_auth_keys.c for its table.) The token is
rotated without a restart: the coordinator admits every line of its file and
re-reads it when it changes or on SIGHUP."""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, wait_until  # noqa: E402


def replace_file(path, text):
    """As a Kubernetes Secret update does: a new file renamed over the old."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.rename(path + ".new", path)


def rotate(bindir, job, coord_file):
    """Rotating the token without a restart: the coordinator's file becomes
    "new\nold" (seen within a second, no signal), a worker with the new token
    joins while one with the old stays; then "new" alone (SIGHUP): the old
    token is refused; a file that no longer parses keeps the tokens."""
    def reloads(n_tokens, error=False):
        return [e for e in job.read_events() if e["type"] == "token_reloaded" and e["tokens"] == n_tokens
                and bool(e["error"]) == error]
    new = os.path.join(job.dir, "token-new")
    with open(new, "w") as f:
        f.write("rotated-token\n")
    replace_file(coord_file, "rotated-token\ns3cret-token\n")
    wait_until(lambda: reloads(2), 5, "token_reloaded with 2 tokens after the file changed")
    job.start_worker("g1", 0, 1, ["--token-file", new])
    wait_until(lambda: job.status()["quorum"]["groups"] == ["g0", "g1"], 10, "g1 (new token) joins g0 (old token)")
    old = job.workers.pop(("g0", 0))
    old.terminate()
    check(old.wait(timeout=10) == 0, "g0 leaves cleanly")
    job.start_worker("g0", 0, 1, ["--token-file", new])
    wait_until(lambda: sorted(m["group"] for m in job.live_members()) == ["g0", "g1"], 10,
               "g0 back with the new token")
    with open(coord_file, "w") as f:  # edited in place, same size class: SIGHUP says so at once
        f.write("rotated-token\n")
    job.coord.send_signal(signal.SIGHUP)
    wait_until(lambda: reloads(1), 5, "token_reloaded with 1 token after SIGHUP")
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--coordinator", job.endpoint, "--group", "late",
                        "--rank", "0", "--token-file", os.path.join(job.dir, "token-old")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=20)
    check(r.returncode == 2 and "AUTH_REJECTED" in r.stdout, "the old token is refused after the rotation: %d %r"
          % (r.returncode, r.stdout[-300:]))
    replace_file(coord_file, "\n")
    wait_until(lambda: reloads(1, error=True), 5, "token_reloaded reporting a file without a token")
    check(sorted(m["group"] for m in job.live_members()) == ["g0", "g1"],
          "the workers with the token in force stay after a bad edit")
    job.start_worker("g2", 0, 1, ["--token-file", new])
    wait_until(lambda: "g2" in [m["group"] for m in job.live_members()], 10, "a new worker with the token in force joins")


def test(bindir):
    job = Job(bindir, "auth")
    good = os.path.join(job.dir, "token")
    bad = os.path.join(job.dir, "wrong")
    with open(good, "w") as f:
        f.write("s3cret-token\n")
    with open(bad, "w") as f:
        f.write("guess\n")
    with open(os.path.join(job.dir, "token-old"), "w") as f:
        f.write("s3cret-token\n")
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
        rotate(bindir, job, good)
    finally:
        job.stop()


if __name__ == "__main__":
    main(test)
