"""docs/training.md's walkthrough ("Your text to a Hugging Face model"),
run as it is written: the shell block is read from the page and run with
bash -e in a scratch folder, `my_texts/` replaced by a folder of text made
here (six fortune files and a JSON Lines file) and `./build/bin` by the
build's programs. Each step must work, and what it leaves is checked: the
tokenizer and shards, a job that completed under kills with heals and one
checksum, samples printed by the launcher, a sample printed from the
checkpoint, the Hugging Face folder, and the text transformers generated."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, die_with_test, main  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "training.md")
FORTUNES = "/usr/share/games/fortunes"


def walkthrough_block():
    with open(DOC) as f:
        text = f.read()
    section = text.split("## Your text to a Hugging Face model", 1)
    check(len(section) == 2, "docs/training.md has no walkthrough section")
    m = re.search(r"```sh\n(.*?)```", section[1], re.S)
    check(m, "the walkthrough section has no sh block")
    return m.group(1)


def test(bindir):
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        print("SKIP: step 6 needs transformers (%s): scripts/install-deps.sh installs it" % e)
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="phalanx-walkthrough-")
    texts = os.path.join(work, "my_texts")
    os.makedirs(texts)
    for name in ("art", "computers", "fortunes", "literature", "science", "wisdom"):
        shutil.copy(os.path.join(FORTUNES, name), texts)
    with open(os.path.join(texts, "notes.jsonl"), "w") as f:
        for i in range(200):
            f.write(json.dumps({"text": "Note %d: the caf\u00e9 opens at %d. \U0001F600" % (i, 7 + i % 5)}) + "\n")
    os.makedirs(os.path.join(work, "build"))
    os.symlink(os.path.abspath(bindir), os.path.join(work, "build", "bin"))
    script = walkthrough_block()
    check("my_texts/" in script and "./build/bin/" in script, "the block names my_texts/ and ./build/bin/")
    r = subprocess.run(["bash", "-e", "-x", "-c", script], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=900, preexec_fn=die_with_test)
    out = r.stdout
    check(r.returncode == 0, "the walkthrough failed (exit %d):\n%s" % (r.returncode, out[-3000:]))
    run = os.path.join(work, "run")
    check(os.path.exists(os.path.join(run, "data", "tokenizer.json")), "step 1 wrote run/data/tokenizer.json")
    summary = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    check(summary and summary[-1]["completed"] and summary[-1]["chaos_kills"] >= 1 and summary[-1]["heals"] >= 1,
          "step 3 completed under kills with heals: %s" % summary)
    finals = re.findall(r"finished: group=\S+ steps=150 .*checksum=(\S+)", out)
    check(len(finals) == 2 and len(set(finals)) == 1, "both groups end with one checksum: %s" % finals)
    check(len(re.findall(r"> sample at step (50|100|150): \"", out)) == 3, "three samples shown by the launcher")
    check(re.search(r"^The .{20,}", out, re.M | re.S), "step 4 printed a sample from the checkpoint")
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json"):
        check(os.path.exists(os.path.join(run, "hf", name)), "step 5 wrote run/hf/%s" % name)
    check(re.search(r"^The .+", out.split("from_pretrained", 1)[-1], re.M), "step 6: transformers generated text")
    print("walkthrough: text -> tokenizer -> shards -> a job under chaos -> samples -> Hugging Face, as documented")


if __name__ == "__main__":
    main(test)
