"""Machine types over HTTP: GPU types of three clouds with their sources, and your own GPUs by their specs."""

from typing import Any

import pytest

from shared import machine_types
from shared.core.db import transaction
from tests.integration.test_reference_jobs import OWN_GPU
from tests.support.stack import Stack, http


def registered_names() -> list[str]:
    """Machine types users registered."""
    with transaction() as cur:
        cur.execute("SELECT name FROM machine_types WHERE registered_at IS NOT NULL ORDER BY name")
        return [r["name"] for r in cur.fetchall()]


def test_three_clouds_with_prices_and_their_sources(api_only: Stack) -> None:
    """aws, gcp and azure GPU types, single and multi-GPU, each with a price, its source and the GPU figures
    the reference predictor needs."""
    listed = http.get(f"{api_only.url}/v1/machines").json()["machines"]
    gpu_types = [m for m in listed if m["gpu"]]
    assert {"aws", "gcp", "azure"} <= {m["provider"] for m in gpu_types}
    for provider in ("aws", "gcp", "azure"):
        counts = {m["gpu_count"] for m in gpu_types if m["provider"] == provider}
        assert 1 in counts and max(counts) > 1, provider
    for m in gpu_types:
        assert m["price_usd_per_hour"] > 0 and m["price_source"], m["name"]
        assert m["gpu_fp32_tflops"] > 0 and m["gpu_mem_bandwidth_gbs"] > 0 and m["gpu_sm_count"] > 0, m["name"]
    gpus = {m["gpu"] for m in gpu_types}
    assert {"T4", "L4", "V100-SXM2-16GB", "A100-SXM4-40GB", "H100-SXM5-80GB"} <= gpus
    assert any(g.startswith("A100") and g.endswith("80GB") for g in gpus) and gpus & {"A10", "A10G"}


def test_register_a_gpu_by_its_specs(api_only: Stack) -> None:
    """201 with Location; listed; the same name again is 409 and changes nothing."""
    name = "lab-api-box"
    created = http.post(f"{api_only.url}/v1/machines", json=OWN_GPU | {"name": name, "provider": "lab"})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == f"/v1/machines/{name}"
    body = created.json()
    assert body["registered"] is True and body["provider"] == "lab"
    assert body["gpu_memory_gib"] == OWN_GPU["gpu_memory_gib"] * OWN_GPU["gpu_count"]  # total, as the catalog
    assert http.get(f"{api_only.url}/v1/machines/{name}").json()["gpu_sm_count"] == OWN_GPU["gpu_sm_count"]
    again = http.post(f"{api_only.url}/v1/machines", json=OWN_GPU | {"name": name, "gpu_count": 1})
    assert again.status_code == 409 and again.headers["content-type"] == "application/problem+json"
    assert http.get(f"{api_only.url}/v1/machines/{name}").json()["gpu_count"] == OWN_GPU["gpu_count"]
    assert http.get(f"{api_only.url}/v1/machines/no-such-box").status_code == 404


BAD_FIGURES: list[tuple[dict[str, Any], str]] = [
    ({"gpu_mem_bandwidth_gbs": -1}, "gpu_mem_bandwidth_gbs"),
    ({"gpu_fp32_tflops": 0}, "gpu_fp32_tflops"),
    ({"gpu_count": 0}, "gpu_count"),
    ({"name": "bad name/with slash"}, "name"),
    ({"name": "nul\u0000box"}, "name"),
    ({"gpu": "nul\u0000gpu"}, "gpu"),
    ({"gpu_compute_capability": "eight"}, "gpu_compute_capability"),
    ({"provider": "aws"}, "catalog's own"),
    ({"gpu_fp16_tflops": 0.01}, "1/64"),
    ({"surprise": 1}, "surprise"),
    ({"gpu_link": "nvlink"}, "needs gpu_link_gbs"),
    ({"gpu_link": "infinity-fabric"}, "gpu_link"),
    ({"gpu_link": "none"}, "gpu_link none is for one GPU"),
    ({"nics": 4, "nic_gbps": 100}, "missing ['network_rdma']"),
    ({"nics": 0, "nic_gbps": 100, "network_rdma": True}, "nics"),
    ({"nics": 1, "nic_gbps": -5, "network_rdma": False}, "nic_gbps"),
]


@pytest.mark.parametrize(("change", "words"), BAD_FIGURES)
def test_invalid_figures_are_a_problem_and_register_nothing(
    api_only: Stack, change: dict[str, Any], words: str
) -> None:
    """Each invalid registration gets 422 problem+json naming what is wrong; nothing is stored."""
    before = registered_names()
    response = http.post(f"{api_only.url}/v1/machines", json=OWN_GPU | {"name": "lab-bad"} | change)
    assert response.status_code == 422 and response.headers["content-type"] == "application/problem+json"
    assert words in response.json()["detail"]
    assert registered_names() == before


def test_a_missing_figure_of_a_gpu_traincast_does_not_know_is_named(api_only: Stack) -> None:
    """Leaving out a figure of a GPU data/gpus.csv does not know names it, and the known GPUs spelled nearest."""
    body = {k: v for k, v in OWN_GPU.items() if k != "gpu_sm_count"} | {"name": "lab-short", "gpu": "RTX 4009"}
    response = http.post(f"{api_only.url}/v1/machines", json=body)
    assert response.status_code == 422 and "gpu_sm_count" in response.json()["detail"]
    assert "did you mean 'RTX-4090'" in response.json()["detail"] and "lab-short" not in registered_names()


def test_a_known_gpu_by_name_or_alias_brings_its_figures(api_only: Stack) -> None:
    """Name, GPU, count and price: every figure is data/gpus.csv's for that GPU (found by an alias too), said in
    specs_source; a figure given wins over the table's, and the answer says which came from where."""
    rows = {r["gpu"]: r for r in machine_types.gpu_rows()}
    body = {"name": "lab-4090x2", "gpu": "GeForce RTX 4090", "gpu_count": 2, "price_usd_per_hour": 0.8}
    created = http.post(f"{api_only.url}/v1/machines", json=body)
    assert created.status_code == 201, created.text
    got, want = created.json(), rows["RTX-4090"]
    assert got["gpu"] == "RTX-4090" and got["gpu_bf16"] is True and got["gpu_compute_capability"] == "8.9"
    assert got["gpu_fp16_tflops"] == float(want["fp16_tflops"]) and got["gpu_sm_count"] == int(want["sm_count"])
    assert got["gpu_fp16_acc16_tflops"] == float(want["fp16_acc16_tflops"])
    assert got["gpu_memory_gib"] == 2 * float(want["memory_gib"])  # the machine's, as the catalog's
    assert got["specs_source"].startswith("data/gpus.csv (RTX-4090: ")
    mine = body | {"name": "lab-4090-slow", "gpu": "rtx_4090", "gpu_tdp_watts": 300.0}
    slow = http.post(f"{api_only.url}/v1/machines", json=mine).json()
    assert slow["gpu_tdp_watts"] == 300.0 and slow["gpu_fp32_tflops"] == float(want["fp32_tflops"])
    assert slow["specs_source"].startswith("gpu_tdp_watts given by the user; the rest from data/gpus.csv")
    job = http.post(f"{api_only.url}/v1/jobs", json={"cnns": ["resnet18"], "machines": ["lab-4090x2"],
                                                     "batch_sizes": [32]})  # fmt: skip
    assert job.status_code == 202, job.text


def test_names_are_unique_whatever_their_case_and_typos_suggest_the_real_one(api_only: Stack) -> None:
    """`P4D.24XLARGE` beside `p4d.24xlarge` (or `Local`) is a 409 naming the real one; nothing is registered, so a
    typo's did-you-mean names the catalog's type, not an impostor."""
    for name, real in (("P4D.24XLARGE", "p4d.24xlarge"), ("Local", "local")):
        r = http.post(f"{api_only.url}/v1/machines", json=OWN_GPU | {"name": name})
        assert r.status_code == 409 and f"differs only in letter case from {real!r}" in r.json()["detail"], r.text
        assert http.get(f"{api_only.url}/v1/machines/{name}").status_code == 404
    typo = http.post(f"{api_only.url}/v1/jobs", json={"cnns": ["resnet18"], "machines": ["p4d.24xlarg"],
                                                      "batch_sizes": [8]})  # fmt: skip
    assert typo.status_code == 422 and "did you mean 'p4d.24xlarge'" in typo.json()["detail"], typo.text


def test_a_keys_own_types_are_its_own_and_owners_or_admins_delete_them(api_only: Stack) -> None:
    """A submit key registers a type only it (and admins) can see and use; another key gets 404 and 'unknown'; the
    owner deletes it (204, then 404); the catalog is never deleted; a type an admin registered is every key's."""
    from tests.integration.test_keys import new_key

    alice, bob = new_key("submit"), new_key("submit")

    def as_key(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    mine = OWN_GPU | {"name": "alice-box"}
    created = http.post(f"{api_only.url}/v1/machines", json=mine, headers=as_key(alice))
    assert created.status_code == 201 and created.json()["shared"] is False, created.text
    assert http.get(f"{api_only.url}/v1/machines/alice-box", headers=as_key(alice)).status_code == 200
    assert http.get(f"{api_only.url}/v1/machines/alice-box", headers=as_key(bob)).status_code == 404
    names = {m["name"] for m in http.get(f"{api_only.url}/v1/machines", headers=as_key(bob)).json()["machines"]}
    assert "alice-box" not in names and "p4d.24xlarge" in names
    job = {"cnns": ["resnet18"], "machines": ["alice-box"], "batch_sizes": [8]}
    refused = http.post(f"{api_only.url}/v1/jobs", json=job, headers=as_key(bob))
    assert refused.status_code == 422 and "unknown machine type(s): alice-box" in refused.json()["detail"]
    assert http.delete(f"{api_only.url}/v1/machines/alice-box", headers=as_key(bob)).status_code == 404
    assert http.get(f"{api_only.url}/v1/machines/alice-box").status_code == 200  # the admin sees every type
    assert http.delete(f"{api_only.url}/v1/machines/alice-box", headers=as_key(alice)).status_code == 204
    assert http.get(f"{api_only.url}/v1/machines/alice-box", headers=as_key(alice)).status_code == 404
    assert http.delete(f"{api_only.url}/v1/machines/p4d.24xlarge").status_code == 409  # the catalog stays
    shared = http.post(f"{api_only.url}/v1/machines", json=OWN_GPU | {"name": "lab-shared"})  # the admin's
    assert shared.status_code == 201 and shared.json()["shared"] is True
    assert http.get(f"{api_only.url}/v1/machines/lab-shared", headers=as_key(bob)).status_code == 200
    assert http.delete(f"{api_only.url}/v1/machines/lab-shared", headers=as_key(bob)).status_code == 403
    assert http.delete(f"{api_only.url}/v1/machines/lab-shared").status_code == 204
