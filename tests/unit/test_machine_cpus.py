"""A machine type's decode rate from its own CPUs: the catalog's CPU table, and a measured rate moved to other vCPUs."""

import csv
import re

import pytest

from prediction import input_pipeline
from shared import machine_cpus
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
