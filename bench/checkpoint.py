#!/usr/bin/env python3
"""What checkpoints cost, each figure against a baseline measured in the same run.

  python3 bench/checkpoint.py [BINDIR] [--scratch DIR] [--reps 3] [--pairs 2] [--coretype NAME]
                              [--models small,gpt2-124m] [--shape MODEL=BxTxN] [--skip-save]
                              [--device cpu|cuda] [--copy held|overlap]

  1. Save throughput. bench_ckpt_save saves a gpt2-124m training state
     (parameters and both AdamW moments: 1.49 GB) as the saver does: the
     snapshot copied and its data files hashed in one pass on 2 threads
     (px_ckpt_snapshot), then px_ckpt_write_files: the data files written
     with those checksums and fsynced, the manifest, the folder's fsync and
     rename, the parent's fsync. Ours is the time of both. Baseline: `dd
     if=/dev/zero bs=16M conv=fsync` of as many bytes into the same folder.
     Target: ours >= 80% of dd. The CPU seconds of each are printed too: the
     write's (what a saver thread takes from training on cores it fills)
     and dd's (its process only, not the kernel's writeback threads).
  2. Restore. px_ckpt_load of that checkpoint (read, XXH3 of every byte, into
     the state's buffers, already faulted in as a worker's are) against
     `cat FILES > /dev/null` of its data files. The page cache is dropped
     before each side when this process may (root), else both read warm; the
     output says which.
  3. Step-time overhead of saving every 10 steps in the background against
     not saving, on `small` and `gpt2-124m`: a coordinator and one worker
     run the same job with and without --checkpoint-dir, alternated --pairs
     times (without first in odd pairs, with first in even ones). A step's
     time is the interval between consecutive progress lines (time-stamped
     as they arrive), so it includes what the save holds
     training for: on the CPU, the optimizer step of the step that makes
     the saved state takes the snapshot as it goes (the log's
     snapshot=step), a held copy otherwise. The first 11 intervals are left
     out: warm-up, and the first save's, which also fault in the saver's
     snapshot buffer once per process (printed on its own).
     The measured steps then hold one save per 10. Target: < 3%. The
     worker's CPU time per step (its threads' schedstat, the saver's
     included) is printed beside it: on a machine whose cores the training
     threads fill, what the saver spends is taken from them. So is where
     the cost lands: each step's difference by its place after a save (+0:
     the step whose optimizer step takes the snapshot; then the steps
     during which the saver writes). --device cuda
     runs the worker on a GPU (its state is downloaded for each save);
     --copy passes --checkpoint-copy (default: the worker's own);
     --write-mb-s paces the writes (a slow disk: a save due while the
     previous one writes is deferred, and the saves' count says so).
Both sides of every comparison run with the same OPENBLAS_CORETYPE (--coretype
sets it; printed either way). MB are 1e6 bytes."""
import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import (BenchError, Job, blas_env, environment, kv, mem_available_gb, prepare_data,  # noqa: E402
                    run_bench, write_figures)

SAVE_TARGET, OVERHEAD_TARGET = 0.80, 0.03
EVERY = 10
# model, global batch (= micro batch), seq, measured intervals (a multiple of EVERY)
JOBS = {"small": (8, 128, 200), "gpt2-124m": (2, 64, 30)}


def run(args, env=None, timeout=600):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise BenchError("%s failed:\n%s" % (" ".join(args), r.stdout[-2000:]))
    return r.stdout


def drop_caches():
    """Syncs and drops the page cache; False when not allowed."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def timed(args):
    t0 = time.monotonic()
    run(args)
    return time.monotonic() - t0


def timed_cpu(args):
    """Wall seconds, and the CPU seconds (user and system) the command used."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = timed(args)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def cpu_model():
    out = subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout
    name = [l.split(":", 1)[1].strip() for l in out.splitlines() if l.startswith("Model name:")]
    return "%s, %d cores" % (name[0] if name else "unknown CPU", os.cpu_count())


def save_and_restore(a, model):
    """Parts 1 and 2: rates in MB/s of ours and the baselines, per rep."""
    ck, dd = os.path.join(a.scratch, "ck"), os.path.join(a.scratch, "dd.bin")
    drv = os.path.join(a.bindir, "bench_ckpt_save")
    saves, dds = [], []
    print("== 1. save: snapshot and px_ckpt_write_files vs dd bs=16M conv=fsync, %s state, %d reps" % (model, a.reps), flush=True)
    for i in range(a.reps):
        shutil.rmtree(ck, ignore_errors=True)
        os.sync()
        out = kv(run([drv, model, ck, "save"]).replace("\n", " "))
        nbytes, held, s = int(out["bytes"]), float(out["held_s"]), float(out["held_s"]) + float(out["save_s"])
        os.sync()
        d, dcpu = timed_cpu(["dd", "if=/dev/zero", "of=" + dd, "bs=16M", "count=%d" % nbytes, "iflag=count_bytes",
                             "conv=fsync", "status=none"])
        os.unlink(dd)
        saves.append(nbytes / s / 1e6)
        dds.append(nbytes / d / 1e6)
        print("  rep %d: %.2f GB in %s files: ours %.2f s (%.0f MB/s; snapshot and hashes %.3f s on 2 threads, then "
              "the write, CPU %.2f s), dd %.2f s (%.0f MB/s, CPU %.2f s), ours/dd %.2f"
              % (i + 1, nbytes / 1e9, out["files"], s, saves[-1], held, float(out["save_cpu_s"]), d, dds[-1], dcpu,
                 saves[-1] / dds[-1]), flush=True)
    folder = os.path.join(ck, "step_00000001")
    data = [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".bin")]
    loads, cats, cold = [], [], True
    print("== 2. restore: px_ckpt_load vs cat > /dev/null of its data files, %d reps" % a.reps, flush=True)
    for i in range(a.reps):
        cold = drop_caches() and cold
        out = kv(run([drv, model, ck, "load"]).replace("\n", " "))
        cold = drop_caches() and cold
        c = timed(["sh", "-c", 'cat "$@" > /dev/null', "sh"] + data)
        loads.append(nbytes / float(out["load_s"]) / 1e6)
        cats.append(nbytes / c / 1e6)
        print("  rep %d: ours %.2f s (%.0f MB/s), cat %.2f s (%.0f MB/s), ours/cat %.2f"
              % (i + 1, float(out["load_s"]), loads[-1], c, cats[-1], loads[-1] / cats[-1]), flush=True)
    shutil.rmtree(ck, ignore_errors=True)
    return saves, dds, loads, cats, "cold (page cache dropped before each read)" if cold else \
        "warm (the page cache could not be dropped: not root)"


def step_intervals(a, env, model, with_ckpt):
    """Seconds between consecutive progress lines, and the worker's CPU
    seconds in between, by step (step k: from k-1's line to k's)."""
    gb, seq, measured = JOBS[model]
    steps = EVERY + 1 + measured
    flags = ["--model", model, "--data", a.data, "--steps", str(steps), "--global-batch", str(gb),
             "--micro-batch", str(gb), "--seq", str(seq), "--threads", str(a.threads), "--eval-batches", "0",
             "--device", a.device]
    ckpt = os.path.join(a.scratch, "ckpt-" + model)
    if with_ckpt:
        flags += ["--checkpoint-dir", ckpt, "--checkpoint-every", str(EVERY), "--checkpoint-keep", "2"]
        if a.copy:
            flags += ["--checkpoint-copy", a.copy]
        if a.write_mb_s:
            flags += ["--checkpoint-write-mb-s", str(a.write_mb_s)]
    job = Job(a.bindir, "ckpt-bench", coord_args=["--min-replicas", "1"], env=env)
    try:
        w = job.start_worker("g0", flags)
        if w.wait(3600) != 0:
            raise BenchError("the %s job failed; see %s" % (model, w.log_path))
        at = {int(kv(l)["step"]): t for t, l in w.snapshot() if l.startswith("progress ")}
        cpu = {k: own for k, (own, _) in w.cpu_by_step().items()}
        holds = hold_rates(w.log_path) if with_ckpt else []
        if with_ckpt:
            writes = save_times(w.log_path)
            if writes:
                print("    saves: held training a median %.0f ms, wrote in a median %.2f s (%.0f MB/s), %d saves "
                      "(%d deferred); snapshots %s" % (
                          statistics.median(w[0] for w in writes), statistics.median(w[1] for w in writes),
                          statistics.median(w[2] for w in writes), len(writes), deferrals(w.log_path),
                          snapshot_kinds(w.log_path)), flush=True)
    finally:
        job.stop()
        shutil.rmtree(job.dir, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)
    if sorted(at) != list(range(1, steps + 1)):
        raise BenchError("the %s job printed progress for steps %s" % (model, sorted(at)))
    ks = range(2, steps + 1)
    return {k: at[k] - at[k - 1] for k in ks}, {k: (cpu[k] - cpu[k - 1]) / 1e9 for k in ks}, holds


def save_times(log_path):
    """(held ms, seconds writing, MB/s, bytes, snapshot) of each save, from
    the worker's checkpoint_started and checkpoint_saved lines. snapshot
    says how it was taken: "step" by the optimizer step that made the state
    (nothing held at the save: its cost is in that step's time), "held" by
    a copy that holds training, "overlap" by the saver while training goes
    on."""
    held, done = {}, {}
    with open(log_path) as f:
        for line in f:
            if "checkpoint_started " in line or "checkpoint_saved " in line:
                d = kv(line[line.index("checkpoint_"):])
                if "held_ms" in d:
                    held[d["step"]] = (float(d["held_ms"]), d.get("snapshot", "held"))
                elif "seconds" in d:
                    done[d["step"]] = (float(d["seconds"]), float(d.get("mb_s", 0)), int(d["bytes"]))
    return [(held[s][0],) + done[s] + (held[s][1],) for s in held if s in done]


def deferrals(log_path):
    """Saves deferred because the previous one still wrote (checkpoint_deferred lines)."""
    with open(log_path) as f:
        return sum(1 for line in f if "checkpoint_deferred step=" in line)


def snapshot_kinds(log_path):
    """How many saves took their snapshot each way (save_times)."""
    kinds = {}
    for w in save_times(log_path):
        kinds[w[4]] = kinds.get(w[4], 0) + 1
    return ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items())) or "none"


def hold_rates(log_path):
    """Bytes per second of the copy a save holds training for: each held
    save's checkpoint_saved bytes over its checkpoint_started held_ms (the
    worker's log)."""
    return [b / (h / 1e3) for h, _, _, b, kind in save_times(log_path) if h > 0 and kind == "held"]


def overhead(a, env, model):
    """Part 3 for one model: per pair, mean measured step without and with saving."""
    gb, seq, measured = JOBS[model]
    first = EVERY + 1  # the step after the first save (the one before it takes its snapshot, on the CPU)
    print("== 3. %s (global batch %d, seq %d, %d threads, device %s, copy %s): %d steps, saves after steps %s; "
          "%d pairs" % (model, gb, seq, a.threads, a.device, a.copy or "default", first + measured, ", ".join(str(s) for s in
                                                                   range(EVERY, first + measured, EVERY)), a.pairs),
          flush=True)
    none, withs, firsts, cpu_none, cpu_with, holds = [], [], [], [], [], []
    by_pos = {}  # k mod EVERY -> [(wall, cpu) difference of saving against not, per measured step]
    keep = range(first + 1, first + measured + 1)
    for p in range(a.pairs):
        # the order alternates, so that a machine slowing down or speeding
        # up over the run weighs on both sides alike
        if p % 2 == 0:
            base, base_cpu, _ = step_intervals(a, env, model, False)
            ck, ck_cpu, h = step_intervals(a, env, model, True)
        else:
            ck, ck_cpu, h = step_intervals(a, env, model, True)
            base, base_cpu, _ = step_intervals(a, env, model, False)
        holds += h
        none.append(statistics.fmean(base[k] for k in keep))
        withs.append(statistics.fmean(ck[k] for k in keep))
        cpu_none.append(statistics.fmean(base_cpu[k] for k in keep))
        cpu_with.append(statistics.fmean(ck_cpu[k] for k in keep))
        firsts.append(ck[EVERY] + ck[first] - base[EVERY] - base[first])
        for k in keep:
            by_pos.setdefault(k % EVERY, []).append((ck[k] - base[k], ck_cpu[k] - base_cpu[k]))
        print("  pair %d: mean step none %.1f ms, saving %.1f ms: %+.1f%%; worker CPU per step %.0f ms, %.0f ms; "
              "the first save's two steps (%d and %d) %+.0f ms"
              % (p + 1, none[-1] * 1e3, withs[-1] * 1e3, 100 * (withs[-1] / none[-1] - 1), cpu_none[-1] * 1e3,
                 cpu_with[-1] * 1e3, EVERY, first, firsts[-1] * 1e3), flush=True)
    # Where the cost lands: the step whose optimizer step takes the
    # snapshot (k mod EVERY = 0: its commit saves), and the steps during
    # which the saver writes.
    pos = {k: (statistics.fmean(d[0] for d in v), statistics.fmean(d[1] for d in v)) for k, v in by_pos.items()}
    print("  saving minus not, by step after a save (wall ms, worker CPU ms): " +
          ", ".join("+%d: %+.0f, %+.0f" % (k, pos[k][0] * 1e3, pos[k][1] * 1e3) for k in sorted(pos)), flush=True)
    if holds:
        print("  a save held training for its snapshot copy at a median %.0f MB/s (%d saves)"
              % (statistics.median(holds) / 1e6, len(holds)), flush=True)
    return none, withs, firsts, cpu_none, cpu_with, holds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--scratch", default="", help="folder for the checkpoints and dd's file [a new one in /tmp]")
    ap.add_argument("--reps", type=int, default=3, help="repetitions of parts 1 and 2 [3]")
    ap.add_argument("--pairs", type=int, default=2, help="(none, saving) job pairs per model in part 3 [2]")
    ap.add_argument("--threads", type=int, default=2, help="worker threads in part 3 [2]")
    ap.add_argument("--models", default="small,gpt2-124m", help="models of part 3 [small,gpt2-124m]")
    ap.add_argument("--shape", action="append", default=[], metavar="MODEL=BxTxN",
                    help="part 3: MODEL's global batch B, sequence length T and measured intervals N (a multiple "
                         "of %d), instead of %s (repeatable)" % (EVERY, ", ".join(
                             "%s=%dx%dx%d" % (m, *v) for m, v in JOBS.items())))
    ap.add_argument("--skip-save", action="store_true", help="leave out parts 1 and 2")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="the worker's --device in part 3 [cpu]")
    ap.add_argument("--copy", default="", choices=["", "held", "overlap"],
                    help="the worker's --checkpoint-copy in part 3 [its default]")
    ap.add_argument("--write-mb-s", type=float, default=0, metavar="X",
                    help="part 3: the worker's --checkpoint-write-mb-s (a disk of X MB/s; saves falling due while "
                         "one writes are deferred, never waited for) [unpaced]")
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process of part 3")
    ap.add_argument("--data", default="", help="token shards [the demo corpus, prepared once]")
    ap.add_argument("--json", default="", metavar="OUT",
                    help="write checkpoint_write_bytes_per_s (median save rate of part 1) and "
                         "checkpoint_hold_bytes_per_s (median snapshot copy of part 3's saves) for phalanx-sim")
    a = ap.parse_args()
    for sh in a.shape:
        try:
            m, dims = sh.split("=", 1)
            b, t, n = (int(x) for x in dims.split("x"))
        except ValueError:
            ap.error("--shape %r: expected MODEL=BxTxN, e.g. gpt2-124m=1x1024x20" % sh)
        if m not in JOBS or b < 1 or t < 1 or n < EVERY or n % EVERY:
            ap.error("--shape %r: MODEL one of %s, B and T >= 1, N a multiple of %d" % (sh, ", ".join(JOBS), EVERY))
        JOBS[m] = (b, t, n)
    models = a.models.split(",") if a.models else []
    for m in models:
        if m not in JOBS:
            ap.error("--models: %s is not one of %s" % (m, ", ".join(JOBS)))
    if a.reps < 1 or a.pairs < 1 or a.threads < 1:
        ap.error("--reps, --pairs and --threads must be at least 1")
    a.bindir = os.path.abspath(a.bindir)
    own = not a.scratch
    a.scratch = a.scratch or tempfile.mkdtemp(prefix="phalanx-bench-ckpt-")
    os.makedirs(a.scratch, exist_ok=True)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)
    free_gb = shutil.disk_usage(a.scratch).free / 1e9
    print("bench/checkpoint: %s; memory available %.1f GB; %.0f GB free in %s"
          % (cpu_model(), mem_available_gb(), free_gb, a.scratch))
    print("  " + environment(blas_note), flush=True)
    t_start = time.monotonic()
    model = "gpt2-124m"
    if mem_available_gb() < 4 or free_gb < 4:
        model = "small"
        print("note: a gpt2-124m state needs ~2 GB of memory and 1.5 GB (twice, with dd's) of disk: "
              "parts 1 and 2 use `small` (40 MB) instead")
    try:
        res = None if a.skip_save else save_and_restore(a, model)
        over = {m: overhead(a, env, m) for m in models}
    finally:
        if own:
            shutil.rmtree(a.scratch, ignore_errors=True)
    print()
    if res:
        saves, dds, loads, cats, cache = res
        r = max(saves) / max(dds)
        print("save (%s): best ours %.0f MB/s, best dd %.0f MB/s (medians %.0f, %.0f): ours/dd %.2f, "
              "target >= %.2f: %s" % (model, max(saves), max(dds), statistics.median(saves), statistics.median(dds),
                                      r, SAVE_TARGET, "met" if r >= SAVE_TARGET else "NOT met"))
        print("restore (%s), %s: best ours %.0f MB/s, best cat %.0f MB/s (medians %.0f, %.0f): ours/cat %.2f"
              % (model, cache, max(loads), max(cats), statistics.median(loads), statistics.median(cats),
                 max(loads) / max(cats)))
    for m, (none, withs, firsts, cpu_none, cpu_with, _) in over.items():
        o = statistics.fmean(withs) / statistics.fmean(none) - 1
        print("step-time overhead of saving every %d steps, %s: %+.1f%% (pairs: %s), target < %.0f%%: %s; "
              "worker CPU per step %+.1f%%; the first save's two steps: %+.0f ms (median of %d)"
              % (EVERY, m, 100 * o, ", ".join("%+.1f%%" % (100 * (w / n - 1)) for n, w in zip(none, withs)),
                 100 * OVERHEAD_TARGET, "met" if o < OVERHEAD_TARGET else "NOT met",
                 100 * (statistics.fmean(cpu_with) / statistics.fmean(cpu_none) - 1),
                 1e3 * statistics.median(firsts), len(firsts)))
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))
    holds = [h for o in over.values() for h in o[5]]
    if a.json and res:
        figures = {"checkpoint_write_bytes_per_s": statistics.median(res[0]) * 1e6, "reps": a.reps, "model": model}
        if holds:  # the snapshot copy of part 3's saves
            figures["checkpoint_hold_bytes_per_s"] = statistics.median(holds)
        write_figures(a.json, "checkpoint", figures, blas_note)


if __name__ == "__main__":
    run_bench(main, "bench/checkpoint")
