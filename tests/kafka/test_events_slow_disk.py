"""A slow disk must not stall the coordinator's loop (docs/events.md, "File
sink"), and every event must still be on disk after SIGTERM.

  test_events_slow_disk.py BINDIR SLOW_FSYNC_SO         (ctest: events_slow_disk)
  test_events_slow_disk.py BINDIR SLOW_FSYNC_SO kafka   (ctest: events_kafka_slow_disk)

The real phalanx-coordinator runs with --events file:PATH (or, in kafka
mode, with Kafka on px-kafka-mock and its journal, the spill file, on the slow
disk) and with slow_fsync.so preloaded: every fsync/fdatasync takes 1 s
(PX_SLOW_FSYNC_MS), as on a disk that is busy or failing. The process's own
code is unmodified.
A worker joins and heartbeats; fuzz_client --mode targeted runs again and
again, so bad_message events keep coming (a batch is due every 100 ms). For
6 s, GET /status is timed every 100 ms. Checks:

  - every /status is answered within 0.5 s (a few milliseconds unloaded; half
    an fsync is a generous functional bound): the loop never waits for a sync;
  - the worker is never declared lost (its heartbeats are handled on time);
  - after SIGTERM the coordinator exits within 20 s, the event log (the file,
    or the topic read back with kcat) holds seq 1..N without a gap,
    coordinator_stopped last, at least as many events as /metrics counted
    before the stop; file: the last fdatasync of the file (the shim logs the
    size each call made durable) covered the whole file; kafka: the spill
    file is left empty (everything delivered).

Before the fix the loop ran fdatasync itself whenever a batch was due (the
event file, the spill file, its .done offset): /status waited up to a whole
fsync."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, check, main, wait_until  # noqa: E402

TOPIC = "phalanx-events"
FSYNC_MS = 1000
STATUS_LIMIT_S = 0.5
MEASURE_S = 6.0


def timed_status(job):
    host, port = job.http.rsplit(":", 1)
    t = time.monotonic()
    try:
        with socket.create_connection((host, int(port)), timeout=5) as s:
            s.sendall(b"GET /status HTTP/1.0\r\n\r\n")
            data = b""
            while True:
                c = s.recv(65536)
                if not c:
                    break
                data += c
        ok = data.startswith(b"HTTP/1.0 200")
    except OSError:
        ok = False
    return ok, time.monotonic() - t


def generate_events(bindir, job, stop):
    """bad_message events, again and again, until stop is set."""
    runs = 0
    while not stop.is_set():
        subprocess.run([os.path.join(bindir, "fuzz_client"), "--endpoint", job.endpoint, "--job", job.job,
                        "--mode", "targeted", "--timeout-ms", "5000"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        runs += 1
    return runs


def test(bindir):
    kafka = len(sys.argv) > 3 and sys.argv[3] == "kafka"
    mock = None
    if kafka:
        from test_coordinator_kafka import Mock
        mock = Mock(os.path.join(bindir, "px-kafka-mock"), TOPIC)
    try:
        run(bindir, mock)
    finally:
        if mock:
            mock.close()


def run(bindir, mock):
    shim = os.path.abspath(sys.argv[2])
    job = Job(bindir, "slowdisk", events=mock is None)
    sync_log = os.path.join(job.dir, "fsync.log")
    saved = dict(os.environ)
    os.environ.update({"LD_PRELOAD": shim, "PX_SLOW_FSYNC_MS": str(FSYNC_MS), "PX_SLOW_FSYNC_LOG": sync_log,
                       "ASAN_OPTIONS": "verify_asan_link_order=0:" + os.environ.get("ASAN_OPTIONS", "")})
    try:
        if mock:
            job.start_coordinator(["--events", "kafka:%s/%s" % (mock.boot, TOPIC), "--spill-dir", job.dir])
        else:
            job.start_coordinator()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    stop = threading.Event()
    gen = threading.Thread(target=generate_events, args=(bindir, job, stop), daemon=True)
    try:
        job.start_worker("w", 0, 1, ["--job", job.job])
        wait_until(lambda: "w" in job.status()["quorum"]["groups"], 15, "the worker in a quorum", 0.05)
        gen.start()
        samples = []
        end = time.monotonic() + MEASURE_S
        while time.monotonic() < end:
            samples.append(timed_status(job))
            time.sleep(0.1)
        produced = job.metrics()["phalanx_events_produced_total"]
        stop.set()
        gen.join(timeout=60)
        slow = [dt for ok, dt in samples if not ok or dt > STATUS_LIMIT_S]
        worst = max(dt for _, dt in samples)
        print("%d /status samples while each fsync took %d ms: worst %.3f s, %d over %.1f s; %d events produced"
              % (len(samples), FSYNC_MS, worst, len(slow), STATUS_LIMIT_S, produced), flush=True)
        problems = []
        if slow:
            problems.append("%d of %d GET /status took longer than %.1f s (worst %.2f s): the loop waited for the disk"
                            % (len(slow), len(samples), STATUS_LIMIT_S, worst))
        if [m for m in job.status()["members"] if m["group"] == "w" and m["state"] == "lost"]:
            problems.append("the heartbeating worker was declared lost")

        t = time.monotonic()
        job.coord.send_signal(signal.SIGTERM)
        try:
            job.coord.wait(timeout=20)
        except subprocess.TimeoutExpired:
            raise Fail("the coordinator did not exit within 20 s of SIGTERM")
        print("exited %.1f s after SIGTERM" % (time.monotonic() - t))
        check(job.coord.returncode == 0, "coordinator exit status %s" % job.coord.returncode)
        if mock:
            from test_coordinator_kafka import kcat
            evs = kcat(mock.boot, TOPIC)
        else:
            evs = job.read_events()
        seqs = [e["seq"] for e in evs]
        check(seqs == list(range(1, len(seqs) + 1)), "event seq must be 1..N without gaps or repeats")
        check(evs[-1]["type"] == "coordinator_stopped", "coordinator_stopped last, got %s" % evs[-1]["type"])
        check(len(evs) >= produced + 1, "%d events in the log, /metrics counted %d before the stop"
              % (len(evs), produced))
        if mock:
            spill = os.path.join(job.dir, "%s.spill.jsonl" % job.job)
            check(os.path.getsize(spill) == 0, "the spill file is left empty after a clean stop: %d bytes"
                  % os.path.getsize(spill))
        else:
            st = os.stat(job.events_path)
            durable = 0
            with open(sync_log) as f:
                for line in f:
                    ino, size = (int(x) for x in line.split())
                    if ino == st.st_ino:
                        durable = max(durable, size)
            check(durable == st.st_size, "the last fdatasync of the event file covered %d of its %d bytes"
                  % (durable, st.st_size))
        check(not problems, "with a 1 s fsync:\n  " + "\n  ".join(problems))
    finally:
        stop.set()
        job.stop()


if __name__ == "__main__":
    main(test)
