"""What an operator watches, during a real job (phalanx-launch, 3 groups of
`tiny`, one worker SIGKILLed):

  metrics: /metrics parsed by Prometheus' own text-format parser
           (prometheus_client.parser, PyPI prometheus-client): every family
           has HELP and TYPE; the training figures are there and sane (loss
           finite and > 0, committed steps increasing, step/recovery/heal
           histograms consistent); the kill is counted as a recovery once the
           job commits again, and the heal's bytes and seconds.
  browser: the dashboard (/) rendered by headless Chromium: the loss curve
           has points, a failure mark exists after the kill, the lanes match
           /status's groups; a screenshot is saved and its path printed.
  scale:   1,000 single-rank groups (register_members --sockets: real registrations,
           heartbeats and join requests over ZeroMQ) in one quorum: the page
           renders them in at most 50 aggregate lanes ("1000 groups, 20 a
           lane"), none per group, and shows the quorum's 1,000 groups;
           /status?members=0 summarises without the member array.

Exits 77 (ctest SKIP_RETURN_CODE) with the reason when prometheus_client or
chromium is missing: scripts/install-deps.sh installs both."""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, Launch, check, die_with_test, main_scenarios, make_corpus, wait_until  # noqa: E402

SKIP = 77
ARGS = ["--groups", "3", "--model", "tiny", "--steps", "100000"]
WORKER = ["--", "--global-batch", "12", "--micro-batch", "4", "--eval-every", "10", "--eval-batches", "1"]


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def start_job(bindir, name):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-%s-data-" % name))
    return Launch(bindir, ARGS + ["--data", data] + WORKER, name=name)


def kill_and_recover(launch, group="g1"):
    """SIGKILLs group's rank 0 and waits until its restarted process healed
    and all three groups train again."""
    pid = launch.pid_of(group)
    check(pid, "%s is a live member" % group)
    healed = len([e for e in launch.read_events() if e["type"] == "heal_finished" and e.get("group") == group])
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len([e for e in launch.read_events()
                            if e["type"] == "heal_finished" and e.get("group") == group]) > healed,
               60, "%s restarted and healed" % group, 0.2)
    wait_until(lambda: sorted(launch.status()["quorum"]["groups"]) == ["g0", "g1", "g2"], 60,
               "all three groups back in the quorum", 0.2)
    s0 = launch.last_step()
    wait_until(lambda: launch.last_step() >= s0 + 3, 60, "steps after the recovery", 0.2)


def get(launch, path):
    import urllib.request
    with urllib.request.urlopen("http://%s%s" % (launch.http, path), timeout=5) as r:
        return r.read().decode()


def parse_metrics(launch):
    from prometheus_client.parser import text_string_to_metric_families
    text = get(launch, "/metrics")
    fams = {}
    for f in text_string_to_metric_families(text):
        check(f.name not in fams, "metric family %s appears twice" % f.name)
        fams[f.name] = f
    # The parser accepts a family without HELP/TYPE: check them in the text.
    for name, f in fams.items():
        if f.type == "unknown":
            raise Fail("metric %s has no TYPE line" % name)
        check(re.search(r"^# HELP %s(_total)? \S" % re.escape(name), text, re.M), "metric %s has no HELP line" % name)
    return fams


def value(fams, name, suffix="", labels=None):
    f = fams.get(name)
    check(f is not None, "/metrics has no %s (families: %s)" % (name, sorted(fams)))
    for s in f.samples:
        if s.name == name + suffix and (labels is None or all(s.labels.get(k) == v for k, v in labels.items())):
            return s.value
    raise Fail("%s has no sample %s%s %s" % (name, name, suffix, labels or ""))


def check_histogram(fams, name):
    f = fams[name]
    check(f.type == "histogram", "%s is a histogram, not %s" % (name, f.type))
    buckets = [(float(s.labels["le"]), s.value) for s in f.samples if s.name == name + "_bucket"]
    check(buckets and buckets[-1][0] == math.inf, "%s ends with le=+Inf" % name)
    check(all(b[1] <= c[1] for b, c in zip(buckets, buckets[1:])), "%s buckets are cumulative: %s" % (name, buckets))
    count = value(fams, name, "_count")
    check(buckets[-1][1] == count, "%s: +Inf bucket %s == count %s" % (name, buckets[-1][1], count))
    return count, value(fams, name, "_sum")


def test_metrics(bindir):
    try:
        import prometheus_client.parser  # noqa: F401
    except ImportError:
        skip("prometheus_client is not installed (pip install prometheus-client; scripts/install-deps.sh does)")
    launch = start_job(bindir, "metrics")
    try:
        wait_until(lambda: launch.last_step() >= 15, 90, "15 committed steps", 0.2)
        # Telemetry reaches the coordinator with the next heartbeats.
        wait_until(lambda: "phalanx_train_loss" in parse_metrics(launch), 10, "phalanx_train_loss", 0.2)
        fams = parse_metrics(launch)
        for name, typ in (("phalanx_train_loss", "gauge"), ("phalanx_tokens_per_second", "gauge"),
                          ("phalanx_committed_steps", "counter"), ("phalanx_recoveries", "counter"),
                          ("phalanx_heal_bytes", "counter"), ("phalanx_step_seconds", "histogram"),
                          ("phalanx_recovery_seconds", "histogram"), ("phalanx_heal_seconds", "histogram")):
            check(name in fams and fams[name].type == typ, "%s is a %s: %s" % (name, typ, fams.get(name)))
        loss = value(fams, "phalanx_train_loss")
        check(math.isfinite(loss) and loss > 0, "train loss finite and > 0: %s" % loss)
        check(value(fams, "phalanx_tokens_per_second") > 0, "tokens/s > 0")
        wait_until(lambda: "phalanx_eval_loss" in parse_metrics(launch), 30, "an eval loss (--eval-every 10)", 0.2)
        ev = value(parse_metrics(launch), "phalanx_eval_loss")
        check(math.isfinite(ev) and ev > 0, "eval loss finite and > 0: %s" % ev)
        steps0 = value(fams, "phalanx_committed_steps", "_total")
        check(steps0 >= 10, "committed steps counted: %s" % steps0)
        n, total = check_histogram(fams, "phalanx_step_seconds")
        check(n >= 1 and total > 0, "step seconds observed: count %s sum %s" % (n, total))
        check(value(fams, "phalanx_recoveries", "_total") == 0, "no recovery before a failure")

        kill_and_recover(launch)
        fams = parse_metrics(launch)
        steps1 = value(fams, "phalanx_committed_steps", "_total")
        check(steps1 > steps0, "committed steps increase: %s -> %s" % (steps0, steps1))
        check(value(fams, "phalanx_recoveries", "_total") >= 1, "the kill is counted as a recovery")
        n, total = check_histogram(fams, "phalanx_recovery_seconds")
        # from the drop to the next commit: the survivors may commit within the same millisecond (0 s)
        check(n >= 1 and 0 <= total < 60, "recovery seconds observed: count %s sum %s" % (n, total))
        check(value(fams, "phalanx_heal_bytes", "_total") > 0, "heal bytes counted")
        n, total = check_histogram(fams, "phalanx_heal_seconds")
        check(n >= 1 and total >= 0, "heal seconds observed: count %s" % n)
        loss = value(fams, "phalanx_train_loss")
        check(math.isfinite(loss) and loss > 0, "train loss after the recovery: %s" % loss)
        print("metrics: loss %.4f, %d steps committed, recoveries %d (%.2f s), heal bytes %d" % (
            loss, steps1, value(fams, "phalanx_recoveries", "_total"), value(fams, "phalanx_recovery_seconds", "_sum"),
            value(fams, "phalanx_heal_bytes", "_total")))
        # A bad query is refused with a reason, and the coordinator lives on.
        import urllib.error
        import urllib.request
        try:
            urllib.request.urlopen("http://%s/api/history?since=-1" % launch.http, timeout=5)
            raise Fail("since=-1 was accepted")
        except urllib.error.HTTPError as e:
            check(e.code == 400 and b"since" in e.read(), "since=-1: 400 naming the parameter")
        check(launch.status()["quorum"]["id"] > 0, "the coordinator still answers")
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(20)))
    finally:
        launch.terminate()


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


BROWSER_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1200,1400"]


def render(browser, url, args, timeout_s=60):
    """One page load: what Chromium prints (--dump-dom) or writes (--screenshot=)."""
    cmd = [browser] + BROWSER_FLAGS + ["--virtual-time-budget=5000"] + args + [url]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout_s)
    check(r.returncode == 0, "%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-800:]))
    return r.stdout


def loss_curve(dom):
    m = re.search(r'<svg id="loss-curve".*?</svg>', dom, re.S)
    check(m, "the page has a loss curve; DOM:\n%s" % dom[:2000])
    return m.group(0)


def train_points(curve):
    """How many points the train loss path has (0: none drawn)."""
    pts = [int(x) for x in re.findall(r'<path class="train"[^>]*data-points="(\d+)"', curve)]
    return pts[0] if pts else 0


def lane_groups(dom):
    return sorted(re.findall(r'<g class="lane" data-group="([^"]*)"', dom))


def test_browser(bindir):
    browser = chromium()
    if not browser:
        skip("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)")
    launch = start_job(bindir, "dashboard")
    try:
        wait_until(lambda: launch.last_step() >= 10, 90, "10 committed steps", 0.2)
        kill_and_recover(launch)
        url = "http://%s/" % launch.http
        dom = render(browser, url, ["--dump-dom"])
        groups = sorted(set(m["group"] for m in launch.status()["members"]))
        curve = loss_curve(dom)
        pts = train_points(curve)
        check(pts >= 5, "the train loss path has points: %d" % pts)
        check(re.search(r'<path class="train" d="M[\d.]+ [\d.]+L', curve), "the train path is drawn")
        marks = re.findall(r'<line class="failure-mark"[^>]*data-group="([^"]*)"', curve)
        check("g1" in marks, "a failure mark for the killed group g1: %s" % marks)
        check(re.search(r'class="failure-mark".*?<title>[^<]*(group_dropped|member_lost)', curve, re.S),
              "the failure mark's hover text names the event")
        check(re.search(r'class="heal-mark"', curve), "a heal mark after the recovery")
        lanes = lane_groups(dom)
        check(lanes == groups, "the lanes %s match /status's groups %s" % (lanes, groups))
        lane_g1 = re.search(r'<g class="lane" data-group="g1">.*?</g>', dom, re.S).group(0)
        states = re.findall(r'data-state="(\w+)"', lane_g1)
        check("lost" in states and states[-1] == "healthy", "g1's lane shows it lost, then healthy: %s" % states)
        check(re.search(r'<svg id="throughput".*?<path class="tput"', dom, re.S), "throughput is drawn")
        check(re.search(r'<li class="event group_dropped">', dom), "the events list shows the drop")
        shot = os.path.join(launch.dir, "dashboard.png")
        render(browser, url, ["--screenshot=%s" % shot])
        check(os.path.getsize(shot) > 10000, "a screenshot was written")
        print("dashboard screenshot: %s" % shot)
        print("dashboard: %d loss points, failure marks for %s, lanes %s" % (pts, sorted(set(marks)), lanes))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(20)))
    finally:
        launch.terminate()


def test_scale(bindir):
    browser = chromium()
    if not browser:
        skip("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)")
    job = Job(bindir, "dash-scale", extra_coord_args=["--heartbeat-timeout-ms", "5000"])  # (the recovery window)
    fake = None
    try:
        job.start_coordinator()
        fake = subprocess.Popen([os.path.join(bindir, "register_members"), "--endpoint", job.endpoint, "--job",
                                 job.job, "--count", "1000", "--prefix", "g", "--heartbeat-ms", "500", "--join", "--sockets"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_test)
        line = fake.stdout.readline().strip()
        check(line == "registered=1000", "register_members: %r" % line)
        wait_until(lambda: len(job.status()["quorum"]["groups"]) == 1000, 60, "a quorum of 1000 groups", 0.5)
        url = "http://%s/" % job.http
        dom = render(browser, url, ["--dump-dom"])
        lanes = re.findall(r'<g class="lane aggregate" data-groups="([^"]*)"', dom)
        check(0 < len(lanes) <= 50, "1000 groups in at most 50 aggregate lanes: %d" % len(lanes))
        check(not re.search(r'<g class="lane" data-group=', dom), "no lane per group at this size")
        check(re.search(r'1000 groups, 20 a lane', dom), "the page says how the lanes aggregate")
        check(re.search(r'<b id="groups">1000</b>', dom), "the bar shows the quorum's 1000 groups")
        import urllib.error
        import urllib.request
        full = job.get("/status")
        brief = json.loads(job.get("/status?members=0"))
        check(brief["members"] == [] and brief["members_total"] == 1000 and len(brief["quorum"]["groups"]) == 1000,
              "/status?members=0: no member array, members_total 1000, the quorum kept")
        check(len(json.dumps(brief)) * 5 < len(full), "the summary is much smaller: %d against %d bytes" %
              (len(json.dumps(brief)), len(full)))
        try:
            urllib.request.urlopen("http://%s/status?members=2" % job.http, timeout=5)
            raise Fail("/status?members=2 was accepted")
        except urllib.error.HTTPError as e:
            check(e.code == 400 and b"members takes 0" in e.read(), "/status?members=2: 400 naming what it takes")
        check(json.loads(job.get("/status?x=1&members=0"))["members"] == [], "other parameters are ignored")
        shot = os.path.join(job.dir, "dashboard-1000.png")
        render(browser, url, ["--screenshot=%s" % shot])
        check(os.path.getsize(shot) > 10000, "a screenshot was written")
        print("scale: 1000 groups in %d lanes (%s .. %s); screenshot %s" % (len(lanes), lanes[0], lanes[-1], shot))
    finally:
        if fake:
            fake.stdin.close()
            fake.wait(timeout=10)
        job.stop()


if __name__ == "__main__":
    main_scenarios({"metrics": test_metrics, "browser": test_browser, "scale": test_scale})
