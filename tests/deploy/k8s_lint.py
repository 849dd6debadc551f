"""A focused lint of rendered deploy/k8s objects: it checks what phalanx's
manifests promise, which a schema cannot see. Per workload: a locked-down
securityContext, requests and limits, an explicit command, the token Secret
mounted and named by PHALANX_TOKEN_FILE, a local image never pulled; the
coordinator's Recreate, probes and scrape annotations; each group Job's
Indexed completion, per-index retries, replacement only of failed pods and
failure policy. For a whole job (an overlay), the references between
objects: the workers' coordinator address against the Service and the bind
port, ConfigMaps and Secrets that exist, ranks per group against
completions, one group per Job, the workers' connect timeout set, their
checkpoints on a volume that outlives the pod, the network policies (the
scraper selected by namespace and pod labels), the training groups
(PHALANX_TARGET_GROUPS: the groups less the spares) against the quorum's
minimum and the disruption budget.

Problems are strings 'Kind/name: field: what is wrong'. From a shell:
    kubectl kustomize deploy/k8s/overlays/gpu | python3 tests/deploy/k8s_lint.py --pinned -"""
import argparse
import re
import sys

from k8s_render import POD_IP_FIELD, RANK_FIELD, container_env, containers, find, ident, load, pod_spec, pod_template

UID = 10001
TOKEN_SECRET, TOKEN_KEY = "phalanx-token", "token"
COORD_SERVICE = "phalanx-coordinator"
ZMQ_PORT, HTTP_PORT = 7777, 8080
NAME_LABEL, COMPONENT_LABEL, GROUP_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/component", "phalanx.dev/group"
SCRAPER_LABEL = "phalanx.dev/scraper"  # on the metrics scraper's namespace and pods (base/networkpolicy.yaml)
MIN_CONNECT_WAIT_S = 300  # a worker's PHALANX_CONNECT_TIMEOUT: 0 (forever) or at least this
WORKER = {NAME_LABEL: "phalanx", COMPONENT_LABEL: "worker"}
COORDINATOR = {NAME_LABEL: "phalanx", COMPONENT_LABEL: "coordinator"}


def selects(selector, labels):
    """Does a label selector ({matchLabels, matchExpressions} or a Service's
    plain map) pick pods with these labels? Only matchLabels is understood;
    a selector with expressions never matches here (keep them plain)."""
    if not selector or selector.get("matchExpressions"):
        return False
    match = selector["matchLabels"] if "matchLabels" in selector else selector
    return bool(match) and all(labels.get(k) == v for k, v in match.items())


def matches(selector, labels):
    """A label selector's full meaning ({matchLabels, matchExpressions}; an
    empty or absent one matches everything): does it pick these labels?"""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels,
              "DoesNotExist": key not in labels}.get(op, False)
        if not ok:
            return False
    return True


def labels_of_pods(obj):
    return (pod_template(obj).get("metadata") or {}).get("labels") or {}


def port_number(container, port):
    """A probe's or Service's port (number or container port name) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


class Lint:
    def __init__(self, objs, whole, external, pinned):
        self.objs, self.whole, self.external, self.pinned = objs, whole, set(external), pinned
        self.problems = []

    def bad(self, obj, field, what):
        self.problems.append("%s: %s: %s" % (ident(obj), field, what))

    def env(self, c):
        """The container's environment: with its ConfigMaps for a whole job
        (a missing one is reported by refs), its own env only for a part."""
        if self.whole:
            try:
                return container_env(self.objs, c)
            except KeyError:
                pass
        return {e["name"]: e.get("value") for e in c.get("env") or [] if "valueFrom" not in e}

    # --- every object --------------------------------------------------

    def labels(self, o):
        lab = o["metadata"].get("labels") or {}
        if lab.get(NAME_LABEL) != "phalanx":
            self.bad(o, "metadata.labels." + NAME_LABEL, "is %r, expected 'phalanx'" % lab.get(NAME_LABEL))
        if lab.get(COMPONENT_LABEL) not in ("coordinator", "worker"):
            self.bad(o, "metadata.labels." + COMPONENT_LABEL,
                     "is %r, expected coordinator or worker" % lab.get(COMPONENT_LABEL))

    # --- every Deployment and Job ----------------------------------------

    def workload(self, o):
        pod = pod_spec(o)
        for key in ("automountServiceAccountToken", "enableServiceLinks"):
            if pod.get(key) is not False:
                why = "the pods need no API access" if key.startswith("automount") else \
                    "service variables (PHALANX_COORDINATOR_PORT...) would read as PHALANX_* flags"
                self.bad(o, "spec.template.spec." + key, "is %r, expected false: %s" % (pod.get(key), why))
        volumes = {v.get("name"): v for v in pod.get("volumes") or []}
        cs = containers(o)
        if not cs:
            self.bad(o, "spec.template.spec.containers", "none")
        for c in cs:
            self.container(o, pod, c, volumes)

    def container(self, o, pod, c, volumes):
        f = "spec.template.spec.containers[%s]." % c.get("name")
        if not c.get("command"):
            self.bad(o, f + "command", "not set: the image sets no entrypoint to rely on")
        image = c.get("image") or ""
        if not image:
            self.bad(o, f + "image", "not set")
        elif self.pinned and ("@" not in image and (":" not in image.rsplit("/", 1)[-1] or image.endswith(":latest"))):
            self.bad(o, f + "image", "%s: pin a tag or digest, not latest" % image)
        # No registry serves localhost/ (an image loaded into the nodes, as on
        # kind or minikube): pulling it fails, and with :latest or no tag the
        # default policy is Always.
        if image.startswith("localhost/") and c.get("imagePullPolicy") not in ("IfNotPresent", "Never"):
            self.bad(o, f + "imagePullPolicy", "is %r for the local image %s, expected IfNotPresent (or Never): "
                     "no registry serves it" % (c.get("imagePullPolicy"), image))
        self.security(o, f, pod.get("securityContext") or {}, c.get("securityContext") or {})
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(kind) or {}):
                    self.bad(o, f + "resources.%s.%s" % (kind, r), "not set")
        mounts = {m.get("mountPath"): m for m in c.get("volumeMounts") or []}
        for m in mounts.values():
            if m.get("name") not in volumes:
                self.bad(o, f + "volumeMounts[%s]" % m.get("name"), "no volume of that name in the pod")
        if (c.get("securityContext") or {}).get("readOnlyRootFilesystem"):
            tmp = mounts.get("/tmp")
            if not tmp or "emptyDir" not in volumes.get(tmp.get("name"), {}) or tmp.get("readOnly"):
                self.bad(o, f + "volumeMounts[/tmp]", "missing: a read-only root needs a writable emptyDir at /tmp")
        self.token(o, f, c, volumes)

    def security(self, o, f, pod_sc, sc):
        def effective(key):
            return sc.get(key, pod_sc.get(key))
        if effective("runAsNonRoot") is not True:
            self.bad(o, f + "securityContext.runAsNonRoot", "is %r, expected true" % effective("runAsNonRoot"))
        if effective("runAsUser") != UID:
            self.bad(o, f + "securityContext.runAsUser", "is %r, expected %d" % (effective("runAsUser"), UID))
        seccomp = (effective("seccompProfile") or {}).get("type")
        if seccomp != "RuntimeDefault":
            self.bad(o, f + "securityContext.seccompProfile.type", "is %r, expected RuntimeDefault" % seccomp)
        for key, want in (("allowPrivilegeEscalation", False), ("readOnlyRootFilesystem", True)):
            if sc.get(key) is not want:
                self.bad(o, f + "securityContext." + key, "is %r, expected %s" % (sc.get(key), str(want).lower()))
        if sc.get("privileged"):
            self.bad(o, f + "securityContext.privileged", "is true")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            self.bad(o, f + "securityContext.capabilities.drop", "is %r, expected to hold ALL" % caps.get("drop"))
        if caps.get("add"):
            self.bad(o, f + "securityContext.capabilities.add", "is %r, expected none" % caps["add"])

    def token(self, o, f, c, volumes):
        """The token Secret mounted, and PHALANX_TOKEN_FILE (or --token-file) naming the file in it."""
        want = None
        for m in c.get("volumeMounts") or []:
            secret = volumes.get(m.get("name"), {}).get("secret") or {}
            if secret.get("secretName") != TOKEN_SECRET:
                continue
            items = secret.get("items") or [{"key": TOKEN_KEY, "path": TOKEN_KEY}]
            path = next((i.get("path") for i in items if i.get("key") == TOKEN_KEY), None)
            if path:
                want = m["mountPath"].rstrip("/") + "/" + path
        if not want:
            self.bad(o, f + "volumeMounts", "no mount of Secret %s key %s" % (TOKEN_SECRET, TOKEN_KEY))
            return
        argv = (c.get("command") or []) + (c.get("args") or [])
        given = argv[argv.index("--token-file") + 1] if "--token-file" in argv[:-1] else self.env(c).get(
            "PHALANX_TOKEN_FILE")
        if given != want:
            self.bad(o, f + "env.PHALANX_TOKEN_FILE", "is %r, expected %s (where Secret %s is mounted)"
                     % (given, want, TOKEN_SECRET))

    # --- the coordinator -------------------------------------------------

    def coordinator(self, o):
        spec = o.get("spec") or {}
        if spec.get("replicas") != 1:
            self.bad(o, "spec.replicas", "is %r, expected 1" % spec.get("replicas"))
        if (spec.get("strategy") or {}).get("type") != "Recreate":
            self.bad(o, "spec.strategy.type", "is %r, expected Recreate: never two coordinators"
                     % (spec.get("strategy") or {}).get("type"))
        ann = (pod_template(o).get("metadata") or {}).get("annotations") or {}
        for k, v in (("prometheus.io/scrape", "true"), ("prometheus.io/port", str(HTTP_PORT)),
                     ("prometheus.io/path", "/metrics")):
            if ann.get(k) != v:
                self.bad(o, "spec.template.metadata.annotations." + k, "is %r, expected %r" % (ann.get(k), v))
        for c in containers(o):
            f = "spec.template.spec.containers[%s]." % c.get("name")
            for probe in ("readinessProbe", "livenessProbe"):
                get = (c.get(probe) or {}).get("httpGet") or {}
                if get.get("path") != "/healthz" or port_number(c, get.get("port")) != HTTP_PORT:
                    self.bad(o, f + probe, "expected httpGet /healthz on port %d, got %r" % (HTTP_PORT, c.get(probe)))
            env = self.env(c)
            for key, port in (("PHALANX_BIND", ZMQ_PORT), ("PHALANX_HTTP", HTTP_PORT)):
                if not str(env.get(key, "")).endswith(":%d" % port):
                    self.bad(o, f + "env." + key, "is %r, expected to end in :%d" % (env.get(key), port))

    # --- a replica group's Job -------------------------------------------

    def job(self, o):
        spec = o.get("spec") or {}
        for key, want in (("completionMode", "Indexed"), ("podReplacementPolicy", "Failed")):
            if spec.get(key) != want:
                self.bad(o, "spec." + key, "is %r, expected %s" % (spec.get(key), want))
        if not isinstance(spec.get("backoffLimitPerIndex"), int):
            self.bad(o, "spec.backoffLimitPerIndex", "not set: a failed rank must be retried on its own")
        if spec.get("completions") != spec.get("parallelism") or not spec.get("completions"):
            self.bad(o, "spec.completions", "is %r with parallelism %r: expected equal (ranks per group)"
                     % (spec.get("completions"), spec.get("parallelism")))
        if pod_spec(o).get("restartPolicy") != "Never":
            self.bad(o, "spec.template.spec.restartPolicy", "is %r, expected Never" % pod_spec(o).get("restartPolicy"))
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        if not any(r.get("action") == "Ignore" and any(c.get("type") == "DisruptionTarget"
                                                       for c in r.get("onPodConditions") or []) for r in rules):
            self.bad(o, "spec.podFailurePolicy.rules", "no Ignore rule for the DisruptionTarget condition")
        names = {c.get("name") for c in containers(o)}
        if not any(r.get("action") in ("FailJob", "FailIndex") and (r.get("onExitCodes") or {}).get("operator") == "In"
                   and 2 in (r["onExitCodes"].get("values") or []) and r["onExitCodes"].get("containerName", None)
                   in names | {None} for r in rules):
            self.bad(o, "spec.podFailurePolicy.rules", "no FailJob/FailIndex rule for exit code 2 (bad configuration)")
        labels = labels_of_pods(o)
        if labels.get(COMPONENT_LABEL) != "worker":
            self.bad(o, "spec.template.metadata.labels." + COMPONENT_LABEL, "is %r, expected worker"
                     % labels.get(COMPONENT_LABEL))
        for c in containers(o):
            f = "spec.template.spec.containers[%s].env." % c.get("name")
            env = {e["name"]: e for e in c.get("env") or []}
            rank = env.get("PHALANX_RANK", {})
            if (rank.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != RANK_FIELD \
                    and rank.get("value") != "$(JOB_COMPLETION_INDEX)":
                self.bad(o, f + "PHALANX_RANK", "expected from the downward API, %s" % RANK_FIELD)
            host = (env.get("PHALANX_DATA_HOST", {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
            if host != POD_IP_FIELD:
                self.bad(o, f + "PHALANX_DATA_HOST", "is from %r, expected %s" % (host, POD_IP_FIELD))
            # A stopped worker (eviction, drain) must not exit 0: the Job would
            # count its rank complete and never replace it; nor 2 (FailJob).
            stop = str(env.get("PHALANX_STOP_EXIT_CODE", {}).get("value", "0"))
            if not stop.isdigit() or int(stop) in (0, 2) or int(stop) > 255:
                self.bad(o, f + "PHALANX_STOP_EXIT_CODE", "is %r, expected an exit status in 1..255 other than 2, "
                         "so that a stopped worker's pod is replaced" % stop)

    # --- a whole job: references between objects -------------------------

    def refs(self):
        coords = [o for o in self.objs if o["kind"] == "Deployment" and
                  o["metadata"].get("labels", {}).get(COMPONENT_LABEL) == "coordinator"]
        jobs = [o for o in self.objs if o["kind"] == "Job"]
        if len(coords) != 1:
            self.problems.append("Deployment: %d coordinator Deployments, expected 1" % len(coords))
        if not jobs:
            self.problems.append("Job: no worker Jobs")
        for o in coords + jobs:
            self.references(o)
        if len(coords) != 1:
            return
        coord = coords[0]
        cc = containers(coord)[0]
        cenv = self.env(cc)
        svc, zmq = self.coordinator_service(coord, cc, cenv)
        groups = {}
        for j in jobs:
            c = containers(j)[0]
            env = self.env(c)
            f = "spec.template.spec.containers[%s].env." % c.get("name")
            if svc and env.get("PHALANX_COORDINATOR") != "tcp://%s:%d" % (svc, zmq):
                self.bad(j, f + "PHALANX_COORDINATOR", "is %r, expected tcp://%s:%d (Service %s, its port to "
                         "the coordinator's PHALANX_BIND)" % (env.get("PHALANX_COORDINATOR"), svc, zmq, svc))
            if env.get("PHALANX_JOB") != cenv.get("PHALANX_JOB"):
                self.bad(j, f + "PHALANX_JOB", "is %r, the coordinator's is %r" % (env.get("PHALANX_JOB"),
                                                                                   cenv.get("PHALANX_JOB")))
            w = j["spec"].get("completions")
            if str(env.get("PHALANX_RANKS_PER_GROUP")) != str(w):
                self.bad(j, f + "PHALANX_RANKS_PER_GROUP", "is %r, expected %r (the Job's completions)"
                         % (env.get("PHALANX_RANKS_PER_GROUP"), w))
            g = env.get("PHALANX_GROUP")
            if not g:
                self.bad(j, f + "PHALANX_GROUP", "empty: each group Job names its group (make-groups.py)")
            elif labels_of_pods(j).get(GROUP_LABEL) != g:
                self.bad(j, "spec.template.metadata.labels." + GROUP_LABEL, "is %r, expected %r (PHALANX_GROUP)"
                         % (labels_of_pods(j).get(GROUP_LABEL), g))
            elif g in groups:
                self.bad(j, f + "PHALANX_GROUP", "%r is also the group of %s" % (g, ident(groups[g])))
            groups.setdefault(g, j)
            self.worker_env(j, c, env)
            sub = pod_spec(j).get("subdomain")
            heads = [s for s in find(self.objs, "Service", sub) if s["spec"].get("clusterIP") == "None"
                     and selects(s["spec"].get("selector"), labels_of_pods(j))]
            if not heads:
                self.bad(j, "spec.template.spec.subdomain", "is %r, expected the name of a headless Service "
                         "selecting this Job's pods" % sub)
        training = self.training_groups(coord, cc, cenv, len(jobs))
        try:
            minrep = int(cenv.get("PHALANX_MIN_REPLICAS", 1))
        except ValueError:
            minrep = None
        if jobs and (minrep is None or not 1 <= minrep <= training):
            self.bad(coord, "spec.template.spec.containers[%s].env.PHALANX_MIN_REPLICAS" % cc.get("name"),
                     "is %r, expected 1..%d (the %s)" % (cenv.get("PHALANX_MIN_REPLICAS"), training,
                                                         "training groups" if training < len(jobs) else "groups"))
        self.network_policies(coord, jobs)
        self.scraper(coord)
        self.disruption_budget(jobs, training)

    def training_groups(self, coord, cc, cenv, groups):
        """The groups that train: PHALANX_TARGET_GROUPS (the others wait as
        spares), or every group when it is 0 or unset."""
        value = cenv.get("PHALANX_TARGET_GROUPS", "0")
        target = int(value) if str(value).isdigit() else -1
        if groups and not 0 <= target <= groups:
            self.bad(coord, "spec.template.spec.containers[%s].env.PHALANX_TARGET_GROUPS" % cc.get("name"),
                     "is %r, expected 0 (no spares) or 1..%d (the groups that train; the other Jobs' groups wait as "
                     "spares: make-groups.py --spares)" % (value, groups))
            return groups
        return target or groups

    def worker_env(self, j, c, env):
        """What a worker pod needs from its ConfigMap and volumes in Kubernetes."""
        f = "spec.template.spec.containers[%s]." % c.get("name")
        # Set, not the program's default: pods may start long before the
        # coordinator is scheduled and pulled, and giving up is exit 2 (FailJob).
        wait = env.get("PHALANX_CONNECT_TIMEOUT")
        if wait is None or not str(wait).isdigit() or 0 < int(wait) < MIN_CONNECT_WAIT_S:
            self.bad(j, f + "env.PHALANX_CONNECT_TIMEOUT", "is %r, expected 0 (wait forever) or at least %d s, set "
                     "explicitly: pods may start long before the coordinator, and a worker that gives up exits 2, "
                     "which fails the Job" % (wait, MIN_CONNECT_WAIT_S))
        ckpt = env.get("PHALANX_CHECKPOINT_DIR")
        if ckpt:
            vols = {v.get("name"): v for v in pod_spec(j).get("volumes") or []}
            best = None
            for m in c.get("volumeMounts") or []:
                mp = m.get("mountPath", "").rstrip("/")
                if (ckpt == mp or ckpt.startswith(mp + "/")) and (not best or len(mp) > len(best[0])):
                    best = (mp, vols.get(m.get("name")) or {})
            if best and "persistentVolumeClaim" not in best[1]:
                self.bad(j, f + "env.PHALANX_CHECKPOINT_DIR", "%s is on a volume of kind %s, which goes with the pod: "
                         "a replacement pod (restartPolicy Never) would never restore; use a PersistentVolumeClaim"
                         % (ckpt, "/".join(k for k in best[1] if k != "name") or "?"))

    def references(self, o):
        """ConfigMaps, Secrets and claims a pod names exist, unless declared external."""
        pod = pod_spec(o)
        wanted = []
        for c in containers(o):
            wanted += [("ConfigMap", (s.get("configMapRef") or {}).get("name")) for s in c.get("envFrom") or []]
        for v in pod.get("volumes") or []:
            wanted += [("Secret", (v.get("secret") or {}).get("secretName")),
                       ("ConfigMap", (v.get("configMap") or {}).get("name")),
                       ("PersistentVolumeClaim", (v.get("persistentVolumeClaim") or {}).get("claimName"))]
        for kind, name in wanted:
            if name and "%s/%s" % (kind, name) not in self.external and not find(self.objs, kind, name):
                self.bad(o, "spec.template.spec", "names %s/%s, which is not rendered" % (kind, name))

    def coordinator_service(self, coord, cc, cenv):
        """(the coordinator Service's name, its port leading to PHALANX_BIND), or (None, None) after reporting."""
        svcs = find(self.objs, "Service", COORD_SERVICE)
        if not svcs:
            self.bad(coord, "Service", "no Service %s" % COORD_SERVICE)
            return None, None
        svc = svcs[0]
        if not selects(svc["spec"].get("selector"), labels_of_pods(coord)):
            self.bad(svc, "spec.selector", "does not select the coordinator's pods %r" % labels_of_pods(coord))
        m = re.search(r":(\d+)$", str(cenv.get("PHALANX_BIND", "")))
        bind = int(m.group(1)) if m else None
        targets = {}
        for p in svc["spec"].get("ports") or []:
            targets[(port_number(cc, p.get("targetPort", p.get("port"))), p.get("protocol", "TCP"))] = p.get("port")
        for want, proto in ((bind, "TCP"), (HTTP_PORT, "TCP"), (bind, "UDP")):
            if (want, proto) not in targets:
                self.bad(svc, "spec.ports", "no %s port leading to the coordinator's port %r%s" %
                         (proto, want, " (heartbeats as datagrams, docs/protocol.md)" if proto == "UDP" else ""))
        if (bind, "UDP") in targets and (bind, "TCP") in targets and targets[(bind, "UDP")] != targets[(bind, "TCP")]:
            self.bad(svc, "spec.ports", "UDP port %r differs from the TCP port %r: workers send heartbeats to the "
                     "number the coordinator offers, its own" % (targets[(bind, "UDP")], targets.get((bind, "TCP"))))
        zmq = targets.get((bind, "TCP"))
        return (COORD_SERVICE, zmq) if zmq else (None, None)

    def network_policies(self, coord, jobs):
        pols = find(self.objs, "NetworkPolicy")
        for kind, pod_labels, port in (("coordinator", labels_of_pods(coord), ZMQ_PORT),
                                       ("worker", labels_of_pods(jobs[0]) if jobs else {}, None)):
            mine = [p for p in pols if selects(p["spec"].get("podSelector"), pod_labels)]
            if not mine:
                self.problems.append("NetworkPolicy: none selects the %s pods %r" % (kind, pod_labels))
                continue
            for p in mine:
                if "Ingress" not in (p["spec"].get("policyTypes") or ["Ingress"]):
                    self.bad(p, "spec.policyTypes", "does not hold Ingress")
                for i, rule in enumerate(p["spec"].get("ingress") or []):
                    if not rule.get("from"):
                        self.bad(p, "spec.ingress[%d].from" % i, "empty: lets every pod in")
            # workers reach this pod (on `port` when given)
            for proto in ("TCP", "UDP") if port is not None else (None,):
                ok = any(any(selects(peer.get("podSelector"), WORKER) and "namespaceSelector" not in peer
                             for peer in rule.get("from") or [])
                         and (port is None or any(x.get("port") == port and x.get("protocol", "TCP") == proto
                                                  for x in rule.get("ports") or []))
                         for p in mine for rule in p["spec"].get("ingress") or [])
                if not ok:
                    self.problems.append("NetworkPolicy: no rule lets the workers reach the %s pods%s"
                                         % (kind, "" if port is None else " on %s port %d" % (proto, port)))

    def scraper(self, coord):
        """The coordinator's HTTP port is open to the metrics scraper, picked
        by both namespace and pod labels: not every pod of a namespace, not a
        namespace alone, not an address block."""
        mine = [p for p in find(self.objs, "NetworkPolicy") if selects(p["spec"].get("podSelector"),
                                                                       labels_of_pods(coord))]
        found = False
        for p in mine:
            for i, rule in enumerate(p["spec"].get("ingress") or []):
                if not any(x.get("port") == HTTP_PORT and x.get("protocol", "TCP") == "TCP"
                           for x in rule.get("ports") or []):
                    continue
                for k, peer in enumerate(rule.get("from") or []):
                    found = True
                    ns, pods = peer.get("namespaceSelector"), peer.get("podSelector")
                    if ns is None or pods is None or matches(ns, {}) or matches(pods, {}):
                        self.bad(p, "spec.ingress[%d].from[%d]" % (i, k), "port %d is open to %r: select the scraper "
                                 "by both a namespaceSelector and a podSelector on labels (%s=true)"
                                 % (HTTP_PORT, peer, SCRAPER_LABEL))
        if not found:
            self.problems.append("NetworkPolicy: no rule lets a metrics scraper reach the coordinator's port %d "
                                 "(/metrics), though its pods ask to be scraped" % HTTP_PORT)

    def disruption_budget(self, jobs, training):
        """(training groups - 1) x ranks: one group's worth of pods evicted
        at a time, beyond the spares' (their pods count among those
        available, so S + 1 groups' worth may go, S of them replaced)."""
        pdbs = [p for p in find(self.objs, "PodDisruptionBudget") if jobs and
                selects(p["spec"].get("selector"), labels_of_pods(jobs[0]))]
        if not pdbs:
            self.problems.append("PodDisruptionBudget: none selects the worker pods")
            return
        w = jobs[0]["spec"].get("completions") or 0
        want = (training - 1) * w
        got = pdbs[0]["spec"].get("minAvailable")
        if got != want or "maxUnavailable" in pdbs[0]["spec"]:
            spares = len(jobs) - training
            what = "%d training groups" % training if spares else "%d groups" % training
            self.bad(pdbs[0], "spec.minAvailable", "is %r, expected %d = (%s - 1) x %d ranks: one group's worth "
                     "evicted at a time%s (Jobs allow only an integer minAvailable)"
                     % (got, want, what, w, ", beyond the %d spare(s)" % spares if spares else ""))


def lint(objs, whole=True, external=(), pinned=False):
    """Problems found in rendered objects; [] when none. whole: the objects
    are a whole job (an overlay), so references between them are checked.
    external: 'Kind/name' of objects created outside the manifests (the gpu
    overlay's token Secret). pinned: images must name a tag other than latest."""
    L = Lint(objs, whole, external, pinned)
    for o in objs:
        L.labels(o)
        if o["kind"] in ("Deployment", "Job"):
            L.workload(o)
        if o["kind"] == "Deployment":
            L.coordinator(o)
        if o["kind"] == "Job":
            L.job(o)
    if whole:
        L.refs()
    return L.problems


def main():
    ap = argparse.ArgumentParser(description="lint rendered phalanx manifests (see the top of this file)")
    ap.add_argument("file", help="rendered YAML, - for stdin")
    ap.add_argument("--part", action="store_true", help="not a whole job: skip the references between objects")
    ap.add_argument("--external", action="append", default=[], help="Kind/name created outside (repeatable)")
    ap.add_argument("--pinned", action="store_true", help="images must be pinned (not latest)")
    a = ap.parse_args()
    text = sys.stdin.read() if a.file == "-" else open(a.file).read()
    problems = lint(load(text), not a.part, a.external, a.pinned)
    for p in problems:
        print(p)
    print("%d problems" % len(problems))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
