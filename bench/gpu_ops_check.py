"""Runs bench_gpu_ops (bench/gpu_ops.cpp) and checks its report, not its
times: the program exits 0 (so no time came out negative or not finite),
each configuration's table holds exactly the calls the model makes in that
configuration (its math, storage and attention, the last read from the
table's header), each as often per step as the model makes it, followed by
its total line, and the summary lists every configuration. The ctest
emu_gpu_ops_bench runs it on the CPU emulator's build at a tiny shape,
where the times mean nothing but every call runs.

    python3 bench/gpu_ops_check.py BENCH_BINARY [FLAGS...]

FLAGS must not narrow --config (all three are checked); either --attention
does. Exits 0 when the report is whole, 1 naming each thing missing."""
import subprocess
import sys

# Rows (function, use, a, b): the call, and a step making it a*L + b times
# (L layers), as model/gpt_cuda.cu does. Every configuration has these:
COMMON = [
    ("cudaMemsetAsync", "zero_grad", 0, 1), ("encoder_forward_cuda", "wte,wpe", 0, 1),
    ("layernorm_forward_cuda", "ln1,lnf", 1, 1), ("matmul_forward_cuda", "qkv", 1, 0),
    ("matmul_forward_cuda", "attproj", 1, 0), ("residual_layernorm_forward_cuda", "ln2", 1, 0),
    ("matmul_forward_cuda", "fcproj", 1, 0), ("residual_forward_cuda", "residual3", 1, 0),
    ("matmul_forward_cuda", "classifier", 0, 1), ("matmul_backward_set_cuda", "classifier", 0, 1),
    ("cudaMemsetAsync", "dres", 0, 1), ("layernorm_backward_cuda", "lnf,ln2,ln1", 2, 1),
    ("matmul_backward_set_cuda", "fc", 1, 0), ("matmul_backward_set_cuda", "attproj", 1, 0),
    ("matmul_backward_set_cuda", "qkv", 1, 0), ("encoder_backward_cuda", "wte,wpe", 0, 1),
    ("norm_squared_cuda", "grads", 0, 1), ("scale_inplace_cuda", "grads", 0, 1),
    ("adamw_update_tensors_cuda", "16_tensors", 0, 1),
]
# By math: bf16 fuses the classifier's loss and the GELU into GEMM epilogues.
MATH = {
    "fp32": [
        ("matmul_forward_cuda", "fc", 1, 0), ("gelu_forward_cuda", "fc", 1, 0),
        ("crossentropy_softmax_forward_cuda", "loss", 0, 1), ("crossentropy_softmax_backward_cuda", "loss", 0, 1),
        ("matmul_backward_set_cuda", "fcproj", 1, 0), ("gelu_backward_inplace_cuda", "fc", 1, 0),
    ],
    "bf16": [
        ("matmul_forward_gelu_cuda", "fc", 1, 0), ("crossentropy_fused_cuda", "loss", 0, 1),
        ("matmul_backward_dgelu_cuda", "fcproj", 1, 0), ("matmul_backward_set_cuda", "fcproj_dw", 1, 0),
    ],
}
# By storage: bf16 rounds the weights at each pass's acquire (a layer's
# forward and backward, the classifier's two).
STORAGE = {"fp32": [], "bf16": [("px_cuda_to_bf16_many", "layer_weights", 2, 0), ("px_cuda_to_bf16", "wte", 0, 2)]}
# By attention (the same for both storages).
ATTENTION = {
    "fused": [("flash_attention_forward_cuda", "attention", 1, 0),
              ("flash_attention_backward_set_cuda", "attention", 1, 0)],
    "unfused": [("attention_forward_cuda", "attention", 1, 0), ("attention_backward_set_cuda", "attention", 1, 0)],
}
# Each configuration's math and storage; its attention is read from its header.
CONFIGS = {"fp32": ("fp32", "fp32"), "bf16math": ("bf16", "fp32"), "bf16": ("bf16", "bf16")}


def expected(math, storage, attention):
    return COMMON + MATH[math] + STORAGE[storage] + ATTENTION[attention]


def table(lines, config):
    """(header words, {(function, use): calls per step}) of config's table,
    or None when its header or its total line is missing."""
    head = next((i for i, l in enumerate(lines) if l.startswith(f"config={config} math=")), None)
    if head is None:
        return None
    end = next((i for i in range(head, len(lines)) if lines[i].startswith(f"config={config} total ")), None)
    if end is None:
        return None
    words = dict(w.split("=", 1) for w in lines[head].split())
    rows = {}
    for line in lines[head + 2:end]:  # after the column names
        fn, use, _ms, calls = line.split()[:4]
        rows[(fn, use)] = int(calls)
    return words, rows


def layers(lines):
    shape = next((l for l in lines if l.startswith("shape ")), "")
    words = dict(w.split("=", 1) for w in shape.split()[1:] if "=" in w)
    return int(words["L"]) if "L" in words else None


def problems(out):
    lines = out.splitlines()
    L = layers(lines)
    if L is None:
        return ["no shape line with L="]
    found = []
    for config, (math, storage) in CONFIGS.items():
        got = table(lines, config)
        if got is None:
            found.append(f"config={config}: no table, or no total line after it")
            continue
        words, rows = got
        if (words.get("math"), words.get("storage")) != (math, storage) or words.get("attention") not in (
                "fused", "unfused") or (math == "fp32" and words["attention"] != "unfused"):
            found.append(f"config={config}: header says {words}, expected math={math} storage={storage}")
            continue
        for fn, use, a, b in expected(math, storage, words["attention"]):
            calls = rows.pop((fn, use), None)
            if calls is None:
                found.append(f"config={config}: no row {fn} {use}")
            elif calls != a * L + b:
                found.append(f"config={config}: {fn} {use}: {calls} calls per step, expected {a * L + b} (L={L})")
        found += [f"config={config}: unexpected row {fn} {use}" for fn, use in rows]
    summary = next((i for i, l in enumerate(lines) if l.startswith("summary ")), None)
    if summary is None:
        found.append("no summary")
    else:
        listed = [l.split()[0] for l in lines[summary + 2:] if l.strip()]
        found += [f"summary: no line for {c}" for c in CONFIGS if c not in listed]
    return found


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    run = subprocess.run(sys.argv[1:], capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    found = problems(run.stdout)
    if run.returncode != 0:
        found.insert(0, f"{sys.argv[1]} exited {run.returncode}")
    for p in found:
        print(f"gpu_ops_check: FAIL {p}")
    if not found:
        print("gpu_ops_check: ok, every configuration's table and the summary are whole")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
