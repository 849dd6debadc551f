"""deploy/k8s rendered by `kubectl kustomize` into Python objects, for the
manifest tests and for tests that run what the manifests say (read the
cpu-demo's commands, environment and volumes from here rather than copying
them):

    import k8s_render as k
    objs = k.render("cpu-demo")
    g0 = k.find(objs, "Job", "phalanx-worker-g0")[0]
    c = k.containers(g0)[0]
    c["command"], k.container_env(objs, c, {k.RANK_FIELD: "0", k.POD_IP_FIELD: "10.0.0.2"})

Targets are the names in TARGETS (or a folder holding a kustomization);
"cpu-demo+kafka" is the demo with the optional Kafka component."""
import base64
import os
import re
import shutil
import subprocess
import tempfile

import yaml

K8S_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "deploy", "k8s"))

TARGETS = {
    "base": "base",
    "worker-group": "base/worker-group",
    "cpu-demo": "overlays/cpu-demo",
    "gpu": "overlays/gpu",
    "cpu-demo+kafka": ("overlays/cpu-demo", "components/kafka"),
}
OVERLAYS = ("cpu-demo", "gpu", "cpu-demo+kafka")  # whole jobs; base and worker-group are parts

WORKLOADS = ("Deployment", "Job")

# The downward API fields the worker's environment takes its rank and
# data-plane address from (fill them in with container_env's `fields`).
RANK_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
POD_IP_FIELD = "status.podIP"


class RenderError(Exception):
    pass


def kubectl():
    """kubectl's path, or RenderError saying what to install."""
    path = shutil.which("kubectl")
    if not path:
        raise RenderError("kubectl not found on PATH: deploy/k8s is rendered with `kubectl kustomize` "
                          "(kubectl >= 1.27, kustomize v5); install it: https://kubernetes.io/docs/tasks/tools/")
    r = subprocess.run([path, "version", "--client"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    m = re.search(r"Kustomize Version: v(\d+)", r.stdout)
    if not m or int(m.group(1)) < 5:
        raise RenderError("%s has no kustomize v5 (kubectl >= 1.27 needed), `kubectl version --client` says: %s"
                          % (path, r.stdout.strip().replace("\n", "; ")))
    return path


def _kustomize(folder):
    r = subprocess.run([kubectl(), "kustomize", folder], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RenderError("kubectl kustomize %s failed (exit %d): %s" % (folder, r.returncode, r.stderr.strip()))
    return r.stdout


def render_yaml(target, k8s_dir=K8S_DIR):
    """The rendered YAML text of a target (see TARGETS) or of a folder."""
    spec = TARGETS.get(target, target)
    if isinstance(spec, str):
        return _kustomize(spec if os.path.isabs(spec) else os.path.join(k8s_dir, spec))
    # An overlay plus components: a throwaway kustomization naming both.
    # kustomize refuses absolute paths there, hence the relative ones.
    overlay, *components = spec
    with tempfile.TemporaryDirectory(prefix="phalanx-k8s-") as tmp:
        rel = lambda p: os.path.relpath(os.path.join(k8s_dir, p), tmp)
        with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
            f.write("resources:\n- %s\ncomponents:\n%s" % (rel(overlay), "".join("- %s\n" % rel(c) for c in components)))
        return _kustomize(tmp)


def load(text):
    return [o for o in yaml.safe_load_all(text) if o]


def render(target, k8s_dir=K8S_DIR):
    """The objects of a rendered target, as dicts, in kustomize's order."""
    return load(render_yaml(target, k8s_dir))


def ident(obj):
    """'Kind/name', how failures name an object."""
    return "%s/%s" % (obj.get("kind"), (obj.get("metadata") or {}).get("name"))


def find(objs, kind, name=None, labels=None):
    """Objects of a kind, with this name if given, whose labels include all
    of `labels` if given (e.g. {"app.kubernetes.io/component": "worker"})."""
    return [o for o in objs if o.get("kind") == kind and (name is None or o["metadata"].get("name") == name)
            and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in (labels or {}).items())]


def pod_template(obj):
    """The pod template of a Deployment or Job ({} for other kinds)."""
    return ((obj.get("spec") or {}).get("template") or {}) if obj.get("kind") in WORKLOADS else {}


def pod_spec(obj):
    return pod_template(obj).get("spec") or {}


def containers(obj):
    s = pod_spec(obj)
    return (s.get("initContainers") or []) + (s.get("containers") or [])


def container_env(objs, container, fields=None):
    """The environment a container starts with: its envFrom ConfigMaps, then
    its env (which wins). A value from the downward API is taken from
    `fields` ({fieldPath: value}) or left as None."""
    env = {}
    for src in container.get("envFrom") or []:
        ref = src.get("configMapRef")
        if ref:
            cms = find(objs, "ConfigMap", ref["name"])
            if not cms and not ref.get("optional"):
                raise KeyError("ConfigMap %s (envFrom of container %s) is not in the rendered objects"
                               % (ref["name"], container.get("name")))
            for cm in cms:
                env.update({(src.get("prefix") or "") + k: v for k, v in (cm.get("data") or {}).items()})
    for e in container.get("env") or []:
        if "valueFrom" in e:
            path = ((e["valueFrom"].get("fieldRef") or {}).get("fieldPath"))
            env[e["name"]] = (fields or {}).get(path)
        else:
            env[e["name"]] = e.get("value", "")
    return env


def secret_value(objs, name, key):
    """A Secret's value as text (data is base64, stringData is not)."""
    for s in find(objs, "Secret", name):
        if key in (s.get("stringData") or {}):
            return s["stringData"][key]
        if key in (s.get("data") or {}):
            return base64.b64decode(s["data"][key]).decode()
    raise KeyError("Secret %s has no key %s in the rendered objects" % (name, key))


if __name__ == "__main__":
    import sys
    for t in sys.argv[1:] or OVERLAYS:
        objs = render(t)
        print("%s: %s" % (t, ", ".join(ident(o) for o in objs)))
