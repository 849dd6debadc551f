"""What an operator watches, during a real job (phalanx-launch, 3 groups of
`tiny`, one worker SIGKILLed):

  metrics: /metrics parsed by Prometheus' own text-format parser
           (prometheus_client.parser, PyPI prometheus-client): every family
           has HELP and TYPE; the training figures are there and sane (loss
           finite and > 0, committed steps increasing, step/recovery/heal
           histograms consistent); the kill is counted as a recovery once the
           job commits again, and the heal's bytes and seconds.
  browser: the dashboard (/) open in headless Chromium (the DevTools
           protocol) once the job, saving a checkpoint every 50 steps, has
           trained 400 of its 5000 steps (--lr 0.003: the loss falls
           steeply, then flattens), read with its polling held (so that all
           it shows is of one answer): the loss curve has points and a
           smoothed line over the same steps; a failure mark exists after the
           kill, and a heal mark; a checkpoint mark per checkpoint_saved event
           the page had (the events /api/history numbers up to the page's
           body[data-seq]), at their steps; both charts have several tick
           labels on each axis, numbers (clock times under throughput)
           that say their values and increase along the axis, with grid
           lines; the progress bar says "step N / 5000 (P%)", filled to P,
           with an ETA (3m10s) or "done", smoothed tokens/s and the last
           checkpoint's step and age; the curve after the first tenth of the
           steps spans at least 0.45 of the plot's height, the later half's
           losses are inside the y axis, and a note says so when losses are
           clipped; the log-scale toggle (aria-pressed) redraws the loss path
           with other y ticks; the lanes match /status's groups; screenshots
           (linear and log) are saved and their path printed.
  scale:   1,000 single-rank groups (register_members --sockets: real registrations,
           heartbeats and join requests over ZeroMQ) in one quorum: the page
           renders them in at most 50 aggregate lanes ("1000 groups, 20 a
           lane"), none per group, and shows the quorum's 1,000 groups;
           /status?members=0 summarises without the member array.
  restart: the page kept open in headless Chromium (the DevTools protocol
           over --remote-debugging-pipe) while the job's coordinator is
           SIGKILLed and started again on the same control and HTTP ports
           (phalanx-launch --coordinator trains on): the page says the
           coordinator is unreachable, then shows #restart-note naming the
           old and new run ids (those of /api/history before and after), its
           loss curve starts again at the restart and fills with the new
           run's points, and its lanes are the new /status's groups.
  spares:  a job of 2 training groups and 1 spare (phalanx-launch
           --spares 1): the page's lanes, read by headless Chromium
           (--dump-dom), show the spare in its own state ("spare", in the
           legend) beside the training groups' "healthy", as /status has
           them.

Exits 77 (ctest SKIP_RETURN_CODE) with the reason when prometheus_client or
chromium is missing: scripts/install-deps.sh installs both."""
import base64
import fcntl
import json
import math
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Job, Launch, check, die_with_test, main_scenarios, make_corpus, wait_until  # noqa: E402

SKIP = 77
ARGS = ["--groups", "3", "--model", "tiny"]
WORKER = ["--", "--global-batch", "12", "--micro-batch", "4", "--eval-every", "10", "--eval-batches", "1"]


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def start_job(bindir, name, launch_args=(), steps=100000, worker_args=()):
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-%s-data-" % name))
    return Launch(bindir, list(launch_args) + ARGS + ["--steps", str(steps), "--data", data] + WORKER +
                  list(worker_args), name=name)


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


class LivePage:
    """A page kept open in headless Chromium, read while it runs its own
    polling: the DevTools protocol over --remote-debugging-pipe (JSON
    messages ending in NUL; Chromium reads fd 3 and writes fd 4), so no
    debugging port and no websocket client. Chromium runs in its own process
    group, all of which close() ends (and dies with the test)."""

    def __init__(self, browser, url, log_dir):
        to_chrome, self.out = os.pipe()
        self.inp, from_chrome = os.pipe()
        # above 4, so that placing them at 3 and 4 in the child overwrites neither
        to_chrome, from_chrome = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chrome, from_chrome))

        def child():
            os.dup2(to_chrome, 3)
            os.dup2(from_chrome, 4)
            die_with_test()
        self.profile = tempfile.mkdtemp(prefix="phalanx-chromium-")
        with open(os.path.join(log_dir, "chromium.log"), "a") as log:
            self.proc = subprocess.Popen([browser] + BROWSER_FLAGS + ["--remote-debugging-pipe",
                                         "--user-data-dir=" + self.profile, url], stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=log, close_fds=False, start_new_session=True,
                                         preexec_fn=child)
        os.close(to_chrome)
        os.close(from_chrome)
        self.buf, self.id, self.session = b"", 0, None
        try:
            page = [t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
            check(page, "Chromium opened a page")
            self.session = self.call("Target.attachToTarget", {"targetId": page[0]["targetId"],
                                                               "flatten": True})["sessionId"]
            wait_until(lambda: self.eval("location.href == %r && document.readyState == 'complete'" % url), 30,
                       "Chromium loading %s" % url, 0.1)
        except BaseException:
            self.close()
            raise

    def call(self, method, params=None, timeout_s=30):
        """Sends one command (to the page once attached) and returns its result."""
        self.id += 1
        msg = {"id": self.id, "method": method, "params": params or {}}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.id:  # anything else is an event
                    check("error" not in reply, "DevTools %s: %s" % (method, reply.get("error")))
                    return reply["result"]
            left = deadline - time.monotonic()
            check(left > 0, "DevTools %s: no answer within %d s" % (method, timeout_s))
            if select.select([self.inp], [], [], left)[0]:
                chunk = os.read(self.inp, 1 << 20)
                check(chunk, "Chromium closed the DevTools pipe (exit %s)" % self.proc.poll())
                self.buf += chunk

    def eval(self, expr):
        """The value of a JavaScript expression in the page."""
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        check("exceptionDetails" not in r, "%s threw: %s" % (expr, r.get("exceptionDetails")))
        return r["result"].get("value")

    def dom(self):
        return self.eval("document.documentElement.outerHTML") or ""

    def text(self, elem_id):
        return self.eval("(document.getElementById(%r) || {}).textContent" % elem_id)

    def shown(self, elem_id):
        """Whether the element is laid out (not display:none, nor inside such)."""
        return self.eval("(e => !!e && e.getClientRects().length > 0)(document.getElementById(%r))" % elem_id)

    def screenshot(self, path):
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"]))

    def close(self):
        try:
            if self.proc.poll() is None:
                self.call("Browser.close", timeout_s=10)
            self.proc.wait(timeout=10)
        except (Fail, OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its renderers, and Chromium itself if it hung
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self.out)
        os.close(self.inp)
        shutil.rmtree(self.profile, ignore_errors=True)


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


def svg_attr(curve, name):
    m = re.match(r'<svg [^>]*\b%s="([^"]*)"' % re.escape(name), curve)
    check(m, "the loss curve has %s: %s" % (name, curve[:300]))
    return m.group(1)


def path_xy(svg, cls):
    """The (x, y) points of the path of class cls in svg ([] when none)."""
    m = re.search(r'<path class="%s" d="([^"]*)"' % re.escape(cls), svg)
    return [(float(x), float(y)) for x, y in re.findall(r"[ML]([-\d.]+) ([-\d.]+)", m.group(1))] if m else []


RATE = {"": 1, "k": 1e3, "M": 1e6}


def tick_labels(page, svg_id, axis):
    """An axis's tick labels, left to right or bottom to top: (text, data-value, position)."""
    pos = "x" if axis == "x" else "y"
    return page.eval("Array.from(document.querySelectorAll('#%s text.tick-label.%s'))"
                     ".map(t => [t.textContent, +t.getAttribute('data-value'), +t.getAttribute('%s')])"
                     % (svg_id, axis, pos))


def check_axis(page, svg_id, axis, parse):
    """Several tick labels, each saying its value (parse: text -> number, or None for clock times), values
    increasing along the axis (up for y), each with a grid line."""
    ticks = tick_labels(page, svg_id, axis)
    where = "%s %s axis" % (svg_id, axis)
    check(len(ticks) >= 3, "%s: several tick labels: %s" % (where, ticks))
    values = [v for _, v, _ in ticks]
    check(all(a < b for a, b in zip(values, values[1:])), "%s: tick values increase: %s" % (where, values))
    place = [p for _, _, p in ticks]
    check(all((a < b) if axis == "x" else (a > b) for a, b in zip(place, place[1:])),
          "%s: ticks placed in order along the axis: %s" % (where, ticks))
    for text, v, _ in ticks:
        if parse:
            n = parse(text)
            check(n is not None and abs(n - v) <= 1e-6 * max(1, abs(v)), "%s: label %r says %s" % (where, text, v))
        else:
            check(re.fullmatch(r"\d\d:\d\d(:\d\d)?", text), "%s: a clock time: %r" % (where, text))
    grid = page.eval("document.querySelectorAll('#%s line.grid').length" % svg_id)
    check(grid >= len(ticks), "%s: grid lines: %d for %d ticks" % (where, grid, len(ticks)))
    return [t for t, _, _ in ticks]


def number(text):
    try:
        return float(text)
    except ValueError:
        return None


def rate_number(text):
    m = re.fullmatch(r"([\d.]+)([kM]?)", text)
    return float(m.group(1)) * RATE[m.group(2)] if m else None


DURATION = r"\d+s|\d+m\d\ds|\d+h\d\dm|\d+d\d\dh"  # as phalanxctl status writes them
BROWSER_STEPS = 5000  # the job's --steps: the progress bar's total
# Steps trained before the page is read. At 3 times the default learning rate the loss falls steeply
# for some tens of steps and is nearly flat by step 300: the shape whose first steps squash the rest.
BROWSER_UNTIL = 400
BROWSER_LR = "0.003"
CKPT_EVERY = 50
# The page's polling held: its next fetch never answers, so the page (which asks again only once an
# answer came) draws nothing more while the test reads it, and what it shows is that of body[data-seq].
FREEZE = "window.fetch = () => { window.frozen = true; return new Promise(() => {}); }; true"
# The toggle, clicked between two readings of the loss chart.
TOGGLE = """(() => {
  const read = () => ({d: document.querySelector('#loss-curve path.train').getAttribute('d'),
    scale: document.getElementById('loss-curve').getAttribute('data-scale'),
    pressed: document.getElementById('log-toggle').getAttribute('aria-pressed'),
    ticks: Array.from(document.querySelectorAll('#loss-curve text.tick-label.y')).map(t => [t.textContent,
                                                                                           t.getAttribute('y')])});
  const before = read();
  document.getElementById('log-toggle').click();
  return [before, read()];
})()"""


def check_progress(page, h):
    """The progress bar and the figures at the top, against the job's length and /api/history."""
    text = page.text("progress-text")
    m = re.fullmatch(r"step (\d+) / (\d+) \((\d+\.\d)%\)", text)
    check(m, "the progress bar says 'step N / T (P%%)': %r" % text)
    n, total, pct = int(m.group(1)), int(m.group(2)), float(m.group(3))
    check(total == BROWSER_STEPS, "the total is the job's --steps %d: %d" % (BROWSER_STEPS, total))
    check(BROWSER_UNTIL <= n <= h["progress"]["step"], "the step %d: trained to, and not past the job's %d" %
          (n, h["progress"]["step"]))
    check(abs(pct - 100.0 * n / total) < 0.06, "the percent %.1f is step / total" % pct)
    width = page.eval("parseFloat(document.getElementById('progress-fill').style.width)")
    check(abs(width - pct) < 0.1, "the bar is filled to %.1f%%: %s" % (pct, width))
    eta = page.text("eta")
    check(re.fullmatch(DURATION, eta) or eta == "done", "an ETA (like 3m10s) or done: %r" % eta)
    tput = page.text("tput")
    check(re.fullmatch(r"\d+(\.\d+[kM])?", tput), "smoothed tokens/s: %r" % tput)
    return text, eta, tput


def test_browser(bindir):
    browser = chromium()
    if not browser:
        skip("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)")
    ckpt = tempfile.mkdtemp(prefix="phalanx-dashboard-ckpt-")
    launch = start_job(bindir, "dashboard", ["--checkpoint-dir", ckpt, "--checkpoint-every", str(CKPT_EVERY)],
                       steps=BROWSER_STEPS, worker_args=["--lr", BROWSER_LR])
    page = None
    try:
        wait_until(lambda: launch.last_step() >= 10, 90, "10 committed steps", 0.2)
        kill_and_recover(launch)
        wait_until(lambda: launch.last_step() >= BROWSER_UNTIL, 240, "%d committed steps" % BROWSER_UNTIL, 0.5)
        url = "http://%s/" % launch.http
        page = LivePage(browser, url, launch.dir)
        wait_until(lambda: page.eval("document.body.getAttribute('data-seq')"), 30, "the page's first drawing", 0.2)
        page.eval(FREEZE)
        wait_until(lambda: page.eval("window.frozen === true"), 10, "the page's polling held", 0.1)
        dom = page.dom()
        seq = int(re.search(r'<body data-seq="(\d+)"', dom).group(1))
        h = json.loads(get(launch, "/api/history"))
        drawn = [p for p in h["points"] if p["seq"] <= seq]  # what the page had when it drew
        events = [e for e in h["events"] if e["seq"] <= seq]
        groups = sorted(set(m["group"] for m in launch.status()["members"]))
        curve = loss_curve(dom)
        pts = train_points(curve)
        check(pts >= 5, "the train loss path has points: %d" % pts)
        check(re.search(r'<path class="train" d="M[\d.]+ [\d.]+L', curve), "the train path is drawn")
        smooth = path_xy(curve, "train-smooth")
        check(len(smooth) == pts, "a smoothed loss line over the same steps: %d points for %d" % (len(smooth), pts))
        check(re.search(r"centered mean over \d+ steps", page.text("smooth-legend")), "the legend says how it smooths")
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
        check(re.search(r'<svg id="throughput".*?<path class="tput-smooth"', dom, re.S), "smoothed throughput is drawn")
        check(re.search(r'<li class="event group_dropped">', dom), "the events list shows the drop")

        # Axes: ticks with numbers (clock times under throughput), increasing, on grid lines.
        ylabels = check_axis(page, "loss-curve", "y", number)
        check_axis(page, "loss-curve", "x", lambda t: int(t) if t.isdigit() else None)
        check_axis(page, "throughput", "y", rate_number)
        check_axis(page, "throughput", "x", None)

        # Checkpoints: a mark per checkpoint_saved event the page had, at its step.
        saved = sorted(e["step"] for e in events if e["type"] == "checkpoint_saved")
        ck_marks = sorted(int(x) for x in re.findall(r'<path class="ckpt-mark"[^>]*data-step="(\d+)"', curve))
        check(len(saved) >= BROWSER_UNTIL // CKPT_EVERY - 1, "checkpoints saved every %d steps: %s" % (CKPT_EVERY, saved))
        check(ck_marks == saved, "a checkpoint mark per checkpoint_saved event: %s against %s" % (ck_marks, saved))
        ck = re.fullmatch(r"step (\d+), (%s) ago" % DURATION, page.text("checkpoint"))
        check(ck and int(ck.group(1)) == max(saved), "the last checkpoint, step %d and its age: %r" %
              (max(saved), page.text("checkpoint")))
        bar, eta, tput = check_progress(page, h)

        # The y range: the curve after the first tenth of the steps fills much of the height (the first
        # steps' losses do not squash it into a band), and no loss of the later half is off the chart.
        x0, top, x1, bottom = (float(v) for v in svg_attr(curve, "data-plot").split())
        later = [y for x, y in path_xy(curve, "train") if x >= x0 + 0.1 * (x1 - x0)]
        share = (max(later) - min(later)) / (bottom - top)
        check(share >= 0.45, "the curve after the first tenth of the steps spans %.2f of the plot's height" % share)
        y_from, y_to = float(svg_attr(curve, "data-y-from")), float(svg_attr(curve, "data-y-to"))
        s_from, s_to = int(svg_attr(curve, "data-step-from")), int(svg_attr(curve, "data-step-to"))
        losses = [p["loss"] for p in drawn if p["loss"] is not None] + \
            [p["eval_loss"] for p in drawn if p["eval_loss"] is not None]
        half = [p["loss"] for p in drawn if p["loss"] is not None and p["step"] >= (s_from + s_to) / 2]
        check(half and y_from <= min(half) and max(half) <= y_to, "the y axis %.3f..%.3f covers the later half's "
              "losses %.3f..%.3f" % (y_from, y_to, min(half), max(half)))
        clipped = max(losses) > y_to
        note = re.search(r'<text id="clip-note"[^>]*>([^<]*)<', curve)
        check(bool(note) == clipped, "a note on the chart when (and only when) losses are above the axis (%.3f, "
              "max %.3f): %s" % (y_to, max(losses), note and note.group(1)))

        # The log scale: another path and other ticks.
        before, after = page.eval(TOGGLE)
        check(before["scale"] == "linear" and before["pressed"] == "false", "linear by default: %s" % before)
        check(after["scale"] == "log" and after["pressed"] == "true", "the toggle turns log on: %s" %
              {k: after[k] for k in ("scale", "pressed")})
        check(after["d"] != before["d"], "the log scale redraws the loss path")
        check(after["ticks"] != before["ticks"], "the y ticks change: %s -> %s" % (before["ticks"], after["ticks"]))
        logged = check_axis(page, "loss-curve", "y", number)
        page.screenshot(os.path.join(launch.dir, "dashboard-log.png"))
        page.eval("document.getElementById('log-toggle').click()")
        check(page.eval("document.getElementById('loss-curve').getAttribute('data-scale')") == "linear",
              "the toggle turns log off again")
        shot = os.path.join(launch.dir, "dashboard.png")
        page.screenshot(shot)
        check(os.path.getsize(shot) > 10000, "a screenshot was written")
        print("dashboard screenshot: %s (log scale: dashboard-log.png)" % shot)
        print("dashboard: %d loss points, failure marks for %s, lanes %s" % (pts, sorted(set(marks)), lanes))
        print("dashboard: %r, ETA %s, tokens/s %s; %d checkpoint marks; y ticks %s, log %s; later curve %.2f of the "
              "height, %s" % (bar, eta, tput, len(ck_marks), ylabels, logged, share,
                              note.group(1) if note else "nothing clipped"))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(20)))
    finally:
        if page:
            page.close()
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


def first_step(curve):
    """The first step the loss curve draws (its x axis starts there)."""
    return int(svg_attr(curve, "data-step-from"))


def history_start(h):
    """The first step the page should draw from /api/history h: that of a
    train point, an eval (measured before the point that carries it) or a
    marked event (dashboard.html's drawLoss)."""
    steps = [p["step"] for p in h["points"] if p["loss"] is not None]
    steps += [p["eval_step"] for p in h["points"] if p["eval_loss"] is not None]
    steps += [e["step"] for e in h["events"] if e["type"] in ("group_dropped", "member_lost", "heal_finished",
                                                               "mode_switched", "group_drained", "checkpoint_saved")]
    return min(steps)


def lane_states(dom):
    """Each lane's group and its latest state."""
    return {g: re.findall(r'data-state="(\w+)"', body)[-1]
            for g, body in re.findall(r'<g class="lane" data-group="([^"]*)">(.*?)</g>', dom, re.S)}


def test_spares(bindir):
    browser = chromium()
    if not browser:
        skip("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)")
    data = make_corpus(bindir, tempfile.mkdtemp(prefix="phalanx-dash-spares-data-"))
    launch = Launch(bindir, ["--groups", "2", "--spares", "1", "--model", "tiny", "--steps", "100000", "--data",
                             data] + WORKER, name="dash-spares")
    try:
        wait_until(lambda: launch.last_step() >= 20, 120, "20 steps")
        st = wait_until(lambda: (lambda s: s if [g for g in s["groups"] if g["state"] == "spare"] else None)(
            launch.status()), 30, "a spare in /status")
        want = {g["name"]: g["state"] for g in st["groups"]}
        dom = render(browser, "http://%s/" % launch.http, ["--dump-dom"])
    finally:
        launch.terminate()
    shown = lane_states(dom)
    check(shown == want and sorted(shown.values()) == ["healthy", "healthy", "spare"],
          "the lanes show 2 training groups and the spare as /status has them: %s against %s" % (shown, want))
    check("spare (standing by)" in dom, "the legend names the spare's colour")
    print("spares: lanes %s" % shown)


def test_restart(bindir):
    browser = chromium()
    if not browser:
        skip("chromium is not installed (apt-get install chromium; scripts/install-deps.sh does)")
    job = Job(bindir, "dash-restart")
    job.start_coordinator()
    launch = start_job(bindir, "dash-restart", ["--coordinator", job.endpoint, "--job", job.job])
    page = None
    try:
        wait_until(lambda: len(job.status()["quorum"]["groups"]) == 3 and launch.last_step() >= 10, 90,
                   "3 groups training", 0.2)
        page = LivePage(browser, "http://%s/" % job.http, job.dir)
        old = json.loads(job.get("/api/history"))["run_id"]
        wait_until(lambda: train_points(loss_curve(page.dom())) >= 5, 30, "5 loss points on the page", 0.2)
        check(not page.shown("restart-note"), "no restart note before a restart")
        first_old = first_step(loss_curve(page.dom()))

        killed_at = launch.last_step()
        job.coord.send_signal(signal.SIGKILL)
        job.coord.wait()
        wait_until(lambda: "unreachable" in page.text("conn"), 10, "the page saying the coordinator is unreachable",
                   0.2)
        job.start_coordinator(http=job.http)
        new = json.loads(job.get("/api/history"))["run_id"]
        check(re.fullmatch("[0-9a-f]{16}", new) and new != old, "another run id after the restart: %s, %s" % (old, new))
        wait_until(lambda: page.shown("restart-note"), 15, "the restart note", 0.2)
        named = (page.text("old-run"), page.text("new-run"))
        check(named == (old, new), "the note names run %s becoming %s: %s" % (old, new, named))
        wait_until(lambda: not page.text("conn"), 5, "the unreachable notice gone", 0.2)

        # The history starts again: the curve holds the new run's points only, and fills.
        wait_until(lambda: train_points(loss_curve(page.dom())) >= 5, 30, "5 loss points of the new run", 0.2)
        curve = loss_curve(page.dom())
        n, first = train_points(curve), first_step(curve)
        h = json.loads(job.get("/api/history"))
        check(h["run_id"] == new, "one run since the restart")
        check(all(p["step"] >= killed_at for p in h["points"]), "the new run's points are after the kill (step %d)"
              % killed_at)
        check(first == history_start(h) and first > first_old,
              "the curve starts where the new run's history does (step %d), not at the old run's (%d): step %d" %
              (history_start(h), first_old, first))
        trained = len([p for p in h["points"] if p["loss"] is not None])
        check(n <= trained, "the page has no train point the new run lacks: %d against %d" % (n, trained))
        wait_until(lambda: train_points(loss_curve(page.dom())) > n, 30, "more points as the workers heartbeat", 0.2)

        wait_until(lambda: len(job.status()["quorum"]["groups"]) == 3, 10, "the quorum adopted", 0.2)
        members = {m["group"]: m["state"] for m in job.status()["members"] if m["rank"] == 0}
        try:
            wait_until(lambda: lane_states(page.dom()) == members, 10, "the lanes", 0.2)
        except Fail:
            raise Fail("the lanes %s are not /status's groups and states %s" % (lane_states(page.dom()), members))
        check(page.shown("restart-note"), "the note stays")
        shot = os.path.join(job.dir, "dashboard-restart.png")
        page.screenshot(shot)
        check(os.path.getsize(shot) > 10000, "a screenshot was written")
        print("dashboard screenshot: %s" % shot)
        print("restart: run %s -> %s; curve from step %d (old run's from %d, kill at %d), %d points; lanes %s" % (
            old, new, first, first_old, killed_at, train_points(loss_curve(page.dom())), sorted(members)))
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(20)))
    finally:
        if page:
            page.close()
        launch.terminate()
        job.stop()


if __name__ == "__main__":
    main_scenarios({"metrics": test_metrics, "browser": test_browser, "scale": test_scale, "restart": test_restart,
                    "spares": test_spares})
