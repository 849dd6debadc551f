"""--mode auto on a real coordinator over ZeroMQ, with fake workers
(register_members: one process per group, heartbeating, optionally with a
comm share). Two scenarios:

failures: a group's process is killed (a failure, not a planned leave); with
  --auto-failures-per-hour 100 over a 20 s window one loss is 180/h: a
  mode_switched event to diloco names the figures, the quorum that carries it
  is pushed with mode "diloco" and /status and /metrics show it. When the
  window has passed with no loss, a mode_switched back to sync follows.
comm: rank 0 of every group heartbeats comm_share 0.9 under --auto-comm-share
  0.5: a switch to diloco whose reason names the communication share. A group
  sending NaN and one sending 7 are ignored (no crash; the mean stays 0.9)."""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, die_with_test, main_scenarios, wait_until  # noqa: E402

AUTO = ["--mode", "auto", "--heartbeat-interval-ms", "100", "--heartbeat-timeout-ms", "1000"]


class Group:
    """One fake single-rank group: a register_members process. A thread
    collects the quorums pushed to it ("quorum=ID mode=M" lines)."""

    def __init__(self, bindir, job, name, extra=()):
        args = [os.path.join(bindir, "register_members"), "--endpoint", job.endpoint, "--job", job.job,
                "--count", "1", "--prefix", name, "--layout", "replicated1.auto5", "--heartbeat-ms", "100",
                "--join"] + list(extra)
        self.name = name + "00000"
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     preexec_fn=die_with_test)
        line = self.proc.stdout.readline().strip()
        check(line == "registered=1", "register_members %s: %r" % (name, line))
        self.modes = {}  # quorum id -> announced mode
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            kv = dict(p.split("=", 1) for p in line.split() if "=" in p)
            if "quorum" in kv:
                self.modes[int(kv["quorum"])] = kv.get("mode", "")

    def pushed_mode(self, qid):
        """The mode quorum qid was pushed with (waits up to 5 s for it)."""
        return wait_until(lambda: self.modes.get(qid), 5, "quorum %d pushed to %s" % (qid, self.name))

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)


def switches(job, to=None):
    return [e for e in job.read_events() if e["type"] == "mode_switched" and (to is None or e["to"] == to)]


def formed(job, names):
    def ok():
        st = job.status()
        return sorted(st["quorum"]["groups"]) == sorted(names) and st
    return wait_until(ok, 10, "a quorum of %s" % names)


def test_failures(bindir):
    job = Job(bindir, "auto-fail", extra_coord_args=AUTO + ["--auto-failures-per-hour", "100", "--auto-window", "20",
                                                           "--auto-hold", "1"])
    groups = []
    try:
        job.start_coordinator()
        groups = [Group(bindir, job, n) for n in ("ga", "gb", "gc")]
        st = formed(job, [g.name for g in groups])
        check(st["mode"] == "auto: sync", "/status mode before any loss: %r" % st["mode"])
        check(st["mode_reason"] == "" and st["mode_switches"] == 0, "no switch yet: %s" % st)
        for g in groups:
            check(g.pushed_mode(st["quorum"]["id"]) == "sync", "the first quorum announces sync")
        time.sleep(1.5)  # past the hold: still sync with no failure
        check(not switches(job), "no switch without a failure: %s" % switches(job))

        victim = groups.pop()
        victim.kill()
        ev = wait_until(lambda: switches(job, "diloco"), 10, "mode_switched to diloco")[0]
        print("switched: %s" % ev)
        check(ev["from"] == "sync" and ev["comm_share"] is None, "from sync, share unmeasured: %s" % ev)
        check("1 group loss in the last 20 s (180.0/h >= 100/h)" in ev["reason"], "reason names the figures: %s" % ev)
        check(abs(ev["failures_per_hour"] - 180.0) < 0.01, "failures_per_hour 180: %s" % ev)
        q = [e for e in job.read_events() if e["type"] == "quorum_formed" and e["quorum_id"] == ev["quorum_id"]]
        check(q and "mode switched to diloco: 1 group loss" in q[0]["reason"], "the quorum carries it: %s" % q)
        check(victim.name not in q[0]["groups"], "the lost group is out: %s" % q)
        for g in groups:
            check(g.pushed_mode(ev["quorum_id"]) == "diloco", "%s told diloco in quorum %d" % (g.name, ev["quorum_id"]))
        st = job.status()
        check(st["mode"] == "auto: diloco H=5", "/status mode: %r" % st["mode"])
        check(st["quorum"]["id"] == ev["quorum_id"] and st["mode_switches"] == 1, "/status: %s" % st)
        check(st["mode_reason"] == ev["reason"], "/status mode_reason: %r" % st["mode_reason"])
        m = job.metrics()
        check(m["phalanx_mode_diloco"] == 1 and m["phalanx_mode_switches_total"] == 1, "metrics: %s" % m)
        check(m["phalanx_failures_per_hour"] == 180 and "phalanx_comm_share" not in m, "metrics: %s" % m)
        hist = json.loads(job.get("/api/history"))
        check(hist["mode_reason"] == ev["reason"], "/api/history mode_reason (the page shows it): %r" % hist["mode_reason"])
        check(any(e["type"] == "mode_switched" and "1 group loss" in e["detail"] for e in hist["events"]),
              "/api/history marks the switch: %s" % hist["events"])
        check("mode auto: diloco H=5" in job.get("/status.txt"), "the text view shows the mode")

        # The loss leaves the 20 s window: back to sync (0/h < 50/h, share unmeasured).
        back = wait_until(lambda: switches(job, "sync"), 30, "mode_switched back to sync", interval_s=0.2)[0]
        print("back: %s" % back)
        check(back["ts"] - ev["ts"] >= 19000, "not before the window passed: %s" % back)
        check("0 group losses in the last 20 s (0.0/h < 50/h, half the threshold)" in back["reason"] and
              "not measured" in back["reason"], "reason: %s" % back)
        check(back["quorum_id"] == ev["quorum_id"] + 1, "same groups, id + 1: %s" % back)
        for g in groups:
            check(g.pushed_mode(back["quorum_id"]) == "sync", "%s told sync" % g.name)
        st = job.status()
        check(st["mode"] == "auto: sync" and st["mode_switches"] == 2, "/status after: %s" % st)
        check(sorted(st["quorum"]["groups"]) == sorted(g.name for g in groups), "same groups: %s" % st)
        check(job.metrics()["phalanx_mode_diloco"] == 0, "metrics: back to sync")
    finally:
        for g in groups:
            g.stop()
        job.stop()
    check(job.coord.returncode == 0, "coordinator exit status %s" % job.coord.returncode)


def test_comm(bindir):
    job = Job(bindir, "auto-comm", extra_coord_args=AUTO + ["--auto-comm-share", "0.5", "--auto-hold", "1"])
    groups = []
    try:
        job.start_coordinator()
        groups = [Group(bindir, job, n, ["--comm-share", "0.9"]) for n in ("ga", "gb")]
        groups += [Group(bindir, job, "gnan", ["--comm-share", "nan"]), Group(bindir, job, "gbig", ["--comm-share", "7"])]
        formed(job, [g.name for g in groups])
        ev = wait_until(lambda: switches(job, "diloco"), 10, "mode_switched to diloco")[0]
        print("switched: %s" % ev)
        check("cross-group communication 90% of step time >= 50%" in ev["reason"], "reason: %s" % ev)
        check(abs(ev["comm_share"] - 0.9) < 0.001, "comm_share 0.9 (NaN and 7 ignored): %s" % ev)
        for g in groups:
            check(g.pushed_mode(ev["quorum_id"]) == "diloco", "%s told diloco" % g.name)
        st = job.status()
        check(abs(st["comm_share"] - 0.9) < 0.001 and st["mode"] == "auto: diloco H=5", "/status: %s" % st)
        check(abs(job.metrics()["phalanx_comm_share"] - 0.9) < 0.001, "metrics comm share")
        time.sleep(2)  # the share stays high: no switch back
        check(len(switches(job)) == 1, "one switch: %s" % switches(job))
    finally:
        for g in groups:
            g.stop()
        job.stop()
    check(job.coord.returncode == 0, "coordinator exit status %s" % job.coord.returncode)


if __name__ == "__main__":
    main_scenarios({"failures": test_failures, "comm": test_comm})
