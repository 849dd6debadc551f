"""phalanx-sample on a model trained here: `tiny` trained for 300 steps on
a corpus of a few words (make_corpus) writes text from that corpus's
alphabet at top-k 3 (an untrained model's bytes are anywhere in 0..255);
the same seed prints the same text and another seed other text; a
checkpoint of the same weights (phalanx-ckpt import), given as its step_N
folder or as the folder above, prints the same text as the model file;
top-k 1 prints temperature 0's text; a prompt longer than the context is
continued. Bad input exits 2 naming it: neither or both of --checkpoint
and --model, a folder with no checkpoint, a damaged checkpoint. A job on
BPE shards (phalanx-data --train-tokenizer) keeps the tokenizer beside
its checkpoints, where phalanx-sample finds it and prints text; a
tokenizer larger than the model's vocabulary exits 2. --sample-every
prints a sample line every N steps (the same in two runs, decoded with the
data's tokenizer), phalanx-launch shows it, and a sharded layout refuses it."""
import ast
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, main, make_corpus  # noqa: E402


def run(bindir, prog, args, timeout=300):
    return subprocess.run([os.path.join(bindir, prog)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=timeout)


def sample(bindir, args):
    r = run(bindir, "phalanx-sample", args)
    check(r.returncode == 0, "phalanx-sample %s: exit %d %s" % (args, r.returncode, r.stderr.decode()[-300:]))
    return r.stdout


def test(bindir):
    work = tempfile.mkdtemp(prefix="phalanx-sample-")
    data = make_corpus(bindir, os.path.join(work, "corpus"))
    with open(os.path.join(work, "corpus", "corpus.txt"), "rb") as f:
        alphabet = set(f.read())
    model = os.path.join(work, "tiny.bin")
    r = run(bindir, "phalanx-worker", ["--standalone", "--model", "tiny", "--data", data, "--steps", "300",
                                       "--batch", "8", "--lr", "0.003", "--save", model, "--threads", "1"])
    check(r.returncode == 0, "training: %s" % r.stderr.decode()[-300:])

    prompt = "the quick "
    text = sample(bindir, ["--model", model, "--prompt", prompt, "--tokens", "120", "--top-k", "3", "--seed", "4"])
    check(text.startswith(prompt.encode()) and len(text) == len(prompt) + 120 + 1,
          "the prompt, 120 tokens and a newline: %r" % text)
    gen = text[len(prompt):-1]
    outside = sorted(set(gen) - alphabet)
    check(not outside, "a trained model writes the corpus's alphabet: bytes %s outside it in %r" % (outside, gen))
    check(sample(bindir, ["--model", model, "--prompt", prompt, "--tokens", "120", "--top-k", "3", "--seed", "4"])
          == text, "the same seed, the same text")
    other = sample(bindir, ["--model", model, "--prompt", prompt, "--tokens", "120", "--top-k", "3", "--seed", "5"])
    check(other != text, "another seed, other text")

    ckdir = os.path.join(work, "ckpt")
    r = run(bindir, "phalanx-ckpt", ["import", "--llmc", model, "--out", ckdir])
    check(r.returncode == 0, "import: %s" % r.stderr.decode())
    for path in (ckdir, os.path.join(ckdir, "step_00000000")):
        got = sample(bindir, ["--checkpoint", path, "--prompt", prompt, "--tokens", "120", "--top-k", "3",
                              "--seed", "4"])
        check(got == text, "--checkpoint %s prints the model file's text: %r vs %r" % (path, got, text))

    greedy = sample(bindir, ["--model", model, "--prompt", prompt, "--tokens", "40", "--temperature", "0"])
    check(sample(bindir, ["--model", model, "--prompt", prompt, "--tokens", "40", "--top-k", "1", "--seed", "9"])
          == greedy, "top-k 1 is temperature 0")
    r = run(bindir, "phalanx-sample", ["--model", model, "--prompt", prompt, "--tokens", "40", "--temperature", "0",
                                       "--device", "cuda"])
    if r.returncode == 2:  # no GPU here, or a build without CUDA: said before any work
        check(b"--device cuda: " in r.stderr and not r.stdout, "--device cuda without a GPU: %s" % r.stderr)
    else:
        check(r.returncode == 0 and r.stdout.startswith(prompt.encode()) and len(r.stdout) == len(greedy),
              "--device cuda on a GPU: %d %r" % (r.returncode, r.stdout))
    long_prompt = "the lazy dog " * 10  # 130 bytes, past tiny's context of 64
    got = sample(bindir, ["--model", model, "--prompt", long_prompt, "--tokens", "10"])
    check(got.startswith(long_prompt.encode()) and len(got) == len(long_prompt) + 11, "a long prompt: %r" % got)

    empty = tempfile.mkdtemp(prefix="phalanx-sample-empty-")
    damaged = os.path.join(work, "damaged")
    r = run(bindir, "phalanx-ckpt", ["import", "--llmc", model, "--out", damaged])
    data_file = os.path.join(damaged, "step_00000000", sorted(f for f in os.listdir(os.path.join(
        damaged, "step_00000000")) if f.endswith(".bin"))[0])
    with open(data_file, "r+b") as f:
        f.seek(2000)
        b = f.read(1)
        f.seek(2000)
        f.write(bytes([b[0] ^ 0xFF]))
    for args, why in (([], "give one of --checkpoint"), (["--checkpoint", ckdir, "--model", model], "give one"),
                      (["--checkpoint", empty], "no checkpoint"), (["--checkpoint", damaged], "checksum"),
                      (["--model", os.path.join(work, "nope.bin")], "nope.bin")):
        r = run(bindir, "phalanx-sample", args)
        err = r.stderr.decode()
        check(r.returncode == 2 and why in err, "%s: exit 2 saying %r: %d %s" % (args, why, r.returncode, err))
    print("phalanx-sample: the corpus's alphabet, seeds, checkpoints, greedy, long prompts; bad input named")
    bpe(bindir, work, alphabet, model)


def bpe(bindir, work, alphabet, byte_model):
    """A job on BPE shards keeps the data's tokenizer beside its checkpoints;
    phalanx-sample finds it there and prints text, not ids."""
    corpus = os.path.join(work, "corpus", "corpus.txt")
    data = os.path.join(work, "bpe")
    r = run(bindir, "phalanx-data", ["--out", data, "--train-tokenizer", "400", corpus])
    check(r.returncode == 0, "phalanx-data --train-tokenizer: %s" % r.stderr.decode()[-300:])
    vocab = int(r.stdout.decode().split("vocab=")[1].split()[0])  # at most 400: the corpus has few words
    ckpt = os.path.join(work, "bpe-ckpt")
    r = run(bindir, "phalanx-launch", ["--groups", "1", "--model", "tiny", "--steps", "200", "--data", data,
                                       "--checkpoint-dir", ckpt, "--checkpoint-every", "200", "--log-dir",
                                       os.path.join(work, "bpe-logs"), "--quiet", "--", "--global-batch", "8",
                                       "--lr", "0.003"], timeout=600)
    check(r.returncode == 0, "the BPE job: %s" % r.stdout.decode()[-500:])
    with open(os.path.join(data, "tokenizer.json"), "rb") as a, open(os.path.join(ckpt, "tokenizer.json"), "rb") as b:
        check(a.read() == b.read(), "the job keeps the data's tokenizer beside its checkpoints")
    args = ["--checkpoint", ckpt, "--prompt", "the ", "--tokens", "40", "--top-k", "3", "--seed", "3"]
    r = run(bindir, "phalanx-sample", args)
    check(r.returncode == 0 and ("tokenizer.json (%d tokens)" % vocab).encode() in r.stderr, "the checkpoint's tokenizer is used: %s"
          % r.stderr.decode())
    text = r.stdout
    gen = text[len("the "):-1]
    check(text.startswith(b"the ") and len(gen) > 40, "40 BPE tokens are more than 40 bytes of text: %r" % text)
    check(not set(gen) - alphabet, "the text is in the corpus's alphabet: %r" % gen)
    given = sample(bindir, args + ["--tokenizer", os.path.join(data, "tokenizer.json")])
    check(given == text, "--tokenizer FILE gives the same text")
    r = run(bindir, "phalanx-sample", ["--model", byte_model, "--tokenizer", os.path.join(data, "tokenizer.json")])
    check(r.returncode == 2 and ("%d tokens, the model's vocabulary 256" % vocab).encode() in r.stderr,
          "a tokenizer larger than the model's vocabulary: %d %s" % (r.returncode, r.stderr.decode()))
    print("phalanx-sample with the run's BPE tokenizer: text in the corpus's alphabet")
    sample_every(bindir, work, data)


def sample_lines(text):
    """{step: text} of the `sample step=N tokens=K text="..."` lines (C escapes)."""
    out = {}
    for m in re.finditer(r'^.*sample (?:step=|at step )(\d+)(?: tokens=\d+ text=|: )("(?:[^"\\]|\\.)*")$', text,
                         re.M):
        out[int(m.group(1))] = ast.literal_eval(m.group(2))
    return out


def sample_every(bindir, work, data):
    """--sample-every: a sample line every N steps, decoded with the data's
    tokenizer, the same in two runs; phalanx-launch shows it; a sharded
    layout is refused."""
    args = ["--standalone", "--model", "tiny", "--data", data, "--steps", "60", "--batch", "8", "--lr", "0.003",
            "--sample-every", "20", "--sample-tokens", "30", "--quiet"]
    runs = [run(bindir, "phalanx-worker", args) for _ in range(2)]
    for r in runs:
        check(r.returncode == 0, "--standalone --sample-every: %s" % r.stderr.decode()[-300:])
    got = [sample_lines(r.stdout.decode()) for r in runs]
    check(sorted(got[0]) == [20, 40, 60] and got[0] == got[1], "samples at 20, 40, 60, the same twice: %s" % got)
    # temperature 1 over the whole vocabulary: any token may come, each at least a byte of text
    check(all(len(t) >= 15 for t in got[0].values()), "30 tokens of text each (two may share a character): %s" % got[0])
    r = run(bindir, "phalanx-launch", ["--groups", "2", "--model", "tiny", "--steps", "20", "--data", data,
                                       "--log-dir", os.path.join(work, "sample-every-logs"), "--",
                                       "--global-batch", "8", "--sample-every", "10", "--sample-tokens", "12"],
            timeout=300)
    shown = sample_lines(r.stdout.decode())
    check(r.returncode == 0 and sorted(shown) == [10, 20], "phalanx-launch shows each sample once: %s\n%s" %
          (shown, r.stdout.decode()[-800:]))
    r = run(bindir, "phalanx-worker", ["--coordinator", "tcp://127.0.0.1:1", "--group", "g0", "--ranks-per-group",
                                       "2", "--fsdp", "2", "--steps", "5", "--data", data, "--sample-every", "5"])
    check(r.returncode == 2 and b"--sample-every" in r.stderr, "--sample-every with --fsdp: %d %s" %
          (r.returncode, r.stderr.decode()))
    print("--sample-every: samples at their steps, deterministic, shown by the launcher; refused when sharded")


if __name__ == "__main__":
    main(test)
