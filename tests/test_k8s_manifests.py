"""Kubernetes manifests a cluster accepts: the kustomize base and the example overlay are rendered,
every object is validated offline against the Kubernetes OpenAPI schemas (kubernetes-validate ships
them: no network), the shipper's RBAC is read-only, and the references between objects resolve.

Rendering: `kubectl kustomize` when kubectl is installed; otherwise (and always, compared with
kubectl's output when it is there) the small renderer below, which implements the kustomize
features these kustomizations use: resources (files and a base directory), namespace, labels
without selectors, images, and JSON6902 patches with a kind/name target.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
K8S = ROOT / "deploy" / "k8s"
BASE = K8S / "base"
OVERLAY = K8S / "overlays" / "example"
EXAMPLES = K8S / "examples"  # one example per live source (GPU DaemonSet, sidecar Job, pod watcher)
KUSTOMIZATIONS = {"base": BASE, "overlay-example": OVERLAY}
# every kustomization rendered and validated against the OpenAPI schemas
RENDERED = {**KUSTOMIZATIONS, "examples": EXAMPLES}
# oldest and newest Kubernetes minor the manifests are checked against (schemas bundled by kubernetes-validate)
K8S_VERSIONS = ("1.29.0", "1.37.0")
READ_ONLY_VERBS = {"get", "list", "watch"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume",
                  "StorageClass", "PriorityClass"}


# ---------------------------------------------------------------------------------------------- rendering
def _pointer(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def apply_json6902(doc: dict, ops: list[dict]) -> None:
    for op in ops:
        *parents, last = _pointer(op["path"])
        node: Any = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op["op"] not in ("add", "replace", "remove"):
            raise NotImplementedError(op["op"])
        if isinstance(node, list):
            idx = len(node) if last == "-" else int(last)
            if op["op"] == "add":
                node.insert(idx, copy.deepcopy(op["value"]))
            elif op["op"] == "replace":
                node[idx] = copy.deepcopy(op["value"])
            else:
                del node[idx]
        else:
            if op["op"] == "replace" and last not in node:
                raise KeyError(f"replace of missing {op['path']}")
            if op["op"] == "remove":
                del node[last]
            else:
                node[last] = copy.deepcopy(op["value"])


def _containers(doc: dict) -> list[dict]:
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", {}) if "template" in spec else spec
    return list(pod.get("containers", [])) + list(pod.get("initContainers", []))


def render(directory: Path) -> list[dict]:
    kust = yaml.safe_load((directory / "kustomization.yaml").read_text())
    docs: list[dict] = []
    for res in kust.get("resources", []):
        path = (directory / res).resolve()
        if path.is_dir():
            docs.extend(render(path))
        else:
            docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    if "namespace" in kust:
        for d in docs:
            if d["kind"] not in CLUSTER_SCOPED:
                d["metadata"]["namespace"] = kust["namespace"]
            if d["kind"] in ("RoleBinding", "ClusterRoleBinding"):
                for s in d.get("subjects", []):
                    if s.get("kind") == "ServiceAccount":
                        s["namespace"] = kust["namespace"]
    for label in kust.get("labels", []):
        assert not label.get("includeSelectors", False), "renderer supports labels without selectors only"
        for d in docs:
            d["metadata"].setdefault("labels", {}).update(label["pairs"])
            if label.get("includeTemplates") and "template" in d.get("spec", {}):
                d["spec"]["template"]["metadata"].setdefault("labels", {}).update(label["pairs"])
    for image in kust.get("images", []):
        for d in docs:
            for c in _containers(d):
                name, _, tag = c["image"].partition(":")
                if name == image["name"]:
                    c["image"] = image.get("newName", name) + ":" + str(image.get("newTag", tag or "latest"))
    for patch in kust.get("patches", []):
        target = patch["target"]
        hits = [d for d in docs if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]]
        assert len(hits) == 1, f"patch target {target} matched {len(hits)} objects"
        apply_json6902(hits[0], yaml.safe_load(patch["patch"]))
    return docs


def kubectl_render(directory: Path) -> list[dict]:
    proc = subprocess.run(["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def rendered(name: str) -> list[dict]:
    return render(RENDERED[name])


def key(d: dict) -> tuple[str, str, str]:
    return (d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])


# ---------------------------------------------------------------------------------------------- tests
def test_every_base_file_is_listed_in_the_kustomization() -> None:
    kust = yaml.safe_load((BASE / "kustomization.yaml").read_text())
    files = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert files == set(kust["resources"]), files ^ set(kust["resources"])


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed: the Python renderer is used alone")
@pytest.mark.parametrize("name", sorted(RENDERED))
def test_python_renderer_matches_kubectl_kustomize(name: str) -> None:
    ours = {key(d): d for d in rendered(name)}
    theirs = {key(d): d for d in kubectl_render(RENDERED[name])}
    assert set(ours) == set(theirs)
    for k in ours:
        assert ours[k] == theirs[k], k


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(RENDERED))
def test_every_object_validates_against_the_kubernetes_openapi_schema(name: str, version: str) -> None:
    import kubernetes_validate

    docs = rendered(name)
    if shutil.which("kubectl"):
        docs += kubectl_render(RENDERED[name])
    errors = []
    for d in docs:
        try:
            kubernetes_validate.validate(d, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{key(d)}: {exc.message} at {list(exc.path)}")
    assert not errors, "\n".join(errors)


def test_the_validator_rejects_what_a_cluster_would_reject() -> None:
    """The schema check is real: a misspelt field and a wrong type both fail, offline."""
    import kubernetes_validate

    deployment = next(d for d in rendered("base") if d["kind"] == "Deployment")
    kubernetes_validate.validate(deployment, K8S_VERSIONS[-1], strict=True)
    typo = copy.deepcopy(deployment)
    typo["spec"]["replica"] = 3
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "three"
    for bad in (typo, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)


def write_verbs(docs: list[dict]) -> list[str]:
    """Every RBAC rule that grants more than get/list/watch, or uses a wildcard."""
    bad = []
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        for rule in d.get("rules", []):
            verbs = set(rule.get("verbs", []))
            wild = [f for f in ("apiGroups", "resources", "verbs") if "*" in rule.get(f, [])]
            if verbs - READ_ONLY_VERBS or wild or not verbs:
                bad.append(f"{key(d)}: verbs={sorted(verbs)} wildcards={wild}")
    return bad


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_shipper_rbac_is_read_only_pods(name: str) -> None:
    docs = rendered(name)
    assert write_verbs(docs) == []
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert [r["kind"] for r in roles] == ["Role"], "namespaced read access only, no ClusterRole"
    (role,) = roles
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    (subject,) = binding["subjects"]
    shipper = next(d for d in docs if d["kind"] == "DaemonSet")
    pod = shipper["spec"]["template"]["spec"]
    assert subject == {"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                       "namespace": shipper["metadata"]["namespace"]}
    account = next(d for d in docs if d["kind"] == "ServiceAccount" and d["metadata"]["name"] == subject["name"])
    assert account.get("automountServiceAccountToken") is True  # the shipper calls the API
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # the shipper polls the namespace the Role grants
    assert env["TRAINING_NAMESPACE"] == role["metadata"]["namespace"]
    assert "--k8s-namespace=$(TRAINING_NAMESPACE)" in pod["containers"][0]["args"]
    others = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]
    for d in others:  # nothing else runs with the shipper's token
        assert d["spec"]["template"]["spec"]["serviceAccountName"] != subject["name"], key(d)


@pytest.mark.parametrize("verb", ["create", "update", "patch", "delete", "deletecollection", "*", "escalate"])
def test_rbac_check_fails_on_any_other_verb(verb: str) -> None:
    docs = copy.deepcopy(rendered("base"))
    role = next(d for d in docs if d["kind"] == "Role")
    role["rules"][0]["verbs"].append(verb)
    assert write_verbs(docs), verb
    wildcard = copy.deepcopy(rendered("base"))
    next(d for d in wildcard if d["kind"] == "Role")["rules"][0]["resources"] = ["*"]
    assert write_verbs(wildcard)


@pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
def test_references_between_objects_resolve(name: str) -> None:
    docs = rendered(name)
    by_kind: dict[str, dict[str, dict]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    ns = by_kind["Namespace"]
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job")]
    assert {d["kind"] for d in workloads} == {"Deployment", "StatefulSet", "DaemonSet", "Job"}
    config = by_kind["ConfigMap"]["rlhealth-config"]["data"]
    for w in workloads:
        assert w["metadata"]["namespace"] in ns
        pod = w["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in by_kind["ServiceAccount"], key(w)
        labels = w["spec"]["template"]["metadata"]["labels"]
        if "selector" in w["spec"] and w["kind"] != "Job":
            assert w["spec"]["selector"]["matchLabels"].items() <= labels.items(), key(w)
        for c in pod["containers"]:
            env = {e["name"] for e in c.get("env", [])}
            for ref in c.get("envFrom", []):
                assert ref["configMapRef"]["name"] in by_kind["ConfigMap"], key(w)
                env |= set(config)
            for arg in c.get("args", []):
                for var in re.findall(r"\$\((\w+)\)", arg):
                    assert var in env, f"{key(w)}: $({var}) is not defined"
            for vm in c.get("volumeMounts", []):
                names = {v["name"] for v in pod.get("volumes", [])} | {
                    t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
                assert vm["name"] in names, key(w)
    # the StatefulSet's governing Service exists, is headless and selects its pods
    sts = by_kind["StatefulSet"]["rlhealth-evidence"]
    svc = by_kind["Service"][sts["spec"]["serviceName"]]
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    # the metrics Service selects the workers and names their port
    metrics = by_kind["Service"]["rlhealth-worker-metrics"]
    worker = by_kind["Deployment"]["rlhealth-worker"]
    assert metrics["spec"]["selector"].items() <= worker["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in worker["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
    assert {p["targetPort"] for p in metrics["spec"]["ports"]} <= ports
    # the workers do not create topics: the Job does, with the same configuration
    assert "--no-create-topics" in worker["spec"]["template"]["spec"]["containers"][0]["args"]
    job = by_kind["Job"]["rlhealth-topics"]
    assert job["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["topics", "create"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] in ("OnFailure", "Never")


def test_overlay_changes_what_an_overlay_must() -> None:
    base = {key(d): d for d in rendered("base")}
    overlay = {key(d): d for d in rendered("overlay-example")}
    ship = next(d for d in overlay.values() if d["kind"] == "DaemonSet")
    env = {e["name"]: e.get("value") for e in ship["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "set-me-in-an-overlay" not in env.values()
    assert all(not str(c["image"]).startswith("ghcr.io/example/") for d in overlay.values() for c in _containers(d))
    role = next(d for d in overlay.values() if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "rl-training" != next(
        d for d in base.values() if d["kind"] == "Role")["metadata"]["namespace"]
    config = next(d for d in overlay.values() if d["kind"] == "ConfigMap")["data"]
    assert config["RLHEALTH_KAFKA_BOOTSTRAP"] != "kafka.kafka.svc:9092"


# ---------------------------------------------------------------------------------------------- source examples
def _workload(docs: list[dict], kind: str, name: str) -> tuple[dict, dict]:
    (w,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return w, w["spec"]["template"]["spec"]


def _ship_args(container: dict) -> list[str]:
    assert container["args"][0] == "ship", container["name"]
    return container["args"]


def test_every_example_file_is_listed_and_every_source_has_one() -> None:
    kust = yaml.safe_load((EXAMPLES / "kustomization.yaml").read_text())
    files = {p.name for p in EXAMPLES.glob("*.yaml")} - {"kustomization.yaml"}
    assert files == set(kust["resources"]), files ^ set(kust["resources"])
    docs = rendered("examples")
    gpu, gpu_pod = _workload(docs, "DaemonSet", "rlhealth-gpu-shipper")
    assert "--gpu=nvml" in _ship_args(gpu_pod["containers"][0])
    env = {e["name"]: e.get("value") for e in gpu_pod["containers"][0]["env"]}
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility" and env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert not any("resources" in c and "nvidia.com/gpu" in str(c["resources"]) for c in gpu_pod["containers"]), \
        "a monitor must not allocate the GPUs it watches"
    _job, job_pod = _workload(docs, "Job", "rl-trainer-example")
    (sidecar,) = job_pod["initContainers"]
    assert sidecar["restartPolicy"] == "Always"  # a native sidecar: stopped after the trainer, drained on SIGTERM
    assert _ship_args(sidecar)[1] == "/job"
    (job_mount,) = [m for m in sidecar["volumeMounts"] if m["name"] == "job"]
    assert job_mount["readOnly"] is True  # the shipper never writes into the job's folder
    _w, watch_pod = _workload(docs, "Deployment", "rlhealth-pod-watcher")
    args = _ship_args(watch_pod["containers"][0])
    assert "--k8s-namespace=$(TRAINING_NAMESPACE)" in args and "--k8s-selector=$(POD_SELECTOR)" in args
    assert not any(a.startswith("--k8s-list") for a in args)  # the watch, not the list poll


def test_examples_rbac_is_read_only_and_bound_to_the_watcher_only() -> None:
    docs = rendered("examples")
    assert write_verbs(docs) == []
    (role,) = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    assert role["kind"] == "Role"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    (subject,) = binding["subjects"]
    for d in docs:
        if d["kind"] in ("Deployment", "DaemonSet", "Job", "StatefulSet"):
            pod = d["spec"]["template"]["spec"]
            if pod["serviceAccountName"] == subject["name"]:
                assert d["metadata"]["name"] == "rlhealth-pod-watcher"
            else:  # nothing else mounts a token
                assert pod.get("automountServiceAccountToken") is False, key(d)


def test_examples_reference_only_what_exists() -> None:
    docs = rendered("examples")
    base = {(d["kind"], d["metadata"]["name"]): d for d in rendered("base")}
    config = base[("ConfigMap", "rlhealth-config")]["data"]
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"} | {
        n for k, n in base if k == "ServiceAccount"}
    for w in docs:
        if w["kind"] not in ("Deployment", "DaemonSet", "Job", "StatefulSet"):
            continue
        pod = w["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] in accounts, key(w)
        assert w["spec"].get("selector", {}).get("matchLabels", {}).items() <= \
            w["spec"]["template"]["metadata"]["labels"].items(), key(w)
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"] + pod.get("initContainers", []):
            env = {e["name"] for e in c.get("env", [])}
            for ref in c.get("envFrom", []):
                assert ref["configMapRef"]["name"] == "rlhealth-config", key(w)
                env |= set(config)
            for arg in c.get("args", []) + c.get("command", []):
                for var in re.findall(r"\$\((\w+)\)", arg):
                    assert var in env, f"{key(w)} {c['name']}: $({var}) is not defined"
            for vm in c.get("volumeMounts", []):
                assert vm["name"] in volumes, key(w)
