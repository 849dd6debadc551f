"""The coordinator killed for 5 s in the middle of a run.

Asserts: steps keep committing while it is gone (no coordinator round trip
per step); when it comes back on the same address every worker registers
again within 2 s and the running quorum is adopted; a worker killed after
that is still dropped, and its restarted process heals and rejoins."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, Launch, check, main, make_corpus, wait_until  # noqa: E402


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-outage-data-"))
    job = Job(bindir, "outage")
    job.start_coordinator()
    launch = Launch(bindir, ["--coordinator", job.endpoint, "--job", job.job, "--groups", "3", "--model", "tiny",
                             "--steps", "100000", "--data", data, "--", "--global-batch", "12", "--micro-batch", "4"],
                    name="outage")
    try:
        wait_until(lambda: len(job.status()["quorum"]["groups"]) == 3 and launch.last_step() >= 20, 60,
                   "3 groups training")
        qid = job.status()["quorum"]["id"]
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        s0 = launch.last_step()
        time.sleep(5)
        s1 = launch.last_step()
        print("steps committed while the coordinator was down: %d" % (s1 - s0))
        check(s1 - s0 >= 10, "steps kept committing without the coordinator (%d -> %d)" % (s0, s1))

        t0 = time.monotonic()
        job.start_coordinator()
        st = wait_until(lambda: len(job.live_members()) == 3 and job.status(), 2.0,
                        "all 3 workers registered again within 2 s")
        print("workers back %.0f ms after the restart" % ((time.monotonic() - t0) * 1000))
        st = wait_until(lambda: len(job.status()["quorum"]["groups"]) == 3 and job.status(), 5, "quorum adopted")
        check(st["quorum"]["id"] == qid, "the running quorum %d is adopted, got %d" % (qid, st["quorum"]["id"]))
        time.sleep(1.2)  # past the restarted coordinator's recovery window (one heartbeat timeout)
        st = job.status()
        check(st["quorum"]["id"] == qid and len(st["quorum"]["groups"]) == 3, "quorum kept after the window: %s" % st["quorum"])

        pid = [m["pid"] for m in st["members"] if m["group"] == "g2"][0]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: any(e["type"] == "group_dropped" and e["group"] == "g2" for e in job.read_events()), 5,
                   "g2 dropped after the restart")
        wait_until(lambda: (sorted(job.status()["quorum"]["groups"]) == ["g0", "g1", "g2"] and
                            any(e["type"] == "heal_finished" and e["group"] == "g2" for e in job.read_events())),
                   30, "g2 restarted, healed and back")
        s2 = launch.last_step()
        wait_until(lambda: launch.last_step() >= s2 + 5, 30, "training goes on")
    finally:
        launch.terminate()
        job.stop()


if __name__ == "__main__":
    main(test)
