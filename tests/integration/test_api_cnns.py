"""Registering custom CNNs over HTTP: ONNX and JSON accepted, bad uploads refused, nothing run."""

import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from shared.cnn import zoo as cnn_zoo
from shared.core.db import transaction
from tests.support.onnx_models import export, tutorial_export
from tests.support.stack import Stack, http

LAYERS = (
    b'{"image_size": 32, "layers": [{"in_channels": 3, "out_channels": 8, "input_size": 32, "kernel": 3,'
    b' "padding": 1, "count": 2}], "parameters": 1000}'
)


def register(stack: Stack, name: str, data: bytes, filename: str = "model.onnx") -> httpx.Response:
    """POST /v1/cnns as a multipart form."""
    return http.post(f"{stack.url}/v1/cnns", data={"name": name}, files={"file": (filename, data)})


def unique(prefix: str) -> str:
    """A CNN name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_register_onnx_and_describe(api_only: Stack) -> None:
    """An ONNX export registers, is listed, and is described like the model it came from."""
    name = unique("my-resnet")
    r = register(api_only, name, export("resnet18"))
    assert r.status_code == 201, r.text
    assert r.json()["source"] == "onnx" and r.json()["parameters"] == cnn_zoo.parameter_count("resnet18")
    listed = {c["name"]: c for c in http.get(f"{api_only.url}/v1/cnns").json()["cnns"]}
    assert listed[name]["source"] == "onnx"
    described = http.get(f"{api_only.url}/v1/cnns/{name}", params={"image_size": 160}).json()
    reference = cnn_zoo.conv_layers("resnet18", 160)
    assert described["conv_count"] == reference.total and described["unique_signatures"] == len(reference.signatures)
    assert sum(layer["count"] for layer in described["layers"]) == reference.total
    assert {layer["hash"] for layer in described["layers"]} == {s.hash for s in reference.signatures}
    assert described["workload"]["ops"]["batch_norm"]["count"] == 20
    again = register(api_only, name, export("resnet18"))
    assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"


def test_the_tutorials_export_registers_with_its_warning(api_only: Stack) -> None:
    """Batch fixed at 1, eval mode: registered and listed with a warning that says how to export for training."""
    name = unique("tutorial")
    r = register(api_only, name, tutorial_export("resnet18"))
    assert r.status_code == 201, r.text
    assert r.json()["image_size"] == 224 and "eval-mode export" in r.json()["warnings"][0]
    listed = {c["name"]: c for c in http.get(f"{api_only.url}/v1/cnns").json()["cnns"]}
    assert listed[name]["warnings"] == r.json()["warnings"]
    assert "warnings" not in listed.get("resnet18", {})


def test_register_json_layer_list(api_only: Stack) -> None:
    """A JSON layer list registers and is only usable at the size it describes."""
    name = unique("described")
    assert register(api_only, name, LAYERS, "layers.json").status_code == 201
    described = http.get(f"{api_only.url}/v1/cnns/{name}").json()
    assert described["image_size"] == 32 and described["conv_count"] == 2 and described["unique_signatures"] == 1
    wrong = http.get(f"{api_only.url}/v1/cnns/{name}", params={"image_size": 64})
    assert wrong.status_code == 422 and "described at 32 px" in wrong.json()["detail"]
    job = http.post(
        f"{api_only.url}/v1/jobs", json={"cnns": [name], "machines": ["local"], "batch_sizes": [1], "image_size": 64}
    )
    assert job.status_code == 422 and "described at 32 px" in job.json()["detail"]


def test_a_json_cnn_row_without_its_size_is_listed_without_one(api_only: Stack) -> None:
    """A JSON CNN row written outside the API with the column's default definition ({}) does not fail the listing."""
    name = unique("sizeless")
    with transaction() as cur:
        cur.execute("INSERT INTO cnns (name, source) VALUES (%s, 'json')", (name,))
    try:
        listed = http.get(f"{api_only.url}/v1/cnns")
        assert listed.status_code == 200, listed.text
        [row] = [c for c in listed.json()["cnns"] if c["name"] == name]
        assert row["source"] == "json" and "image_size" not in row
    finally:
        with transaction() as cur:
            cur.execute("DELETE FROM cnns WHERE name = %s", (name,))


def test_builtin_details_and_num_classes(api_only: Stack) -> None:
    """A built-in CNN is described at its usual size; num_classes reaches SqueezeNet's last conv."""
    resnet = http.get(f"{api_only.url}/v1/cnns/resnet50").json()
    assert resnet["image_size"] == 224 and resnet["conv_count"] == 53
    ten = http.get(f"{api_only.url}/v1/cnns/squeezenet1_1", params={"num_classes": 10}).json()
    assert ten["layers"][-1]["out_channels"] == 10
    assert http.get(f"{api_only.url}/v1/cnns/nope").status_code == 404


@pytest.mark.parametrize(
    ("name", "data", "status", "words"),
    [
        ("garbage", b"\x00\x01 definitely not a model", 422, "not an ONNX model"),
        ("bad-json", b'{"image_size": 32, "layers": []}', 422, "layers"),
        ("bad-json-2", b'{"image_size": 32,', 422, "invalid JSON layer list"),
        ("resnet18", LAYERS, 409, "built-in"),
        ("bad name!", LAYERS, 422, "name"),
        ("empty", b"", 422, "empty"),
    ],
)
def test_bad_uploads(api_only: Stack, name: str, data: bytes, status: int, words: str) -> None:
    """Each bad upload is a problem naming what is wrong, and registers nothing."""
    before = len(http.get(f"{api_only.url}/v1/cnns").json()["cnns"])
    r = register(api_only, name, data)
    assert r.status_code == status and r.headers["content-type"] == "application/problem+json"
    assert words in r.json()["detail"]
    assert len(http.get(f"{api_only.url}/v1/cnns").json()["cnns"]) == before


class _Trap:
    """Unpickling this would create a file: proof that no upload is ever unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_no_code_from_an_upload_runs(api_only: Stack, tmp_path: Path) -> None:
    """A pickle (what torch.save writes) is refused as not ONNX, and its payload never runs."""
    marker = tmp_path / "ran"
    r = register(api_only, unique("pickle"), pickle.dumps(_Trap(marker)), "model.pt")
    assert r.status_code == 422 and "not an ONNX model" in r.json()["detail"]
    assert not marker.exists()


@pytest.fixture(scope="module")
def small_limit_api(service_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """An API whose upload limit is 100 kB."""
    stack = Stack({**service_env, "MAX_UPLOAD_BYTES": "100000"}, tmp_path_factory.mktemp("small"))
    stack.start("api")
    stack.wait_ready()
    yield stack
    stack.stop("api")


def test_oversized_upload_is_413(small_limit_api: Stack) -> None:
    """Over the configured limit: 413 problem, nothing stored."""
    name = unique("too-big")
    r = register(small_limit_api, name, export("squeezenet1_1"))  # ~5 MB
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"
    assert "100000 bytes" in r.json()["detail"]
    assert http.get(f"{small_limit_api.url}/v1/cnns/{name}").status_code == 404
