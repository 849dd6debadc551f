"""The distributed trainer on a GPU (phalanx-worker --device cuda): 2 groups
x 1 rank of `tiny` under phalanx-launch, gradients reduced with NCCL, heals
over Gloo, both processes on the same GPU when there is one.

  parity  20 steps on the GPU end with the final loss of the same job on the
          CPU within 1e-3 relative, and both groups hold the same state
          (equal checksums).
  kill    a longer job; SIGKILL g1 once it trains: phalanx-launch restarts
          it, it heals from g0, the job completes, both groups end with the
          same checksum, and the final loss is within 1e-3 of the CPU run's.
  ranks2  2 groups x 2 ranks: the gradients reduced with NCCL inside each
          group too, the state synced over the Gloo group communicator; g1's
          rank 1 SIGKILLed: its group is dropped, the rank restarted takes the
          state from its group's rank 0 (and g1 heals from g0 if g0 went on
          alone meanwhile), both groups end with the same checksum and the
          CPU run's final loss within 1e-3.
  sharded  2 groups of sharded ranks on the GPU, one job per layout (fsdp2,
          tp2, fsdp2 x tp2): the parameters all-gathered and the gradients
          reduce-scattered over NCCL, the tensor-parallel sums over NCCL, the
          groups' shards reduced across groups (HSDP) over NCCL; 20 steps end
          with the final loss of the same layout's CPU job within 1e-3 (the
          CPU layouts equal one rank's losses: tests/sharded), and both
          groups hold the same state.
  sharded_kill  2 groups of fsdp2 x tp2; g1's rank 3 SIGKILLed once the job
          trains: the group is dropped, the rank restarted, the group healed
          rank by rank, equal checksums, the CPU run's final loss within 1e-3.
  sharded_checkpoint  a GPU job of 2 groups of fsdp2 x tp2 saves checkpoints
          (every rank its slices, downloaded from the GPU) and --save's
          llm.c file (the shards gathered over NCCL); a CPU job of whole
          replicas restores the halfway checkpoint and ends at the GPU job's
          final loss within 1e-3; both jobs' --save files are the same size.
  pipeline  2 groups of pipelined ranks on the GPU, one job per layout: pp2
          with each schedule (gpipe, 1f1b, zb-h1; 4 micro-batches), pp2 x tp2
          and pp2 x fsdp2: activations and their gradients cross the stages
          over NCCL links, the tied embedding's gradients summed between the
          first and last stage over NCCL; 20 steps end at the same layout's
          CPU run's final loss within 1e-3, equal checksums, and --save
          gathers the model from the stages.
  pipeline_kill  2 groups of pp2 x fsdp2 (1f1b); g1's rank 3 SIGKILLed:
          dropped, restarted, healed, equal checksums, the CPU run's final
          loss within 1e-3.
  checkpoint  a GPU job saves a checkpoint halfway (the state downloaded from
          the GPU at that step) and at its end; a CPU job restores the
          halfway one, says so, and ends at the GPU job's final loss within
          1e-3: the checkpoint holds the whole state (parameters, AdamW
          moments, step, data cursor), whichever device wrote it.

  diloco  --mode diloco on the GPU (outer steps over Gloo, through host
          memory), one job per case: whole replicas of 1 and 2 ranks, fsdp2,
          pp2, Streaming DiLoCo with overlapped outer steps, int8
          pseudo-gradients, a sync warmup: 20 steps end with the CPU job's
          outer steps and final loss (1e-3; int8 2e-2) and one state in both
          groups.
  diloco_auto  --mode auto on the GPU: g1 SIGKILLed after 30 sync steps; the
          coordinator switches the job to DiLoCo, g1 comes back and heals
          from g0 mid-round, the job goes back to sync once the failure left
          the window, and completes with one state in both groups.

Without a usable GPU (tests/gpu's test_cuda_available says why, or the build
has no CUDA) the script prints "SKIP: <reason>" and exits 77.

NCCL refuses two ranks of one communicator on one GPU of one host, and on a
one-GPU machine both groups' ranks are on GPU 0. The test therefore runs the
workers through a wrapper that gives each rank its own NCCL_HOSTID (NCCL
then treats the ranks as separate hosts and connects them over sockets): a copy
of phalanx-launch in a scratch folder finds the wrapper as its
phalanx-worker. Production runs need no such thing (one host per group, or
CUDA_VISIBLE_DEVICES per process; docs/cuda.md)."""
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, main_scenarios, make_corpus, wait_until  # noqa: E402

SKIP = 77
NCCL_ENV = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_IB_DISABLE": "1"}


def skip(reason):
    print("SKIP: %s" % reason)
    sys.exit(SKIP)


def require_gpu(bindir):
    probe = os.path.join(bindir, "test_cuda_available")
    if not os.path.exists(probe):
        skip("built without CUDA: no %s (configure with nvcc present)" % probe)
    out = subprocess.run([probe], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120).stdout
    mark = "px_cuda_available() = 0: "
    for line in out.splitlines():
        if mark in line:
            skip("no usable GPU: %s" % line.split(mark, 1)[1])
    if "FAIL" in out:
        raise Fail("test_cuda_available failed:\n%s" % out)


def wrapped_bindir(bindir):
    """A scratch bin folder: a copy of phalanx-launch (it runs the
    phalanx-worker next to itself), the real coordinator and data tool, and
    a phalanx-worker that sets NCCL_HOSTID from --group and --rank and execs
    the real one (same pid, so the test's kill hits the worker)."""
    d = tempfile.mkdtemp(prefix="phalanx-gpu-bin-")
    shutil.copy2(os.path.join(bindir, "phalanx-launch"), d)
    for name in ("phalanx-coordinator", "phalanx-data"):
        os.symlink(os.path.join(bindir, name), os.path.join(d, name))
    w = os.path.join(d, "phalanx-worker")
    with open(w, "w") as f:
        f.write('#!/bin/sh\n'
                'g=; r=0; prev=\n'
                'for a in "$@"; do [ "$prev" = --group ] && g=$a; [ "$prev" = --rank ] && r=$a; prev=$a; done\n'
                'NCCL_HOSTID="phalanx-test-$g-$r"; export NCCL_HOSTID\n'
                'exec "%s" "$@"\n' % os.path.join(bindir, "phalanx-worker"))
    os.chmod(w, os.stat(w).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return d


def job_args(data, steps, device, ranks=1):
    return ["--groups", "2", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps", str(steps),
            "--data", data, "--", "--global-batch", "8", "--micro-batch", str(4 // ranks), "--device", device]


def finish(launch, name, steps):
    """Waits for the job; its summary and the groups' final lines."""
    rc = launch.wait(400)
    log = os.path.join(launch.dir, "worker-g0-0.log")
    if rc != 0 and os.path.exists(log) and "built without NCCL" in open(log).read():
        skip("this build has CUDA but no NCCL (see docs/comm.md)")
    check(rc == 0, "%s: phalanx-launch exited %s:\n%s\n(logs in %s)" % (name, rc, launch.tail(), launch.dir))
    s = launch.summary()
    check(s and s["completed"] and s["steps"] == steps, "%s: completed %d steps: %s" % (name, steps, s))
    finals = launch.finals()
    check(sorted(finals) == ["g0", "g1"], "%s: both groups finished: %s" % (name, sorted(finals)))
    check(finals["g0"]["checksum"] == finals["g1"]["checksum"], "%s: groups' checksums agree: %s" % (name, finals))
    return s, finals


def cpu_run(bindir, data, steps, ranks=1):
    s, _ = finish(Launch(bindir, job_args(data, steps, "cpu", ranks), name="gpu-cpu-ref"), "cpu", steps)
    return s["final_loss"]


def gpu_launch(bindir, data, steps, name, ranks=1):
    return Launch(wrapped_bindir(bindir), job_args(data, steps, "cuda", ranks), env=NCCL_ENV, name=name)


def close(gpu, cpu, what):
    check(abs(gpu - cpu) <= 1e-3 * abs(cpu), "%s: GPU final loss %.6f vs CPU %.6f (1e-3 relative)" % (what, gpu, cpu))


def parity(bindir):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps = 20
    cpu = cpu_run(bindir, data, steps)
    launch = gpu_launch(bindir, data, steps, "gpu-parity")
    s, finals = finish(launch, "cuda", steps)
    close(s["final_loss"], cpu, "parity")
    print("final loss: GPU %.6f, CPU %.6f; checksum %s" % (s["final_loss"], cpu, finals["g0"]["checksum"]))


def kill_g1(launch, victim, steps, name, must_heal):
    """SIGKILLs g1's rank `victim` once the job trains, waits for its restart
    (and, with must_heal, for g1's heal from g0) and for the job's end: the
    summary, the finals and g1's heals."""
    try:
        wait_until(lambda: launch.last_step() >= 10, 180, "10 committed steps on the GPU")
        pid = launch.pid_of("g1", victim)
        check(pid, "g1 rank %d is a live member" % victim)
        os.kill(pid, 9)
        wait_until(lambda: launch.pid_of("g1", victim) not in (None, pid), 60, "g1 rank %d restarted" % victim)
        if must_heal:
            healed = wait_until(lambda: [e for e in launch.read_events()
                                         if e["type"] == "heal_finished" and e["group"] == "g1"], 60, "g1 healed")
            check(healed[0]["peer_group"] == "g0", "g1 healed from g0: %s" % healed[0])
        s, finals = finish(launch, name, steps)
        check(s["failures"] >= 1, "the kill cost the job a failed step: %s" % s)
        heals = [e for e in launch.read_events() if e["type"] == "heal_finished" and e["group"] == "g1"]
    except Fail as e:
        raise Fail("%s\n(logs in %s)\n%s" % (e, launch.dir, launch.tail(25)))
    finally:
        launch.terminate()
    return s, finals, heals


def kill(bindir, ranks=1, steps=1000):
    # Steps enough that the job outlasts the victim's restart: g0 trains on alone meanwhile (a few ms a step
    # of `tiny`), and the restarted group must come back, heal and finish with it.
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    cpu = cpu_run(bindir, data, steps, ranks)
    launch = gpu_launch(bindir, data, steps, "gpu-kill", ranks)
    victim = ranks - 1  # with 2 ranks, not the leader: the group's NCCL communicator loses a member
    # A whole group restarted from nothing must heal from g0. With 2 ranks, g1's rank 0 kept the state: the
    # restarted rank 1 takes it from there (in-group sync), and g1 heals from g0 only if g0 went on alone
    # meanwhile; either way the final loss and checksums must agree.
    s, finals, cross = kill_g1(launch, victim, steps, "cuda-kill", ranks == 1)
    close(s["final_loss"], cpu, "kill")
    print("%d rank(s) per group: killed g1 rank %d at step >= 10; %d cross-group heal(s) of g1; final loss GPU "
          "%.6f, CPU %.6f" % (ranks, victim, len(cross), s["final_loss"], cpu))


def ranks2(bindir):
    kill(bindir, ranks=2, steps=200)


LAYOUTS = {"fsdp2": ["--fsdp", "2"], "tp2": ["--tp", "2"], "fsdp2tp2": ["--fsdp", "2", "--tp", "2"],
           "pp2-gpipe": ["--pp", "2", "--microbatches", "4", "--schedule", "gpipe"],
           "pp2-1f1b": ["--pp", "2", "--microbatches", "4", "--schedule", "1f1b"],
           "pp2-zbh1": ["--pp", "2", "--microbatches", "4", "--schedule", "zb-h1"],
           "pp2tp2": ["--pp", "2", "--tp", "2", "--microbatches", "4", "--schedule", "1f1b"],
           "pp2fsdp2": ["--pp", "2", "--fsdp", "2", "--microbatches", "4", "--schedule", "1f1b"],
           "rc-fsdp2tp2": ["--fsdp", "2", "--tp", "2", "--recompute", "block"],
           "rc-pp2-zbh1": ["--pp", "2", "--microbatches", "4", "--schedule", "zb-h1", "--recompute", "block"]}
SHARDED = ["fsdp2", "tp2", "fsdp2tp2"]
PIPELINED = ["pp2-gpipe", "pp2-1f1b", "pp2-zbh1", "pp2tp2", "pp2fsdp2"]
RECOMPUTED = ["rc-fsdp2tp2", "rc-pp2-zbh1"]  # --recompute block: the same losses as without


def sharded_args(data, steps, device, layout):
    flags = LAYOUTS[layout]
    ranks = 1
    for i in range(0, len(flags), 2):
        if flags[i] in ("--pp", "--fsdp", "--tp"):
            ranks *= int(flags[i + 1])
    return ["--groups", "2", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps", str(steps), "--data",
            data, "--"] + flags + ["--global-batch", "8", "--micro-batch", "2", "--device", device,
                                   "--comm-timeout-ms", "30000"]


def sharded_cpu(bindir, data, steps, layout):
    s, _ = finish(Launch(bindir, sharded_args(data, steps, "cpu", layout), name="gpu-cpu-" + layout),
                  "cpu " + layout, steps)
    return s["final_loss"]


def layouts_on_gpu(bindir, layouts, save=False):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps = 20
    for layout in layouts:
        cpu = sharded_cpu(bindir, data, steps, layout)
        extra = []
        if save:
            saved = os.path.join(tempfile.mkdtemp(prefix="phalanx-gpu-save-"), "model.bin")
            extra = ["--save", saved]
        launch = Launch(wrapped_bindir(bindir), sharded_args(data, steps, "cuda", layout) + extra, env=NCCL_ENV,
                        name="gpu-" + layout)
        s, finals = finish(launch, "cuda " + layout, steps)
        close(s["final_loss"], cpu, layout)
        if save:
            check(os.path.exists(saved) and os.path.getsize(saved) > 0, "%s: --save wrote %s" % (layout, saved))
        print("%s: final loss GPU %.6f, CPU %.6f; checksum %s" % (layout, s["final_loss"], cpu,
                                                               finals["g0"]["checksum"]))


def sharded(bindir):
    layouts_on_gpu(bindir, SHARDED)


def pipeline(bindir):
    layouts_on_gpu(bindir, PIPELINED, save=True)


def recompute(bindir):
    layouts_on_gpu(bindir, RECOMPUTED)


def pipeline_kill(bindir):
    sharded_kill(bindir, "pp2fsdp2")


def sharded_kill(bindir, layout="fsdp2tp2"):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps, victim = 100, 3
    cpu = sharded_cpu(bindir, data, steps, layout)
    launch = Launch(wrapped_bindir(bindir), sharded_args(data, steps, "cuda", layout), env=NCCL_ENV,
                    name="gpu-sharded-kill")
    s, finals, heals = kill_g1(launch, victim, steps, "cuda-sharded-kill", True)  # a rank at step 0: healed whole
    close(s["final_loss"], cpu, "sharded_kill")
    print("%s: killed g1 rank %d at step >= 10; %d heal(s) of g1; final loss GPU %.6f, CPU %.6f; "
          "checksum %s" % (layout, victim, len(heals), s["final_loss"], cpu, finals["g0"]["checksum"]))


def sharded_checkpoint(bindir):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps, half, layout = 40, 20, "fsdp2tp2"
    scratch = tempfile.mkdtemp(prefix="phalanx-gpu-shckpt-")
    gpu_ckpt, cpu_ckpt = os.path.join(scratch, "gpu"), os.path.join(scratch, "cpu")
    ckpt = ["--checkpoint-every", str(half), "--checkpoint-keep", "0"]
    gpu_save, cpu_save = os.path.join(scratch, "gpu.bin"), os.path.join(scratch, "cpu.bin")
    launch = Launch(wrapped_bindir(bindir), sharded_args(data, steps, "cuda", layout) +
                    ["--checkpoint-dir", gpu_ckpt, "--save", gpu_save] + ckpt, env=NCCL_ENV, name="gpu-shckpt")
    s, _ = finish(launch, "cuda-sharded-ckpt", steps)
    saved = sorted(os.listdir(gpu_ckpt))
    check("step_%08d" % half in saved and "step_%08d" % steps in saved,
          "the GPU job saved steps %d and %d: %s" % (half, steps, saved))
    os.makedirs(cpu_ckpt)
    shutil.copytree(os.path.join(gpu_ckpt, "step_%08d" % half), os.path.join(cpu_ckpt, "step_%08d" % half))
    again = Launch(bindir, job_args(data, steps, "cpu") + ["--checkpoint-dir", cpu_ckpt, "--save", cpu_save] + ckpt,
                   name="gpu-shckpt-cpu")
    s2, _ = finish(again, "cpu-restore", steps)
    restored = [int(m.group(1)) for line in again.output() for m in [re.search(r"restored step (\d+) from", line)] if m]
    check(restored and set(restored) == {half}, "the CPU job restored step %d: %s" % (half, restored))
    close(s2["final_loss"], s["final_loss"], "sharded_checkpoint")
    check(os.path.exists(gpu_save) and os.path.getsize(gpu_save) == os.path.getsize(cpu_save),
          "--save from the GPU shards: %s bytes, the CPU job's %s" %
          (os.path.exists(gpu_save) and os.path.getsize(gpu_save), os.path.getsize(cpu_save)))
    print("fsdp2 x tp2 GPU job saved steps %d and %d and a %d-byte model; whole replicas on the CPU restored step %d "
          "and ended at loss %.6f, the GPU job at %.6f" % (half, steps, os.path.getsize(gpu_save), half,
                                                         s2["final_loss"], s["final_loss"]))


def checkpoint(bindir):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps, half = 40, 20
    gpu_ckpt = tempfile.mkdtemp(prefix="phalanx-gpu-ckpt-")
    ckpt = ["--checkpoint-every", str(half), "--checkpoint-keep", "0"]
    launch = Launch(wrapped_bindir(bindir), job_args(data, steps, "cuda") + ["--checkpoint-dir", gpu_ckpt] + ckpt,
                    env=NCCL_ENV, name="gpu-ckpt")
    s, _ = finish(launch, "cuda-ckpt", steps)
    saved = sorted(os.listdir(gpu_ckpt))
    check("step_%08d" % half in saved and "step_%08d" % steps in saved,
          "the GPU job saved steps %d and %d: %s" % (half, steps, saved))
    cpu_ckpt = tempfile.mkdtemp(prefix="phalanx-gpu-ckpt-cpu-")
    shutil.copytree(os.path.join(gpu_ckpt, "step_%08d" % half), os.path.join(cpu_ckpt, "step_%08d" % half))
    again = Launch(bindir, job_args(data, steps, "cpu") + ["--checkpoint-dir", cpu_ckpt] + ckpt, name="gpu-ckpt-cpu")
    s2, _ = finish(again, "cpu-restore", steps)
    restored = [int(m.group(1)) for line in again.output() for m in [re.search(r"restored step (\d+) from", line)] if m]
    check(restored and set(restored) == {half}, "the CPU job restored step %d: %s" % (half, restored))
    close(s2["final_loss"], s["final_loss"], "checkpoint")
    print("GPU job saved steps %d and %d; the CPU job restored step %d and ended at loss %.6f, the GPU job at %.6f"
          % (half, steps, half, s2["final_loss"], s["final_loss"]))


# case: (ranks per group, flags, final-loss tolerance against the CPU job's). int8 rounds each pseudo-gradient
# to one of 255 levels of its block's scale: the GPU's last-bit differences from the CPU's flip some roundings,
# each a step of about 1% of the block's largest value (0.2% on the final loss on an H100), hence 2e-2 there.
DILOCO = {"whole": (1, ["--inner-steps", "5"], 1e-3),
          "whole-ranks2": (2, ["--inner-steps", "5"], 1e-3),
          "fsdp2": (2, ["--inner-steps", "5", "--fsdp", "2"], 1e-3),
          "pp2": (2, ["--inner-steps", "5", "--pp", "2", "--microbatches", "2", "--schedule", "1f1b"], 1e-3),
          "streaming-overlap": (1, ["--inner-steps", "10", "--fragments", "2", "--outer-overlap"], 1e-3),
          "streaming-int8": (1, ["--inner-steps", "10", "--fragments", "2", "--outer-dtype", "int8"], 2e-2),
          "sync-warmup": (1, ["--inner-steps", "5", "--sync-warmup", "10"], 1e-3)}


def diloco_args(data, steps, device, case):
    ranks, flags, _ = DILOCO[case]
    return ["--groups", "2", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps", str(steps), "--data",
            data, "--", "--mode", "diloco", "--global-batch", "8", "--micro-batch", "2", "--device", device,
            "--comm-timeout-ms", "30000"] + flags


def outer_steps(launch):
    """Step numbers of g0 rank 0's applied outer steps (its log's outer_step lines)."""
    with open(os.path.join(launch.dir, "worker-g0-0.log")) as f:
        return [int(m.group(1)) for line in f for m in [re.search(r" outer_step step=(\d+)", line)] if m]


def diloco(bindir):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    steps = 20
    for case in DILOCO:
        cpu_launch = Launch(bindir, diloco_args(data, steps, "cpu", case), name="gpu-cpu-dl-" + case)
        cs, _ = finish(cpu_launch, "cpu diloco " + case, steps)
        # Both groups in the first quorum, as on the CPU: a GPU rank registers after NCCL's warm-up, which can
        # take the coordinator's join timeout longer for one group than the other; a group that joins the first
        # round late gives nothing at its outer step, a legitimate run with other figures.
        launch = Launch(wrapped_bindir(bindir), diloco_args(data, steps, "cuda", case),
                        env=dict(NCCL_ENV, PHALANX_MIN_REPLICAS="2"), name="gpu-dl-" + case)
        s, finals = finish(launch, "cuda diloco " + case, steps)
        gpu_outer, cpu_outer = outer_steps(launch), outer_steps(cpu_launch)
        check(gpu_outer and gpu_outer == cpu_outer, "%s: the GPU job's outer steps %s are the CPU job's %s" %
              (case, gpu_outer, cpu_outer))
        tol = DILOCO[case][2]
        check(abs(s["final_loss"] - cs["final_loss"]) <= tol * abs(cs["final_loss"]),
              "diloco %s: GPU final loss %.6f vs CPU %.6f (%g relative)" % (case, s["final_loss"], cs["final_loss"], tol))
        print("diloco %s: outer steps at %s; final loss GPU %.6f, CPU %.6f; checksum %s" %
              (case, gpu_outer, s["final_loss"], cs["final_loss"], finals["g0"]["checksum"]))


def diloco_auto(bindir):
    require_gpu(bindir)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-gpu-data-"))
    H, steps = 10, 8000  # long enough in time for the failure to leave the window, and sync steps after
    launch = Launch(wrapped_bindir(bindir),
                    ["--groups", "2", "--model", "tiny", "--steps", str(steps), "--data", data, "--mode", "auto",
                     "--auto-failures-per-hour", "100", "--auto-window", "4", "--auto-hold", "1",
                     "--auto-comm-share", "0", "--", "--global-batch", "8", "--micro-batch", "4", "--device", "cuda",
                     "--inner-steps", str(H)], env=NCCL_ENV, name="gpu-dl-auto")

    def switches(to):
        return [e for e in launch.read_events() if e["type"] == "mode_switched" and e["to"] == to]
    try:
        wait_until(lambda: launch.last_step() >= 30, 180, "30 steps on the GPU")
        check(not switches("diloco"), "no switch before a failure")
        pid = launch.pid_of("g1", 0)
        check(pid, "g1 is a live member")
        os.kill(pid, 9)
        wait_until(lambda: switches("diloco"), 120, "a switch to diloco after the kill")
        wait_until(lambda: switches("sync"), 180, "the switch back to sync once the failure left the window")
        s, finals = finish(launch, "cuda diloco auto", steps)
        outers = outer_steps(launch)
        check(outers, "outer steps on the GPU while in diloco")
        check(steps - outers[-1] >= 3 * H, "sync steps after the last outer step (at %d)" % outers[-1])
        heals = [e for e in launch.read_events() if e["type"] == "heal_finished" and e["group"] == "g1"]
        check(heals, "the restarted g1 healed")
    except Fail as e:
        raise Fail("%s\n(logs in %s)\n%s" % (e, launch.dir, launch.tail(25)))
    finally:
        launch.terminate()
    print("auto on the GPU: g1 killed; diloco (%s), %d outer steps (the last at %d), sync again (%s); %d heal(s) of "
          "g1; final loss %.6f; both groups' checksum %s" % (switches("diloco")[0]["reason"], len(outers), outers[-1],
                                                             switches("sync")[0]["reason"], len(heals),
                                                             s["final_loss"], finals["g0"]["checksum"]))


if __name__ == "__main__":
    main_scenarios({"parity": parity, "kill": kill, "ranks2": ranks2, "checkpoint": checkpoint, "sharded": sharded,
                    "sharded_kill": sharded_kill, "sharded_checkpoint": sharded_checkpoint, "pipeline": pipeline,
                    "pipeline_kill": pipeline_kill, "recompute": recompute, "diloco": diloco,
                    "diloco_auto": diloco_auto})
