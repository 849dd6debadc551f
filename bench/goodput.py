#!/usr/bin/env python3
"""Goodput against scale for every failure-handling policy (phalanx-sim).

  python3 bench/goodput.py [BINDIR] [--figures bench/sim_figures.json] [--seeds 3]
                           [--png docs/goodput.png] [--csv FILE] [-- SIM FLAGS...]

Runs build/bin/phalanx-sim for restart-all, drop-group-timeout, phalanx-sync
and phalanx-diloco at 1k, 4k, 16k, 32k, 64k and 100k accelerators (the
simulator's defaults otherwise, and any flags after --), averages goodput over
--seeds seeds, prints a table (markdown) and draws goodput against scale as a
PNG with the inputs printed under the plot."""
import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

POLICIES = ["restart-all", "drop-group-timeout", "phalanx-sync", "phalanx-diloco"]
SCALES = [1024, 4096, 16384, 32768, 65536, 100000]
LABELS = ["1k", "4k", "16k", "32k", "64k", "100k"]


def simulate(sim, figures, policy, n, seed, extra, tmp):
    out = os.path.join(tmp, "row.csv")
    subprocess.run([sim, "--accelerators", str(n), "--policy", policy, "--figures", figures, "--seed", str(seed),
                    "--csv", out] + extra, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return next(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("bindir", nargs="?", default="build/bin")
    ap.add_argument("--figures", default="bench/sim_figures.json")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--png", default="docs/goodput.png")
    ap.add_argument("--csv", default="", help="every run's row")
    ap.add_argument("extra", nargs="*", help="flags passed to phalanx-sim (after --)")
    a = ap.parse_args()
    sim = os.path.join(a.bindir, "phalanx-sim")
    rows, mean = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in POLICIES:
            for n in SCALES:
                rs = [simulate(sim, a.figures, p, n, s, a.extra, tmp) for s in range(1, a.seeds + 1)]
                rows += rs
                mean[p, n] = {k: sum(float(r[k]) for r in rs) / len(rs)
                              for k in rs[0] if k not in ("policy",)}
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    help_defaults = subprocess.run([sim, "--help"], capture_output=True, text=True, check=True).stdout
    with open(a.figures) as f:
        figs = {k: v for k, v in json.load(f).items() if k != "source"}
    r16 = mean["restart-all", 16384]
    inputs = ("figures (%s): %s\n" % (a.figures, ", ".join("%s %.4g" % kv for kv in figs.items())) +
              "job: %s; failures: Llama 3 rate unless given (one every %.1f h at 16k); restart-all checkpoints "
              "every %.0f s at 16k (Young/Daly, cost %.0f s); heal %.1f s; %d seeds x %.0f days; extra flags: %s"
              % (grep_defaults(help_defaults), r16["accel_mtbf_s"] / 16384 / 3600, r16["checkpoint_interval_s"],
                 r16["checkpoint_cost_s"], mean["phalanx-sync", 16384]["heal_s"], a.seeds, r16["wall_s"] / 86400,
                 " ".join(a.extra) or "none"))
    print("| policy | " + " | ".join(LABELS) + " |")
    print("|---|" + "---|" * len(SCALES))
    for p in POLICIES:
        print("| %s | " % p + " | ".join("%.2f%%" % (100 * mean[p, n]["goodput"]) for n in SCALES) + " |")
    print()
    print("time lost at 100k (share of wall), by cause:")
    causes = [k for k in mean["phalanx-sync", 100000] if k.startswith("lost_")]
    for p in POLICIES:
        m = mean[p, 100000]
        print("  %-20s goodput %.4f ETTR %.4f failures %.0f: %s" % (
            p, m["goodput"], m["ettr"], m["failures"],
            " ".join("%s %.3f%%" % (c[5:-2], 100 * m[c] / m["wall_s"]) for c in causes)))
    print(inputs)
    draw(a.png, mean, inputs)


def grep_defaults(help_text):
    """The job's defaults as --help states them (step, state, repair, restart):
    the bracket that ends each flag's text, which may run over several lines."""
    want = ("--step-s", "--state-bytes", "--repair-s", "--restart-s", "--gpus-per-group", "--inner-steps")
    out, lines = [], help_text.splitlines()
    for i, line in enumerate(lines):
        parts = line.split()
        if not parts or parts[0] not in want:
            continue
        text = line
        for more in lines[i + 1:]:
            if more.lstrip().startswith("-") or not more.startswith(" "):
                break
            text += " " + more.strip()
        if "[" in text:
            out.append("%s %s" % (parts[0][2:], text[text.rindex("[") + 1:].split("]")[0].split(":")[0]))
    return ", ".join(out)


def pyplot(prog):
    """matplotlib's pyplot drawing to files, or exit naming the package."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("%s: matplotlib is not installed (apt-get install python3-matplotlib): no PNG drawn" % prog)
    return plt


def draw(path, mean, inputs):
    plt = pyplot("goodput")
    fig, (ax, lost) = plt.subplots(1, 2, figsize=(12, 6.2))
    for p in POLICIES:
        ax.plot(SCALES, [100 * mean[p, n]["goodput"] for n in SCALES], marker="o", label=p)
        lost.plot(SCALES, [100 * (1 - mean[p, n]["goodput"]) for n in SCALES], marker="o", label=p)
    ax.axhline(97, color="grey", linestyle=":", linewidth=1)
    ax.text(SCALES[1], 95.8, "97% target (phalanx-sync at 100k)", color="grey", fontsize=8)
    ax.set_ylabel("goodput, % of wall time")
    ax.set_title("goodput against scale")
    lost.axhline(3, color="grey", linestyle=":", linewidth=1)
    lost.set_yscale("log")
    lost.set_ylabel("wall time lost, % (log scale)")
    lost.set_title("what each policy loses (1 - goodput)")
    for a in (ax, lost):
        a.set_xscale("log")
        a.set_xticks(SCALES)
        a.set_xticklabels(LABELS)
        a.minorticks_off()
        a.set_xlabel("accelerators")
        a.grid(True, alpha=0.3)
    ax.legend(loc="lower left")
    fig.suptitle("phalanx-sim: projected goodput of one job by failure-handling policy")
    fig.text(0.01, 0.01, inputs, fontsize=7, va="bottom", wrap=True, family="monospace")
    fig.subplots_adjust(bottom=0.22, wspace=0.25)
    fig.savefig(path, dpi=110)
    print("drew %s" % path)


if __name__ == "__main__":
    main()
