"""Chaos with several ranks per group: 2 groups x 2 ranks of `tiny`, seeded
SIGKILLs of random ranks. A lost rank drops its whole group; the group's
surviving rank waits for its restarted peer; the group is brought to one state
inside (broadcast from its most advanced rank) and then healed from the other
group. Asserts the run completes and both groups end bitwise identical."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus  # noqa: E402

SEED = int(os.environ.get("PX_CHAOS_SEED", "3"))


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ranks-data-"))
    launch = Launch(bindir, ["--groups", "2", "--ranks-per-group", "2", "--model", "tiny", "--steps", "200",
                             "--data", data, "--chaos-kill-every-steps", "20", "--chaos-max-kills", "5",
                             "--chaos-until-step", "130", "--chaos-seed", str(SEED),
                             "--", "--global-batch", "12", "--micro-batch", "3"], name="ranks")
    try:
        rc = launch.wait(300)
        check(rc == 0, "phalanx-launch exited %s:\n%s" % (rc, launch.tail()))
        s = launch.summary()
        check(s and s["completed"] and s["steps"] == 200, "completed 200 steps: %s" % s)
        check(s["chaos_kills"] >= 3, "at least 3 kills: %s" % s)
        finals = launch.finals()
        check(sorted(finals) == ["g0", "g1"], "both groups finished: %s" % sorted(finals))
        check(len({f["checksum"] for f in finals.values()}) == 1, "identical checksums: %s" % finals)
    except Fail as e:
        raise Fail("%s (chaos seed %d)\n%s" % (e, SEED, launch.tail(25)))


if __name__ == "__main__":
    main(test)
