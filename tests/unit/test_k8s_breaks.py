"""Every check of tests/unit/test_k8s.py fails on a copy of the manifests broken the way it guards against."""

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.k8skit import by_name, pod, secret_ref, set_env, spec
from tests.unit.test_k8s import CHECKS, GPU, OBJECTS


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The object of this kind and name, which the manifests must have (to break in a copy)."""
    found = by_name(objects, kind, name)
    assert found is not None, f"no {kind} {name} in the manifests"
    return found


BREAKS: list[tuple[str, Callable[[list[dict[str, Any]]], None]]] = [
    ("command", lambda o: spec(o, "worker").update(command=["celery", "-A", "worker.app", "worker", "-Q", "bench"])),
    ("command", lambda o: spec(o, "beat").update(args=["--max-interval", "5"])),
    ("command", lambda o: spec(o, "gpu-agent").update(image="traincast")),
    ("command", lambda o: pod(o, "migrate").update(initContainers=[])),
    ("command", lambda o: spec(o, "api").update(name="web")),
    ("credentials", lambda o: set_env(o, "api", "DATABASE_URL", secret_ref("traincast-owner", "DATABASE_URL"))),
    ("credentials", lambda o: set_env(o, "gpu-agent", "REDIS_URL", secret_ref("traincast-worker", "REDIS_URL"))),
    (
        "credentials",
        lambda o: set_env(o, "worker", "REDIS_URL", {"value": "rediss://traincast-worker:pw@redis:6379/0"}),
    ),
    (
        "credentials",
        lambda o: set_env(o, "fleet", "AGENT_DB_PASSWORD", secret_ref("traincast-logins", "AGENT_DB_PASSWORD")),
    ),
    ("credentials", lambda o: set_env(o, "migrate", "DATABASE_URL", secret_ref("traincast-api", "DATABASE_URL"))),
    ("credentials", lambda o: o.append({"kind": "Secret", "metadata": {"name": "traincast-api"}, "stringData": {}})),
    ("credentials", lambda o: spec(o, "api").update(envFrom=[{"secretRef": {"name": "traincast-owner"}}])),
    ("singletons", lambda o: named(o, "Deployment", "beat")["spec"].update(replicas=2)),
    ("singletons", lambda o: named(o, "Deployment", "fleet")["spec"].pop("strategy")),
    (
        "singletons",
        lambda o: named(o, "HorizontalPodAutoscaler", "worker")["spec"]["scaleTargetRef"].update(name="beat"),
    ),
    ("gpu", lambda o: spec(o, "gpu-agent")["resources"]["limits"].pop(GPU)),
    ("gpu", lambda o: pod(o, "gpu-agent").update(tolerations=[{"key": "dedicated", "operator": "Exists"}])),
    ("gpu", lambda o: pod(o, "gpu-agent").update(terminationGracePeriodSeconds=30)),
    ("gpu", lambda o: pod(o, "gpu-agent").pop("nodeSelector")),
    ("gpu", lambda o: set_env(o, "gpu-agent", "AGENT_MACHINE_TYPE", {"value": "g9.mega"})),
    ("gpu", lambda o: set_env(o, "db-logins", "AGENT_DB_MACHINE_TYPES", {"value": "local"})),
    ("probes", lambda o: spec(o, "api")["readinessProbe"]["httpGet"].update(path="/ready")),
    ("probes", lambda o: spec(o, "api")["livenessProbe"]["httpGet"].update(port=8080)),
    ("probes", lambda o: named(o, "Service", "api")["spec"]["ports"][0].update(targetPort=80)),
    ("env", lambda o: set_env(o, "worker", "CELERY_CONCURRENCY", {"value": "2"})),
    ("env", lambda o: set_env(o, "api", "API_DB_PASSWORD", secret_ref("traincast-logins", "API_DB_PASSWORD"))),
    ("env", lambda o: named(o, "ConfigMap", "traincast-fleet")["data"].update(FLEET_SUBNETS="subnet-a")),
    ("env", lambda o: named(o, "ConfigMap", "traincast-fleet")["data"].update(FLEET_AMIS="ami-1")),
    ("security", lambda o: spec(o, "gpu-agent")["securityContext"].update(readOnlyRootFilesystem=False)),
    ("security", lambda o: pod(o, "api")["securityContext"].pop("runAsNonRoot")),
    ("security", lambda o: spec(o, "worker")["resources"].pop("limits")),
    ("security", lambda o: pod(o, "worker").pop("automountServiceAccountToken")),
    ("security", lambda o: spec(o, "beat").update(volumeMounts=[])),
    ("security", lambda o: set_env(o, "fleet", "DATABASE_CA_FILE", {"value": "/etc/ssl/ca.pem"})),
]


@pytest.mark.parametrize(("check", "breaking"), BREAKS)
def test_broken_manifests_are_rejected(check: str, breaking: Callable[[list[dict[str, Any]]], None]) -> None:
    """A wrong command, credential, replica count, GPU setting, probe, variable or security setting fails its check."""
    broken = copy.deepcopy(OBJECTS)
    breaking(broken)
    assert CHECKS[check](broken) != []
