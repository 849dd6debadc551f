#!/usr/bin/env python3
"""Goodput with and without spare groups at scale (phalanx-sim --spares).

  python3 bench/goodput_spares.py [BINDIR] [--figures bench/sim_figures.json] [--seeds 1]
                                  [--png docs/goodput-spares.png]

Runs build/bin/phalanx-sim --policy phalanx-sync for 16,384 and 100,000
accelerators in groups of 8 and of about 1,000 (tensor and pipeline
parallel inside a group), with a 600 s and a 3,600 s repair, each with 0, 1
and 2 spares (the simulator's defaults otherwise: 30 days, the figures
file's measured detection, promotion and heal), averages goodput over
--seeds seeds, prints the table (markdown) and draws goodput and the wall
time lost against the number of spares as a PNG."""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from goodput import pyplot, simulate  # noqa: E402

# accelerators, accelerators per group, repair seconds
CONFIGS = [(16384, 8, 600), (16384, 1024, 600), (16384, 1024, 3600),
           (100000, 8, 600), (100000, 1000, 600), (100000, 1000, 3600)]
SPARES = [0, 1, 2]


def label(n, g, repair):
    return "%s, %s a group (%s groups), repair %s s" % (format(n, ","), format(g, ","), format(n // g, ","),
                                                         format(repair, ","))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--figures", default="bench/sim_figures.json")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--png", default="docs/goodput-spares.png")
    a = ap.parse_args()
    if a.seeds < 1:
        ap.error("--seeds must be at least 1")
    sim = os.path.join(a.bindir, "phalanx-sim")
    mean = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (n, g, repair) in enumerate(CONFIGS):
            for s in SPARES:
                extra = ["--gpus-per-group", str(g), "--repair-s", str(repair), "--spares", str(s)]
                rs = [simulate(sim, a.figures, "phalanx-sync", n, seed, extra, tmp) for seed in range(1, a.seeds + 1)]
                mean[n, g, repair, s] = sum(float(r["goodput"]) for r in rs) / len(rs)
            print("  %d/%d: %s" % (i + 1, len(CONFIGS), label(n, g, repair)), file=sys.stderr, flush=True)
    print("| accelerators, group size (groups) | repair | " + " | ".join("S = %d" % s for s in SPARES) + " |")
    print("|---|---|" + "---|" * len(SPARES))
    for n, g, repair in CONFIGS:
        print("| %s, %s (%s) | %s s | " % (format(n, ","), format(g, ","), format(n // g, ","), format(repair, ",")) +
              " | ".join("%.2f%%" % (100 * mean[n, g, repair, s]) for s in SPARES) + " |")
    draw(a.png, mean, "phalanx-sim --policy phalanx-sync --figures %s, %d seed%s x 30 days" %
         (a.figures, a.seeds, "" if a.seeds == 1 else "s"))


def draw(path, mean, inputs):
    plt = pyplot("goodput_spares")
    fig, (ax, lost) = plt.subplots(1, 2, figsize=(12, 5.6))
    for n, g, repair in CONFIGS:
        ys = [100 * mean[n, g, repair, s] for s in SPARES]
        ax.plot(SPARES, ys, marker="o", label=label(n, g, repair))
        lost.plot(SPARES, [100 - y for y in ys], marker="o", label=label(n, g, repair))
    ax.set_ylabel("goodput, % of wall time")
    ax.set_title("goodput against spare groups")
    lost.set_yscale("log")
    lost.set_ylabel("wall time lost, % (log scale)")
    lost.set_title("what the job loses (1 - goodput)")
    for a in (ax, lost):
        a.set_xticks(SPARES)
        a.set_xlabel("spare groups")
        a.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    fig.suptitle("phalanx-sim: spares turn a lost group's repair into its heal")
    fig.text(0.01, 0.01, inputs, fontsize=7, va="bottom", family="monospace")
    fig.subplots_adjust(bottom=0.16, wspace=0.25)
    fig.savefig(path, dpi=110)
    print("drew %s" % path)


if __name__ == "__main__":
    main()
