"""worker/step_cache.py: a reference step is computed once per key, and any input that changes it is in the key."""

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from prediction.reference import ReferenceModel
from prediction.reference.model import MODEL_JSON, from_json_text
from shared.cnn import zoo as cnn_zoo
from shared.training import TrainConfig
from tests.unit.test_reference_cache import A100, T4
from worker import step_cache

SIZES = [1, 2, 16, 64]


class Counting(ReferenceModel):
    """The real model, counting its step_arrays calls (what the cache saves)."""

    calls = 0

    def step_arrays(self, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super().step_arrays(**kwargs)


@pytest.fixture
def model() -> Iterator[Counting]:
    step_cache.clear()
    loaded = from_json_text(MODEL_JSON.read_text())
    counting = Counting(loaded.params, version=loaded.version)
    Counting.calls = 0
    yield counting
    step_cache.clear()


def members_of(cnn: str) -> tuple[list[tuple[int, dict[str, Any], int]], dict[str, Any]]:
    """(signature id, spec, count) of a torchvision CNN's convs at 224 px (ids by position), and its workload."""
    read = cnn_zoo.conv_layers(cnn, 224)
    members = [(i, s.to_json(), n) for i, (s, n) in enumerate(zip(read.signatures, read.counts, strict=True))]
    return members, dict(read.workload)


def test_a_second_ask_is_the_first_answer(model: Counting) -> None:
    """Asked again (another job, another type with the GPU's figures): no computation, the same arrays, read-only."""
    members, work = members_of("resnet18")
    ask: dict[str, Any] = {
        "members": members,
        "workload": work,
        "batch_sizes": SIZES,
        "gpu": A100,
        "training": TrainConfig(),
    }
    first = step_cache.steps(model, **ask)
    second = step_cache.steps(model, **ask)
    assert Counting.calls == 1 and second is first
    direct = model.step_arrays(
        convs=[(s, n) for _i, s, n in members], workload=work, batch_sizes=SIZES, gpu=A100, training=TrainConfig()
    )
    np.testing.assert_array_equal(first.step_ms, direct.step_ms)
    with pytest.raises(ValueError, match="read-only"):
        first.step_ms[0] = 0.0


def test_every_input_of_a_step_is_in_the_key(model: Counting) -> None:
    """Another GPU, training, batch sizes, conv count, workload or model version each computes anew."""
    members, work = members_of("resnet18")
    base: dict[str, Any] = {"members": members, "workload": work, "batch_sizes": SIZES, "gpu": A100,
                            "training": TrainConfig()}  # fmt: skip
    step_cache.steps(model, **base)
    changed: list[dict[str, Any]] = [
        {"gpu": T4},
        {"training": TrainConfig(optimizer="adam")},
        {"batch_sizes": [*SIZES, 128]},
        {"members": [*members[:-1], (members[-1][0], members[-1][1], members[-1][2] + 1)]},
        {"workload": {**work, "activation_bytes": (work.get("activation_bytes") or 0) + 1}},
    ]
    for i, change in enumerate(changed, start=2):
        step_cache.steps(model, **(base | change))
        assert Counting.calls == i, change
    other = Counting(model.params, version="another-version")
    step_cache.steps(other, **base)
    assert Counting.calls == len(changed) + 2
