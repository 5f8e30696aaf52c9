"""Stored extractions are versioned by what the readers produce: an output change without a version bump fails here."""

import hashlib
import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

from shared.cnn import registry as cnns
from shared.measurements import layers

RECORD = Path(__file__).resolve().parent.parent / "data" / "extraction.json"
# Reference CNNs that take the readers through convs, grouped and depthwise convs, batch and layer norm, GELU,
# concatenation, pooling and linear layers.
CNNS = ("resnet18", "mobilenet_v3_small", "convnext_tiny", "densenet121", "googlenet")
IMAGE = 64


def output_digest(read: list[Any]) -> str:
    """A digest of what the readers produced for some CNNs (ConvLayers): conv and op signatures, counts, workload."""
    digest = hashlib.sha256()
    for cnn in read:
        digest.update(json.dumps({
            "convs": [[sig.hash, n] for sig, n in zip(cnn.signatures, cnn.counts, strict=True)],
            "ops": [[op.hash, n] for op, n in zip(cnn.ops, cnn.op_counts, strict=True)],
            "workload": cnn.workload,
        }, sort_keys=True, default=str).encode())  # fmt: skip
    return digest.hexdigest()[:16]


def current() -> dict[str, object]:
    """The digest of the readers' output for CNNS today, with what it depends on."""
    read = [cnns.read(name=name, image_size=IMAGE) for name in CNNS]
    return {"extraction_version": layers.EXTRACTION_VERSION, "torch": importlib.metadata.version("torch"),
            "torchvision": importlib.metadata.version("torchvision"), "digest": output_digest(read)}  # fmt: skip


def test_the_readers_output_matches_the_digest_recorded_for_this_version() -> None:
    """Same version and libraries, another output: bump EXTRACTION_VERSION and record the new digest."""
    recorded = json.loads(RECORD.read_text())
    now = current()
    if (now["torch"], now["torchvision"]) != (recorded["torch"], recorded["torchvision"]):
        pytest.skip(f"recorded with torch {recorded['torch']}, torchvision {recorded['torchvision']}; "
                    "other versions are other extractors anyway (extractor_version includes them)")  # fmt: skip
    assert now["extraction_version"] >= recorded["extraction_version"]
    if now["extraction_version"] == recorded["extraction_version"]:
        assert now["digest"] == recorded["digest"], (
            "the readers' output changed: bump shared/measurements/layers.py EXTRACTION_VERSION and record "
            f"{json.dumps(now)} in {RECORD}"
        )


def test_the_stamp_follows_the_version_not_the_source() -> None:
    """Another EXTRACTION_VERSION is another extractor; the readers' source text is not part of the stamp."""
    layers.extractor_version.cache_clear()
    try:
        before = layers.extractor_version()
        original = layers.EXTRACTION_VERSION
        layers.EXTRACTION_VERSION = original + 1
        layers.extractor_version.cache_clear()
        assert layers.extractor_version() != before
        layers.EXTRACTION_VERSION = original
        layers.extractor_version.cache_clear()
        assert layers.extractor_version() == before
    finally:
        layers.extractor_version.cache_clear()
