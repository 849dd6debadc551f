"""Bounded state under hostile load (docs/operations.md, "Limits on what
peers can grow"): a live coordinator
with 2,000 members churning for a minute plus store floods keeps its memory
bounded and keeps answering.

fuzz_client --mode churn (tests/control/fuzz_client.c) registers 2,000
one-rank groups that heartbeat every second, then
  - registers 500 more at once against --max-members 2400: the surplus must
    be refused RESOURCE_LIMIT;
  - floods the rendezvous store: new keys until the key limit, 16 KiB values
    until the byte limit, parked waits until the waiter limit (each flood
    gives up at a cap, so a coordinator without limits fails here rather
    than eating the machine's memory);
  - churns for PHALANX_CHURN_S seconds (default 60): 50 members a second are
    replaced (new identity and name, same name, or left silent with the
    connection open), while refused store requests keep coming.
Meanwhile, every second, the coordinator's VmRSS (/proc/PID/status) is
sampled with the heap bytes in use (/metrics phalanx_heap_bytes), and
/status must answer within 5 s with no more members than
--max-members (lost members expire or are evicted). At the end: memory below
a generous cap and not growing over the second half of the run, every limit
refused at least once and counted in /metrics, the limit_reached events
rate-limited and adding up to the counters, and a fresh member can still
join.

About the memory check: ZeroMQ allocates about 75 KB of queues and buffers
per connection when it opens, and their pages are touched gradually as
messages pass, so RSS rises towards the heap in use for a while; the pages
that closed connections freed are handed back by the heap trimmer
(coordinator/heap_trim.c), which lets RSS rise by a sixteenth between two
trims. The RSS check allows for both (control_churn_rss asserts the plateau
under churn itself); the heap in use must stay flat (within a few
connections' worth) over the second half, while a coordinator without
limits would grow it by the refused store requests (800 KB/s)."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, check, key_values, main, metrics_by_series, rss_mb, wait_until  # noqa: E402

MEMBERS = 2000
PROBE = 500
MAX_MEMBERS = 2400
MAX_KEYS = 20000
MAX_BYTES = 8 << 20
MAX_WAITERS = 5000
CHURN_S = int(os.environ.get("PHALANX_CHURN_S", "60"))
RSS_CAP_MB = 400          # generous: the bounded state itself is a few tens of MB
GROWTH_SLACK_MB = 24      # RSS: connections' pages being touched, and trims' sawtooth (see above)
HEAP_SLACK_MB = 8         # heap in use: connections open and closing (~75 KB each)
LIMIT_EVENTS_PER_S = 10   # coordinator.c: limit_reached events per limit per second
KINDS = ("members", "store_keys", "store_bytes", "store_waiters")


def status_members(job):
    t0 = time.monotonic()
    with urllib.request.urlopen("http://%s/status" % job.http, timeout=5) as r:
        body = r.read()
    st = json.loads(body.decode("utf-8", "replace"))
    return len(st["members"]), sum(1 for m in st["members"] if m["state"] != "lost"), time.monotonic() - t0


def heap_mb(job):
    m = job.metrics()
    check("phalanx_heap_bytes" in m, "/metrics lacks phalanx_heap_bytes")
    return m["phalanx_heap_bytes"] / (1 << 20)


def limit_metrics(job):
    m = job.metrics()
    out = {}
    for kind in KINDS:
        series = 'phalanx_limit_refusals_total{limit="%s"}' % kind
        check(series in m, "/metrics lacks %s" % series)
        out[kind] = int(m[series])
    for name in ("phalanx_members_expired_total", "phalanx_store_keys", "phalanx_store_bytes", "phalanx_store_waiters"):
        check(name in m, "/metrics lacks %s" % name)
        out[name] = int(m[name])
    return out


def test(bindir):
    job = Job(bindir, "limits", extra_coord_args=[
        "--heartbeat-interval-ms", "1000", "--heartbeat-timeout-ms", "3000", "--quiet",
        "--max-members", str(MAX_MEMBERS), "--max-store-keys", str(MAX_KEYS),
        "--max-store-bytes", str(MAX_BYTES), "--max-store-waiters", str(MAX_WAITERS)])
    client = None
    try:
        job.start_coordinator()
        pid = job.coord.pid
        out_path = os.path.join(job.dir, "churn.out")
        cmd = [os.path.join(bindir, "fuzz_client"), "--endpoint", job.endpoint, "--job", job.job, "--mode", "churn",
               "--members", str(MEMBERS), "--probe-members", str(PROBE), "--churn-ms", str(CHURN_S * 1000),
               "--churn-per-s", "50", "--hb-ms", "1000", "--flood-cap", str(4 * MAX_KEYS), "--timeout-ms", "10000"]
        client = subprocess.Popen(cmd, stdout=open(out_path, "w"), stderr=subprocess.STDOUT)
        samples = []  # (t, rss_mb, members_in_table, live, status_s, heap_mb)
        problems = []
        unanswered = []  # /status or /metrics requests that failed
        t0 = time.monotonic()
        while client.poll() is None:
            if time.monotonic() - t0 > CHURN_S + 90:
                raise Fail("fuzz_client --mode churn did not finish within %d s; see %s" % (CHURN_S + 90, out_path))
            check(job.coord.poll() is None, "coordinator exited (status %s); log in %s" % (job.coord.returncode, job.dir))
            try:
                n, live, took = status_members(job)
            except Exception as e:  # noqa: BLE001 - any failure to answer is the finding
                unanswered.append("%.0f s: %s" % (time.monotonic() - t0, e))
                n, live, took = -1, -1, -1
            try:
                heap = heap_mb(job)
            except Exception as e:  # noqa: BLE001
                unanswered.append("%.0f s: /metrics: %s" % (time.monotonic() - t0, e))
                heap = 0
            samples.append((time.monotonic() - t0, rss_mb(pid), n, live, took, heap))
            time.sleep(1.0)
        with open(out_path) as f:
            out_text = f.read()
        check(client.returncode == 0, "fuzz_client --mode churn failed (rc %d):\n%s" % (client.returncode, out_text[-3000:]))
        out = key_values(out_text)
        print("client: %s" % " ".join("%s=%s" % kv for kv in sorted(out.items())))
        churn_start = next((s[0] for s in samples if s[3] >= MEMBERS), samples[0][0])
        during = [s for s in samples if s[0] >= churn_start]
        check(len(during) >= 10, "too few samples during the churn: %d" % len(during))
        peak_rss = max(s[1] for s in samples)
        print("rss_mb: start %.1f peak %.1f end %.1f; table peak %d; slowest /status %.2f s; %d samples" % (
            samples[0][1], peak_rss, samples[-1][1], max(s[2] for s in samples), max(s[4] for s in samples), len(samples)))
        print("rss_mb every 5 s: %s" % " ".join("%.0f" % s[1] for s in samples[::5]))
        print("heap_mb every 5 s: %s" % " ".join("%.1f" % s[5] for s in samples[::5]))

        if unanswered:
            problems.append("%d of %d /status or /metrics requests failed (first: %s)"
                            % (len(unanswered), 2 * len(samples), unanswered[0]))
        # Members: the surplus refused, the table never above the limit.
        if int(out.get("probe_refused", 0)) < 1:
            problems.append("%d extra registers against --max-members %d with %d members: none refused "
                            "(probe_accepted=%s)" % (PROBE, MAX_MEMBERS, MEMBERS, out.get("probe_accepted")))
        over = [s for s in samples if s[2] > MAX_MEMBERS]
        if over:
            problems.append("the member table held %d entries (> --max-members %d) at %.0f s: lost members are "
                            "neither expired nor evicted" % (over[0][2], MAX_MEMBERS, over[0][0]))
        # Store floods: each limit refused.
        for kind, key in (("key", "flood_key_refused"), ("bytes", "flood_bytes_refused"), ("waiter", "flood_waiter_refused")):
            if int(out.get(key, 0)) < 1:
                problems.append("store flood (%s): %s requests sent and none refused: no limit"
                                % (kind, out.get("flood_%s_sent" % kind)))
        # Memory: bounded, and flat over the second half.
        if peak_rss > RSS_CAP_MB:
            problems.append("coordinator RSS peaked at %.0f MB (cap %d MB)" % (peak_rss, RSS_CAP_MB))
        half = during[len(during) // 2:]
        quarter = during[len(during) // 4:len(during) // 2]
        if quarter and half:
            late, mid = max(s[1] for s in half), max(s[1] for s in quarter)
            if late > mid * 1.15 + GROWTH_SLACK_MB:
                problems.append("coordinator RSS still growing in the second half of the churn: %.1f MB after "
                                "%.1f MB in the second quarter" % (late, mid))
            late, mid = max(s[5] for s in half), max(s[5] for s in quarter)
            if late > mid + HEAP_SLACK_MB:
                problems.append("coordinator heap in use still growing in the second half of the churn: %.1f MB "
                                "after %.1f MB in the second quarter" % (late, mid))
        if problems:
            raise Fail("; ".join(problems) + " (scratch dir %s)" % job.dir)

        lm = limit_metrics(job)
        print("metrics: %s" % lm)
        check(lm["members"] >= int(out["probe_refused"]),
              "phalanx_limit_refusals_total{limit=members} %d < %s refused registers" % (lm["members"], out["probe_refused"]))
        for kind, key in (("store_keys", "keys_refused"), ("store_bytes", "bytes_refused"), ("store_waiters", "waiters_refused")):
            check(lm[kind] >= int(out[key]) >= 1, "phalanx_limit_refusals_total{limit=%s} %d, client saw %s refusals"
                  % (kind, lm[kind], out[key]))
        check(lm["phalanx_members_expired_total"] >= 1, "no lost member was ever removed from the table")
        check(lm["phalanx_store_keys"] <= MAX_KEYS and lm["phalanx_store_bytes"] <= MAX_BYTES and
              lm["phalanx_store_waiters"] <= MAX_WAITERS, "store gauges above the limits: %s" % lm)

        # Still serving: a fresh member joins once the churned ones are gone.
        wait_until(lambda: status_members(job)[1] < MAX_MEMBERS - 10, 30, "the churn client's members to be lost")
        v = subprocess.run([os.path.join(bindir, "fuzz_client"), "--endpoint", job.endpoint, "--job", job.job,
                            "--mode", "valid"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        check(v.returncode == 0 and "valid_client=ok" in v.stdout, "a fresh member could not join: %s" % v.stdout[-1000:])

        # Events: every refusal accounted for, at a bounded rate.
        final = limit_metrics(job)
        job.coord.send_signal(signal.SIGTERM)
        job.coord.wait(timeout=15)
        evs = [e for e in job.read_events() if e["type"] == "limit_reached"]
        elapsed = samples[-1][0] + 10
        for kind in KINDS:
            mine = [e for e in evs if e.get("limit") == kind]
            total = sum(int(e.get("count", 0)) for e in mine)
            check(total == final[kind], "limit_reached events for %s add up to %d, /metrics says %d"
                  % (kind, total, final[kind]))
            check(len(mine) <= (LIMIT_EVENTS_PER_S + 1) * elapsed + 2,
                  "%d limit_reached events for %s in %.0f s: not rate-limited" % (len(mine), kind, elapsed))
        print("limit_reached events: %d for %d refusals" % (len(evs), sum(final[k] for k in KINDS)))
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        job.stop()


if __name__ == "__main__":
    main(test)
