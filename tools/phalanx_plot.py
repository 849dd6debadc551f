#!/usr/bin/env python3
"""The picture of a run, after it: train and eval loss over steps, with a
vertical mark at each group drop, planned leave (not the job's end), heal
and mode switch, drawn from a phalanx-launch log folder. `phalanxctl plot` runs it; it can run alone:

    phalanx_plot.py --log-dir phalanx-run --out phalanx-run/loss.png

It reads
  LOG_DIR/worker-GROUP-0.out  rank 0's stdout as the launcher kept it, in
                              either --progress-format: progress lines (train
                              loss; eval_loss on some), eval lines, final lines
  LOG_DIR/events.jsonl        the coordinator's event log: group_dropped,
                              heal_finished, mode_switched (step of each); a
                              drop the group reported itself (self_reported:
                              SIGTERM) and group_drained (phalanxctl drain)
                              are planned leaves
A step's train loss is the mean over the groups that printed it (in sync
they print the same number; in DiLoCo each its own inner loss); a step
printed twice by one group (a retry after a restart) keeps the last.

Exit status: 0 written; 1 nothing to draw, unreadable input, or no
matplotlib (Debian: python3-matplotlib; scripts/install-deps.sh installs it).
"""
import argparse
import glob
import json
import os
import sys


def need_matplotlib():
    try:
        import matplotlib
    except ImportError:
        # Debian's python3-matplotlib imports under /usr/bin/python3, which may
        # not be the python3 first on PATH: try it once before giving up.
        deb = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(deb) and os.access(deb, os.X_OK) \
                and not os.environ.get("PHALANX_PLOT_REEXEC"):
            os.environ["PHALANX_PLOT_REEXEC"] = "1"
            os.execv(deb, [deb] + sys.argv)
        sys.exit("phalanx_plot: matplotlib is not installed for %s (Debian: apt-get install python3-matplotlib, "
                 "or scripts/install-deps.sh)" % sys.executable)
    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    return plt


def parse_line(line):
    """(kind, fields) of a worker line in either format; kind None for others."""
    line = line.strip()
    if line.startswith("{"):
        try:
            obj = json.loads(line)
        except ValueError:
            return None, {}
        return obj.get("kind"), obj
    head, _, rest = line.partition(" ")
    if head not in ("progress", "eval", "final"):
        return None, {}
    fields = {}
    for kv in rest.split():
        k, eq, v = kv.partition("=")
        if eq:
            fields[k] = v
    return head, fields


def num(fields, key):
    try:
        v = float(fields[key])
    except (KeyError, TypeError, ValueError):
        return None
    return v if v == v else None  # NaN: none


def read_workers(log_dir):
    train = {}  # step -> {group: loss}
    evals = {}  # step -> {group: eval loss}
    for path in sorted(glob.glob(os.path.join(log_dir, "worker-*-0.out"))):
        with open(path, errors="replace") as f:
            for line in f:
                kind, fl = parse_line(line)
                step = num(fl, "step") if kind != "final" else num(fl, "steps")
                if kind is None or step is None:
                    continue
                group = fl.get("group", os.path.basename(path))
                if kind == "progress" and num(fl, "loss") is not None:
                    train.setdefault(int(step), {})[group] = num(fl, "loss")
                ev = num(fl, "eval_loss")
                if ev is not None and kind in ("progress", "eval", "final"):
                    evals.setdefault(int(step), {})[group] = ev
    mean = lambda d: sum(d.values()) / len(d)  # noqa: E731
    return ([(s, mean(train[s])) for s in sorted(train)], [(s, mean(evals[s])) for s in sorted(evals)])


def read_events(log_dir):
    marks = []  # (step, type, label)
    finished = False  # after a run_finished, groups leave because the job is done: not marked
    path = os.path.join(log_dir, "events.jsonl")
    if not os.path.exists(path):
        return marks
    with open(path, errors="replace") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a line being written
            t, step = e.get("type"), e.get("step")
            if not isinstance(step, int):
                continue
            if t == "run_finished":
                finished = True
            elif t == "group_dropped" and "self_reported" in e.get("reason", ""):  # SIGTERM, drain, the end
                if not finished:
                    marks.append((step, "group_left", "%s left" % e.get("group", "?")))
            elif t == "group_drained":  # phalanxctl drain: the quorum without it formed
                marks.append((step, "group_left", "%s drained" % e.get("group", "?")))
            elif t == "group_dropped":
                marks.append((step, t, "%s dropped" % e.get("group", "?")))
            elif t == "heal_finished":
                marks.append((step, t, "%s healed" % e.get("group", "?")))
            elif t == "mode_switched":
                marks.append((step, t, "to %s" % e.get("to", "?")))
    return marks


STYLE = {"group_dropped": ("tab:red", "--", "group dropped (failure)"),
         "group_left": ("tab:gray", "--", "group left (planned)"),
         "heal_finished": ("tab:green", ":", "group healed"), "mode_switched": ("tab:purple", "-.", "mode switched")}


def draw(plt, train, evals, marks, title, out):
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=100)
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], color="tab:blue", lw=1.2, label="train loss")
    if evals:
        ax.plot([s for s, _ in evals], [v for _, v in evals], "o-", color="tab:orange", ms=5, label="eval loss")
    seen = set()
    for step, t, _ in marks:
        color, ls, label = STYLE[t]
        ax.axvline(step, color=color, ls=ls, lw=1, alpha=0.8, label=None if t in seen else label)
        seen.add(t)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log-dir", default="phalanx-run", help="phalanx-launch's --log-dir [phalanx-run]")
    ap.add_argument("--out", required=True, help="the PNG to write")
    a = ap.parse_args()
    plt = need_matplotlib()
    if not os.path.isdir(a.log_dir):
        sys.exit("phalanx_plot: --log-dir %s: no such folder" % a.log_dir)
    train, evals = read_workers(a.log_dir)
    if not train and not evals:
        sys.exit("phalanx_plot: no progress lines in %s/worker-*-0.out (written by phalanx-launch while a job runs)"
                 % a.log_dir)
    marks = read_events(a.log_dir)
    drops = sum(1 for m in marks if m[1] == "group_dropped")
    heals = sum(1 for m in marks if m[1] == "heal_finished")
    title = "%s: %d steps, %d drops, %d heals" % (os.path.basename(os.path.abspath(a.log_dir)),
                                                  train[-1][0] if train else 0, drops, heals)
    try:
        draw(plt, train, evals, marks, title, a.out)
    except OSError as e:
        sys.exit("phalanx_plot: cannot write %s: %s" % (a.out, e))
    print("plot written: %s (%d steps, %d eval points, %d drops, %d heals)" % (a.out, len(train), len(evals), drops,
                                                                               heals))


if __name__ == "__main__":
    main()
