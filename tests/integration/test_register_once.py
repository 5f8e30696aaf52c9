"""A CNN variant stored by this extractor is not read again when a job plans it."""

import pytest

from shared.cnn import registry as cnns
from shared.measurements import layers


def test_a_stored_variant_is_not_read_again(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second registration answers from the database; another extractor version reads the CNN again."""
    first = layers.register(name="resnet18", image_size=32)
    reads: list[str] = []
    real_read = cnns.read

    def counting_read(**kwargs: object) -> object:
        reads.append(str(kwargs["name"]))
        return real_read(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cnns, "read", counting_read)
    again = layers.register(name="resnet18", image_size=32)
    assert sorted(again) == sorted(first) and reads == []
    assert layers.registered(name="resnet18", image_size=32, num_classes=1000) is not None
    assert layers.registered(name="resnet18", image_size=64, num_classes=1000) is None
    # What the workload readers see carries no extractor stamp.
    assert layers.EXTRACTOR_KEY not in layers.workload(name="resnet18", image_size=32, num_classes=1000)
    monkeypatch.setattr(layers, "extractor_version", lambda: "another-extractor")
    assert sorted(layers.register(name="resnet18", image_size=32)) == sorted(first) and reads == ["resnet18"]
