"""SIGSTOP a worker past the heartbeat timeout, then SIGCONT it.

Asserts: its group is dropped and the others keep committing steps while it
is stopped; when it resumes it is fenced (the coordinator answers it as an
unknown member and its old quorum is stale, so nothing it sends from before
changes the quorum), it registers again and rejoins by healing; afterwards all
three groups commit steps together."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Launch, check, main, make_corpus, wait_until  # noqa: E402


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-stop-data-"))
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "100000", "--data", data,
                             "--", "--global-batch", "12", "--micro-batch", "4"], name="sigstop")
    try:
        wait_until(lambda: launch.last_step() >= 20, 60, "20 committed steps")
        pid = launch.pid_of("g1")
        check(pid, "g1/0 is a live member")
        q_before = launch.status()["quorum"]["id"]
        os.kill(pid, signal.SIGSTOP)
        t_stop = time.time()

        def dropped():
            st = launch.status()
            return st["quorum"]["groups"] == ["g0", "g2"] and st
        wait_until(dropped, 5, "g1 dropped from the quorum")
        step_at_drop = launch.last_step()
        wait_until(lambda: launch.last_step() >= step_at_drop + 10, 30, "g0 and g2 keep training while g1 is stopped")
        time.sleep(max(0.0, 2.0 - (time.time() - t_stop)))  # well past the 1 s heartbeat timeout
        evs = launch.read_events()
        lost = [e for e in evs if e["type"] == "member_lost" and e["group"] == "g1"]
        check(lost and lost[0]["reason"] in ("heartbeat_timeout", "reported_and_silent"), "g1/0 lost: %s" % lost)
        n_events_before_cont = len(evs)

        os.kill(pid, signal.SIGCONT)

        def rejoined():
            st = launch.status()
            return sorted(st["quorum"]["groups"]) == ["g0", "g1", "g2"] and st
        st = wait_until(rejoined, 30, "g1 back in the quorum")
        check(st["quorum"]["id"] > q_before + 1, "a newer quorum holds g1 again")
        evs = launch.read_events()
        after = evs[n_events_before_cont:]
        rejoin = [e for e in after if e["type"] == "member_joined" and e["group"] == "g1"]
        check(rejoin and rejoin[0]["pid"] == pid, "the resumed process registered again (fenced out first): %s" % rejoin)
        # Nothing the stale process sent before re-registering formed a quorum with g1.
        first_join = after.index(rejoin[0])
        check(not any(e["type"] == "quorum_formed" and "g1" in e["groups"] for e in after[:first_join]),
              "no quorum with g1 before it registered again")
        wait_until(lambda: any(e["type"] == "heal_finished" and e["group"] == "g1" for e in launch.read_events()), 30,
                   "g1 healed from a live group")
        s0 = launch.last_step()
        wait_until(lambda: launch.last_step() >= s0 + 10, 30, "training continues with all groups")
        last = [l for l in launch.output() if "] step " in l][-1]
        check("groups 3/3" in last, "steps committed by 3 groups: %s" % last)
    finally:
        launch.terminate()
    s = launch.summary()
    check(s is not None and s["steps"] > 0, "summary printed on SIGTERM: %s" % s)


if __name__ == "__main__":
    main(test)
