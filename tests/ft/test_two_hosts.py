"""docs/operations.md's "Two machines", run as written, across two hosts
played by two network namespaces joined by a veth pair (host A 10.77.0.1,
host B 10.77.0.2; the page's 192.168.1.10 and 192.168.1.11 are replaced by
them). Each shell block's first line says where it runs; every command of
it runs there (`ip netns exec`), in that host's own folder, with build/bin
pointing at the build's programs. The coordinator and the launchers run in
the background; `phalanxctl status` runs once all three groups are in the
quorum, `phalanxctl kill b0/0` (a real SIGKILL) once b0 committed step
KILL_STEP. The page's one manual step, copying the two public keys between
the hosts, is done here.

Checked: both launchers complete the job to its last step, their progress
lines counting the job's three groups and their own; the killed b0
was restarted on host B and healed from a group on host A (heal events with
peer_group); every group ends with one checksum; the members' data hosts in
`phalanxctl status` (the coordinator's /status) and member_joined are their
own namespace's address; host B's workers hold data-plane connections to host A's data
host, all on 10.77.0.2 and in the port range the page sets, and host B's
veth carried at least a quarter of the job's gradient bytes; UDP heartbeats
arrived from every member; the final checkpoint is in host A's folder.

Without permission to create network namespaces (not root, no
CAP_SYS_ADMIN) the test exits 77 saying so. Namespaces (and the veth pair
inside them) are removed at the end; ones left by a run that was SIGKILLed
are removed by the next run; every process dies with the test."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, check, die_with_test, main, metrics_by_series, wait_until  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "operations.md")
DOC_ADDR = {"A": "192.168.1.10", "B": "192.168.1.11"}
ADDR = {"A": "10.77.0.1", "B": "10.77.0.2"}
NS_PREFIX = "px2h-"
KILL_STEP = 40           # b0 is killed once it committed this step (fixed: printed on failure)
JOB_TIMEOUT_S = 480
PORT_RANGE_SYSCTL = "/proc/sys/net/ipv4/ip_local_port_range"


def doc_blocks():
    """The section's shell blocks as (hosts, commands): hosts from the first
    line ("# host A", "# host B", "# host A and host B"), commands with their
    continuation lines joined."""
    with open(DOC) as f:
        text = f.read()
    parts = text.split("\n## Two machines\n", 1)
    check(len(parts) == 2, "docs/operations.md has no '## Two machines' section")
    section = parts[1].split("\n## ", 1)[0]
    blocks = []
    for body in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines = body.rstrip("\n").split("\n")
        m = re.match(r"# (host A and host B|host A|host B)\b", lines[0])
        check(m, "a block of 'Two machines' does not begin with '# host A', '# host B' or "
                 "'# host A and host B': %r" % lines[0])
        hosts = {"host A": ["A"], "host B": ["B"], "host A and host B": ["A", "B"]}[m.group(1)]
        cmds, cur = [], ""
        for line in lines[1:]:
            if line.strip().startswith("#") and not cur:
                continue
            cur += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
            if not line.endswith("\\"):
                if cur.strip():
                    cmds.append(" ".join(cur.split()))
                cur = ""
        for h in DOC_ADDR:
            cmds = [c.replace(DOC_ADDR[h], ADDR[h]) for c in cmds]
        blocks.append((hosts, cmds))
    check(blocks, "the 'Two machines' section has no sh blocks")
    return blocks


class Hosts:
    """Two network namespaces joined by a veth pair, each with its address
    and loopback up. The names carry the test's pid: unique per run, and a
    later run removes those whose test is gone."""

    def __init__(self):
        self.ns = {"A": "%s%d-a" % (NS_PREFIX, os.getpid()), "B": "%s%d-b" % (NS_PREFIX, os.getpid())}
        self.made = []

    @staticmethod
    def sweep_stale():
        r = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in r.stdout.splitlines():
            m = re.match(r"(%s(\d+)-[ab])\b" % re.escape(NS_PREFIX), line)
            if m and not os.path.exists("/proc/%s" % m.group(2)):
                subprocess.run(["ip", "netns", "del", m.group(1)], stderr=subprocess.DEVNULL)

    def up(self):
        if shutil.which("ip") is None:
            print("SKIP: no 'ip' program (iproute2) to make network namespaces")
            sys.exit(77)
        self.sweep_stale()
        r = subprocess.run(["ip", "netns", "add", self.ns["A"]], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            print("SKIP: cannot create a network namespace (needs root or CAP_SYS_ADMIN): %s" % r.stdout.strip())
            sys.exit(77)
        self.made.append(self.ns["A"])
        self.ip("netns", "add", self.ns["B"])
        self.made.append(self.ns["B"])
        # The pair is made inside the namespaces: nothing is left in the host's own.
        self.ip("link", "add", "veth-a", "netns", self.ns["A"], "type", "veth", "peer", "name", "veth-b",
                "netns", self.ns["B"])
        for h, dev in (("A", "veth-a"), ("B", "veth-b")):
            self.ip("-n", self.ns[h], "addr", "add", ADDR[h] + "/24", "dev", dev)
            self.ip("-n", self.ns[h], "link", "set", dev, "up")
            self.ip("-n", self.ns[h], "link", "set", "lo", "up")

    def down(self):
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made = []

    @staticmethod
    def ip(*args):
        r = subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        check(r.returncode == 0, "ip %s: %s" % (" ".join(args), r.stdout.strip()))

    def argv(self, host, argv):
        return ["ip", "netns", "exec", self.ns[host]] + argv

    def run(self, host, argv, cwd=None, timeout=120):
        return subprocess.run(self.argv(host, argv), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout, preexec_fn=die_with_test)

    def veth_bytes(self, host, what):
        dev = "veth-a" if host == "A" else "veth-b"
        r = self.run(host, ["cat", "/sys/class/net/%s/statistics/%s" % (dev, what)])
        check(r.returncode == 0, "read %s's %s: %s" % (dev, what, r.stdout))
        return int(r.stdout)


def own_group(preexec):
    def f():
        os.setpgrp()  # killed as a group at the end
        preexec()
    return f


class TwoHostJob:
    def __init__(self, bindir, hosts):
        self.hosts = hosts
        self.work = tempfile.mkdtemp(prefix="phalanx-twohosts-")
        self.dir = {}
        for h in ("A", "B"):
            d = os.path.join(self.work, "host-" + h.lower())
            os.makedirs(os.path.join(d, "build"))
            os.symlink(os.path.abspath(bindir), os.path.join(d, "build", "bin"))
            self.dir[h] = d
        self.procs = []       # (host, name, Popen, log path)
        self.coordinator = None
        self.launchers = {}   # host -> (Popen, log path)
        self.steps = None
        self.kill_done = None
        self.status_out = None
        self.sockets_seen = None

    def sh(self, host, cmd):
        r = self.hosts.run(host, ["bash", "-e", "-c", cmd], cwd=self.dir[host])
        check(r.returncode == 0, "host %s: `%s` exited %d:\n%s" % (host, cmd, r.returncode, r.stdout[-2000:]))
        return r.stdout

    def start(self, host, cmd):
        name = cmd.split()[0].split("/")[-1]
        log = os.path.join(self.work, "%s-%s.out" % (name, host))
        with open(log, "w") as out:
            p = subprocess.Popen(self.hosts.argv(host, ["bash", "-c", "exec " + cmd]), cwd=self.dir[host],
                                 stdout=out, stderr=subprocess.STDOUT, preexec_fn=own_group(die_with_test))
        self.procs.append((host, name, p, log))
        if name == "phalanx-coordinator":
            self.coordinator = p
            time.sleep(0.3)
            check(p.poll() is None, "the coordinator exited at start (%s):\n%s" % (p.returncode, read(log)))
        else:
            self.launchers[host] = (p, log)
            m = re.search(r"--steps (\d+)", cmd)
            check(m, "the launcher's command gives --steps: %s" % cmd)
            self.steps = int(m.group(1))

    def stop_all(self):
        for _, _, p, _ in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def committed(self, host, group):
        """The last step `group` (rank 0) printed as committed."""
        path = os.path.join(self.dir[host], "run", "launch", "worker-%s-0.out" % group)
        step = 0
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    m = re.search(r'(?:^progress |"kind":"progress").*?\bstep[=":]+(\d+)', line)
                    if m:
                        step = max(step, int(m.group(1)))
        return step

    def events(self):
        path = os.path.join(self.dir["A"], "run", "events.jsonl")
        out = []
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass  # a line being written
        return out

    def launcher_tails(self):
        return "\n".join("--- launcher on host %s (%s):\n%s" % (h, log, "\n".join(read(log).splitlines()[-25:]))
                         for h, (_, log) in sorted(self.launchers.items()))


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        return "(%s)" % e


def worker_sockets(hosts, host):
    """(local, peer) address pairs of the TCP connections phalanx-worker
    processes hold in `host`'s namespace."""
    r = hosts.run(host, ["ss", "-Htnp", "state", "established"])
    check(r.returncode == 0, "ss on host %s: %s" % (host, r.stdout))
    out = []
    for line in r.stdout.splitlines():
        if '"phalanx-worker"' not in line:
            continue
        f = line.split()
        out.append((f[2], f[3]))
    return out


def run_page(job, hosts):
    for hosts_of_block, cmds in doc_blocks():
        for cmd in cmds:
            for h in hosts_of_block:
                if cmd.startswith(("build/bin/phalanx-coordinator", "build/bin/phalanx-launch")):
                    job.start(h, cmd)
                elif "phalanxctl status" in cmd:
                    def three_groups():
                        out = job.sh(h, cmd)
                        return re.search(r"groups \[a0 a1 b0\]", out) and out
                    job.status_out = wait_until(three_groups, 120, "`%s` shows a quorum of a0, a1, b0" % cmd, 0.5)
                    job.sockets_seen = worker_sockets(hosts, "B")
                elif "phalanxctl kill" in cmd:
                    wait_until(lambda: job.committed("B", "b0") >= KILL_STEP, 240,
                               "b0 committed step %d" % KILL_STEP, 0.1)
                    job.kill_done = (job.committed("B", "b0"), job.sh(h, cmd))
                else:
                    job.sh(h, cmd)
        if hosts_of_block == ["B"] and any("keygen" in c for c in cmds):
            # The page's manual step after host B's keys: the public keys change hosts.
            shutil.copy(os.path.join(job.dir["A"], "keys", "coordinator.pub"), os.path.join(job.dir["B"], "keys"))
            shutil.copy(os.path.join(job.dir["B"], "keys", "host-b.pub"), os.path.join(job.dir["A"], "keys"))
    check(job.coordinator and set(job.launchers) == {"A", "B"}, "the page starts a coordinator and a launcher a host")
    check(job.status_out and job.kill_done, "the page shows the status and runs the drill")
    for h in ("A", "B"):
        p, log = job.launchers[h]
        try:
            rc = p.wait(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Fail("the launcher on host %s did not finish within %d s" % (h, JOB_TIMEOUT_S))
        check(rc == 0, "the launcher on host %s exited %d" % (h, rc))


def check_outcome(job, hosts):
    steps = job.steps
    out = {h: read(job.launchers[h][1]) for h in ("A", "B")}
    # The job completed, every group with the same state.
    finals = {}
    for h in ("A", "B"):
        summary = [json.loads(l) for l in out[h].splitlines() if l.startswith("{")]
        check(summary and summary[-1]["completed"] and summary[-1]["steps"] == steps,
              "host %s's launcher: the job completed at step %d: %s" % (h, steps, summary[-1:]))
        for m in re.finditer(r"finished: group=(\S+) steps=(\d+) .*?checksum=(\S+)", out[h]):
            finals[m.group(1)] = (int(m.group(2)), m.group(3))
    check(sorted(finals) == ["a0", "a1", "b0"], "every group's final line, on its own host: %s" % finals)
    for h, here in (("A", 2), ("B", 1)):
        check(re.search(r"\| groups 3 \(%d started here\) \|" % here, out[h]),
              "host %s's progress lines count the job's groups and its own %d" % (h, here))
    check(all(s == steps for s, _ in finals.values()), "every group reached step %d: %s" % (steps, finals))
    check(len(set(c for _, c in finals.values())) == 1, "one checksum for every group: %s" % finals)

    # The kill: b0 restarted on host B and healed from a group on host A.
    at_step = job.kill_done[0]
    check("x worker b0/0 died (signal 9)" in out["B"], "host B's launcher saw b0/0 die of SIGKILL")
    evs = job.events()
    healed = [e for e in evs if e["type"] == "heal_finished" and e["group"] == "b0" and e["step"] >= at_step]
    check(healed, "b0 healed after the kill at step %d: %s" % (at_step, [e for e in evs if "heal" in e["type"]]))
    check(all(e["peer_group"] in ("a0", "a1") for e in healed), "b0 healed from host A's groups: %s" % healed)
    check(re.search(r"\+ group b0 healed from group a[01] at step", out["B"]),
          "host B's launcher shows b0 healed from a group on host A")

    # Where each member's data plane is: /status (through phalanxctl), member_joined.
    for group, host in (("a0", "A"), ("a1", "A"), ("b0", "B")):
        check(re.search(r"^%s\s+0\s+\d+\s+\S+\s+%s\s" % (group, re.escape(ADDR[host])), job.status_out, re.M),
              "phalanxctl status shows %s's data host %s:\n%s" % (group, ADDR[host], job.status_out))
        joined = [e for e in evs if e["type"] == "member_joined" and e["group"] == group]
        check(joined and all(e["data_host"] == ADDR[host] for e in joined),
              "member_joined of %s carries data_host %s: %s" % (group, ADDR[host], joined))

    # The data plane crossed the link: B's workers connected to A's data host,
    # on B's address, from the port range the page set.
    lo, hi = (int(x) for x in re.search(r'ip_local_port_range="(\d+) (\d+)"', read(DOC)).groups())
    socks = job.sockets_seen
    check(socks, "host B's workers hold TCP connections")
    data = [(l, p) for l, p in socks if p.startswith(ADDR["A"] + ":") and not p.endswith(":7777")]
    check(data, "host B's workers have data-plane connections to host A's %s: %s" % (ADDR["A"], socks))
    for local, peer in socks:
        addr, port = local.rsplit(":", 1)
        check(addr == ADDR["B"] and lo <= int(port) <= hi,
              "host B's worker socket %s -> %s is on %s, port in %d..%d" % (local, peer, ADDR["B"], lo, hi))
    params = None
    for line in read(os.path.join(job.dir["B"], "run", "launch", "worker-b0-0.log")).splitlines():
        m = re.search(r"\bparams=(\d+)", line)
        if m:
            params = int(m.group(1))
    check(params, "b0's log names the model's parameter count (params=)")
    sent = hosts.veth_bytes("B", "tx_bytes")
    # A ring all-reduce over three groups sends 4/3 of the gradients' bytes from
    # each, every step; b0's two neighbours are on host A.
    check(sent >= steps // 4 * 4 * params,
          "host B's veth sent %d bytes, at least a quarter of %d steps of %d float gradients" % (sent, steps, params))

    # UDP heartbeats from every member arrived (none was told to fall back).
    metrics = job.sh("B", "python3 -c \"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen("
                          "'http://%s:8080/metrics', timeout=5).read().decode())\"" % ADDR["A"])
    vals = metrics_by_series(metrics)
    check(float(vals.get("phalanx_udp_heartbeats_total", 0)) > 0, "UDP heartbeats reached the coordinator")
    check(float(vals.get("phalanx_udp_off_total", 1)) == 0, "no member was told to stop heartbeating over UDP")

    # The writer of the checkpoints is a0: its host's folder holds the last one.
    check(os.path.isdir(os.path.join(job.dir["A"], "ckpt", "step_%08d" % steps)),
          "host A's ckpt/ holds the final checkpoint step_%08d: %s" %
          (steps, os.listdir(os.path.join(job.dir["A"], "ckpt")) if os.path.isdir(os.path.join(job.dir["A"], "ckpt"))
           else "no folder"))
    print("two hosts: %d steps, b0 killed at step %d and healed from %s; checksum %s; host B's workers held %d "
          "data-plane connections to host A and sent %d bytes over the veth" %
          (steps, at_step, healed[-1]["peer_group"], finals["a0"][1], len(data), sent))
    print(job.status_out)


def test(bindir):
    with open(PORT_RANGE_SYSCTL) as f:
        root_range = f.read()
    hosts = Hosts()
    job = None
    try:
        hosts.up()
        job = TwoHostJob(bindir, hosts)
        try:
            run_page(job, hosts)
            check_outcome(job, hosts)
        except Fail as e:
            raise Fail("%s\n(b0 killed at step %s, KILL_STEP %d; files in %s)\n%s" %
                       (e, job.kill_done[0] if job.kill_done else "-", KILL_STEP, job.work, job.launcher_tails()))
    finally:
        if job:
            job.stop_all()
        hosts.down()
        with open(PORT_RANGE_SYSCTL) as f:
            now = f.read()
        if now != root_range:  # the page's sysctl ran inside the namespaces only
            with open(PORT_RANGE_SYSCTL, "w") as f:
                f.write(root_range)
            raise Fail("the host's own ip_local_port_range changed (%r -> %r); restored" % (root_range, now))


if __name__ == "__main__":
    main(test)
