"""The Prometheus alert rules and the Grafana dashboard (deploy/prometheus,
deploy/grafana) against Prometheus' own tools and a live coordinator:

  1. `promtool check rules` on deploy/prometheus/phalanx-alerts.yaml;
  2. `promtool test rules` on tests/control/phalanx_alerts_test.yaml: every
     alert fires on made-up series where it should, with its labels and
     text, and stays silent where it should not;
  3. the dashboard JSON: a `datasource` variable (Prometheus) every panel
     and query uses, a `job` variable from label_values(phalanx_build_info,
     job), and queries for what it promises (progress, loss, tokens/s,
     groups, failures, heals, checkpoint age, events, the coordinator's up);
  4. a real job (phalanx-launch --job metrics-rules: 2 groups of `tiny`, a
     checkpoint and an eval every 5 steps), once it saved a checkpoint: its
     /metrics passes `promtool check metrics`, every sample carries
     job="metrics-rules", and every phalanx_* name the dashboard's queries
     and the rules use is exported;
  5. a Prometheus server (Debian's prometheus package, beside promtool)
     scrapes that coordinator with the scrape configuration of
     deploy/prometheus/README.md (job "phalanx", honor_labels: true) and
     loads the rules: the series keep job="metrics-rules", up{job="phalanx"}
     is 1, every dashboard query runs ($job and $__rate_interval filled in)
     and returns the job's series (one filtered to drops > 0 may be empty),
     every rule evaluates without error.

Exits 77 (ctest SKIP_RETURN_CODE) when promtool is missing;
scripts/install-deps.sh installs it (Debian package prometheus). Without the
prometheus server binary step 5 is skipped, said so."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from phalanx_test import Fail, Launch, check, die_with_test, free_port, main, make_corpus, wait_until  # noqa: E402

SKIP = 77
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RULES = os.path.join(ROOT, "deploy", "prometheus", "phalanx-alerts.yaml")
RULES_TEST = os.path.join(ROOT, "tests", "control", "phalanx_alerts_test.yaml")
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "phalanx-dashboard.json")
JOB = "metrics-rules"
SCRAPE_JOB = "phalanx"  # deploy/prometheus/README.md's job_name, which PhalanxCoordinatorDown selects
NAME = re.compile(r"\bphalanx_[a-z0-9_]+")
# What the dashboard promises to show: a query of it uses each of these.
DASHBOARD_SHOWS = ["phalanx_job_step", "phalanx_job_target_steps", "phalanx_job_eta_seconds", "phalanx_train_loss",
                   "phalanx_eval_loss", "phalanx_smoothed_tokens_per_second", "phalanx_groups", "phalanx_group_step",
                   "phalanx_failures_total", "phalanx_recoveries_total", "phalanx_heal_bytes_total",
                   "phalanx_last_checkpoint_age_seconds", "phalanx_events_pending", "phalanx_events_spilled", "up"]


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def run(cmd, stdin=None):
    r = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def promtool_checks(promtool):
    rc, out = run([promtool, "check", "rules", RULES])
    check(rc == 0, "promtool check rules %s: exit %d\n%s" % (RULES, rc, out))
    rc, out = run([promtool, "test", "rules", RULES_TEST])
    check(rc == 0, "promtool test rules %s: exit %d\n%s" % (RULES_TEST, rc, out))
    print("promtool: rules check and their unit tests pass")


def dashboard_queries():
    """The PromQL of the dashboard's panels, after checking its variables and
    that every panel reads the datasource variable."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    check(dash.get("schemaVersion", 0) >= 36, "schemaVersion %s: want a recent one" % dash.get("schemaVersion"))
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables.get("datasource")
    check(ds and ds["type"] == "datasource" and ds["query"] == "prometheus", "no Prometheus datasource variable")
    job = variables.get("job")
    query = job and (job["query"] if isinstance(job["query"], str) else job["query"].get("query"))
    check(query == "label_values(phalanx_build_info, job)", "the job variable's query is %r" % query)
    exprs = []
    panels = list(dash["panels"])
    for p in dash["panels"]:
        panels += p.get("panels", [])  # a collapsed row holds its panels
    for p in panels:
        if p["type"] == "row":
            continue
        check(p.get("datasource", {}).get("uid") == "${datasource}", "panel %r: datasource %s" %
              (p["title"], p.get("datasource")))
        for t in p.get("targets", []):
            check(t.get("datasource", {}).get("uid") == "${datasource}", "panel %r: a query's datasource %s" %
                  (p["title"], t.get("datasource")))
            check('job="$job"' in t["expr"], "panel %r: %s is not limited to $job" % (p["title"], t["expr"]))
            exprs.append(t["expr"])
    used = set(re.findall(r"\b[a-z_][a-z0-9_]*\b", " ".join(exprs)))
    missing = [m for m in DASHBOARD_SHOWS if m not in used]
    check(not missing, "the dashboard queries nothing of %s" % missing)
    return exprs


def rules_names():
    with open(RULES) as f:
        text = "".join(line for line in f if not line.lstrip().startswith("#"))
    return set(NAME.findall(text))


def exported(text):
    """The names /metrics exports: sample names and families."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, 1)[0])
    return names


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def live_checks(promtool, launch, referenced):
    """Waits until the job's /metrics has every referenced name (a checkpoint
    and an eval loss come after some steps), then checks the page."""
    text = {}

    def complete():
        try:
            text["page"] = get("http://%s/metrics" % launch.http)
        except OSError:
            return False  # the launcher has not started the coordinator yet
        return referenced <= exported(text["page"])
    try:
        wait_until(complete, 120, "every referenced metric on /metrics", 0.5)
    except Fail:
        raise Fail("/metrics lacks %s" % sorted(referenced - exported(text.get("page", ""))))
    page = text["page"]
    rc, out = run([promtool, "check", "metrics"], stdin=page)
    check(rc == 0, "promtool check metrics: exit %d\n%s" % (rc, out))
    samples = [line for line in page.splitlines() if line and not line.startswith("#")]
    unlabelled = [s for s in samples if '{job="%s"' % JOB not in s]
    check(not unlabelled, "samples without job=%r: %s" % (JOB, unlabelled[:5]))
    print("live /metrics: %d samples, promtool check metrics clean, all %d referenced names exported" %
          (len(samples), len(referenced)))


def prometheus_checks(prometheus, launch, exprs, scratch):
    port = free_port()
    config = os.path.join(scratch, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "rule_files:\n  - %s\n"
                "scrape_configs:\n  - job_name: %s\n    honor_labels: true\n"
                "    static_configs:\n      - targets: [\"%s\"]\n" % (RULES, SCRAPE_JOB, launch.http))
    log = open(os.path.join(scratch, "prometheus.log"), "w")
    proc = subprocess.Popen([prometheus, "--config.file", config, "--storage.tsdb.path", os.path.join(scratch, "tsdb"),
                             "--web.listen-address", "127.0.0.1:%d" % port], stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=die_with_test)
    api = "http://127.0.0.1:%d/api/v1/" % port

    def api_get(path, **params):
        try:
            body = json.loads(get(api + path + "?" + urllib.parse.urlencode(params, doseq=True)))
        except urllib.error.HTTPError as e:  # a query Prometheus refuses: its reason
            raise Fail("%s %s: %d %s" % (path, params, e.code, e.read().decode(errors="replace")))
        check(body["status"] == "success", "%s %s: %s" % (path, params, body))
        return body["data"]

    def query(expr):
        return api_get("query", query=expr)["result"]

    def answers(expr):
        try:
            return query(expr)
        except (OSError, ValueError):
            return []  # not listening yet
    try:
        wait_until(lambda: answers('phalanx_build_info{job="%s"}' % JOB), 30,
                   "Prometheus holding phalanx_build_info{job=%r}" % JOB, 0.5)
        # the job variable: Grafana's label_values(phalanx_build_info, job)
        jobs = api_get("label/job/values", **{"match[]": "phalanx_build_info"})
        check(jobs == [JOB], "label_values(phalanx_build_info, job): %s, want [%r]" % (jobs, JOB))
        up = query('up{job="%s"}' % SCRAPE_JOB)
        check(len(up) == 1 and up[0]["value"][1] == "1", "up{job=%r}: %s" % (SCRAPE_JOB, up))
        # rates need two samples: a few scrapes more
        wait_until(lambda: answers('count_over_time(phalanx_job_step{job="%s"}[1m]) >= 3' % JOB), 30,
                   "three scrapes of the job", 0.5)
        for expr in exprs:
            expr = expr.replace("$__rate_interval", "1m").replace("$job", JOB)
            result = query(expr)
            if not re.search(r"[<>]=?\s*[0-9.]+\s*$", expr):  # a filter may leave nothing
                check(result, "the dashboard query %s returned nothing" % expr)
        # every rule evaluated, none in error
        def evaluated():  # a rule not evaluated yet has the zero time
            rules = json.loads(get(api + "rules"))["data"]["groups"][0]["rules"]
            return rules and all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules)
        wait_until(evaluated, 30, "every rule evaluated", 0.5)
        rules = json.loads(get(api + "rules"))["data"]["groups"][0]["rules"]
        bad = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
        check(not bad, "rules in error: %s" % bad)
        print("prometheus: scraped with honor_labels, %d dashboard queries answered, %d rules evaluate" %
              (len(exprs), len(rules)))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test(bindir):
    promtool = shutil.which("promtool")
    if not promtool:
        skip("promtool is not installed (Debian package prometheus; scripts/install-deps.sh installs it)")
    promtool_checks(promtool)
    exprs = dashboard_queries()
    referenced = set(NAME.findall(" ".join(exprs))) | rules_names() | {"phalanx_build_info"}  # the job variable
    scratch = tempfile.mkdtemp(prefix="phalanx-metrics-rules-")
    data = make_corpus(bindir, os.path.join(scratch, "data"))
    launch = Launch(bindir, ["--job", JOB, "--groups", "2", "--model", "tiny", "--steps", "100000", "--data", data,
                             "--checkpoint-dir", os.path.join(scratch, "ckpt"), "--checkpoint-every", "5", "--",
                             "--global-batch", "8", "--micro-batch", "4", "--eval-every", "5", "--eval-batches", "1"],
                    name="metrics-rules")
    try:
        live_checks(promtool, launch, referenced)
        prometheus = shutil.which("prometheus")
        if prometheus:
            prometheus_checks(prometheus, launch, exprs, scratch)
        else:
            print("no prometheus server binary: the scrape with honor_labels and the queries were not run")
    except Fail as e:
        raise Fail("%s\nlauncher:\n%s" % (e, launch.tail(20)))
    finally:
        launch.terminate()


if __name__ == "__main__":
    main(test)
