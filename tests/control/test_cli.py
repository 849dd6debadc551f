"""Every program answers --help with exit 0 and lists its flags, and
--version with its name and the build's version (the same in every
program); a bad flag value exits 2 with a message naming the flag; an
unknown flag exits 2."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import check, main  # noqa: E402

HELP = {
    "phalanx-coordinator": ["--bind", "--http", "--events", "--heartbeat-timeout-ms", "--min-replicas", "--job",
                            "--curve-secret-key-file", "--authorized-keys", "--insecure", "SIGHUP", "--mode sync|diloco|auto",
                            "--auto-failures-per-hour", "--auto-comm-share", "--auto-window", "--auto-hold"],
    "phalanx-worker": ["--coordinator", "--group", "--rank", "--steps", "--global-batch", "--curve-secret-key-file",
                       "--coordinator-public-key-file", "--coordinator-key", "--beta1", "--beta2", "--eps",
                       "--progress-format text|json"],
    "phalanx-launch": ["--groups", "--group-prefix", "--ranks-per-group", "--steps", "--chaos-kill-every", "--coordinator", "--curve",
                       "--insecure", "--curve-secret-key-file", "--coordinator-public-key-file", "--mode sync|diloco|auto",
                       "--auto-failures-per-hour", "--auto-window"],
    "phalanx-data": ["--out", "--demo", "--format auto|text|jsonl", "--jsonl-key"],
    "phalanx-sample": ["--checkpoint", "--model", "--prompt", "--tokens", "--temperature", "--top-k", "--seed"],
    "phalanxctl": ["status", "events", "kill", "drain", "plot", "keygen", "--follow", "--type", "--group",
                   "--wait-s", "--log-dir", "exit status", "--http", "--coordinator", "--curve-secret-key-file",
                   "--coordinator-public-key-file", "--coordinator-key", "--token-file", "--timeout-ms", "--out",
                   "--events", "kafka:HOST:PORT"],
}

BAD = [
    ("phalanx-coordinator", ["--heartbeat-timeout-ms", "abc"], "--heartbeat-timeout-ms"),
    ("phalanx-coordinator", ["--heartbeat-timeout-ms", "5"], "--heartbeat-timeout-ms"),
    ("phalanx-coordinator", ["--min-replicas", "0"], "--min-replicas"),
    ("phalanx-coordinator", ["--http", "127.0.0.1:99999"], "--http"),
    ("phalanx-coordinator", ["--job", "bad name"], "--job"),
    ("phalanx-coordinator", ["--mode", "fast"], "--mode"),
    ("phalanx-coordinator", ["--mode", "auto", "--auto-failures-per-hour", "-1"], "--auto-failures-per-hour"),  # 0: off
    ("phalanx-coordinator", ["--mode", "auto", "--auto-failures-per-hour", "0", "--auto-comm-share", "0"],
     "--auto-comm-share 0"),  # both signals off: nothing could switch
    ("phalanx-coordinator", ["--mode", "auto", "--auto-comm-share", "1.5"], "--auto-comm-share"),
    ("phalanx-coordinator", ["--mode", "auto", "--auto-window", "0"], "--auto-window"),
    ("phalanx-coordinator", ["--mode", "auto", "--auto-hold", "-1"], "--auto-hold"),
    ("phalanx-coordinator", ["--auto-hold", "5"], "--auto-hold"),  # needs --mode auto
    ("phalanx-coordinator", ["--mode", "auto", "--auto-failures-per-hour", "100000", "--auto-window", "86400"],
     "--auto-failures-per-hour"),  # more losses in a window than the ring counts
    ("phalanx-coordinator", ["--bind"], "--bind"),
    ("phalanx-worker", ["--group", "g", "--rank", "-1"], "--rank"),
    ("phalanx-worker", ["--group", "g", "--steps", "1", "--lr", "20"], "--lr"),  # 0..10, as --standalone
    ("phalanx-worker", ["--group", "g", "--rank", "2", "--ranks-per-group", "2"], "--rank"),
    ("phalanx-worker", ["--group", "g", "--steps", "1", "--beta1", "1"], "--beta1"),
    ("phalanx-worker", ["--group", "g", "--steps", "1", "--beta2", "-0.1"], "--beta2"),
    ("phalanx-worker", ["--group", "g", "--steps", "1", "--eps", "0"], "--eps"),
    ("phalanx-worker", ["--group", "g", "--steps", "1", "--progress-format", "xml"], "--progress-format"),
    ("phalanx-worker", ["--standalone", "--beta2", "1.5"], "--beta2"),
    ("phalanx-worker", ["--standalone", "--progress-format", "csv"], "--progress-format"),
    ("phalanx-launch", ["--groups", "0"], "--groups"),
    ("phalanx-launch", ["--group-prefix", "a/b"], "--group-prefix"),  # a group name: [A-Za-z0-9_.-]
    ("phalanx-launch", ["--chaos-kill-every", "-1"], "--chaos-kill-every"),
    ("phalanx-launch", ["--mode", "fast"], "--mode"),
    ("phalanx-launch", ["--auto-window", "30"], "--auto-window"),  # needs --mode auto
    ("phalanx-launch", ["--mode", "auto", "--auto-comm-share", "1.5"], "--auto-comm-share"),  # 0: off
    ("phalanxctl", ["status", "--http", "nohost"], "--http"),
    # CURVE and the bind policy
    ("phalanx-coordinator", ["--curve-secret-key-file", "/nonexistent"], "--authorized-keys"),
    ("phalanx-coordinator", ["--authorized-keys", "/nonexistent"], "--curve-secret-key-file"),
    ("phalanx-coordinator", ["--curve-secret-key-file", "/nonexistent", "--authorized-keys", "/nonexistent"],
     "--curve-secret-key-file"),
    ("phalanx-coordinator", ["--bind", "tcp://0.0.0.0:1"], "--insecure"),
    ("phalanx-worker", ["--group", "g", "--coordinator-key", "short"], "--coordinator-key"),
    ("phalanx-worker", ["--group", "g", "--curve-secret-key-file", "/nonexistent", "--coordinator-key", "x" * 40],
     "--curve-secret-key-file"),
    ("phalanx-worker", ["--group", "g", "--curve-secret-key-file", "/nonexistent"], "--coordinator-public-key-file"),
    ("phalanx-launch", ["--curve", "--coordinator", "tcp://127.0.0.1:1"], "--curve"),
    ("phalanx-launch", ["--insecure", "--coordinator", "tcp://127.0.0.1:1"], "--insecure"),
    ("phalanx-launch", ["--curve", "--insecure"], "--insecure"),
    ("phalanx-launch", ["--curve-secret-key-file", "k", "--coordinator", "tcp://127.0.0.1:1"],
     "--coordinator-public-key-file"),
    ("phalanxctl", ["keygen"], "--out"),
    ("phalanxctl", ["plot"], "--out"),
    ("phalanxctl", ["drain", "g1", "--wait-s", "-1"], "--wait-s"),
    ("phalanxctl", ["events", "--events", "kafka:b/t"], "--events"),  # a Kafka spec without a port
    ("phalanxctl", ["status", "--coordinator", "tcp://127.0.0.1:1", "--timeout-ms", "5"], "--timeout-ms"),
    ("phalanxctl", ["status", "--curve-secret-key-file", "k"], "--coordinator"),
]


def run(bindir, prog, args):
    return subprocess.run([os.path.join(bindir, prog)] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=30)


def test(bindir):
    for prog, flags in HELP.items():
        r = run(bindir, prog, ["--help"])
        check(r.returncode == 0, "%s --help exits 0, got %d" % (prog, r.returncode))
        for f in flags:
            check(f in r.stdout, "%s --help mentions %s" % (prog, f))
        r = run(bindir, prog, ["--no-such-flag"] if prog != "phalanxctl" else ["status", "--no-such-flag"])
        check(r.returncode == 2 and "--no-such-flag" in r.stderr, "%s rejects an unknown flag: %d %r" % (prog, r.returncode, r.stderr))
    versions = {}
    for prog in list(HELP) + ["phalanx-ckpt", "phalanx-sim"]:
        for args in (["--version"], ["status", "--version"] if prog == "phalanxctl" else None,
                     ["--standalone", "--version"] if prog == "phalanx-worker" else None):
            if args is None:
                continue
            r = run(bindir, prog, args)
            words = r.stdout.split()
            check(r.returncode == 0 and len(words) >= 2 and r.stdout.startswith(prog),
                  "%s %s prints the program and its version: %d %r" % (prog, args, r.returncode, r.stdout))
            versions["%s %s" % (prog, args)] = words[-1]
    check(len(set(versions.values())) == 1 and "unknown" not in versions.values(),
          "every program says the same version: %s" % versions)
    for prog, args, flag in BAD:
        r = run(bindir, prog, args)
        check(r.returncode == 2, "%s %s exits 2, got %d (%s)" % (prog, args, r.returncode, r.stderr.strip()))
        check(flag in r.stderr, "%s %s names %s: %r" % (prog, args, flag, r.stderr.strip()))


if __name__ == "__main__":
    main(test)
