"""deploy/k8s as tests read it: the kustomization's resources, rendered as `kubectl kustomize` would for the
features it uses (a list of files and image names), and the pods' containers by name."""

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
KUSTOMIZATION: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())


def load(kustomization: dict[str, Any] = KUSTOMIZATION, directory: Path = K8S) -> list[dict[str, Any]]:
    """Every object of the kustomization's resources, images as written (`traincast`, `traincast-gpu`)."""
    objects: list[dict[str, Any]] = []
    for resource in kustomization["resources"]:
        objects += [doc for doc in yaml.safe_load_all((directory / resource).read_text()) if doc]
    return objects


@dataclass
class Container:
    """One container of a workload's pod template."""

    workload: dict[str, Any]
    pod: dict[str, Any]
    spec: dict[str, Any]
    init: bool

    @property
    def name(self) -> str:
        """The container's name."""
        return str(self.spec["name"])

    def env(self) -> dict[str, dict[str, Any]]:
        """Its env entries by name."""
        return {e["name"]: e for e in self.spec.get("env") or []}

    def literal_env(self) -> dict[str, str]:
        """Its env values written in the manifest (not those from Secrets)."""
        return {name: str(e["value"]) for name, e in self.env().items() if "value" in e}


def workloads(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(object, pod spec) of every object that runs pods."""
    for obj in objects:
        if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            yield obj, obj["spec"]["template"]["spec"]


def containers(objects: list[dict[str, Any]]) -> list[Container]:
    """Every container and init container of every workload."""
    found = []
    for obj, pod in workloads(objects):
        found += [Container(obj, pod, c, True) for c in pod.get("initContainers") or []]
        found += [Container(obj, pod, c, False) for c in pod.get("containers") or []]
    return found


def by_name(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    """The object of this kind and name, if any."""
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def config_map_env(objects: list[dict[str, Any]], container: Container) -> dict[str, str]:
    """The variables a container's envFrom ConfigMaps (defined in the manifests) give it."""
    env: dict[str, str] = {}
    for source in container.spec.get("envFrom") or []:
        ref = source.get("configMapRef")
        cm = by_name(objects, "ConfigMap", ref["name"]) if ref else None
        env |= {k: str(v) for k, v in ((cm or {}).get("data") or {}).items()}
    return env


# Breaking a copy of the manifests, for the tests that prove a check fails.
def spec(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The container spec of this name (to break in a copy)."""
    return next(c.spec for c in containers(objects) if c.name == name)


def pod(objects: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The pod spec holding the container of this name."""
    return next(c.pod for c in containers(objects) if c.name == name)


def set_env(objects: list[dict[str, Any]], name: str, variable: str, entry: dict[str, Any]) -> None:
    """Replace (or add) one env entry of a container."""
    env = [e for e in spec(objects, name).get("env") or [] if e["name"] != variable]
    spec(objects, name)["env"] = [*env, {"name": variable, **entry}]


def secret_ref(secret: str, key: str) -> dict[str, Any]:
    """An env entry's valueFrom of a Secret's key."""
    return {"valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
