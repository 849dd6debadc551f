"""Heartbeats as sealed UDP datagrams (docs/protocol.md "Heartbeats over UDP"),
against a real coordinator and real workers. One scenario per run:

  workers   real workers (rank liveness, and a group of 2 under --liveness
            group) heartbeat over UDP: /metrics counts UDP heartbeats, nothing
            dropped, nobody told udp_off; a SIGKILLed worker is still lost
            within a second by the two signals (its connection closed, and
            silence), and a SIGSTOPped one by the timeout.
  forged    udp_rogue (tests/control/udp_rogue.c) holds a member's key and
            sends two good heartbeats and every kind of bad datagram, then
            only replays and forgeries: the coordinator takes exactly the two
            good ones, drops every other (counted in /metrics), and loses it
            at the heartbeat timeout: replays keep nobody alive. (Replays of
            its own datagrams while none is taken look like a real worker
            behind a sequence pushed ahead: it is told udp_off, once, and
            since nothing comes over its connection that changes nothing.) A
            good heartbeat from it once lost is answered UNKNOWN_MEMBER over
            its connection (so a worker frozen past the timeout registers
            again).
  blocked   a worker reaches the coordinator through a TCP proxy on another
            loopback address whose UDP port swallows datagrams (a firewall, a
            Kubernetes Service without the UDP port): none of its datagrams
            arrives, the coordinator tells it udp_off at half the timeout, it
            goes back to heartbeating over ZeroMQ, and it is never lost. With no UDP listener at all (ICMP port unreachable) it falls
            back by itself.
  dead      a leaked key keeps sending good datagrams for a member whose
            process is gone (connection closed): lost by the two signals
            while they still come (udp_rogue --mode dead).
  frozen    the same for a SIGSTOPped member whose connection stays open:
            the coordinator's ZeroMQ pings go unanswered, the connection is
            closed, and it is lost while the datagrams still come.
  burst     a burst of datagrams with sequence numbers far ahead under the
            real worker's key: the worker is told to heartbeat over its
            connection and is never lost.
"""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, die_with_test, main_scenarios, wait_until  # noqa: E402


def events(job, kind, **match):
    return [e for e in job.read_events() if e["type"] == kind and all(e.get(k) == v for k, v in match.items())]


def wait_quorum(job, groups, timeout=15):
    want = sorted(groups)
    wait_until(lambda: sorted(job.status()["quorum"]["groups"]) == want, timeout, "quorum %s" % want)


def metric(job, name):
    return job.metrics().get(name, -1)


def scenario_workers(bindir):
    job = Job(bindir, "udp-workers")
    try:
        job.start_coordinator()
        for g in ("g0", "g1", "g2"):
            job.start_worker(g, 0, 1)
        for r in (0, 1):
            job.start_worker("h", r, 2, ["--liveness", "group"])
        wait_quorum(job, ["g0", "g1", "g2", "h"])
        before = metric(job, "phalanx_udp_heartbeats_total")
        time.sleep(1.5)
        m = job.metrics()
        udp = m["phalanx_udp_heartbeats_total"] - before
        # 4 direct heartbeaters (g0, g1, g2 and h's leader) at 10 Hz for 1.5 s: ~60
        check(udp >= 30, "only %d UDP heartbeats in 1.5 s from 4 heartbeating members" % udp)
        check(m["phalanx_udp_datagrams_dropped_total"] == 0, "datagrams dropped: %s" % m)
        check(m["phalanx_udp_off_total"] == 0, "a member was told udp_off: %s" % m)
        check(m["phalanx_relayed_rank_reports_total"] > 0, "h's leader did not report its rank: %s" % m)
        check(not events(job, "member_lost"), "a member was lost while heartbeating over UDP")

        t0 = time.time()
        job.workers[("g1", 0)].send_signal(signal.SIGKILL)
        wait_until(lambda: events(job, "member_lost", group="g1"), 5, "g1 lost after SIGKILL")
        lost = events(job, "member_lost", group="g1")[0]
        check(lost["reason"] == "disconnected_and_silent",
              "SIGKILLed g1 lost as %s, not by closed connection + silence" % lost["reason"])
        check(lost["silent_ms"] < 1000, "SIGKILLed g1 lost after %d ms of silence (the timeout is 1000)" % lost["silent_ms"])
        print("g1 SIGKILL -> member_lost: %.0f ms (silent_ms=%d)" % ((time.time() - t0) * 1000, lost["silent_ms"]))

        job.workers[("g2", 0)].send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: events(job, "member_lost", group="g2"), 5, "g2 lost after SIGSTOP")
        finally:
            job.workers[("g2", 0)].send_signal(signal.SIGCONT)
        lost = events(job, "member_lost", group="g2")[0]
        check(lost["reason"] == "heartbeat_timeout", "SIGSTOPped g2 lost as %s" % lost["reason"])
        # Resumed, it learns it was lost and comes back (register, quorum).
        wait_quorum(job, ["g0", "g2", "h"], 15)
        check(not events(job, "member_lost", group="g0") and not events(job, "member_lost", group="h"),
              "a healthy member was lost")
        print("udp heartbeats: %d in 1.5 s; kill and freeze detected as without UDP" % udp)
    finally:
        job.stop()


def scenario_forged(bindir):
    job = Job(bindir, "udp-forged")
    try:
        job.start_coordinator()
        out = subprocess.run([os.path.join(bindir, "udp_rogue"), "--endpoint", job.endpoint, "--group", "rogue",
                              "--hold-ms", "2500"], capture_output=True, text=True, timeout=30)
        print(out.stdout.strip())
        check(out.returncode == 0, "udp_rogue exited %d: %s %s" % (out.returncode, out.stdout, out.stderr))
        kv = {}
        for line in out.stdout.splitlines():
            for part in line.split():
                if "=" in part:
                    k, v = part.split("=", 1)
                    kv[k] = v
        check(int(kv["udp_port"]) == job.port, "UDP offered on port %s, not the bind's %d" % (kv["udp_port"], job.port))
        check(int(kv["key_bytes"]) == 32, "key of %s bytes" % kv["key_bytes"])
        check(int(kv["bad"]) == 13, "the rogue sent %s kinds of bad datagram, not the 13 it has" % kv["bad"])
        # Its own key's datagrams arriving stale while none is taken are what a
        # real worker behind a pushed sequence sends: it is told to heartbeat
        # over its connection, which it does not, so that changes nothing.
        check("udp_off_ms" in kv, "the rogue, quiet but for stale datagrams under its key, was told udp_off")
        wait_until(lambda: events(job, "member_lost", group="rogue"), 5, "rogue lost")
        lost = events(job, "member_lost", group="rogue")[0]
        check(lost["reason"] == "heartbeat_timeout", "rogue lost as %s" % lost["reason"])
        check(lost["silent_ms"] >= 1000, "rogue lost after %d ms silent" % lost["silent_ms"])
        m = job.metrics()
        check(m["phalanx_udp_heartbeats_total"] == 2, "UDP heartbeats taken: %s, want exactly the 2 good ones" %
              m["phalanx_udp_heartbeats_total"])
        check(m["phalanx_udp_datagrams_dropped_total"] == int(kv["forged_total"]),
              "dropped %s, the rogue sent %s bad datagrams" % (m["phalanx_udp_datagrams_dropped_total"],
                                                               kv["forged_total"]))
        check(m["phalanx_udp_off_total"] == 1, "udp_off sent %s times" % m["phalanx_udp_off_total"])
        check(kv.get("unknown_member") == "1", "a good heartbeat after the loss was not answered UNKNOWN_MEMBER")
        check(job.coord.poll() is None, "the coordinator died")
        print("forged: %s bad datagrams dropped, 2 taken, lost at the timeout" % kv["forged_total"])
    finally:
        job.stop()


def rogue_play(job, mode, hold_ms):
    """udp_rogue --mode MODE against job: its process and the lines it has
    printed so far (read on a thread)."""
    p = subprocess.Popen([os.path.join(job.bindir, "udp_rogue"), "--endpoint", job.endpoint, "--group", "rogue",
                          "--mode", mode, "--hold-ms", str(hold_ms)], stdout=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=die_with_test)  # its own group: see end_group
    lines = []
    threading.Thread(target=lambda: [lines.append(l.strip()) for l in p.stdout], daemon=True).start()
    return p, lines


def end_group(p):
    """Kills udp_rogue and whatever it forked (a stopped process too)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except OSError:
        pass
    p.wait()


def lost_while_forged(bindir, mode, hold_ms, ready, within_s):
    """udp_rogue --mode MODE sends good datagrams under a member's key for
    hold_ms once `ready` is printed; the member must be lost as
    disconnected_and_silent within within_s, while they still come."""
    job = Job(bindir, "udp-%s" % mode)
    p = None
    try:
        job.start_coordinator()
        p, lines = rogue_play(job, mode, hold_ms)
        wait_until(lambda: ready in lines, 10, "the rogue's %s" % ready)
        wait_until(lambda: events(job, "member_lost", group="rogue"), within_s,
                   "the %s member lost while forged datagrams still come" % mode)
        lost = events(job, "member_lost", group="rogue")[0]
        check(lost["reason"] == "disconnected_and_silent", "lost as %s" % lost["reason"])
        check(not [l for l in lines if l.startswith("sent=")], "the forger was still sending when it was lost")
        print("%s member with a leaked key: lost as %s after %d ms silent" % (mode, lost["reason"], lost["silent_ms"]))
    finally:
        if p:
            end_group(p)
        job.stop()


def scenario_dead(bindir):
    """A member whose process is gone (its connection closed) while its key,
    in other hands, keeps sending good datagrams: lost by the two signals, as
    if nothing came, long before the forger stops."""
    lost_while_forged(bindir, "dead", 8000, "closed=1", 6)


def scenario_frozen(bindir):
    """A member frozen (SIGSTOP: its ZeroMQ thread answers nothing, its
    connection stays open) while its key keeps sending good datagrams: the
    coordinator's pings go unanswered, the connection is closed, and the
    member is lost while the forger still sends."""
    lost_while_forged(bindir, "frozen", 15000, "frozen=1", 12)


def scenario_burst(bindir):
    """Someone holding a member's key sends a burst of datagrams with
    sequence numbers far ahead: the real worker's next datagrams look like
    replays. The coordinator notices its own key's datagrams arriving stale
    while none is taken, tells it to heartbeat over its connection, and it
    is never lost."""
    job = Job(bindir, "udp-burst")
    p = None
    try:
        job.start_coordinator()
        p, lines = rogue_play(job, "burst", 4000)
        wait_until(lambda: "done=1" in lines, 15, "the rogue's run")
        lost = events(job, "member_lost", group="rogue")
        out = " ".join(lines)
        check(not lost and "unknown_member=1" not in out, "the real worker was lost: %s %s" % (lost, out))
        check("burst=1" in out and "udp_off_ms=" in out, "told udp_off after the burst: %s" % out)
        with open(os.path.join(job.dir, "coordinator.log")) as f:
            check("udp_sequence_pushed group=rogue" in f.read(), "the coordinator says why")
        print("sequence pushed ahead: %s; never lost" % [l for l in lines if l.startswith("udp_off_ms")])
        p.wait(timeout=10)
    finally:
        if p:
            end_group(p)
        job.stop()


class Proxy:
    """TCP forwarder on host:port to the coordinator; with sink, a UDP socket
    on the same address and port that reads and drops every datagram."""

    def __init__(self, host, port, target, sink):
        self.stop = False
        self.lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lst.bind((host, port))
        self.lst.listen(16)
        self.lst.settimeout(0.2)
        self.target = target
        self.swallowed = 0
        self.udp = None
        if sink:
            self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            self.udp.bind((host, port))
            self.udp.settimeout(0.2)
            threading.Thread(target=self._sink, daemon=True).start()
        threading.Thread(target=self._accept, daemon=True).start()

    def _sink(self):
        while not self.stop:
            try:
                self.udp.recv(2048)
                self.swallowed += 1
            except socket.timeout:
                pass

    def _pipe(self, a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        while not self.stop:
            try:
                c, _ = self.lst.accept()
            except socket.timeout:
                continue
            up = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(c, up), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, c), daemon=True).start()

    def close(self):
        self.stop = True
        self.lst.close()
        if self.udp:
            self.udp.close()


def scenario_blocked(bindir):
    job = Job(bindir, "udp-blocked")
    proxies = []
    try:
        job.start_coordinator()
        # 127.0.0.2 and .3 are loopback too: the worker's datagrams go to the
        # proxy's address, with the port number the coordinator offers (its own).
        sink = Proxy("127.0.0.2", job.port, ("127.0.0.1", job.port), sink=True)
        refuse = Proxy("127.0.0.3", job.port, ("127.0.0.1", job.port), sink=False)
        proxies = [sink, refuse]
        for g, host in (("swallowed", "127.0.0.2"), ("refused", "127.0.0.3")):
            p = subprocess.Popen([os.path.join(bindir, "phalanx-worker"), "--coordinator",
                                  "tcp://%s:%d" % (host, job.port), "--group", g],
                                 stdout=open(os.path.join(job.dir, "worker-%s.log" % g), "w"), stderr=subprocess.STDOUT)
            job.workers[(g, 0)] = p
        wait_quorum(job, ["refused", "swallowed"])
        time.sleep(2.5)  # 2.5 heartbeat timeouts
        check(not events(job, "member_lost"), "a member was lost: %s" % events(job, "member_lost"))
        check(sink.swallowed > 0, "the worker never tried UDP")
        m = job.metrics()
        check(m["phalanx_udp_off_total"] == 1, "udp_off told %s times, want once (the swallowed worker)" %
              m["phalanx_udp_off_total"])
        hb0 = m["phalanx_heartbeats_total"]
        swallowed = sink.swallowed
        time.sleep(1.0)
        m = job.metrics()
        check(m["phalanx_heartbeats_total"] - hb0 >= 10, "heartbeats over ZeroMQ did not resume: %d in 1 s" %
              (m["phalanx_heartbeats_total"] - hb0))
        check(sink.swallowed == swallowed, "the worker still sends UDP after udp_off")
        logs = {g: open(os.path.join(job.dir, "worker-%s.log" % g)).read() for g in ("swallowed", "refused")}
        check("the coordinator does not receive them" in logs["swallowed"], "swallowed: no udp_off in its log")
        check("udp_heartbeats_off" in logs["refused"], "refused: did not fall back:\n" + logs["refused"][-2000:])
        print("blocked: %d datagrams swallowed, then ZeroMQ heartbeats; nobody lost" % swallowed)
    finally:
        for p in proxies:
            p.close()
        job.stop()


if __name__ == "__main__":
    main_scenarios({"workers": scenario_workers, "forged": scenario_forged, "blocked": scenario_blocked,
                    "dead": scenario_dead, "frozen": scenario_frozen, "burst": scenario_burst})
