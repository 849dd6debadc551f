"""Shared pieces of the fault-tolerance benchmarks (bench/ft_*.py).

They run real processes on loopback: a phalanx-coordinator, phalanx-worker
ranks, and the baseline programs ft_plain and ft_tcpbw. Every line a process
prints on stdout is read on its own thread and stamped with time.monotonic()
the moment it arrives, so a benchmark measures from the lines themselves
(not from phalanx-launch's 0.1 s-resolution log). stderr goes to a log file
per process in the run's scratch directory.

Nothing here decides a result: the benchmark scripts compute and print
their numbers, and say under what conditions (load, cores, OpenBLAS kernel)
they were taken."""
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# The test helpers' process plumbing serves the benchmarks too.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
from phalanx_test import Fail, die_with_test, free_port, wait_until  # noqa: E402


class BenchError(Exception):
    pass


def kv(line):
    """'progress step=3 ms=1.5 group=g0' -> {'step': '3', 'ms': '1.5', 'group': 'g0'}"""
    return dict(p.split("=", 1) for p in line.split() if "=" in p)


def percentile(xs, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(q / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def summary(xs):
    return {"n": len(xs), "median": statistics.median(xs), "mean": statistics.fmean(xs),
            "p95": percentile(xs, 95), "min": min(xs), "max": max(xs)}


def environment(coretype_note):
    load = os.getloadavg()
    return ("machine: %d cores, load average %.2f %.2f %.2f (other work on the machine shares the cores); %s"
            % (os.cpu_count(), load[0], load[1], load[2], coretype_note))


def mem_available_gb():
    """MemAvailable of /proc/meminfo in GB (1e9 bytes); 0 when unknown."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1e6
    return 0.0


def write_figures(path, bench, figures, coretype_note):
    """--json OUT of a benchmark: the figures phalanx-sim reads (see
    bench/sim_figures.py, which merges them), with what produced them."""
    doc = {"bench": bench, "figures": figures, "argv": sys.argv,
           "date": time.strftime("%Y-%m-%d %H:%M"), "environment": environment(coretype_note)}
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("figures for phalanx-sim written to %s" % path)


def run_bench(main, prog):
    """A benchmark's entry point: main(); a BenchError is printed as
    `prog: why` on stderr and exits 1."""
    try:
        main()
    except BenchError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        sys.exit(1)


def blas_env(coretype):
    """Environment for every process of a benchmark, and a line saying what
    it is. OPENBLAS_CORETYPE is set only when asked, and then for all of them."""
    env = dict(os.environ)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
        return env, "OPENBLAS_CORETYPE=%s, set for every process the benchmark starts (both sides alike)" % coretype
    if env.get("OPENBLAS_CORETYPE"):
        return env, ("OPENBLAS_CORETYPE=%s inherited from the environment, equally for every process"
                     % env["OPENBLAS_CORETYPE"])
    return env, "OPENBLAS_CORETYPE unset (OpenBLAS's own kernel choice), equally for every process"


def prepare_data(bindir, data_dir):
    """The demo corpus as token shards (phalanx-data --demo), once."""
    if glob.glob(os.path.join(data_dir, "train_*.bin")):
        return data_dir
    os.makedirs(data_dir, exist_ok=True)
    r = subprocess.run([os.path.join(bindir, "phalanx-data"), "--demo", "--out", data_dir],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise BenchError("phalanx-data --demo failed:\n%s" % r.stdout[-1000:])
    return data_dir


def cpu_ns(pid):
    """CPU time a process has run so far, in ns: the sum over its live threads
    of /proc/PID/task/TID/schedstat (0 when it is gone)."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


class Proc:
    """A process whose stdout lines are collected as (monotonic time, line).
    At each progress line the reader also samples the CPU time used so far by
    this process and by the processes in cpu_pids (e.g. the coordinator), so
    that CPU per step can be taken over exactly the steps measured."""

    def __init__(self, args, log_path, env=None, name="", cpu_pids=()):
        self.name = name or os.path.basename(args[0])
        self.cpu_pids = list(cpu_pids)
        self.cpu = []  # (step line index, own ns, [ns of each cpu_pids])
        self.log_path = log_path
        self.log = open(log_path, "a")
        self.popen = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self.log, env=env,
                                      text=True, bufsize=1, preexec_fn=die_with_test)
        self.pid = self.popen.pid
        self.lines = []
        self.cv = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.popen.stdout:
            t = time.monotonic()
            sample = None
            if line.startswith("progress "):
                sample = (cpu_ns(self.pid), [cpu_ns(p) for p in self.cpu_pids])
            with self.cv:
                self.lines.append((t, line.rstrip("\n")))
                if sample:
                    self.cpu.append((len(self.lines) - 1,) + sample)
                self.cv.notify_all()
        with self.cv:
            self.cv.notify_all()

    def snapshot(self):
        with self.cv:
            return list(self.lines)

    def cpu_by_step(self):
        """{step: (own CPU ns, [CPU ns of cpu_pids])} sampled at each progress line."""
        with self.cv:
            return {int(kv(self.lines[i][1])["step"]): (own, list(extra)) for i, own, extra in self.cpu}

    def alive(self):
        return self.popen.poll() is None

    def kill(self):
        """SIGKILL; returns the monotonic time just before the signal."""
        t = time.monotonic()
        os.kill(self.pid, signal.SIGKILL)
        return t

    def stop(self, timeout=15):
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.reader.join(timeout=5)
        self.log.close()

    def wait(self, timeout):
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise BenchError("%s (pid %d) did not finish within %.0f s; see %s"
                             % (self.name, self.pid, timeout, self.log_path))
        self.reader.join(timeout=5)
        return rc


def callgrind_cmd(out_file):
    """Runs a process under valgrind's callgrind, one output file per thread
    (OUT-01 is the main thread). Callgrind counts user-space instructions
    only, the same on every run of the same work: the kernel's share of a
    system call or a context switch is not in it. --fair-sched: valgrind
    runs one thread at a time; this hands the turn round in order, so a
    process's other threads (the agent's heartbeats) are not starved."""
    if not shutil.which("valgrind"):
        raise BenchError("valgrind is not installed (apt-get install valgrind)")
    return ["valgrind", "--tool=callgrind", "--separate-threads=yes", "--fair-sched=yes",
            "--callgrind-out-file=" + out_file]


def callgrind_threads(out_file):
    """[(thread number, instructions)] of a callgrind_cmd(out_file) run, main thread first."""
    rows = []
    for f in glob.glob(glob.escape(out_file) + "-*"):
        suffix = f.rsplit("-", 1)[1]
        if not suffix.isdigit():
            continue
        with open(f, errors="replace") as fh:
            for line in fh:
                if line.startswith("totals:"):
                    rows.append((int(suffix), int(line.split()[1])))
                    break
    return sorted(rows)


def wait_for(pred, timeout_s, what, interval_s=0.005):
    try:
        return wait_until(pred, timeout_s, what, interval_s)
    except Fail as e:
        raise BenchError(str(e))


class Job:
    """A coordinator and phalanx-worker processes (one rank per group) in a
    scratch directory; workers are started, killed and restarted one by one."""

    def __init__(self, bindir, name, coord_args=(), env=None, keep=False):
        self.bindir = bindir
        self.dir = tempfile.mkdtemp(prefix="phalanx-ftbench-%s-" % name)
        self.endpoint = "tcp://127.0.0.1:%d" % free_port()
        self.env = env
        self.keep = keep
        self.workers = {}     # group -> Proc (the current incarnation)
        self.incarnations = {}  # group -> count started
        args = [os.path.join(bindir, "phalanx-coordinator"), "--bind", self.endpoint, "--job", name,
                "--events", "file:" + os.path.join(self.dir, "events.jsonl")] + list(coord_args)
        self.coord = Proc(args, os.path.join(self.dir, "coordinator.log"), env=env, name="coordinator")

    def start_worker(self, group, worker_args, wrap=()):
        """wrap: a command the worker runs under (e.g. callgrind_cmd())."""
        n = self.incarnations.get(group, 0)
        self.incarnations[group] = n + 1
        args = list(wrap) + [os.path.join(self.bindir, "phalanx-worker"), "--coordinator", self.endpoint,
                             "--group", group, "--rank", "0", "--ranks-per-group", "1"] + list(worker_args)
        p = Proc(args, os.path.join(self.dir, "worker-%s.%d.log" % (group, n)), env=self.env,
                 name="worker %s#%d" % (group, n), cpu_pids=[self.coord.pid])
        self.workers[group] = p
        return p

    def stop(self):
        for p in self.workers.values():
            p.stop()
        self.coord.stop()
