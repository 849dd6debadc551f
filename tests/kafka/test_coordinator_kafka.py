"""Coordinator-level Kafka test: the real phalanx-coordinator publishes its
events to px-kafka-mock (librdkafka's mock cluster: 3 brokers, the topic with
1 partition) while real workers join, die and come back, and the topic is
read back with kcat.

1. Brokers up: two groups join one after the other, one is SIGKILLed. The
   topic must hold exactly coordinator_started, member_joined, quorum_formed,
   member_joined, quorum_formed, member_lost, group_dropped, quorum_formed,
   seq 1..8, key = job.
2. Outage: the brokers go down and membership keeps changing (a group comes
   back and is killed again, a third group joins). The coordinator keeps
   working; /metrics shows the backlog, part of it spilled to disk (the spec
   caps memory at 4 events).
3. Recovery: the brokers come back; every event arrives, in order, exactly
   once, and after SIGTERM the coordinator's last event (coordinator_stopped)
   too, with the spill file left empty.

Why each step waits on /status before acting: the exact sequence is only
defined if one membership change settles before the next starts."""
import os
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, check, main, wait_until  # noqa: E402

TOPIC = "phalanx-events"
CAP = 4


class Mock:
    """px-kafka-mock driven through its stdin."""

    def __init__(self, path, topic):
        self.p = subprocess.Popen([path, topic], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.boot = self.p.stdout.readline().strip()
        check(":" in self.boot, "px-kafka-mock printed %r" % self.boot)

    def cmd(self, c):
        self.p.stdin.write(c + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline().strip()
        check(reply == "ok", "mock %s: %r" % (c, reply))

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=10)


def kcat(boot, topic):
    out = subprocess.run(["timeout", "30", "kcat", "-b", boot, "-t", topic, "-C", "-e", "-o", "beginning",
                          "-q", "-f", "%k\t%s\n"], capture_output=True, text=True)
    check(out.returncode == 0, "kcat failed: %s" % out.stderr)
    import json
    evs = []
    for line in out.stdout.splitlines():
        key, _, value = line.partition("\t")
        e = json.loads(value)
        e["_key"] = key
        evs.append(e)
    return evs


# The events of join_join_kill, in order.
FIRST = ["coordinator_started", "member_joined", "quorum_formed", "member_joined", "quorum_formed",
         "member_lost", "group_dropped", "quorum_formed"]


def quorum(job, groups):
    """A predicate for wait_until: the quorum is exactly groups, each with its live member."""
    def pred():
        st = job.status()
        return sorted(st["quorum"]["groups"]) == groups and len(job.live_members(st)) == len(groups) and st
    return pred


def join(job, group, groups, when=""):
    """group's one worker starts; waits for the quorum to be groups."""
    job.start_worker(group, 0, 1)
    wait_until(quorum(job, groups), 10, "quorum %s%s" % (groups, when))


def sigkill(job, group, survivors, when=""):
    """SIGKILLs group's worker; waits for the quorum to be survivors."""
    victim = job.workers[(group, 0)]
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    wait_until(quorum(job, survivors), 10, "quorum %s after killing %s%s" % (survivors, group, when))


def join_join_kill(job):
    """g0 joins, g1 joins, g1 is SIGKILLed: the coordinator emits FIRST. Each
    change settles (/status) before the next, so the sequence is exact."""
    join(job, "g0", ["g0"])
    join(job, "g1", ["g0", "g1"])
    sigkill(job, "g1", ["g0"])


def check_exact(evs, job, run, types):
    got = [(e["_key"], e["job"], e["run"], e["seq"], e["type"]) for e in evs]
    want = [(job, job, run, i + 1, t) for i, t in enumerate(types)]
    if got != want:
        lines = ["%-3d got %-60s want %s" % (i, got[i] if i < len(got) else "-", want[i] if i < len(want) else "-")
                 for i in range(max(len(got), len(want)))]
        raise Fail("topic differs from the expected sequence (order, gap or duplicate):\n" + "\n".join(lines))


def test(bindir):
    mock = Mock(os.path.join(bindir, "px-kafka-mock"), TOPIC)
    try:
        run_scenario(bindir, mock)
    except Exception as e:
        state = "running" if mock.p.poll() is None else "exited with %s" % mock.p.returncode
        if isinstance(e, Fail):
            raise Fail("%s (px-kafka-mock %s)" % (e, state))
        raise Fail("%s: %s (px-kafka-mock %s)" % (type(e).__name__, e, state))


def run_scenario(bindir, mock):
    job = Job(bindir, "kafkajob", events=False)
    spec = "kafka:%s/%s?max_inflight=%d" % (mock.boot, TOPIC, CAP)
    print("scratch directory: %s" % job.dir)
    try:
        job.start_coordinator(["--events", spec, "--spill-dir", job.dir, "--min-replicas", "1"])

        def produced():
            return job.metrics()["phalanx_events_produced_total"]

        # 1. brokers up
        join_join_kill(job)
        wait_until(lambda: produced() == 8, 5, "8 events produced")
        wait_until(lambda: job.metrics()["phalanx_events_pending"] == 0, 20, "8 events delivered")
        evs = kcat(mock.boot, TOPIC)
        check(evs, "nothing on the topic")
        run = evs[0]["run"]
        check_exact(evs, "kafkajob", run, FIRST)
        check(evs[5]["group"] == "g1" and evs[6]["group"] == "g1" and evs[7]["groups"] == ["g0"],
              "g1 lost and dropped, quorum [g0]: %s" % evs[5:])

        # 2. outage: membership keeps changing
        mock.cmd("down")
        join(job, "g1", ["g0", "g1"], " during the outage")
        sigkill(job, "g1", ["g0"], " during the outage")
        join(job, "g2", ["g0", "g2"], " during the outage")
        during = ["member_joined", "quorum_formed", "member_lost", "group_dropped", "quorum_formed",
                  "member_joined", "quorum_formed"]
        wait_until(lambda: produced() == 8 + len(during), 5, "%d events produced" % (8 + len(during)))
        m = job.metrics()
        print("during the outage: pending %d spilled %d" % (m["phalanx_events_pending"], m["phalanx_events_spilled"]))
        check(m["phalanx_events_pending"] == len(during), "all %d outage events pending: %s" % (len(during), m))
        check(m["phalanx_events_spilled"] == len(during) - CAP, "all but %d spilled: %s" % (CAP, m))
        check(sorted(job.status()["quorum"]["groups"]) == ["g0", "g2"], "the coordinator keeps working")

        # 3. recovery
        mock.cmd("up")
        wait_until(lambda: job.metrics()["phalanx_events_pending"] == 0, 30, "the backlog delivered")
        check(job.metrics()["phalanx_event_delivery_failures_total"] == 0, "no delivery failures")
        evs = kcat(mock.boot, TOPIC)
        check_exact(evs, "kafkajob", run, FIRST + during)
        check(sorted(evs[-1]["groups"]) == ["g0", "g2"], "last quorum [g0, g2]: %s" % evs[-1])
    finally:
        job.stop()
        mock_alive = mock.p.poll() is None
    check(job.coord.returncode == 0, "coordinator exit status 0 on SIGTERM, got %s" % job.coord.returncode)
    if mock_alive:
        # SIGTERM flushed coordinator_stopped (and maybe a worker-side event or two) before exiting.
        evs = kcat(mock.boot, TOPIC)
        check(evs and evs[-1]["type"] == "coordinator_stopped", "coordinator_stopped delivered last: %s" % evs[-1:])
        check_exact(evs[:len(FIRST + during)], "kafkajob", run, FIRST + during)
        check(all(e["run"] == run for e in evs), "one run")
        check([e["seq"] for e in evs] == list(range(1, len(evs) + 1)), "seq 1..N after shutdown")
    mock.close()
    spill = os.path.join(job.dir, "kafkajob.spill.jsonl")
    check(os.path.exists(spill) and os.path.getsize(spill) == 0, "spill file empty after a clean shutdown")
    shutil.rmtree(job.dir)  # kept on failure, for the logs


if __name__ == "__main__":
    main(test)
