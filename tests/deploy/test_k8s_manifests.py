"""deploy/k8s checked offline, one ctest per scenario:

  render         every target renders with `kubectl kustomize`; every YAML
                 file there starts with a comment saying what it is for
  validate       every rendered object against the Kubernetes OpenAPI schemas
                 (kubernetes-validate, strict: unknown fields rejected) of
                 1.29, the oldest the manifests support (MINIMUM), and of the
                 newest version the package holds; and that both schemas can
                 fail
  lint           k8s_lint.py finds nothing (security context, resources,
                 probes, the group Jobs' policies, token, references)
  lint-selftest  the lint reports each of a list of deliberately broken
                 manifests, naming the object and field
  refs           what each overlay promises: cpu-demo 4 groups x 1 rank of
                 which 3 train and 1 waits as a spare (PHALANX_TARGET_GROUPS
                 3, one Job more than it), checkpoints on a ReadWriteOnce
                 claim, its local image never pulled; gpu 8 ranks with GPUs,
                 no spares, a ReadWriteMany claim; both: the coordinator
                 address, the volumes, the connect timeout, the scraper's
                 labels
  groups         make-groups.py wrote the committed groups/ folders (the
                 spares included), and makes and refuses what it should

Usage: test_k8s_manifests.py K8S_DIR SCENARIO (K8S_DIR is deploy/k8s)."""
import copy
import os
import subprocess
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))

from phalanx_test import Fail, check, main_scenarios  # noqa: E402
import k8s_render as K  # noqa: E402
from k8s_lint import lint, matches  # noqa: E402

# The oldest Kubernetes the manifests support: the first where the Jobs'
# backoffLimitPerIndex and podReplacementPolicy are on by default (beta in
# 1.29; GA in 1.33 and 1.34), podFailurePolicy too (beta from 1.26, GA 1.31).
# On 1.28 an API server without the alpha gates drops both fields silently.
MINIMUM = "1.29"
# What cpu-demo promises (its kustomization.yaml): these groups, of which
# CPU_DEMO_SPARES wait as spares and the others train.
CPU_DEMO_GROUPS, CPU_DEMO_SPARES = ["g0", "g1", "g2", "g3"], 1
GPU_EXTERNAL = ["Secret/phalanx-token"]  # created by the operator (overlays/gpu/kustomization.yaml)


def render(target, k8s_dir):
    try:
        return K.render(target, k8s_dir)
    except K.RenderError as e:
        raise Fail(str(e))


def kubectl():
    try:
        return K.kubectl()
    except K.RenderError as e:
        raise Fail(str(e))


def lint_args(target):
    """How each target is linted: parts without references, gpu pinned."""
    if target not in K.OVERLAYS:
        return dict(whole=False)
    if target == "gpu":
        return dict(external=GPU_EXTERNAL, pinned=True)
    return {}


# --- render ------------------------------------------------------------------

def test_render(k8s_dir):
    print("kubectl: %s" % kubectl())
    for t in K.TARGETS:
        objs = render(t, k8s_dir)
        check(objs, "%s renders to nothing" % t)
        for o in objs:
            check(o.get("apiVersion") and o.get("kind") and (o.get("metadata") or {}).get("name"),
                  "%s: an object without apiVersion, kind or metadata.name: %r" % (t, o))
        print("render %-15s %2d objects: %s" % (t, len(objs), " ".join(K.ident(o) for o in objs)))
    headless = []
    for d, _, names in os.walk(k8s_dir):
        for n in sorted(names):
            if n.endswith((".yaml", ".yml")):
                p = os.path.join(d, n)
                with open(p) as f:
                    if not f.readline().startswith("#"):
                        headless.append(os.path.relpath(p, k8s_dir))
    check(not headless, "YAML files without a comment header saying what they are for: %s" % " ".join(headless))
    print("every YAML file under %s starts with a comment" % k8s_dir)


# --- validate ----------------------------------------------------------------

def schema_versions():
    """kubernetes-validate and the versions to validate against, the two
    ends: MINIMUM and the newest it holds (each version costs seconds)."""
    try:
        import kubernetes_validate as kv
        from kubernetes_validate.utils import all_versions, major_minor
    except ImportError as e:
        raise Fail("the Python package kubernetes-validate is missing (scripts/install-deps.sh installs it): %s" % e)
    key = lambda v: tuple(map(int, v.split(".")))
    have = sorted({major_minor(v) for v in all_versions()}, key=key)
    check(MINIMUM in have, "kubernetes-validate %s has no schemas for Kubernetes %s (it has %s)"
          % (kv.__version__, MINIMUM, " ".join(have)))
    newest = have[-1]
    print("kubernetes-validate %s: Kubernetes %s (the oldest supported) and %s (the newest it holds), strict"
          % (kv.__version__, MINIMUM, newest))
    return kv, [MINIMUM] if newest == MINIMUM else [MINIMUM, newest]


def schema_errors(kv, objs, version):
    """'Kind/name: path: message' for each object failing the strict schema."""
    out = []
    for o in objs:
        try:
            used = kv.validate(copy.deepcopy(o), version, strict=True)
            if used != version:
                out.append("%s: validated against %s, not %s" % (K.ident(o), used, version))
        except kv.ValidationError as e:
            out.append("%s: %s: %s" % (K.ident(o), ".".join(str(p) for p in e.absolute_path), e.message))
        except (kv.SchemaNotFoundError, kv.InvalidSchemaError) as e:
            out.append("%s: no schema: %s" % (K.ident(o), e.message))
    return out


def test_validate(k8s_dir):
    kv, versions = schema_versions()
    errors = []
    for t in K.TARGETS:
        objs = render(t, k8s_dir)
        for v in versions:
            errs = schema_errors(kv, objs, v)
            print("validate %-15s Kubernetes %s: %d objects, %d errors" % (t, v, len(objs), len(errs)))
            errors += ["%s (Kubernetes %s) %s" % (t, v, e) for e in errs]
    check(not errors, "schema errors:\n  " + "\n  ".join(errors))

    # The schemas must be able to say no, or the above proves nothing.
    job = K.find(render("cpu-demo", k8s_dir), "Job")[0]
    typo = copy.deepcopy(job)
    typo["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    for v in versions:
        errs = schema_errors(kv, [typo], v)
        check(errs, "Kubernetes %s: strict validation let a misspelled field (securityContex) through" % v)
        print("control: Kubernetes %s rejects a misspelled field: %s" % (v, errs[0]))
    if len(versions) > 1:
        # onPodConditions[].status was required before 1.34: the versions differ.
        nostatus = copy.deepcopy(job)
        for r in nostatus["spec"]["podFailurePolicy"]["rules"]:
            for c in r.get("onPodConditions") or []:
                c.pop("status", None)
        old, new = schema_errors(kv, [nostatus], MINIMUM), schema_errors(kv, [nostatus], versions[-1])
        check(old and not new, "a DisruptionTarget rule without status: expected Kubernetes %s to reject it and %s "
              "to take it, got %r and %r" % (MINIMUM, versions[-1], old, new))
        print("control: without onPodConditions[].status, %s rejects (%s), %s accepts" % (MINIMUM, old[0], versions[-1]))


# --- lint --------------------------------------------------------------------

def test_lint(k8s_dir):
    problems = []
    for t in K.TARGETS:
        a = lint_args(t)
        found = lint(render(t, k8s_dir), **a)
        print("lint %-15s %s: %d problems" % (t, "part (no references)" if a.get("whole") is False else
                                               "whole job" + (", images pinned, external %s" % " ".join(
                                                   a["external"]) if a.get("external") else ""), len(found)))
        problems += ["%s: %s" % (t, p) for p in found]
    check(not problems, "lint:\n  " + "\n  ".join(problems))


def _job(objs, i=0):
    return K.find(objs, "Job")[i]


def _coord(objs):
    return K.find(objs, "Deployment", "phalanx-coordinator")[0]


def _ctr(o):
    return K.containers(o)[0]


def _env_del(c, name):
    c["env"] = [e for e in c["env"] if e["name"] != name]


def _env_set(c, name, value):
    _env_del(c, name)
    c["env"].append({"name": name, "value": value})


def _drop(objs, kind, name=None):
    objs[:] = [o for o in objs if not (o["kind"] == kind and (name is None or o["metadata"]["name"] == name))]


def _rules(o):
    return o["spec"]["podFailurePolicy"]["rules"]


def _volume_set(o, name, source):
    """Replace the source (emptyDir, persistentVolumeClaim...) of a pod volume."""
    vols = K.pod_spec(o)["volumes"]
    vols[:] = [dict(source, name=name) if v["name"] == name else v for v in vols]


def _scraper_rule(objs):
    """The coordinator policy's ingress rule for port 8080 (the second)."""
    rule = K.find(objs, "NetworkPolicy", "phalanx-coordinator")[0]["spec"]["ingress"][1]
    check(any(p.get("port") == 8080 for p in rule["ports"]), "the coordinator policy's second rule is not for 8080")
    return rule


def _scraper_peer(objs):
    return _scraper_rule(objs)["from"][0]


# (what is broken, how, what the lint must say: a substring of one problem)
BROKEN = [
    ("coordinator without securityContext", lambda x: _ctr(_coord(x)).pop("securityContext"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].securityContext.readOnlyRootFilesystem"),
    ("worker running as root", lambda x: _ctr(_job(x))["securityContext"].update(runAsUser=0),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].securityContext.runAsUser"),
    ("worker keeping its capabilities", lambda x: _ctr(_job(x))["securityContext"].pop("capabilities"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].securityContext.capabilities.drop"),
    ("privilege escalation allowed", lambda x: _ctr(_job(x, 1))["securityContext"].update(allowPrivilegeEscalation=True),
     "Job/phalanx-worker-g1: spec.template.spec.containers[worker].securityContext.allowPrivilegeEscalation"),
    ("no seccomp profile", lambda x: (_ctr(_coord(x))["securityContext"].pop("seccompProfile"),
                                      K.pod_spec(_coord(x))["securityContext"].pop("seccompProfile")),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].securityContext.seccompProfile.type"),
    ("coordinator without a readiness probe", lambda x: _ctr(_coord(x)).pop("readinessProbe"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].readinessProbe"),
    ("liveness probe on the wrong path", lambda x: _ctr(_coord(x))["livenessProbe"]["httpGet"].update(path="/status"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].livenessProbe"),
    ("coordinator rolling instead of Recreate", lambda x: _coord(x)["spec"].update(strategy={"type": "RollingUpdate"}),
     "Deployment/phalanx-coordinator: spec.strategy.type"),
    ("no scrape annotations", lambda x: _coord(x)["spec"]["template"]["metadata"].pop("annotations"),
     "Deployment/phalanx-coordinator: spec.template.metadata.annotations.prometheus.io/scrape"),
    ("worker without limits", lambda x: _ctr(_job(x))["resources"].pop("limits"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].resources.limits.cpu"),
    ("no /tmp under a read-only root", lambda x: _ctr(_job(x))["volumeMounts"].pop(),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].volumeMounts[/tmp]"),
    ("service links on", lambda x: K.pod_spec(_job(x)).pop("enableServiceLinks"),
     "Job/phalanx-worker-g0: spec.template.spec.enableServiceLinks"),
    ("Job not Indexed", lambda x: _job(x)["spec"].update(completionMode="NonIndexed"),
     "Job/phalanx-worker-g0: spec.completionMode"),
    ("no backoffLimitPerIndex", lambda x: _job(x)["spec"].pop("backoffLimitPerIndex"),
     "Job/phalanx-worker-g0: spec.backoffLimitPerIndex"),
    ("replacement pods before the old one is gone", lambda x: _job(x)["spec"].pop("podReplacementPolicy"),
     "Job/phalanx-worker-g0: spec.podReplacementPolicy"),
    ("restartPolicy OnFailure", lambda x: K.pod_spec(_job(x)).update(restartPolicy="OnFailure"),
     "Job/phalanx-worker-g0: spec.template.spec.restartPolicy"),
    ("evictions counted as failures", lambda x: _rules(_job(x)).pop(1),
     "Job/phalanx-worker-g0: spec.podFailurePolicy.rules: no Ignore rule for the DisruptionTarget"),
    ("exit 2 retried", lambda x: _rules(_job(x)).pop(0),
     "Job/phalanx-worker-g0: spec.podFailurePolicy.rules: no FailJob/FailIndex rule for exit code 2"),
    ("rank not from the completion index", lambda x: _env_set(_ctr(_job(x)), "PHALANX_RANK", "0"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_RANK"),
    ("data plane on loopback", lambda x: _env_set(_ctr(_job(x)), "PHALANX_DATA_HOST", "127.0.0.1"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_DATA_HOST"),
    ("a stopped worker exits 0 (its rank counted complete)", lambda x: _env_del(_ctr(_job(x)), "PHALANX_STOP_EXIT_CODE"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_STOP_EXIT_CODE"),
    ("a stopped worker exits 2 (the Job fails)", lambda x: _env_set(_ctr(_job(x)), "PHALANX_STOP_EXIT_CODE", "2"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_STOP_EXIT_CODE"),
    ("token file not set", lambda x: _env_del(_ctr(_job(x)), "PHALANX_TOKEN_FILE"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_TOKEN_FILE"),
    ("token Secret not mounted", lambda x: _ctr(_coord(x))["volumeMounts"].pop(0),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].volumeMounts: no mount of Secret"),
    ("token Secret missing", lambda x: _drop(x, "Secret"),
     "Deployment/phalanx-coordinator: spec.template.spec: names Secret/phalanx-token"),
    ("worker dialling the HTTP port", lambda x: _env_set(_ctr(_job(x, 2)), "PHALANX_COORDINATOR",
                                                         "tcp://phalanx-coordinator:8080"),
     "Job/phalanx-worker-g2: spec.template.spec.containers[worker].env.PHALANX_COORDINATOR"),
    ("worker dialling another Service", lambda x: _env_set(_ctr(_job(x)), "PHALANX_COORDINATOR", "tcp://coordinator:7777"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_COORDINATOR"),
    ("Service port not leading to the bind port",
     lambda x: K.find(x, "Service", "phalanx-coordinator")[0]["spec"]["ports"][0].update(targetPort=7000),
     "Service/phalanx-coordinator: spec.ports: no TCP port leading to the coordinator's port 7777"),
    ("Service without the UDP heartbeat port",
     lambda x: K.find(x, "Service", "phalanx-coordinator")[0]["spec"].update(
         ports=[p for p in K.find(x, "Service", "phalanx-coordinator")[0]["spec"]["ports"] if p.get("protocol") != "UDP"]),
     "Service/phalanx-coordinator: spec.ports: no UDP port leading to the coordinator's port 7777"),
    ("NetworkPolicy without UDP to the coordinator",
     lambda x: [r.update(ports=[q for q in r.get("ports") or [] if q.get("protocol") != "UDP"])
                for r in K.find(x, "NetworkPolicy", "phalanx-coordinator")[0]["spec"]["ingress"]],
     "NetworkPolicy: no rule lets the workers reach the coordinator pods on UDP port 7777"),
    ("two Jobs with one group", lambda x: _env_set(_ctr(_job(x, 1)), "PHALANX_GROUP", "g0") or
     _job(x, 1)["spec"]["template"]["metadata"]["labels"].update({"phalanx.dev/group": "g0"}),
     "Job/phalanx-worker-g1: spec.template.spec.containers[worker].env.PHALANX_GROUP: 'g0' is also the group of"),
    ("group label disagreeing with PHALANX_GROUP",
     lambda x: _job(x)["spec"]["template"]["metadata"]["labels"].update({"phalanx.dev/group": "g9"}),
     "Job/phalanx-worker-g0: spec.template.metadata.labels.phalanx.dev/group"),
    ("completions not the ranks per group", lambda x: _job(x)["spec"].update(completions=2, parallelism=2),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_RANKS_PER_GROUP"),
    ("another job's name", lambda x: K.find(x, "ConfigMap", "phalanx-worker")[0]["data"].update(PHALANX_JOB="other"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_JOB"),
    ("no NetworkPolicy", lambda x: _drop(x, "NetworkPolicy"), "NetworkPolicy: none selects the coordinator pods"),
    ("coordinator open to every pod",
     lambda x: K.find(x, "NetworkPolicy", "phalanx-coordinator")[0]["spec"]["ingress"][0].pop("from"),
     "NetworkPolicy/phalanx-coordinator: spec.ingress[0].from: empty"),
    ("scraper admitted by namespace alone",
     lambda x: _scraper_peer(x).pop("podSelector"),
     "NetworkPolicy/phalanx-coordinator: spec.ingress[1].from[0]: port 8080 is open to"),
    ("scraper: every pod of the labelled namespaces",
     lambda x: _scraper_peer(x).update(podSelector={}),
     "NetworkPolicy/phalanx-coordinator: spec.ingress[1].from[0]: port 8080 is open to"),
    ("scraper: the namespace named monitoring, any pod",
     lambda x: _scraper_rule(x).__setitem__("from", [{"namespaceSelector": {"matchLabels": {
         "kubernetes.io/metadata.name": "monitoring"}}}]),
     "NetworkPolicy/phalanx-coordinator: spec.ingress[1].from[0]: port 8080 is open to"),
    ("no scraper rule", lambda x: K.find(x, "NetworkPolicy", "phalanx-coordinator")[0]["spec"]["ingress"].pop(1),
     "NetworkPolicy: no rule lets a metrics scraper reach the coordinator's port 8080"),
    ("local image pulled", lambda x: _ctr(_job(x)).pop("imagePullPolicy"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].imagePullPolicy"),
    ("local image pulled Always", lambda x: _ctr(_coord(x)).update(imagePullPolicy="Always"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].imagePullPolicy"),
    ("connect timeout left to the default",
     lambda x: K.find(x, "ConfigMap", "phalanx-worker")[0]["data"].pop("PHALANX_CONNECT_TIMEOUT"),
     "Job/phalanx-worker-g0: spec.template.spec.containers[worker].env.PHALANX_CONNECT_TIMEOUT"),
    ("connect timeout of a minute", lambda x: _env_set(_ctr(_job(x, 1)), "PHALANX_CONNECT_TIMEOUT", "60"),
     "Job/phalanx-worker-g1: spec.template.spec.containers[worker].env.PHALANX_CONNECT_TIMEOUT"),
    ("checkpoints on an emptyDir (gone with the pod)",
     lambda x: _volume_set(_job(x, 2), "checkpoints", {"emptyDir": {}}),
     "Job/phalanx-worker-g2: spec.template.spec.containers[worker].env.PHALANX_CHECKPOINT_DIR"),
    ("no PodDisruptionBudget", lambda x: _drop(x, "PodDisruptionBudget"), "PodDisruptionBudget: none selects"),
    ("budget letting two groups go", lambda x: K.find(x, "PodDisruptionBudget")[0]["spec"].update(minAvailable=1),
     "PodDisruptionBudget/phalanx-workers: spec.minAvailable"),
    ("budget counting the spare as a training group",
     lambda x: K.find(x, "PodDisruptionBudget")[0]["spec"].update(minAvailable=3),
     "PodDisruptionBudget/phalanx-workers: spec.minAvailable"),
    ("more groups to train than there are",
     lambda x: K.find(x, "ConfigMap", "phalanx-coordinator")[0]["data"].update(PHALANX_TARGET_GROUPS="5"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].env.PHALANX_TARGET_GROUPS"),
    ("a quorum minimum above the training groups",
     lambda x: K.find(x, "ConfigMap", "phalanx-coordinator")[0]["data"].update(PHALANX_MIN_REPLICAS="4"),
     "Deployment/phalanx-coordinator: spec.template.spec.containers[coordinator].env.PHALANX_MIN_REPLICAS"),
    ("no headless Service", lambda x: _drop(x, "Service", "phalanx-workers"),
     "Job/phalanx-worker-g0: spec.template.spec.subdomain"),
    ("object without the name label", lambda x: K.find(x, "ConfigMap")[0]["metadata"]["labels"].pop(
        "app.kubernetes.io/name"), "ConfigMap/phalanx-coordinator: metadata.labels.app.kubernetes.io/name"),
]


def test_lint_selftest(k8s_dir):
    demo = render("cpu-demo", k8s_dir)
    check(not lint(demo), "cpu-demo must lint clean before it is broken: %s" % lint(demo))
    missed = []
    for what, breaks, expect in BROKEN:
        objs = copy.deepcopy(demo)
        breaks(objs)
        found = lint(objs)
        hit = [p for p in found if expect in p]
        print("%-45s -> %s" % (what, hit[0] if hit else "NOT REPORTED"))
        if not hit:
            missed.append("%s: expected a problem holding %r, got %r" % (what, expect, found))
    # gpu: a latest image, only there is it a problem
    gpu = render("gpu", k8s_dir)
    _ctr(_job(gpu))["image"] = "registry.example.com/phalanx:latest"
    hit = [p for p in lint(gpu, **lint_args("gpu")) if "Job/phalanx-worker-g0: spec.template.spec.containers[worker]"
           ".image" in p]
    print("%-45s -> %s" % ("gpu image :latest", hit[0] if hit else "NOT REPORTED"))
    if not hit:
        missed.append("gpu image :latest: not reported")
    # the command-line form
    r = subprocess.run([sys.executable, os.path.join(HERE, "k8s_lint.py"), "-"], input=K.render_yaml("gpu", k8s_dir),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("k8s_lint.py - < gpu without --external: exit %d, %s" % (r.returncode, r.stdout.strip().splitlines()[-1]))
    if r.returncode != 1 or "names Secret/phalanx-token" not in r.stdout:
        missed.append("k8s_lint.py on the gpu overlay without --external: expected exit 1 naming the Secret, got %d: "
                      "%s" % (r.returncode, r.stdout))
    check(not missed, "the lint missed broken manifests:\n  " + "\n  ".join(missed))
    print("the lint reported all %d broken manifests" % (len(BROKEN) + 2))


# --- refs ---------------------------------------------------------------------

def mounted_dir(o, c, path):
    """The volume a path lies in, as (mount, volume) or (None, None)."""
    vols = {v["name"]: v for v in K.pod_spec(o).get("volumes") or []}
    best = None
    for m in c.get("volumeMounts") or []:
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (not best or len(mp) > len(best["mountPath"])):
            best = m
    return (best, vols.get(best["name"])) if best else (None, None)


def scraper_peers(objs):
    pol = K.find(objs, "NetworkPolicy", "phalanx-coordinator")[0]
    return [peer for rule in pol["spec"]["ingress"] if any(p.get("port") == 8080 for p in rule.get("ports") or [])
            for peer in rule.get("from") or []]


def scraper_admits(objs, ns_labels, pod_labels):
    """Does the coordinator's policy let a pod with these labels, in a
    namespace with these, reach port 8080?"""
    return any(matches(p.get("namespaceSelector"), ns_labels) and matches(p.get("podSelector"), pod_labels)
               for p in scraper_peers(objs))


def documented_scraper_patch(k8s_dir):
    """The ```yaml block of docs/deploy.md's "Let Prometheus in": an overlay's patches."""
    import re
    import yaml
    with open(os.path.join(k8s_dir, "..", "..", "docs", "deploy.md")) as f:
        text = f.read()
    section = "## Let Prometheus in"
    check(section in text, "docs/deploy.md has no section %r" % section)
    m = re.search(r"^```yaml\n(.*?)^```", text.split(section, 1)[1].split("\n## ", 1)[0], re.S | re.M)
    check(m, "docs/deploy.md %r holds no ```yaml block" % section)
    return yaml.safe_load(m.group(1))["patches"]


def check_scraper_patch(k8s_dir):
    """The selectors docs/deploy.md shows an overlay replacing: on a copy of
    cpu-demo they render, lint clean, and admit the Prometheus they name."""
    import yaml
    patches = documented_scraper_patch(k8s_dir)
    with tempfile.TemporaryDirectory(prefix="phalanx-k8s-") as tmp:
        copy_dir = os.path.join(tmp, "k8s")
        shutil.copytree(k8s_dir, copy_dir)
        path = os.path.join(copy_dir, "overlays", "cpu-demo", "kustomization.yaml")
        with open(path) as f:
            kz = yaml.safe_load(f)
        kz["patches"] = kz.get("patches", []) + patches
        with open(path, "w") as f:
            yaml.safe_dump(kz, f)
        objs = render(os.path.dirname(path), copy_dir)
    found = lint(objs)
    check(not found, "cpu-demo with docs/deploy.md's scraper patch: lint: %s" % found)
    ns, pod = {"kubernetes.io/metadata.name": "monitoring"}, {"app.kubernetes.io/name": "prometheus"}
    check(scraper_admits(objs, ns, pod) and not scraper_admits(objs, ns, {}) and not scraper_admits(objs, {}, pod),
          "cpu-demo with docs/deploy.md's scraper patch: expected port 8080 open to pods %s in the namespace "
          "monitoring only, got %r" % (pod, scraper_peers(objs)))
    print("docs/deploy.md's scraper patch: renders on cpu-demo, lints clean, admits app.kubernetes.io/name=prometheus "
          "pods of the namespace monitoring only")


def check_common(t, objs):
    """What every overlay shares: the coordinator address, writable folders."""
    coord = _coord(objs)
    cc = _ctr(coord)
    cenv = K.container_env(objs, cc)
    svc = K.find(objs, "Service", "phalanx-coordinator")
    check(svc, "%s: no Service phalanx-coordinator" % t)
    ports = {p["name"]: p for p in svc[0]["spec"]["ports"]}
    check(ports.get("zmq", {}).get("port") == 7777 and ports.get("http", {}).get("port") == 8080,
          "%s: Service/phalanx-coordinator: spec.ports: expected zmq 7777 and http 8080, got %r" % (t, ports))
    check(cenv.get("PHALANX_BIND") == "tcp://0.0.0.0:7777", "%s: Deployment/phalanx-coordinator: env.PHALANX_BIND is %r"
          % (t, cenv.get("PHALANX_BIND")))
    for j in K.find(objs, "Job"):
        env = K.container_env(objs, _ctr(j))
        check(env.get("PHALANX_COORDINATOR") == "tcp://phalanx-coordinator:7777",
              "%s: %s: env.PHALANX_COORDINATOR is %r, expected tcp://phalanx-coordinator:7777 (the Service, port zmq)"
              % (t, K.ident(j), env.get("PHALANX_COORDINATOR")))
        ckpt = env.get("PHALANX_CHECKPOINT_DIR", "")
        m, v = mounted_dir(j, _ctr(j), ckpt)
        check(m and not m.get("readOnly") and (v.get("persistentVolumeClaim") or {}).get("claimName") ==
              "phalanx-checkpoints", "%s: %s: PHALANX_CHECKPOINT_DIR %r is on %r, expected a writable mount of the "
              "claim phalanx-checkpoints" % (t, K.ident(j), ckpt, v))
        check(env.get("PHALANX_CONNECT_TIMEOUT") == "0", "%s: %s: PHALANX_CONNECT_TIMEOUT is %r, expected \"0\" "
              "(pods may start before the coordinator)" % (t, K.ident(j), env.get("PHALANX_CONNECT_TIMEOUT")))
    print("%s: every worker dials tcp://phalanx-coordinator:7777 = Service port zmq -> the coordinator's --bind, "
          "waits for it (PHALANX_CONNECT_TIMEOUT 0); checkpoints on the claim phalanx-checkpoints" % t)
    # The scraper: pods labelled phalanx.dev/scraper=true in namespaces
    # labelled so (docs/deploy.md), nothing else.
    lab = {"phalanx.dev/scraper": "true"}
    admits = lambda ns, pod: scraper_admits(objs, ns, pod)
    peers = scraper_peers(objs)
    check(admits(lab, lab), "%s: NetworkPolicy/phalanx-coordinator: a pod labelled %s in a namespace labelled so "
          "cannot reach port 8080: %r" % (t, lab, peers))
    for ns, pod, what in ((lab, {}, "an unlabelled pod of a labelled namespace"),
                          ({"kubernetes.io/metadata.name": "monitoring"}, lab, "a labelled pod of the namespace "
                           "monitoring, itself unlabelled")):
        check(not admits(ns, pod), "%s: NetworkPolicy/phalanx-coordinator: port 8080 admits %s: %r" % (t, what, peers))
    print("%s: port 8080 admits pods labelled phalanx.dev/scraper=true in namespaces labelled so, and no other" % t)
    events = cenv.get("PHALANX_EVENTS", "")
    for key, path in (("PHALANX_EVENTS", events[5:] if events.startswith("file:") else None),
                      ("PHALANX_SPILL_DIR", cenv.get("PHALANX_SPILL_DIR"))):
        if path is None:
            continue
        m, v = mounted_dir(coord, cc, path)
        check(m and v and "emptyDir" in v and not m.get("readOnly"), "%s: Deployment/phalanx-coordinator: env.%s %r "
              "is on no writable emptyDir (the root file system is read-only)" % (t, key, path))
    print("%s: coordinator events %s, spill dir %s on a writable emptyDir" % (t, events, cenv.get("PHALANX_SPILL_DIR")))
    return coord, cenv


def worker_jobs(t, objs):
    jobs = K.find(objs, "Job", labels={"app.kubernetes.io/component": "worker"})
    check(len(jobs) == len(K.find(objs, "Job")), "%s: a Job without app.kubernetes.io/component=worker" % t)
    return jobs


def test_refs(k8s_dir):
    for t in ("cpu-demo", "cpu-demo+kafka"):
        objs = render(t, k8s_dir)
        coord, cenv = check_common(t, objs)
        jobs = worker_jobs(t, objs)
        groups = [K.container_env(objs, _ctr(j))["PHALANX_GROUP"] for j in jobs]
        check(groups == CPU_DEMO_GROUPS, "%s: expected %d worker Jobs for groups %s, got %s"
              % (t, len(CPU_DEMO_GROUPS), " ".join(CPU_DEMO_GROUPS), [(K.ident(j), g) for j, g in zip(jobs, groups)]))
        # The spares: the coordinator trains at most the groups less the
        # spares; the other Jobs' groups wait (which ones, the quorum says).
        training = len(CPU_DEMO_GROUPS) - CPU_DEMO_SPARES
        target, minrep = cenv.get("PHALANX_TARGET_GROUPS"), cenv.get("PHALANX_MIN_REPLICAS")
        want = str(training) if CPU_DEMO_SPARES else "0"
        check(target == want, "%s: ConfigMap/phalanx-coordinator: PHALANX_TARGET_GROUPS is %r, expected \"%s\" "
              "(%d groups, %d of them spares)" % (t, target, want, len(jobs), CPU_DEMO_SPARES))
        check(len(jobs) - (int(target) or len(jobs)) == CPU_DEMO_SPARES and 1 <= int(minrep) < training,
              "%s: %d Jobs, target %s, min replicas %s: expected %d spare(s) beyond the training groups, and a quorum "
              "that survives a loss with no spare left" % (t, len(jobs), target, minrep, CPU_DEMO_SPARES))
        for j in jobs:
            env = K.container_env(objs, _ctr(j))
            check(j["spec"]["completions"] == 1 and env["PHALANX_RANKS_PER_GROUP"] == "1",
                  "%s: %s: spec.completions %r, PHALANX_RANKS_PER_GROUP %r: expected 1 and 1"
                  % (t, K.ident(j), j["spec"]["completions"], env["PHALANX_RANKS_PER_GROUP"]))
            check(env["PHALANX_MODEL"] == "tiny" and env["PHALANX_DATA"] == "/usr/local/share/phalanx/data/demo",
                  "%s: %s: expected the tiny model on the image's demo data, got %s on %s"
                  % (t, K.ident(j), env["PHALANX_MODEL"], env["PHALANX_DATA"]))
        for o in [coord] + jobs:
            c = _ctr(o)
            check(c["image"] == "localhost/phalanx:latest" and c.get("imagePullPolicy") == "IfNotPresent",
                  "%s: %s: image %s with imagePullPolicy %r, expected localhost/phalanx:latest, IfNotPresent (loaded "
                  "into kind or minikube, never pulled)" % (t, K.ident(o), c["image"], c.get("imagePullPolicy")))
        pvc = K.find(objs, "PersistentVolumeClaim", "phalanx-checkpoints")
        check(pvc and pvc[0]["spec"]["accessModes"] == ["ReadWriteOnce"],
              "%s: expected PersistentVolumeClaim/phalanx-checkpoints, ReadWriteOnce (what a one-node cluster's "
              "default class provides), got %r" % (t, pvc and pvc[0]["spec"]))
        check(K.secret_value(objs, "phalanx-token", "token").strip(), "%s: Secret/phalanx-token: empty token" % t)
        want_events = "kafka:" if t.endswith("kafka") else "file:"
        check(cenv["PHALANX_EVENTS"].startswith(want_events), "%s: ConfigMap/phalanx-coordinator: PHALANX_EVENTS is %r, "
              "expected %s..." % (t, cenv["PHALANX_EVENTS"], want_events))
        print("%s: %d worker Jobs, groups %s (PHALANX_TARGET_GROUPS %s: %d train, %d spare; quorum minimum %s), 1 rank "
              "each, tiny model, checkpoints on a ReadWriteOnce claim, localhost/phalanx:latest IfNotPresent, token "
              "Secret, events %s" % (t, len(jobs), " ".join(groups), target, training, CPU_DEMO_SPARES, minrep,
                                     cenv["PHALANX_EVENTS"]))

    check_scraper_patch(k8s_dir)

    t = "gpu"
    objs = render(t, k8s_dir)
    _, cenv = check_common(t, objs)
    jobs = worker_jobs(t, objs)
    check(len(jobs) == 2, "gpu: expected 2 worker Jobs (documented in overlays/gpu), got %d" % len(jobs))
    check(cenv.get("PHALANX_TARGET_GROUPS") == "0", "gpu: PHALANX_TARGET_GROUPS is %r, expected \"0\" (no spares)"
          % cenv.get("PHALANX_TARGET_GROUPS"))
    for j in jobs:
        pod, c = K.pod_spec(j), _ctr(j)
        f = "gpu: %s: " % K.ident(j)
        check(j["spec"]["completions"] == 8 and j["spec"]["parallelism"] == 8,
              f + "spec.completions/parallelism %r/%r, expected 8/8" % (j["spec"]["completions"], j["spec"]["parallelism"]))
        lim = c["resources"].get("limits", {}).get("nvidia.com/gpu")
        check(lim is not None and int(lim) >= 1, f + "resources.limits.nvidia.com/gpu is %r, expected >= 1" % lim)
        check(pod.get("nodeSelector") and any(t_.get("key") == "nvidia.com/gpu" for t_ in pod.get("tolerations") or []),
              f + "expected a nodeSelector and a toleration for nvidia.com/gpu")
        shm, vol = mounted_dir(j, c, "/dev/shm")
        check(shm and shm["mountPath"] == "/dev/shm" and (vol.get("emptyDir") or {}).get("medium") == "Memory",
              f + "expected /dev/shm on an emptyDir with medium Memory, got %r" % vol)
        env = K.container_env(objs, c)
        check(any(k.startswith("NCCL_") for k in env), f + "env: no NCCL_* variables")
        check(env["PHALANX_RANKS_PER_GROUP"] == "8", f + "PHALANX_RANKS_PER_GROUP is %r" % env["PHALANX_RANKS_PER_GROUP"])
        check(env.get("PHALANX_DEVICE") == "cuda", f + "PHALANX_DEVICE is %r: the GPUs would sit idle"
              % env.get("PHALANX_DEVICE"))
    pvc = K.find(objs, "PersistentVolumeClaim", "phalanx-checkpoints")
    check(pvc and "ReadWriteMany" in pvc[0]["spec"]["accessModes"],
          "gpu: expected PersistentVolumeClaim/phalanx-checkpoints, ReadWriteMany")
    print("gpu: 2 worker Jobs x 8 ranks, no spares, --device cuda, nvidia.com/gpu limits, GPU nodes, /dev/shm in memory, "
          "NCCL env, checkpoints on a ReadWriteMany claim")


# --- groups -------------------------------------------------------------------

def committed_groups(overlay):
    """The groups an overlay's groups/ lists and how many wait as spares
    (its patch of PHALANX_TARGET_GROUPS; none: no spares)."""
    import yaml
    with open(os.path.join(overlay, "groups", "kustomization.yaml")) as f:
        kz = yaml.safe_load(f)
    target = 0
    for p in kz.get("patches") or []:
        target = int((yaml.safe_load(p["patch"]).get("data") or {}).get("PHALANX_TARGET_GROUPS", target))
    return kz["resources"], len(kz["resources"]) - target if target else 0


def make_groups(k8s_dir, *args):
    return subprocess.run([sys.executable, os.path.join(k8s_dir, "make-groups.py")] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def coordinator_flag(objs, name):
    return (K.find(objs, "ConfigMap", "phalanx-coordinator")[0].get("data") or {}).get(name)


def test_groups(k8s_dir):
    for name in ("cpu-demo", "gpu"):
        overlay = os.path.join(k8s_dir, "overlays", name)
        groups, spares = committed_groups(overlay)
        args = (["--spares", str(spares)] if spares else []) + groups
        r = make_groups(k8s_dir, overlay, "--check", *args)
        check(r.returncode == 0, "%s/groups is not what make-groups.py writes for %s:\n%s"
              % (overlay, " ".join(args), r.stdout))
        print("overlays/%s/groups: as make-groups.py writes it for %s" % (name, " ".join(args)))
        objs = render(overlay, k8s_dir)
        target = coordinator_flag(objs, "PHALANX_TARGET_GROUPS")
        check(target == str(len(groups) - spares if spares else 0), "overlays/%s renders PHALANX_TARGET_GROUPS %r, "
              "not the %s of its groups/ (the overlay overrides it, or does not name groups under components)"
              % (name, target, "%d training groups" % (len(groups) - spares) if spares else "0 (no spares)"))
    check(committed_groups(os.path.join(k8s_dir, "overlays", "cpu-demo"))[1] == CPU_DEMO_SPARES,
          "overlays/cpu-demo/groups: expected %d spare(s)" % CPU_DEMO_SPARES)

    with tempfile.TemporaryDirectory(prefix="phalanx-k8s-") as tmp:
        copy_dir = os.path.join(tmp, "k8s")
        shutil.copytree(k8s_dir, copy_dir)
        demo = os.path.join(copy_dir, "overlays", "cpu-demo")
        r = make_groups(copy_dir, demo, "--count", "5")
        check(r.returncode == 0, "make-groups.py --count 5: exit %d: %s" % (r.returncode, r.stdout))
        objs = render(demo, copy_dir)
        names = [j["metadata"]["name"] for j in K.find(objs, "Job")]
        check(names == ["phalanx-worker-g%d" % i for i in range(5)], "after --count 5: Jobs %s" % names)
        check(coordinator_flag(objs, "PHALANX_TARGET_GROUPS") == "0", "after --count 5 (no --spares): "
              "PHALANX_TARGET_GROUPS %r, expected the base's \"0\"" % coordinator_flag(objs, "PHALANX_TARGET_GROUPS"))
        print("make-groups.py --count 5: renders Jobs %s, no spares (PHALANX_TARGET_GROUPS 0)" % " ".join(names))
        r = make_groups(copy_dir, demo, "--check", "g0", "g1", "g2")
        check(r.returncode == 1 and "g3/kustomization.yaml" in r.stdout,
              "make-groups.py --check after a change: expected exit 1 naming g3, got %d: %s" % (r.returncode, r.stdout))
        print("make-groups.py --check: reports a stale groups/ (%s)" % r.stdout.splitlines()[0])
        r = make_groups(copy_dir, demo, "--count", "6", "--spares", "2")
        check(r.returncode == 0, "make-groups.py --count 6 --spares 2: exit %d: %s" % (r.returncode, r.stdout))
        objs = render(demo, copy_dir)
        names = [j["metadata"]["name"] for j in K.find(objs, "Job")]
        check(len(names) == 6 and coordinator_flag(objs, "PHALANX_TARGET_GROUPS") == "4",
              "after --count 6 --spares 2: Jobs %s, PHALANX_TARGET_GROUPS %r: expected 6 Jobs, 4 training"
              % (names, coordinator_flag(objs, "PHALANX_TARGET_GROUPS")))
        r = make_groups(copy_dir, demo, "--check", "--count", "6", "--spares", "1")
        check(r.returncode == 1 and "groups/kustomization.yaml: differs" in r.stdout and "--spares 1" in r.stdout,
              "make-groups.py --check with another --spares: expected exit 1 naming groups/kustomization.yaml, got "
              "%d: %s" % (r.returncode, r.stdout))
        print("make-groups.py --count 6 --spares 2: 6 Jobs, PHALANX_TARGET_GROUPS 4; --check with --spares 1 "
              "reports the difference")
        for bad in (["--count", "2", "--spares", "2"], ["g0", "--spares", "-1"]):
            r = make_groups(copy_dir, demo, *bad)
            check(r.returncode == 2 and "--spares" in r.stdout, "make-groups.py %s: expected exit 2 naming --spares, "
                  "got %d: %s" % (" ".join(bad), r.returncode, r.stdout))
        for bad in ("G0", "g_0", "g0-", "a" * 41):
            r = make_groups(copy_dir, demo, bad)
            check(r.returncode == 2 and "DNS label" in r.stdout, "make-groups.py %s: expected exit 2 saying DNS label, "
                  "got %d: %s" % (bad, r.returncode, r.stdout))
        r = make_groups(copy_dir, demo, "g0", "g0")
        check(r.returncode == 2 and "repeat" in r.stdout, "make-groups.py g0 g0: expected exit 2, got %d: %s"
              % (r.returncode, r.stdout))
        print("make-groups.py refuses names that are no DNS label, repeated names, and as many spares as groups")
        with open(os.path.join(demo, "groups", "extra.yaml"), "w") as f:
            f.write("kind: ConfigMap\n")
        r = make_groups(copy_dir, demo, "g0")
        check(r.returncode != 0 and "not written by make-groups.py" in r.stdout and
              os.path.exists(os.path.join(demo, "groups", "extra.yaml")),
              "make-groups.py over a file it did not write: expected a refusal, got %d: %s" % (r.returncode, r.stdout))
        print("make-groups.py does not delete files it did not write")


SCENARIOS = {
    "render": test_render,
    "validate": test_validate,
    "lint": test_lint,
    "lint-selftest": test_lint_selftest,
    "refs": test_refs,
    "groups": test_groups,
}

if __name__ == "__main__":
    main_scenarios(SCENARIOS)
