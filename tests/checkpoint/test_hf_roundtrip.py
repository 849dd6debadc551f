"""phalanx-ckpt and Hugging Face transformers, both ways, with transformers'
own loaders (no code of ours on the Hugging Face side).

export   a tiny model trained 30 steps on BPE data (phalanx-data
         --train-tokenizer) by phalanx-launch, exported with --format hf:
         AutoModelForCausalLM.from_pretrained loads it with no missing or
         unexpected key (lm_head tied to wte), config.json's bos/eos are the
         tokenizer's end-of-text id; its loss on validation windows equals
         phalanx-worker --eval-only's on the same windows within 1e-4;
         AutoTokenizer.from_pretrained gives the ids phalanx's shards hold
         and decodes them back
import   a GPT2LMHeadModel saved by transformers (random weights, 2 layers,
         4 heads, 64 wide, vocabulary 300, 64 positions, a phalanx tokenizer
         of 300 tokens beside it) imported with --format hf: exported again,
         every tensor equals transformers' bit for bit; phalanx's eval loss
         equals transformers' on the same windows; a job with --model
         HFDIR/config.json restores its step 0 and fine-tunes, and two such
         jobs from the same import end with the same checksum
refuse   hand-made folders (numpy, no torch): F16 and BF16 widened exactly;
         configs and tensors that are not GPT-2 as phalanx has it, an
         untied lm_head, a missing folder or file: exit 2 naming the key or
         tensor; an export that cannot write exits 1, a bad checkpoint or
         tokenizer 2; bad command lines 2

export and import need torch and transformers (scripts/install-deps.sh
installs them); without them they exit 77 saying so. refuse needs numpy and
safetensors only. Fixed seeds throughout."""
import json
import math
import os
import random
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import (check, ckpt_tool as tool, launch_losses_checksum, main_scenarios,  # noqa: E402
                         run_to_end as run)

os.environ.setdefault("OMP_WAIT_POLICY", "passive")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is fetched: every folder is local
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SENTENCE = "the quick brown fox jumps over the lazy dog, while fault tolerant training heals."
EVAL_BATCHES, EVAL_B, T = 3, 4, 64


def need_hf():
    """torch and transformers, or exit 77 with the reason (the scenario is
    skipped, never passed)."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print("SKIP: torch and transformers are needed (%s): scripts/install-deps.sh installs them from PyPI" % e)
        sys.exit(77)
    torch.manual_seed(0)
    torch.set_num_threads(1)


def corpus(work, seed=7, lines=3000):
    rnd = random.Random(seed)
    words = ("the quick brown fox jumps over the lazy dog while fault tolerant training keeps every committed "
             "step and heals a replica from a live peer").split()
    path = os.path.join(work, "corpus.txt")
    with open(path, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rnd.choice(words) for _ in range(12)) + ".\n")
    return path


def bpe_data(bindir, work, text, vocab, name):
    """Shards of text in a BPE vocabulary of `vocab` tokens trained on it."""
    data = os.path.join(work, name)
    r = run([os.path.join(bindir, "phalanx-data"), "--out", data, "--train-tokenizer", str(vocab), text])
    check(r.returncode == 0 and os.path.exists(os.path.join(data, "tokenizer.json")),
          "phalanx-data --train-tokenizer: %s%s" % (r.stdout[-400:], r.stderr[-400:]))
    return data


def shard(path):
    import numpy as np
    with open(path, "rb") as f:
        blob = f.read()
    header = np.frombuffer(blob[:1024], dtype="<i4")
    return np.frombuffer(blob[1024:], dtype="<u2")[:header[2]].astype(np.int64)


def eot_of(tokenizer_json):
    with open(tokenizer_json) as f:
        added = json.load(f)["added_tokens"]
    special = [a for a in added if a.get("special")]
    check(len(special) == 1, "one special token in %s: %s" % (tokenizer_json, special))
    return special[0]["id"], special[0]["content"]


def phalanx_eval(bindir, work, ckpt, data):
    """phalanx-worker --eval-only's loss for the checkpoint's model (through
    an llm.c export) on the validation windows hf_eval reads."""
    llmc = os.path.join(work, "eval-%d.bin" % len(os.listdir(work)))
    r = tool(bindir, "export", ckpt, "--llmc", llmc)
    check(r.returncode == 0, "export --llmc: %s" % r.stderr)
    r = run([os.path.join(bindir, "phalanx-worker"), "--standalone", "--eval-only", "--model", llmc, "--data", data,
             "--eval-batches", str(EVAL_BATCHES), "--batch", str(EVAL_B), "--seq", str(T), "--threads", "1"])
    m = re.search(r"^eval_only .*eval_loss=(\S+) batches=(\d+) B=(\d+) T=(\d+)", r.stdout, re.M)
    check(r.returncode == 0 and m, "--eval-only: %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
    check(m.group(2, 3, 4) == (str(EVAL_BATCHES), str(EVAL_B), str(T)), "eval shape: %s" % r.stdout)
    return float(m.group(1))


def hf_eval(model, data):
    """transformers' loss on the windows phalanx's eval reads: batch b,
    sample k is window (b*B + k) mod nwin of the validation stream, T inputs
    at w*T and the T targets after them (model/dataset.h); the mean of the
    batches' mean cross-entropies."""
    import numpy as np
    import torch
    val = np.concatenate([shard(os.path.join(data, n)) for n in sorted(os.listdir(data))
                          if n.startswith("val_") and n.endswith(".bin")])
    nwin = (len(val) - 1) // T
    losses = []
    with torch.no_grad():
        for b in range(EVAL_BATCHES):
            wins = [((b * EVAL_B + k) % nwin) * T for k in range(EVAL_B)]
            x = torch.tensor(np.stack([val[w:w + T] for w in wins]))
            y = torch.tensor(np.stack([val[w + 1:w + T + 1] for w in wins]))
            logits = model(input_ids=x).logits
            losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).double(),
                                                            y.reshape(-1)).item())
    return sum(losses) / len(losses)


def load_hf(path):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    model.eval()
    check(not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"],
          "from_pretrained(%s): missing %s, unexpected %s, mismatched %s" % (path, info["missing_keys"],
                                                                             info["unexpected_keys"],
                                                                             info["mismatched_keys"]))
    check(model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr(), "lm_head is tied to wte")
    return model


def test_export(bindir):
    need_hf()
    from transformers import AutoTokenizer
    work = tempfile.mkdtemp(prefix="phalanx-hf-export-")
    text = corpus(work)
    data = bpe_data(bindir, work, text, 500, "data")
    ckdir = os.path.join(work, "ckpt")
    launch_losses_checksum(bindir, ["--groups", "1", "--model", "tiny", "--steps", "30", "--data", data,
                                    "--checkpoint-dir", ckdir, "--checkpoint-every", "30", "--", "--global-batch", "8",
                                    "--threads", "1"], "hf-export", 30)

    out = os.path.join(work, "hf")
    r = tool(bindir, "export", ckdir, out, "--format", "hf")
    check(r.returncode == 0, "export --format hf exits 0: %d %s" % (r.returncode, r.stderr))
    tok_src = os.path.join(ckdir, "tokenizer.json")
    m = re.search(r"^exported format=hf path=%s step=30 files=5 vocab=\d+ tokenizer=(\S+)$" % re.escape(out), r.stdout,
                  re.M)
    check(m and os.path.realpath(m.group(1)) == os.path.realpath(tok_src), "export says what: %r" % r.stdout)
    files = sorted(os.listdir(out))
    check(files == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                    "tokenizer_config.json"], "the folder: %s" % files)
    eot, eot_text = eot_of(tok_src)
    with open(os.path.join(out, "config.json")) as f:
        cfg = json.load(f)
    want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 4, "n_embd": 64,
            "n_positions": 64, "n_ctx": 64, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
            "tie_word_embeddings": True, "bos_token_id": eot, "eos_token_id": eot, "torch_dtype": "float32"}
    for k, v in want.items():
        check(cfg.get(k) == v, "config.json %s: %r, want %r" % (k, cfg.get(k), v))
    check(cfg["vocab_size"] > eot and cfg["vocab_size"] <= 500, "vocab_size %d: the tokenizer's" % cfg["vocab_size"])
    with open(os.path.join(out, "generation_config.json")) as f:
        gen = json.load(f)
    check(gen == {"bos_token_id": eot, "eos_token_id": eot, "pad_token_id": eot}, "generation_config: %s" % gen)

    model = load_hf(out)
    check(model.config.eos_token_id == eot and model.generation_config.pad_token_id == eot,
          "loaded config: eos %s pad %s" % (model.config.eos_token_id, model.generation_config.pad_token_id))
    check(tuple(model.transformer.wte.weight.shape) == (cfg["vocab_size"], 64), "wte has V rows, not Vp")
    ours, theirs = phalanx_eval(bindir, work, ckdir, data), hf_eval(model, data)
    check(abs(ours - theirs) <= 1e-4, "eval loss: phalanx %.6f, transformers %.6f" % (ours, theirs))
    check(ours < math.log(cfg["vocab_size"]) - 1, "the trained model's eval loss %.4f is well below an untrained "
          "one's (ln V = %.4f)" % (ours, math.log(cfg["vocab_size"])))

    tok = AutoTokenizer.from_pretrained(out)
    check(tok.eos_token == eot_text and tok.eos_token_id == eot, "AutoTokenizer eos: %r %r" % (tok.eos_token,
                                                                                              tok.eos_token_id))
    from tokenizers import Tokenizer
    ids = tok(SENTENCE)["input_ids"]
    check(ids == Tokenizer.from_file(tok_src).encode(SENTENCE).ids, "AutoTokenizer's ids are the tokenizer's")
    check(tok.decode(ids) == SENTENCE, "decode(encode(s)) == s: %r" % tok.decode(ids))
    # phalanx-data's shards: the end-of-text, then the corpus's ids as transformers gives them
    train = shard(os.path.join(data, "train_000000.bin"))
    with open(text) as f:
        hf_ids = tok(f.read())["input_ids"]
    check(train[0] == eot and list(train[1:]) == hf_ids[:len(train) - 1],
          "the train shard is [eot] + AutoTokenizer's ids of the corpus (%d tokens)" % len(train))
    print("export: %d files, no missing or unexpected key, eval loss phalanx %.6f transformers %.6f, "
          "tokenizer ids equal (%d shard tokens), eos %d" % (len(files), ours, theirs, len(train), eot))
    shutil.rmtree(work)


def safetensors_of(path):
    from safetensors.numpy import load_file
    return load_file(path)


def test_import(bindir):
    need_hf()
    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    work = tempfile.mkdtemp(prefix="phalanx-hf-import-")
    data = bpe_data(bindir, work, corpus(work), 300, "data")
    hfdir = os.path.join(work, "saved")
    torch.manual_seed(1234)
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=300, n_positions=64)).save_pretrained(hfdir)
    shutil.copy(os.path.join(data, "tokenizer.json"), os.path.join(hfdir, "tokenizer.json"))

    ckdir = os.path.join(work, "ckpt")
    r = tool(bindir, "import", "--format", "hf", hfdir, "--out", ckdir)
    check(r.returncode == 0, "import --format hf exits 0: %d %s" % (r.returncode, r.stderr))
    check(re.search(r"^imported path=\S+step_00000000 step=0 params=\d+ .* seed=1337 vocab=300 tokenizer=\S+$",
                    r.stdout, re.M), "import says what: %r" % r.stdout)
    with open(os.path.join(hfdir, "tokenizer.json"), "rb") as a, open(os.path.join(ckdir, "tokenizer.json"), "rb") as b:
        check(a.read() == b.read(), "the folder's tokenizer.json is beside the checkpoint")

    again = os.path.join(work, "again")
    r = tool(bindir, "export", ckdir, again, "--format", "hf")
    check(r.returncode == 0, "export of the import: %s" % r.stderr)
    theirs, ours = safetensors_of(os.path.join(hfdir, "model.safetensors")), safetensors_of(
        os.path.join(again, "model.safetensors"))
    check(set(theirs) == set(ours), "tensor names: %s" % (set(theirs) ^ set(ours)))
    for k in theirs:
        check(theirs[k].shape == ours[k].shape and np.array_equal(theirs[k].view(np.uint32), ours[k].view(np.uint32)),
              "%s: exported again differs from transformers' (bitwise)" % k)
    hf_model = load_hf(hfdir)
    lp, lh = phalanx_eval(bindir, work, ckdir, data), hf_eval(hf_model, data)
    check(abs(lp - lh) <= 1e-4, "the imported model's eval loss: phalanx %.6f, transformers %.6f" % (lp, lh))

    # Fine-tuning from the import: twice from copies of it, with the same flags.
    runs = []
    for name in ["a", "b"]:
        d = os.path.join(work, "ckpt-" + name)
        shutil.copytree(ckdir, d)
        launch, losses, final = launch_losses_checksum(
            bindir, ["--groups", "1", "--model", os.path.join(hfdir, "config.json"), "--data", data, "--steps", "4",
                     "--checkpoint-dir", d, "--checkpoint-every", "0", "--", "--global-batch", "8", "--threads", "1"],
            "hf-import-" + name, 4)
        check(any("restored step 0 from" in line for line in launch.output()),
              "the job restored the imported step 0:\n%s" % launch.tail())
        runs.append((losses, final))
        shutil.rmtree(launch.dir)
    check(runs[0] == runs[1], "two jobs from the same import: %s and %s" % (runs[0], runs[1]))
    check(float(runs[0][0][-1]) < float(runs[0][0][0]), "fine-tuning lowers the loss: %s" % runs[0][0])
    print("import: %d tensors bitwise equal after export; eval loss phalanx %.6f transformers %.6f; two "
          "fine-tunes: losses %s checksum %s" % (len(theirs), lp, lh, runs[0][0], runs[0][1]))
    shutil.rmtree(work)


# ---- refuse: hand-made folders --------------------------------------------------

def gpt2_tensors(L=2, C=64, V=300, maxT=64, seed=3):
    """GPT2LMHeadModel's state dict for a config, random, as numpy float32."""
    import numpy as np
    rng = np.random.default_rng(seed)
    t = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (maxT, C), "transformer.ln_f.weight": (C,),
         "transformer.ln_f.bias": (C,)}
    for layer in range(L):
        p = "transformer.h.%d." % layer
        t.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,), p + "attn.c_attn.weight": (C, 3 * C),
                  p + "attn.c_attn.bias": (3 * C,), p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                  p + "ln_2.weight": (C,), p + "ln_2.bias": (C,), p + "mlp.c_fc.weight": (C, 4 * C),
                  p + "mlp.c_fc.bias": (4 * C,), p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    return {k: (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in t.items()}


def hf_folder(work, name, tensors, config=None, dtype=None, metadata=True):
    """A folder as transformers saves one, written with numpy; dtype
    "F16"/"BF16" stores the tensors so (BF16 as raw bits)."""
    import numpy as np
    from safetensors.numpy import save_file
    d = os.path.join(work, name)
    os.makedirs(d)
    cfg = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 4, "n_embd": 64,
           "n_positions": 64, "vocab_size": 300, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "bos_token_id": 50256, "eos_token_id": 50256}
    cfg.update(config or {})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({k: v for k, v in cfg.items() if v is not None}, f)
    if dtype == "F16":
        tensors = {k: v.astype(np.float16) for k, v in tensors.items()}
    path = os.path.join(d, "model.safetensors")
    save_file(tensors, path, metadata={"format": "pt"} if metadata else None)
    if dtype == "BF16":  # numpy has no bfloat16: the top halves of the float32 bits, the header relabelled
        with open(path, "rb") as f:
            blob = f.read()
        n = int.from_bytes(blob[:8], "little")
        header = json.loads(blob[8:8 + n])
        body, out = blob[8 + n:], b""
        for k in [k for k in header if k != "__metadata__"]:
            b, e = header[k]["data_offsets"]
            halves = (np.frombuffer(body[b:e], dtype="<u4") >> 16).astype("<u2").tobytes()
            header[k].update(dtype="BF16", data_offsets=[len(out), len(out) + len(halves)])
            out += halves
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + out)
    return d


def expect(r, code, what, *says):
    check(r.returncode == code, "%s exits %d: %d (stdout %r stderr %r)" % (what, code, r.returncode, r.stdout,
                                                                           r.stderr))
    for s in says:
        check(s in r.stderr, "%s says %r: %r" % (what, s, r.stderr))


def widened_equal(bindir, work, name, dtype, want):
    import numpy as np
    d = hf_folder(work, name, gpt2_tensors(), dtype=dtype)
    out = os.path.join(work, name + "-ckpt")
    r = tool(bindir, "import", "--format", "hf", d, "--out", out)
    check(r.returncode == 0 and r.stdout.rstrip().endswith("tokenizer=none widened=" + dtype),
          "import of %s: %d %r %r" % (dtype, r.returncode, r.stdout, r.stderr))
    check(tool(bindir, "export", out, out + "-hf", "--format", "hf").returncode == 0, "export of the %s import" % dtype)
    got = safetensors_of(os.path.join(out + "-hf", "model.safetensors"))
    for k, w in want.items():
        check(np.array_equal(got[k].view(np.uint32), w.view(np.uint32)), "%s: %s widened exactly" % (k, dtype))


def test_refuse(bindir):
    try:
        import numpy as np
        from safetensors.numpy import save_file  # noqa: F401
    except ImportError as e:
        check(False, "numpy and safetensors are needed (%s): run scripts/install-deps.sh" % e)
    work = tempfile.mkdtemp(prefix="phalanx-hf-refuse-")
    base = gpt2_tensors()

    ok = hf_folder(work, "ok", base, metadata=False)
    r = tool(bindir, "import", "--format", "hf", ok, "--out", os.path.join(work, "ok-ckpt"))
    check(r.returncode == 0 and "tokenizer=none" in r.stdout, "a plain folder imports: %r %r" % (r.stdout, r.stderr))
    with open(os.path.join(work, "ok-ckpt", "step_00000000", "manifest.json")) as f:
        check(json.load(f)["model"]["padded_vocab_size"] == 384, "vocabulary 300 padded to 384")
    widened_equal(bindir, work, "f16", "F16", {k: v.astype(np.float16).astype(np.float32) for k, v in base.items()})
    widened_equal(bindir, work, "bf16", "BF16",
                  {k: ((v.view(np.uint32) >> 16) << 16).view(np.float32) for k, v in base.items()})

    tied = dict(base, **{"lm_head.weight": base["transformer.wte.weight"].copy(),
                         "transformer.h.0.attn.bias": np.ones((1, 1, 64, 64), np.float32)})
    r = tool(bindir, "import", "--format", "hf", hf_folder(work, "tied", tied), "--out", os.path.join(work, "tied-c"))
    check(r.returncode == 0, "a tied lm_head and an old mask buffer are accepted: %r" % r.stderr)

    wrong = [
        ("llama", {"model_type": "llama"}, base, '"model_type" llama'),
        ("eps", {"layer_norm_epsilon": 1e-6}, base, '"layer_norm_epsilon"'),
        ("relu", {"activation_function": "relu"}, base, '"activation_function" relu'),
        ("untied-cfg", {"tie_word_embeddings": False}, base, '"tie_word_embeddings" false'),
        ("layer-scale", {"scale_attn_by_inverse_layer_idx": True}, base, '"scale_attn_by_inverse_layer_idx"'),
        ("inner", {"n_inner": 100}, base, '"n_inner"'),
        ("novocab", {"vocab_size": None}, base, 'no "vocab_size"'),
        ("missing", {}, {k: v for k, v in base.items() if k != "transformer.h.1.ln_2.bias"},
         "no tensor transformer.h.1.ln_2.bias"),
        ("extra", {}, dict(base, **{"transformer.h.0.attn.rotary": np.zeros(4, np.float32)}),
         "tensor transformer.h.0.attn.rotary is not a parameter"),
        ("shape", {"n_embd": 32}, base, "tensor transformer.wte.weight has shape [300, 64], config.json's GPT-2 "
         "makes it [300, 32]"),
        ("f64", {}, dict(base, **{"transformer.ln_f.bias": base["transformer.ln_f.bias"].astype(np.float64)}),
         "tensor transformer.ln_f.bias is F64"),
        ("untied", {}, dict(base, **{"lm_head.weight": base["transformer.wte.weight"] * 2}),
         "lm_head.weight differs from transformer.wte.weight"),
        ("nan", {}, dict(base, **{"transformer.wpe.weight": np.full((64, 64), np.nan, np.float32)}),
         "tensor transformer.wpe.weight: element 0 is not finite"),
    ]
    for name, cfg, tensors, says in wrong:
        out = os.path.join(work, name + "-ckpt")
        expect(tool(bindir, "import", "--format", "hf", hf_folder(work, name, tensors, cfg), "--out", out), 2,
               "import (%s)" % name, says)
        check(not os.path.exists(out), "a refused import (%s) writes nothing" % name)
    nothing = os.path.join(work, "nothing")
    os.makedirs(nothing)
    expect(tool(bindir, "import", "--format", "hf", nothing, "--out", os.path.join(work, "n")), 2, "an empty folder",
           os.path.join(nothing, "config.json"))
    bins = hf_folder(work, "bins", base)
    os.rename(os.path.join(bins, "model.safetensors"), os.path.join(bins, "pytorch_model.bin"))
    expect(tool(bindir, "import", "--format", "hf", bins, "--out", os.path.join(work, "b")), 2, "pytorch_model.bin",
           "only safetensors are imported")
    torn = hf_folder(work, "torn", base)
    os.truncate(os.path.join(torn, "model.safetensors"), 5000)
    expect(tool(bindir, "import", "--format", "hf", torn, "--out", os.path.join(work, "t")), 2, "a truncated file",
           "model.safetensors", "truncated")

    # export: a bad checkpoint 2, a tokenizer not the model's 2, an OUTDIR it cannot write 1
    ck = os.path.join(work, "ok-ckpt")
    expect(tool(bindir, "export", nothing, os.path.join(work, "x"), "--format", "hf"), 2, "export of no checkpoint",
           "no checkpoint")
    big = os.path.join(work, "big-tokenizer.json")
    vocab = {chr(0x100 + i) * 2: i for i in range(400)}
    with open(big, "w") as f:
        json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "post_processor": None,
                   "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                     "use_regex": True},
                   "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                               "use_regex": True},
                   "model": {"type": "BPE", "vocab": vocab, "merges": []}}, f)
    r = tool(bindir, "export", ck, os.path.join(work, "x"), "--format", "hf", "--tokenizer", big)
    expect(r, 2, "export with another model's tokenizer", big)
    check(not os.path.exists(os.path.join(work, "x")), "a refused export writes nothing")
    blocker = os.path.join(work, "a-file")
    open(blocker, "w").close()
    expect(tool(bindir, "export", ck, os.path.join(blocker, "sub"), "--format", "hf"), 1, "export under a file",
           "cannot create the folder")

    for args, says in [(["export", ck, "out"], "unexpected argument 'out'"),
                       (["export", ck, "--format", "hf"], "--format hf needs OUTDIR"),
                       (["export", ck, "o", "--format", "onnx"], "--format"),
                       (["export", ck, "--llmc", "x.bin", "--tokenizer", big], "--tokenizer goes with --format hf"),
                       (["import", "--format", "hf", "--out", "d"], "--format hf needs HFDIR"),
                       (["import", "--format", "hf", ok, "--llmc", "f", "--out", "d"], "not both"),
                       (["import", ok, "--out", "d"], "unexpected argument")]:
        r = tool(bindir, *args)
        check(r.returncode == 2 and says in r.stderr, "phalanx-ckpt %s exits 2 saying %r: %d %r"
              % (" ".join(args), says, r.returncode, r.stderr))
    print("refuse: F16 and BF16 widened exactly, a tied lm_head accepted, %d bad folders and 3 more inputs refused "
          "naming the fault, export 1 and 2, 7 bad command lines" % len(wrong))
    shutil.rmtree(work)


if __name__ == "__main__":
    main_scenarios({"export": test_export, "import": test_import, "refuse": test_refuse})
