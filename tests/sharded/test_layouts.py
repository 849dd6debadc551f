"""Sharded replica groups (FSDP, TP, both) against one rank holding the whole
model: a real coordinator and real workers on loopback, `tiny`, the same seed
and global batch. Every layout must give the single rank's per-step losses
within 1e-5 relative over 20 steps, and the whole model gathered from the
shards at the end (--save) within 1e-5 of the single rank's; an FSDP-4 rank
must hold at most 0.3 of a replica's parameters, gradients and AdamW moments.

Scenarios (argv[2]): layouts (all of the above), flags (bad layouts refused
with a message naming the numbers), mismatch (a group with another layout
than the running job's refused by the coordinator, naming both)."""
import os
import re
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, check, main_scenarios, make_corpus, wait_until  # noqa: E402

STEPS = 20
LAYOUTS = [  # name, ranks, worker flags, global batch
    ("fsdp2", 2, ["--fsdp", "2"], 8),
    ("tp2", 2, ["--tp", "2"], 8),
    ("fsdp4", 4, ["--fsdp", "4"], 8),
    ("fsdp2xtp2", 4, ["--fsdp", "2", "--tp", "2"], 8),
    ("fsdp2-keep", 2, ["--fsdp", "2", "--fsdp-keep-params"], 8),
    # 10 samples over 4 fsdp ranks: shares of 2 and 3, so with micro-batches
    # of 2 two ranks run a padding round to keep the collectives in step
    ("fsdp4-uneven", 4, ["--fsdp", "4"], 10),
]


def read_model(path):
    """The parameters of an llm.c model file, as floats (header skipped)."""
    with open(path, "rb") as f:
        data = f.read()
    n = (len(data) - 256 * 4) // 4
    return struct.unpack_from("<%df" % n, data, 256 * 4)


def run(bindir, data, name, ranks, flags, batch=8):
    """Trains one group of `ranks` ranks; returns (losses by step, model path, rank-0 log text)."""
    job = Job(bindir, name="layout-" + name)
    try:
        job.start_coordinator()
        save = os.path.join(job.dir, "model.bin")
        common = ["--steps", str(STEPS), "--model", "tiny", "--data", data, "--global-batch", str(batch),
                  "--micro-batch", "2", "--seed", "7", "--save", save, "--comm-timeout-ms", "20000"]
        for r in range(ranks):
            job.start_worker("g0", r, ranks, common + flags)
        job.wait_workers(240, name)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            log = f.read()
        losses = {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"^progress step=(\d+) loss=(\S+)", log, re.M)}
        check(sorted(losses) == list(range(1, STEPS + 1)), "%s: a loss for every step: %s" % (name, sorted(losses)))
        return losses, save, log, job
    finally:
        job.stop()


def close(a, b, rel=1e-5):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def test_layouts(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-layouts-data-"))
    bases = {}
    for name, ranks, flags, batch in LAYOUTS:
        if batch not in bases:
            losses, save, _, _ = run(bindir, data, "single-b%d" % batch, 1, [], batch)
            bases[batch] = (losses, read_model(save))
        base, base_params = bases[batch]
        losses, save, log, job = run(bindir, data, name, ranks, flags, batch)
        for s in range(1, STEPS + 1):
            check(close(losses[s], base[s]), "%s: step %d loss %.7f, single rank %.7f" % (name, s, losses[s], base[s]))
        params = read_model(save)
        check(len(params) == len(base_params), "%s: saved model has %d floats, single rank %d" %
              (name, len(params), len(base_params)))
        scale = max(abs(x) for x in base_params)
        worst = max(abs(a - b) for a, b in zip(params, base_params))
        check(worst <= 1e-5 * scale, "%s: gathered parameters differ by %.3g (max |param| %.3g)" % (name, worst, scale))
        m = re.search(r"shard_memory layout=(\S+) state_mb=(\S+) replica_mb=(\S+) ratio=(\S+)", log)
        check(m, "%s: rank 0 printed its shard memory" % name)
        if name == "fsdp4":
            ratio = float(m.group(2)) / float(m.group(3))
            check(ratio <= 0.3, "fsdp4: state per rank is %.3f of a replica's (must be <= 0.3)" % ratio)
        print("%s: %d losses within 1e-5 of one rank, params max diff %.2g, %s" %
              (name, STEPS, worst, m.group(0)))


def test_flags(bindir):
    worker = os.path.join(bindir, "phalanx-worker")
    cases = [
        (["--ranks-per-group", "4", "--fsdp", "2"], "must equal pp x fsdp x tp = 1 x 2 x 1 = 2"),
        (["--ranks-per-group", "2", "--tp", "3"], "= 1 x 1 x 3 = 3"),
        (["--ranks-per-group", "3", "--tp", "3", "--steps", "1"], "does not divide the model's 4 attention heads"),
        (["--ranks-per-group", "4", "--pp", "4", "--steps", "1"], "--pp 4: the model has 2 layers"),
        (["--fsdp", "0"], "--fsdp"),
    ]
    job = Job(bindir, name="layout-flags")
    try:
        job.start_coordinator()
        for args, want in cases:
            full = [worker, "--coordinator", job.endpoint, "--group", "g0", "--connect-timeout", "20"] + args
            r = subprocess.run(full, capture_output=True, text=True, timeout=60)
            out = r.stdout + r.stderr
            check(r.returncode == 2, "%s: exit 2 (config error), got %s:\n%s" % (args, r.returncode, out))
            check(want in out, "%s: message names the problem (%r):\n%s" % (args, want, out))
            print("refused %s: %s" % (" ".join(args), want))
    finally:
        job.stop()


def test_mismatch(bindir):
    """A group whose layout differs from the running job's is refused by the
    coordinator for good (exit 2), the message naming both layouts."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-mismatch-data-"))
    job = Job(bindir, name="layout-mismatch")
    try:
        job.start_coordinator()
        common = ["--steps", "100000", "--model", "tiny", "--data", data, "--global-batch", "4", "--micro-batch", "2"]
        for r in range(2):
            job.start_worker("g0", r, 2, common + ["--fsdp", "2"])
        wait_until(lambda: len(job.live_members()) == 2, 60, "g0's two ranks registered")
        p = job.start_worker("g1", 0, 2, common + ["--tp", "2"])
        line = expect_refused(job, p, "g1", 0, ("pp1.fsdp1.tp2", "pp1.fsdp2.tp1"))
        check(all(p.poll() is None for (g, r), p in job.workers.items() if g == "g0"), "g0 still trains")
        print("refused: " + line)
    finally:
        job.stop()


def expect_refused(job, p, group, rank, layouts):
    """Worker p (group, rank) refused by the coordinator within 60 s: exit 2,
    WRONG_LAYOUT naming every one of layouts. Returns the refusal line."""
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise Fail("the mismatched worker was not refused within 60 s (logs in %s)" % job.dir)
    with open(os.path.join(job.dir, "worker-%s-%d.log" % (group, rank))) as f:
        log = f.read()
    check(rc == 2, "refused worker exits 2 (config error), got %s:\n%s" % (rc, log[-2000:]))
    for want in ("WRONG_LAYOUT",) + tuple(layouts):
        check(want in log, "the refusal names %r:\n%s" % (want, log[-2000:]))
    return [l for l in log.splitlines() if "WRONG_LAYOUT" in l][0]


if __name__ == "__main__":
    main_scenarios({"layouts": test_layouts, "flags": test_flags, "mismatch": test_mismatch}, default="layouts")
