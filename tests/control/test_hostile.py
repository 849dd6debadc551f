"""Peers that speak the protocol correctly but lie (tests/control/rogue_client.c),
against a real coordinator and real workers. One scenario per run:

  impersonation   a second process registering a live member's (group, rank)
                  is refused (IDENTITY_CONFLICT, an identity_conflict event, no
                  member lost, no group dropped); once the holder is SIGKILLed
                  the same registration is admitted (a restarted process).
  forged_finish   run_finished from a peer outside the quorum, and from a
                  quorum member naming a step that is not the job's length, are
                  refused (NOT_AUTHORIZED); training goes on, nobody leaves.
  stale_report    an accusation from a quorum member is evidence only for one
                  heartbeat timeout: a 400 ms pause of the accused member
                  seconds later does not drop it. An accusation from a peer
                  outside the quorum is refused outright.
  stalled_member  a rogue joins the quorum of a training job and heartbeats but
                  never joins the rendezvous: it is dropped as "stalled" after
                  the adaptive stall limit (here its floor, 10 s: the job's
                  steps take milliseconds) and the job commits steps again
                  within seconds (the workers abort the superseded
                  rendezvous).
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, main_scenarios, make_corpus, wait_until  # noqa: E402


class Rogue:
    def __init__(self, job, args):
        self.p = subprocess.Popen([os.path.join(job.bindir, "rogue_client"), "--endpoint", job.endpoint] + args,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait(self, timeout=30):
        out, _ = self.p.communicate(timeout=timeout)
        return out

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def lines_of(out, key):
    return [l.split("=", 1)[1] for l in out.splitlines() if l.startswith(key + "=")]


def events(job, kind, **match):
    return [e for e in job.read_events() if e["type"] == kind and all(e.get(k) == v for k, v in match.items())]


def wait_quorum(job, groups, timeout=15):
    want = sorted(groups)
    wait_until(lambda: sorted(job.status()["quorum"]["groups"]) == want, timeout, "quorum %s" % want)


def control_job(bindir, name, groups, coord_extra=()):
    job = Job(bindir, name)
    job.start_coordinator(list(coord_extra))
    for g in groups:
        job.start_worker(g, 0, 1)
    wait_quorum(job, groups)
    return job


def training_job(bindir, name, groups, coord_extra=()):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-hostile-data-"))
    job = Job(bindir, name)
    job.start_coordinator(list(coord_extra))
    for g in groups:
        job.start_worker(g, 0, 1, ["--steps", "100000", "--model", "tiny", "--data", data, "--global-batch", "8",
                                   "--micro-batch", "4", "--comm-timeout-ms", "20000"])
    wait_quorum(job, groups, 30)
    return job


def step_of(job, group):
    for m in job.status()["members"]:
        if m["group"] == group and m["state"] != "lost":
            return m["step"]
    return -1


def test_impersonation(bindir):
    job = control_job(bindir, "impersonate", ["g0", "g1"])
    try:
        out = Rogue(job, ["--group", "g0", "--rank", "0", "--hold-ms", "1500"]).wait()
        check(lines_of(out, "register") == ["IDENTITY_CONFLICT"], "impersonation of a live member refused, got %r" % out)
        check(events(job, "identity_conflict", group="g0"), "identity_conflict event recorded")
        check(not events(job, "member_lost", group="g0"), "the live holder was not marked lost")
        check(not events(job, "group_dropped"), "no group dropped by an impersonation attempt")
        check(sorted(job.status()["quorum"]["groups"]) == ["g0", "g1"], "quorum unchanged")

        holder = job.workers[("g0", 0)]
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        wait_until(lambda: events(job, "member_lost", group="g0"), 10, "the killed holder is lost")
        out = Rogue(job, ["--group", "g0", "--rank", "0", "--hold-ms", "500"]).wait()
        reg = lines_of(out, "register")
        check(reg and reg[0].startswith("ok"), "a process claiming a dead holder's slot is admitted, got %r" % out)
    finally:
        job.stop()


def test_forged_finish(bindir):
    job = training_job(bindir, "forgefinish", ["g0", "g1"])
    try:
        wait_until(lambda: step_of(job, "g0") >= 3, 60, "3 committed steps")
        # Outside the quorum: refused whatever it claims.
        out = Rogue(job, ["--group", "evil", "--job-steps", "1000000000", "--finish", "1000000000",
                          "--hold-ms", "1500"]).wait()
        check(lines_of(out, "finish") == ["NOT_AUTHORIZED"], "run_finished from outside the quorum refused: %r" % out)
        # Inside the quorum, with a job length nobody else registered with: refused.
        r = Rogue(job, ["--group", "evil2", "--job-steps", "1000000000", "--finish", "1000000000",
                        "--request-quorum", "--hold-ms", "8000"])
        out = r.wait()
        check(any("evil2" in q for q in lines_of(out, "quorum id")) or "evil2" in out,
              "the rogue entered a quorum: %r" % out)
        check(lines_of(out, "finish") == ["NOT_AUTHORIZED"], "run_finished with a wrong step refused: %r" % out)
        check(events(job, "report_refused"), "report_refused events recorded")
        before = step_of(job, "g0")
        wait_until(lambda: step_of(job, "g0") > before + 2, 60, "training goes on after the forged finishes")
        for key, p in job.workers.items():
            check(p.poll() is None, "worker %s still running (exit %s)" % (key, p.poll()))
    finally:
        job.stop()


def test_stale_report(bindir):
    job = control_job(bindir, "stalereport", ["g0", "g1"])
    try:
        out = Rogue(job, ["--group", "outsider", "--accuse", "g1", "--hold-ms", "1000"]).wait()
        check(lines_of(out, "accuse") == ["NOT_AUTHORIZED"], "accusation from outside the quorum refused: %r" % out)
        r = Rogue(job, ["--group", "g2", "--accuse", "g1", "--request-quorum", "--hold-ms", "9000"])
        wait_until(lambda: events(job, "step_failed", group="g2"), 10, "the quorum member's accusation is recorded")
        check(not events(job, "member_lost", group="g1"), "one accusation alone drops nobody")
        time.sleep(2.5)  # past the heartbeat timeout (1 s): the accusation is stale
        g1 = job.workers[("g1", 0)]
        g1.send_signal(signal.SIGSTOP)
        time.sleep(0.4)
        g1.send_signal(signal.SIGCONT)
        time.sleep(1.5)
        lost = events(job, "member_lost", group="g1")
        check(not lost, "a 400 ms pause after a stale accusation must not drop g1: %r" % lost)
        r.kill()
    finally:
        job.stop()


def test_stalled_member(bindir):
    job = training_job(bindir, "stalled", ["g0", "g1"])  # the adaptive stall limit
    try:
        wait_until(lambda: step_of(job, "g0") >= 3, 60, "3 committed steps")
        r = Rogue(job, ["--group", "g9", "--request-quorum", "--hold-ms", "60000"])
        wait_until(lambda: "g9" in job.status()["quorum"]["groups"], 15, "the rogue is in the quorum")
        # Well inside the 60 s a fixed limit gave: the job's steps take
        # milliseconds, so the limit is its floor of a few seconds.
        lost = wait_until(lambda: events(job, "member_lost", group="g9"), 30, "the rogue dropped")
        check(lost[0]["reason"] == "stalled", "dropped as stalled, got %r" % lost[0]["reason"])
        with open(os.path.join(job.dir, "coordinator.log")) as f:
            limits = re.findall(r"member_stalled group=g9 .* limit_ms=(\d+) \(adaptive\)", f.read())
        check(limits and int(limits[0]) == 10000, "the adaptive limit was its 10 s floor: %s" % limits)
        t_drop = time.monotonic()
        before = step_of(job, "g0")
        wait_until(lambda: step_of(job, "g0") > before, 5,
                   "a step committed within 5 s of the drop (the superseded rendezvous is aborted)")
        print("resumed %.1f s after the rogue was dropped" % (time.monotonic() - t_drop))
        for g in ("g0", "g1"):
            check(not events(job, "member_lost", group=g), "honest group %s never lost" % g)
        r.kill()
    finally:
        job.stop()


def test_auth_flood(bindir):
    """20,000 frames with no job token: every one refused and counted, but the
    event log gets at most ~200 auth_rejected events a second plus summaries."""
    tokdir = tempfile.mkdtemp(prefix="phalanx-authflood-")
    tok = os.path.join(tokdir, "token")
    with open(tok, "w") as f:
        f.write("s3cret-token\n")
    job = Job(bindir, "authflood")
    job.start_coordinator(["--token-file", tok])
    try:
        t0 = time.monotonic()
        out = Rogue(job, ["--group", "flood", "--spam", "20000", "--hold-ms", "20000"]).wait(60)
        elapsed = time.monotonic() - t0
        check("replies=20000" in out, "every flooded frame answered: %r" % out)
        wait_until(lambda: job.metrics().get("phalanx_auth_rejected_total") == 20000, 10, "20000 rejections counted")
        time.sleep(1.2)  # the last summary is written a second after its window opened
        evs = events(job, "auth_rejected")
        total = sum(e.get("count", 1) for e in evs)
        check(total == 20000, "auth_rejected counts add up to 20000, got %d in %d events" % (total, len(evs)))
        bound = 200 * (elapsed + 2) + elapsed + 2
        check(len(evs) <= bound, "%d auth_rejected events for a %.1f s flood (bound %d)" % (len(evs), elapsed, bound))
        size = os.path.getsize(job.events_path)
        print("flood of 20000 frames: %d events, %d bytes of event log, %.1f s" % (len(evs), size, elapsed))
    finally:
        job.stop()


def test_late_adoption(bindir):
    """A restarted coordinator adopts its workers' quorum during its recovery
    window only: afterwards a quorum id claimed in a registration changes
    nothing (before the fix the adopted flag stayed set for good)."""
    # The recovery window is one heartbeat timeout from the coordinator's
    # start: 4 s rather than the default 1 s, so that both workers, noticing
    # the restart on a loaded machine, re-register inside it.
    window = ["--heartbeat-timeout-ms", "4000"]
    job = control_job(bindir, "lateadopt", ["g0", "g1"], window)
    try:
        qid = job.status()["quorum"]["id"]
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        job.start_coordinator(window)
        wait_until(lambda: events(job, "quorum_adopted", quorum_id=qid, group="g1"), 10, "the restarted coordinator adopts")
        time.sleep(4.5)  # past the recovery window
        check(job.status()["quorum"]["id"] == qid, "adopted quorum kept")
        out = Rogue(job, ["--group", "zz", "--quorum-id", "999999", "--step", "5", "--hold-ms", "1500"]).wait()
        check(lines_of(out, "register")[:1] and lines_of(out, "register")[0].startswith("ok"), "registered: %r" % out)
        st = job.status()
        check(st["quorum"]["id"] == qid and sorted(st["quorum"]["groups"]) == ["g0", "g1"],
              "quorum unchanged after a claim of quorum 999999: %r" % st["quorum"])
        check(not events(job, "quorum_adopted", quorum_id=999999), "no adoption of a claimed quorum")
    finally:
        job.stop()


SCENARIOS = {
    "auth_flood": test_auth_flood,
    "late_adoption": test_late_adoption,
    "impersonation": test_impersonation,
    "forged_finish": test_forged_finish,
    "stale_report": test_stale_report,
    "stalled_member": test_stalled_member,
}

if __name__ == "__main__":
    main_scenarios(SCENARIOS)
