"""phalanx-launch's terminal output scales with time, not with steps.

interval  (the default) a 2-group job of 600 steps with a worker killed
          once: the progress lines are a handful (at most one per
          --progress-every-s second, plus the first, the last and eval
          steps), each with step/total, percent, smoothed loss and tokens/s,
          groups and an ETA; the last one says 600/600 (100%); the kill and
          the heal are still shown as they happen.
json      --progress json: every line is a JSON object; one `progress`
          object per committed step (steps = the target, increasing),
          every other line a `log` object with its text, and the summary
          last.
dataprep  no --data: the demo corpus is prepared with one line on the
          terminal, phalanx-data's own progress in LOG_DIR/data.log.
The interval job also ends with one line that says what each count counts
(worker failures = processes that died, heals, chaos kills, checkpoints),
as the JSON summary has them, and each group's line says its counts are its
own."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Launch, check, die_with_test, free_port, main_scenarios, make_corpus  # noqa: E402

STEPS = 600
WORKER = ["--", "--global-batch", "8", "--micro-batch", "4", "--seq", "32", "--eval-every", "200"]


def test_interval(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-progress-data-"))
    launch = Launch(bindir, ["--groups", "2", "--model", "tiny", "--steps", str(STEPS), "--data", data,
                             "--progress", "interval", "--progress-every-s", "1", "--chaos-kill-every-steps", "150",
                             "--chaos-max-kills", "1", "--chaos-seed", "3"] + WORKER, name="progress")
    rc = launch.wait(300)
    out = launch.output()
    check(rc == 0, "the job completes: %d\n%s" % (rc, launch.tail()))
    lines = [l for l in out if re.search(r"\] step \d+/%d " % STEPS, l)]
    s = launch.summary()
    pat = (r"\] step (\d+)/%d \( *(\d+)%%\) \| loss \S+ \(smoothed [0-9.]+\) \| \d+ tok/s \(smoothed\) \| "
           r"groups \d/2 \| quorum \d+ \| ETA (\S+)" % STEPS)
    for l in lines:
        check(re.search(pat, l), "a progress line says step/total, percent, smoothed loss and speed, ETA: %r" % l)
    steps = [int(re.search(pat, l).group(1)) for l in lines]
    evals = sum(1 for l in lines if "| eval " in l)
    budget = int(s["elapsed_s"]) + 2 + evals + 1  # one a second, the first and last, every eval
    check(len(lines) <= budget and len(lines) < STEPS // 10,
          "%d progress lines for %d steps in %.1f s (at most %d)" % (len(lines), STEPS, s["elapsed_s"], budget))
    check(steps == sorted(steps) and steps[-1] == STEPS and "(100%)" in lines[-1] and "ETA 0s" in lines[-1],
          "the last line is the last step: %r" % lines[-1])
    check(s["chaos_kills"] == 1 and any("SIGKILL" in l for l in out) and any("healed from" in l for l in out),
          "the kill and the heal are shown: %s" % s)
    end = [m for l in out for m in [re.search(r"\] job completed: step %d of %d in [0-9.]+ s; (\d+) worker failures? "
                                             r"\(processes that died\), (\d+) heals?, 1 chaos kill, 0 checkpoints "
                                             r"saved, [0-9.]+ s lost to failures$" % (STEPS, STEPS), l)] if m]
    check(len(end) == 1 and int(end[0].group(1)) == s["failures"] and int(end[0].group(2)) == s["heals"],
          "one closing line says what each count counts, as the summary has them: %s\n%s" % (s, launch.tail(5)))
    own = [l for l in out if "finished: group=" in l]
    check(len(own) == 2 and all("(this group's own: failures = steps it retried, heals = heals it took)" in l
                                for l in own), "each group's line says its counts are its own: %s" % own)
    check(len(out) < 60, "the whole output is tens of lines, not hundreds: %d" % len(out))
    print("interval: %d progress lines for %d steps in %.1f s" % (len(lines), STEPS, s["elapsed_s"]))


def test_json(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-progress-json-data-"))
    launch = Launch(bindir, ["--groups", "2", "--model", "tiny", "--steps", "200", "--data", data,
                             "--progress", "json"] + WORKER, name="progress-json")
    rc = launch.wait(300)
    check(rc == 0, "the job completes: %d\n%s" % (rc, launch.tail()))
    objs = []
    for l in launch.output():
        try:
            objs.append(json.loads(l))
        except ValueError:
            check(False, "every line is JSON: %r" % l)
    progress = [o for o in objs if o.get("kind") == "progress"]
    logs = [o for o in objs if o.get("kind") == "log"]
    check([o["step"] for o in progress] == list(range(1, 201)), "a progress object per committed step")
    keys = {"elapsed_s", "step", "steps", "loss", "loss_smoothed", "tok_s", "tok_s_smoothed", "groups",
            "groups_started", "quorum_id", "eta_s", "eval_loss"}
    check(all(keys <= set(o) and o["steps"] == 200 for o in progress), "the documented keys: %s" % progress[-1])
    check(progress[-1]["eta_s"] == 0 and isinstance(progress[-1]["loss_smoothed"], float),
          "the last step: ETA 0 and a smoothed loss: %s" % progress[-1])
    check(logs and all(isinstance(o["text"], str) for o in logs) and any("finished" in o["text"] for o in logs),
          "the other lines are log objects with their text")
    check("completed" in objs[-1] and objs[-1]["completed"], "the summary is the last line: %s" % objs[-1])
    print("json: %d progress and %d log objects, the summary last" % (len(progress), len(logs)))


def test_dataprep(bindir):
    """No --data: the demo corpus is prepared in ./data/demo with one line on
    the terminal, phalanx-data's progress in LOG_DIR/data.log."""
    cwd = tempfile.mkdtemp(prefix="phalanx-progress-prep-")
    r = subprocess.run([os.path.join(bindir, "phalanx-launch"), "--groups", "1", "--model", "tiny", "--steps", "2",
                        "--http", "127.0.0.1:%d" % free_port(), "--bind", "tcp://127.0.0.1:%d" % free_port()] + WORKER,
                       cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                       preexec_fn=die_with_test)
    check(r.returncode == 0, "the job completes: %d\n%s" % (r.returncode, r.stdout[-2000:]))
    prep = [l for l in r.stdout.splitlines() if "corpus" in l or "progress docs=" in l or l.startswith("summary ")]
    check(len(prep) == 1 and re.search(r"prepared the demo corpus in data/demo in [0-9.]+ s \(phalanx-data --demo: "
                                       r"out=data/demo files=\d+ .*train_tokens=[1-9]\d* .*; log phalanx-run/data.log\)",
                                       prep[0]), "data preparation is one line: %s" % prep)
    with open(os.path.join(cwd, "phalanx-run", "data.log")) as f:
        log = f.read()
    check("progress docs=" in log and "summary out=data/demo" in log, "phalanx-data's own lines are in data.log")
    print("dataprep: one line on the terminal: %s" % prep[0])


if __name__ == "__main__":
    main_scenarios({"interval": test_interval, "json": test_json, "dataprep": test_dataprep})
