"""Group-level liveness (--liveness group): 2 groups x 3 ranks of `tiny`
training under phalanx-launch, ranks heartbeating their group's rank 0,
which reports for them (docs/protocol.md "Group-level liveness").

Scenarios (one ctest each):
  train    the coordinator hears the leaders only (heartbeats per second
           about groups x rate, not ranks x rate; the other ranks are
           reported "via_leader"); a SIGKILLed rank 2 drops its group and
           its restarted process heals back; a SIGSTOPped leader drops its
           group by the heartbeat timeout while its ranks fall back to
           heartbeating the coordinator (not lost), and after SIGCONT the
           group comes back and training goes on. The quorum changes reach
           the leaders as deltas (docs/protocol.md "Quorum deltas").
  restart  the coordinator SIGKILLed and restarted: the leaders register
           again, the leaders' digests name ranks the new coordinator does
           not know, those ranks are told (by their leader) to register
           again, all 6 do, the running quorum is adopted and training goes
           on."""
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, Launch, check, main_scenarios, make_corpus, wait_until  # noqa: E402

GROUPS, RANKS, RATE_HZ = 2, 3, 10


def start(bindir, name):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-%s-data-" % name))
    job = Job(bindir, name)
    job.start_coordinator()
    launch = Launch(bindir, ["--coordinator", job.endpoint, "--job", job.job, "--groups", str(GROUPS),
                             "--ranks-per-group", str(RANKS), "--model", "tiny", "--steps", "100000",
                             "--data", data, "--", "--global-batch", "12", "--micro-batch", "2",
                             "--liveness", "group"], name=name)
    wait_until(lambda: len(job.status()["quorum"]["groups"]) == GROUPS and launch.last_step() >= 5, 90,
               "%d groups training" % GROUPS)
    return job, launch


def member(st, group, rank):
    for m in st["members"]:
        if m["group"] == group and m["rank"] == rank and m["state"] != "lost":
            return m
    return None


def dropped(job, group, after):
    return [e for e in job.read_events()[after:] if e["type"] == "group_dropped" and e["group"] == group]


def back_and_training(job, launch, what, timeout_s=60):
    wait_until(lambda: sorted(job.status()["quorum"]["groups"]) == ["g0", "g1"], timeout_s, what)
    s = launch.last_step()
    wait_until(lambda: launch.last_step() >= s + 3, 60, "training goes on after: " + what)


def train(bindir):
    job, launch = start(bindir, "liveness")
    try:
        # The coordinator's load: leaders only.
        m0 = job.metrics()
        time.sleep(3)
        m1 = job.metrics()
        hb = (m1["phalanx_heartbeats_total"] - m0["phalanx_heartbeats_total"]) / 3.0
        relayed = (m1["phalanx_relayed_rank_reports_total"] - m0["phalanx_relayed_rank_reports_total"]) / 3.0
        print("heartbeats/s at the coordinator: %.1f (per-rank liveness: %d); ranks reported by leaders: %.1f/s"
              % (hb, GROUPS * RANKS * RATE_HZ, relayed))
        check(hb <= 1.5 * GROUPS * RATE_HZ, "about %d heartbeats/s (the leaders'), got %.1f" % (GROUPS * RATE_HZ, hb))
        check(relayed >= 0.5 * GROUPS * (RANKS - 1) * RATE_HZ,
              "the leaders report their %d ranks about %d times/s, got %.1f"
              % (GROUPS * (RANKS - 1), GROUPS * (RANKS - 1) * RATE_HZ, relayed))
        st = job.status()
        for g in ("g0", "g1"):
            check(not member(st, g, 0).get("via_leader"), "%s rank 0 heartbeats itself: %s" % (g, member(st, g, 0)))
            for r in range(1, RANKS):
                check(member(st, g, r).get("via_leader") is True, "%s rank %d via its leader: %s" % (g, r, member(st, g, r)))

        # A rank behind its leader dies: its group drops, it comes back.
        n = len(job.read_events())
        os.kill(member(st, "g1", 2)["pid"], signal.SIGKILL)
        wait_until(lambda: dropped(job, "g1", n), 5, "g1 dropped after its rank 2 was killed")
        lost = [e for e in job.read_events()[n:] if e["type"] == "member_lost" and e["group"] == "g1"]
        check(lost and lost[0]["rank"] == 2, "the lost member is g1 rank 2: %s" % lost)
        back_and_training(job, launch, "g1 restarted, healed and back")
        wait_until(lambda: any(e["type"] == "heal_finished" and e["group"] == "g1" for e in job.read_events()[n:]), 10,
                   "g1 healed (heal_finished)")
        # The quorum changes reached the survivors as deltas (the leaders held the quorum before).
        deltas = job.metrics()["phalanx_quorum_delta_pushes_total"]
        check(deltas >= 1, "quorum changes pushed as deltas: %s" % deltas)

        # A frozen leader: its group drops; its ranks heartbeat the coordinator meanwhile.
        st = job.status()
        leader = member(st, "g0", 0)["pid"]
        n = len(job.read_events())
        os.kill(leader, signal.SIGSTOP)
        try:
            wait_until(lambda: dropped(job, "g0", n), 5, "g0 dropped after its leader froze")
            time.sleep(1.5)  # past the heartbeat timeout again: a rank without its fallback would be lost by now
            st = job.status()
            for r in range(1, RANKS):
                m = member(st, "g0", r)
                check(m is not None, "g0 rank %d not lost while its leader is frozen: %s" % (r, st["members"]))
                check(not m.get("via_leader"), "g0 rank %d heartbeats the coordinator itself now: %s" % (r, m))
        finally:
            os.kill(leader, signal.SIGCONT)
        back_and_training(job, launch, "g0 back after SIGCONT")
        st = job.status()
        wait_until(lambda: all(member(job.status(), "g0", r) and member(job.status(), "g0", r).get("via_leader")
                               for r in range(1, RANKS)), 10, "g0's ranks report through their leader again")
    except Fail as e:
        raise Fail("%s\n(logs in %s and %s)\n%s" % (e, job.dir, launch.dir, launch.tail(20)))
    finally:
        launch.terminate()
        job.stop()


def restart(bindir):
    job, launch = start(bindir, "liveness-restart")
    try:
        qid = job.status()["quorum"]["id"]
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        time.sleep(2)
        t0 = time.monotonic()
        job.start_coordinator()
        wait_until(lambda: len(job.live_members()) == GROUPS * RANKS, 5,
                   "all %d ranks registered again (the non-leaders told by their leader)" % (GROUPS * RANKS))
        print("all ranks back %.0f ms after the restart" % ((time.monotonic() - t0) * 1000))
        st = wait_until(lambda: len(job.status()["quorum"]["groups"]) == GROUPS and job.status(), 5, "quorum adopted")
        check(st["quorum"]["id"] == qid, "the running quorum %d is adopted, got %d" % (qid, st["quorum"]["id"]))
        wait_until(lambda: all(member(job.status(), g, r) and member(job.status(), g, r).get("via_leader")
                               for g in ("g0", "g1") for r in range(1, RANKS)), 5,
                   "the non-leaders report through their leaders again")
        time.sleep(1.5)  # past the recovery window
        st = job.status()
        check(st["quorum"]["id"] == qid and len(st["quorum"]["groups"]) == GROUPS, "quorum kept: %s" % st["quorum"])
        s = launch.last_step()
        wait_until(lambda: launch.last_step() >= s + 3, 60, "training goes on")
    except Fail as e:
        raise Fail("%s\n(logs in %s and %s)\n%s" % (e, job.dir, launch.dir, launch.tail(20)))
    finally:
        launch.terminate()
        job.stop()


if __name__ == "__main__":
    main_scenarios({"train": train, "restart": restart})
