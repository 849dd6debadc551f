"""CURVE on the control plane, with real processes on loopback:
- phalanxctl keygen writes PREFIX.key (0600) and PREFIX.pub (0644), never over
  an existing file;
- a coordinator with --curve-secret-key-file and --authorized-keys admits a
  worker whose key is listed (it joins a quorum) and refuses a worker whose key
  is not (no member_joined; an auth_rejected event naming its key), a worker
  with a wrong coordinator public key, and a plaintext worker;
- phalanxctl with listed keys reads the status over ZeroMQ; with an unlisted
  key or none it is refused with a message saying why;
- SIGHUP re-reads the authorized keys: a malformed file keeps the old keys, a
  new key is admitted (rotation without a restart);
- the safe default: a non-loopback --bind without credentials refuses to start,
  and starts with --insecure or a token;
- phalanxctl kill refuses a member whose host is not this host (a worker in its
  own UTS namespace with another hostname);
- phalanx-launch by default runs its job with CURVE keys made for it: a local
  process without them cannot register, join the quorum or end the job;
  --insecure opts out (and says why that is dangerous); workers with
  --liveness group get a job token instead."""
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, Launch, check, free_port, main, make_corpus, wait_until  # noqa: E402

REFUSED_WAIT_S = 3  # a refused worker would have registered within ~0.5 s


def run(bindir, prog, args, timeout=30):
    return subprocess.run([os.path.join(bindir, prog)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def keygen(bindir, prefix):
    r = run(bindir, "phalanxctl", ["keygen", "--out", prefix])
    check(r.returncode == 0, "keygen %s: %d %s" % (prefix, r.returncode, r.stderr))
    with open(prefix + ".pub") as f:
        pub = f.read().split()[0]
    check(("public key: %s" % pub) in r.stdout, "keygen prints the public key: %r" % r.stdout)
    return pub


def check_keygen(bindir, d):
    prefix = os.path.join(d, "solo")
    keygen(bindir, prefix)
    mode_key = stat.S_IMODE(os.stat(prefix + ".key").st_mode)
    mode_pub = stat.S_IMODE(os.stat(prefix + ".pub").st_mode)
    check(mode_key == 0o600, "secret key mode 0600, got %o" % mode_key)
    check(mode_pub == 0o644, "public key mode 0644, got %o" % mode_pub)
    before = open(prefix + ".key").read()
    r = run(bindir, "phalanxctl", ["keygen", "--out", prefix])
    check(r.returncode != 0 and "exists" in r.stderr, "keygen refuses to overwrite: %d %r" % (r.returncode, r.stderr))
    check(open(prefix + ".key").read() == before, "the existing secret key is untouched")
    nested = os.path.join(d, "new", "keys", "ops")
    keygen(bindir, nested)
    check(stat.S_IMODE(os.stat(os.path.dirname(nested)).st_mode) == 0o700, "keygen made its missing folder, mode 0700")


def member_groups(job):
    return sorted({m["group"] for m in job.live_members()})


def ctl_status(bindir, job, keys):
    return run(bindir, "phalanxctl", ["status", "--coordinator", job.endpoint, "--timeout-ms", "3000"] + keys)


def check_curve_job(bindir, d):
    pubs = {n: keygen(bindir, os.path.join(d, n)) for n in ("coord", "good", "stranger", "late")}
    k = lambda n: os.path.join(d, n + ".key")  # noqa: E731
    coord_pub = os.path.join(d, "coord.pub")
    authorized = os.path.join(d, "authorized_keys")
    with open(authorized, "w") as f:
        f.write("# the workers of this test\n")
        f.write(open(os.path.join(d, "good.pub")).read())
    job = Job(bindir, "curve", ["--curve-secret-key-file", k("coord"), "--authorized-keys", authorized])
    try:
        job.start_coordinator()
        client = lambda n: ["--curve-secret-key-file", k(n), "--coordinator-public-key-file", coord_pub]  # noqa: E731
        job.start_worker("g0", 0, 1, client("good"))
        wait_until(lambda: job.status()["quorum"]["groups"] == ["g0"], 15, "the worker with a listed key joins a quorum")

        job.start_worker("intruder", 0, 1, client("stranger"))
        job.start_worker("wrongserver", 0, 1, ["--curve-secret-key-file", k("good"),
                                               "--coordinator-public-key-file", os.path.join(d, "late.pub")])
        job.start_worker("plain", 0, 1)
        rejected = wait_until(lambda: [e for e in job.read_events() if e["type"] == "auth_rejected"
                                       and e.get("key") == pubs["stranger"]], 10, "auth_rejected for the unlisted key")
        check(rejected[0]["mechanism"] == "CURVE" and rejected[0]["count"] == 1, "the event says why: %s" % rejected[0])
        time.sleep(REFUSED_WAIT_S)
        check(member_groups(job) == ["g0"], "only the listed worker is a member: %s" % member_groups(job))
        joined = {e["group"] for e in job.read_events() if e["type"] == "member_joined"}
        check(joined == {"g0"}, "no member_joined for refused workers: %s" % joined)
        check(job.metrics()["phalanx_auth_rejected_total"] >= 1, "rejections counted in /metrics")
        wait_until(lambda: [e for e in job.read_events() if e["type"] == "auth_rejected"
                            and e.get("message") == "handshake"], 10,
                   "auth_rejected for the plaintext / wrong-coordinator-key handshakes")
        # A refused worker does not wait in silence: it stops as misconfigured
        # (exit 2, which phalanx-launch does not retry) and says why.
        why = {"intruder": "refused our public key", "wrongserver": "wrong coordinator public key",
               "plain": "requires CURVE keys"}
        for g, text in why.items():
            p = job.workers[(g, 0)]
            wait_until(lambda: p.poll() is not None, 20, "refused worker %s exits" % g)
            log = open(os.path.join(job.dir, "worker-%s-0.log" % g)).read()
            check(p.returncode == 2 and text in log,
                  "worker %s exits 2 saying %r: exit %s, log %r" % (g, text, p.returncode, log[-300:]))

        r = ctl_status(bindir, job, client("good"))
        check(r.returncode == 0 and '"groups":["g0"]' in r.stdout, "phalanxctl with keys reads status: %d %r %r" %
              (r.returncode, r.stdout[:200], r.stderr))
        r = ctl_status(bindir, job, client("stranger"))
        check(r.returncode == 1 and "refused our public key" in r.stderr, "unlisted phalanxctl refused: %r" % r.stderr)
        r = ctl_status(bindir, job, [])
        check(r.returncode == 1 and "requires CURVE" in r.stderr, "plaintext phalanxctl refused: %r" % r.stderr)
        r = ctl_status(bindir, job, ["--curve-secret-key-file", k("good"), "--coordinator-key", pubs["late"]])
        check(r.returncode == 1 and "coordinator's key" in r.stderr, "wrong coordinator key: %r" % r.stderr)

        # Rotation by SIGHUP: a malformed file keeps the old keys, a good one admits the new key.
        with open(authorized, "a") as f:
            f.write("not-a-key\n")
        job.coord.send_signal(signal.SIGHUP)
        ev = wait_until(lambda: [e for e in job.read_events() if e["type"] == "authorized_keys_reloaded"], 10,
                        "a reload event")
        check("line 3" in ev[0]["error"] and ev[0]["keys"] == 1, "a failed reload names the line: %s" % ev[0])
        check(ctl_status(bindir, job, client("good")).returncode == 0, "old key still admitted after a failed reload")
        with open(authorized, "w") as f:
            f.write(open(os.path.join(d, "good.pub")).read() + open(os.path.join(d, "late.pub")).read())
        job.coord.send_signal(signal.SIGHUP)
        wait_until(lambda: [e for e in job.read_events() if e["type"] == "authorized_keys_reloaded"
                            and e["error"] == "" and e["keys"] == 2], 10, "a successful reload with two keys")
        job.start_worker("g1", 0, 1, client("late"))
        wait_until(lambda: "g1" in job.status()["quorum"]["groups"], 15, "the key added by SIGHUP joins")
        check(job.coord.poll() is None, "the coordinator survived SIGHUP")
    finally:
        job.stop()


def non_loopback_address():
    """An IPv4 address of this machine other than 127/8, or None."""
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr"], stdout=subprocess.PIPE, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines():
        parts = line.split()
        if "inet" in parts:
            addr = parts[parts.index("inet") + 1].split("/")[0]
            if not addr.startswith("127."):
                return addr
    return None


def check_bind_policy(bindir, d):
    coord = os.path.join(bindir, "phalanx-coordinator")
    hosts = ["0.0.0.0"] + ([non_loopback_address()] if non_loopback_address() else [])
    for host in hosts:
        ep = "tcp://%s:%d" % (host, free_port())
        try:
            r = subprocess.run([coord, "--bind", ep], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=10)
        except subprocess.TimeoutExpired:
            raise Fail("%s without credentials: the coordinator started (still running after 10 s)" % ep)
        check(r.returncode == 2 and "refusing to bind" in r.stderr and "--insecure" in r.stderr,
              "%s without credentials refused with a reason: %d %r" % (ep, r.returncode, r.stderr))
    token = os.path.join(d, "token")
    with open(token, "w") as f:
        f.write("a-long-random-token\n")
    for extra, what in ((["--insecure"], "insecure_bind"), (["--token-file", token], "token_in_cleartext")):
        ep = "tcp://0.0.0.0:%d" % free_port()
        log = os.path.join(d, "bind-%s.log" % what)
        with open(log, "w") as errf:
            p = subprocess.Popen([coord, "--bind", ep, "--http", "127.0.0.1:0"] + extra, stdout=subprocess.PIPE,
                                 stderr=errf, text=True)
        try:
            line = p.stdout.readline()
            check(line.startswith("http="), "%s: %s starts: %r" % (ep, extra[0], line))
        finally:
            p.terminate()
            p.wait(timeout=10)
        check(what in open(log).read(), "%s logs a %s warning" % (extra[0], what))


def check_kill_elsewhere(bindir, d):
    probe = subprocess.run(["unshare", "-u", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if probe.returncode != 0:
        print("note: unshare -u unavailable (not root?): the other-host kill case is not run")
        return
    job = Job(bindir, "killhost", ["--heartbeat-timeout-ms", "5000"])
    other = None
    try:
        job.start_coordinator()
        worker = os.path.join(bindir, "phalanx-worker")
        other = subprocess.Popen(["unshare", "-u", "sh", "-c", 'hostname px-elsewhere && exec "$0" "$@"', worker,
                                  "--coordinator", job.endpoint, "--group", "remote", "--rank", "0"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "remote.log"), "w"))
        job.start_worker("local", 0, 1)
        wait_until(lambda: member_groups(job) == ["local", "remote"], 15, "both workers registered")
        hosts = {m["group"]: m["host"] for m in job.live_members()}
        check(hosts["remote"] == "px-elsewhere", "the remote worker reports its own host: %s" % hosts)
        r = run(bindir, "phalanxctl", ["kill", "remote/0", "--http", job.http, "--signal", "18"])
        check(r.returncode == 1 and "px-elsewhere" in r.stderr and "not on this host" in r.stderr,
              "kill of a member on another host refused: %d %r %r" % (r.returncode, r.stdout, r.stderr))
        r = run(bindir, "phalanxctl", ["kill", "local/0", "--http", job.http, "--signal", "18"])
        check(r.returncode == 0 and "sent signal 18" in r.stdout, "kill of a local member works: %r" % r.stderr)
        check(other.poll() is None, "the other-host worker is untouched")
    finally:
        if other and other.poll() is None:
            other.terminate()
            other.wait(timeout=10)
        job.stop()


def rogue(bindir, endpoint, args, hold_ms=2500):
    """A local process without the job's credentials: registers as 'rogue',
    then does what args say; its key=value lines."""
    r = subprocess.run([os.path.join(bindir, "rogue_client"), "--endpoint", endpoint, "--group", "rogue",
                        "--hold-ms", str(hold_ms)] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    return r.stdout


def check_launch_default(bindir):
    """phalanx-launch with no security flag: its coordinator and workers get
    CURVE keys made for the job; a local process without them can neither
    register, nor join the quorum, nor end the job."""
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-curve-data-"))
    steps = 100000  # ended by the test: the rogues' claims name this length
    launch = Launch(bindir, ["--groups", "2", "--model", "tiny", "--steps", str(steps), "--data", data,
                             "--", "--global-batch", "4", "--micro-batch", "2", "--seq", "32"], name="curve-launch")
    try:
        wait_until(lambda: launch.last_step() >= 5, 120, "5 steps of the default job")
        outs = [rogue(bindir, launch.endpoint(), ["--request-quorum", "--finish", str(steps)]),
                rogue(bindir, launch.endpoint(), ["--finish", str(steps)]),
                rogue(bindir, launch.endpoint(), ["--accuse", "g0"])]
        check(all("register=" not in o and "quorum" not in o for o in outs),
              "a process without the job's keys is never answered: %s" % outs)
        after = launch.last_step()
        wait_until(lambda: launch.last_step() >= after + 5, 60, "the job training on after the rogues")
        check(launch.proc.poll() is None, "the job was not ended:\n%s" % launch.tail())
        st = launch.status()
        check(not [m for m in st["members"] if m["group"] == "rogue"], "no rogue member in /status")
        check(sorted(st["quorum"]["groups"]) == ["g0", "g1"], "the quorum is the job's two groups: %s" % st["quorum"])
        evs = launch.read_events()
        started = [e for e in evs if e["type"] == "coordinator_started"]
        check(started and started[0]["auth"] == "curve", "the coordinator ran with CURVE: %s" % started)
        check([e for e in evs if e["type"] == "auth_rejected"], "the refused handshakes are in the event log")
        check(not [e for e in evs if e.get("group") == "rogue" or e["type"] in ("member_lost", "run_finished")],
              "the rogue never became a member, nobody was lost or finished: %s"
              % [e for e in evs if e["type"] not in ("heartbeat",)][-10:])
        key = os.path.join(launch.dir, "curve", "worker.key")
        check(stat.S_IMODE(os.stat(key).st_mode) == 0o600 and
              stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode) == 0o700, "the job's keys are private (0600, 0700)")
        check(any("control plane: CURVE" in l for l in launch.output()), "the launcher says how the job is protected")
    finally:
        launch.terminate()

    # --insecure opts out, says why that is dangerous, and a local process
    # can then register: the protection above came from the keys.
    launch = Launch(bindir, ["--insecure", "--groups", "1", "--model", "tiny", "--steps", "400", "--data", data,
                             "--", "--global-batch", "4", "--micro-batch", "2", "--seq", "32"], name="insecure-launch")
    try:
        wait_until(lambda: launch.last_step() >= 2, 120, "2 steps of the insecure job")
        out = rogue(bindir, launch.endpoint(), [], hold_ms=500)
        check("register=ok" in out, "without credentials a local process registers: %s" % out)
        check(any("--insecure: the control plane has no credentials" in l for l in launch.output()),
              "the launcher warns:\n%s" % launch.tail())
    finally:
        launch.terminate()

    # Workers whose liveness socket cannot take CURVE get a job token instead.
    launch = Launch(bindir, ["--groups", "1", "--ranks-per-group", "2", "--model", "tiny", "--steps", "400",
                             "--data", data, "--", "--global-batch", "4", "--micro-batch", "2", "--seq", "32",
                             "--liveness", "group"], name="token-launch")
    try:
        wait_until(lambda: launch.last_step() >= 2, 120, "2 steps of the --liveness group job")
        out = rogue(bindir, launch.endpoint(), [], hold_ms=500)
        check("register=AUTH_REJECTED" in out, "without the token a local process is refused: %s" % out)
        token = os.path.join(launch.dir, "credentials", "token")
        check(stat.S_IMODE(os.stat(token).st_mode) == 0o600, "the job token is 0600")
        started = [e for e in launch.read_events() if e["type"] == "coordinator_started"]
        check(started and started[0]["auth"] == "token", "the coordinator ran with a token: %s" % started)
    finally:
        launch.terminate()


def test(bindir):
    d = tempfile.mkdtemp(prefix="phalanx-curve-keys-")
    for name, fn in (("keygen", lambda: check_keygen(bindir, d)), ("curve job", lambda: check_curve_job(bindir, d)),
                     ("bind policy", lambda: check_bind_policy(bindir, d)),
                     ("kill elsewhere", lambda: check_kill_elsewhere(bindir, d)),
                     ("launch defaults", lambda: check_launch_default(bindir))):
        try:
            fn()
        except Fail as e:
            raise Fail("%s: %s (keys and logs in %s)" % (name, e, d))
        print("ok: %s" % name)


if __name__ == "__main__":
    main(test)
