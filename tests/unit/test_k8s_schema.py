"""deploy/k8s against Kubernetes's API schemas (kubernetes-validate), as scripts/lint.sh checks it."""

import copy
import re
from typing import Any

import kubernetes_validate
import pytest

from tests.support.k8skit import ROOT, load

OBJECTS = load()
LINT = (ROOT / "scripts" / "lint.sh").read_text()
# The oldest Kubernetes docs/DEPLOY.md supports.
VERSION = "1.30.0"


def schema_problems(objects: list[dict[str, Any]]) -> list[str]:
    """Objects the pinned Kubernetes version's API would refuse, unknown fields included."""
    problems = []
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    return problems


def test_lint_validates_against_the_same_version() -> None:
    """scripts/lint.sh runs the validator, strict, at this version, on every manifest."""
    command = re.search(r"kubernetes-validate\" (.*)", LINT)
    assert command and "--strict" in command.group(1) and f"--kubernetes-version {VERSION}" in command.group(1)


def test_manifests_are_valid_kubernetes() -> None:
    """Every object is valid for the pinned version."""
    assert len(OBJECTS) > 10
    assert schema_problems(OBJECTS) == []


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("Deployment", ("spec", "replica"), 1),
        ("Deployment", ("spec", "replicas"), "one"),
        ("Job", ("spec", "template", "spec", "restartPolicy"), ["Never"]),
        ("NetworkPolicy", ("spec", "podSelector"), "all"),
    ],
)
def test_invalid_objects_are_rejected(kind: str, path: tuple[str, ...], value: Any) -> None:
    """A misspelt field or a wrong type fails the schema check."""
    broken = copy.deepcopy(next(o for o in OBJECTS if o["kind"] == kind))
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert schema_problems([broken]) != []
