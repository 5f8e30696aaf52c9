"""A CNN variant stored by this extractor is not read again when a job plans it."""

import pytest

from shared.cnn import registry as cnns
from shared.measurements import layers, ops


def counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the CNNs read (traced) from now on; the reader itself still runs."""
    reads: list[str] = []
    real_read = cnns.read

    def counting_read(**kwargs: object) -> object:
        reads.append(str(kwargs["name"]))
        return real_read(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cnns, "read", counting_read)
    return reads


def test_a_stored_variant_is_not_read_again(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second registration answers from the database; another extractor version reads the CNN again."""
    first = layers.register(name="resnet18", image_size=32)
    reads = counted_reads(monkeypatch)
    again = layers.register(name="resnet18", image_size=32)
    assert sorted(again) == sorted(first) and reads == []
    assert layers.registered(name="resnet18", image_size=32, num_classes=1000) is not None
    assert layers.registered(name="resnet18", image_size=64, num_classes=1000) is None
    # What the workload readers see carries no extractor stamp.
    assert layers.EXTRACTOR_KEY not in layers.workload(name="resnet18", image_size=32, num_classes=1000)
    monkeypatch.setattr(layers, "extractor_version", lambda: "another-extractor")
    assert sorted(layers.register(name="resnet18", image_size=32)) == sorted(first) and reads == ["resnet18"]


def test_register_all_reads_only_the_variants_not_stored(clean_db: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Several CNNs at once: stored ones come from one query, only the others are read; answers as register's."""
    stored = layers.register(name="resnet18", image_size=32)
    reads = counted_reads(monkeypatch)
    both = layers.register_all(names=["squeezenet1_1", "resnet18"], image_size=32)
    assert reads == ["squeezenet1_1"] and list(both) == ["squeezenet1_1", "resnet18"]
    assert sorted(both["resnet18"]) == sorted(stored)
    assert sorted(both["squeezenet1_1"]) == sorted(layers.register(name="squeezenet1_1", image_size=32))
    assert reads == ["squeezenet1_1"]  # stored by register_all: not read again
    other_classes = layers.register_all(names=["resnet18"], image_size=32, num_classes=10)
    assert reads == ["squeezenet1_1", "resnet18"] and other_classes["resnet18"]  # another variant: read


def test_a_plans_op_counts_are_the_members_without_specs(clean_db: None) -> None:
    """ops.counts_of gives members_of's (id, count) in its order, and exactly the ids whose spec is an optimizer."""
    for name in ("resnet18", "squeezenet1_1"):
        layers.register(name=name, image_size=32)
    classes = {"resnet18": 1000, "squeezenet1_1": 1000}
    members = ops.members_of(classes=classes, image_size=32)
    counts, optimizers = ops.counts_of(classes=classes, image_size=32)
    assert counts == {n: [(sig, count) for sig, _spec, count in m] for n, m in members.items()}
    assert all(counts.values())
    assert optimizers == sorted({sig for m in members.values() for sig, spec, _c in m if ops.is_optimizer(spec)})
    assert len(optimizers) == 2  # one optimizer step per CNN (its parameters' shapes differ)
