"""Pipelined replica groups (--pp, alone and with --tp and --fsdp) against one
rank holding the whole model: a real coordinator and real workers on
loopback, the same seed and global batch.

Scenarios (argv[2]):
  layouts     pp2 with each schedule (gpipe, 1f1b, zb-h1; 4 micro-batches)
              on `tiny`; pp2 x tp2 and pp2 x fsdp2 (1f1b; fsdp2 also
              with zb-h1, whose two backward halves each gather and
              reduce-scatter a layer); all three axes, pp2 x fsdp2 x tp2
              (8 ranks, zb-h1); on the 4-layer `small` pp2 (1f1b, 4
              micro-batches) and pp4 (zb-h1, 8): every step's loss
              within 1e-5 relative of the single rank's over 20 steps, the
              final evaluation loss (forwards through the stages) and the
              whole model gathered from the stages at the end (--save)
              within 1e-5 of the single rank's. Each stage logs its layers.
  refused     --pp larger than the model's layer count: the worker exits
              with a message naming both numbers; a rank whose
              --microbatches differ from its stage peers' is refused by the
              coordinator (WRONG_LAYOUT, naming both layouts).
  kill        2 groups of pp2 x tp2 under phalanx-launch; a rank of one
              group SIGKILLed (victim from a fixed seed, printed on
              failure): its group is dropped, the other trains on, the
              restarted rank's group rejoins and is healed stage by stage
              from the same-coordinate ranks, and both groups end with one
              state checksum (tests/sharded/test_sharded_kill.py's scenario).
  stop        the same with the rank frozen by SIGSTOP for 3 s: its stage
              peers wait in a link receive, the group is dropped and, after
              SIGCONT, rejoins and is healed; no worker dies.
  checkpoint  a checkpoint written by a pp2 group (each stage writes the
              rectangles of its own layers; the tied embedding once)
              verifies and records pp in its layout; restored from step 20
              into fsdp2, and one written by a single rank restored into
              pp2 x tp2, each ends with the writing run's final loss and
              model (1e-5)."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.dirname(__file__))
from phalanx_test import Job, Launch, check, main_scenarios, make_corpus, wait_until  # noqa: E402
import test_layouts as layouts  # noqa: E402  (run, close, read_model: the same job shape as the FSDP/TP layouts)
import test_sharded_kill as sharded_kill  # noqa: E402  (the kill and stop scenarios)

SEED = int(os.environ.get("PX_CHAOS_SEED", "23"))

CASES = [  # name, model, ranks, worker flags
    ("pp2-gpipe", "tiny", 2, ["--pp", "2", "--schedule", "gpipe", "--microbatches", "4"]),
    ("pp2-1f1b", "tiny", 2, ["--pp", "2", "--schedule", "1f1b", "--microbatches", "4"]),
    ("pp2-zbh1", "tiny", 2, ["--pp", "2", "--schedule", "zb-h1", "--microbatches", "4"]),
    ("pp2xtp2", "tiny", 4, ["--pp", "2", "--tp", "2", "--schedule", "1f1b", "--microbatches", "4"]),
    ("pp2xfsdp2", "tiny", 4, ["--pp", "2", "--fsdp", "2", "--schedule", "1f1b", "--microbatches", "2"]),
    ("pp2xfsdp2-zbh1", "tiny", 4, ["--pp", "2", "--fsdp", "2", "--schedule", "zb-h1", "--microbatches", "4"]),
    ("pp2xfsdp2xtp2", "tiny", 8, ["--pp", "2", "--fsdp", "2", "--tp", "2", "--schedule", "zb-h1", "--microbatches",
                                  "4"]),
    ("pp2-small-1f1b", "small", 2, ["--pp", "2", "--schedule", "1f1b", "--microbatches", "4", "--seq", "64"]),
    ("pp4-small-zbh1", "small", 4, ["--pp", "4", "--schedule", "zb-h1", "--microbatches", "8", "--seq", "64"]),
]


def final_eval(log):
    m = re.search(r"^final .* eval_loss=(\S+)", log, re.M)
    check(m, "a final line with the eval loss:\n%s" % log[-2000:])
    return float(m.group(1))


def test_layouts(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-pipeline-data-"))
    bases = {}
    for name, model, ranks, flags in CASES:
        seq = ["--seq", "64"] if model == "small" else []
        if model not in bases:
            losses, save, log, _ = layouts.run(bindir, data, "single-" + model, 1, ["--model", model] + seq, 8)
            bases[model] = (losses, layouts.read_model(save), final_eval(log))
        base, base_params, base_eval = bases[model]
        losses, save, log, job = layouts.run(bindir, data, name, ranks, ["--model", model] + flags, 8)
        ev = final_eval(log)  # the evaluation forwards run through the stages too
        check(layouts.close(ev, base_eval), "%s: final eval loss %.6f, the single rank's %.6f" % (name, ev, base_eval))
        for s in range(1, layouts.STEPS + 1):
            check(layouts.close(losses[s], base[s]),
                  "%s: step %d loss %.6f, the single rank's %.6f" % (name, s, losses[s], base[s]))
        params = layouts.read_model(save)
        check(len(params) == len(base_params), "%s: --save wrote %d floats, not %d" % (name, len(params), len(base_params)))
        worst = max(abs(a - b) for a, b in zip(params, base_params))
        scale = max(abs(b) for b in base_params)
        check(worst <= 1e-5 * scale, "%s: gathered model differs by %.3g (largest %.3g)" % (name, worst, scale))
        stages = set()
        for r in range(ranks):
            with open(os.path.join(job.dir, "worker-g0-%d.log" % r)) as f:
                stages |= set(re.findall(r"pipeline_stage rank=\d+ stage=(\d+) of=\d+ layers=(\d+)\.\.(\d+)", f.read()))
        P = int(flags[flags.index("--pp") + 1])
        check(len({s for s, _, _ in stages}) == P, "%s: every stage logged its layers: %s" % (name, sorted(stages)))
        print("%s: 20 steps within 1e-5 of one rank (last %.6f vs %.6f), model within %.2g; stages %s" %
              (name, losses[layouts.STEPS], base[layouts.STEPS], worst, sorted(stages)))


def test_refused(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-pipeline-refused-"))
    job = Job(bindir, name="pp-refused")
    try:
        job.start_coordinator()
        for r in range(4):
            job.start_worker("g0", r, 4, ["--steps", "3", "--model", "tiny", "--data", data, "--pp", "4"])
        codes = [p.wait(timeout=60) for p in job.workers.values()]
        check(all(c == 2 for c in codes), "every rank of a pp4 group of a 2-layer model refused (exit 2): %s" % codes)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            log = f.read()
        check(re.search(r"--pp 4: the model has 2 layers", log), "the refusal names --pp 4 and the 2 layers:\n%s" % log[-2000:])
        print("pp4 on a 2-layer model refused: %s" % re.search(r"--pp 4[^\n]*", log).group(0))
    finally:
        job.stop()
    # the stages of a group must agree on the micro-batches they exchange: a rank with another
    # --microbatches is refused by the coordinator, naming both layouts
    job = Job(bindir, name="pp-mismatch")
    try:
        job.start_coordinator()
        common = ["--steps", "100000", "--model", "tiny", "--data", data, "--pp", "2"]
        job.start_worker("g0", 0, 2, common + ["--microbatches", "4"])
        wait_until(lambda: len(job.live_members()) == 1, 60, "g0 rank 0 registered")
        p = job.start_worker("g0", 1, 2, common + ["--microbatches", "2"])
        print("refused: " + layouts.expect_refused(job, p, "g0", 1, ("pp2.fsdp1.tp1.m4.1f1b", "pp2.fsdp1.tp1.m2.1f1b")))
    finally:
        job.stop()


PIPELINE = ("--pp", "2", "--tp", "2", "--schedule", "1f1b")


def test_kill(bindir):
    sharded_kill.kill_scenario(bindir, "ppkill", PIPELINE, SEED)


def test_stop(bindir):
    sharded_kill.stop_scenario(bindir, "ppstop", PIPELINE, SEED)


def ckpt_run(bindir, data, ckdir, name, ranks, flags, save, steps=30):
    launch = Launch(bindir, ["--groups", "1", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps",
                             str(steps), "--data", data, "--checkpoint-dir", ckdir, "--checkpoint-every", "10",
                             "--", "--global-batch", "8", "--micro-batch", "2", "--seed", "5", "--save", save] + flags,
                    name=name)
    try:
        rc = launch.wait(300)
        check(rc == 0, "%s: phalanx-launch exited %s:\n%s" % (name, rc, launch.tail(30)))
        return launch.summary(), launch
    finally:
        launch.terminate()


def same_final(bindir, a, b, what):
    (sa, la), (ma, mb) = a, b
    check(abs(sa["final_loss"] - la["final_loss"]) <= 1e-5 * abs(la["final_loss"]),
          "%s: final loss %.6f, the writing run's %.6f" % (what, sa["final_loss"], la["final_loss"]))
    x, y = layouts.read_model(ma), layouts.read_model(mb)
    worst = max(abs(p - q) for p, q in zip(x, y))
    check(len(x) == len(y) and worst <= 1e-5 * max(abs(q) for q in y), "%s: models differ by %.3g" % (what, worst))
    return worst


def test_checkpoint(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-ppckpt-data-"))
    work = tempfile.mkdtemp(prefix="phalanx-ppckpt-")
    ckpt = os.path.join(bindir, "phalanx-ckpt")
    for writer, wranks, wflags, reader, rranks, rflags in (
            ("pp2", 2, ["--pp", "2"], "fsdp2", 2, ["--fsdp", "2"]),
            ("whole", 1, [], "pp2xtp2", 4, ["--pp", "2", "--tp", "2"])):
        ck = os.path.join(work, writer)
        first, _ = ckpt_run(bindir, data, ck, writer, wranks, wflags, os.path.join(work, writer + ".bin"))
        step30 = os.path.join(ck, "step_%08d" % 30)
        r = subprocess.run([ckpt, "verify", step30], capture_output=True, text=True)
        check(r.returncode == 0, "%s: phalanx-ckpt verify: %s %s" % (writer, r.stdout, r.stderr))
        if writer == "pp2":
            r = subprocess.run([ckpt, "inspect", step30, "--json"], capture_output=True, text=True)
            info = json.loads(r.stdout) if r.returncode == 0 else {}
            check(len(info.get("files", [])) == 2 and info.get("layout", {}).get("pp") == 2,
                  "pp2 wrote one file per stage and recorded pp 2: %s" % {k: info.get(k) for k in ("files", "layout")})
        shutil.rmtree(step30)
        second, launch = ckpt_run(bindir, data, ck, reader, rranks, rflags, os.path.join(work, reader + ".bin"))
        restored = [e for e in launch.read_events() if e.get("type") == "checkpoint_restored"]
        check(restored and restored[0].get("step") == 20, "%s restored step 20: %s" % (reader, restored))
        worst = same_final(bindir, (second, first), (os.path.join(work, reader + ".bin"), os.path.join(work, writer + ".bin")),
                           "%s from %s's step 20" % (reader, writer))
        print("%s's checkpoint restored as %s: final loss %.6f (writer %.6f), params within %.2g" %
              (writer, reader, second["final_loss"], first["final_loss"], worst))


if __name__ == "__main__":
    main_scenarios({"layouts": test_layouts, "refused": test_refused, "kill": test_kill, "stop": test_stop,
                    "checkpoint": test_checkpoint}, default="layouts")
