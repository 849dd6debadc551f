"""The environment form of the flags (PHALANX_SOME_FLAG for --some-flag), as
the Kubernetes manifests use it: a coordinator and a worker configured only
through PHALANX_* variables form a quorum and answer /healthz; a bad value
names the variable and exits 2; the command line wins over the environment;
a PHALANX_ variable that names no flag of the program is reported and
ignored; a boolean takes 1/true/0/false only; --stop-exit-code is the
status of a worker stopped by SIGTERM (what Kubernetes needs to replace it)."""
import json
import os
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, die_with_test, free_port, main, wait_until  # noqa: E402


def clean_env(**kv):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PHALANX_")}
    env.update(kv)
    return env


def run(bindir, prog, args, **kv):
    return subprocess.run([os.path.join(bindir, prog)] + args, env=clean_env(**kv), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=30)


def expect_usage_error(r, what, *needles):
    check(r.returncode == 2, "%s: exit 2, got %d (%s)" % (what, r.returncode, r.stderr.strip()))
    for n in needles:
        check(n in r.stderr, "%s: stderr names %r: %r" % (what, n, r.stderr.strip()))


def test_errors(bindir):
    r = run(bindir, "phalanx-worker", [], PHALANX_GROUP="g", PHALANX_RANK="x")
    expect_usage_error(r, "PHALANX_RANK=x", "PHALANX_RANK", "--rank", "'x'")
    r = run(bindir, "phalanx-coordinator", [], PHALANX_MIN_REPLICAS="0")
    expect_usage_error(r, "PHALANX_MIN_REPLICAS=0", "PHALANX_MIN_REPLICAS")
    r = run(bindir, "phalanx-coordinator", [], PHALANX_QUIET="maybe")
    expect_usage_error(r, "PHALANX_QUIET=maybe", "PHALANX_QUIET")
    # The command line wins: --ranks-per-group 1 there beats 2 in the
    # environment, so rank 1 (from the environment) is out of range.
    r = run(bindir, "phalanx-worker", ["--ranks-per-group", "1"], PHALANX_GROUP="g", PHALANX_RANK="1",
            PHALANX_RANKS_PER_GROUP="2")
    expect_usage_error(r, "--ranks-per-group 1 over PHALANX_RANKS_PER_GROUP=2", "--rank 1 must be below --ranks-per-group 1")
    # ... and its variable is not read at all: a bad one is no error then.
    r = run(bindir, "phalanx-worker", ["--rank", "0", "--ranks-per-group", "0"], PHALANX_GROUP="g", PHALANX_RANK="x")
    expect_usage_error(r, "--rank 0 over PHALANX_RANK=x", "--ranks-per-group")
    check("PHALANX_RANK" not in r.stderr, "PHALANX_RANK is not read when --rank is given: %r" % r.stderr)
    # A variable that names no flag of this program is reported and ignored
    # (one environment may serve both programs): --help still exits 0.
    r = run(bindir, "phalanx-worker", ["--help"], PHALANX_BIND="tcp://127.0.0.1:1", PHALANX_NO_SUCH_FLAG="1")
    check(r.returncode == 0, "worker --help with PHALANX_BIND set exits 0, got %d" % r.returncode)
    for var in ("PHALANX_BIND", "PHALANX_NO_SUCH_FLAG"):
        check("ignoring " + var in r.stderr, "worker reports %s as ignored: %r" % (var, r.stderr))
    # --checkpoint must not pass for --checkpoint-dir: a prefix is no flag.
    r = run(bindir, "phalanx-worker", ["--help"], PHALANX_CHECKPOINT="x")
    check("ignoring PHALANX_CHECKPOINT" in r.stderr, "a prefix of a flag is not a flag: %r" % r.stderr)
    # An empty or 0 boolean leaves the flag out; help and PHALANX_HELP: --help is no variable.
    r = run(bindir, "phalanx-worker", [], PHALANX_HELP="1")
    expect_usage_error(r, "PHALANX_HELP is ignored, so --group is still missing", "ignoring PHALANX_HELP", "--group is required")


def get(http, path):
    with urllib.request.urlopen("http://%s%s" % (http, path), timeout=5) as r:
        return r.status, r.read().decode()


def test_job(bindir):
    d = tempfile.mkdtemp(prefix="phalanx-env-")
    port, http_port = free_port(), free_port()
    token = os.path.join(d, "token")
    with open(token, "w") as f:
        f.write("s3cret-env-token\n")
    coord_env = clean_env(PHALANX_BIND="tcp://127.0.0.1:%d" % port, PHALANX_HTTP="127.0.0.1:%d" % http_port,
                          PHALANX_JOB="envjob", PHALANX_TOKEN_FILE=token, PHALANX_EVENTS="file:" + os.path.join(d, "ev.jsonl"),
                          PHALANX_QUIET="1")
    worker_env = clean_env(PHALANX_COORDINATOR="tcp://127.0.0.1:%d" % port, PHALANX_GROUP="g-env", PHALANX_JOB="envjob",
                           PHALANX_TOKEN_FILE=token, PHALANX_DATA_HOST="127.0.0.1", PHALANX_QUIET="true",
                           PHALANX_STOP_EXIT_CODE="143",
                           PHALANX_BIND="tcp://ignored:1")  # the coordinator's flag, ignored by the worker
    procs = []
    try:
        log = open(os.path.join(d, "coordinator.log"), "w")
        procs.append(subprocess.Popen([os.path.join(bindir, "phalanx-coordinator")], env=coord_env, stdout=log, stderr=log,
                                      preexec_fn=die_with_test))
        wlog = open(os.path.join(d, "worker.log"), "w")
        procs.append(subprocess.Popen([os.path.join(bindir, "phalanx-worker")], env=worker_env, stdout=wlog, stderr=wlog,
                                      preexec_fn=die_with_test))
        http = "127.0.0.1:%d" % http_port

        def healthy():
            try:
                return get(http, "/healthz") == (200, "ok\n")
            except OSError:
                return False
        wait_until(healthy, 20, "/healthz answering 200 ok")

        def formed():
            st = json.loads(get(http, "/status")[1])
            return st if st["quorum"]["groups"] == ["g-env"] else None
        st = wait_until(formed, 20, "a quorum of group g-env (logs in %s)" % d, 0.05)
        check(st["job"] == "envjob", "the coordinator's job comes from PHALANX_JOB: %r" % st["job"])
        check(all(p.poll() is None for p in procs), "coordinator and worker still run")
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    check(procs[1].returncode == 143, "the worker exits PHALANX_STOP_EXIT_CODE=143 on SIGTERM, got %s"
          % procs[1].returncode)
    with open(os.path.join(d, "worker.log")) as f:
        wl = f.read()
    check("ignoring PHALANX_BIND" in wl, "the worker reported PHALANX_BIND as not its flag: %r" % wl[-500:])


def test(bindir):
    test_errors(bindir)
    test_job(bindir)


if __name__ == "__main__":
    main(test)
