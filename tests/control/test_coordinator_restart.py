"""Coordinator restart: SIGKILL the coordinator of a running job and start it
again on the same address. Every worker must be a member again within 2 s,
the workers' quorum must be adopted (same id, same groups: training would not
stop), and a failure after the restart must still be handled."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, wait_until  # noqa: E402


def test(bindir):
    job = Job(bindir, "restart")
    try:
        job.start_coordinator()
        for g in ("a", "b", "c"):
            for r in (0, 1):
                job.start_worker(g, r, 2)
        st = wait_until(lambda: (len(job.status()["quorum"]["groups"]) == 3 and job.status()), 10,
                        "a quorum of 3 groups")
        qid = st["quorum"]["id"]

        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        time.sleep(0.5)  # workers notice nothing yet: no heartbeat answers
        t0 = time.monotonic()
        job.start_coordinator()

        def all_back():
            st = job.status()
            return len(job.live_members(st)) == 6 and st
        st = wait_until(all_back, 2.0, "all 6 workers registered again within 2 s")
        print("all workers back %.0f ms after the restart" % ((time.monotonic() - t0) * 1000))
        st = wait_until(lambda: (sorted(job.status()["quorum"]["groups"]) == ["a", "b", "c"] and job.status()),
                        3, "the workers' quorum adopted")
        check(st["quorum"]["id"] == qid, "adopted quorum keeps id %d, got %d" % (qid, st["quorum"]["id"]))
        time.sleep(1.2)  # past the recovery window: nothing may be dropped
        st = job.status()
        check(st["quorum"]["id"] == qid and len(st["quorum"]["groups"]) == 3,
              "quorum unchanged after the recovery window: %s" % st["quorum"])

        job.workers[("b", 1)].send_signal(signal.SIGKILL)
        st = wait_until(lambda: (job.status()["quorum"]["groups"] == ["a", "c"] and job.status()), 3,
                        "b dropped after the restart")
        check(st["quorum"]["id"] == qid + 1, "next quorum id follows the adopted one")
    finally:
        job.stop()


if __name__ == "__main__":
    main(test)
