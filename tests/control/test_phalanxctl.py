"""phalanxctl's operator commands against real coordinators and workers.

  kill_events  kill signals a phalanx-worker of this host and refuses a member
               on another host (a registered fake whose host is not ours), a
               process that is not a phalanx-worker (the worker binary run
               under another name) and a member that is not live; events
               prints the file sink, filtered by --type (repeatable) and
               --group, and --follow prints new events as they come.
  drain        drain g2 during a 3-group training job: g2's worker exits 0 at
               a step boundary and is not restarted, the coordinator records
               a planned leave (member_lost self_reported), the others go on
               to the job's last step, and no failure is counted (launcher
               summary, /metrics phalanx_failures_per_hour). The survivors'
               step in flight may be retried once (step_failed, peer_failed):
               a drain by SIGTERM does not tell them beforehand.
  plot         plot draws a PNG (valid signature, non-trivial size) from a
               short real run with one chaos kill: drops and heals marked.
"""
import os
import signal
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, Launch, check, die_with_test, main_scenarios, make_corpus, wait_until  # noqa: E402


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
                                   "file:" + job.events_path, "--type", "member_lost", "--group", "g0"],
                                  stdout=subprocess.PIPE, text=True, preexec_fn=die_with_test)
        r = ctl(bindir, "kill", "g0/0", *http)
        check(r.returncode == 0 and "sent signal 9" in r.stdout, "kill g0/0: %d %r" % (r.returncode, r.stderr))
        w0.wait(timeout=10)
        check(w0.returncode == -signal.SIGKILL, "g0/0 died of SIGKILL: %s" % w0.returncode)
        line = follow.stdout.readline()  # blocks until the coordinator logs the loss (or the test's timeout)
        check('"type":"member_lost"' in line and '"group":"g0"' in line, "--follow printed the loss: %r" % line)
        follow.send_signal(signal.SIGINT)
        check(follow.wait(timeout=10) == 0, "events --follow exits 0 on SIGINT")

        r = ctl(bindir, "events", "--events", "file:" + job.events_path)
        all_lines = r.stdout.splitlines()
        check(r.returncode == 0 and len(all_lines) == len(job.read_events()), "events prints the whole log")
        r = ctl(bindir, "events", "--events", job.events_path, "--type", "member_joined", "--type", "member_lost")
        types = {l.split('"type":"')[1].split('"')[0] for l in r.stdout.splitlines()}
        check(types == {"member_joined", "member_lost"}, "--type twice: %s" % types)
        r = ctl(bindir, "events", "--log-dir", job.dir, "--group", "g1")
        check(r.stdout and all('"group":"g1"' in l for l in r.stdout.splitlines()), "--group: %r" % r.stdout)
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


def drain(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-drain-data-"))
    steps = 400
    launch = Launch(bindir, ["--groups", "3", "--model", "tiny", "--steps", str(steps), "--data", data, "--",
                             "--global-batch", "12", "--micro-batch", "4", "--seq", "64"], name="drain")
    try:
        wait_until(lambda: any("groups 3/3" in l for l in launch.output()), 120, "a step of all three groups")
        r = ctl(bindir, "drain", "g2", "--http", launch.http, "--wait-s", "60")
        check(r.returncode == 0 and "left the job" in r.stdout, "drain g2: %d %r %r" % (r.returncode, r.stdout, r.stderr))
        drained_at = launch.last_step()
        metrics = urllib.request.urlopen("http://%s/metrics" % launch.http, timeout=5).read().decode()
        check("phalanx_failures_per_hour 0.00" in metrics, "a planned leave is not a failure: %s" %
              [l for l in metrics.splitlines() if l.startswith("phalanx_failures_per_hour")])
        rc = launch.wait(300)
    finally:
        launch.terminate()
    check(rc == 0, "the job completes without g2: %d\n%s" % (rc, launch.tail()))
    out = "\n".join(launch.output())
    check("worker g2/0 died" not in out, "g2 exited cleanly, no restart:\n%s" % launch.tail())
    s = launch.summary()
    check(s and s["completed"] and s["failures"] == 0, "no failure counted: %s" % s)
    check(launch.last_step() == steps > drained_at, "the others went on to step %d (drained at %d)" % (steps, drained_at))
    finals = launch.finals()
    check(set(finals) == {"g0", "g1"}, "g0 and g1 finish, g2 does not: %s" % sorted(finals))
    evs = launch.read_events()
    lost = [e for e in evs if e["type"] == "member_lost" and e.get("group") == "g2"]
    check(lost and lost[0]["reason"] == "self_reported", "g2's leave is planned (self_reported): %s" % lost)
    check(not [e for e in evs if e["type"] == "member_lost" and e.get("reason") != "self_reported"],
          "nobody was lost otherwise")
    dropped = [e for e in evs if e["type"] == "group_dropped" and e.get("group") == "g2"]
    check(dropped and "self_reported" in dropped[0]["reason"], "group_dropped says why: %s" % dropped)
    # The survivors may have started the next step with g2 still in it: that step is retried once without it.
    retried = [e for e in evs if e["type"] == "step_failed" and e.get("group") in ("g0", "g1")
               and e.get("reason") not in ("finished",)]
    check(len(retried) <= 2, "at most the step in flight retried per survivor: %s" % retried)


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
    main_scenarios({"kill_events": kill_events, "drain": drain, "plot": plot})
