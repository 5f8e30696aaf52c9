"""deploy/k8s checked against the code and docker-compose.yml, as tests/unit/test_compose.py checks compose."""

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from pydantic import ValidationError
from pydantic_settings import SettingsError

from api.main import app
from shared.core import logins
from shared.core.settings import Settings
from tests.support.k8skit import K8S, KUSTOMIZATION, Container, by_name, config_map_env, containers, load
from tests.unit.test_compose import COMPOSE, KIND_OF, ONE_SHOTS, SECRET_KEY, URL_PASSWORD, argv_of, seeded_machine_types

OBJECTS = load()
# Compose's services as containers here. Compose's CPU `agent` (AGENT_MACHINE_TYPE=local, the machine it runs on)
# is not deployed: on a cluster, `local` would be whatever node it landed on. gpu-agent runs its command.
CONTAINER_OF = {s: s for s in ("migrate", "db-logins", "api", "worker", "beat", "gpu-agent", "fleet")}
IMAGE_OF = {"gpu-agent": "traincast-gpu"}  # the Dockerfile's CUDA build; every other process: traincast
SINGLETONS = ("beat", "fleet")
# Not Settings fields, read by what the processes run on: shared/core/secrets.py and boto3 (fleet.env.example).
DOCUMENTED_ENV = {"TRAINCAST_SSM_PATH", "AWS_REGION"}
CA_VARIABLES = ("DATABASE_CA_FILE", "REDIS_CA_FILE")
GPU = "nvidia.com/gpu"
SEED_SQL = (K8S.parent.parent / "migrations" / "0002_seed_machine_types.sql").read_text()


def compose_kind(service: str) -> str:
    """The Secret suffix a compose service's credentials come from: its kind's, or the owner's for one-shots."""
    return "owner" if service in ONE_SHOTS else KIND_OF[service]


def service_of(container: Container) -> str | None:
    """The compose service a container runs, if any."""
    return next((s for s, c in CONTAINER_OF.items() if c == container.name), None)


def grace_seconds(value: str) -> int:
    """Compose's stop_grace_period ("10m", "90s") in seconds."""
    number, unit = re.fullmatch(r"(\d+)([sm])", value).groups()  # type: ignore[union-attr]
    return int(number) * (60 if unit == "m" else 1)


def command_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Processes compose runs that are missing here, run otherwise, or with another image; unknown ones."""
    found = containers(objects)
    problems = [f"{c.name}: runs no process of docker-compose.yml" for c in found if service_of(c) is None]
    for service, name in CONTAINER_OF.items():
        matches = [c for c in found if c.name == name]
        if len(matches) != 1:
            problems.append(f"{service}: {len(matches)} containers named {name!r}, not 1")
            continue
        spec = matches[0].spec
        if spec.get("command") != argv_of(COMPOSE["services"][service]) or spec.get("args"):
            problems.append(f"{service}: command {spec.get('command')} {spec.get('args') or ''} is not compose's")
        if spec.get("image") != IMAGE_OF.get(service, "traincast"):
            problems.append(f"{service}: image {spec.get('image')!r} is not {IMAGE_OF.get(service, 'traincast')!r}")
    if argv_of(COMPOSE["services"]["agent"]) != argv_of(COMPOSE["services"]["gpu-agent"]):
        problems.append("compose's agent runs another command than gpu-agent: deploy it too")
    images = {i["name"] for i in KUSTOMIZATION["images"]}
    problems += [
        f"{c.name}: kustomization sets no image {c.spec.get('image')!r}"
        for c in found
        if c.spec.get("image") not in images
    ]
    return problems


def credential_problems(objects: list[dict[str, Any]]) -> list[str]:
    """URLs not from the process kind's own Secret, the owner's outside the Job, passwords written here."""
    problems = [f"{o['metadata']['name']}: a Secret in the manifests" for o in objects if o["kind"] == "Secret"]
    for c in containers(objects):
        service = service_of(c)
        if service is None:
            continue
        env = c.env()
        for key in ("DATABASE_URL", "REDIS_URL"):
            ref = (env.get(key, {}).get("valueFrom") or {}).get("secretKeyRef") or {}
            want = f"traincast-{compose_kind(service)}"
            if ref.get("name") != want or ref.get("key") != key:
                problems.append(f"{c.name}: {key} is not key {key} of Secret {want}")
        for name, e in env.items():
            ref = (e.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref.get("name") == "traincast-logins" and service != "db-logins":
                problems.append(f"{c.name}: reads the logins' passwords ({name})")
            if "value" in e and (SECRET_KEY.search(name) or URL_PASSWORD.match(str(e["value"]))):
                problems.append(f"{c.name}: {name} written in the manifest")
        if any("secretRef" in source for source in c.spec.get("envFrom") or []):
            problems.append(f"{c.name}: envFrom a Secret hides which credentials it gets")
    return problems


def singleton_problems(objects: list[dict[str, Any]]) -> list[str]:
    """beat or the fleet controller that could run twice at once; workers that cannot scale."""
    problems = []
    scaled = {o["spec"]["scaleTargetRef"]["name"]: o for o in objects if o["kind"] == "HorizontalPodAutoscaler"}
    for name in SINGLETONS:
        d = by_name(objects, "Deployment", name)
        if d is None or d["spec"].get("replicas") != 1 or (d["spec"].get("strategy") or {}).get("type") != "Recreate":
            problems.append(f"{name}: not a Deployment of 1 replica with strategy Recreate")
        if name in scaled:
            problems.append(f"{name}: an autoscaler would run more than one")
    if "worker" not in scaled or scaled["worker"]["spec"]["maxReplicas"] < 2:
        problems.append("worker: no autoscaler that can add workers")
    return problems


def gpu_problems(objects: list[dict[str, Any]]) -> list[str]:
    """GPU agents without a GPU, off GPU nodes, with a type nobody seeded or mapped, or no time to finish."""
    problems = []
    job = next(c for c in containers(objects) if c.name == "db-logins")
    mapped = logins.LoginSettings(agent_db_machine_types=job.literal_env().get("AGENT_DB_MACHINE_TYPES", ""))
    agents = [c for c in containers(objects) if c.name == "gpu-agent"]
    for c in agents:
        where = f"{c.workload['metadata']['name']}"
        if int((c.spec.get("resources") or {}).get("limits", {}).get(GPU, 0)) < 1:
            problems.append(f"{where}: no {GPU} limit")
        tolerated = [
            t
            for t in c.pod.get("tolerations") or []
            if t.get("operator") == "Exists" and t.get("key") in (GPU, None) and t.get("effect") in ("NoSchedule", None)
        ]
        if not tolerated:
            problems.append(f"{where}: does not tolerate the {GPU} NoSchedule taint of GPU nodes")
        machine_type = c.literal_env().get("AGENT_MACHINE_TYPE", "")
        if machine_type not in seeded_machine_types(SEED_SQL):
            problems.append(f"{where}: machine type {machine_type!r} is not seeded")
        if machine_type not in mapped.machine_types():
            problems.append(
                f"{where}: {machine_type!r} is not in the Job's AGENT_DB_MACHINE_TYPES: its rows would be refused"
            )
        if (c.pod.get("nodeSelector") or {}).get("node.kubernetes.io/instance-type") != machine_type:
            problems.append(f"{where}: not pinned to nodes of instance type {machine_type!r}")
        if c.literal_env().get("AGENT_DEVICE") != "cuda":
            problems.append(f"{where}: AGENT_DEVICE is not cuda")
        grace = grace_seconds(COMPOSE["services"]["gpu-agent"]["stop_grace_period"])
        if c.pod.get("terminationGracePeriodSeconds", 30) < grace:
            problems.append(f"{where}: under {grace} s to finish its measurement on SIGTERM")
    return problems if agents else ["no GPU agent"]


def resolve_port(port: int | str, container: dict[str, Any]) -> int | None:
    """A probe's or Service's port, by number or by the container port's name."""
    if isinstance(port, int):
        return port
    return next((p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port), None)


def probe_problems(objects: list[dict[str, Any]]) -> list[str]:
    """API probes on routes the API does not serve, or on a port uvicorn does not listen on."""
    api = next(c for c in containers(objects) if c.name == "api")
    argv = api.spec["command"]
    port = int(argv[argv.index("--port") + 1])
    routes = {path for path, operations in app.openapi()["paths"].items() if "get" in operations}
    problems = []
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = (api.spec.get(probe) or {}).get("httpGet") or {}
        if get.get("path") != path or path not in routes:
            problems.append(f"api: {probe} is not GET {path}, a route api/routers/health.py serves")
        if resolve_port(get.get("port", 0), api.spec) != port:
            problems.append(f"api: {probe} port is not uvicorn's {port}")
    service = by_name(objects, "Service", "api")
    labels = api.workload["spec"]["template"]["metadata"]["labels"]
    if service is None or not set(service["spec"]["selector"].items()) <= set(labels.items()):
        problems.append("api: no Service selecting its pods")
    elif any(resolve_port(p["targetPort"], api.spec) != port for p in service["spec"]["ports"]):
        problems.append(f"api: the Service's targetPort is not {port}")
    return problems


def env_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Variables no process reads, and written values Settings would refuse."""
    problems = []
    for c in containers(objects):
        known = set(Settings.model_fields) | ({*logins.LoginSettings.model_fields} if c.name == "db-logins" else set())
        written = config_map_env(objects, c) | c.literal_env()
        for name in [*c.env(), *written]:
            if name.lower() not in known and name not in DOCUMENTED_ENV:
                problems.append(f"{c.name}: {name} is not a Settings field")
        try:
            # As the process reads them: from its environment (lists and maps as JSON), nothing else.
            with mock.patch.dict(os.environ, written, clear=True):
                Settings()
        except (ValidationError, SettingsError) as exc:
            problems.append(f"{c.name}: invalid settings: {exc}")
    return problems


def security_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Pods that may run as root, escalate, write their image, go unbounded, or hold a token they need not."""
    problems = []
    for c in containers(objects):
        pod, sc, res = (
            c.pod.get("securityContext") or {},
            c.spec.get("securityContext") or {},
            c.spec.get("resources") or {},
        )
        if pod.get("runAsNonRoot") is not True or (pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problems.append(f"{c.name}: pod not runAsNonRoot with the RuntimeDefault seccomp profile")
        if sc.get("allowPrivilegeEscalation") is not False or sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{c.name}: may escalate privileges or write its root filesystem")
        if (sc.get("capabilities") or {}).get("drop") != ["ALL"]:
            problems.append(f"{c.name}: keeps capabilities")
        if not {"cpu", "memory"} <= set(res.get("requests") or {}) or "memory" not in (res.get("limits") or {}):
            problems.append(f"{c.name}: no CPU and memory requests and memory limit")
        if (
            c.pod.get("serviceAccountName") != "traincast-fleet"
            and c.pod.get("automountServiceAccountToken") is not False
        ):
            problems.append(f"{c.name}: mounts a Kubernetes API token it never uses")
        mounts = {m["mountPath"]: m["name"] for m in c.spec.get("volumeMounts") or []}
        volumes = {v["name"]: v for v in c.pod.get("volumes") or []}
        argv = c.spec.get("command") or []
        writes = [str(Path(argv[argv.index("--schedule") + 1]).parent)] if "--schedule" in argv else []
        for path in [*writes, "/tmp"]:
            if "emptyDir" not in volumes.get(mounts.get(path, ""), {}):
                problems.append(f"{c.name}: {path} is not a writable emptyDir on a read-only root filesystem")
        for variable in CA_VARIABLES:
            ca_file = Path(c.literal_env().get(variable, "/"))
            volume = volumes.get(mounts.get(str(ca_file.parent), ""), {})
            source = (volume.get("configMap") or {}).get("name") or (volume.get("secret") or {}).get("secretName")
            if source != "traincast-ca":
                problems.append(f"{c.name}: {variable} is not a file of the traincast-ca ConfigMap")
    return problems


CHECKS: dict[str, Callable[[list[dict[str, Any]]], list[str]]] = {
    "command": command_problems,
    "credentials": credential_problems,
    "singletons": singleton_problems,
    "gpu": gpu_problems,
    "probes": probe_problems,
    "env": env_problems,
    "security": security_problems,
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_manifests_match_code(check: str) -> None:
    """The real manifests pass every check."""
    assert CHECKS[check](OBJECTS) == []


def test_kustomization_applies_every_manifest() -> None:
    """Every manifest in deploy/k8s is a resource of the kustomization, and every resource exists."""
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(KUSTOMIZATION["resources"]) == files
    assert {o["metadata"].get("namespace", o["metadata"]["name"]) for o in OBJECTS} == {"traincast"}
