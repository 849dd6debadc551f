"""A rank of a sharded group SIGKILLed: 2 groups, each fsdp2 x tp2 (4 ranks)
of `tiny`, under phalanx-launch (which restarts the dead worker). The lost
rank drops its whole group; the other group goes on committing steps alone;
the restarted rank's group rejoins, every rank of it is healed from the
same-coordinate rank of the other group, and at the end both groups hold
the same state (the checksum of every rank's shard checksums). Scenario "stop":
the same with a rank frozen by SIGSTOP for 3 s instead of killed.

The victim (group and rank) comes from a fixed seed, printed on failure."""
import os
import random
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main_scenarios, make_corpus, wait_until  # noqa: E402

SEED = int(os.environ.get("PX_CHAOS_SEED", "11"))
STEPS = 80


def finish_and_compare(launch, group):
    """Waits for the job; checks both groups finished with one state and
    that `group` was healed."""
    rc = launch.wait(400)
    check(rc == 0, "phalanx-launch exited %s" % rc)
    s = launch.summary()
    check(s and s["completed"] and s["steps"] == STEPS, "completed %d steps: %s" % (STEPS, s))
    finals = launch.finals()
    check(sorted(finals) == ["g0", "g1"], "both groups finished: %s" % sorted(finals))
    cks = {g: f["checksum"] for g, f in finals.items()}
    check(len(set(cks.values())) == 1, "the groups' state checksums agree: %s" % cks)
    healed = [e for e in launch.read_events() if e.get("type") == "heal_finished" and e.get("group") == group]
    check(healed, "group %s was healed (events: %s)" % (group, launch.events_path))
    return cks


def start(bindir, name, layout=("--fsdp", "2", "--tp", "2"), seed=SEED):
    """2 groups of 4 ranks laid out as `layout` (fsdp2 x tp2 unless given)
    under phalanx-launch, at step 15; the victim (drawn from seed: a group,
    and a rank other than 0, which prints) and its pid."""
    rnd = random.Random(seed)
    group, rank = rnd.choice(["g0", "g1"]), rnd.randrange(1, 4)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-%s-data-" % name))
    launch = Launch(bindir, ["--groups", "2", "--ranks-per-group", "4", "--model", "tiny", "--steps", str(STEPS),
                             "--data", data, "--"] + list(layout) + ["--global-batch", "8",
                             "--micro-batch", "2", "--comm-timeout-ms", "20000"], name=name)
    try:
        wait_until(lambda: launch.last_step() >= 15, 180, "step 15")
        pid = launch.pid_of(group, rank)
        check(pid, "%s rank %d is running" % (group, rank))
    except Fail:
        launch.terminate()
        raise
    return group, rank, launch, pid


def stop_scenario(bindir, name, layout=("--fsdp", "2", "--tp", "2"), seed=SEED):
    """A rank frozen (SIGSTOP) past the heartbeat timeout, its group peers
    blocked in a collective with it: the group is dropped, the other group
    trains on, and after SIGCONT the group rejoins and heals."""
    group, rank, launch, pid = start(bindir, name, layout, seed)
    try:
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        wait_until(lambda: any("groups 1/2" in l for l in launch.output()), 30, "a step committed without the frozen group")
        time.sleep(max(0.0, 3.0 - (time.time() - t0)))
        os.kill(pid, signal.SIGCONT)
        cks = finish_and_compare(launch, group)
        check(launch.summary()["failures"] == 0, "no worker died (the frozen one resumed): %s" % launch.summary())
        print("froze %s rank %d (%s) for 3 s; group dropped, rejoined, healed; checksums %s" %
              (group, rank, " ".join(layout), cks))
    except Fail as e:
        raise Fail("%s (seed %d, frozen %s rank %d)\n%s" % (e, seed, group, rank, launch.tail(30)))
    finally:
        launch.terminate()


def kill_scenario(bindir, name, layout=("--fsdp", "2", "--tp", "2"), seed=SEED):
    """A rank SIGKILLed: its group dropped, the other trains on, the restarted
    rank's group rejoins and is healed rank by rank, one state at the end."""
    group, rank, launch, pid = start(bindir, name, layout, seed)
    try:
        killed_at = launch.last_step()
        os.kill(pid, signal.SIGKILL)
        # the other group commits steps without the victim's group
        wait_until(lambda: any("groups 1/2" in l for l in launch.output()), 60, "a step committed by one group")
        cks = finish_and_compare(launch, group)
        dropped = [l for l in launch.output() if "dropped" in l or "lost" in l]
        check(dropped, "the launcher reported the drop")
        print("killed %s rank %d (%s) at step %d; group dropped, rejoined, healed; checksums %s" %
              (group, rank, " ".join(layout), killed_at, cks))
    except Fail as e:
        raise Fail("%s (seed %d, victim %s rank %d)\n%s" % (e, seed, group, rank, launch.tail(30)))
    finally:
        launch.terminate()


def test_stop(bindir):
    stop_scenario(bindir, "shardstop")


def test_kill(bindir):
    kill_scenario(bindir, "shardkill")


if __name__ == "__main__":
    main_scenarios({"kill": test_kill, "stop": test_stop}, default="kill")
