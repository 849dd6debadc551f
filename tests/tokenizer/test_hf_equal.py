#!/usr/bin/env python3
"""phalanx's tokenizer against Hugging Face `tokenizers`, id for id.

Usage: test_hf_equal.py BINDIR   (BINDIR holds tok_tool)

1. HF trains a GPT-2-style byte-level BPE (2,000 tokens, <|endoftext|>) on the
   demo corpus (Debian fortunes) plus hand-written text (accents, CJK, Arabic,
   emoji and ZWJ sequences, runs of white space, digits, contractions,
   <|endoftext|> inside text); phalanx encodes the same texts with that
   tokenizer.json; the ids must be equal. Again with add_prefix_space.
2. The same with a Llama-3-style tokenizer.json (Split regex + ByteLevel
   without regex, ignore_merges true), built with HF.
3. phalanx trains a tokenizer and saves it; HF loads it (Tokenizer.from_file)
   and must encode the corpus as phalanx does.
4. decode(encode(x)) == x on random bytes (fixed seed).
Exits 77 (skipped) only when `tokenizers` cannot be imported."""
import os
import random
import struct
import subprocess
import sys
import tempfile

try:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    print(f"SKIP: Hugging Face tokenizers cannot be imported ({e}); pip install tokenizers")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import fortune_docs  # noqa: E402
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

HANDWRITTEN = [
    "Café crème, naïve façade, Ærøskøbing, Straße, ÉCOLE",
    "東京は日本の首都です。北京、上海、香港。한국어 텍스트도 있습니다.",
    "مرحبا بالعالم، هذا نص عربي مع أرقام ١٢٣٤٥",
    "emoji 😀🎉 family 👨‍👩‍👧‍👦 flag 🏳️‍🌈 skin 👍🏽 keycap 1️⃣",
    "spaces     here\t\ttabs\n\n\nnewlines \n \n  \r\n\r\n trailing   ",
    " " * 300 + "x" + "\t" * 50 + "\n" * 40,
    "digits 1234567890 3.14159 1,000,000 007 2024-01-01 ½ ² ٣",
    "don't can't I'M YOU'RE we'll she'd it's they've O'Neil 'quoted' ''",
    "text<|endoftext|>more text<|endoftext|><|endoftext|> and <|endoftext",
    "mixed\u0085next line\u00a0nbsp\u2028ls\u3000ideo\u200bzwsp",
    "code: def f(x):\n    return x**2  # comment\n\tif a<b and b>c: pass",
    "long" * 200 + " " + "ab" * 500,
    "",
    "a",
    " ",
    "Ǆungla ǅ ǆ ΣΑΣ σας ſ K İstanbul",
]


def write_records(path, texts):
    with open(path, "wb") as f:
        for t in texts:
            b = t if isinstance(t, bytes) else t.encode("utf-8")
            f.write(struct.pack("<I", len(b)) + b)


def read_ids(path):
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        (n,) = struct.unpack_from("<I", data, i)
        out.append(list(struct.unpack_from(f"<{n}i", data, i + 4)))
        i += 4 + 4 * n
    return out


def phalanx_encode(tool, tok_path, texts, tmp):
    rec, out = os.path.join(tmp, "in.rec"), os.path.join(tmp, "out.ids")
    write_records(rec, texts)
    subprocess.run([tool, "encode", tok_path, rec, out], check=True)
    return read_ids(out)


def compare(what, tok_path, texts, tool, tmp):
    hf = Tokenizer.from_file(tok_path)
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    got = phalanx_encode(tool, tok_path, texts, tmp)
    assert len(got) == len(want), f"{what}: {len(got)} results for {len(want)} texts"
    ntok = 0
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            k = next((j for j in range(min(len(g), len(w))) if g[j] != w[j]), min(len(g), len(w)))
            print(f"FAIL {what}: text {i} differs at token {k}: phalanx {g[k:k + 8]} HF {w[k:k + 8]}\n"
                  f"  HF tokens there: {hf.encode(texts[i], add_special_tokens=False).tokens[k:k + 8]}\n"
                  f"  text: {texts[i][:200]!r}")
            sys.exit(1)
        ntok += len(g)
    print(f"ok {what}: {len(texts)} texts, {ntok} tokens equal")


def hf_train(texts, vocab, pre, ignore_merges, specials, path):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, tr)
    tok.save(path)
    return path


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = os.path.join(sys.argv[1], "tok_tool")
    docs = fortune_docs()
    texts = docs + HANDWRITTEN
    with tempfile.TemporaryDirectory() as tmp:
        # 1. GPT-2 style, trained by HF.
        for prefix in (False, True):
            path = hf_train(texts, 2000, pre_tokenizers.ByteLevel(add_prefix_space=prefix, use_regex=True), False,
                            ["<|endoftext|>"], os.path.join(tmp, f"gpt2_{prefix}.json"))
            compare(f"gpt2-style (add_prefix_space={prefix})", path, texts, tool, tmp)
        # 2. Llama-3 style.
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated"),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        path = hf_train(texts, 3000, pre, True, ["<|begin_of_text|>", "<|end_of_text|>"],
                        os.path.join(tmp, "llama3.json"))
        import json
        doc = json.load(open(path))
        assert doc["model"].get("ignore_merges") is True, "HF dropped ignore_merges"
        compare("llama3-style", path, texts + ["<|begin_of_text|>Hi<|end_of_text|>"], tool, tmp)
        # 3. phalanx trains; HF reads its file.
        rec, ours = os.path.join(tmp, "train.rec"), os.path.join(tmp, "phalanx.json")
        write_records(rec, texts)
        subprocess.run([tool, "train", "1500", "<|endoftext|>", "2", rec, ours], check=True)
        compare("phalanx-trained, read by HF", ours, texts, tool, tmp)
        assert Tokenizer.from_file(ours).get_vocab_size() == 1500, "phalanx's vocabulary is not 1500"
        # 4. Round trips on random bytes.
        rng = random.Random(20240601)
        blobs = [bytes(rng.randrange(256) for _ in range(rng.randrange(2000))) for _ in range(300)]
        blobs += [b"", b"\x00", b"\xff\xfe", "é".encode()[:1] + b"abc", b"<|endoftext|>\x80"]
        rt = os.path.join(tmp, "rt.rec")
        write_records(rt, blobs)
        for p in (os.path.join(tmp, "gpt2_False.json"), os.path.join(tmp, "llama3.json"), ours):
            subprocess.run([tool, "roundtrip", p, rt], check=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
