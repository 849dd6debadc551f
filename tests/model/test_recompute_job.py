"""--recompute block end to end: a real coordinator and workers on loopback
train the same short job with and without block recomputation, and every
step's loss and gradient norm and the final state's checksum must be
identical (recomputation runs the same kernels in the same order, so the
results are the same bits, not merely close). Three layouts: one rank
holding the whole model; a group of four (--fsdp 2 --tp 2), where the
backward's recomputed forward takes its parameters from the sharded source's
backward acquire and runs the tensor-parallel sums again; and two pipeline
stages of `small` (two layers each) under zb-h1, whose input and weight
halves of the backward each run the forward again. A bad value is refused
with exit 2 and a message. (On GPUs the same job is gpu_distributed_recompute.)"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, make_corpus  # noqa: E402

STEPS = 10
LAYOUTS = [  # name, model, ranks, flags
    ("whole", "tiny", 1, []),
    ("fsdp2xtp2", "tiny", 4, ["--fsdp", "2", "--tp", "2"]),
    ("pp2-zbh1", "small", 2, ["--pp", "2", "--schedule", "zb-h1", "--microbatches", "4"]),
]


def train(bindir, data, name, model, ranks, flags):
    """One group's job; returns ({step: 'loss=.. norm=..'}, rank 0's final line's loss and checksum)."""
    job = Job(bindir, name="recompute-" + name)
    try:
        job.start_coordinator()
        common = ["--steps", str(STEPS), "--model", model, "--data", data, "--global-batch", "8",
                  "--micro-batch", "2", "--seq", "64", "--seed", "11", "--threads", "1", "--comm-timeout-ms", "20000"]
        for r in range(ranks):
            job.start_worker("g0", r, ranks, common + flags)
        job.wait_workers(240, name)
        with open(os.path.join(job.dir, "worker-g0-0.log")) as f:
            log = f.read()
    finally:
        job.stop()
    steps = {int(m.group(1)): m.group(2) for m in re.finditer(r"^progress step=(\d+) (loss=\S+ norm=\S+)", log, re.M)}
    block = "--recompute" in flags
    check(("activation_recompute mode=block" in log) == block, "%s: rank 0 %s that it recomputes (logs in %s)" %
          (name, "did not say" if block else "said", job.dir))
    check(sorted(steps) == list(range(1, STEPS + 1)), "%s: a progress line for every step: %s" % (name, sorted(steps)))
    final = re.search(r"^final .*?(loss=\S+).*?(checksum=\S+)", log, re.M)
    check(final, "%s: rank 0 printed its final line (logs in %s)" % (name, job.dir))
    return steps, final.group(1) + " " + final.group(2)


def test_refused(bindir):
    worker = os.path.join(bindir, "phalanx-worker")
    cases = [(["--recompute", "full"], "--recompute: bad value 'full': expected none or block")]
    for args, want in cases:
        r = subprocess.run([worker, "--group", "g0", "--connect-timeout", "5"] + args, capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 2 and want in r.stderr, "%s: exit 2 naming the problem (%r), got %s:\n%s" %
              (args, want, r.returncode, r.stderr))
        print("refused %s: %s" % (" ".join(args), r.stderr.strip()))


def test(bindir):
    test_refused(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-recompute-data-"))
    for name, model, ranks, flags in LAYOUTS:
        base, base_final = train(bindir, data, name, model, ranks, flags)
        rec, rec_final = train(bindir, data, name + "-block", model, ranks, flags + ["--recompute", "block"])
        for s in range(1, STEPS + 1):
            check(rec[s] == base[s], "%s: step %d: %s with --recompute block, %s without" % (name, s, rec[s], base[s]))
        check(rec_final == base_final,
              "%s: final %s with --recompute block, %s without" % (name, rec_final, base_final))
        print("%s: %d steps' losses and norms identical with --recompute block (step %d %s), final %s" %
              (name, STEPS, STEPS, rec[STEPS], rec_final))


if __name__ == "__main__":
    main(test)
