"""phalanx-ckpt against real files: a tiny model trained by
`phalanx-worker --standalone --save A.bin`, imported into a checkpoint and
exported back out.

roundtrip    import A.bin; verify, inspect (every tensor named, --json is the
             manifest), list (and a writer's temporary folder); export --llmc
             gives back A.bin byte for byte
safetensors  export --safetensors, read with Hugging Face's own reader: every
             tensor equals A.bin's, bit for bit, with GPT-2's names, the
             Conv1D weights transposed to (in, out) and wte cut to the real
             vocabulary (also a model whose vocabulary is padded)
eval         the exported llm.c file gives the same eval loss as A.bin
job          a job started from the imported checkpoint trains exactly as one
             started from A.bin (losses and final state checksum)
damage       a flipped byte, a truncated data file, a deleted or garbled
             manifest, a torn llm.c file: verify, export and import exit 2
             naming the file and the fault; list marks the checkpoint bad
usage        bad flags and arguments exit 2 naming them; --help exits 0 for
             the program and every command
diloco       an import given DiLoCo's outer momentum (outer.momentum.NAME):
             inspect shows it (and --json "outer_momentum": true), verify
             checks it, export --llmc leaves it out (A.bin byte for byte),
             --safetensors adds it in its parameter's orientation; a job
             without DiLoCo resumes from it exactly as from A.bin; one
             missing an outer tensor is refused naming it"""
import json
import os
import re
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import (check, ckpt_tool as tool, launch_losses_checksum, main_scenarios, make_corpus,  # noqa: E402
                         run_to_end as run)

# Shared test machines: spinning OpenMP threads slow everything else down.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

LLMC_MAGIC, LLMC_VERSION = 20240326, 3
COMMANDS = ["list", "verify", "inspect", "export", "import"]


def train(bindir):
    """A scratch folder with shards and A.bin, a tiny model trained 20 steps."""
    work = tempfile.mkdtemp(prefix="phalanx-ckpt-tool-")
    data = make_corpus(bindir, os.path.join(work, "corpus"))
    a = os.path.join(work, "A.bin")
    r = run([os.path.join(bindir, "phalanx-worker"), "--standalone", "--model", "tiny", "--data", data,
             "--steps", "20", "--threads", "1", "--quiet", "--save", a])
    check(r.returncode == 0 and os.path.exists(a), "training A.bin failed:\n%s%s" % (r.stdout, r.stderr))
    return work, data, a


def imported(bindir, work, llmc, name="ckpt"):
    """llmc imported into WORK/name; returns (DIR, DIR/step_00000000)."""
    out = os.path.join(work, name)
    r = tool(bindir, "import", "--llmc", llmc, "--out", out)
    check(r.returncode == 0, "import exits 0: %d %s" % (r.returncode, r.stderr))
    check(re.search(r"^imported path=\S+step_00000000 step=0 ", r.stdout, re.M), "import says what: %r" % r.stdout)
    return out, os.path.join(out, "step_00000000")


def read_llmc(path):
    """An llm.c model file parsed here, independently of phalanx: its config
    and its tensors by llm.c's names, in llm.c's order and shapes."""
    import numpy as np
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(256 * 4), dtype="<i4")
        params = np.frombuffer(f.read(), dtype="<f4")
    check(header[0] == LLMC_MAGIC and header[1] == LLMC_VERSION, "%s: llm.c header %s" % (path, header[:2]))
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    shapes = [("wte", (Vp, C)), ("wpe", (maxT, C)), ("ln1w", (L, C)), ("ln1b", (L, C)),
              ("qkvw", (L, 3 * C, C)), ("qkvb", (L, 3 * C)), ("attprojw", (L, C, C)), ("attprojb", (L, C)),
              ("ln2w", (L, C)), ("ln2b", (L, C)), ("fcw", (L, 4 * C, C)), ("fcb", (L, 4 * C)),
              ("fcprojw", (L, C, 4 * C)), ("fcprojb", (L, C)), ("lnfw", (C,)), ("lnfb", (C,))]
    tensors, pos = {}, 0
    for name, shape in shapes:
        n = int(np.prod(shape))
        tensors[name] = params[pos:pos + n].reshape(shape)
        pos += n
    check(pos == len(params), "%s: %d floats, the header needs %d" % (path, len(params), pos))
    return {"V": V, "L": L, "C": C, "Vp": Vp}, tensors


def hugging_face_gpt2(cfg, t):
    """What GPT2Model's state dict holds for llm.c tensors t: Conv1D weights
    (in, out), wte with the real vocabulary's rows."""
    out = {"wte.weight": t["wte"][:cfg["V"]], "wpe.weight": t["wpe"], "ln_f.weight": t["lnfw"],
           "ln_f.bias": t["lnfb"]}
    per_layer = {"ln_1.weight": ("ln1w", False), "ln_1.bias": ("ln1b", False),
                 "attn.c_attn.weight": ("qkvw", True), "attn.c_attn.bias": ("qkvb", False),
                 "attn.c_proj.weight": ("attprojw", True), "attn.c_proj.bias": ("attprojb", False),
                 "ln_2.weight": ("ln2w", False), "ln_2.bias": ("ln2b", False),
                 "mlp.c_fc.weight": ("fcw", True), "mlp.c_fc.bias": ("fcb", False),
                 "mlp.c_proj.weight": ("fcprojw", True), "mlp.c_proj.bias": ("fcprojb", False)}
    for layer in range(cfg["L"]):
        for name, (src, conv1d) in per_layer.items():
            out["h.%d.%s" % (layer, name)] = t[src][layer].T if conv1d else t[src][layer]
    return out


def need_safetensors():
    try:
        import numpy  # noqa: F401
        from safetensors.numpy import load_file  # noqa: F401
    except ImportError as e:
        check(False, "the safetensors and numpy Python packages are needed (%s): run scripts/install-deps.sh "
                     "as root, which installs them from PyPI (is PyPI reachable?)" % e)


def test_roundtrip(bindir):
    work, _, a = train(bindir)
    ckdir, path = imported(bindir, work, a)
    r = tool(bindir, "verify", path)
    check(r.returncode == 0, "verify of a fresh import exits 0: %d %s" % (r.returncode, r.stderr))
    check(re.fullmatch(r"ok step=0 bytes=\d+ files=3\n", r.stdout), "verify's line: %r" % r.stdout)
    r = tool(bindir, "verify", ckdir)
    check(r.returncode == 2 and "hint: %s holds checkpoints" % ckdir in r.stderr and path in r.stderr,
          "verify of the folder above exits 2 and points at its checkpoint: %r" % r.stderr)

    r = tool(bindir, "inspect", path)
    check(r.returncode == 0, "inspect exits 0: %s" % r.stderr)
    names = ["wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias"] + [
        "h.%d.%s" % (layer, n) for layer in range(2)
        for n in ["ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                  "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                  "mlp.c_proj.weight", "mlp.c_proj.bias"]]
    every = names + ["optimizer.exp_avg." + n for n in names] + ["optimizer.exp_avg_sq." + n for n in names]
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")}
    check(set(every) <= listed, "inspect names every tensor; missing %s" % sorted(set(every) - listed))
    for key in ["step         0", "seed         1337", "L=2 C=64 NH=4 maxT=64 V=256 Vp=256", "data00000.bin"]:
        check(key in r.stdout, "inspect shows %r:\n%s" % (key, r.stdout[:800]))
    r = tool(bindir, "inspect", path, "--json")
    with open(os.path.join(path, "manifest.json")) as f:
        check(r.returncode == 0 and r.stdout == f.read(), "inspect --json prints the manifest as it is")
    check(len(json.loads(r.stdout)["tensors"]) == len(every), "the manifest lists %d tensors" % len(every))

    os.mkdir(os.path.join(ckdir, ".tmp-step_00000005-host-1"))
    os.mkdir(os.path.join(ckdir, "step_00000003.corrupt-20261128T120000Z"))
    for extra in [[], ["--verify"]]:
        r = tool(bindir, "list", ckdir, *extra)
        check(r.returncode == 0, "list %s exits 0: %s" % (extra, r.stderr))
        rows = [line.split() for line in r.stdout.splitlines() if re.match(r"\d", line)]
        check(len(rows) == 1 and rows[0][0] == "0" and rows[0][4] == "phalanx-ckpt" and rows[0][-1] == "ok",
              "list %s: one row, step 0, ok:\n%s" % (extra, r.stdout))
        check("step_00000005-host-1: in progress or abandoned" in r.stdout, "list mentions the temporary folder")
        check("step_00000003.corrupt-20261128T120000Z: moved aside: it failed verification" in r.stdout,
              "list mentions the folder moved aside:\n%s" % r.stdout)

    b = os.path.join(work, "B.bin")
    r = tool(bindir, "export", path, "--llmc", b)
    check(r.returncode == 0, "export --llmc exits 0: %s" % r.stderr)
    with open(a, "rb") as fa, open(b, "rb") as fb:
        check(fa.read() == fb.read(), "the exported llm.c file is byte-identical to the imported one")
    print("import, verify, inspect, list, export: B.bin == A.bin (%d bytes)" % os.path.getsize(a))
    shutil.rmtree(work)


def check_safetensors(bindir, work, llmc, name):
    """Exports llmc's import as safetensors and compares every tensor."""
    import numpy as np
    from safetensors import safe_open
    from safetensors.numpy import load_file
    _, path = imported(bindir, work, llmc, name)
    out = os.path.join(work, name + ".safetensors")
    r = tool(bindir, "export", path, "--safetensors", out)
    check(r.returncode == 0, "export --safetensors exits 0: %s" % r.stderr)
    got = load_file(out)
    with safe_open(out, framework="numpy") as f:
        meta = f.metadata()
    check(meta == {"format": "pt", "step": "0", "source": "phalanx"}, "metadata: %s" % meta)
    cfg, tensors = read_llmc(llmc)
    want = hugging_face_gpt2(cfg, tensors)
    check(set(got) == set(want), "tensor names: extra %s, missing %s" % (set(got) - set(want), set(want) - set(got)))
    for k, w in want.items():
        g = got[k]
        check(g.dtype == np.float32 and g.shape == w.shape, "%s: %s %s, want float32 %s" % (k, g.dtype, g.shape, w.shape))
        check(np.array_equal(np.ascontiguousarray(g).view(np.uint32), np.ascontiguousarray(w).view(np.uint32)),
              "%s differs from the llm.c file's (bitwise)" % k)
    check(got["wte.weight"].shape == (cfg["V"], cfg["C"]), "wte has V=%d rows" % cfg["V"])
    print("%s: %d tensors equal, wte %s of Vp=%d" % (name, len(want), got["wte.weight"].shape, cfg["Vp"]))


def test_safetensors(bindir):
    need_safetensors()
    work, _, a = train(bindir)
    check_safetensors(bindir, work, a, "tiny")
    # The same weights declared with a real vocabulary of 250 of the 256 rows:
    # export must cut the padding rows.
    padded = os.path.join(work, "padded.bin")
    with open(a, "rb") as f:
        blob = bytearray(f.read())
    blob[12:16] = (250).to_bytes(4, "little")  # header[3]: V
    with open(padded, "wb") as f:
        f.write(blob)
    check_safetensors(bindir, work, padded, "padded")
    shutil.rmtree(work)


def eval_loss(bindir, data, model):
    r = run([os.path.join(bindir, "phalanx-worker"), "--standalone", "--model", model, "--data", data,
             "--eval-only", "--eval-batches", "4", "--batch", "4", "--threads", "1"])
    m = re.search(r"^eval_only .*eval_loss=(\S+)", r.stdout, re.M)
    check(r.returncode == 0 and m, "--eval-only on %s: %d\n%s%s" % (model, r.returncode, r.stdout, r.stderr))
    return m.group(1)


def test_eval(bindir):
    work, data, a = train(bindir)
    _, path = imported(bindir, work, a)
    b = os.path.join(work, "B.bin")
    check(tool(bindir, "export", path, "--llmc", b).returncode == 0, "export --llmc exits 0")
    la, lb = eval_loss(bindir, data, a), eval_loss(bindir, data, b)
    check(la == lb, "eval loss of the exported model %s, of the original %s" % (lb, la))
    check(0 < float(la) < 5.0, "the trained model's eval loss %s is below an untrained one's (ln 256 = 5.55)" % la)
    print("eval loss A.bin %s, exported B.bin %s" % (la, lb))
    shutil.rmtree(work)


def test_job(bindir):
    """The imported checkpoint is what a job resumes from: it trains exactly
    as a job started from the llm.c file itself (step 0, moments zero)."""
    work, data, a = train(bindir)
    ckdir, _ = imported(bindir, work, a)
    common = ["--groups", "1", "--data", data, "--steps", "6", "--", "--global-batch", "8", "--micro-batch", "4",
              "--threads", "1"]
    ref, ref_losses, ref_sum = launch_losses_checksum(bindir, ["--model", a] + common, "ckpt-tool-ref", 6)
    resumed, losses, final = launch_losses_checksum(bindir, ["--model", "tiny", "--checkpoint-dir", ckdir,
                                                             "--checkpoint-every", "0"] + common, "ckpt-tool-resumed",
                                                    6)
    check(any(re.search(r"restored step 0 from", line) for line in resumed.output()),
          "the job restored the imported step 0:\n%s" % resumed.tail())
    check(losses == ref_losses and final == ref_sum, "from the checkpoint: losses %s checksum %s; from A.bin: %s %s"
          % (losses, final, ref_losses, ref_sum))
    print("job from the imported checkpoint = job from A.bin: losses %s, checksum %s" % (losses, final))
    for d in [work, ref.dir, resumed.dir]:
        shutil.rmtree(d)


def expect_fault(r, what, file, fault):
    check(r.returncode == 2, "%s exits 2: %d (stdout %r)" % (what, r.returncode, r.stdout))
    check(file in r.stderr and fault in r.stderr, "%s names %s and %r: %r" % (what, file, fault, r.stderr))


def damaged(bindir, work, name, damage, file, fault):
    ckdir, path = imported(bindir, work, os.path.join(work, "A.bin"), name)
    damage(path)
    target = os.path.join(path, file)
    expect_fault(tool(bindir, "verify", path), "verify (%s)" % name, target, fault)
    out = os.path.join(work, name + ".out")
    r = tool(bindir, "export", path, "--llmc", out + ".bin", "--safetensors", out + ".safetensors")
    expect_fault(r, "export (%s)" % name, target, fault)
    check(not os.path.exists(out + ".bin") and not os.path.exists(out + ".safetensors"), "export wrote nothing")
    for extra in [[], ["--verify"]]:
        r = tool(bindir, "list", ckdir, *extra)
        bad = [line for line in r.stdout.splitlines() if line.startswith("0 ")]
        if name == "flipped" and not extra:
            check(bad and bad[0].endswith(" ok"), "a cheap list does not hash: %r" % bad)
            continue
        check(r.returncode == 0 and bad and "bad: %s: %s" % (target, fault) in bad[0],
              "list %s marks %s bad with the file and the fault: %r" % (extra, name, r.stdout))
    print("%s: verify, export exit 2 naming %s: %s" % (name, file, fault))


def flip_byte(path):
    with open(os.path.join(path, "data00000.bin"), "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0x10]))


def truncate(path):
    data = os.path.join(path, "data00000.bin")
    os.truncate(data, os.path.getsize(data) - 4096)


def garble(path):
    with open(os.path.join(path, "manifest.json"), "r+b") as f:
        f.seek(40)
        f.write(b"}}}{")


def test_damage(bindir):
    work, _, a = train(bindir)
    damaged(bindir, work, "flipped", flip_byte, "data00000.bin", "checksum mismatch")
    damaged(bindir, work, "truncated", truncate, "data00000.bin", "short (torn or truncated)")
    damaged(bindir, work, "nomanifest", lambda p: os.unlink(os.path.join(p, "manifest.json")), "manifest.json",
            "cannot open: No such file or directory")
    damaged(bindir, work, "garbled", garble, "manifest.json", "unparsable manifest")
    # A torn llm.c file, and one that is not an llm.c file at all, are refused by import.
    torn = os.path.join(work, "torn.bin")
    with open(a, "rb") as f, open(torn, "wb") as g:
        g.write(f.read()[:5000])
    out = os.path.join(work, "never")
    expect_fault(tool(bindir, "import", "--llmc", torn, "--out", out), "import of a torn file", torn, "truncated")
    expect_fault(tool(bindir, "import", "--llmc", os.path.join(work, "corpus", "corpus.txt"), "--out", out),
                 "import of a text file", "corpus.txt", "bad magic")
    check(not os.path.exists(out), "a refused import creates nothing")
    # An import must not hide behind later checkpoints, which a job would restore instead.
    later, _ = imported(bindir, work, a, "later")
    os.rename(os.path.join(later, "step_00000000"), os.path.join(later, "step_00000010"))
    expect_fault(tool(bindir, "import", "--llmc", a, "--out", later), "import over step 10", later, "up to step 10")
    shutil.rmtree(work)


def xxh3_64(data):
    """XXH3-64 of bytes, by the libxxhash phalanx links."""
    import ctypes
    import ctypes.util
    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_64bits.restype = ctypes.c_uint64
    lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    return lib.XXH3_64bits(data, len(data))


def add_outer_momentum(path, skip=None):
    """Turns the imported checkpoint at path into what a DiLoCo job writes:
    outer.momentum.NAME = -2 * NAME (exact in float32) for every parameter
    but skip, appended to the data file, and "outer_momentum": true.
    Returns the parameters' names."""
    import numpy as np
    mpath, dpath = os.path.join(path, "manifest.json"), os.path.join(path, "data00000.bin")
    with open(mpath) as f:
        man = json.load(f)
    with open(dpath, "rb") as f:
        data = bytearray(f.read())
    params = [t for t in man["tensors"] if not t["name"].startswith("optimizer.")]
    for t in params:
        if t["name"] == skip:
            continue
        (s,) = t["slices"]  # an import is one slice per tensor
        values = np.frombuffer(bytes(data[s["offset"]:s["offset"] + s["bytes"]]), dtype="<f4") * np.float32(-2)
        man["tensors"].append({"name": "outer.momentum." + t["name"], "shape": t["shape"],
                               "slices": [dict(s, offset=len(data))]})
        data += values.astype("<f4").tobytes()
    man["outer_momentum"] = True
    man["files"][0]["bytes"] = len(data)
    man["files"][0]["xxh3_64"] = "%016x" % xxh3_64(bytes(data))
    with open(dpath, "wb") as f:
        f.write(data)
    with open(mpath, "w") as f:
        json.dump(man, f, indent=1)
    return [t["name"] for t in params]


def test_diloco(bindir):
    need_safetensors()
    import numpy as np
    from safetensors.numpy import load_file
    work, data, a = train(bindir)
    _, plain = imported(bindir, work, a, "plain")
    r = tool(bindir, "inspect", plain, "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["outer_momentum"] is False, "a plain import: outer_momentum false")
    check("state        params, m, v (no outer momentum)" in tool(bindir, "inspect", plain).stdout,
          "inspect of a plain import says it has no outer momentum")

    ckdir, path = imported(bindir, work, a, "diloco")
    names = add_outer_momentum(path)
    r = tool(bindir, "verify", path)
    check(r.returncode == 0 and re.fullmatch(r"ok step=0 bytes=\d+ files=3\n", r.stdout),
          "verify of a DiLoCo checkpoint: %d %r %r" % (r.returncode, r.stdout, r.stderr))
    r = tool(bindir, "inspect", path)
    check(r.returncode == 0 and "state        params, m, v, outer momentum" in r.stdout,
          "inspect says the state has the outer momentum:\n%s" % r.stdout[:900])
    listed = {line.split()[0] for line in r.stdout.splitlines() if line.startswith("  ")}
    outer = {"outer.momentum." + n for n in names}
    check(outer <= listed, "inspect lists the outer tensors; missing %s" % sorted(outer - listed))
    r = tool(bindir, "inspect", path, "--json")
    check(r.returncode == 0 and json.loads(r.stdout)["outer_momentum"] is True, "inspect --json: outer_momentum true")

    b, st = os.path.join(work, "B.bin"), os.path.join(work, "diloco.safetensors")
    r = tool(bindir, "export", path, "--llmc", b, "--safetensors", st)
    check(r.returncode == 0 and "tensors=%d" % (2 * len(names)) in r.stdout, "export: %r %r" % (r.stdout, r.stderr))
    with open(a, "rb") as fa, open(b, "rb") as fb:
        check(fa.read() == fb.read(), "export --llmc of a DiLoCo checkpoint is A.bin byte for byte")
    got = load_file(st)
    check(set(got) == set(names) | outer, "safetensors names: %s" % sorted(set(got) ^ (set(names) | outer)))
    for n in names:
        g, w = got["outer.momentum." + n], got[n] * np.float32(-2)
        check(g.shape == w.shape and np.array_equal(g.view(np.uint32), w.view(np.uint32)),
              "outer.momentum.%s: %s, want -2 * its parameter %s (same orientation)" % (n, g.shape, w.shape))

    # A job without DiLoCo resumes from it: the outer momentum is read, verified and left out.
    common = ["--groups", "1", "--data", data, "--steps", "6", "--", "--global-batch", "8", "--micro-batch", "4",
              "--threads", "1"]
    ref, ref_losses, ref_sum = launch_losses_checksum(bindir, ["--model", a] + common, "ckpt-tool-diloco-ref", 6)
    resumed, losses, final = launch_losses_checksum(bindir, ["--model", "tiny", "--checkpoint-dir", ckdir,
                                                             "--checkpoint-every", "0"] + common,
                                                    "ckpt-tool-diloco-resumed", 6)
    check(any("restored step 0 from" in line for line in resumed.output()),
          "the job restored the DiLoCo step 0:\n%s" % resumed.tail())
    logs = ""
    for name in os.listdir(resumed.dir):
        if name.startswith("worker-") and name.endswith(".log"):
            with open(os.path.join(resumed.dir, name), errors="replace") as f:
                logs += f.read()
    check(re.search(r"checkpoint_restored .*step=0 .*outer_momentum=ignored", logs),
          "the worker logs that it left the outer momentum out (logs in %s)" % resumed.dir)
    check(losses == ref_losses and final == ref_sum, "from the DiLoCo checkpoint: losses %s checksum %s; from A.bin: "
          "%s %s" % (losses, final, ref_losses, ref_sum))

    _, partial = imported(bindir, work, a, "partial")
    add_outer_momentum(partial, skip="h.1.ln_2.bias")
    fault = "tensor outer.momentum.h.1.ln_2.bias missing"
    target = os.path.join(partial, "manifest.json")
    expect_fault(tool(bindir, "verify", partial), "verify (partial outer momentum)", target, fault)
    expect_fault(tool(bindir, "export", partial, "--llmc", os.path.join(work, "never.bin")),
                 "export (partial outer momentum)", target, fault)
    expect_fault(tool(bindir, "inspect", partial), "inspect (partial outer momentum)", target, fault)
    print("DiLoCo checkpoint: inspect, verify, export (%d + %d tensors), a job resumed from it; a partial one "
          "refused: %s" % (len(names), len(outer), fault))
    for d in [work, ref.dir, resumed.dir]:
        shutil.rmtree(d)


def test_usage(bindir):
    r = tool(bindir, "--help")
    check(r.returncode == 0 and all(c in r.stdout for c in COMMANDS), "--help lists the commands: %r" % r.stdout)
    for c in COMMANDS:
        r = tool(bindir, c, "--help")
        check(r.returncode == 0 and r.stdout.startswith("usage: phalanx-ckpt " + c),
              "%s --help exits 0 with its usage: %d %r" % (c, r.returncode, r.stdout[:80]))
    cases = [
        ([], "usage: phalanx-ckpt COMMAND"),
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["verify"], "missing PATH"),
        (["list"], "missing DIR"),
        (["verify", "a", "b"], "unexpected argument 'b'"),
        (["verify", "x", "--bogus"], "unknown flag '--bogus'"),
        (["verify", "x", "--json"], "unknown flag '--json'"),
        (["export", "x"], "nothing to export"),
        (["export", "x", "--llmc"], "--llmc needs a value"),
        (["import", "--out", "d"], "import needs --llmc FILE"),
        (["import", "--llmc", "f"], "import needs --out DIR"),
        (["import", "--llmc", "f", "--out", "d", "--seed", "-1"], "--seed: bad value '-1'"),
        (["import", "--llmc", "f", "--out", "d", "--job", "x" * 64], "--job: bad value"),
        (["list", "/nonexistent/phalanx"], "/nonexistent/phalanx: No such file or directory"),
    ]
    for args, want in cases:
        r = tool(bindir, *args)
        check(r.returncode == 2 and want in r.stdout + r.stderr,
              "phalanx-ckpt %s exits 2 saying %r: %d %r" % (" ".join(args), want, r.returncode, r.stderr))
    print("--help for the program and %d commands; %d bad command lines exit 2" % (len(COMMANDS), len(cases)))


if __name__ == "__main__":
    main_scenarios({"roundtrip": test_roundtrip, "safetensors": test_safetensors, "eval": test_eval,
                    "job": test_job, "damage": test_damage, "usage": test_usage, "diloco": test_diloco})
