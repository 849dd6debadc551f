#!/usr/bin/env python3
"""Writes phalanx-sim's figures file (sim/figures.h) from our benchmarks' outputs.

  python3 bench/sim_figures.py [--recovery R.json] [--heal H.json] [--checkpoint C.json]
                               [--spares S.json] [--out bench/sim_figures.json]

R, H, C and S are the --json OUT files of bench/ft_recovery.py,
bench/ft_heal.py, bench/checkpoint.py and bench/spares.py (promotion_s: a
spare's promotion less its heal, which phalanx-sim adds for its own state
size). A figure whose benchmark output is not given is
taken from a recorded run (DOCUMENTED below, each saying which run), and
its "source" says so. checkpoint_hold_bytes_per_s
(the snapshot copy that holds training) comes from bench/checkpoint.py's part
3 (each save's bytes over its checkpoint_started held_ms) when its output has it.

The checked-in bench/sim_figures.json was written from the runs kept in
bench/results/sim-{recovery,heal,checkpoint,spares}.json (docs/benchmarks.md,
"Projected goodput at scale", has the commands)."""
import argparse
import json
import sys

# figure -> (value, the recorded run it comes from)
DOCUMENTED = {
    "detect_s": (0.0169, "docs/benchmarks-ft.md, Recovery after SIGKILL (tiny, 3 groups, 20 kills): detection "
                         "(SIGKILL -> survivor's step_failed) p50 16.9 ms"),
    "requorum_s": (0.0241, "docs/benchmarks-ft.md, Recovery after SIGKILL (same run): first survivor's "
                           "quorum_joined p50 41 ms after the kill, minus detection p50 16.9 ms"),
    "promotion_s": (0.095, "docs/benchmarks.md, Spare groups (tiny, 2 training groups and a spare, 2-vCPU AMD EPYC "
                           "VM): promotion (loss to the spare's first committed step) p50 0.095 s over 6; the heal "
                           "within it, milliseconds on tiny, not taken off"),
    "heal_bytes_per_s": (1.529e9, "docs/benchmarks-ft.md, Healing: gpt2-124m, 1.49 GB, median of 3 heals "
                                  "1529 MB/s (AMD EPYC, 2 vCPUs, loopback)"),
    "checkpoint_write_bytes_per_s": (7.24e8, "a bench/checkpoint.py run on a 2-vCPU AMD EPYC VM, data files "
                                             "written with O_DIRECT through one aligned 16 MiB buffer: "
                                             "gpt2-124m save 724 / 823 / 709 MB/s, median 724 MB/s"),
    "checkpoint_hold_bytes_per_s": (1.49e9 / 0.2, "a bench/checkpoint.py run on a 2-vCPU AMD EPYC VM: a save held "
                                                  "training for its snapshot copy about 200 ms per 1.49 GB "
                                                  "(checkpoint_started held_ms=)"),
}
FROM = {"recovery": ("detect_s", "requorum_s"), "heal": ("heal_bytes_per_s",),
        "checkpoint": ("checkpoint_write_bytes_per_s",), "spares": ("promotion_s",)}
BENCH = {"recovery": "ft_recovery.py", "heal": "ft_heal.py", "checkpoint": "checkpoint.py", "spares": "spares.py"}
OPTIONAL = {"checkpoint": ("checkpoint_hold_bytes_per_s",)}  # bench/checkpoint.py writes it when part 3 saved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name in FROM:
        ap.add_argument("--" + name, default="", metavar="JSON", help="--json output of bench/%s" % BENCH[name])
    ap.add_argument("--out", default="bench/sim_figures.json")
    a = ap.parse_args()
    out = {k: v for k, (v, _) in DOCUMENTED.items()}
    source = {k: "documented: " + why for k, (_, why) in DOCUMENTED.items()}
    for name, keys in FROM.items():
        path = getattr(a, name)
        if not path:
            continue
        with open(path) as f:
            doc = json.load(f)
        for k in keys + OPTIONAL.get(name, ()):
            if k in OPTIONAL.get(name, ()) and k not in doc.get("figures", {}):
                continue  # an older output without it: the documented figure stays
            if k not in doc.get("figures", {}):
                sys.exit("sim_figures: %s has no figure %s (written by bench/%s --json?)" % (path, k, BENCH[name]))
            out[k] = doc["figures"][k]
            source[k] = "measured: %s %s, %s (%s)" % (doc["bench"], " ".join(doc["argv"][1:]), doc["date"],
                                                     doc["environment"])
    out["source"] = source
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote %s" % a.out)


if __name__ == "__main__":
    main()
