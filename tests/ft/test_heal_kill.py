"""A kill during healing is survived, on either side of the transfer.

Healing is slowed down for the test (PX_TEST_HEAL_CHUNK_DELAY_MS pauses the
sender between chunks) so that a process can be killed mid-transfer:
  1. kill g2; its restarted process starts healing; kill its heal source in
     the middle: the joiner discards the partial state and heals from the
     remaining up-to-date group;
  2. kill a group; while its restarted process heals, kill that joiner: the
     source notices, the quorum re-forms, and the joiner's next incarnation heals.
Afterwards all three groups commit steps together."""
import os
import signal
import sys
import tempfile

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


if __name__ == "__main__":
    main(test)
