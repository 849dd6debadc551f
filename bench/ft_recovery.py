#!/usr/bin/env python3
"""Recovery: time from SIGKILL of a worker to the survivors' next committed
step, over repeated kills.

  python3 bench/ft_recovery.py [BINDIR] [--kills 15] [--groups 3] [--model tiny]
                               [--global-batch 12] [--micro-batch 4] [--kill-seed 1]
                               [--settle-steps 5] [--coretype NAME]

A phalanx-coordinator (default flags: heartbeats every 100 ms, 1 s timeout)
and one phalanx-worker per group train without end. For each kill:
  1. wait until every group has committed --settle-steps steps together in
     one quorum (all groups taking part);
  2. wait a random fraction of a step (seeded), so kills land anywhere in
     the step: in the compute, in the allreduce, in between;
  3. note the newest quorum id seen on any progress line (q0), SIGKILL a
     random worker (seeded), stamp the time just before the signal;
  4. recovery = the first progress line from a survivor whose quorum id is
     newer than q0, stamped as it arrives on that worker's stdout (read here
     directly, line by line). A step that completes in the old quorum after
     the kill (its allreduce had finished) is not a recovery: it is counted
     and shown, not measured;
  5. restart the killed worker and wait until it has healed and all groups
     commit together again (the rejoin time is shown too).
Also shown per kill, all from the same kill time: when the killed process
is gone (waitpid returns: the kernel has torn it down, memory first, then
its sockets, which is when peers can notice); detection, the first
`event kind=step_failed` line of a survivor (its collective failed or was
aborted); the coordinator's group_dropped and quorum_formed events (their
wall-clock timestamps, 1 ms resolution, against the wall clock at the kill);
the first survivor's `quorum_joined` log line (communicators rebuilt over
the coordinator's rendezvous store, state checksums exchanged); what
remains up to the recovery is the retried step itself (the survivors now
take the lost group's share of the same global batch). Printed: p50 and p95 of
the recovery time against the target (< 300 ms on loopback) and beside
torchft's default heartbeat timeout (5 s), the time that alone takes before
torchft's lighthouse considers a silent replica gone."""
import argparse
import datetime
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_lib import Job, blas_env, environment, kv, percentile, prepare_data, run_bench, wait_for, write_figures  # noqa: E402

TORCHFT_HEARTBEAT_TIMEOUT_MS = 5000.0
TARGET_P50_MS = 300.0


def progress(proc, since=0.0):
    """[(t, fields)] of the progress lines a process printed after `since`."""
    return [(t, kv(l)) for t, l in proc.snapshot() if t > since and l.startswith("progress ")]


def events(proc, kind, since):
    return [(t, kv(l)) for t, l in proc.snapshot() if t > since and l.startswith("event kind=%s " % kind)]


def coordinator_events(job):
    out = []
    try:
        with open(os.path.join(job.dir, "events.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass  # a line being written
    except OSError:
        pass
    return out


def coordinator_times(job, victim, wall_kill):
    """ms from the kill (wall clock) to the coordinator's group_dropped for the
    victim and to the next quorum_formed without it (event timestamps, 1 ms)."""
    dropped = formed = float("nan")
    for e in coordinator_events(job):
        if e.get("ts", 0) < wall_kill * 1000 - 1:
            continue
        if e["type"] == "group_dropped" and e.get("group") == victim and dropped != dropped:
            dropped = e["ts"] - wall_kill * 1000
        if e["type"] == "quorum_formed" and victim not in e.get("groups", []) and formed != formed:
            formed = e["ts"] - wall_kill * 1000
    return dropped, formed


def log_wall_s(line):
    """Wall-clock seconds of a px_log line ('ts=2026-01-02T03:04:05.678Z ...')."""
    ts = line.split(" ", 1)[0][3:]
    d = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    return d.timestamp()


def survivors_joined(procs, q0, wall_kill):
    """ms from the kill to the first survivor's `quorum_joined` with a quorum
    newer than q0 (its log line: communicators rebuilt and state checked)."""
    best = float("nan")
    for p in procs:
        try:
            with open(p.log_path) as f:
                for line in f:
                    if " quorum_joined " in line and int(kv(line)["quorum_id"]) > q0:
                        ms = 1000 * (log_wall_s(line) - wall_kill)
                        if ms >= -1 and not best <= ms:
                            best = ms
        except (OSError, ValueError, KeyError):
            pass
    return best


def newest_quorum(job):
    q = 0
    for p in job.workers.values():
        for _, f in progress(p):
            q = max(q, int(f["quorum"]))
    return q


def steady(job, groups, settle):
    """(quorum id, median commit interval in s) once every group's last
    `settle` progress lines are in one quorum with all groups taking part;
    else None."""
    quorums, intervals = set(), []
    for p in job.workers.values():
        lines = progress(p)[-settle:]
        if len(lines) < settle or not p.alive():
            return None
        for _, f in lines:
            if int(f["groups"]) != groups:
                return None
            quorums.add(f["quorum"])
        intervals += [b[0] - a[0] for a, b in zip(lines, lines[1:])]
    if len(quorums) != 1:
        return None
    return int(quorums.pop()), statistics.median(intervals) if intervals else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--kills", type=int, default=15)
    ap.add_argument("--groups", type=int, default=3)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--global-batch", type=int, default=12)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--kill-seed", type=int, default=1)
    ap.add_argument("--settle-steps", type=int, default=5)
    ap.add_argument("--coordinator-flag", action="append", default=[],
                    help="extra coordinator flag, e.g. --coordinator-flag=--heartbeat-timeout-ms=500 (repeatable)")
    ap.add_argument("--coretype", default="", help="OPENBLAS_CORETYPE for every process")
    ap.add_argument("--data", default="")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory (logs)")
    ap.add_argument("--json", default="", metavar="OUT",
                    help="write detect_s and requorum_s (p50s) for phalanx-sim (bench/sim_figures.py)")
    a = ap.parse_args()
    if a.groups < 2:
        ap.error("--groups must be at least 2 (a kill needs survivors)")
    a.bindir = os.path.abspath(a.bindir)
    a.data = prepare_data(a.bindir, a.data or os.path.join(tempfile.gettempdir(), "phalanx-ftbench-data"))
    env, blas_note = blas_env(a.coretype)
    rng = random.Random(a.kill_seed)
    coord_flags = [x for f in a.coordinator_flag for x in f.split("=", 1)]
    wflags = ["--model", a.model, "--data", a.data, "--steps", "100000000", "--global-batch", str(a.global_batch),
              "--micro-batch", str(a.micro_batch), "--seq", str(a.seq), "--seed", str(a.seed), "--threads", "1",
              "--eval-batches", "0"]
    names = ["g%d" % g for g in range(a.groups)]
    print("ft_recovery: %d groups x 1 rank of %s, global batch %d (micro-batch %d), %d kills (kill seed %d)"
          % (a.groups, a.model, a.global_batch, a.micro_batch, a.kills, a.kill_seed))
    print("  coordinator flags: %s" % (" ".join(coord_flags) or
                                       "defaults (heartbeat every 100 ms, lost after 1000 ms of silence)"))
    print("  " + environment(blas_note), flush=True)
    job = Job(a.bindir, "recovery", coord_args=coord_flags, env=env)
    t_start = time.monotonic()
    rows = []
    try:
        for g in names:
            job.start_worker(g, wflags)
        q_now, step_s = wait_for(lambda: steady(job, a.groups, a.settle_steps), 120, "all groups training together")
        print("steady: quorum %d, %.1f ms per step" % (q_now, 1000 * step_s))
        print("%4s %6s %6s %10s %8s %9s %10s %9s %9s %10s %9s %6s %8s" % (
            "kill", "victim", "step", "kill_at_ms", "gone_ms", "detect_ms", "dropped_ms", "quorum_ms", "joined_ms",
            "recover_ms", "old_steps", "quorum", "rejoin_s"))
        for k in range(1, a.kills + 1):
            q_now, step_s = wait_for(lambda: steady(job, a.groups, a.settle_steps), 120,
                                     "all groups committing together before kill %d" % k)
            delay = rng.uniform(0, step_s)
            victim_name = rng.choice(names)
            # land anywhere in a step: a random time after the latest commit
            last = max(progress(job.workers[n])[-1][0] for n in names)
            wait_s = last + delay - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)
            q0 = newest_quorum(job)
            victim = job.workers[victim_name]
            last_step = max(int(progress(victim)[-1][1]["step"]), 0)
            gone = []
            reaper = threading.Thread(target=lambda: (victim.popen.wait(), gone.append(time.monotonic())), daemon=True)
            reaper.start()
            wall_kill = time.time()
            t_kill = victim.kill()
            survivors = [job.workers[n] for n in names if n != victim_name]

            def recovered():
                for p in survivors:
                    for t, f in progress(p, t_kill):
                        if int(f["quorum"]) > q0:
                            return t, f
                return None

            t_rec, f_rec = wait_for(recovered, 60, "a survivor's commit in a quorum newer than %d after kill %d"
                                    % (q0, k), interval_s=0.002)
            fails = [t for p in survivors for t, _ in events(p, "step_failed", t_kill)]
            old = len({f["step"] for p in survivors for t, f in progress(p, t_kill)
                       if t < t_rec and int(f["quorum"]) <= q0})
            dropped, formed = coordinator_times(job, victim_name, wall_kill)
            joined = survivors_joined(survivors, q0, wall_kill)
            victim.wait(10)
            reaper.join(10)
            victim.stop()
            t_restart = time.monotonic()
            newp = job.start_worker(victim_name, wflags)
            wait_for(lambda: any(int(f["groups"]) == a.groups for _, f in progress(newp)), 120,
                     "the restarted %s to heal and commit with all groups" % victim_name)
            rejoin = time.monotonic() - t_restart
            row = {"victim": victim_name, "step": last_step, "kill_at": 1000 * (t_kill - last),
                   "detect": 1000 * (min(fails) - t_kill) if fails else float("nan"),
                   "recover": 1000 * (t_rec - t_kill), "old": old, "quorum": int(f_rec["quorum"]),
                   "dropped": dropped, "formed": formed, "joined": joined,
                   "gone": 1000 * (gone[0] - t_kill) if gone else float("nan"),
                   "groups_after": int(f_rec["groups"]), "rejoin": rejoin}
            rows.append(row)
            print("%4d %6s %6d %10.1f %8.1f %9.1f %10.0f %9.0f %9.0f %10.1f %9d %6d %8.2f" % (
                k, victim_name, row["step"], row["kill_at"], row["gone"], row["detect"], row["dropped"], row["formed"],
                row["joined"], row["recover"], row["old"], row["quorum"], row["rejoin"]), flush=True)
    finally:
        job.stop()
        if a.keep:
            print("logs: %s" % job.dir)
        else:
            shutil.rmtree(job.dir, ignore_errors=True)
    rec = [r["recover"] for r in rows]
    det = [r["detect"] for r in rows if r["detect"] == r["detect"]]
    print()
    print("recovery, SIGKILL -> survivors' first commit in a new quorum, %d kills:" % len(rec))
    print("  p50 %.1f ms   p95 %.1f ms   mean %.1f ms   min %.1f ms   max %.1f ms"
          % (percentile(rec, 50), percentile(rec, 95), statistics.fmean(rec), min(rec), max(rec)))
    if det:
        print("  detection (SIGKILL -> survivor's step_failed): p50 %.1f ms   p95 %.1f ms"
              % (percentile(det, 50), percentile(det, 95)))
    for key, what in (("gone", "the killed process is gone (waitpid returns; its sockets are closed by then)"),
                      ("dropped", "coordinator drops the group (group_dropped event)"),
                      ("formed", "coordinator forms the new quorum (quorum_formed event)"),
                      ("joined", "first survivor has rebuilt its communicators and checked state (quorum_joined log)")):
        xs = [r[key] for r in rows if r[key] == r[key]]
        if xs:
            print("  %s: p50 %.0f ms   p95 %.0f ms" % (what, percentile(xs, 50), percentile(xs, 95)))
    print("  steps committed in the old quorum after a kill (the kill came after their allreduce; not counted "
          "as recovery): %d" % sum(r["old"] for r in rows))
    print("  every recovery step committed by %s groups" % sorted({r["groups_after"] for r in rows}))
    print("  target p50 < %.0f ms: %s" % (TARGET_P50_MS, "met" if percentile(rec, 50) < TARGET_P50_MS else "NOT met"))
    print("  baseline: torchft's default heartbeat timeout alone is %.0f ms (%.0fx our p50)"
          % (TORCHFT_HEARTBEAT_TIMEOUT_MS, TORCHFT_HEARTBEAT_TIMEOUT_MS / percentile(rec, 50)))
    print("  rejoin after restart (start -> healed and committing with all groups): median %.2f s"
          % statistics.median(r["rejoin"] for r in rows))
    print("  " + environment(blas_note))
    print("elapsed %.0f s" % (time.monotonic() - t_start))
    joined = [r["joined"] for r in rows if r["joined"] == r["joined"]]
    if a.json and det and joined:
        d50, j50 = percentile(det, 50), percentile(joined, 50)
        write_figures(a.json, "ft_recovery", {"detect_s": d50 / 1e3, "requorum_s": max(j50 - d50, 0.0) / 1e3,
                                              "recovery_p50_s": percentile(rec, 50) / 1e3, "kills": len(rec),
                                              "model": a.model}, blas_note)


if __name__ == "__main__":
    run_bench(main, "ft_recovery")
