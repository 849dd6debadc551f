"""SIGSTOP a worker past the heartbeat timeout, then SIGCONT it.

Asserts: its group is dropped and the others keep committing steps while it
is stopped; when it resumes it is fenced (the coordinator answers it as an
unknown member and its old quorum is stale, so nothing it sends from before
changes the quorum), it registers again and rejoins by healing; afterwards all
three groups commit steps together.

Second scenario (a stopped group whose peers were meanwhile waiting for it in
a rendezvous): SIGSTOP g1 and, at the same moment, SIGKILL g2. The quorum that
replaces g2 still holds the stopped g1, so g0 (and g2's restarted process)
enter a rendezvous that g1 can never join; g1 is dropped a heartbeat timeout
later and a newer quorum forms. Workers must give up a rendezvous of a
superseded quorum at once, not wait out the 30 s --comm-timeout-ms: after
SIGCONT, g1 must be training with the others within 8 s. It commits no step
while fenced, and at the end all groups report the same state checksum."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-stop-data-"))
    stopped_during_rendezvous(bindir, data)
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


REJOIN_LIMIT_S = 8  # well under the 30 s --comm-timeout-ms that a stale rendezvous waits out


def ledger_lines(path):
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
                if "step" in kv and "group" in kv:
                    out.append(kv)
    return out


def stopped_during_rendezvous(bindir, data):
    ledger = os.path.join(tempfile.mkdtemp(prefix="phalanx-stop2-"), "ledger.txt")
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "600", "--data", data,
                             "--sample-ledger", ledger, "--", "--global-batch", "12", "--micro-batch", "4"],
                    name="sigstop2")
    try:
        wait_until(lambda: launch.last_step() >= 20, 60, "20 committed steps")
        g1, g2 = launch.pid_of("g1"), launch.pid_of("g2")
        check(g1 and g2, "g1 and g2 are live members")
        os.kill(g1, signal.SIGSTOP)
        os.kill(g2, signal.SIGKILL)
        try:
            wait_until(lambda: "g1" not in launch.status()["quorum"]["groups"], 10, "g1 dropped while stopped")
            time.sleep(1.0)
            n_lines = len(launch.output())
            n_ledger = len(ledger_lines(ledger))
        finally:
            os.kill(g1, signal.SIGCONT)
        t_cont = time.time()
        wait_until(lambda: any("groups 3/3" in l for l in launch.output()[n_lines:]), 60,
                   "a step committed by all 3 groups after SIGCONT")
        took = time.time() - t_cont
        print("SIGCONT -> first step of all 3 groups: %.1f s" % took)
        check(took < REJOIN_LIMIT_S, "g1 trained with the others %.1f s after SIGCONT (limit %d s)" % (took, REJOIN_LIMIT_S))
        rc = launch.wait(120)
        check(rc == 0, "phalanx-launch exit status %d" % rc)
        finals = launch.finals()
        check(sorted(finals) == ["g0", "g1", "g2"], "every group finished: %s" % finals)
        sums = set(f["checksum"] for f in finals.values())
        check(len(sums) == 1, "all groups end with the same state checksum: %s" % finals)
        # Fenced: g1 committed nothing in the quorum it held when stopped.
        evs = launch.read_events()
        rejoined = [e for e in evs if e["type"] == "member_joined" and e["group"] == "g1" and e["pid"] == g1]
        check(len(rejoined) >= 2, "the resumed g1 registered again: %s" % rejoined)
        later = [e["quorum_id"] for e in evs if e["type"] == "quorum_formed" and e["seq"] > rejoined[-1]["seq"]
                 and "g1" in e["groups"]]
        check(later, "a quorum holding g1 formed after it registered again")
        # A step g0 also committed in the same quorum was committed by all
        # before the stop; g1 was stopped between that commit and writing
        # its ledger line, which then lands late. A fenced commit is one no
        # other group made.
        lines = ledger_lines(ledger)
        joint = {(l["step"], l["quorum"]) for l in lines if l["group"] == "g0"}
        stale = [l for l in lines[n_ledger:] if l["group"] == "g1" and int(l["quorum"]) < min(later)
                 and (l["step"], l["quorum"]) not in joint]
        check(not stale, "g1 committed no step while fenced: %s" % stale[:3])
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s\n(logs in %s)" % (e, launch.tail(30), launch.dir))
    finally:
        launch.terminate()


if __name__ == "__main__":
    main(test)
