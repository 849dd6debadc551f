"""A model of the user's size from a JSON config (--model-config, Hugging
Face GPT-2 config.json keys), trained on every path a preset takes. The
config is deliberately odd: 3 layers, 6 heads, 192 wide, a vocabulary of
1000 (padded to 1024), a context of 64.

Scenarios (argv[2]):
  layouts  one rank against fsdp 2, tp 2 and pp 3 (a stage per layer) of a
           distributed group: every step's loss within 1e-5 relative of the
           single rank's, and the model the single rank saves has the
           config's shape (an llm.c header with L=3, C=192, NH=6, V=1000).
  chaos    phalanx-launch, two groups, a worker SIGKILLed every few steps
           (fixed seed) with checkpoints every 5 steps, no quorum of one
           group: the job completes, each restarted worker heals from the
           other group, both end with one checksum; a restart with more
           steps resumes from the newest checkpoint.
  vocab    the vocabulary follows the data: with a tokenizer.json of 1000
           tokens beside the shards, a config without vocab_size and the
           `tiny` preset both train with V=1000; a config naming another
           size exits 2 naming both sizes before anything joins; a config
           with a key phalanx cannot honour (activation_function relu)
           exits 2 naming it; --model and --model-config together exit 2."""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, Launch, check, full_quorum_env, main_scenarios, make_corpus  # noqa: E402

ODD = {"model_type": "gpt2", "n_layer": 3, "n_head": 6, "n_embd": 192, "n_positions": 64, "vocab_size": 1000,
       "activation_function": "gelu_new", "n_inner": None, "tie_word_embeddings": True}
STEPS = 8
SEED = 11


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def losses_of(log):
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^progress step=(\d+) loss=(\S+)", log, re.M)}


def run_group(bindir, data, config, name, ranks, flags):
    """One group of `ranks` ranks under a real coordinator: (losses by step, saved model path)."""
    job = Job(bindir, name="mc-" + name)
    try:
        job.start_coordinator()
        save = os.path.join(job.dir, "model.bin")
        common = ["--steps", str(STEPS), "--model-config", config, "--data", data, "--global-batch", "8",
                  "--micro-batch", "2", "--seq", "32", "--seed", "7", "--save", save, "--comm-timeout-ms", "20000"]
        for r in range(ranks):
            job.start_worker("g0", r, ranks, common + flags)
        job.wait_workers(300, name)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            losses = losses_of(f.read())
        check(sorted(losses) == list(range(1, STEPS + 1)), "%s: a loss for every step: %s" % (name, sorted(losses)))
        return losses, save
    finally:
        job.stop()


def test_layouts(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-mc-data-"))
    config = write_json(os.path.join(os.path.dirname(data), "odd.json"), ODD)
    base, save = run_group(bindir, data, config, "single", 1, [])
    with open(save, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
    # llm.c header: magic, version, maxT, V, L, NH, C, Vp
    check(h[2:8] == (64, 1000, 3, 6, 192, 1024), "the saved model has the config's shape: %s" % (h[2:8],))
    check(abs(base[1] - 6.9078) < 0.1, "the first loss is about ln(1000) = 6.91: %.4f" % base[1])
    for name, ranks, flags in (("fsdp2", 2, ["--fsdp", "2"]), ("tp2", 2, ["--tp", "2"]),
                               ("pp3", 3, ["--pp", "3", "--schedule", "1f1b", "--microbatches", "4"])):
        losses, _ = run_group(bindir, data, config, name, ranks, flags)
        for s in range(1, STEPS + 1):
            check(abs(losses[s] - base[s]) <= 1e-5 * abs(base[s]),
                  "%s: step %d loss %.7f, single rank %.7f" % (name, s, losses[s], base[s]))
        print("%s: %d steps, the single rank's losses" % (name, STEPS))


def test_chaos(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-mc-chaos-data-"))
    config = write_json(os.path.join(os.path.dirname(data), "odd.json"), ODD)
    ckpt = tempfile.mkdtemp(prefix="phalanx-mc-ckpt-")
    common = ["--groups", "2", "--model-config", config, "--data", data, "--checkpoint-dir", ckpt,
              "--checkpoint-every", "5"]
    worker = ["--", "--global-batch", "8", "--micro-batch", "4", "--seq", "32", "--comm-timeout-ms", "20000"]
    try:
        launch = Launch(bindir, common + ["--steps", "30", "--chaos-kill-every-steps", "6", "--chaos-max-kills", "3",
                                          "--chaos-until-step", "24", "--chaos-seed", str(SEED)] + worker,
                        env=full_quorum_env(2), name="mc-chaos")  # the survivor waits: every kill heals
        rc = launch.wait(600)
        check(rc == 0, "the job completes under kills: rc %s\n%s" % (rc, launch.tail()))
        s = launch.summary()
        check(s and s["completed"] and s["chaos_kills"] >= 1, "completed with kills: %s" % s)
        finals = launch.finals()
        check(len(finals) == 2 and len({f["checksum"] for f in finals.values()}) == 1,
              "both groups end with one checksum: %s" % finals)
        healed = [e for e in launch.read_events() if e["type"] == "heal_finished"]
        check(healed, "a restarted worker healed from its peer group: no heal_finished event")
        # a longer run than the checkpoints were made for: extended on purpose
        again = Launch(bindir, common + ["--steps", "35"] + worker + ["--allow-schedule-change"], name="mc-resume")
        rc = again.wait(600)
        check(rc == 0, "the restart completes: rc %s\n%s" % (rc, again.tail()))
        logs = "".join(open(os.path.join(again.dir, f)).read() for f in os.listdir(again.dir)
                       if f.startswith("worker-") and f.endswith(".log"))
        check(re.search(r"checkpoint_restored .*step=30", logs), "the restart resumed from step 30:\n%s" % again.tail())
        print("chaos: %d kills, %d heals, one checksum; resumed from step 30 to 35" % (s["chaos_kills"], len(healed)))
    except Fail as e:
        raise Fail("%s (chaos seed %d)" % (e, SEED))


def tokenizer_json(vocab):
    """A tokenizer.json with `vocab` ids: what phalanx reads of one beside the shards is its size."""
    byte_tokens = {"<%d>" % i: i for i in range(vocab - 1)}
    return {"version": "1.0", "added_tokens": [{"id": vocab - 1, "content": "<|endoftext|>", "special": True}],
            "model": {"type": "BPE", "vocab": byte_tokens, "merges": []}}


def standalone(bindir, args):
    return subprocess.run([os.path.join(bindir, "phalanx-worker"), "--standalone", "--steps", "2", "--batch", "2",
                           "--seq", "16"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)


def test_vocab(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-mc-vocab-data-"))
    d = os.path.dirname(data)
    write_json(os.path.join(data, "tokenizer.json"), tokenizer_json(1000))
    follows = write_json(os.path.join(d, "novocab.json"), {k: v for k, v in ODD.items() if k != "vocab_size"})
    for args in (["--model-config", follows], ["--model", "tiny"]):
        r = standalone(bindir, args + ["--data", data])
        check(r.returncode == 0 and re.search(r"^config .* V=1000 ", r.stdout, re.M),
              "%s trains with the data's 1000 tokens: %d %s%s" % (args, r.returncode, r.stdout[-300:], r.stderr))
    other = write_json(os.path.join(d, "v2000.json"), dict(ODD, vocab_size=2000))
    r = standalone(bindir, ["--model-config", other, "--data", data])
    check(r.returncode == 2 and "vocab_size 2000" in r.stderr and "1000" in r.stderr,
          "a config of another vocabulary is refused naming both: %d %s" % (r.returncode, r.stderr))
    relu = write_json(os.path.join(d, "relu.json"), dict(ODD, activation_function="relu"))
    r = standalone(bindir, ["--model-config", relu, "--data", data])
    check(r.returncode == 2 and "activation_function" in r.stderr and "relu" in r.stderr,
          "an architecture phalanx does not have is refused naming the key: %d %s" % (r.returncode, r.stderr))
    r = standalone(bindir, ["--model", "small", "--model-config", follows, "--data", data])
    check(r.returncode == 2 and "give one" in r.stderr, "--model with --model-config: %d %s" % (r.returncode, r.stderr))
    r = subprocess.run([os.path.join(bindir, "phalanx-launch"), "--model", "small", "--model-config", follows, "--data",
                        data, "--log-dir", tempfile.mkdtemp(prefix="phalanx-mc-launch-")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 2 and "give one" in r.stderr, "phalanx-launch --model with --model-config: %d %s" %
          (r.returncode, r.stderr))
    # The distributed worker refuses the mismatch before it registers.
    job = Job(bindir, name="mc-vocab")
    try:
        job.start_coordinator()
        p = job.start_worker("g0", 0, 1, ["--steps", "2", "--model-config", other, "--data", data])
        rc = p.wait(60)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            log = f.read()
        check(rc == 2 and "vocab_size 2000" in log, "the worker exits 2 naming the sizes: %d %s" % (rc, log[-400:]))
        check(not job.status()["members"], "the coordinator never heard of it")
    finally:
        job.stop()
    print("vocab: follows the data's tokenizer; a mismatch, an unknown architecture and two models are refused")


if __name__ == "__main__":
    main_scenarios({"layouts": test_layouts, "chaos": test_chaos, "vocab": test_vocab})
