"""--precision bf16 on a GPU: training quality, reproducibility, every layout,
a killed rank, and checkpoints that do not depend on the precision.

  quality  phalanx-worker --standalone on the demo corpus: `small` for 300
           steps and `gpt2-124m` for 100 (B=4, T=256) end, in bf16, within 1%
           of the same run's fp32 final training and validation loss; the
           bf16 run repeated with the same seed prints the same losses and
           its --save file is bitwise the same.
  layouts  2 groups under phalanx-launch in bf16: whole replicas (the
           reference), fsdp2, tp2, pp2 (1f1b), fsdp2 x tp2 and DiLoCo; each
           ends within 1e-2 of the whole-replica bf16 job's final loss
           (another layout rounds other products to bf16), with both groups'
           checksums equal (the groups stay bitwise identical).
  kill     2 groups x 1 rank in bf16, g1 SIGKILLed once the job trains: it is
           restarted, heals from g0, both groups end with one checksum.
  checkpoint  a bf16 GPU job saves halfway; a CPU job (fp32) restores it and
           ends within 1e-2 of the bf16 job's final loss: the checkpoint holds
           the FP32 state, whatever the precision that trained it.

Tolerances fixed before any GPU run. Without a usable GPU the script prints
"SKIP: <reason>" and exits 77 (test_distributed.py's rule)."""
import filecmp
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import test_distributed as td  # noqa: E402
from phalanx_test import Launch, check, main_scenarios, make_corpus  # noqa: E402

BF16 = ["--precision", "bf16"]


def standalone(bindir, data, model, steps, precision, save=None):
    """phalanx-worker --standalone on the GPU: (train_loss, val_loss, stdout)."""
    cmd = [os.path.join(bindir, "phalanx-worker"), "--standalone", "--device", "cuda", "--precision", precision,
           "--model", model, "--steps", str(steps), "--batch", "4", "--seq", "256", "--data", data,
           "--eval-batches", "4", "--seed", "1337"] + (["--save", save] if save else [])
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    check(r.returncode == 0, "%s %s %d steps: exit %d:\n%s" % (model, precision, steps, r.returncode,
                                                               r.stdout[-3000:]))
    m = re.search(r"^summary steps=\d+/\d+ train_loss=([0-9.]+) .*val_loss=([0-9.]+) ", r.stdout, re.M)
    check(m, "%s %s: a summary line:\n%s" % (model, precision, r.stdout[-2000:]))
    return float(m.group(1)), float(m.group(2)), r.stdout


def quality(bindir):
    td.require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-bf16-data-"))
    for model, steps in (("small", 300), ("gpt2-124m", 100)):
        f_train, f_val, _ = standalone(bindir, data, model, steps, "fp32")
        scratch = tempfile.mkdtemp(prefix="phalanx-bf16-save-")
        a, b = os.path.join(scratch, "a.bin"), os.path.join(scratch, "b.bin")
        b_train, b_val, out_a = standalone(bindir, data, model, steps, "bf16", save=a)
        _, _, out_b = standalone(bindir, data, model, steps, "bf16", save=b)
        for what, bf, fp in (("train", b_train, f_train), ("val", b_val, f_val)):
            check(abs(bf - fp) <= 0.01 * fp, "%s %d steps: bf16 %s loss %.4f within 1%% of fp32's %.4f"
                  % (model, steps, what, bf, fp))
        losses = lambda out: re.findall(r"^step=\d+/\d+ loss=([0-9.]+)", out, re.M)
        check(losses(out_a) == losses(out_b), "%s: two bf16 runs of one seed print the same losses" % model)
        check(filecmp.cmp(a, b, shallow=False), "%s: two bf16 runs of one seed save the same bytes" % model)
        print("%s %d steps: train loss bf16 %.4f fp32 %.4f, val bf16 %.4f fp32 %.4f; bf16 reruns bitwise equal"
              % (model, steps, b_train, f_train, b_val, f_val))
        shutil.rmtree(scratch, ignore_errors=True)


LAYOUTS = {"whole": ["--ranks-per-group", "1"],
           "fsdp2": ["--ranks-per-group", "2", "--", "--fsdp", "2"],
           "tp2": ["--ranks-per-group", "2", "--", "--tp", "2"],
           "pp2": ["--ranks-per-group", "2", "--", "--pp", "2", "--microbatches", "4", "--schedule", "1f1b"],
           "fsdp2tp2": ["--ranks-per-group", "4", "--", "--fsdp", "2", "--tp", "2"],
           "diloco": ["--ranks-per-group", "1", "--", "--mode", "diloco", "--inner-steps", "5"]}


def layout_args(data, steps, layout):
    flags = LAYOUTS[layout]
    head, tail = (flags[:flags.index("--")], flags[flags.index("--") + 1:]) if "--" in flags else (flags, [])
    return (["--groups", "2", "--model", "tiny", "--steps", str(steps), "--data", data] + head + ["--"] + tail +
            ["--global-batch", "8", "--micro-batch", "2", "--device", "cuda", "--comm-timeout-ms", "30000"] + BF16)


def layouts(bindir):
    td.require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-bf16-data-"))
    steps, ref = 20, None
    for layout in LAYOUTS:
        launch = Launch(td.wrapped_bindir(bindir), layout_args(data, steps, layout), env=td.NCCL_ENV,
                        name="bf16-" + layout)
        s, finals = td.finish(launch, "bf16 " + layout, steps)
        if ref is None:
            ref = s["final_loss"]
        check(abs(s["final_loss"] - ref) <= 1e-2 * abs(ref),
              "%s: bf16 final loss %.6f within 1e-2 of whole replicas' %.6f" % (layout, s["final_loss"], ref))
        print("%s: bf16 final loss %.6f (whole replicas %.6f); checksum %s" % (layout, s["final_loss"], ref,
                                                                            finals["g0"]["checksum"]))


def kill(bindir):
    td.require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-bf16-data-"))
    steps = 1000
    launch = Launch(td.wrapped_bindir(bindir), td.job_args(data, steps, "cuda") + BF16, env=td.NCCL_ENV,
                    name="bf16-kill")
    s, finals, heals = td.kill_g1(launch, 0, steps, "bf16-kill", must_heal=True)
    print("bf16: g1 killed, healed %d time(s) from g0; final loss %.6f; both groups' checksum %s"
          % (len(heals), s["final_loss"], finals["g0"]["checksum"]))


def checkpoint(bindir):
    td.require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-bf16-data-"))
    steps, half = 40, 20
    gpu_ckpt = tempfile.mkdtemp(prefix="phalanx-bf16-ckpt-")
    ckpt = ["--checkpoint-every", str(half), "--checkpoint-keep", "0"]
    launch = Launch(td.wrapped_bindir(bindir), td.job_args(data, steps, "cuda") + BF16 +
                    ["--checkpoint-dir", gpu_ckpt] + ckpt, env=td.NCCL_ENV, name="bf16-ckpt")
    s, _ = td.finish(launch, "bf16-ckpt", steps)
    cpu_ckpt = tempfile.mkdtemp(prefix="phalanx-bf16-ckpt-cpu-")
    shutil.copytree(os.path.join(gpu_ckpt, "step_%08d" % half), os.path.join(cpu_ckpt, "step_%08d" % half))
    again = Launch(bindir, td.job_args(data, steps, "cpu") + ["--checkpoint-dir", cpu_ckpt] + ckpt,
                   name="bf16-ckpt-cpu")
    s2, _ = td.finish(again, "cpu-restore", steps)
    restored = [int(m.group(1)) for line in again.output() for m in [re.search(r"restored step (\d+) from", line)] if m]
    check(restored and set(restored) == {half}, "the CPU job restored step %d: %s" % (half, restored))
    check(abs(s2["final_loss"] - s["final_loss"]) <= 1e-2 * abs(s["final_loss"]),
          "the CPU job from the bf16 checkpoint ends at %.6f, the bf16 job at %.6f (1e-2)"
          % (s2["final_loss"], s["final_loss"]))
    print("bf16 job saved step %d; a CPU job restored it and ended at %.6f, the bf16 job at %.6f"
          % (half, s2["final_loss"], s["final_loss"]))


if __name__ == "__main__":
    main_scenarios({"quality": quality, "layouts": layouts, "kill": kill, "checkpoint": checkpoint})
