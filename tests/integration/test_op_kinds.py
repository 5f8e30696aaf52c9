"""The op kinds the extraction used to drop, measured by the agent's own task and stored; a CNN read again by a
changed extraction counts only its new ops."""

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gpu_agent import app as agent
from gpu_agent import lifecycle
from shared.cnn import registry as cnns
from shared.cnn.op_signatures import NO_BACKWARD, OpSignature
from shared.core.settings import get_settings
from shared.measurements import layers, ops
from shared.training import TrainConfig
from tests.support.agentkit import rows

SIZE = 32


@pytest.fixture
def quick_agent(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Agent settings for storing, not for timing well: short windows, every block taken as quiet."""
    monkeypatch.setenv("BENCH_QUIET_WAIT", "inf")
    monkeypatch.setenv("BENCH_TIME_CAP_S", "0.05")
    get_settings.cache_clear()
    lifecycle.clear_stop()
    yield
    get_settings.cache_clear()


def new_kinds(name: str) -> list[tuple[int, dict[str, Any]]]:
    """A registered CNN's op signatures of kinds the extraction used to drop: (signature id, spec)."""
    layers.register_builtin(name=name, image_size=SIZE)
    found = []
    for sig_id, spec, _count in ops.members(name=name, image_size=SIZE, num_classes=1000):
        a = spec["args"]
        if (
            (spec["op"] == "linear" and spec["shape"][0] > 1) or "layout" in a or a.get("step")
            or a.get("grad") is False or spec["op"] in ("bernoulli", "accumulate", "copy", "split")
        ):  # fmt: skip
            found.append((sig_id, spec))
    return found


@pytest.mark.parametrize("precision", ["fp32", "amp_bf16"])
def test_the_agent_stores_each_new_kind_with_its_phases(quick_agent: None, precision: str) -> None:
    """convnext's block MLPs, layer scale, permuted norm, stochastic depth; shufflenet's shuffle and chunk; batch
    norm's counter; gradient sums: each stored once per batch size, a backward only where a gradient flows."""
    chosen: dict[str, tuple[int, dict[str, Any]]] = {}
    for name in ("convnext_tiny", "shufflenet_v2_x1_0", "resnet18"):
        for sig_id, spec in new_kinds(name):
            chosen.setdefault(f"{spec['op']}/{sorted(spec['args'])}", (sig_id, spec))
    assert {s["op"] for _i, s in chosen.values()} >= {
        "linear",
        "layer_norm",
        "bernoulli",
        "accumulate",
        "copy",
        "split",
    }
    items = [{"signature_id": i, "hash": "", "spec": s, "batch_sizes": [2, 3]} for i, s in chosen.values()]
    config = TrainConfig(precision=precision)  # type: ignore[arg-type]
    assert agent.bench_ops(machine_type="local", config=config.model_dump(), items=items) == 2 * len(items)
    stored = rows("SELECT op_signature_id, batch_size, variant, oom, forward_ms, backward_ms FROM op_benchmarks")
    assert sorted((r["op_signature_id"], r["batch_size"]) for r in stored) == sorted(
        (i, bs) for i, _s in chosen.values() for bs in (2, 3)
    )
    specs = dict(chosen.values())
    for r in stored:
        spec = specs[r["op_signature_id"]]
        one_phase = spec["op"] in NO_BACKWARD or spec["args"].get("grad") is False
        assert r["variant"] == config.op_variant and not r["oom"] and r["forward_ms"] > 0, spec
        assert (r["backward_ms"] == 0) if one_phase else (r["backward_ms"] > 0), spec
    # Delivered again, nothing is measured twice.
    assert agent.bench_ops(machine_type="local", config=config.model_dump(), items=items) == 0


def test_a_variant_read_again_counts_only_the_new_extractions_ops(
    clean_db: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CNN stored by an older extraction (here: one more op signature) is read again; the op it no longer yields
    is no member any more, and the counts are the new extraction's."""
    current = cnns.read(name="resnet18", image_size=SIZE)
    stale = OpSignature.of("relu", (7,))
    older = replace(current, ops=(*current.ops, stale), op_counts=(*current.op_counts, 3))
    monkeypatch.setattr(cnns, "read", lambda **_kwargs: older)
    monkeypatch.setattr(layers, "extractor_version", lambda: "older-extractor")
    layers.register(name="resnet18", image_size=SIZE)
    first = {
        OpSignature.from_json(s): c for _i, s, c in ops.members(name="resnet18", image_size=SIZE, num_classes=1000)
    }
    assert first[stale] == 3 and len(first) == len(current.ops) + 1

    monkeypatch.undo()
    monkeypatch.setattr(layers, "extractor_version", lambda: "newer-extractor")
    layers.register(name="resnet18", image_size=SIZE)
    after = ops.members(name="resnet18", image_size=SIZE, num_classes=1000)
    assert {OpSignature.from_json(s): c for _i, s, c in after} == dict(zip(current.ops, current.op_counts, strict=True))
