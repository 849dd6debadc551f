"""A kill during healing is survived, on either side of the transfer.

Healing is slowed down for the test (PX_TEST_HEAL_CHUNK_DELAY_MS pauses the
sender between chunks) so that a process can be killed mid-transfer:
  1. kill g2; its restarted process starts healing; kill its heal source in
     the middle: the joiner discards the partial state and heals from the
     remaining up-to-date group;
  2. kill a group; while its restarted process heals, kill that joiner: the
     source notices, the quorum re-forms, and the joiner's next incarnation heals.
Afterwards all three groups commit steps together.
  3. (a 2-group job) a group behind (stopped, then resumed) heals from the
     only other group, which is killed mid-heal: the receiver keeps the state
     it had (same step, same state), it never goes back to step 0, and the
     restarted source heals from it. The job goes on from there instead of
     starting again from scratch."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402


def heal_events(launch, kind, group):
    return [e for e in launch.read_events() if e["type"] == kind and e["group"] == group]


def kill_group(launch, group):
    pid = launch.pid_of(group)
    check(pid, "%s is a live member" % group)
    os.kill(pid, signal.SIGKILL)
    return pid


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-healkill-data-"))
    source_killed_in_two_group_job(bindir, data)
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "100000", "--data", data,
                             "--", "--global-batch", "12", "--micro-batch", "4"],
                    env={"PX_TEST_HEAL_CHUNK_DELAY_MS": "1500"}, name="healkill")
    try:
        run_scenarios(launch)
    except Fail as e:
        evs = [(e2["type"], e2.get("group"), e2.get("peer_group")) for e2 in launch.read_events()[-25:]]
        raise Fail("%s\nlast events: %s\nlauncher:\n%s" % (e, evs, launch.tail(25)))
    finally:
        launch.terminate()


def run_scenarios(launch):
    wait_until(lambda: launch.last_step() >= 10, 60, "10 committed steps")

    # 1. kill the source mid-heal
    old = kill_group(launch, "g2")
    wait_until(lambda: launch.pid_of("g2") not in (None, old) and heal_events(launch, "heal_started", "g2"),
               20, "restarted g2 starts healing")
    src = heal_events(launch, "heal_started", "g2")[-1]["peer_group"]
    check(src in ("g0", "g1"), "g2 heals from a live group, got %r" % src)
    kill_group(launch, src)
    # The transfer takes ~4.5 s (3 chunks, 1.5 s apart): it cannot have finished.
    check(not heal_events(launch, "heal_finished", "g2"), "the kill landed mid-heal")
    other = "g1" if src == "g0" else "g0"
    wait_until(lambda: any(e["peer_group"] == other for e in heal_events(launch, "heal_finished", "g2")), 30,
               "g2 healed from %s after %s died mid-heal" % (other, src))
    # g2 was at step 0 and received in place: the failure rebuilt its initial state (worker/heal.h).
    log = open(os.path.join(launch.dir, "worker-g2-0.log")).read()
    check("heal_failed source=%s" % src in log and "(state kept at step 0)" in log,
          "the failed in-place heal says it kept step 0: %r" % log[-600:])
    wait_until(lambda: sorted(launch.status()["quorum"]["groups"]) == ["g0", "g1", "g2"], 30,
               "all groups back after the source kill")
    s0 = launch.last_step()
    wait_until(lambda: launch.last_step() >= s0 + 5, 30, "training after scenario 1")

    # 2. kill the joiner mid-heal
    n_started = len(heal_events(launch, "heal_started", "g1"))
    old = kill_group(launch, "g1")
    wait_until(lambda: len(heal_events(launch, "heal_started", "g1")) > n_started, 20, "restarted g1 starts healing")
    joiner = launch.pid_of("g1")
    check(joiner and joiner != old, "g1 restarted")
    n_finished = len(heal_events(launch, "heal_finished", "g1"))
    os.kill(joiner, signal.SIGKILL)
    wait_until(lambda: len(heal_events(launch, "heal_finished", "g1")) > n_finished, 40,
               "g1's next incarnation healed")
    wait_until(lambda: sorted(launch.status()["quorum"]["groups"]) == ["g0", "g1", "g2"], 30,
               "all groups back after the joiner kill")
    s1 = launch.last_step()
    wait_until(lambda: launch.last_step() >= s1 + 5, 30, "training after scenario 2")
    last = [l for l in launch.output() if "] step " in l][-1]
    check("groups 3/3" in last, "steps committed by 3 groups: %s" % last)


def ledger_steps(path, group):
    """The steps `group` committed, in the order it committed them."""
    out = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
                if kv.get("group") == group:
                    out.append(int(kv["step"]))
    return out


def source_killed_in_two_group_job(bindir, data):
    ledger = os.path.join(tempfile.mkdtemp(prefix="phalanx-healkill2-"), "ledger.txt")
    launch = Launch(bindir, ["--groups", "2", "--model", "tiny", "--steps", "100000", "--data", data,
                             "--sample-ledger", ledger, "--", "--global-batch", "12", "--micro-batch", "4"],
                    env={"PX_TEST_HEAL_CHUNK_DELAY_MS": "1500"}, name="healkill2")
    try:
        receiver_keeps_its_state(launch, ledger)
    except Fail as e:
        evs = [(e2["type"], e2.get("group"), e2.get("step"), e2.get("groups")) for e2 in launch.read_events()[-25:]]
        raise Fail("%s\nlast events: %s\nlauncher:\n%s\n(logs in %s)" % (e, evs, launch.tail(25), launch.dir))
    finally:
        launch.terminate()


def receiver_keeps_its_state(launch, ledger):
    wait_until(lambda: launch.last_step() >= 10, 60, "10 committed steps")
    # Put g1 behind: stopped past the heartbeat timeout, it is dropped while g0 trains on alone.
    pid = launch.pid_of("g1")
    check(pid, "g1 is a live member")
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: launch.status()["quorum"]["groups"] == ["g0"], 10, "g1 dropped while stopped")
        s_drop = launch.last_step()
        wait_until(lambda: launch.last_step() >= s_drop + 10, 30, "g0 trains on alone")
    finally:
        os.kill(pid, signal.SIGCONT)
    n_ev = len(launch.read_events())
    started = wait_until(lambda: [e for e in launch.read_events()[n_ev:]
                                  if e["type"] == "heal_started" and e["group"] == "g1"], 20,
                         "resumed g1 starts healing from g0")[0]
    check(started["peer_group"] == "g0", "g1 heals from g0: %s" % started)
    before = started["step"]  # the receiver's step when the heal began
    check(before >= 10, "g1 was at step %d (>= 10) before the heal" % before)
    mine = ledger_steps(ledger, "g1")
    check(mine and mine[-1] == before - 1, "g1's ledger ends at step %d: %s" % (before - 1, mine[-5:]))
    n_ev = len(launch.read_events())
    kill_group(launch, "g0")
    time.sleep(0.5)
    evs = launch.read_events()[n_ev:]
    check(not any(e["type"] == "heal_finished" and e["group"] == "g1" for e in evs), "the kill landed mid-heal")
    # g0's next incarnation starts at step 0: it must heal from g1, not the other way round.
    healed = wait_until(lambda: [e for e in launch.read_events()[n_ev:]
                                 if e["type"] == "heal_finished" and e["group"] == "g0"], 40,
                        "restarted g0 heals from g1")[0]
    check(healed["peer_group"] == "g1" and healed["step"] >= before,
          "g0 healed from g1 at step %d or later: %s" % (before, healed))
    wait_until(lambda: max(ledger_steps(ledger, "g1") or [0]) >= before + 5, 30, "g1 trains on from step %d" % before)
    evs = launch.read_events()[n_ev:]
    formed = [e for e in evs if e["type"] == "quorum_formed"]
    check(formed and all(e["step"] >= before for e in formed),
          "no quorum after the kill went back behind step %d: %s" % (before, [(e["groups"], e["step"]) for e in formed]))
    steps = ledger_steps(ledger, "g1")
    check(all(b == a + 1 for a, b in zip(steps, steps[1:])),
          "g1 committed every step once, in order (never restarted): %s" % steps[len(mine) - 3:len(mine) + 5])


if __name__ == "__main__":
    main(test)
