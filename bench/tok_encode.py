#!/usr/bin/env python3
"""Tokenizer throughput: phalanx's encoder against Hugging Face tokenizers.

Both sides encode the same documents (the demo corpus, Debian fortunes, one
document per fortune, --copies times over) with the same tokenizer.json and
the same thread count: HF with Tokenizer.encode_batch(add_special_tokens=False)
under RAYON_NUM_THREADS=N (in a child process, so the variable takes), phalanx
with bench_tok_encode --threads N. Each side takes the best of --repeat runs;
the ids must be equal document for document, or the script fails. Prints
bytes/s for each and the ratio phalanx / HF.

Without --tokenizer, HF trains a GPT-2-sized byte-level BPE (50,257 tokens,
<|endoftext|>) on the corpus first, the way test_hf_equal.py does, and keeps
it in --workdir.

usage: tok_encode.py BINDIR [--tokenizer FILE] [--threads N] [--copies N]
                          [--repeat N] [--vocab N] [--workdir DIR]
  BINDIR            folder with bench_tok_encode (build/bin)
  --tokenizer FILE  a tokenizer.json to use (default: train one, see above)
  --threads N       threads on both sides (default 1)
  --copies N        how many times the corpus is repeated (default 2)
  --repeat N        timed runs per side, best counts (default 3)
  --vocab N         vocabulary of the trained tokenizer (default 50257)
  --workdir DIR     where files go (default /tmp/px_tokenize_bench)"""
import argparse
import os
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from phalanx_test import fortune_docs  # noqa: E402

HF_SIDE = r"""
import os, struct, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], "rb").read()
docs, i = [], 0
while i < len(data):
    (n,) = struct.unpack_from("<I", data, i)
    docs.append(data[i + 4:i + 4 + n].decode("utf-8"))
    i += 4 + n
best = 1e30
for _ in range(int(sys.argv[4])):
    t0 = time.perf_counter()
    enc = tok.encode_batch(docs, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
with open(sys.argv[3], "wb") as f:
    for e in enc:
        f.write(struct.pack("<I", len(e.ids)) + struct.pack(f"<{len(e.ids)}i", *e.ids))
print(best)
"""


def train_hf(docs, vocab, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                                      show_progress=False))
    tok.save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("bindir")
    ap.add_argument("--tokenizer")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--workdir", default="/tmp/px_tokenize_bench")
    a = ap.parse_args()
    for flag, v, lo, hi in (("--threads", a.threads, 1, 256), ("--copies", a.copies, 1, 1000),
                            ("--repeat", a.repeat, 1, 100), ("--vocab", a.vocab, 257, 1 << 24)):
        if not lo <= v <= hi:
            ap.error(f"{flag} {v}: out of range {lo}-{hi}")
    os.makedirs(a.workdir, exist_ok=True)
    docs = fortune_docs()
    tok = a.tokenizer
    if not tok:
        tok = os.path.join(a.workdir, f"hf_bpe_{a.vocab}.json")
        if not os.path.exists(tok):
            train_hf(docs, a.vocab, tok)
    docs = docs * a.copies
    rec = os.path.join(a.workdir, "docs.rec")
    with open(rec, "wb") as f:
        for d in docs:
            b = d.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)
    nbytes = sum(len(d.encode("utf-8")) for d in docs)
    env = dict(os.environ, RAYON_NUM_THREADS=str(a.threads), TOKENIZERS_PARALLELISM="true")
    hf_ids, px_ids = os.path.join(a.workdir, "hf.ids"), os.path.join(a.workdir, "px.ids")
    hf_s = float(subprocess.run([sys.executable, "-c", HF_SIDE, tok, rec, hf_ids, str(a.repeat)], env=env,
                                check=True, capture_output=True, text=True).stdout)
    px = subprocess.run([os.path.join(a.bindir, "bench_tok_encode"), "--tokenizer", tok, "--threads", str(a.threads),
                         "--repeat", str(a.repeat), "--ids", px_ids, rec], check=True, capture_output=True, text=True)
    fields = dict(kv.split("=") for kv in px.stdout.split())
    px_s = float(fields["seconds"])
    if open(hf_ids, "rb").read() != open(px_ids, "rb").read():
        print("FAIL: phalanx's ids differ from HF's (compare", hf_ids, "and", px_ids + ")")
        return 1
    load = os.getloadavg()[0]
    print(f"tokenizer={tok} docs={len(docs)} bytes={nbytes} tokens={fields['tokens']} threads={a.threads} "
          f"load1={load:.2f}")
    print(f"hf_tokenizers bytes_per_s={nbytes / hf_s:.0f} seconds={hf_s:.4f}")
    print(f"phalanx       bytes_per_s={nbytes / px_s:.0f} seconds={px_s:.4f}")
    print(f"ratio phalanx/hf={hf_s / px_s:.2f} ids=equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
