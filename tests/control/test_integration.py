"""Integration: a coordinator and 4 workers (2 groups x 2 ranks) as real
processes on loopback. SIGKILL one worker: member_lost, group_dropped and a
new quorum_formed without its group must follow within the heartbeat timeout
plus one tick (in practice far sooner: the closed TCP connection plus missed
heartbeats are two signals). Restart it: it rejoins and a new quorum holds
both groups again. Each member's data host (--data-host, given to g1's
workers, left at its default 127.0.0.1 for g0's) is in /status, its text
view and member_joined."""
import json
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main, wait_until  # noqa: E402

HB_TIMEOUT_MS = 1000
TICK_MS = 10
SLACK_MS = 150  # process scheduling on a loaded 2-core machine


def test(bindir):
    job = Job(bindir, "integ")
    try:
        job.start_coordinator()
        data_host = {"g0": "127.0.0.1", "g1": "127.0.0.2"}
        for g in ("g0", "g1"):
            for r in (0, 1):
                job.start_worker(g, r, 2, ["--data-host", data_host[g]] if g == "g1" else [])

        def both_groups():
            st = job.status()
            return sorted(st["quorum"]["groups"]) == ["g0", "g1"] and len(job.live_members(st)) == 4 and st
        st = wait_until(both_groups, 10, "a quorum of g0 and g1 with 4 live members")
        check(all(m["state"] == "healthy" for m in st["members"]), "all members healthy: %s" % st["members"])
        check(all(m["data_host"] == data_host[m["group"]] for m in st["members"]),
              "/status: each member's data_host: %s" % st["members"])
        text = job.get("/status.txt")
        for g in ("g0", "g1"):
            check(re.search(r"^%s\s+\d+\s+\d+\s+\S+\s+%s\s" % (g, re.escape(data_host[g])), text, re.M),
                  "/status.txt: %s's DATA HOST %s:\n%s" % (g, data_host[g], text))
        joined = [e for e in job.read_events() if e["type"] == "member_joined"]
        check(len(joined) == 4 and all(e["data_host"] == data_host[e["group"]] for e in joined),
              "member_joined carries each member's data_host: %s" % joined)
        q1 = st["quorum"]["id"]

        victim = job.workers[("g1", 0)]
        t_kill = time.time()
        victim.send_signal(signal.SIGKILL)
        victim.wait()

        def dropped():
            evs = job.read_events()
            types = [e["type"] for e in evs]
            return evs if ("member_lost" in types and "group_dropped" in types and
                           any(e["type"] == "quorum_formed" and e["quorum_id"] > q1 for e in evs)) else None
        evs = wait_until(dropped, 5, "member_lost, group_dropped and a new quorum_formed")
        lost = [e for e in evs if e["type"] == "member_lost"]
        check(len(lost) == 1 and lost[0]["group"] == "g1" and lost[0]["rank"] == 0,
              "exactly g1/0 lost: %s" % lost)
        drop = [e for e in evs if e["type"] == "group_dropped"]
        check(len(drop) == 1 and drop[0]["group"] == "g1", "g1 dropped: %s" % drop)
        newq = [e for e in evs if e["type"] == "quorum_formed" and e["quorum_id"] > q1][0]
        check(newq["groups"] == ["g0"], "new quorum without g1: %s" % newq)
        seqs = [e["seq"] for e in evs]
        check(seqs == list(range(1, len(seqs) + 1)), "event seq monotone without gaps: %s" % seqs)
        order = [e["type"] for e in evs if e["type"] in ("member_lost", "group_dropped") or
                 (e["type"] == "quorum_formed" and e["quorum_id"] > q1)]
        check(order[:3] == ["member_lost", "group_dropped", "quorum_formed"], "order: %s" % order)
        latency_ms = newq["ts"] - t_kill * 1000
        print("kill -> new quorum: %.0f ms" % latency_ms)
        check(latency_ms <= HB_TIMEOUT_MS + TICK_MS + SLACK_MS,
              "new quorum %.0f ms after the kill, limit %d" % (latency_ms, HB_TIMEOUT_MS + TICK_MS + SLACK_MS))

        job.start_worker("g1", 0, 2)

        def rejoined():
            st = job.status()
            return (sorted(st["quorum"]["groups"]) == ["g0", "g1"] and st["quorum"]["id"] > newq["quorum_id"]
                    and len(job.live_members(st)) == 4 and st)
        st = wait_until(rejoined, 10, "g1 back in a new quorum")
        evs = job.read_events()
        joined = [e for e in evs if e["type"] == "member_joined" and e["group"] == "g1" and e["rank"] == 0]
        check(len(joined) == 2, "g1/0 joined twice (start and restart): %s" % joined)
        m = job.metrics()
        check(m["phalanx_members{state=\"healthy\"}"] == 4, "metrics: 4 healthy members: %s" % m)
        check(m["phalanx_quorum_groups"] == 2, "metrics: 2 quorum groups")
        html = job.get("/")
        check('id="loss-curve"' in html and "/api/history" in html, "the dashboard page draws from /api/history")
        hist = json.loads(job.get("/api/history"))
        groups = sorted(set(m["group"] for m in job.status()["members"]))
        check(sorted(g["name"] for g in hist["groups"]) == groups, "/api/history lists the groups %s: %s" % (groups, hist))
        check(any(e["type"] == "group_dropped" and e["group"] == "g1" for e in hist["events"]),
              "/api/history marks g1's drop: %s" % hist["events"])
    finally:
        job.stop()
    # SIGTERM: the coordinator flushed and logged its stop.
    evs = job.read_events()
    check(evs and evs[-1]["type"] == "coordinator_stopped", "coordinator_stopped is the last event")
    check(job.coord.returncode == 0, "coordinator exit status 0 on SIGTERM, got %s" % job.coord.returncode)


if __name__ == "__main__":
    main(test)
