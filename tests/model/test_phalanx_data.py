"""phalanx-data's inputs, end to end: what the shards hold for each kind.

Byte-level shards are the documents' bytes, so every case checks the exact
token sequence: text files (one document each), a folder walked recursively
in path order with hidden files skipped, gzip-compressed files, JSON Lines
(one document per record, blank lines skipped, a record over the 1 MiB read
buffer, \\u0000 and non-ASCII text), --jsonl-key, --format jsonl for
standard input, plain standard input, and the validation split (a text
file's tail cut at a line; JSONL records whole while val holds at most its
share). Bad input exits 2 naming it before anything is written (a missing
path, an empty folder, no inputs); a malformed record names its file and
line. With a tokenizer (--train-tokenizer, or --tokenizer FILE) the shards
are, document by document, the end-of-text id and Hugging Face's encoding
of the text, and DIR/tokenizer.json is written (the given file unchanged);
byte-level shards over such a folder remove it."""
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, check, main  # noqa: E402


def shard_tokens(path):
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack("<256i", raw[:1024])
    check(header[0] == 20240520 and header[1] == 1, "%s: not a token file" % path)
    n = header[2]
    check(len(raw) == 1024 + 2 * n, "%s: %d tokens in the header, %d bytes after it" % (path, n, len(raw) - 1024))
    return list(struct.unpack("<%dH" % n, raw[1024:]))


def split_bytes(out, split):
    names = sorted(f for f in os.listdir(out) if f.startswith(split + "_"))
    toks = [t for name in names for t in shard_tokens(os.path.join(out, name))]
    check(all(t < 256 for t in toks), "byte-level tokens are bytes")
    return bytes(toks)


def data(bindir, args, stdin=None):
    return subprocess.run([os.path.join(bindir, "phalanx-data")] + args, input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=120)


def ok(r, what):
    check(r.returncode == 0, "%s: exit %d: %s" % (what, r.returncode, r.stderr.decode(errors="replace")[-500:]))
    check(b"progress " in r.stderr and b" done" in r.stderr, "%s: a progress line on stderr: %r" % (what, r.stderr))
    return dict(kv.split("=", 1) for kv in r.stdout.decode().split()[1:])


def write(path, content, mode="wb"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, mode) as f:
        f.write(content)


def test(bindir):
    d = tempfile.mkdtemp(prefix="phalanx-data-inputs-")
    a = b"first file\nline two\n"
    b = "z\u00e9\u4e2d\U0001F600\n".encode()
    c = b"compressed text\n"
    write(os.path.join(d, "in", "b.txt"), b)
    write(os.path.join(d, "in", "a.txt"), a)
    write(os.path.join(d, "in", "sub", "c.txt.gz"), c)
    write(os.path.join(d, "in", ".hidden"), b"never read")

    # A folder: every file below it, in path order, hidden ones skipped; gzip inflated.
    out = os.path.join(d, "o1")
    s = ok(data(bindir, ["--out", out, "--val-fraction", "0", os.path.join(d, "in")]), "a folder")
    check(split_bytes(out, "train") == a + b + c, "a folder's files in path order: %r" % split_bytes(out, "train"))
    check(s["files"] == "3" and s["docs"] == "3", "3 files, 3 documents: %s" % s)

    # JSON Lines, plain and gzipped: a document per record, in order.
    big = "x" * (3 << 20)  # longer than the 1 MiB read buffer
    recs = ["one", "caf\u00e9 \U0001F600", "nul\u0000inside", big, "last"]
    lines = "\n".join(json.dumps({"text": t, "id": i}) for i, t in enumerate(recs[:2]))
    lines += "\n\n   \n" + "\n".join(json.dumps({"id": 9, "text": t}) for t in recs[2:])  # blank lines, no final \n
    write(os.path.join(d, "r.jsonl"), lines.encode())
    write(os.path.join(d, "r.jsonl.gz"), lines.encode())
    want = "".join(recs).encode()
    for name in ("r.jsonl", "r.jsonl.gz"):
        out = os.path.join(d, "o-" + name)
        s = ok(data(bindir, ["--out", out, "--val-fraction", "0", os.path.join(d, name)]), name)
        check(split_bytes(out, "train") == want and s["docs"] == str(len(recs)), "%s: the records' texts: %s" % (name, s))

    # --jsonl-key and --format jsonl on standard input.
    body = "\n".join(json.dumps({"body": t}) for t in ("alpha", "beta")).encode()
    out = os.path.join(d, "o-stdin-jsonl")
    ok(data(bindir, ["--out", out, "--val-fraction", "0", "--format", "jsonl", "--jsonl-key", "body", "-"], body),
       "stdin as JSON Lines")
    check(split_bytes(out, "train") == b"alphabeta", "stdin records: %r" % split_bytes(out, "train"))
    out = os.path.join(d, "o-stdin")
    ok(data(bindir, ["--out", out, "--val-fraction", "0", "-"], a), "stdin as text")
    check(split_bytes(out, "train") == a, "stdin text")

    # The validation split: a text file's tail after a line; records whole, val within its share.
    out = os.path.join(d, "o-split")
    text = b"".join(b"line %02d of the file\n" % i for i in range(20))
    write(os.path.join(d, "split.txt"), text)
    ok(data(bindir, ["--out", out, "--val-fraction", "0.25", os.path.join(d, "split.txt")]), "a split file")
    tr, va = split_bytes(out, "train"), split_bytes(out, "val")
    check(tr + va == text and tr.endswith(b"\n") and len(va) <= 0.25 * len(text) < len(va) + 22,
          "a file's last quarter, cut at a line, is val: %d + %d" % (len(tr), len(va)))
    docs = ["%03d %s" % (i, "w" * (i % 7)) for i in range(200)]
    write(os.path.join(d, "split.jsonl"), "\n".join(json.dumps({"text": t}) for t in docs).encode())
    out = os.path.join(d, "o-split-jsonl")
    ok(data(bindir, ["--out", out, "--val-fraction", "0.1", os.path.join(d, "split.jsonl")]), "split records")
    tr, va = split_bytes(out, "train"), split_bytes(out, "val")
    total = sum(len(t) for t in docs)
    check(len(tr) + len(va) == total and 0 < len(va) <= 0.1 * total and len(va) > 0.1 * total - 20,
          "records: val holds at most a tenth of the bytes: %d of %d" % (len(va), total))
    check(sorted(docs) == sorted([t for t in docs if t.encode() in tr] + [t for t in docs if t.encode() in va]),
          "every record whole in one split")

    # Bad input: exit 2 naming it, nothing written.
    empty = os.path.join(d, "emptydir")
    os.makedirs(empty)
    for args, why in (([os.path.join(d, "nope.txt")], "nope.txt': No such file"),
                      ([empty], "a folder with no files"), ([], "no inputs"), (["-", "-"], "given twice")):
        out = os.path.join(d, "o-bad")
        r = data(bindir, ["--out", out] + args, b"")
        err = r.stderr.decode()
        check(r.returncode == 2 and why in err, "%s: exit 2 saying %r: %d %s" % (args, why, r.returncode, err))
        check(not os.path.exists(out), "%s: nothing written" % args)
    for content, why in ((b'{"text": "a"}\n{"txt": "b"}\n', 'line 2: no "text" field'),
                         (b'{"text": "a"}\n[1]\n', "line 2: a JSON array"), (b'{"text": 5}\n', '"text" is not a string'),
                         (b'{"text": "a"\n', "line 1: not JSON")):
        write(os.path.join(d, "bad.jsonl"), content)
        r = data(bindir, ["--out", os.path.join(d, "o-badrec"), os.path.join(d, "bad.jsonl")])
        err = r.stderr.decode()
        check(r.returncode == 2 and "bad.jsonl" in err and why in err, "a bad record: exit 2 saying %r, got %d %s" %
              (why, r.returncode, err))
    write(os.path.join(d, "blank.txt"), b"")
    r = data(bindir, ["--out", os.path.join(d, "o-blank"), os.path.join(d, "blank.txt")])
    check(r.returncode == 2 and "hold no text" in r.stderr.decode(), "no text: exit 2: %d %s" %
          (r.returncode, r.stderr.decode()))
    print("phalanx-data: folders, gzip, JSON Lines, stdin and the split give the documents' bytes; bad input named")
    bpe(bindir, d)


def bpe(bindir, d):
    """--train-tokenizer and --tokenizer: the shards are, document by
    document, the end-of-text id then Hugging Face's encoding of the text."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise Fail("the tokenizers package is missing (scripts/install-deps.sh installs it)")
    docs = ["caf\u00e9 au lait, don't stop %d \U0001F600" % i for i in range(300)] + ["\u4e2d\u6587 text  \t end"]
    src = os.path.join(d, "bpe.jsonl")
    write(src, "\n".join(json.dumps({"text": t}) for t in docs).encode())
    out = os.path.join(d, "o-bpe")
    s = ok(data(bindir, ["--out", out, "--val-fraction", "0", "--train-tokenizer", "300", src]), "--train-tokenizer")
    tok_path = os.path.join(out, "tokenizer.json")
    check(s["vocab"] == "300" and s["tokenizer"] == "trained" and os.path.exists(tok_path), "a tokenizer: %s" % s)
    hf = Tokenizer.from_file(tok_path)
    eot = hf.token_to_id("<|endoftext|>")
    want = [t for doc in docs for t in [eot] + hf.encode(doc, add_special_tokens=False).ids]
    got = [t for name in sorted(os.listdir(out)) if name.startswith("train_")
           for t in shard_tokens(os.path.join(out, name))]
    check(eot is not None and got == want, "shards = <eot> + HF's ids per document (%d vs %d ids)" % (len(got),
                                                                                                    len(want)))
    # The tokenizer given: copied byte for byte beside the shards, the same ids.
    again = os.path.join(d, "o-bpe-given")
    s = ok(data(bindir, ["--out", again, "--val-fraction", "0", "--tokenizer", tok_path, src]), "--tokenizer")
    with open(tok_path, "rb") as a, open(os.path.join(again, "tokenizer.json"), "rb") as b:
        check(a.read() == b.read(), "the given tokenizer.json is copied as it is")
    check(shard_tokens(os.path.join(again, "train_000000.bin")) == want, "the given tokenizer gives the same ids")
    # Bytes again into the same folder: the stale tokenizer.json goes.
    ok(data(bindir, ["--out", again, "--val-fraction", "0", src]), "bytes over a BPE folder")
    check(not os.path.exists(os.path.join(again, "tokenizer.json")), "byte-level shards leave no tokenizer.json")
    bad_tok = os.path.join(d, "bad-tokenizer.json")
    write(bad_tok, b'{"model": {"type": "WordPiece"}}')
    for args, why in ((["--tokenizer", tok_path, "--train-tokenizer", "300", src], "give one"),
                      (["--train-tokenizer", "300", "-"], "standard input can be read once"),
                      (["--tokenizer", bad_tok, src], "bad-tokenizer.json"),
                      (["--tokenizer", os.path.join(d, "none.json"), src], "none.json")):
        r = data(bindir, ["--out", os.path.join(d, "o-bpe-bad")] + args, b"")
        err = r.stderr.decode()
        check(r.returncode == 2 and why in err, "%s: exit 2 saying %r: %d %s" % (args, why, r.returncode, err))
    print("phalanx-data with a BPE: <eot> + HF's ids per document, trained or given; bad tokenizers named")


if __name__ == "__main__":
    main(test)
