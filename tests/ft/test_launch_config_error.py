"""A worker that exits with the configuration-error status (2) is not
restarted: a corrupt data shard cannot heal by retrying. The worker itself
exits 2 naming the shard; phalanx-launch stops the job within seconds, shows
the worker's message (the end of its log) and exits non-zero, instead of
restarting the worker for minutes.

The shard is overwritten with seeded random bytes (the seed is printed on
failure)."""
import glob
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Launch, check, free_port, main, make_corpus  # noqa: E402

SEED = 7


def corrupt(data_dir):
    shard = sorted(glob.glob(os.path.join(data_dir, "train_*.bin")))[0]
    rnd = random.Random(SEED)
    size = os.path.getsize(shard)
    with open(shard, "wb") as f:
        f.write(bytes(rnd.getrandbits(8) for _ in range(size)))
    return shard


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-badshard-data-"))
    shard = corrupt(data)
    name = os.path.basename(shard)
    train = ["--model", "tiny", "--steps", "50", "--data", data]

    # The worker alone: exit 2, and the message names the shard (no coordinator needed to find out).
    w = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--coordinator", "tcp://127.0.0.1:%d" % free_port(),
                        "--group", "g0", "--rank", "0"] + train,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(w.returncode == 2, "a worker with a corrupt shard exits 2 (configuration error), got %d (seed %d): %s" %
          (w.returncode, SEED, w.stderr[-500:]))
    check(name in w.stderr, "its error names the shard %s: %r" % (name, w.stderr[-500:]))

    # Under the launcher: no restart, the job stops with the worker's message.
    t0 = time.monotonic()
    launch = Launch(bindir, ["--groups", "2"] + train, name="badshard")
    try:
        rc = launch.wait(60)
        out = "\n".join(launch.output())
        took = time.monotonic() - t0
        print("launcher exited %d after %.1f s" % (rc, took))
        check(rc != 0, "phalanx-launch exits non-zero, got %d (seed %d):\n%s" % (rc, SEED, launch.tail()))
        check(name in out, "phalanx-launch shows the worker's message naming %s:\n%s" % (name, launch.tail()))
        check("configuration error" in out, "it says the worker reported a configuration error:\n%s" % launch.tail())
        check(not any("; restart " in line for line in launch.output()),
              "no worker was restarted:\n%s" % launch.tail())
        s = launch.summary()
        check(s is not None and s["completed"] is False, "the summary says not completed: %s" % s)
    finally:
        launch.terminate()


if __name__ == "__main__":
    main(test)
