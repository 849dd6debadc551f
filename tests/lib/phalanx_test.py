"""Helpers for phalanx's process-level tests: start real coordinator and
worker processes on loopback, read /status and the JSONL event log, wait for
conditions with deadlines. Nothing here mocks a phalanx component."""
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# Every scratch directory a test makes (tempfile.mkdtemp, here and in the test
# scripts) is removed when the test passes and kept, for its logs, when it
# fails: checkpoint tests write hundreds of MB each, and a machine that runs
# the suite again and again would fill its disk.
_SCRATCH = []
_mkdtemp = tempfile.mkdtemp


def _tracked_mkdtemp(*args, **kwargs):
    d = _mkdtemp(*args, **kwargs)
    _SCRATCH.append(d)
    return d


tempfile.mkdtemp = _tracked_mkdtemp


def remove_scratch():
    if os.environ.get("PX_KEEP_SCRATCH"):  # kept for a look afterwards (tests/gpu/device_check.sh's logs)
        return
    for d in _SCRATCH:
        shutil.rmtree(d, ignore_errors=True)
    del _SCRATCH[:]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def metrics_by_series(text):
    """/metrics text as {series: value}, each series written as in the text
    without the job label every sample carries: "phalanx_heartbeats_total",
    'phalanx_members{state="healthy"}'."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            k = re.sub(r'\{job="(?:[^"\\]|\\.)*",?', "{", k).replace("{}", "")
            out[k] = float(v)
    return out


class Fail(Exception):
    pass


_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in a forked child
_TEST_PID = os.getpid()


def die_with_test():
    """preexec_fn for the processes a test starts: SIGKILL them when the test
    dies, even by SIGKILL (a ctest timeout), so none trains on orphaned. The
    signal follows the forking thread: start processes from the main thread."""
    PR_SET_PDEATHSIG = 1
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != _TEST_PID:
        os._exit(127)  # the test died before the signal was armed


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def wait_until(pred, timeout_s, what, interval_s=0.01):
    deadline = time.monotonic() + timeout_s
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Fail("timed out after %.1f s waiting for %s" % (timeout_s, what))
        time.sleep(interval_s)


def rss_mb(pid):
    """The resident memory of process `pid` (VmRSS), in MiB."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise Fail("no VmRSS for pid %d" % pid)


def key_values(text):
    """Every key=value word of a tool's output (the last value of a key
    wins); FAIL lines are left out."""
    out = {}
    for line in text.splitlines():
        if line.startswith("FAIL"):
            continue
        for kv in line.split():
            if "=" in kv:
                k, v = kv.split("=", 1)
                out[k] = v
    return out


class Job:
    """A coordinator plus workers in a scratch directory."""

    def __init__(self, bindir, name="test", extra_coord_args=(), events=True):
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="phalanx-%s-" % name)
        self.port = free_port()
        self.endpoint = "tcp://127.0.0.1:%d" % self.port
        self.events_path = os.path.join(self.dir, "events.jsonl")
        self.extra = list(extra_coord_args)
        self.events = events
        self.coord = None
        self.http = None
        self.workers = {}
        self.job = name

    def start_coordinator(self, extra=(), http="127.0.0.1:0"):
        """http: HOST:PORT for its status server (port 0: any free one; a
        restart passes self.http to keep an open dashboard's address)."""
        args = [os.path.join(self.bindir, "phalanx-coordinator"), "--bind", self.endpoint,
                "--http", http, "--job", self.job] + self.extra + list(extra)
        if self.events:
            args += ["--events", "file:" + self.events_path]
        log = open(os.path.join(self.dir, "coordinator.log"), "a")
        self.coord = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True,
                                      preexec_fn=die_with_test)
        line = self.coord.stdout.readline().strip()
        check(line.startswith("http="), "coordinator did not print its http address: %r (see %s)" % (line, self.dir))
        self.http = line[len("http="):]
        return self.coord

    def start_worker(self, group, rank, ranks_per_group, extra=()):
        args = [os.path.join(self.bindir, "phalanx-worker"), "--coordinator", self.endpoint,
                "--group", group, "--rank", str(rank), "--ranks-per-group", str(ranks_per_group)] + list(extra)
        log = open(os.path.join(self.dir, "worker-%s-%d.log" % (group, rank)), "a")
        p = subprocess.Popen(args, stdout=log, stderr=log, preexec_fn=die_with_test)
        self.workers[(group, rank)] = p
        return p

    def wait_workers(self, timeout_s, what):
        """Waits for every worker started; Fail unless each exits 0 within timeout_s."""
        for (g, r), p in self.workers.items():
            try:
                rc = p.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise Fail("%s: group %s rank %d did not finish (logs in %s)" % (what, g, r, self.dir))
            check(rc == 0, "%s: group %s rank %d exited %s (logs in %s)" % (what, g, r, rc, self.dir))

    def get(self, path):
        with urllib.request.urlopen("http://%s%s" % (self.http, path), timeout=5) as r:
            return r.read().decode()

    def status(self):
        return json.loads(self.get("/status"))

    def metrics(self):
        return metrics_by_series(self.get("/metrics"))

    def read_events(self):
        if not os.path.exists(self.events_path):
            return []
        evs = []
        with open(self.events_path) as f:
            for line in f:
                line = line.strip()
                if line:
                    evs.append(json.loads(line))
        return evs

    def live_members(self, st=None):
        st = st or self.status()
        return [m for m in st["members"] if m["state"] != "lost"]

    def stop(self):
        for p in list(self.workers.values()) + ([self.coord] if self.coord else []):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in list(self.workers.values()) + ([self.coord] if self.coord else []):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def main(test_fn):
    """Runs test_fn(bindir); prints PASS or the failure and the scratch dir."""
    bindir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.getcwd(), "bin")
    try:
        test_fn(bindir)
    except Fail as e:
        print("FAIL: %s" % e)
        sys.exit(1)
    remove_scratch()
    print("PASS")


def main_scenarios(scenarios, default=None):
    """For scripts holding several tests: argv[2] names the scenario (one
    ctest each); runs it like main()."""
    which = sys.argv[2] if len(sys.argv) > 2 else default
    if which not in scenarios:
        print("usage: %s BINDIR {%s}" % (os.path.basename(sys.argv[0]), "|".join(scenarios)))
        sys.exit(2)
    main(scenarios[which])


FORTUNES_DIR = "/usr/share/games/fortunes"  # PX_DEMO_CORPUS_DIR in model/dataprep.h


def fortune_docs():
    """The demo corpus as documents: every English fortune file (as
    phalanx-data --demo takes them: no .dat indexes, no .u8 links), split at
    its "%" lines. Fail when Debian's fortunes package is missing."""
    if not os.path.isdir(FORTUNES_DIR):
        raise Fail("the demo corpus %s is missing (apt-get install fortunes)" % FORTUNES_DIR)
    docs = []
    for name in sorted(os.listdir(FORTUNES_DIR)):
        path = os.path.join(FORTUNES_DIR, name)
        if name.endswith((".dat", ".u8")) or not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            docs += [d for d in f.read().split("\n%\n") if d]
    return docs


def make_corpus(bindir, out_dir, seed=1, words=60000):
    """A small deterministic text corpus turned into shards by phalanx-data."""
    import random
    rnd = random.Random(seed)
    vocab = ("the quick brown fox jumps over the lazy dog while fault tolerant training "
             "keeps every committed step and heals a replica from a live peer").split()
    os.makedirs(out_dir, exist_ok=True)
    txt = os.path.join(out_dir, "corpus.txt")
    with open(txt, "w") as f:
        for i in range(words // 12):
            f.write(" ".join(rnd.choice(vocab) for _ in range(12)) + ".\n")
    data = os.path.join(out_dir, "shards")
    r = subprocess.run([os.path.join(bindir, "phalanx-data"), "--out", data, txt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    check(r.returncode == 0, "phalanx-data failed: %s" % r.stdout[-500:])
    return data


class LineCollector:
    """A process's output, collected line by line on a thread, so that a test
    can wait for a line while the process runs (wait_until on lines())."""

    def __init__(self, stream):
        self._stream = stream
        self._lines = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        for line in self._stream:
            with self._lock:
                self._lines.append(line.rstrip("\n"))

    def lines(self):
        with self._lock:
            return list(self._lines)

    def join(self, timeout_s=5):
        """After the process exited: waits for its last lines."""
        self._thread.join(timeout=timeout_s)


def full_quorum_env(groups):
    """The environment of a job that is compared bit for bit with another:
    its coordinator forms no quorum with fewer than all `groups`
    (PHALANX_MIN_REPLICAS), so on a loaded machine a group that starts late
    cannot watch the others train alone first and then heal (which changes
    the sums, and the final checksum)."""
    return {"PHALANX_MIN_REPLICAS": str(groups)}


class Launch:
    """phalanx-launch as a real process; its stdout is collected line by line
    on a thread so a test can wait for progress while the job runs."""

    def __init__(self, bindir, args, env=None, name="launch"):
        self.dir = tempfile.mkdtemp(prefix="phalanx-%s-" % name)
        self.http_port = free_port()
        self.zmq_port = free_port()
        self.http = "127.0.0.1:%d" % self.http_port
        self.events_path = os.path.join(self.dir, "events.jsonl")
        # a line a committed step (the default is a line every few seconds), which last_step() and the tests read
        progress = [] if "--progress" in args else ["--progress", "steps"]
        full = [os.path.join(bindir, "phalanx-launch"), "--log-dir", self.dir, "--http", self.http,
                "--bind", "tcp://127.0.0.1:%d" % self.zmq_port] + progress + list(args)
        e = dict(os.environ)
        e.update(env or {})
        self.proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e,
                                     preexec_fn=die_with_test)
        self.out = LineCollector(self.proc.stdout)

    def output(self):
        return self.out.lines()

    def last_step(self):
        step = 0
        for line in self.output():
            if "| step " in line or "] step " in line:
                try:
                    step = max(step, int(line.split("step")[1].split("|")[0]))
                except ValueError:
                    pass
        return step

    def finals(self):
        out = {}
        for line in self.output():
            if "finished: group=" in line:
                kv = dict(p.split("=", 1) for p in line.split("finished: ")[1].split() if "=" in p)
                out[kv["group"]] = kv
        return out

    def summary(self):
        for line in reversed(self.output()):
            if line.startswith("{"):
                return json.loads(line)
        return None

    def status(self):
        with urllib.request.urlopen("http://%s/status" % self.http, timeout=5) as r:
            return json.loads(r.read().decode())

    def pid_of(self, group, rank=0):
        for m in self.status()["members"]:
            if m["group"] == group and m["rank"] == rank and m["state"] != "lost":
                return m["pid"]
        return None

    def read_events(self):
        evs = []
        if os.path.exists(self.events_path):
            with open(self.events_path) as f:
                for line in f:
                    if line.strip():
                        try:
                            evs.append(json.loads(line))
                        except ValueError:
                            pass  # a line being written
        return evs

    def wait(self, timeout_s):
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)
            raise Fail("phalanx-launch did not finish within %d s; last lines:\n%s" %
                       (timeout_s, "\n".join(self.output()[-30:])))
        self.out.join()
        return self.proc.returncode

    def terminate(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.out.join()

    def tail(self, n=40):
        return "\n".join(self.output()[-n:])

    def endpoint(self):
        return "tcp://127.0.0.1:%d" % self.zmq_port

    def ctl_keys(self):
        """The flags a control-plane client (phalanxctl --coordinator) needs
        for the credentials the launcher made for its coordinator: CURVE
        keys, or a job token (workers with --liveness group), or none
        (--insecure)."""
        key = os.path.join(self.dir, "curve", "worker.key")
        token = os.path.join(self.dir, "credentials", "token")
        if os.path.exists(key):
            return ["--curve-secret-key-file", key,
                    "--coordinator-public-key-file", os.path.join(self.dir, "curve", "coordinator.pub")]
        return ["--token-file", token] if os.path.exists(token) else []


def launch_losses_checksum(bindir, args, name, steps):
    """A phalanx-launch job that must complete with `steps` per-step loss
    lines and one final checksum over its groups: (launch, losses, checksum)."""
    launch = Launch(bindir, args, name=name)
    try:
        rc = launch.wait(240)
    finally:
        launch.terminate()
    check(rc == 0, "%s completes:\n%s" % (name, launch.tail()))
    losses = [m.group(1) for line in launch.output()
              for m in [re.search(r"\bstep\s+\d+ \| groups \S+ \| loss (\S+)", line)] if m]
    sums = {kv["checksum"] for kv in launch.finals().values()}
    check(len(losses) == steps and len(sums) == 1, "%s: %d losses and one final checksum:\n%s" %
          (name, steps, launch.tail()))
    return launch, losses, sums.pop()


def run_to_end(cmd, timeout=300):
    """A command run to its end (text output captured); a death by a signal
    fails the test, any exit status is the caller's to judge."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    check(r.returncode >= 0, "%s died of signal %d:\n%s" % (" ".join(cmd), -r.returncode, r.stderr))
    return r


def ckpt_tool(bindir, *args):
    """phalanx-ckpt ARGS, run to its end."""
    return run_to_end([os.path.join(bindir, "phalanx-ckpt")] + list(args))
