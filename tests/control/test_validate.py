"""Input is checked before anything connects or joins.

endpoints  impossible endpoints (no scheme, a port out of range, '*' to
           connect to, an unclosed IPv6 bracket, another scheme) make every
           program that takes one exit 2 at once with a message naming the
           flag and what is wrong, instead of waiting out the connect timeout
           (60 s by default): phalanx-worker and phalanxctl --coordinator,
           phalanx-coordinator and phalanx-launch --bind. Endpoints that are
           fine (a host name, IPv6, ipc://) are accepted.
coordinator the coordinator's own configuration exits 2 naming it: an
           events spec that does not parse, an event log in a folder that
           does not exist, an --http host that is not an IPv4 address, a
           --bind address that is no interface of this host; a port in use
           exits 1 (the moment's fault) naming it. phalanx-launch shows the
           coordinator's reason on its own terminal and exits 2 whatever
           stopped it (the address given is taken, a bad flag); a default
           port that is taken (7777, 8080) moves to a free one, said aloud,
           and the job runs.
worker     a worker whose training cannot start (unknown model, --tp that
           does not divide the heads, --pp beyond the layers, --seq beyond
           the context, no data) exits 2 naming the input, and the
           coordinator never hears of it: no member_joined or member_lost
           event, no member in /status. phalanx-launch --data naming a
           folder that does not exist or holds no shards exits 2 and writes
           nothing there (only the default folder gets the demo corpus)."""
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, Launch, check, free_port, main_scenarios, make_corpus  # noqa: E402

# Far below the 300 s a worker waits for a coordinator that does not answer:
# an exit within it is a refusal before connecting, not a timeout.
AT_ONCE_S = 20

BAD_CONNECT = [("garbage", "not an endpoint"), ("tcp://127.0.0.1:99999", "not in 1..65535"),
               ("tcp://127.0.0.1:0", "not in 1..65535"), ("tcp://*:7777", "for binding"),
               ("tcp://[::1:7777", "closing ']'"), ("udp://127.0.0.1:7777", "scheme 'udp'"),
               ("tcp://127.0.0.1", "no port"), ("tcp://:7777", "no host"), ("tcp://a b:1", "space")]
BAD_BIND = [("garbage", "not an endpoint"), ("tcp://127.0.0.1:70000", "not in 0..65535"),
            ("http://127.0.0.1:7777", "scheme 'http'"), ("ipc://", "needs a path")]


def run(bindir, prog, args, timeout=AT_ONCE_S):
    return subprocess.run([os.path.join(bindir, prog)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def refused(r, flag, what, why):
    err = r.stderr + r.stdout
    check(r.returncode == 2, "%s exits 2, got %d: %s" % (what, r.returncode, err.strip()[-400:]))
    check(flag in err and why in err, "%s names %s and says %r: %s" % (what, flag, why, err.strip()[-400:]))


def test_endpoints(bindir):
    for ep, why in BAD_CONNECT:
        r = run(bindir, "phalanx-worker", ["--coordinator", ep, "--group", "g0", "--steps", "5"])
        refused(r, "--coordinator", "phalanx-worker --coordinator %s" % ep, why)
        r = run(bindir, "phalanxctl", ["drain", "g0", "--coordinator", ep])
        refused(r, "--coordinator", "phalanxctl drain --coordinator %s" % ep, why)
    for ep, why in BAD_BIND:
        r = run(bindir, "phalanx-coordinator", ["--bind", ep])
        refused(r, "--bind", "phalanx-coordinator --bind %s" % ep, why)
        r = run(bindir, "phalanx-launch", ["--bind", ep, "--groups", "1", "--steps", "1"])
        refused(r, "--bind", "phalanx-launch --bind %s" % ep, why)
    # Good endpoints pass the check: with --print-schedule the worker stops
    # right after checking its flags, before any connection.
    for ep in ["tcp://coordinator.example:7777", "tcp://[::1]:7777", "tcp://10.0.0.1:1", "ipc:///tmp/phalanx.sock"]:
        r = run(bindir, "phalanx-worker", ["--coordinator", ep, "--group", "g0", "--steps", "5", "--pp", "2",
                                           "--ranks-per-group", "2", "--print-schedule"])
        check(r.returncode == 0, "--coordinator %s is accepted: %s" % (ep, r.stderr.strip()))
    print("%d connect and %d bind endpoints refused at once by each program; 4 good ones accepted"
          % (len(BAD_CONNECT), len(BAD_BIND)))


def test_coordinator(bindir):
    work = tempfile.mkdtemp(prefix="phalanx-validate-")
    port = free_port()
    base = ["--bind", "tcp://127.0.0.1:%d" % port]
    cases = [(["--events", "bogus"], "--events", "unknown sink"),
             (["--events", "kafka:broker/topic"], "--events", "bad broker"),
             (["--events", "file:%s/missing/events.jsonl" % work], "--events", "does not exist"),
             (["--http", "localhost:0"], "--http", "IPv4"),
             (["--bind", "tcp://192.0.2.1:%d" % port, "--insecure"], "--bind", "cannot bind")]
    for args, flag, why in cases:
        r = run(bindir, "phalanx-coordinator", base + args)
        refused(r, flag, "phalanx-coordinator %s" % " ".join(args), why)

    # A port in use: the configuration is right, the moment is not (exit 1).
    job = Job(bindir, name="validate")
    try:
        job.start_coordinator()
        r = run(bindir, "phalanx-coordinator", ["--bind", job.endpoint])
        check(r.returncode == 1 and "Address already in use" in r.stderr and "another port" in r.stderr,
              "a second coordinator on %s exits 1 naming the port in use: %d %s"
              % (job.endpoint, r.returncode, r.stderr.strip()))
    finally:
        job.stop()

    # phalanx-launch: the coordinator's refusal, its status and its reason.
    launch = Launch(bindir, ["--groups", "1", "--steps", "1", "--http", "localhost:0"], name="validate-launch")
    try:
        rc = launch.wait(AT_ONCE_S)
    finally:
        launch.terminate()
    out = "\n".join(launch.output())
    check(rc == 2 and "x the coordinator could not start (exit status 2): --http" in out and
          "must be an IPv4 address" in out,
          "phalanx-launch exits 2 with the coordinator's reason: rc %s\n%s" % (rc, launch.tail()))
    test_launch_ports(bindir)
    print("coordinator: %d configuration errors exit 2, a port in use exits 1; launch shows why" % len(cases))


def listen(port):
    """A TCP listener on 127.0.0.1:port (0: any), or None when the port is
    already taken (by another test's job: taken either way)."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
        return s
    except OSError:
        s.close()
        return None


def test_launch_ports(bindir):
    logs = tempfile.mkdtemp(prefix="phalanx-validate-ports-")
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-validate-ports-data-"))
    held = listen(0)
    port = held.getsockname()[1]
    try:
        r = run(bindir, "phalanx-launch", ["--groups", "1", "--steps", "1", "--data", data, "--log-dir",
                                           os.path.join(logs, "given"), "--bind", "tcp://127.0.0.1:%d" % port])
        check(r.returncode == 2 and "x the coordinator could not start (exit status 1): --bind: cannot bind "
              "'tcp://127.0.0.1:%d': Address already in use" % port in r.stdout + r.stderr,
              "a --bind given and taken: exit 2 with the reason on the launcher's terminal: %d\n%s%s" %
              (r.returncode, r.stdout[-1500:], r.stderr[-500:]))
    finally:
        held.close()
    # the defaults taken (by us, or by a job already there): they move, the job runs
    mine = [listen(7777), listen(8080)]
    try:
        r = run(bindir, "phalanx-launch", ["--groups", "1", "--steps", "2", "--model", "tiny", "--data", data,
                                           "--log-dir", os.path.join(logs, "defaults"), "--", "--global-batch",
                                           "4", "--micro-batch", "4", "--seq", "32"], timeout=120)
        out = r.stdout + r.stderr
        moved = re.search(r"! --bind tcp://127\.0\.0\.1:7777 is taken on this machine \(another job\?\): using "
                          r"tcp://127\.0\.0\.1:(\d+) instead", out)
        check(r.returncode == 0 and moved and "! --http 127.0.0.1:8080 is taken" in out and
              "coordinator on tcp://127.0.0.1:%s" % moved.group(1) in out,
              "default ports taken: moved, said, the job ran: %d\n%s" % (r.returncode, out[-2000:]))
    finally:
        for s in mine:
            if s:
                s.close()
    print("phalanx-launch: a taken --bind given exits 2 with the reason; taken defaults move")


def test_worker(bindir):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-validate-data-"))
    job = Job(bindir, name="validate")
    try:
        job.start_coordinator()
        cases = [(["--model", "nosuch", "--data", data], "--model", "neither a preset"),
                 (["--model", "tiny", "--tp", "3", "--ranks-per-group", "3", "--data", data], "--tp 3",
                  "attention heads"),
                 (["--model", "tiny", "--pp", "5", "--ranks-per-group", "5", "--data", data], "--pp 5", "layers"),
                 (["--model", "tiny", "--seq", "100000", "--data", data], "--seq 100000", "context"),
                 (["--model", "tiny", "--data", os.path.join(data, "missing")], "--data", "no train shards")]
        for args, flag, why in cases:
            r = run(bindir, "phalanx-worker", ["--coordinator", job.endpoint, "--group", "g0", "--steps", "5"] + args)
            refused(r, flag, "phalanx-worker %s" % " ".join(args), why)
        st = job.status()
        kinds = sorted({e["type"] for e in job.read_events()})
        check(not st["members"], "no member in /status: %s" % st["members"])
        check(not any(k.startswith("member_") or k == "group_dropped" for k in kinds),
              "the coordinator never heard of the refused workers: events %s" % kinds)
        print("%d worker configurations refused before registering; events: %s" % (len(cases), kinds))
    finally:
        job.stop()
    # A typo in phalanx-launch --data is an error, never a job on the demo corpus.
    typo = os.path.join(data, "shrads")
    empty = tempfile.mkdtemp(prefix="phalanx-validate-empty-")
    for folder, why in ((typo, "no such folder"), (empty, "no token shards")):
        log_dir = tempfile.mkdtemp(prefix="phalanx-validate-launch-")
        r = run(bindir, "phalanx-launch", ["--groups", "1", "--model", "tiny", "--steps", "5", "--data", folder,
                                           "--log-dir", log_dir])
        refused(r, "--data %s" % folder, "phalanx-launch --data %s" % folder, why)
        check(not os.path.exists(os.path.join(log_dir, "coordinator.log")),
              "nothing was started for --data %s" % folder)
    check(not os.path.exists(typo) and not os.listdir(empty), "no demo corpus was written into --data")


if __name__ == "__main__":
    main_scenarios({"endpoints": test_endpoints, "coordinator": test_coordinator, "worker": test_worker})
