"""Helpers for phalanx's process-level tests: start real coordinator and
worker processes on loopback, read /status and the JSONL event log, wait for
conditions with deadlines. Nothing here mocks a phalanx component."""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Fail(Exception):
    pass


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

    def start_coordinator(self, extra=()):
        args = [os.path.join(self.bindir, "phalanx-coordinator"), "--bind", self.endpoint,
                "--http", "127.0.0.1:0", "--job", self.job] + self.extra + list(extra)
        if self.events:
            args += ["--events", "file:" + self.events_path]
        log = open(os.path.join(self.dir, "coordinator.log"), "a")
        self.coord = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.coord.stdout.readline().strip()
        check(line.startswith("http="), "coordinator did not print its http address: %r (see %s)" % (line, self.dir))
        self.http = line[len("http="):]
        return self.coord

    def start_worker(self, group, rank, ranks_per_group, extra=()):
        args = [os.path.join(self.bindir, "phalanx-worker"), "--coordinator", self.endpoint,
                "--group", group, "--rank", str(rank), "--ranks-per-group", str(ranks_per_group)] + list(extra)
        log = open(os.path.join(self.dir, "worker-%s-%d.log" % (group, rank)), "a")
        p = subprocess.Popen(args, stdout=log, stderr=log)
        self.workers[(group, rank)] = p
        return p

    def get(self, path):
        with urllib.request.urlopen("http://%s%s" % (self.http, path), timeout=5) as r:
            return r.read().decode()

    def status(self):
        return json.loads(self.get("/status"))

    def metrics(self):
        out = {}
        for line in self.get("/metrics").splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

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
    print("PASS")
