"""The reference model's conv predictions kept in PostgreSQL (worker/reference_store.py), read by a new process."""

from typing import Any

import lightgbm as lgb
import numpy as np
import pytest

from prediction.reference.model import MODEL_JSON, from_json_text
from shared.core.db import one, transaction
from tests.unit.test_reference_cache import A100, layers_of
from worker import reference_store

ROWS = "SELECT count(*) AS n, sum(known) AS known FROM reference_conv_times"


def stored() -> dict[str, Any]:
    """How many layers are stored, with how many batch sizes in all."""
    with transaction() as cur:
        cur.execute(ROWS)
        return one(cur)


def test_a_new_process_reads_the_stored_predictions(clean_reference: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One model stores its layers; a model loaded anew answers the same from PostgreSQL without LightGBM."""
    specs = [s for s, _ in layers_of("resnet18")]
    first = reference_store.attached(from_json_text(MODEL_JSON.read_text()))
    expected = first.predict_convs(specs=specs, batch_sizes=[1, 16, 256], gpu=A100, precision="fp32")
    assert stored() == {"n": len({str(sorted(s.items())) for s in specs}), "known": 3 * stored()["n"]}

    rows: list[int] = []
    real = lgb.Booster.predict

    def counted(self: lgb.Booster, data: Any, *a: Any, **k: Any) -> Any:
        rows.append(len(data))
        return real(self, data, *a, **k)

    monkeypatch.setattr(lgb.Booster, "predict", counted)
    second = reference_store.attached(from_json_text(MODEL_JSON.read_text()))
    again = second.predict_convs(specs=specs, batch_sizes=[256, 1, 16], gpu=A100, precision="fp32")
    assert rows == [] and np.array_equal(again, expected[:, [2, 0, 1]])


def test_a_row_never_shrinks(clean_reference: None) -> None:
    """A writer holding fewer batch sizes than the stored row (it read before another wrote) changes nothing."""
    store = reference_store.PostgresLayers()
    wide = (np.arange(12.0).reshape(4, 3), np.zeros((4, 3), dtype=bool), np.array([False, True, True, True]))
    narrow = (np.ones((2, 3)), np.ones((2, 3), dtype=bool), np.array([False, True]))
    store.save("v", {"k": wide})
    store.save("v", {"k": narrow})
    times, tensor, known = store.load(["k", "absent"])["k"]
    assert np.array_equal(times, wide[0]) and not tensor.any() and known.tolist() == [False, True, True, True]


@pytest.fixture
def clean_reference() -> None:
    """No stored reference predictions."""
    with transaction() as cur:
        cur.execute("TRUNCATE reference_conv_times")


def test_a_starting_worker_deletes_other_model_versions(clean_reference: None) -> None:
    """Rows of another model.json's version, or of this one computed by older code (another PREDICTION_REVISION), go
    when a worker starts; this version's stay."""
    from prediction.reference.model import file_version, load, stored_version
    from worker.app import prune_reference_predictions

    assert file_version() == load().version
    store = reference_store.PostgresLayers()
    layer = (np.ones((2, 3)), np.zeros((2, 3), dtype=bool), np.array([False, True]))
    store.save("an-older-model", {"old": layer})
    store.save(file_version(), {"older-code": layer})  # filed before the revision was part of the version
    store.save(stored_version(file_version()), {"current": layer})
    prune_reference_predictions()
    assert set(store.load(["old", "older-code", "current"])) == {"current"}
