"""The image as docs/deploy.md says to use it with podman.

docs   the sh block of docs/deploy.md's "Run the image with podman" runs as
       written (sh -eu, from the repository root, with no CONTAINERS_CONF of
       its own: the block sets it) and does what it says: the version, a
       coordinator container and a worker container training a short job to
       its end, phalanxctl status from a third.
plot   `phalanxctl plot` inside the image exits 1 with one line on stderr
       naming what is missing (python3, the plot script), no traceback.

The image is what `make image` builds (scripts/image.sh; cached after the
first build). Without podman the test cannot run and says so (exit 77).
Every container the test starts carries a label (a podman shim adds it to
each `podman run` of the block) and is removed when the test ends, even by
SIGKILL. usage: test_image.py BINDIR SCENARIO"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import podman_util  # noqa: E402
from phalanx_test import check, main_scenarios  # noqa: E402

ROOT = podman_util.ROOT
LABEL = "phalanx-test-image"
IMAGE = "localhost/phalanx:latest"
SECTION = "## Run the image with podman"


def podman_or_skip():
    podman = shutil.which("podman")
    if not podman:
        print("SKIP: podman is not installed (scripts/install-deps.sh installs it): the image cannot be run here")
        sys.exit(77)
    return podman


def build_image(podman):
    """The image, and the reaper of what the test starts."""
    reaper = podman_util.Reaper(podman, LABEL)
    rc = podman_util.build_image(reaper)
    check(rc == 0, "scripts/image.sh (make image) failed: exit %d" % rc)
    return reaper


def documented_block():
    """The first ```sh block under SECTION in docs/deploy.md."""
    with open(os.path.join(ROOT, "docs", "deploy.md")) as f:
        text = f.read()
    check(SECTION in text, "docs/deploy.md has no section %r" % SECTION)
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    m = re.search(r"^```sh\n(.*?)^```", body, re.S | re.M)
    check(m, "docs/deploy.md %r holds no ```sh block" % SECTION)
    return m.group(1)


def podman_shim(podman, folder):
    """A `podman` first on PATH that labels each container it runs."""
    path = os.path.join(folder, "podman")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = run ]; then shift; exec %s run --label %s "$@"; fi\nexec %s "$@"\n'
                % (podman, LABEL, podman))
    os.chmod(path, 0o755)


def test_docs(bindir):
    podman = podman_or_skip()
    reaper = build_image(podman)
    block = documented_block()
    check("CONTAINERS_CONF=" in block, "the documented block does not set CONTAINERS_CONF:\n%s" % block)
    names = re.findall(r"--name (\S+)", block)
    r = subprocess.run([podman, "ps", "-a", "--format", "{{.Names}}"], env=podman_util.env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    taken = sorted(set(names) & set(r.stdout.split()))
    check(not taken, "containers named %s exist already; the documented commands create them: remove them first "
          "(podman rm -f %s)" % (taken, " ".join(taken)))
    shim = tempfile.mkdtemp(prefix="phalanx-image-shim-")
    podman_shim(podman, shim)
    env = {k: v for k, v in os.environ.items() if k != "CONTAINERS_CONF"}
    env["PATH"] = shim + os.pathsep + env.get("PATH", "")
    print("running docs/deploy.md %r from %s:\n%s" % (SECTION, ROOT, block), flush=True)
    try:
        r = reaper.run(["sh", "-eu", "-c", block], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    finally:
        subprocess.run([podman, "rm", "-f", "-t", "0", "--filter", "label=" + LABEL], env=podman_util.env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = r.stdout
    print("--- its output (last 25 lines)\n%s" % "\n".join(out.splitlines()[-25:]), flush=True)
    check(r.returncode == 0, "the documented block failed (exit %d)" % r.returncode)
    check(re.search(r"^phalanx-worker \S+", out, re.M), "no `phalanx-worker VERSION` line from --version")
    steps = re.search(r"--steps (\d+)", block)
    check(steps, "the documented worker names no --steps")
    final = re.findall(r"^final group=(\S+) steps=(\d+) ", out, re.M)
    check(final and final[-1] == ("g0", steps.group(1)), "the worker container's final line: expected group g0 at "
          "step %s, got %s" % (steps.group(1), final))
    tail = out[out.rindex("\nfinal group="):].split("\n", 2)[-1]  # what follows the worker's end
    check(re.search(r"\bg0\b", tail), "phalanxctl status in a container printed nothing about g0: %r" % tail[-800:])
    print("the documented block ran as written: version, a coordinator and a worker container trained %s steps, "
          "phalanxctl status answered" % steps.group(1))


def test_plot(bindir):
    podman = podman_or_skip()
    reaper = build_image(podman)
    r = reaper.run([podman, "run", "--rm", "--label", LABEL, "--entrypoint", "phalanxctl", IMAGE, "plot",
                    "--log-dir", "/tmp", "--out", "/tmp/loss.png"], env=podman_util.env(),
                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                   timeout=120)
    err = r.stderr.strip().splitlines()
    print("phalanxctl plot in the image: exit %d, stderr %r" % (r.returncode, r.stderr), flush=True)
    check(r.returncode == 1, "expected exit 1, got %d" % r.returncode)
    check(len(err) == 1 and err[0].startswith("phalanxctl: plot:"), "expected one line from phalanxctl, got %r"
          % r.stderr)
    check("python3" in err[0] and "phalanx_plot.py" in err[0] and "Traceback" not in r.stderr,
          "the line should name python3 and the plot script as missing: %r" % err[0])
    check(not r.stdout.strip(), "nothing on stdout expected, got %r" % r.stdout)
    print("phalanxctl plot in the image: exit 1, one line naming python3 and phalanx_plot.py")


if __name__ == "__main__":
    main_scenarios({"docs": test_docs, "plot": test_plot})
