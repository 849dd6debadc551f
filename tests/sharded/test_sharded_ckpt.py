"""Checkpoints of sharded groups, restored into other layouts (real
coordinator, workers and files; `tiny`, the same seed and global batch).

  1. One group, fsdp2 x tp2, 30 steps, a checkpoint every 10: every rank of
     the group writes its own part (its shard's rectangles of each logical
     tensor), rank 0 publishes the manifest. phalanx-ckpt verifies step 30
     and finds four data files and the writing layout in it; its llm.c export
     equals the model the run saved with --save.
  2. Step 30 removed, the job restarted from step 20 as one whole replica:
     the final loss and model equal run 1's (1e-5).
  3. Again from step 20 (run 2's step 30 removed), as fsdp4: the same.
  4. A sharded group stopped with SIGTERM writes no checkpoint of its own
     (its ranks may stop at different steps) and says so."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main, make_corpus, wait_until  # noqa: E402

STEPS = 30


def model_floats(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack_from("<%df" % ((len(data) - 1024) // 4), data, 1024)


def run(bindir, data, ckdir, name, ranks, flags, save):
    launch = Launch(bindir, ["--groups", "1", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps",
                             str(STEPS), "--data", data, "--checkpoint-dir", ckdir, "--checkpoint-every", "10",
                             "--", "--global-batch", "8", "--micro-batch", "2", "--seed", "5", "--save", save] + flags,
                    name=name)
    rc = launch.wait(300)
    check(rc == 0, "%s: phalanx-launch exited %s:\n%s" % (name, rc, launch.tail()))
    s = launch.summary()
    check(s and s["completed"], "%s completed: %s" % (name, s))
    return s, launch


def same_model(a, b, what):
    x, y = model_floats(a), model_floats(b)
    check(len(x) == len(y), "%s: sizes %d vs %d" % (what, len(x), len(y)))
    scale = max(abs(v) for v in x)
    worst = max(abs(p - q) for p, q in zip(x, y))
    check(worst <= 1e-5 * scale, "%s: models differ by %.3g" % (what, worst))
    return worst


def test(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-shardckpt-data-"))
    work = tempfile.mkdtemp(prefix="phalanx-shardckpt-")
    ck = os.path.join(work, "ck")
    ckpt = os.path.join(bindir, "phalanx-ckpt")
    first, _ = run(bindir, data, ck, "fsdp2xtp2", 4, ["--fsdp", "2", "--tp", "2"], os.path.join(work, "a.bin"))
    step30 = os.path.join(ck, "step_%08d" % STEPS)
    r = subprocess.run([ckpt, "verify", step30], capture_output=True, text=True)
    check(r.returncode == 0, "phalanx-ckpt verify: %s %s" % (r.stdout, r.stderr))
    r = subprocess.run([ckpt, "inspect", step30, "--json"], capture_output=True, text=True)
    check(r.returncode == 0, "inspect: %s" % r.stderr)
    info = json.loads(r.stdout)
    files = info.get("files", [])
    check(len(files) == 4, "four data files (one per rank): %s" % [f.get("name") for f in files])
    check(info.get("layout", {}).get("fsdp") == 2 and info.get("layout", {}).get("tp") == 2,
          "the manifest records the writing layout: %s" % info.get("layout"))
    export = os.path.join(work, "export.bin")
    r = subprocess.run([ckpt, "export", step30, "--llmc", export], capture_output=True, text=True)
    check(r.returncode == 0, "export: %s" % r.stderr)
    same_model(export, os.path.join(work, "a.bin"), "the exported checkpoint and the run's --save")

    for name, ranks, flags in (("whole", 1, []), ("fsdp4", 4, ["--fsdp", "4"])):
        shutil.rmtree(step30)
        s, launch = run(bindir, data, ck, name, ranks, flags, os.path.join(work, name + ".bin"))
        restored = [e for e in launch.read_events() if e.get("type") == "checkpoint_restored"]
        check(restored and restored[0].get("step") == 20, "%s restored step 20: %s" % (name, restored))
        check(abs(s["final_loss"] - first["final_loss"]) <= 1e-5 * abs(first["final_loss"]),
              "%s from step 20: final loss %.6f, the sharded run's %.6f" % (name, s["final_loss"], first["final_loss"]))
        worst = same_model(os.path.join(work, name + ".bin"), os.path.join(work, "a.bin"), name)
        print("restored the fsdp2 x tp2 checkpoint as %s: final loss %.6f (sharded run %.6f), params within %.2g" %
              (name, s["final_loss"], first["final_loss"], worst))

    stop_dir = os.path.join(work, "stop")
    launch = Launch(bindir, ["--groups", "1", "--ranks-per-group", "2", "--model", "tiny", "--steps", "100000",
                             "--data", data, "--checkpoint-dir", stop_dir, "--checkpoint-every", "0",
                             "--", "--global-batch", "8", "--micro-batch", "2", "--fsdp", "2"], name="shard-stop")
    try:
        wait_until(lambda: launch.last_step() >= 5, 120, "5 steps")
        launch.proc.send_signal(signal.SIGTERM)
        launch.wait(60)
    finally:
        launch.terminate()
    steps = [d for d in os.listdir(stop_dir) if d.startswith("step_")] if os.path.isdir(stop_dir) else []
    check(not steps, "no checkpoint written at a sharded group's stop: %s" % steps)
    with open(os.path.join(launch.dir, "worker-g0-0.log")) as f:
        check("checkpoint_skipped" in f.read(), "rank 0 said why it saved nothing")
    print("a stopped sharded group saved nothing and said so")


if __name__ == "__main__":
    main(test)
