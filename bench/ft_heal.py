#!/usr/bin/env python3
"""Healing throughput against loopback TCP bandwidth, in the same run.

  python3 bench/ft_heal.py [BINDIR] [--model gpt2-124m] [--groups 2] [--heals 4]
                           [--tcp-bytes 4294967296] [--coretype NAME]

  1. ft_tcpbw streams --tcp-bytes through one 127.0.0.1 TCP connection (a
     plain socket writer and reader, 4 MiB writes): the link bandwidth.
  2. A phalanx-coordinator and --groups phalanx-worker processes train the
     model until every group has committed a step together. Then, --heals
     times: SIGKILL the last group's worker, restart it, and wait until it
     has healed (the whole training state: parameters and both AdamW
     moments, 3 x 4 bytes per parameter, in 16 MiB chunks followed by every
     chunk's hash, which together are the state digest) and committed a step
     with every group. The heal's size, duration and rate come from the
     joiner's `heal_finished ... bytes=..MB ms=.. rate=..MB/s` log line
     (timed inside the worker from the first receive to the verified end).
  3. ft_tcpbw again: the machine is shared, so the link is measured on both
     sides of the heals, and the ratio uses their mean.
Printed: every heal, the median heal rate, the TCP bandwidth, and the ratio
against the target (>= 50% of link bandwidth; docs/architecture.md,
"Targets"). MB and GB are 1e6 and 1e9 bytes on both sides of the ratio.

To say where a gap comes from, two more yardsticks run beside ft_tcpbw
(before and after the heals, --p2p-bytes each): ft_p2p streams 4 MiB chunks
through a Gloo communicator (the transport a heal uses), one chunk in
flight, and ft_p2p --checksum adds a hash per chunk, sent and checked chunk
by chunk.

The default model, preset gpt2-124m (124M parameters: 1.49 GB of state to
heal), needs about 2.5 GB of memory per worker; the script checks the
machine's available memory first. Training steps are kept small (--seq 32,
one sample per group) because only the transfer is measured."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import (BenchError, Job, blas_env, environment, kv,  # noqa: E402
                    mem_available_gb, prepare_data, run_bench, wait_for, write_figures)

TARGET = 0.5
HEAL_RE = re.compile(r"heal_finished source=(\S+) quorum_id=(\d+) step=(\d+) bytes=([\d.]+)MB ms=(\d+) rate=(\d+)MB/s")


def tcp_bandwidth(bindir, nbytes, env):
    r = subprocess.run([os.path.join(bindir, "ft_tcpbw"), "--bytes", str(nbytes)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise BenchError("ft_tcpbw failed: %s" % r.stdout)
    return float(kv(r.stdout.strip())["GBps"]) * 1000.0  # MB/s


def p2p_rate(bindir, nbytes, checksum, env):
    args = [os.path.join(bindir, "ft_p2p"), "--bytes", str(nbytes)] + (["--checksum"] if checksum else [])
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise BenchError("ft_p2p failed: %s" % r.stdout)
    return float(kv(r.stdout.strip())["MBps"])


def yardsticks(a, env, when):
    """Loopback TCP, Gloo p2p, Gloo p2p with per-chunk checksums (MB/s)."""
    y = {"tcp": tcp_bandwidth(a.bindir, a.tcp_bytes, env),
         "p2p": p2p_rate(a.bindir, a.p2p_bytes, False, env),
         "p2p_ck": p2p_rate(a.bindir, a.p2p_bytes, True, env)}
    print("%-6s loopback TCP %6.0f MB/s | Gloo p2p 4 MiB chunks %6.0f MB/s | same + per-chunk checksums %6.0f MB/s"
          % (when, y["tcp"], y["p2p"], y["p2p_ck"]), flush=True)
    return y


def heal_line(proc):
    with open(proc.log_path) as f:
        for line in f:
            m = HEAL_RE.search(line)
            if m:
                return m
    return None


def commits(proc, groups):
    return [kv(l) for _, l in proc.snapshot() if l.startswith("progress ") and kv(l)["groups"] == str(groups)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--model", default="gpt2-124m", help="preset or llm.c model file")
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--heals", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--tcp-bytes", type=int, default=4 << 30)
    ap.add_argument("--p2p-bytes", type=int, default=1500000000, help="bytes per ft_p2p run [1.5 GB]")
    ap.add_argument("--mem-per-worker-gb", type=float, default=2.8,
                    help="memory one worker needs, checked before starting [2.8, for gpt2-124m]")
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process")
    ap.add_argument("--data", default="")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs)")
    ap.add_argument("--json", default="", metavar="OUT",
                    help="write heal_bytes_per_s (the median heal rate) for phalanx-sim (bench/sim_figures.py)")
    a = ap.parse_args()
    if a.groups < 2:
        ap.error("--groups must be at least 2 (a heal needs a source)")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)
    need = (a.groups + 1) * a.mem_per_worker_gb
    have = mem_available_gb()
    if have < need:
        raise BenchError("%d workers of %s need about %.1f GB; only %.1f GB available (try --model small)"
                         % (a.groups, a.model, need, have))
    print("ft_heal: %d groups x 1 rank of %s, %d heals; memory available %.1f GB" % (a.groups, a.model, a.heals, have))
    print("  " + environment(blas_note), flush=True)
    t_start = time.monotonic()
    print("yardsticks: TCP streams %.2f GB, Gloo p2p %.2f GB" % (a.tcp_bytes / 1e9, a.p2p_bytes / 1e9))
    ys = [yardsticks(a, env, "before")]

    wflags = ["--model", a.model, "--data", a.data, "--steps", "100000000", "--global-batch", str(a.groups),
              "--micro-batch", "1", "--seq", str(a.seq), "--threads", "1", "--eval-batches", "0"]
    job = Job(a.bindir, "heal", coord_args=["--min-replicas", "1"], env=env)
    names = ["g%d" % g for g in range(a.groups)]
    heals = []
    try:
        for g in names:
            job.start_worker(g, wflags)
        wait_for(lambda: all(commits(job.workers[g], a.groups) for g in names), 600,
                 "a step committed by all %d groups" % a.groups, interval_s=0.1)
        victim = names[-1]
        print("%4s %8s %8s %10s %8s %10s" % ("heal", "source", "step", "MB", "ms", "MB/s"))
        for k in range(1, a.heals + 1):
            job.workers[victim].kill()
            job.workers[victim].wait(30)
            job.workers[victim].stop()
            p = job.start_worker(victim, wflags)
            m = wait_for(lambda: heal_line(p), 600, "heal %d of %s (log %s)" % (k, victim, p.log_path),
                         interval_s=0.1)
            h = {"source": m.group(1), "step": int(m.group(3)), "mb": float(m.group(4)), "ms": int(m.group(5)),
                 "rate": float(m.group(4)) * 1000.0 / max(int(m.group(5)), 1)}
            heals.append(h)
            print("%4d %8s %8d %10.1f %8d %10.0f" % (k, h["source"], h["step"], h["mb"], h["ms"], h["rate"]),
                  flush=True)
            wait_for(lambda: commits(p, a.groups), 600, "the healed %s to commit with every group" % victim,
                     interval_s=0.1)
    finally:
        job.stop()
        if a.keep:
            print("logs: %s" % job.dir)
        else:
            shutil.rmtree(job.dir, ignore_errors=True)
    ys.append(yardsticks(a, env, "after"))
    rates = [h["rate"] for h in heals]
    link = statistics.fmean(y["tcp"] for y in ys)
    p2p = statistics.fmean(y["p2p"] for y in ys)
    p2p_ck = statistics.fmean(y["p2p_ck"] for y in ys)
    med = statistics.median(rates)
    print()
    print("heal rate: median %.0f MB/s (min %.0f, max %.0f) over %d heals of %.1f MB"
          % (med, min(rates), max(rates), len(rates), heals[0]["mb"]))
    print("loopback TCP: %.0f MB/s (mean of %.0f before and %.0f after)" % (link, ys[0]["tcp"], ys[1]["tcp"]))
    print("heal / TCP: %.1f%%   target >= %.0f%%: %s" % (100 * med / link, 100 * TARGET,
                                                         "met" if med / link >= TARGET else "NOT met"))
    print("where it goes (means of before and after, as a share of TCP): Gloo p2p %.0f%%, with per-chunk "
          "checksums %.0f%%, the heal (plus two whole-state checksums) %.0f%%"
          % (100 * p2p / link, 100 * p2p_ck / link, 100 * med / link))
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))
    if a.json:
        write_figures(a.json, "ft_heal", {"heal_bytes_per_s": med * 1e6, "heals": len(rates), "model": a.model,
                                          "loopback_tcp_bytes_per_s": link * 1e6}, blas_note)


if __name__ == "__main__":
    run_bench(main, "ft_heal")
