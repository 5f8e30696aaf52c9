"""Layer predictions one process stored are what another reads instead of running LightGBM again."""

from typing import Any

import lightgbm as lgb
import numpy as np
import pytest

from prediction.reference import ReferenceModel
from prediction.reference import model as reference_model
from prediction.reference.model import MODEL_JSON, Stored, from_json_text
from tests.unit.test_reference_cache import A100, T4, layers_of


class DictStore:
    """A LayerStore in a dict, as the PostgreSQL one behaves (a row only grows)."""

    def __init__(self) -> None:
        self.rows: dict[str, Stored] = {}
        self.loads = 0

    def load(self, keys: list[str]) -> dict[str, Stored]:
        self.loads += 1
        return {k: tuple(a.copy() for a in self.rows[k]) for k in keys if k in self.rows}  # type: ignore[misc]

    def save(self, version: str, layers: dict[str, Stored]) -> None:
        for key, arrays in layers.items():
            if key not in self.rows or self.rows[key][2].sum() <= arrays[2].sum():
                self.rows[key] = arrays


def with_store(store: DictStore) -> ReferenceModel:
    """A model loaded anew (an empty cache: another process) reading and keeping layers in `store`."""
    model = from_json_text(MODEL_JSON.read_text())
    model.store = store
    return model


def lightgbm_rows(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The rows of every LightGBM prediction from now on (what the store saves a process from computing)."""
    rows: list[int] = []
    real = lgb.Booster.predict

    def predict(self: lgb.Booster, data: Any, *args: Any, **kwargs: Any) -> Any:
        rows.append(len(data))
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(lgb.Booster, "predict", predict)
    return rows


def test_a_second_process_reads_what_the_first_computed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Same answers, no LightGBM for what is stored, only the batch sizes nobody computed yet."""
    store, specs = DictStore(), [s for s, _ in layers_of("resnet18")]
    first = with_store(store)
    expected = first.predict_convs(specs=specs, batch_sizes=[1, 2, 8, 64], gpu=A100, precision="amp_fp16")
    assert len(store.rows) == len({first.store_key((A100.filled(), "amp_fp16", k)) for k in map(str, specs)}) > 0

    rows = lightgbm_rows(monkeypatch)
    second = with_store(store)
    again = second.predict_convs(specs=specs, batch_sizes=[1, 2, 8, 64], gpu=A100, precision="amp_fp16")
    assert rows == [] and np.array_equal(again, expected)
    wider = second.predict_convs(specs=specs, batch_sizes=[2, 3, 64, 65], gpu=A100, precision="amp_fp16")
    computed, rows[:] = sum(rows), []
    alone = with_store(DictStore()).predict_convs(specs=specs, batch_sizes=[3, 65], gpu=A100, precision="amp_fp16")
    assert computed == sum(rows) > 0  # only batch sizes 3 and 65 were computed
    assert np.array_equal(wider[:, [0, 2]], expected[:, [1, 3]]) and np.array_equal(wider[:, [1, 3]], alone)

    rows[:] = []
    with_store(store).predict_convs(specs=specs, batch_sizes=[1, 3, 65], gpu=A100, precision="amp_fp16")
    assert rows == []  # the second process's wider rows were kept


def test_another_gpu_precision_or_model_version_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The key holds the model's version (with the code's revision), the GPU's figures and the precision: none of the
    others' rows answer."""
    store, specs = DictStore(), [s for s, _ in layers_of("resnet18")]
    with_store(store).predict_convs(specs=specs, batch_sizes=[4], gpu=A100, precision="fp32")
    rows = lightgbm_rows(monkeypatch)
    for gpu, precision, version in ((T4, "fp32", None), (A100, "amp_fp16", None), (A100, "fp32", "other")):
        model = with_store(store)
        if version:
            model.version = version
        rows[:] = []
        model.predict_convs(specs=specs, batch_sizes=[4], gpu=gpu, precision=precision)
        assert sum(rows) > 0, (gpu.name, precision, version)
    # The same model computed by other code (a PREDICTION_REVISION of its own) reads none of them either.
    monkeypatch.setattr(reference_model, "PREDICTION_REVISION", reference_model.PREDICTION_REVISION + 1)
    rows[:] = []
    with_store(store).predict_convs(specs=specs, batch_sizes=[4], gpu=A100, precision="fp32")
    assert sum(rows) > 0


def test_a_stored_name_is_the_hash_of_its_inputs_as_json() -> None:
    """The key spells out json.dumps of (version, GPU figures, precision, conv), so rows stored before read alike."""
    import dataclasses
    import hashlib
    import json

    from prediction.reference.model import stored_version

    model = from_json_text(MODEL_JSON.read_text())
    for gpu, spec in ((A100, layers_of("resnet18")[0][0]), (T4, {"in_channels": 3, "note": 'é\\"x'})):
        text = json.dumps(
            [
                stored_version(model.version),
                dataclasses.asdict(gpu.filled()),
                "amp_fp16",
                json.dumps(spec, sort_keys=True),
            ],
            sort_keys=True,
            default=str,
        )
        assert model.stored_name(spec, gpu, "amp_fp16") == hashlib.sha256(text.encode()).hexdigest()
