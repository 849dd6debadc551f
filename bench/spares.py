"""What a spare group buys: the same chaos run with and without one.

A job of --groups training groups (one thread each, so each group is one
core's worth of work and a lost group is felt) trains --steps of --model (`tiny`); at
every --kill-every committed steps the rank 0 of a training group is
SIGKILLed, and phalanx-launch restarts it only after --replace-s seconds (a
slow replacement: a pod rescheduled, an image pulled). Run once with
--spares 0 and once with --spares 1, interleaved --pairs times, in this
script. It prints, per run, committed tokens per wall second over the run,
the seconds the job trained with fewer than --groups groups (from the
quorum_formed events), and the spares' promotion times (spare_promoted:
from the loss to the spare's first committed step); then the ratio of the
tokens/s with a spare to without, per pair.

    python3 bench/spares.py build/bin [--pairs 2] [--groups 2] [--steps 4000]
        [--kill-every 800] [--replace-s 15] [--model tiny] [--json OUT]

Each promotion is also split: the spare's heal (heal_finished) within the
time from the loss to its first committed step.

--json OUT writes the figures for phalanx-sim (bench/sim_figures.py
--spares OUT): promotion_s, the p50 promotion less the p50 of the promoted
spares' heals (the simulator adds a heal scaled to its own state size), with
the p50s it comes from.

OPENBLAS_CORETYPE is left as it is, for both sides alike."""
import argparse
import os
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from ft_lib import blas_env, write_figures  # noqa: E402
from phalanx_test import Launch, make_corpus, wait_until  # noqa: E402

GLOBAL_BATCH, SEQ = 8, 64


def one_run(bindir, data, args, spares):
    launch = Launch(bindir, ["--groups", str(args.groups), "--spares", str(spares), "--model", args.model, "--steps",
                             str(args.steps), "--data", data, "--restart-backoff-ms", str(int(args.replace_s * 1000)),
                             "--", "--global-batch", str(GLOBAL_BATCH), "--micro-batch", "4", "--seq", str(SEQ),
                             "--threads", "1"], name="bench-spares")
    kills = 0
    try:
        next_kill = args.kill_every
        while launch.proc.poll() is None and next_kill < args.steps:
            if launch.last_step() >= next_kill:
                st = launch.status()
                victim = st["quorum"]["groups"][0]
                pid = launch.pid_of(victim)
                if pid:
                    os.kill(pid, signal.SIGKILL)
                    kills += 1
                next_kill += args.kill_every
            time.sleep(0.05)
        rc = launch.wait(1800)
    finally:
        launch.terminate()
    s = launch.summary()
    if rc != 0 or not s or not s["completed"]:
        raise SystemExit("the run did not complete (rc %s):\n%s" % (rc, launch.tail()))
    evs = launch.read_events()
    # time short of a group: between quorums with fewer than --groups groups, until the job finished
    done = min([e["ts"] for e in evs if e["type"] == "run_finished"] or [evs[-1]["ts"]])
    qs = [e for e in evs if e["type"] == "quorum_formed"]
    short = 0.0
    for a, b in zip(qs, qs[1:] + [{"ts": done}]):
        if len(a["groups"]) < args.groups and a["ts"] < done:
            short += (min(b["ts"], done) - a["ts"]) / 1000.0
    promos = [e["seconds"] for e in evs if e["type"] == "spare_promoted"]
    promoted = {e["group"] for e in evs if e["type"] == "spare_promoted"}
    heals = [e["ms"] / 1000.0 for e in evs if e["type"] == "heal_finished" and e.get("group") in promoted]
    tok_s = args.steps * GLOBAL_BATCH * SEQ / s["elapsed_s"]
    return {"tok_s": tok_s, "elapsed": s["elapsed_s"], "kills": kills, "short_s": short, "promos": promos,
            "heals": heals}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bindir")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--groups", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--kill-every", type=int, default=800)
    ap.add_argument("--replace-s", type=float, default=15.0)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--json", default="", metavar="OUT",
                    help="write promotion_s (p50 promotion less the p50 heal within it) for phalanx-sim "
                         "(bench/sim_figures.py --spares)")
    args = ap.parse_args()
    data = make_corpus(args.bindir, tempfile.mkdtemp(prefix="phalanx-bench-spares-data-"))
    print("bench/spares: %d training groups x 1 thread, %s, %d steps, a training group killed every %d steps, "
          "replaced after %.0f s; %d cores, OPENBLAS_CORETYPE=%s" %
          (args.groups, args.model, args.steps, args.kill_every, args.replace_s, os.cpu_count(),
           os.environ.get("OPENBLAS_CORETYPE", "(unset)")))
    ratios, promos, heals = [], [], []
    for pair in range(args.pairs):
        r = {}
        for spares in (0, 1):
            r[spares] = one_run(args.bindir, data, args, spares)
            x = r[spares]
            promos += x["promos"]
            heals += x["heals"]
            print("pair %d spares %d: %.0f tokens/s over %.1f s, %d kills, %.1f s short of a group, promotions %s "
                  "(of which the spares' heals %s)" %
                  (pair + 1, spares, x["tok_s"], x["elapsed"], x["kills"], x["short_s"],
                   ["%.3f s" % p for p in x["promos"]] or "-", ["%.3f s" % h for h in x["heals"]] or "-"))
        ratios.append(r[1]["tok_s"] / r[0]["tok_s"])
        print("pair %d: tokens/s with a spare / without: %.2fx" % (pair + 1, ratios[-1]))
    if promos:
        ps = sorted(promos)
        print("promotion (loss to the spare's first committed step): p50 %.3f s, p95 %.3f s over %d" %
              (statistics.median(ps), ps[min(len(ps) - 1, int(0.95 * len(ps)))], len(ps)))
    print("tokens/s with a spare / without, per pair: %s" % ", ".join("%.2fx" % x for x in ratios))
    if args.json:
        if not promos:
            raise SystemExit("spares: no promotion measured, nothing to write to %s (more steps, or kills?)" % args.json)
        p50 = statistics.median(promos)
        heal = statistics.median(heals) if heals else 0.0
        write_figures(args.json, "spares", {"promotion_s": max(p50 - heal, 0.0), "promotion_p50_s": p50,
                                            "heal_p50_s": heal if heals else None, "promotions": len(promos),
                                            "heals": len(heals), "model": args.model}, blas_env("")[1])


if __name__ == "__main__":
    main()
