"""Gradient reduction in buckets overlapped with the backward (--bucket-mb,
worker/reducer.c) for groups of whole replicas: 3 groups x 2 ranks of `tiny`
with buckets of 0.05 MiB (about ten per step).

  1. Without failures the run ends with the loss of the one-shot reduction's
     run within 1e-5 (bucket sums add in another order: not the same bits),
     and every group holds the same state.
  2. With seeded SIGKILLs of random ranks (collectives failing while buckets
     are in flight) the run completes, the groups end bitwise identical, and
     the final loss is within 1e-3 of the failure-free run's (the fixed
     global batch: the same samples per committed step)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus  # noqa: E402

SEED = int(os.environ.get("PX_CHAOS_SEED", "5"))
STEPS = 120


def run(bindir, data, name, bucket_mb, chaos=()):
    launch = Launch(bindir, ["--groups", "3", "--ranks-per-group", "2", "--model", "tiny", "--steps", str(STEPS),
                             "--data", data] + list(chaos) +
                    ["--", "--global-batch", "12", "--micro-batch", "2", "--bucket-mb", str(bucket_mb)], name=name)
    try:
        rc = launch.wait(300)
        check(rc == 0, "%s: phalanx-launch exited %s:\n%s" % (name, rc, launch.tail()))
        s = launch.summary()
        check(s and s["completed"] and s["steps"] == STEPS, "%s: completed %d steps: %s" % (name, STEPS, s))
        finals = launch.finals()
        check(sorted(finals) == ["g0", "g1", "g2"], "%s: every group finished: %s" % (name, sorted(finals)))
        check(len({f["checksum"] for f in finals.values()}) == 1, "%s: identical checksums: %s" % (name, finals))
        return s, launch
    except Fail as e:
        raise Fail("%s\n%s" % (e, launch.tail(25)))


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-buckets-data-"))
    plain, _ = run(bindir, data, "oneshot", 0)
    bucketed, launch = run(bindir, data, "buckets", 0.05)
    a, b = plain["final_loss"], bucketed["final_loss"]
    check(abs(a - b) <= 1e-5 * abs(a), "bucketed final loss %.6f vs one-shot %.6f" % (b, a))
    try:
        chaos, launch = run(bindir, data, "buckets-chaos", 0.05,
                            ["--chaos-kill-every-steps", "15", "--chaos-max-kills", "4", "--chaos-until-step", "90",
                             "--chaos-seed", str(SEED)])
        check(chaos["chaos_kills"] >= 2, "at least 2 kills: %s" % chaos)
        c = chaos["final_loss"]
        check(abs(c - b) <= 1e-3 * abs(b), "final loss with kills %.6f vs without %.6f" % (c, b))
    except Fail as e:
        raise Fail("%s (chaos seed %d)" % (e, SEED))
    print("one-shot %.6f, buckets %.6f, buckets with %d kills %.6f" % (a, b, chaos["chaos_kills"], c))


if __name__ == "__main__":
    main(test)
