"""A machine type's decode rate from its own CPUs: the catalog's CPU table, and a measured rate moved to other vCPUs."""

import csv
import itertools
import re

import pytest

from prediction import input_pipeline
from shared import machine_cpus
from shared.jobs.request import JobRequest
from shared.measurements.inputs import InputRate


def rate(machine_type: str, per_cpu: float, **stats: object) -> InputRate:
    """A measured rate of per_cpu images/s per CPU on 4 CPUs."""
    return InputRate(machine_type=machine_type, environment_id=7, host_cpus=4, decode_ms=4.0, augment_ms=2.0,
                     images_per_s_all=4 * per_cpu, jpeg_kb=107.0, stats=dict(stats))  # fmt: skip


def test_every_catalog_machine_type_has_one_cpu_row_with_a_source() -> None:
    """Each of the catalog's machine types matches exactly one CPU row, and each row says where it comes from."""
    with open(machine_cpus.CSV.parent / "cloud_gpu_machines.csv", newline="") as f:
        names = [r["name"] for r in csv.DictReader(f)]
    with open(machine_cpus.CSV, newline="") as f:
        rows = list(csv.DictReader(f))
    for name in names:
        assert sum(bool(re.fullmatch(r["pattern"], name)) for r in rows) == 1, name
        assert machine_cpus.of(name) is not None
    assert all(r["source"].strip() and r["cpu"].strip() for r in rows)
    assert machine_cpus.of("my-own-box") is None


def test_a_vcpu_that_is_a_hyperthread_decodes_less_than_a_whole_core() -> None:
    """p5 vCPUs are threads two to a core, an ND H100 v5's are whole cores: the same measured rate moves apart."""
    p5, nd = machine_cpus.of("p5.48xlarge"), machine_cpus.of("Standard_ND96isr_H100_v5")
    assert p5 is not None and nd is not None
    assert p5.threads_per_core == 2 and nd.threads_per_core == 1
    assert p5.per_vcpu == pytest.approx(machine_cpus.SMT_YIELD / 2) and nd.per_vcpu == 1.0
    # Measured on a host with one thread per core (its agent said so): p5's vCPUs get 0.625 of it, ND's all of it.
    local = {"local": rate("local", 100.0, threads_per_core=1)}
    to_p5, to_nd = (
        input_pipeline.sourced("p5.48xlarge", local),
        input_pipeline.sourced("Standard_ND96isr_H100_v5", local),
    )
    assert to_p5.source == to_nd.source == "reference"
    assert to_p5.per_cpu == pytest.approx(62.5) and to_nd.per_cpu == pytest.approx(100.0)
    assert "scaled by threads per core" in to_p5.detail and "AMD EPYC 7R13" in to_p5.detail
    # Measured on g4dn (2 threads per core, 2.5 GHz): p3 (2 per core, 2.7 GHz all-core) scales by clock alone.
    on_g4dn = input_pipeline.sourced("p3.2xlarge", {"g4dn.xlarge": rate("g4dn.xlarge", 50.0)})
    assert on_g4dn.per_cpu == pytest.approx(50.0 * 2.7 / 2.5)
    assert "scaled by clock" in on_g4dn.detail


def test_what_is_unknown_is_not_scaled_and_a_types_own_rate_is_never_moved() -> None:
    """An agent that recorded nothing of its CPUs, or a type outside the catalog: the median as measured, said so."""
    bare = {"local": rate("local", 80.0)}
    assert input_pipeline.sourced("p5.48xlarge", bare).per_cpu == pytest.approx(80.0)
    own_type = input_pipeline.sourced("my-own-box", {"local": rate("local", 80.0, threads_per_core=1)})
    assert own_type.per_cpu == pytest.approx(80.0) and "not in the catalog" in own_type.detail
    # Azure's NCv3 does not publish threads per core: nothing to scale by.
    ncv3 = input_pipeline.sourced("Standard_NC6s_v3", {"local": rate("local", 80.0, threads_per_core=1)})
    assert ncv3.per_cpu == pytest.approx(80.0)
    measured = input_pipeline.sourced(
        "p5.48xlarge", {"p5.48xlarge": rate("p5.48xlarge", 30.0), "local": rate("local", 90.0)}
    )
    assert measured.source == "measured" and measured.per_cpu == pytest.approx(30.0)


def test_the_agent_reads_the_clock_a_model_name_states() -> None:
    """A model name's stated clock ("E5-2686 v4 @ 2.30GHz": 2.3 GHz) is read; a name without one gives None."""
    from gpu_agent.input_bench import cpu_ghz, threads_per_core

    assert cpu_ghz("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz") == pytest.approx(2.3)
    assert cpu_ghz("AMD EPYC 7R13 Processor") is None
    threads = threads_per_core()
    assert threads is None or threads >= 1


def test_where_nothing_was_measured_the_shipped_rate_answers_as_a_reference() -> None:
    """A fresh installation: no machine type measured its rate, so the rate shipped in data/reference/input_rate.json
    (our agent's, on a host it names) answers every type, moved to its vCPUs and said so; once one type has measured
    its own, the shipped rate plays no part."""
    shipped = input_pipeline.shipped_rate()
    env = input_pipeline.shipped_environment()
    assert shipped.pipeline == input_pipeline.PIPELINE and shipped.per_cpu > 0
    assert env["cpu"] and env["torch"] and env["measured_at"][:4].isdigit()
    fresh = input_pipeline.sourced("p5.48xlarge", {})
    assert fresh.source == "reference" and fresh.rate == shipped
    moved, _said = input_pipeline.scaled(shipped, machine_cpus.of("p5.48xlarge"))
    assert fresh.per_cpu == pytest.approx(moved)
    assert "the rate Traincast ships" in fresh.detail and env["cpu"] in fresh.detail
    assert "their median" not in fresh.detail
    measured = input_pipeline.sourced("p5.48xlarge", {"local": rate("local", 80.0, threads_per_core=1)})
    assert measured.rate is not None and measured.rate.machine_type == "local"
    assert "ships" not in measured.detail


def test_workers_that_leave_cores_free_decode_at_a_whole_cores_rate() -> None:
    """p4d.24xlarge: 96 vCPUs, two to a core. 32 workers have a core each and decode 1.6 times as fast each as
    96 that share them all; past 48 workers each one adds a thread's share; where threads per core are unknown or
    one, a worker is a vCPU, as before."""
    p4d = machine_cpus.of("p4d.24xlarge")
    assert p4d is not None and p4d.threads_per_core == 2
    per_vcpu = machine_cpus.SMT_YIELD / 2
    assert input_pipeline.decoding_vcpus(96, 96, p4d) == pytest.approx(96.0)  # every CPU busy: the rate's own unit
    assert input_pipeline.decoding_vcpus(200, 96, p4d) == pytest.approx(96.0)  # no more workers than vCPUs run
    assert input_pipeline.decoding_vcpus(32, 96, p4d) == pytest.approx(32 / per_vcpu)
    assert input_pipeline.decoding_vcpus(64, 96, p4d) == pytest.approx(
        (48 + 16 * (machine_cpus.SMT_YIELD - 1)) / per_vcpu
    )
    capacity = [input_pipeline.decoding_vcpus(n, 96, p4d) for n in range(1, 97)]
    assert all(b > a for a, b in itertools.pairwise(capacity))  # one more worker never decodes less
    nd = machine_cpus.of("Standard_ND96isr_H100_v5")
    assert input_pipeline.decoding_vcpus(32, 96, nd) == 32.0
    assert input_pipeline.decoding_vcpus(32, 96, machine_cpus.of("Standard_ND40rs_v2")) == 32.0
    assert input_pipeline.decoding_vcpus(32, 96, None) == 32.0


def test_a_jobs_input_time_with_few_workers_per_gpu_counts_whole_cores() -> None:
    """A p4d point fed by 4 workers per GPU (32 on 48 cores) against 12 (96, every thread): the step's CPU time is
    96 / (32 / 0.625) of the busy machine's, not 96 / 32 as when each worker was taken for a shared thread."""
    p4d = machine_cpus.of("p4d.24xlarge")
    info = {"name": "p4d.24xlarge", "provider": "aws", "gpu": "A100", "gpu_count": 8, "vcpus": 96,
            "price_usd_per_hour": 32.8, "gpu_tdp_watts": 400, "memory_gib": 1152}  # fmt: skip
    src = input_pipeline.Sourced(rate("p4d.24xlarge", 50.0), "measured", "measured on p4d", 50.0, p4d)
    input_ms = {}
    for workers in (4, 12):
        request = JobRequest.model_validate({"cnns": ["resnet50"], "machines": ["p4d.24xlarge"], "batch_sizes": [256],
                                             "gpus": 8, "input": {"source": "local_jpeg",
                                                                  "dataloader_workers": workers}})  # fmt: skip
        point = {"batch_size": 256, "gpus_used": 8, "nodes": 1, "iteration_seconds": 0.1,
                 "iteration_seconds_p10": 0.09, "iteration_seconds_p90": 0.11}  # fmt: skip
        input_pipeline.apply([point], info=info, request=request, src=src)  # type: ignore[arg-type, list-item]
        assert point["dataloader_workers"] == workers
        input_ms[workers] = point["input_ms"]
    # 256 x 8 images at 50 images/s per vCPU with every CPU busy: 96 vCPUs' worth of work take 426.7 ms.
    assert input_ms[12] == pytest.approx(256 * 8 * 1000 / 50 / 96, rel=1e-4)
    assert input_ms[4] / input_ms[12] == pytest.approx(96 / (32 / (machine_cpus.SMT_YIELD / 2)), rel=1e-4)
