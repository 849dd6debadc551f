"""AdamW's --beta1/--beta2/--eps and --progress-format json, end to end
through phalanx-launch (which reads rank 0's lines in either format):
  1. a run with --beta1 0.9 --beta2 0.95 --eps 1e-8 --progress-format json
     ends bit for bit where a run without the flags does (same checksum):
     the defaults are the old constants, and the format changes no number;
  2. --beta2 0.5 changes the losses and the checksum;
  3. the JSON lines (kept in LOG_DIR/worker-GROUP-0.out) parse with json,
     carry "kind" and the keys of the text line, and full precision: each
     loss and norm is a float32 written with 9 significant digits.
  4. DiLoCo: JSON progress objects per inner step (inner, round) and an
     outer_step object per outer step.
The launcher shows steps from the JSON lines as it does from the text ones."""
import glob
import json
import os
import struct
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Launch, check, full_quorum_env, main, make_corpus  # noqa: E402

STEPS = 6
COMMON = ["--groups", "2", "--model", "tiny", "--steps", str(STEPS)]
WORKER = ["--", "--global-batch", "4", "--micro-batch", "2", "--eval-batches", "1", "--seq", "32"]


def run(bindir, data, extra, name):
    # the runs are compared bit for bit: both groups from the first step
    launch = Launch(bindir, COMMON + ["--data", data] + WORKER + extra, env=full_quorum_env(2), name=name)
    try:
        rc = launch.wait(180)
    finally:
        launch.terminate()
    check(rc == 0, "%s: phalanx-launch exited %d:\n%s" % (name, rc, launch.tail()))
    finals = launch.finals()
    check(len(finals) == 2, "%s: both groups finish: %s" % (name, finals))
    cks = {f["checksum"] for f in finals.values()}
    check(len(cks) == 1, "%s: the groups end with one state: %s" % (name, cks))
    check(launch.last_step() == STEPS, "%s: the launcher showed every step (last %d)" % (name, launch.last_step()))
    return launch, cks.pop()


def lines_of(launch):
    out = []
    for path in sorted(glob.glob(os.path.join(launch.dir, "worker-*-0.out"))):
        with open(path) as f:
            out += [ln.rstrip("\n") for ln in f]
    return out


def is_float32_9g(text):
    f32 = struct.unpack("f", struct.pack("f", float(text)))[0]  # the nearest float32
    return "%.9g" % f32 == text


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-flags-data-"))
    plain, ck_plain = run(bindir, data, [], "flags-default")
    check(any(ln.startswith("progress step=") for ln in lines_of(plain)),
          "without --progress-format the kept lines are text")
    explicit, ck_explicit = run(bindir, data, ["--beta1", "0.9", "--beta2", "0.95", "--eps", "1e-8",
                                               "--progress-format", "json"], "flags-explicit")
    check(ck_plain == ck_explicit, "the default AdamW constants are 0.9/0.95/1e-8: checksums %s vs %s" %
          (ck_plain, ck_explicit))
    other, ck_other = run(bindir, data, ["--beta2", "0.5", "--progress-format", "json"], "flags-beta2")
    check(ck_other != ck_plain, "--beta2 0.5 changes the trained state (checksum %s both)" % ck_plain)

    def progress(launch):
        objs = [json.loads(ln) for ln in lines_of(launch) if ln.startswith("{")]
        check(objs, "json lines kept in %s" % launch.dir)
        check(all("kind" in o for o in objs), "every JSON line has a kind")
        return {o["step"]: o for o in objs if o["kind"] == "progress"}

    a, b = progress(explicit), progress(other)
    check(sorted(a) == list(range(1, STEPS + 1)), "a progress object per committed step: %s" % sorted(a))
    for o in a.values():
        for k in ("step", "loss", "norm", "ms", "tok_s", "groups", "quorum", "group", "mode"):
            check(k in o, "progress object has %s: %s" % (k, o))
        check(o["mode"] == "sync" and o["groups"] == 2, "mode and groups: %s" % o)
    # full precision: the raw text of each loss/norm is the float32's %.9g
    raw = [ln for ln in lines_of(explicit) if ln.startswith('{"kind":"progress"')]
    for ln in raw:
        for key in ("loss", "norm"):
            text = ln.split('"%s":' % key)[1].split(",")[0]
            check(is_float32_9g(text), "%s written at full precision: %r in %s" % (key, text, ln))
    check(any(len(ln.split('"loss":')[1].split(",")[0].replace(".", "")) > 7 for ln in raw),
          "losses carry more digits than the text line's 6 decimals")
    check(a[1]["loss"] == b[1]["loss"], "step 1's loss comes before any update: equal (%r, %r)" %
          (a[1]["loss"], b[1]["loss"]))
    check(any(a[s]["loss"] != b[s]["loss"] for s in range(2, STEPS + 1)), "--beta2 changes the losses after step 1")

    # DiLoCo: inner steps are progress objects with inner/round, each outer step an outer_step object
    diloco, _ = run(bindir, data, ["--mode", "diloco", "--inner-steps", "3", "--progress-format", "json"],
                    "flags-diloco")
    objs = [json.loads(ln) for ln in lines_of(diloco) if ln.startswith("{")]
    outer = [o for o in objs if o["kind"] == "outer_step"]
    inner = [o for o in objs if o["kind"] == "progress"]
    check(len(outer) == STEPS // 3 and all(o["mode"] == "diloco" and "wire_bytes" in o for o in outer),
          "an outer_step object per outer step: %s" % outer)
    check(inner and all(o["mode"] == "diloco" and 1 <= o["inner"] <= o["round"] == 3 for o in inner),
          "inner steps carry inner/round: %s" % inner[:2])
    check(any("outer step" in ln for ln in diloco.output()), "the launcher shows the JSON outer steps")


if __name__ == "__main__":
    main(test)
