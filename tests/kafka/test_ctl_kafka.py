"""phalanxctl events reading the Kafka sink (tools/ctl_kafka.c) of a real
phalanx-coordinator publishing to px-kafka-mock (3 brokers, the topic with 1
partition):

1. Two groups join, one is SIGKILLed: 8 events on the topic. `phalanxctl
   events --events kafka:BOOT/TOPIC` prints exactly the lines kcat reads from
   the topic (byte for byte, same order: seq 1..8, the expected types) and
   exits 0 at the end of the partition.
2. --type (twice) and --group select exactly the matching lines, in order.
3. --follow prints the backlog, then an event published after it started
   (a third group joins), and exits 0 on SIGTERM.
4. Errors: an unreachable broker exits 1 naming it within --timeout-ms (plus
   a margin for a loaded machine); a topic the brokers lack exits 1 naming it
   and is not created by the attempt; malformed specs exit 2 naming the spec.
5. After the coordinator's SIGTERM, coordinator_stopped is there too: the
   reader and kcat agree again.

Every wait is on a condition (/status, /metrics, lines read), not a sleep."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, LineCollector, check, die_with_test, free_port, main, wait_until  # noqa: E402
from test_coordinator_kafka import FIRST, Mock, join, join_join_kill  # noqa: E402

TOPIC = "phalanx-events"
TIMEOUT_MS = 2000


def kcat_lines(boot, topic):
    """The topic's messages, one line each, as kcat reads them."""
    out = subprocess.run(["timeout", "30", "kcat", "-b", boot, "-t", topic, "-C", "-e", "-o", "beginning", "-q",
                          "-f", "%s\n"], capture_output=True, text=True)
    check(out.returncode == 0, "kcat failed: %s" % out.stderr)
    return out.stdout.splitlines()


def ctl(bindir, *args):
    t = time.monotonic()
    r = subprocess.run([os.path.join(bindir, "phalanxctl"), "events", "--json"] + list(args), capture_output=True,
                       text=True, timeout=60)
    return r, time.monotonic() - t


class Follower:
    """phalanxctl events --follow, its stdout collected on a thread."""

    def __init__(self, bindir, spec):
        self.p = subprocess.Popen([os.path.join(bindir, "phalanxctl"), "events", "--json", "--follow", "--events", spec],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=die_with_test)
        self.out = LineCollector(self.p.stdout)

    def got(self):
        return self.out.lines()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            raise Fail("phalanxctl events --follow did not exit within 10 s of SIGTERM")
        finally:
            self.out.join()


def test(bindir):
    mock = Mock(os.path.join(bindir, "px-kafka-mock"), TOPIC)
    try:
        run(bindir, mock)
    finally:
        mock.close()


def run(bindir, mock):
    job = Job(bindir, "ctlkafka", events=False)
    spec = "kafka:%s/%s" % (mock.boot, TOPIC)
    follower = None
    try:
        job.start_coordinator(["--events", spec, "--spill-dir", job.dir, "--min-replicas", "1"])

        def delivered(n):
            m = job.metrics()
            return m["phalanx_events_produced_total"] == n and m["phalanx_events_pending"] == 0

        # 1. the whole topic, as kcat reads it
        join_join_kill(job)
        wait_until(lambda: delivered(8), 20, "8 events delivered")
        want = kcat_lines(mock.boot, TOPIC)
        r, _ = ctl(bindir, "--events", spec)
        check(r.returncode == 0, "events --events %s exits 0: %d %r" % (spec, r.returncode, r.stderr))
        got = r.stdout.splitlines()
        check(got == want, "phalanxctl and kcat differ:\nphalanxctl %s\nkcat       %s" % (got, want))
        evs = [json.loads(l) for l in got]
        check([e["seq"] for e in evs] == list(range(1, 9)), "seq 1..8: %s" % [e["seq"] for e in evs])
        check([e["type"] for e in evs] == FIRST, "types: %s" % [e["type"] for e in evs])
        people = subprocess.run([os.path.join(bindir, "phalanxctl"), "events", "--events", spec], capture_output=True,
                                text=True, timeout=60).stdout.splitlines()
        check([l.split()[3] for l in people] == FIRST and all(l.split()[2] == "#%d" % e["seq"] for l, e in
                                                              zip(people, evs)),
              "without --json: a line for people per event, in order: %s" % people)

        # 2. filters: exactly the matching lines, in the topic's order
        r, _ = ctl(bindir, "--events", spec, "--type", "member_joined", "--type", "member_lost")
        pick = [l for l, e in zip(got, evs) if e["type"] in ("member_joined", "member_lost")]
        check(r.returncode == 0 and r.stdout.splitlines() == pick and len(pick) == 3,
              "--type twice: %d %s, want %s" % (r.returncode, r.stdout.splitlines(), pick))
        r, _ = ctl(bindir, "--events", spec, "--group", "g1")
        pick = [l for l, e in zip(got, evs) if e.get("group") == "g1"]
        check(r.returncode == 0 and r.stdout.splitlines() == pick and len(pick) == 3,
              "--group g1: %d %s, want %s" % (r.returncode, r.stdout.splitlines(), pick))
        r, _ = ctl(bindir, "--events", spec, "--type", "member_lost", "--group", "g0")
        check(r.returncode == 0 and r.stdout == "", "--type member_lost --group g0 is empty: %r" % r.stdout)

        # 3. --follow: the backlog, then an event published after it started; SIGTERM ends it with 0
        follower = Follower(bindir, spec)
        wait_until(lambda: follower.got() == got, 10, "--follow to print the 8 events already there", 0.05)
        join(job, "g2", ["g0", "g2"])
        wait_until(lambda: delivered(10), 20, "10 events delivered")

        def joined_g2():
            return any(json.loads(l)["type"] == "member_joined" and json.loads(l).get("group") == "g2"
                       for l in follower.got())
        wait_until(joined_g2, 10, "--follow to print g2's member_joined", 0.05)
        wait_until(lambda: len(follower.got()) == 10, 10, "--follow to print quorum [g0, g2]", 0.05)
        check(follower.got() == kcat_lines(mock.boot, TOPIC), "--follow printed what kcat reads")
        rc = follower.stop()
        check(rc == 0, "events --follow exits 0 on SIGTERM, got %s: %s" % (rc, follower.p.stderr.read()))
        follower = None

        # 4. errors
        port = free_port()  # nothing listens there
        r, took = ctl(bindir, "--events", "kafka:127.0.0.1:%d/%s" % (port, TOPIC), "--timeout-ms", str(TIMEOUT_MS))
        check(r.returncode == 1 and "127.0.0.1:%d" % port in r.stderr and "cannot reach" in r.stderr,
              "unreachable broker: exit 1 naming it: %d %r" % (r.returncode, r.stderr))
        check(TIMEOUT_MS / 1000 - 0.2 < took < TIMEOUT_MS / 1000 + 5, "gave up after --timeout-ms: %.1f s" % took)
        r, took = ctl(bindir, "--events", "kafka:%s/no-such-topic" % mock.boot, "--timeout-ms", str(TIMEOUT_MS))
        check(r.returncode == 1 and "'no-such-topic' not found" in r.stderr,
              "unknown topic: exit 1 naming it: %d %r" % (r.returncode, r.stderr))
        check(took < TIMEOUT_MS / 1000 + 5, "unknown topic: gave up after --timeout-ms: %.1f s" % took)
        listing = subprocess.run(["timeout", "30", "kcat", "-b", mock.boot, "-L"], capture_output=True, text=True)
        check(listing.returncode == 0 and '"%s"' % TOPIC in listing.stdout and "no-such-topic" not in listing.stdout,
              "the reader did not create the topic it looked for: %s" % listing.stdout)
        for bad, part in [("kafka:127.0.0.1/%s" % TOPIC, "bad broker '127.0.0.1'"),
                          ("kafka:%s" % mock.boot, "missing '/TOPIC'"),
                          ("kafka:127.0.0.1:9092/bad topic", "bad topic 'bad topic'")]:
            r, took = ctl(bindir, "--events", bad)
            check(r.returncode == 2 and bad in r.stderr and part in r.stderr and "--events" in r.stderr,
                  "malformed %r: exit 2 naming it: %d %r" % (bad, r.returncode, r.stderr))
            check(took < 5, "a malformed spec is refused at once: %.1f s" % took)
    finally:
        if follower:
            follower.stop()
        job.stop()
    check(job.coord.returncode == 0, "coordinator exit status 0 on SIGTERM, got %s" % job.coord.returncode)

    # 5. coordinator_stopped, flushed on SIGTERM, is read too
    want = kcat_lines(mock.boot, TOPIC)
    r, _ = ctl(bindir, "--events", spec)
    check(r.returncode == 0 and r.stdout.splitlines() == want, "after the stop: phalanxctl %s, kcat %s"
          % (r.stdout.splitlines(), want))
    check(json.loads(want[-1])["type"] == "coordinator_stopped", "coordinator_stopped last: %s" % want[-1])
    shutil.rmtree(job.dir)  # kept on failure, for the logs


if __name__ == "__main__":
    main(test)
