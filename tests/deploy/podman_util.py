"""What the container tests share: podman's settings for this project
(deploy/containers.conf through CONTAINERS_CONF, never /etc), and a reaper
that ends what a test started when the test ends, however it ends: the
containers it labelled, and the process groups it handed over (a shell and
the podman clients it runs, `make image`'s build)."""
import os
import signal
import subprocess
import sys

from phalanx_test import Fail, die_with_test

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CONF = os.path.join(ROOT, "deploy", "containers.conf")

# The reaper: reads "+PGID" and "-PGID" lines (a group to end, a group that
# ended by itself) until EOF, which comes when the test exits, even by
# SIGKILL; then SIGKILLs the groups still listed and removes the containers.
_REAPER = r"""
import os, signal, subprocess, sys
podman, label = sys.argv[1], sys.argv[2]
groups, buf = set(), b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    buf += chunk
    *lines, buf = buf.split(b"\n")
    for line in lines:
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except OSError:
        pass
subprocess.run([podman, "rm", "-f", "-t", "0", "--filter", "label=" + label],
               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
"""


def env(base=None):
    """An environment for podman: base (default os.environ) with CONTAINERS_CONF."""
    return dict(os.environ if base is None else base, CONTAINERS_CONF=CONF)


class Reaper:
    """Started outside the test's process group (conmon, not the test, is a
    container's parent, so PDEATHSIG cannot reach it); waits for EOF on a
    pipe only the test holds open."""

    def __init__(self, podman, label):
        r, self.w = os.pipe()
        subprocess.Popen([sys.executable, "-c", _REAPER, podman, label], stdin=r, start_new_session=True, env=env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(r)

    def run(self, argv, timeout=None, **kw):
        """subprocess.run in a process group of its own, which the reaper
        ends if the test dies first; a timeout kills the group."""
        p = subprocess.Popen(argv, start_new_session=True, preexec_fn=die_with_test, **kw)
        os.write(self.w, b"+%d\n" % p.pid)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise Fail("%s: still running after %s s, ended" % (" ".join(argv)[:200], timeout))
        finally:
            try:
                os.killpg(p.pid, 0)
            except OSError:  # the whole group is gone: nothing left to end
                os.write(self.w, b"-%d\n" % p.pid)
        return subprocess.CompletedProcess(argv, p.returncode, out, err)


def build_image(reaper):
    """`make image` (scripts/image.sh: cached after the first build); its exit status."""
    return reaper.run([os.path.join(ROOT, "scripts", "image.sh")], cwd=ROOT, stdin=subprocess.DEVNULL).returncode
