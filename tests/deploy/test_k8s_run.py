"""Runs the job the rendered cpu-demo manifests declare, with exactly their
commands, args, environment and volumes, as containers of the image `make
image` builds (podman run --network host; the Services' names map to
127.0.0.1; each pod's security context becomes --user, --read-only,
--cap-drop ALL and no-new-privileges). What Kubernetes would do is done by
hand: a pod per Job completion index, fresh emptyDirs per pod, the Secret and
ConfigMaps from the rendered objects, the downward API filled in.

The overlay runs spares (its coordinator's PHALANX_TARGET_GROUPS below its
group Jobs: cpu-demo trains 3 groups and keeps 1 spare): before any kill,
/status must show the training groups in the quorum and the others in state
"spare". Then one training group's worker container is SIGKILLed (podman
kill) mid-training: the coordinator must drop its group and a spare must
take its place (spare_promoted naming the killed group, the spare healed
from a live group), and the pod the Job controller would start in its place
(same spec, fresh emptyDirs) must register as the new spare. (Without
spares the replacement must rejoin the quorum and heal instead.)

Then, once a checkpoint is on the claim's volume and every worker is past
it, every worker container is SIGKILLed: no peer holds the state any more.
The pods the Jobs start in their places (same spec, the same claim) must
each restore the checkpoint saved last (checkpoint_restored, in the worker's
output and the coordinator's events, at that step, above 0), the job's next
quorum must form at that step and no replacement may train a step at or
below it; the job must finish with every training group at the last step
and the same state checksum, the spares leaving without training once the
job is done (job_finished_elsewhere), all containers exiting 0.

Without podman the same declared commands run as plain processes (the image
paths mapped to local folders) and the test says so: CI installs podman and
takes the container path. usage: test_k8s_run.py BINDIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, HERE)
import k8s_render as k  # noqa: E402
import podman_util  # noqa: E402
from phalanx_test import Fail, check, die_with_test, main, wait_until  # noqa: E402

LABEL = "phalanx-test-k8s-run"
KILL_AFTER_STEP = 40  # SIGKILL a worker once the job has committed this many steps


def expand(s, env):
    """Kubernetes' $(VAR) expansion in command, args and env values: a known
    VAR is replaced, $$ escapes, an unknown reference stays as written."""
    def sub(m):
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        value = env.get(m.group(1))
        return m.group(0) if value is None else value
    return re.sub(r"\$\$\([A-Za-z_][A-Za-z0-9_]*\)|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, s)


class Pod:
    """One pod of a rendered workload: its single container's argv, env,
    volumes (host folders) and security settings."""

    def __init__(self, objs, workload, index, scratch, shared):
        self.workload = workload
        self.index = index
        spec = k.pod_spec(workload)
        cs = spec.get("containers") or []
        check(len(cs) == 1, "%s: one container per pod expected, found %d" % (k.ident(workload), len(cs)))
        self.container = c = cs[0]
        self.image = c["image"]
        self.name = "%s-%d-%d" % (workload["metadata"]["name"], index, int(time.monotonic() * 1000) % 100000)
        fields = {k.RANK_FIELD: str(index), k.POD_IP_FIELD: "127.0.0.1", "metadata.name": self.name}
        env = k.container_env(objs, c, fields)
        missing = [n for n, v in env.items() if v is None]
        check(not missing, "%s: environment from fields this test does not provide: %s" % (self.name, missing))
        self.env = {n: expand(v, env) for n, v in env.items()}
        self.argv = [expand(a, self.env) for a in (c.get("command") or []) + (c.get("args") or [])]
        check(self.argv, "%s: no command declared (the image's entrypoint is not what a manifest should rely on)"
              % self.name)
        psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}
        self.uid = csc.get("runAsUser", psc.get("runAsUser"))
        self.gid = csc.get("runAsGroup", psc.get("runAsGroup", self.uid))
        self.read_only = bool(csc.get("readOnlyRootFilesystem"))
        self.drop_all = "ALL" in ((csc.get("capabilities") or {}).get("drop") or [])
        self.no_new_privs = csc.get("allowPrivilegeEscalation") is False
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        self.mounts = []  # (host, container path, read-only)
        for m in c.get("volumeMounts") or []:
            v = vols.get(m["name"])
            check(v is not None, "%s: volumeMount %s names no volume" % (self.name, m["name"]))
            host = self.volume_dir(objs, v, scratch, shared)
            self.mounts.append((host, m["mountPath"], bool(m.get("readOnly"))))
        self.proc = None  # the `podman run` client, or the program itself

    def volume_dir(self, objs, v, scratch, shared):
        if "emptyDir" in v:  # fresh for every pod, as Kubernetes makes it
            d = tempfile.mkdtemp(prefix="%s-%s-" % (self.name, v["name"]), dir=scratch)
        elif "persistentVolumeClaim" in v:  # one folder per claim, shared
            d = shared.setdefault(v["persistentVolumeClaim"]["claimName"],
                                  tempfile.mkdtemp(prefix="pvc-", dir=scratch))
        elif "secret" in v or "configMap" in v:
            d = tempfile.mkdtemp(prefix="%s-%s-" % (self.name, v["name"]), dir=scratch)
            src = v.get("secret") or v.get("configMap")
            if "secret" in v:
                keys = {i["key"]: i.get("path", i["key"]) for i in src.get("items") or []}
                data = {key: k.secret_value(objs, src["secretName"], key) for key in keys}
            else:
                cm = k.find(objs, "ConfigMap", src["name"])
                check(cm, "configMap volume %s: ConfigMap %s not rendered" % (v["name"], src["name"]))
                data = cm[0].get("data") or {}
                keys = {i["key"]: i.get("path", i["key"]) for i in src.get("items") or []} or {x: x for x in data}
            for key, path in keys.items():
                with open(os.path.join(d, path), "w") as f:
                    f.write(data[key])
                os.chmod(os.path.join(d, path), src.get("defaultMode", 0o644))
        else:
            raise Fail("%s: volume %s of a kind this test does not emulate: %s" % (self.name, v["name"], sorted(v)))
        # fsGroup / runAsUser: the pod's user owns what Kubernetes gives it.
        if os.geteuid() == 0 and self.uid is not None:
            for dirpath, _, files in os.walk(d):
                os.chown(dirpath, self.uid, self.gid or self.uid)
                for f in files:
                    os.chown(os.path.join(dirpath, f), self.uid, self.gid or self.uid)
        return d

    def host_path(self, path):
        for host, inside, _ in self.mounts:
            if path == inside or path.startswith(inside.rstrip("/") + "/"):
                return os.path.join(host, os.path.relpath(path, inside))
        return None


class Runner:
    """Starts pods as podman containers (or, without podman, processes)."""

    def __init__(self, bindir, scratch, podman, services, image_paths):
        self.bindir = bindir
        self.scratch = scratch
        self.podman = podman
        self.services = services
        self.image_paths = image_paths  # process mode: image folder -> local folder
        self.env = podman_util.env()

    def podman_cmd(self, *args, **kw):
        return subprocess.run([self.podman] + list(args), env=self.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=kw.get("timeout", 120))

    def start(self, pod):
        log = open(os.path.join(self.scratch, pod.name + ".log"), "w")
        if self.podman:
            cmd = [self.podman, "run", "--rm=false", "--name", pod.name, "--label", LABEL, "--network", "host",
                   "--entrypoint", pod.argv[0]]
            for svc in self.services:
                cmd += ["--add-host", "%s:127.0.0.1" % svc]
            if pod.uid is not None:
                cmd += ["--user", "%d:%d" % (pod.uid, pod.gid or pod.uid)]
            if pod.read_only:
                cmd += ["--read-only", "--read-only-tmpfs=false"]
            if pod.drop_all:
                cmd += ["--cap-drop", "ALL"]
            if pod.no_new_privs:
                cmd += ["--security-opt", "no-new-privileges"]
            for host, inside, ro in pod.mounts:
                cmd += ["-v", "%s:%s%s" % (host, inside, ":ro" if ro else "")]
            for n, v in sorted(pod.env.items()):
                cmd += ["--env", "%s=%s" % (n, v)]
            cmd += [pod.image] + pod.argv[1:]
            pod.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=self.env, preexec_fn=die_with_test)
        else:
            # The same argv and environment; paths inside the image or a
            # volume become local folders, Service names 127.0.0.1.
            paths = dict(self.image_paths)
            paths.update({inside: host for host, inside, _ in pod.mounts})
            longest_first = sorted(paths, key=len, reverse=True)
            pat = re.compile(r"(?<![\w/.-])(%s)(?=/|$|[:,])" % "|".join(re.escape(p) for p in longest_first))

            def local(s):  # one pass, so a host folder is never mapped again
                s = pat.sub(lambda m: paths[m.group(1)], s)
                for svc in self.services:
                    s = s.replace("//%s:" % svc, "//127.0.0.1:")
                return s
            env = {n: v for n, v in os.environ.items() if not n.startswith("PHALANX_")}
            env.update({n: local(v) for n, v in pod.env.items()})
            argv = [os.path.join(self.bindir, pod.argv[0])] + [local(a) for a in pod.argv[1:]]
            pod.proc = subprocess.Popen(argv, stdout=log, stderr=log, env=env, preexec_fn=die_with_test)
        return pod

    def kill(self, pod):
        if self.podman:
            r = self.podman_cmd("kill", "--signal", "KILL", pod.name)
            check(r.returncode == 0, "podman kill %s: %s" % (pod.name, r.stderr.strip()))
        else:
            pod.proc.kill()

    def wait(self, pod, timeout):
        """The program's exit status (the container's, in podman mode)."""
        rc = pod.proc.wait(timeout=timeout)
        if rc < 0:
            rc = 128 - rc  # killed by a signal: the status a shell or a container runtime reports
        if self.podman:
            r = self.podman_cmd("inspect", "--format", "{{.State.ExitCode}}", pod.name)
            check(r.returncode == 0, "podman inspect %s: %s" % (pod.name, r.stderr.strip()))
            rc = int(r.stdout.strip())
        return rc

    def cleanup(self):
        if self.podman:
            self.podman_cmd("rm", "-f", "-t", "0", "--filter", "label=" + LABEL, timeout=120)


def http_json(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read().decode())


def read_events(path):
    evs = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip():
                    evs.append(json.loads(line))
    return evs


def saved_steps(folder):
    """The steps of the checkpoints in a checkpoint folder, oldest first
    (step_NNNNNNNN appears whole or not at all: written aside, renamed)."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(int(n[5:]) for n in names if re.match(r"^step_\d{8}$", n))


def live_members(st):
    return [m for m in st["members"] if m["state"] != "lost"]


def training_members(st):
    """The live members of the groups in the quorum (spares are not)."""
    return [m for m in live_members(st) if m["group"] in st["quorum"]["groups"]]


def spare_groups(st):
    return sorted(g["name"] for g in st["groups"] if g["state"] == "spare")


def test(bindir):
    objs = k.render("cpu-demo")
    # PX_TEST_NO_PODMAN=1 tries the fallback on a machine that has podman.
    podman = None if os.environ.get("PX_TEST_NO_PODMAN") == "1" else shutil.which("podman")
    scratch = tempfile.mkdtemp(prefix="phalanx-k8s-run-")
    os.chmod(scratch, 0o755)
    image_paths = {}
    if podman:
        print("container path: podman, image built by scripts/image.sh (make image)", flush=True)
        reaper = podman_util.Reaper(podman, LABEL)
        rc = podman_util.build_image(reaper)
        check(rc == 0, "make image failed (exit %d)" % rc)
    else:
        print("NOTE: podman not found (or PX_TEST_NO_PODMAN=1): running the manifests' commands as plain processes from %s, "
              "not as containers (CI installs podman and takes the container path)" % bindir, flush=True)
        data = os.path.join(scratch, "data")
        os.makedirs(data)
        subprocess.run([os.path.join(bindir, "phalanx-data"), "--demo", "--out", os.path.join(data, "demo")],
                       check=True, stdout=subprocess.DEVNULL, preexec_fn=die_with_test)
        image_paths["/usr/local/share/phalanx/data"] = data
    services = [s["metadata"]["name"] for s in k.find(objs, "Service")]
    run = Runner(bindir, scratch, podman, services, image_paths)
    run.cleanup()  # containers a crashed earlier run left behind
    shared = {}
    pods = []
    try:
        coord_dep = k.find(objs, "Deployment", labels={"app.kubernetes.io/component": "coordinator"})
        check(len(coord_dep) == 1, "one coordinator Deployment, found %d" % len(coord_dep))
        coord = run.start(Pod(objs, coord_dep[0], 0, scratch, shared))
        pods.append(coord)
        http_port = [p["containerPort"] for p in coord.container.get("ports") or [] if p.get("name") == "http"]
        check(http_port, "the coordinator declares an http port")
        base = "http://127.0.0.1:%d" % http_port[0]
        probe = coord.container["readinessProbe"]["httpGet"]["path"]

        def ready():
            check(coord.proc.poll() is None, "the coordinator exited (%s); log %s.log in %s"
                  % (coord.proc.returncode, coord.name, scratch))
            try:
                with urllib.request.urlopen(base + probe, timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(ready, 60, "the coordinator's readiness probe %s" % probe, 0.1)
        print("coordinator ready (%s answers)" % probe, flush=True)

        jobs = k.find(objs, "Job", labels={"app.kubernetes.io/component": "worker"})
        check(len(jobs) >= 3, "cpu-demo declares at least 3 worker Jobs (a kill needs a quorum left), found %d"
              % len(jobs))
        workers = {}
        for j in jobs:
            for i in range(j["spec"]["completions"]):
                p = run.start(Pod(objs, j, i, scratch, shared))
                workers[(p.env["PHALANX_GROUP"], i)] = p
                pods.append(p)
        groups = sorted(g for g, _ in workers)
        steps = int(next(iter(workers.values())).env["PHALANX_STEPS"])
        # Spares: the coordinator trains at most PHALANX_TARGET_GROUPS
        # groups (0: all); the other Jobs' groups wait.
        target = int(coord.env.get("PHALANX_TARGET_GROUPS", "0")) or len(groups)
        n_spares = len(groups) - target
        print("started groups %s (%d steps each): %d train, %d spare(s)" % (groups, steps, target, n_spares),
              flush=True)
        events_path = coord.host_path(coord.env["PHALANX_EVENTS"][len("file:"):])

        def at_step(n):
            # Members report their step in heartbeats (the quorum's own step
            # moves only when a quorum forms); spares do not train.
            st = http_json(base + "/status")
            training = training_members(st)
            return st if (len(st["quorum"]["groups"]) == target and len(spare_groups(st)) == n_spares
                          and len(live_members(st)) == len(workers) and min(m["step"] for m in training) >= n) \
                else None
        st = wait_until(lambda: at_step(KILL_AFTER_STEP), 300, "%d groups in the quorum past step %d, %d spare(s) "
                        "waiting" % (target, KILL_AFTER_STEP, n_spares), 0.05)
        spares = spare_groups(st)
        check(sorted(st["quorum"]["groups"] + spares) == groups, "every group trains or waits as a spare: quorum %s, "
              "spares %s, groups %s" % (st["quorum"]["groups"], spares, groups))
        print("before the kill: quorum %s, spare(s) %s (/status state \"spare\")" % (st["quorum"]["groups"], spares),
              flush=True)

        victim_group = sorted(st["quorum"]["groups"])[1]  # a training group
        victim = workers[(victim_group, 0)]
        run.kill(victim)
        rc = run.wait(victim, 60)
        check(rc == 137, "the SIGKILLed worker %s exited 137, got %d" % (victim.name, rc))
        print("killed %s (group %s) with SIGKILL" % (victim.name, victim_group), flush=True)

        def dropped():
            q = http_json(base + "/status")["quorum"]
            return q if victim_group not in q["groups"] else None
        q = wait_until(dropped, 30, "the coordinator dropping group %s" % victim_group, 0.05)
        print("group %s dropped: quorum %s at step %d" % (victim_group, q["groups"], q["step"]), flush=True)
        promoted = None
        if spares:
            def promotion():
                return [e for e in read_events(events_path) if e["type"] == "spare_promoted"
                        and e.get("replaced") == victim_group]
            promoted = wait_until(promotion, 60, "a spare promoted in group %s's place (spare_promoted)"
                                  % victim_group, 0.05)[0]
            check(promoted["group"] in spares, "the promoted group %s was a spare (%s)" % (promoted["group"], spares))
            print("spare %s promoted in %s's place (spare_promoted, first step %d)"
                  % (promoted["group"], victim_group, promoted["first_step"]), flush=True)

        # The Job controller: the failed pod's index gets a new pod (fresh
        # emptyDirs), once the old one is gone (podReplacementPolicy Failed).
        job = [j for j in jobs if j["metadata"]["labels"].get("phalanx.dev/group") == victim_group][0]
        check(job["spec"].get("podReplacementPolicy") == "Failed", "the Job replaces only failed pods")
        again = run.start(Pod(objs, job, 0, scratch, shared))
        workers[(victim_group, 0)] = again
        pods.append(again)
        if spares:
            # Its place is taken: it registers as the new spare.
            wait_until(lambda: victim_group in spare_groups(http_json(base + "/status")), 120,
                       "group %s back as a spare" % victim_group, 0.05)
            print("group %s is back, as a spare" % victim_group, flush=True)
        else:
            wait_until(lambda: victim_group in http_json(base + "/status")["quorum"]["groups"], 120,
                       "group %s back in the quorum" % victim_group, 0.05)
            print("group %s rejoined" % victim_group, flush=True)

        # Every worker killed once a checkpoint is on the claim's volume and
        # all of them are past it: only the volume holds the state now.
        ckpt_dir = shared.get("phalanx-checkpoints")
        check(ckpt_dir, "the workers mount the claim phalanx-checkpoints (their checkpoints must outlive the pod)")

        def saved_and_past():
            steps = saved_steps(ckpt_dir)
            st = http_json(base + "/status")
            training = training_members(st)
            return steps[-1] if steps and len(live_members(st)) == len(workers) and len(training) == target \
                and min(m["step"] for m in training) > steps[-1] else None
        first_saved = wait_until(saved_and_past, 600, "a checkpoint on the claim's volume and every worker past it",
                                 0.05)
        for key, p in sorted(workers.items()):
            run.kill(p)
        for (g, i), p in sorted(workers.items()):
            rc = run.wait(p, 60)
            check(rc == 137, "the SIGKILLed worker %s (group %s) exited 137, got %d" % (p.name, g, rc))
        saved = saved_steps(ckpt_dir)[-1]
        check(saved >= first_saved > 0, "the claim's volume holds a checkpoint after the kill (steps %s)"
              % saved_steps(ckpt_dir))
        print("killed every worker with SIGKILL past step %d; the newest checkpoint on the volume: step %d"
              % (first_saved, saved), flush=True)
        wait_until(lambda: not live_members(http_json(base + "/status")), 30,
                   "the coordinator seeing every worker lost", 0.05)
        before_restart = len(read_events(events_path))
        restarted = {}
        for (g, i) in sorted(workers):
            job = [j for j in jobs if j["metadata"]["labels"].get("phalanx.dev/group") == g][0]
            p = run.start(Pod(objs, job, i, scratch, shared))
            workers[(g, i)] = restarted[(g, i)] = p
            pods.append(p)
        print("started %d replacement pods on the same claim" % len(restarted), flush=True)

        for (g, i), p in sorted(workers.items()):
            rc = run.wait(p, 600)
            check(rc == 0, "worker %s (group %s) exited 0 at the end, got %d (log %s/%s.log)"
                  % (p.name, g, rc, scratch, p.name))
        print("every worker finished and exited 0", flush=True)
        evs = read_events(events_path)
        kinds = lambda t, **kv: [e for e in evs if e["type"] == t and all(e.get(a) == b for a, b in kv.items())]
        check(kinds("group_dropped", group=victim_group), "event group_dropped for %s" % victim_group)
        # Who healed after the kill: the spare that took the place, or
        # without spares the restarted group.
        healer = promoted["group"] if promoted else victim_group
        healed = kinds("heal_finished", group=healer) or kinds("heal_started", group=healer)
        check(healed, "%s %s healed from a peer (heal events: %s)"
              % ("the promoted spare" if promoted else "the restarted group", healer,
                 sorted({e["type"] for e in evs if e["type"].startswith("heal")})))
        if promoted:
            back = kinds("spare_registered", group=victim_group)
            check(back and back[-1]["seq"] > promoted["seq"], "the restarted %s registered as a spare after the "
                  "promotion (spare_registered: %s)" % (victim_group, back))
        sums, finished = set(), []
        for (g, i), p in sorted(workers.items()):
            with open(os.path.join(scratch, p.name + ".log")) as f:
                out = f.read()
            last = re.findall(r"^final group=\S+ steps=(\d+) .*checksum=(\w+)", out, re.M)
            if not last and "job_finished_elsewhere" in out:
                continue  # a spare to the end: it leaves once the others finished
            check(last and int(last[-1][0]) == steps, "worker %s printed its final line at step %d: %s"
                  % (p.name, steps, last))
            sums.add(last[-1][1])
            finished.append(g)
        check(len(finished) == target, "%d groups trained to the end, the %d spare(s) left without training once the "
              "job was done (job_finished_elsewhere): finished %s" % (target, n_spares, finished))
        check(len(sums) == 1, "every group ends with the same state checksum: %s" % sums)

        # The replacements restored the checkpoint saved last and trained on from it.
        for (g, i), p in sorted(restarted.items()):
            with open(os.path.join(scratch, p.name + ".log")) as f:
                out = f.read()
            got = [int(x) for x in re.findall(r"^event kind=checkpoint_restored group=%s step=(\d+) " % re.escape(g),
                                              out, re.M)]
            check(got == [saved], "replacement %s (group %s) restored step %d from the claim: its output says %s "
                  "(log %s/%s.log)" % (p.name, g, saved, got or "no checkpoint_restored", scratch, p.name))
            trained = [int(x) for x in re.findall(r"^progress step=(\d+) ", out, re.M)]
            check((trained and min(trained) > saved) or (not trained and g not in finished),
                  "replacement %s (group %s) trained only steps after %d, printed %s..." % (p.name, g, saved, trained[:3]))
        after = evs[before_restart:]
        restored = {e.get("group"): e.get("step") for e in after if e["type"] == "checkpoint_restored"}
        check(restored == {g: saved for g, _ in restarted}, "coordinator events: checkpoint_restored at step %d for "
              "every group, got %s" % (saved, restored))
        formed = [e for e in after if e["type"] == "quorum_formed"]
        check(formed and formed[0]["step"] == saved, "the first quorum after the restart formed at step %d, the "
              "checkpoint's: %s" % (saved, formed[:1]))
        print("replacements: every group restored step %d from the claim (worker output and checkpoint_restored "
              "events), the next quorum formed at step %d (groups %s), none trained a step at or below it"
              % (saved, saved, formed[0]["groups"]), flush=True)
        print("events: group_dropped for %s, %s; the job reached step %d (groups %s), spare(s) %s left at its end"
              % (victim_group, "spare_promoted and heal_finished for %s, spare_registered for %s" % (healer, victim_group)
                 if promoted else "heal for it", steps, " ".join(sorted(finished)),
                 " ".join(sorted(set(groups) - set(finished))) or "none"), flush=True)
    except Fail:
        print("logs and volumes in %s" % scratch, flush=True)
        for p in pods:
            try:
                with open(os.path.join(scratch, p.name + ".log")) as f:
                    print("--- %s (last lines)\n%s" % (p.name, "".join(f.readlines()[-15:])), flush=True)
            except OSError:
                pass
        raise
    finally:
        for p in pods:
            if p.proc and p.proc.poll() is None:
                if podman:
                    run.podman_cmd("stop", "-t", "5", p.name)
                else:
                    p.proc.terminate()
        for p in pods:
            if p.proc:
                try:
                    p.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.proc.kill()
                    p.proc.wait()
        run.cleanup()


if __name__ == "__main__":
    main(test)
