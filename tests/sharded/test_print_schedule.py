"""phalanx-worker --print-schedule: the pipeline schedule of --pp,
--microbatches and --schedule printed as a timeline, without a group or a
coordinator (parallel/schedule.h; tests/sharded/test_schedule.c checks the
schedules themselves).

  1. --pp 4 --microbatches 8 for each of gpipe, 1f1b and zb-h1: exit 0, a
     header naming the schedule, P and M, and four stage rows, each holding
     F0..F7 and B0..B7 (zb-h1: b0..b7 and w0..w7, the backward's halves).
  2. Defaults: --microbatches is the --pp value, --schedule 1f1b.
  3. Bad values (--schedule nope, --microbatches 0) exit 2 with a message
     naming the flag and the value."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, main  # noqa: E402


def worker(bindir, *args):
    r = subprocess.run([os.path.join(bindir, "phalanx-worker")] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    return r.returncode, r.stdout, r.stderr.strip()


def rows_of(out):
    """The header and {stage: [cells]} of a printed timeline."""
    lines = out.splitlines()
    rows = {}
    for line in lines[1:]:
        label, _, cells = line.partition(":")
        check(label.startswith("stage "), "a row per stage, got %r" % line)
        rows[int(label.split()[1])] = cells.split()
    return lines[0] if lines else "", rows


def test(bindir):
    for kind, back in (("gpipe", ["B"]), ("1f1b", ["B"]), ("zb-h1", ["b", "w"])):
        rc, out, err = worker(bindir, "--print-schedule", "--pp", "4", "--microbatches", "8", "--schedule", kind)
        check(rc == 0, "%s: exit 0, got %d: %s" % (kind, rc, err))
        head, rows = rows_of(out)
        check(head.startswith("schedule=%s P=4 M=8 bubble=" % kind), "%s: the header: %r" % (kind, head))
        check(sorted(rows) == [0, 1, 2, 3], "%s: four stage rows, got %s" % (kind, sorted(rows)))
        for stage, cells in rows.items():
            for letter in ["F"] + back:
                missing = [mb for mb in range(8) if "%s%d" % (letter, mb) not in cells]
                check(not missing, "%s stage %d: no %s of micro-batches %s in %s" % (kind, stage, letter, missing,
                                                                                     " ".join(cells)))
            others = [c for c in cells if c != "." and c[0] not in ["F"] + back]
            check(not others, "%s stage %d: unexpected cells %s" % (kind, stage, others))
        print("%s: %s" % (kind, head))

    rc, out, err = worker(bindir, "--print-schedule", "--pp", "3")
    head, rows = rows_of(out)
    check(rc == 0 and head.startswith("schedule=1f1b P=3 M=3 ") and len(rows) == 3,
          "defaults: 1f1b with M = P, got %d %r: %s" % (rc, head, err))
    rc, out, err = worker(bindir, "--print-schedule")
    check(rc == 0 and out.startswith("schedule=1f1b P=1 M=1 "), "no flags: P = M = 1, got %d %r" % (rc, out))

    rc, out, err = worker(bindir, "--print-schedule", "--pp", "4", "--schedule", "nope")
    check(rc == 2 and "--schedule" in err and "'nope'" in err and "gpipe, 1f1b or zb-h1" in err and not out,
          "--schedule nope: exit 2 naming the value and the choices, got %d %r" % (rc, err))
    rc, out, err = worker(bindir, "--print-schedule", "--pp", "4", "--microbatches", "0")
    check(rc == 2 and "--microbatches" in err and "'0'" in err and not out,
          "--microbatches 0: exit 2 naming the value, got %d %r" % (rc, err))
    r = subprocess.run([os.path.join(bindir, "phalanx-worker"), "--help"], stdout=subprocess.PIPE, text=True)
    for flag in ("--microbatches M", "--schedule KIND", "--print-schedule"):
        check(flag in r.stdout, "--help documents %s" % flag)


if __name__ == "__main__":
    main(test)
