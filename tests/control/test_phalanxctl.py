"""phalanxctl's operator commands against real coordinators and workers.

  kill_events  kill signals a phalanx-worker of this host and refuses a member
               on another host (a registered fake whose host is not ours), a
               process that is not a phalanx-worker (the worker binary run
               under another name) and a member that is not live; events
               prints the file sink, filtered by --type (repeatable) and
               --group, and --follow prints new events as they come.
  drain        drain g2, then g1, of a 3-group training job over the control
               plane: each drained worker exits 0 at a step boundary and is
               not restarted; the coordinator records the request
               (group_draining), the quorum without the group (group_drained,
               its reason naming it) and a planned leave (member_lost
               drained); no step is lost: no step_failed, no aborted
               collective and no retried step on the survivors (g0 finishes
               with failures=0), no failure counted (launcher summary,
               phalanx_failures_per_hour). Draining the last group is refused
               (below --min-replicas, exit 1), an unknown group exits 1, a bad
               name exits 2.
  drain_frozen g2 SIGSTOPped, then drained: once it is lost the others abort
               the step they share with it (a fresh quorum id) and finish.
  drain_layouts  the same without a lost step for a group of 2 fsdp ranks
               (both ranks leave), for DiLoCo (--inner-steps 10) and for 2
               ranks under --liveness group (rank 1 hears of it from its
               leader's forwarded quorum).
  plot         plot draws a PNG (valid signature, non-trivial size) from a
               short real run with one chaos kill: drops and heals marked.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import (Job, Launch, check, die_with_test, main_scenarios, make_corpus,  # noqa: E402
                          metrics_by_series, wait_until)


def ctl(bindir, *args, timeout=60):
    return subprocess.run([os.path.join(bindir, "phalanxctl")] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def alive(p):
    return p.poll() is None


def kill_events(bindir):
    job = Job(bindir, name="ctl-kill")
    job.start_coordinator(["--heartbeat-timeout-ms", "60000"])
    fake = None
    try:
        w0 = job.start_worker("g0", 0, 1)
        # the worker binary under another name: a live member, but not a phalanx-worker process
        other = os.path.join(job.dir, "not-a-worker")
        os.symlink(os.path.abspath(os.path.join(bindir, "phalanx-worker")), other)
        impostor = subprocess.Popen([other, "--coordinator", job.endpoint, "--group", "g1"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=die_with_test)
        # a member whose host is not this machine (register_members: 255 control bytes)
        fake = subprocess.Popen([os.path.join(bindir, "register_members"), "--endpoint", job.endpoint, "--job",
                                 job.job, "--count", "1", "--prefix", "far"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, preexec_fn=die_with_test)
        check(fake.stdout.readline().startswith("registered="), "the fake member registered")
        wait_until(lambda: len(job.live_members()) == 3, 20, "three live members")
        http = ["--http", job.http]

        r = ctl(bindir, "kill", "g1/0", *http)
        check(r.returncode == 1 and "not a phalanx-worker" in r.stderr, "impostor refused: %d %r" % (r.returncode, r.stderr))
        check(alive(impostor), "the impostor was not signalled")
        r = ctl(bindir, "kill", "far00000/0", *http)
        check(r.returncode == 1 and "not on this host" in r.stderr, "foreign host refused: %d %r" % (r.returncode, r.stderr))
        r = ctl(bindir, "kill", "nosuch/0", *http)
        check(r.returncode == 1 and "no live member" in r.stderr, "unknown member: %d %r" % (r.returncode, r.stderr))
        r = ctl(bindir, "kill", "g0", *http)
        check(r.returncode == 2, "kill without /RANK is a usage error: %d" % r.returncode)

        # --follow: started before the kill, sees the loss as it happens
        follow = subprocess.Popen([os.path.join(bindir, "phalanxctl"), "events", "--follow", "--events",
                                   "file:" + job.events_path, "--type", "member_lost", "--group", "g0", "--json"],
                                  stdout=subprocess.PIPE, text=True, preexec_fn=die_with_test)
        r = ctl(bindir, "kill", "g0/0", *http)
        check(r.returncode == 0 and "sent signal 9" in r.stdout, "kill g0/0: %d %r" % (r.returncode, r.stderr))
        w0.wait(timeout=10)
        check(w0.returncode == -signal.SIGKILL, "g0/0 died of SIGKILL: %s" % w0.returncode)
        line = follow.stdout.readline()  # blocks until the coordinator logs the loss (or the test's timeout)
        check('"type":"member_lost"' in line and '"group":"g0"' in line, "--follow printed the loss: %r" % line)
        follow.send_signal(signal.SIGINT)
        check(follow.wait(timeout=10) == 0, "events --follow exits 0 on SIGINT")

        r = ctl(bindir, "events", "--events", "file:" + job.events_path, "--json")
        all_lines = r.stdout.splitlines()
        with open(job.events_path) as f:
            written = f.read().splitlines()
        check(r.returncode == 0 and all_lines == written[:len(all_lines)] and len(all_lines) == len(job.read_events()),
              "events --json prints the whole log as written")
        r = ctl(bindir, "events", "--events", job.events_path, "--type", "member_joined", "--type", "member_lost",
                "--json")
        types = {l.split('"type":"')[1].split('"')[0] for l in r.stdout.splitlines()}
        check(types == {"member_joined", "member_lost"}, "--type twice: %s" % types)
        r = ctl(bindir, "events", "--log-dir", job.dir, "--group", "g1", "--json")
        check(r.stdout and all('"group":"g1"' in l for l in r.stdout.splitlines()), "--group: %r" % r.stdout)
        # without --json: a line for people per event, in the log's order
        r = ctl(bindir, "events", "--events", job.events_path)
        people = r.stdout.splitlines()
        evs = job.read_events()
        check(r.returncode == 0 and len(people) == len(evs), "events prints a line per event: %d of %d" %
              (len(people), len(evs)))
        for line, e in zip(people, evs):
            check(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}Z  #%d +%s " % (e["seq"], e["type"]), line) and
                  "{" not in line.split("  ")[0], "a readable line for %s: %r" % (e["type"], line))
        lost = [l for l, e in zip(people, evs) if e["type"] == "member_lost" and e.get("group") == "g0"]
        check(lost and " g0/0  step " in lost[0] and "reason=" in lost[0], "member_lost names g0/0, its step and "
              "reason: %r" % lost)
        r = ctl(bindir, "events", "--events", "none")  # Kafka: tests/kafka/test_ctl_kafka.py
        check(r.returncode == 2 and "none" in r.stderr, "--events none (no log) is refused: %d" % r.returncode)
        r = ctl(bindir, "events", "--log-dir", os.path.join(job.dir, "nowhere"))
        check(r.returncode == 1, "a missing log exits 1: %d" % r.returncode)
        impostor.terminate()
    finally:
        if fake:
            fake.stdin.close()
            fake.wait(timeout=10)
        job.stop()


def worker_log(launch, group, rank=0):
    with open(os.path.join(launch.dir, "worker-%s-%d.log" % (group, rank))) as f:
        return f.read()


def aborts_since_drain(log, evs, group):
    """The lines of a survivor's log where it aborted or failed a vote in the
    quorum `group` was draining from, or a later one. Earlier aborts are the
    start of the job: groups that set up at different speeds on a loaded
    machine supersede each other's first rendezvous, which no drain causes."""
    draining = [e["quorum_id"] for e in evs if e["type"] == "group_draining" and e.get("group") == group]
    check(draining, "a group_draining event for %s" % group)
    found = []
    for line in log.splitlines():
        m = re.search(r"\b(collectives_aborted|vote_failed) .*?\bquorum_id=(\d+)", line)
        if m and int(m.group(2)) >= draining[0]:
            found.append(line)
    return found


def drain_one(bindir, name, ranks, args):
    """Drains g2 of a 3-group job of `ranks` ranks a group; no step is lost."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-%s-data-" % name))
    steps = 300
    launch = Launch(bindir, ["--groups", "3", "--ranks-per-group", str(ranks), "--model", "tiny", "--steps",
                             str(steps), "--data", data, "--", "--global-batch", "12", "--micro-batch", "2",
                             "--seq", "64"] + args, name=name)
    try:
        wait_until(lambda: launch.last_step() >= 20, 120, "%s: 20 steps" % name)
        r = ctl(bindir, "drain", "g2", "--coordinator", launch.endpoint(), "--http", launch.http,
                "--wait-s", "60", *launch.ctl_keys())
        check(r.returncode == 0 and "left the job" in r.stdout, "%s: drain g2: %d %r %r" % (name, r.returncode, r.stdout,
                                                                                           r.stderr))
        rc = launch.wait(300)
    finally:
        launch.terminate()
    check(rc == 0, "%s: the job completes: %d\n%s" % (name, rc, launch.tail()))
    finals = launch.finals()
    check(set(finals) == {"g0", "g1"}, "%s: g0 and g1 finish: %s" % (name, sorted(finals)))
    evs = launch.read_events()
    for g in ("g0", "g1"):
        check(finals[g].get("failures") == "0", "%s: %s never retried a step: %s" % (name, g, finals[g]))
        for r in range(ranks):
            aborts = aborts_since_drain(worker_log(launch, g, r), evs, "g2")
            check(not aborts, "%s: %s/%d aborted nothing for the drain:\n%s" % (name, g, r, "\n".join(aborts)))
    for r in range(ranks):
        check("group_drained group=g2 rank=%d" % r in worker_log(launch, "g2", r), "%s: g2/%d left by the drain" % (name, r))
        lost = [e for e in evs if e["type"] == "member_lost" and e.get("group") == "g2" and e.get("rank") == r]
        check(lost and lost[0]["reason"] == "drained", "%s: g2/%d's leave is planned: %s" % (name, r, lost))
    fails = [e for e in evs if e["type"] == "step_failed" and e.get("reason") not in ("drained", "finished")]
    check(not fails, "%s: no step failed: %s" % (name, fails))
    s = launch.summary()
    check(s and s["completed"] and s["failures"] == 0, "%s: no failure counted: %s" % (name, s))


def drain_frozen(bindir):
    """A drained group frozen (SIGSTOP) before the boundary: the others are in
    a step with it and do not abort for a drained group. Once it is lost
    (heartbeat timeout) the coordinator re-forms the same quorum under a fresh
    id, which aborts them: they retry the step and go on. With a 10-minute
    collective timeout the job could not otherwise finish in the test's time."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-drain-frozen-data-"))
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", "600", "--data", data, "--",
                             "--global-batch", "12", "--micro-batch", "4", "--seq", "64", "--comm-timeout-ms", "600000"],
                    name="drain-frozen")
    pid = None
    try:
        wait_until(lambda: any("groups 3/3" in l for l in launch.output()), 120, "a step of all three groups")
        pid = launch.pid_of("g2")
        os.kill(pid, signal.SIGSTOP)
        stopped_at = launch.last_step()
        r = ctl(bindir, "drain", "g2", "--coordinator", launch.endpoint(), "--wait-s", "0", *launch.ctl_keys())
        check(r.returncode == 0, "drain g2 (frozen): %d %r" % (r.returncode, r.stderr))
        wait_until(lambda: launch.last_step() >= stopped_at + 20, 120, "g0 and g1 going on without the frozen g2")
        os.kill(pid, signal.SIGCONT)
        rc = launch.wait(300)
    finally:
        if pid:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        launch.terminate()
    check(rc == 0, "the job completes: %d\n%s" % (rc, launch.tail()))
    check(set(launch.finals()) == {"g0", "g1"}, "g0 and g1 finish: %s" % sorted(launch.finals()))
    evs = launch.read_events()
    bump = [e for e in evs if e["type"] == "quorum_formed" and "drained group g2 was lost before it left" in e["reason"]]
    check(len(bump) == 1 and bump[0]["groups"] == ["g0", "g1"], "the same groups under a fresh id: %s" % bump)
    lost = [e for e in evs if e["type"] == "member_lost" and e.get("group") == "g2"]
    check(lost and lost[0]["reason"] != "drained", "g2 was lost while frozen, not drained: %s" % lost)
    aborted = [l for g in ("g0", "g1") for l in worker_log(launch, g).splitlines()
               if "collectives_aborted" in l and "newer=%d" % bump[0]["quorum_id"] in l]
    check(aborted, "the fresh id aborted the survivors' step with the frozen group")
    check("group_drained group=g2" in worker_log(launch, "g2"), "g2, woken, still leaves as drained")


def drain_layouts(bindir):
    drain_one(bindir, "drain-fsdp", 2, ["--fsdp", "2"])
    drain_one(bindir, "drain-diloco", 1, ["--mode", "diloco", "--inner-steps", "10"])
    drain_one(bindir, "drain-liveness", 2, ["--liveness", "group"])


def drain(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-drain-data-"))
    steps = 400
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", str(steps), "--data", data, "--",
                             "--global-batch", "12", "--micro-batch", "4", "--seq", "64"], name="drain")
    coord = launch.endpoint()
    try:
        wait_until(lambda: any("groups 3/3" in l for l in launch.output()), 120, "a step of all three groups")
        keys = launch.ctl_keys()  # made by the launcher before it started anything
        r = ctl(bindir, "drain", "g2", "--coordinator", coord, "--http", launch.http, "--wait-s", "60", *keys)
        check(r.returncode == 0 and "left the job" in r.stdout, "drain g2: %d %r %r" % (r.returncode, r.stdout, r.stderr))
        drained_at = launch.last_step()
        gone = [m for m in launch.status()["members"] if m["group"] == "g2"]
        check(gone and all(m["state"] == "left" and m["lost_reason"] == "drained" for m in gone),
              "/status shows g2 left (drained), not lost: %s" % gone)
        # phalanxctl status: the job's step against its --steps, pace and ETA, the groups by state
        # (the pace needs a second of steps)
        wait_until(lambda: launch.status()["progress"]["eta_s"] is not None, 60, "an ETA in /status")
        r = ctl(bindir, "status", "--http", launch.http)
        m = re.search(r"^progress: step (\d+) of %d \((\d+\.\d)%%\)  loss \d+\.\d+  tokens/s [\d.]+k?  "
                      r"[\d.e+]+ steps/s \(last minute\)  ETA \d+[smhd]" % steps, r.stdout, re.M)
        check(r.returncode == 0 and m and int(m.group(1)) >= drained_at, "status shows progress: %r" % r.stdout[:600])
        check(re.search(r"^g2 +left +\d+ +1 ", r.stdout, re.M) and re.search(r"^g0 +healthy +\d+ +1 ", r.stdout, re.M),
              "status lists the groups with their states: %r" % r.stdout)
        check("checkpoint: none saved while this coordinator ran" in r.stdout, "no checkpoint in this job")
        prog = launch.status()["progress"]
        check(prog["target_step"] == steps and prog["step"] >= drained_at and prog["eta_s"] > 0 and
              prog["checkpoint_step"] is None, "/status progress: %s" % prog)
        hist = json.loads(urllib.request.urlopen("http://%s/api/history?since=0" % launch.http, timeout=5).read())
        kinds = {(e["type"], e.get("group")) for e in hist["events"]}
        check(("group_drained", "g2") in kinds and ("member_left", "g2") in kinds and ("member_lost", "g2") not in kinds,
              "the dashboard's history marks a planned leave, not a loss: %s" % sorted(kinds))
        metrics = metrics_by_series(urllib.request.urlopen("http://%s/metrics" % launch.http, timeout=5).read().decode())
        check(metrics["phalanx_failures_per_hour"] == 0 and metrics["phalanx_failures_total"] == 0,
              "a planned leave is not a failure: %s" %
              {k: v for k, v in metrics.items() if k.startswith("phalanx_failures")})
        # A second drain in a row: g1 leaves, g0 trains on alone.
        wait_until(lambda: launch.last_step() >= drained_at + 5, 60, "steps of g0 and g1 after the drain")
        r = ctl(bindir, "drain", "g1", "--coordinator", coord, "--http", launch.http, "--wait-s", "60", *keys)
        check(r.returncode == 0, "drain g1: %d %r %r" % (r.returncode, r.stdout, r.stderr))
        # The last group: refused, the job would stop (min_replicas 1).
        r = ctl(bindir, "drain", "g0", "--coordinator", coord, "--http", launch.http, "--wait-s", "5", *keys)
        check(r.returncode == 1 and "below --min-replicas 1" in r.stderr and "RESOURCE_LIMIT" in r.stderr,
              "draining the last group is refused: %d %r" % (r.returncode, r.stderr))
        r = ctl(bindir, "drain", "g7", "--coordinator", coord, "--wait-s", "0", *keys)
        check(r.returncode == 1 and "no live member of group 'g7'" in r.stderr, "an unknown group: %r" % r.stderr)
        r = ctl(bindir, "drain", "g/0", "--coordinator", coord, *keys)
        check(r.returncode == 2 and "GROUP name" in r.stderr, "a bad group name is bad usage: %r" % r.stderr)
        rc = launch.wait(300)
    finally:
        launch.terminate()
    check(rc == 0, "the job completes with g0 alone: %d\n%s" % (rc, launch.tail()))
    out = "\n".join(launch.output())
    check("worker g2/0 died" not in out and "worker g1/0 died" not in out, "drained workers exited cleanly:\n%s" %
          launch.tail())
    s = launch.summary()
    check(s and s["completed"] and s["failures"] == 0, "no failure counted: %s" % s)
    check(launch.last_step() == steps > drained_at, "g0 went on to step %d (g2 drained at %d)" % (steps, drained_at))
    finals = launch.finals()
    check(set(finals) == {"g0"}, "g0 finishes, the drained groups do not: %s" % sorted(finals))
    # No step was lost: every step the survivors took part in committed.
    check(finals["g0"].get("failures") == "0", "g0 never retried a step: %s" % finals["g0"])
    evs = launch.read_events()
    for g in ("g0", "g1"):
        aborts = aborts_since_drain(worker_log(launch, g), evs, "g2")
        check(not aborts, "%s aborted nothing for the drain:\n%s" % (g, "\n".join(aborts)))
    for g in ("g1", "g2"):
        check("group_drained group=%s" % g in worker_log(launch, g), "%s says it left by a drain" % g)
    fails = [e for e in evs if e["type"] == "step_failed" and e.get("reason") not in ("drained", "finished")]
    check(not fails, "no step failed: %s" % fails)
    for g in ("g1", "g2"):
        asked = [e for e in evs if e["type"] == "group_draining" and e.get("group") == g]
        check(asked and asked[0]["in_quorum"] is True, "%s's drain is recorded: %s" % (g, asked))
        left = [e for e in evs if e["type"] == "group_drained" and e.get("group") == g]
        check(len(left) == 1, "a quorum without %s formed once, marked drained: %s" % (g, left))
        q = [e for e in evs if e["type"] == "quorum_formed" and e["quorum_id"] == left[0]["quorum_id"]]
        check(q and g not in q[0]["groups"] and "drained: %s" % g in q[0]["reason"], "its quorum: %s" % q)
        lost = [e for e in evs if e["type"] == "member_lost" and e.get("group") == g]
        check(lost and lost[0]["reason"] == "drained", "%s's leave is planned (drained): %s" % (g, lost))
    check(not [e for e in evs if e["type"] == "member_lost" and e.get("reason") not in ("drained", "self_reported")],
          "nobody was lost otherwise")
    check(not [e for e in evs if e["type"] == "group_dropped" and "self_reported" not in e["reason"]],
          "no group was dropped but g0 when it finished")
    refused = [e for e in evs if e["type"] == "drain_refused"]
    check(refused and refused[0]["group"] == "g0" and refused[0]["groups_left"] == 0, "the refusal: %s" % refused)


def plot(bindir):
    if not any(subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode == 0
               for py in ("python3", "/usr/bin/python3") if py == "python3" or os.path.exists(py)):
        print("SKIP: matplotlib is not installed (Debian: python3-matplotlib; scripts/install-deps.sh installs it)")
        sys.exit(77)
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-plot-data-"))
    launch = Launch(bindir, ["--groups", "2", "--model", "tiny", "--steps", "200", "--data", data,
                             "--chaos-kill-every-steps", "20", "--chaos-max-kills", "1", "--",
                             "--global-batch", "8", "--micro-batch", "4", "--seq", "64", "--eval-every", "50",
                             "--eval-batches", "1", "--progress-format", "json"], name="plot")
    try:
        rc = launch.wait(240)
    finally:
        launch.terminate()
    check(rc == 0, "the run completes: %d\n%s" % (rc, launch.tail()))
    png = os.path.join(launch.dir, "loss.png")
    r = ctl(bindir, "plot", "--log-dir", launch.dir, "--out", png, timeout=120)
    check(r.returncode == 0, "plot: %d %r %r" % (r.returncode, r.stdout, r.stderr))
    check("1 drops" in r.stdout or " drops" in r.stdout, "plot says what it drew: %r" % r.stdout)
    with open(png, "rb") as f:
        blob = f.read()
    check(blob[:8] == b"\x89PNG\r\n\x1a\n" and b"IEND" in blob[-16:], "a whole PNG")
    check(len(blob) > 10000, "a non-trivial picture: %d bytes" % len(blob))
    drops = int(r.stdout.split(" drops")[0].split()[-1])
    check(drops >= 1, "the chaos kill's drop is marked: %r" % r.stdout)
    r = ctl(bindir, "plot", "--log-dir", tempfile.mkdtemp(prefix="phalanx-plot-empty-"), "--out", png + "2")
    check(r.returncode == 1 and "no progress lines" in r.stderr, "an empty folder: exit 1: %r" % r.stderr)
    print("plot artifact: %s" % png)


if __name__ == "__main__":
    main_scenarios({"kill_events": kill_events, "drain": drain, "drain_layouts": drain_layouts,
                    "drain_frozen": drain_frozen, "plot": plot})
