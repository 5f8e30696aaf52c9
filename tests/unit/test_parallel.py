"""prediction/parallel.py: the data-parallel step model and data/interconnect.csv."""

import csv
import itertools
import math
from pathlib import Path

import pytest

from prediction import parallel
from prediction.parallel import Links, data_parallel_step

DATA = Path(__file__).resolve().parents[2] / "data"
PCIE = Links(intra_gbs=12.0, network_gbps=50.0, intra_link="pcie", network_kind="Ethernet")
NVSWITCH = Links(intra_gbs=240.0, network_gbps=400.0, intra_link="nvswitch", network_kind="EFA")
RESNET50 = 25.6e6 * 4  # fp32 gradient bytes


def step(links: Links = PCIE, gpus: int = 4, nodes: int = 1, compute: float = 150.0, grad: float = RESNET50):
    return data_parallel_step(
        compute_ms=compute, backward_fraction=2 / 3, gradient_bytes=grad, gpus_per_node=gpus, nodes=nodes, links=links
    )


def catalog() -> dict[str, int]:
    """Every machine type in both catalog CSVs and its GPU count."""
    out = {}
    with (DATA / "aws_gpu_instances.csv").open() as f:
        out.update({r["instance_type"]: int(r["gpu_count"]) for r in csv.DictReader(f)})
    with (DATA / "cloud_gpu_machines.csv").open() as f:
        out.update({r["name"]: int(r["gpu_count"]) for r in csv.DictReader(f)})
    return out


def test_one_gpu_is_compute_only():
    s = step(gpus=1, nodes=1)
    assert (s.step_ms, s.allreduce_ms, s.exposed_ms, s.scaling_efficiency) == (150.0, 0.0, 0.0, 1.0)
    assert s.algorithm == "none" and s.buckets == 0
    # No links are needed for one GPU (a 1-GPU machine type has neither figure).
    lonely = Links(intra_gbs=None, network_gbps=None, intra_link="none", network_kind="")
    assert step(lonely, gpus=1).step_ms == 150.0


def test_more_bandwidth_is_never_slower():
    for gpus, nodes in [(2, 1), (8, 1), (1, 2), (4, 2), (8, 16)]:
        times = [
            step(Links(intra_gbs=bw, network_gbps=bw * 8, intra_link="nvlink", network_kind=""), gpus, nodes).step_ms
            for bw in (1.0, 3.0, 12.0, 50.0, 240.0, 1000.0)
        ]
        assert times == sorted(times, reverse=True), (gpus, nodes, times)
        assert times[0] > times[-1]


def test_a_bigger_gradient_is_never_faster():
    for links, (gpus, nodes) in itertools.product((PCIE, NVSWITCH), [(2, 1), (8, 1), (4, 4), (1, 8)]):
        grads = [0, 1e5, 1e6, 2**20 + 1, 3e7, 26 * 2**20, 26 * 2**20 + 1, 27 * 2**20, 1e8, 5e8]
        times = [step(links, gpus, nodes, grad=g).step_ms for g in grads]
        assert times == sorted(times), (links.intra_link, gpus, nodes, times)
        assert times[-1] > times[0]


def test_efficiency_is_within_zero_and_one():
    for links, gpus, nodes, compute, grad in itertools.product(
        (PCIE, NVSWITCH), (1, 2, 8), (1, 2, 16), (0.5, 30.0, 900.0), (0.0, 4e6, 5e8)
    ):
        s = step(links, gpus, nodes, compute=compute, grad=grad)
        assert 0 < s.scaling_efficiency <= 1
        assert math.isclose(s.scaling_efficiency, compute / s.step_ms)
        assert math.isclose(s.step_ms, compute + s.exposed_ms)
        assert 0 <= s.exposed_ms <= s.allreduce_ms + 1e-9


def test_machines_over_a_slower_network_are_slower_than_one_machine():
    # 8 GPUs: one machine over its GPU links vs spread over 2, 4, 8 machines over the network.
    for links in (NVSWITCH, Links(intra_gbs=12.0, network_gbps=25.0, intra_link="pcie", network_kind="")):
        one = step(links, gpus=8, nodes=1)
        spread = [step(links, gpus=8 // n, nodes=n) for n in (2, 4, 8)]
        assert all(s.step_ms > one.step_ms for s in spread)
        assert all(s.bottleneck == "network" for s in spread) and one.bottleneck == "intra"


def test_ring_by_hand():
    # 2 GPUs on PCIe at 12 GB/s, 12 MB: 2 x (1/2) x 12e6 B / 12e6 B/ms = 1 ms, plus NCCL's 8.4 us base latency and
    # 2 ring steps of 5.7 us.
    ms, algorithm = parallel.allreduce_ms(12e6, gpus_per_node=2, nodes=1, links=PCIE)
    assert algorithm == "ring"
    assert ms == pytest.approx(1.0 + (8.4 + 2 * 5.7) / 1000)
    # 4 GPUs: 2 x 3/4 x 24e6 / 12e6 = 3 ms, plus 8.4 + 6 x 5.7 us.
    ms, _ = parallel.allreduce_ms(24e6, gpus_per_node=4, nodes=1, links=PCIE)
    assert ms == pytest.approx(3.0 + (8.4 + 6 * 5.7) / 1000)
    # 2 machines x 1 GPU over 50 Gbit/s (96% of it: 6 GB/s): 1 x 6e6 / 6e6 = 1 ms; 2 network steps of 9.6 us and the
    # base, x1.9; the tree (2 x 6e6 / (0.9 x 6e6) ms) is slower.
    ms, algorithm = parallel.allreduce_ms(6e6, gpus_per_node=1, nodes=2, links=PCIE)
    assert algorithm == "ring"
    assert ms == pytest.approx(1.0 + (8.4 + 2 * 9.6) * 1.9 / 1000)


def test_overlap_by_hand():
    # Two buckets: 1 MiB then 1 MiB. Backward 60 ms (0.5 x 120): the first is ready at 30 ms, the second at 60 ms.
    grad = 2 * 2**20
    cost, _ = parallel.allreduce_ms(2**20, gpus_per_node=2, nodes=1, links=PCIE)
    s = data_parallel_step(
        compute_ms=120, backward_fraction=0.5, gradient_bytes=grad, gpus_per_node=2, nodes=1, links=PCIE,
        bucket_bytes=2**20,
    )  # fmt: skip
    assert s.buckets == 2
    assert s.allreduce_ms == pytest.approx(2 * cost)
    assert s.exposed_ms == pytest.approx(cost)  # the first finished long before backward ended; the last is exposed
    # With a backward too short to hide anything, buckets queue: the second starts when the first ends.
    s = data_parallel_step(
        compute_ms=0.01, backward_fraction=1.0, gradient_bytes=grad, gpus_per_node=2, nodes=1, links=PCIE,
        bucket_bytes=2**20,
    )  # fmt: skip
    assert s.exposed_ms == pytest.approx(0.005 + 2 * cost - 0.01)


def test_the_last_bucket_is_always_exposed():
    for links, gpus, nodes in itertools.product((PCIE, NVSWITCH), (2, 8), (1, 4)):
        s = step(links, gpus, nodes, compute=10_000.0)  # a backward long enough to hide all but the last
        last = parallel.buckets(RESNET50)[-1]
        cost, _ = parallel.allreduce_ms(last, gpus_per_node=gpus, nodes=nodes, links=links)
        assert s.exposed_ms == pytest.approx(cost)


def test_buckets_are_ddp_sized():
    sizes = parallel.buckets(RESNET50)
    assert sum(sizes) == pytest.approx(RESNET50) and len(sizes) == 4  # the remainder, then 3 full 25 MiB buckets
    assert sizes[1:] == [25 * 2**20] * 3 and 0 < sizes[0] < 25 * 2**20
    assert parallel.buckets(1000) == [1000] and parallel.buckets(0) == []
    assert parallel.buckets(25 * 2**20 + 5) == [5, 25 * 2**20]


def test_tree_is_taken_where_latency_dominates():
    _, algorithm = parallel.allreduce_ms(64e3, gpus_per_node=8, nodes=64, links=NVSWITCH)
    assert algorithm == "tree"
    ms, _ = parallel.allreduce_ms(64e3, gpus_per_node=8, nodes=64, links=NVSWITCH)
    ring_latency = (8.4 + (2 * 511 - 126) * 3.4 + 126 * 9.6) * 1.9 / 1000
    assert ms < ring_latency


def test_missing_figures_are_errors():
    with pytest.raises(ValueError, match="GPU-link"):
        step(Links(intra_gbs=None, network_gbps=25.0, intra_link="none", network_kind=""), gpus=2)
    with pytest.raises(ValueError, match="network"):
        step(Links(intra_gbs=12.0, network_gbps=None, intra_link="pcie", network_kind=""), gpus=2, nodes=2)
    with pytest.raises(ValueError):
        step(compute=0.0)
    with pytest.raises(ValueError):
        step(gpus=0)


def test_links_for_named_machines():
    p5 = parallel.links_for("p5.48xlarge")
    assert p5 is not None and p5.intra_link == "nvswitch" and p5.network_gbps == 3200 and p5.network_kind == "EFA"
    a3 = parallel.links_for("a3-highgpu-8g")
    assert a3 is not None and a3.intra_link == "nvswitch" and a3.network_gbps == 800
    assert a3.network_kind == "GPUDirect-TCPX"
    nd = parallel.links_for("Standard_ND96isr_H100_v5")
    assert nd is not None and nd.network_gbps == 3200 and nd.network_kind == "InfiniBand"
    assert parallel.links_for("no-such-machine") is None


def test_every_catalog_machine_has_a_row():
    rows = {name: parallel.links_for(name) for name in catalog()}
    assert [n for n, r in rows.items() if r is None] == []
    for name, gpus in catalog().items():
        links = rows[name]
        assert links is not None and links.source, name
        if gpus > 1:
            assert links.intra_link in ("nvswitch", "nvlink", "pcie") and links.intra_gbs, name
            data_parallel_step(  # every multi-GPU type can be modelled on one machine
                compute_ms=100, backward_fraction=2 / 3, gradient_bytes=RESNET50, gpus_per_node=gpus, nodes=1,
                links=links,
            )  # fmt: skip
        else:
            assert links.intra_link == "none" and links.intra_gbs is None, name


def test_interconnect_figures_are_plausible():
    with (DATA / "interconnect.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len({r["name"] for r in rows}) == len(rows)
    for r in rows:
        assert r["intra_link"] in ("nvswitch", "nvlink", "pcie", "none"), r["name"]
        if r["intra_gbs"]:
            assert 10 <= float(r["intra_gbs"]) <= 500, r["name"]
        if r["network_gbps"]:
            assert 1 <= float(r["network_gbps"]) <= 3200, r["name"]


def test_many_steps_at_once_agree_with_one_at_a_time() -> None:
    """exposed_many (what assembly uses) gives each step's exposed all-reduce as data_parallel_step does."""
    import numpy as np

    computes = np.array([0.5, 3.0, 20.0, 150.0, 900.0])
    for links, gpus, nodes in ((NVSWITCH, 8, 1), (NVSWITCH, 8, 4), (PCIE, 4, 2), (PCIE, 1, 1)):
        total, exposed = parallel.exposed_many(
            computes, backward_fraction=2 / 3, gradient_bytes=102e6, gpus_per_node=gpus, nodes=nodes, links=links
        )
        for compute, mine in zip(computes.tolist(), exposed.tolist(), strict=True):
            one = parallel.data_parallel_step(
                compute_ms=compute, backward_fraction=2 / 3, gradient_bytes=102e6, gpus_per_node=gpus, nodes=nodes,
                links=links,
            )  # fmt: skip
            assert mine == pytest.approx(one.exposed_ms, abs=1e-9) and total == pytest.approx(one.allreduce_ms)


def test_a_measured_all_reduce_replaces_the_catalogs_bus_bandwidth() -> None:
    """100 MiB over 8 GPUs in 2 ms: 2(p-1)/p x bytes / time = 91.8 GB/s, used within the machine, said in the source;
    a slower measured link makes the same step's all-reduce longer; none measured: the links as they were."""
    from prediction import parallel
    from shared.measurements.allreduce import Measured

    catalog = parallel.links_for("p5.48xlarge")
    assert catalog is not None
    measured = Measured("p5.48xlarge", 8, 100 * 2**20, 2.0, 7)
    assert measured.bus_gbs == pytest.approx(2 * 7 / 8 * 100 * 2**20 / 0.002 / 1e9)
    links = parallel.with_measured(catalog, measured)
    assert links.intra_gbs == pytest.approx(measured.bus_gbs) and "measured" in links.source
    assert links.network_gbps == catalog.network_gbps
    slow = parallel.with_measured(catalog, Measured("p5.48xlarge", 8, 100 * 2**20, 20.0, 7))
    fast_ms, _ = parallel.allreduce_ms(1e8, gpus_per_node=8, nodes=1, links=links)
    slow_ms, _ = parallel.allreduce_ms(1e8, gpus_per_node=8, nodes=1, links=slow)
    assert slow_ms > fast_ms
    assert parallel.with_measured(catalog, None) is catalog


def test_hierarchical_all_reduce_is_three_phases_on_their_own_links():
    """Within each machine (2(g-1)/g over the GPU links), each GPU's shard across machines (the machine's NICs shared
    by its g GPUs' rings), then within again; it says so, and costs fewer latency steps than one ring."""
    nbytes, g, n = 25 * 2**20, 8, 4
    ms, label = parallel.allreduce_ms(nbytes, gpus_per_node=g, nodes=n, links=NVSWITCH, algorithm="hierarchical")
    network = 400 / 8 * parallel.NETWORK_EFFICIENCY
    expected = (2 * (g - 1) / g * nbytes / (240 * 1e6) + (parallel.RING_BASE_US + 2 * (g - 1) * 3.4) / 1000
                + 2 * (n - 1) / n * (nbytes / g) / (network / g * 1e6)
                + (parallel.RING_BASE_US + 2 * (n - 1) * 9.6) / 1000)  # fmt: skip
    assert label == "hierarchical" and ms == pytest.approx(expected)
    tiny_h, _ = parallel.allreduce_ms(1024, gpus_per_node=g, nodes=64, links=NVSWITCH, algorithm="hierarchical")
    ring_us = parallel.RING_BASE_US + (2 * (g * 64 - 1) - 2 * 63) * 3.4 + 2 * 63 * 9.6
    assert tiny_h < ring_us * parallel.RING_MULTI_NODE_LATENCY / 1000  # latency-bound: fewer steps win


def test_the_seeds_2d_torus_spans_machines_along_x():
    """ABCI: 4 V100 per node, 544 nodes, a 32 x 68 grid: X crosses 8 machines (its rings over the slower of the
    links), Y joins one GPU per X group; an X that is not whole machines' GPUs falls back to one machine's."""
    abci = Links(intra_gbs=120.0, network_gbps=200.0, intra_link="nvlink", network_kind="InfiniBand EDR x2")
    ms, label = parallel.allreduce_ms(25 * 2**20, gpus_per_node=4, nodes=544, links=abci, algorithm="torus_2d",
                                      grid_x=32)  # fmt: skip
    assert label == "torus_2d 32x68" and ms > 0
    same, fallback = parallel.allreduce_ms(25 * 2**20, gpus_per_node=4, nodes=544, links=abci, algorithm="torus_2d",
                                           grid_x=6)  # fmt: skip
    assert fallback == "torus_2d 4x544"
    hierarchical, _ = parallel.allreduce_ms(25 * 2**20, gpus_per_node=4, nodes=544, links=abci,
                                            algorithm="hierarchical")  # fmt: skip
    assert same == pytest.approx(hierarchical)
    assert parallel.torus_x(4, 544, 32) == 32 and parallel.torus_x(4, 544, 6) == 4 and parallel.torus_x(4, 2, 16) == 4


def test_the_algorithm_asked_is_a_request_field():
    """allreduce defaults to NCCL's choice; torus_x without torus_2d is refused."""
    from pydantic import ValidationError

    from shared.jobs.request import JobRequest

    body = {"cnns": ["resnet50"], "machines": ["p5.48xlarge"], "batch_sizes": [64], "nodes": [1, 2]}
    assert JobRequest.model_validate(body).allreduce == "nccl"
    assert JobRequest.model_validate(body | {"allreduce": "torus_2d", "torus_x": 16}).torus_x == 16
    with pytest.raises(ValidationError, match="needs allreduce 'torus_2d'"):
        JobRequest.model_validate(body | {"torus_x": 16})
    with pytest.raises(ValidationError, match="allreduce"):
        JobRequest.model_validate(body | {"allreduce": "butterfly"})


def test_an_own_types_links_as_its_owner_gave_them() -> None:
    """NICs multiply into the network, TCP gets NCCL-over-sockets' share of it, pcie is the default within."""
    from shared import interconnect

    info = {"name": "lab", "gpu_count": 4, "gpu_link": None, "gpu_link_gbs": None, "nics": 2, "nic_gbps": 100.0,
            "network_rdma": False}  # fmt: skip
    links = interconnect.own_links(info)
    assert links is not None and links.intra_link == "pcie" and links.intra_gbs == interconnect.PCIE_GBS
    assert links.network_gbps == 200 and links.rdma is False and links.network_kind == "2 x 100 Gbit/s, TCP"
    assert parallel.network_gbs(links) == pytest.approx(200 / 8 * parallel.TCP_EFFICIENCY)
    rdma = interconnect.own_links(info | {"network_rdma": True})
    assert rdma is not None and parallel.network_gbs(rdma) == pytest.approx(200 / 8 * parallel.NETWORK_EFFICIENCY)
    assert interconnect.own_links(info | {"nics": None}) is None  # nothing given: the layouts' default
    assert interconnect.links_of("p5.48xlarge", info) == parallel.links_for("p5.48xlarge")  # the catalog's first
