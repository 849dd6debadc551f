"""The coordinator's RSS reaches a plateau under register/leave churn
(coordinator/heap_trim.c; docs/operations.md, "Limits on what peers can
grow").

fuzz_client --mode churn (tests/control/fuzz_client.c) keeps
PHALANX_CHURN_MEMBERS (default 1,000) one-rank groups registered, each on
its own connection heartbeating every second, and replaces
PHALANX_CHURN_PER_S of them a second (default 500: a new connection,
identity and usually a new group name; some left silent with their
connection open) for PHALANX_CHURN_S seconds (default 60). Every state a
peer can grow is held at its limit from the first seconds on: the member
table is capped by --max-members (four times the members; lost ones are
evicted to make room), the store's limits are small, so its refused requests
add nothing. What is left is the memory the connections come and go through:
libzmq's queues and buffers, about 75 KB a connection, allocated and freed
by its I/O thread, thousands of blocks a second.

Every second the coordinator's VmRSS is sampled. Once the churn has run
PHALANX_CHURN_WARMUP_S (default 25), RSS must stay on the plateau it reached:
its peak over the last 10 s of the churn within PLATEAU_SHARE (10%) of its
peak over the 10 s before the warm-up ended. Peaks over windows, not single
samples, because RSS rises between two trims (up to a sixteenth before the
next one) and follows the number of open connections, which moves with the
client's pace on a loaded machine.

Without trimming, glibc keeps the freed blocks' pages resident and RSS
climbs for minutes towards everything the arenas ever mapped while the heap
in use stays flat: this test then fails (RSS 16-17% up between 25 s and
60 s, against 4-6% with it). PHALANX_CHURN_S=600 PHALANX_CHURN_WARMUP_S=120
PHALANX_CHURN_PER_S=1000 (and PHALANX_CHURN_MEMBERS=2000) is the ten-minute
measurement in docs/benchmarks-coordinator.md."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Job, check, die_with_test, key_values, main, metrics_by_series, rss_mb  # noqa: E402

MEMBERS = int(os.environ.get("PHALANX_CHURN_MEMBERS", "1000"))
MAX_MEMBERS = 4 * MEMBERS  # full within seconds of churn: lost members are evicted from then on
CHURN_S = int(os.environ.get("PHALANX_CHURN_S", "60"))
WARMUP_S = int(os.environ.get("PHALANX_CHURN_WARMUP_S", "25"))
PER_S = int(os.environ.get("PHALANX_CHURN_PER_S", "500"))
WINDOW_S = 10             # the two windows whose RSS peaks are compared
PLATEAU_SHARE = 0.10      # the end's peak may exceed the warm-up's by this share
CHURN_SHARE = 0.5         # replacements done, of PER_S * CHURN_S, for the run to count


def heap_mb(job):
    """phalanx_heap_bytes (malloc'd and in use), for the log; None when /metrics does not answer."""
    try:
        heap = metrics_by_series(job.get("/metrics")).get("phalanx_heap_bytes")
    except Exception:  # noqa: BLE001 - a busy coordinator; the RSS series is what is checked
        return None
    return heap / (1 << 20) if heap is not None else None


def test(bindir):
    check(WARMUP_S + 2 * WINDOW_S <= CHURN_S, "PHALANX_CHURN_S %d is too short for a warm-up of %d s and two %d s "
          "windows" % (CHURN_S, WARMUP_S, WINDOW_S))
    job = Job(bindir, "churn_rss", extra_coord_args=[
        "--heartbeat-interval-ms", "1000", "--heartbeat-timeout-ms", "3000", "--quiet",
        "--max-members", str(MAX_MEMBERS), "--max-store-keys", "1000", "--max-store-bytes", str(1 << 20),
        "--max-store-waiters", "1000"])
    client = None
    try:
        job.start_coordinator()
        pid = job.coord.pid
        out_path = os.path.join(job.dir, "churn.out")
        cmd = [os.path.join(bindir, "fuzz_client"), "--endpoint", job.endpoint, "--job", job.job, "--mode", "churn",
               "--members", str(MEMBERS), "--churn-ms", str(CHURN_S * 1000), "--churn-per-s", str(PER_S),
               "--hb-ms", "1000", "--flood-cap", "1", "--timeout-ms", "30000"]
        client = subprocess.Popen(cmd, stdout=open(out_path, "w"), stderr=subprocess.STDOUT,
                                  preexec_fn=die_with_test)
        samples = []  # (seconds since the churn began, rss_mb)
        heap = []     # phalanx_heap_bytes in MB, every 5 s of churn
        churn_t0 = None
        deadline = time.monotonic() + CHURN_S + 120
        while client.poll() is None:
            check(time.monotonic() < deadline, "fuzz_client --mode churn did not finish within %d s; see %s"
                  % (CHURN_S + 120, out_path))
            check(job.coord.poll() is None, "coordinator exited (status %s); log in %s"
                  % (job.coord.returncode, job.dir))
            now = time.monotonic()
            if churn_t0 is None:
                with open(out_path) as f:  # the floods' last line comes just before the churn
                    if "flood_waiter_sent=" in f.read():
                        churn_t0 = now
            elif now - churn_t0 <= CHURN_S:
                samples.append((now - churn_t0, rss_mb(pid)))
                if len(samples) % 5 == 1:
                    heap.append(heap_mb(job))
            time.sleep(1.0)
        with open(out_path) as f:
            out_text = f.read()
        check(client.returncode == 0, "fuzz_client --mode churn failed (rc %d):\n%s"
              % (client.returncode, out_text[-3000:]))
        out = key_values(out_text)
        replaced = int(out.get("reborn_new", 0)) + int(out.get("reborn_same", 0)) + int(out.get("silenced", 0))
        churn_ms = max(1, int(out.get("churn_ms", 1)))
        print("client: registered=%s replaced=%d in %d ms (%.0f a second) unknown_member=%s" % (
            out.get("registered"), replaced, churn_ms, replaced * 1000.0 / churn_ms, out.get("unknown_member")))
        print("rss_mb every 5 s of churn: %s" % " ".join("%.0f" % s[1] for s in samples[::5]))
        print("heap_mb (in use) every 5 s: %s" % " ".join("-" if h is None else "%.0f" % h for h in heap))
        check(replaced >= CHURN_SHARE * PER_S * CHURN_S,
              "only %d members replaced in %d s of churn at %d a second: the load was not applied (a machine too "
              "busy? see %s)" % (replaced, CHURN_S, PER_S, out_path))
        warm = [r for t, r in samples if WARMUP_S - WINDOW_S <= t < WARMUP_S]
        end = [r for t, r in samples if t >= CHURN_S - WINDOW_S]
        check(len(warm) >= WINDOW_S // 2 and len(end) >= WINDOW_S // 2,
              "too few RSS samples: %d in the warm-up's last %d s, %d in the churn's" % (len(warm), WINDOW_S, len(end)))
        warm_mb, end_mb = max(warm), max(end)
        print("rss_mb: peak %.1f over the %d s before %d s of churn, %.1f over the last %d s (%+.1f%%); "
              "highest %.1f" % (warm_mb, WINDOW_S, WARMUP_S, end_mb, WINDOW_S, 100.0 * (end_mb / warm_mb - 1),
                                max(r for _, r in samples)))
        check(end_mb <= warm_mb * (1 + PLATEAU_SHARE),
              "coordinator RSS still climbing under churn: peak %.1f MB over the last %d s against %.1f MB after the "
              "%d s warm-up (more than %.0f%% up; series above; scratch dir %s)"
              % (end_mb, WINDOW_S, warm_mb, WARMUP_S, 100 * PLATEAU_SHARE, job.dir))
    finally:
        if client and client.poll() is None:
            client.kill()
            client.wait()
        job.stop()


if __name__ == "__main__":
    main(test)
