"""Reference step predictions kept per worker process, so a CNN's answer on a GPU is computed once for all jobs.

A reference step depends only on the model (its version), the GPU's figures, the training configuration, the
batch sizes and the CNN's convs and workload; the key holds all of them, so a re-registered CNN (other convs or
workload) or another model file is never answered from an old entry. A large job's ~250 (CNN, GPU) answers take
~0.2 s to compute and ~15 KB each to keep.
"""

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import orjson

from prediction.reference import GpuSpecs, ReferenceModel, StepArrays
from shared.cnn.workload import WorkloadJson
from shared.training import TrainConfig

ENTRIES = 2048  # ~30 MB at 256 batch sizes each

_cache: OrderedDict[tuple[Any, ...], StepArrays] = OrderedDict()
_lock = threading.Lock()


def steps(
    model: ReferenceModel,
    *,
    members: Sequence[tuple[int, Mapping[str, Any], int]],
    workload: WorkloadJson,
    batch_sizes: Sequence[int],
    gpu: GpuSpecs,
    training: TrainConfig,
    workload_digest: bytes | None = None,
) -> StepArrays:
    """model.step_arrays for a CNN's members (signature id, spec, count), from the cache when it holds them.

    workload_digest: digest(workload), when the caller has it already.
    """
    key = (
        model.version,
        gpu,
        training,
        tuple(batch_sizes),
        tuple((sig, count) for sig, _spec, count in members),
        workload_digest or digest(workload),
    )
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    computed = model.step_arrays(
        convs=[(spec, count) for _sig, spec, count in members], workload=workload, batch_sizes=batch_sizes,
        gpu=gpu, training=training,
    )  # fmt: skip
    for value in vars(computed).values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)  # shared by every job that reads it
    with _lock:
        _cache[key] = computed
        while len(_cache) > ENTRIES:
            _cache.popitem(last=False)
    return computed


def digest(workload: WorkloadJson) -> bytes:
    """A CNN's workload in 32 bytes: equal workloads, equal digests, whatever their keys' order."""
    return hashlib.sha256(orjson.dumps(workload, option=orjson.OPT_SORT_KEYS)).digest()


def clear() -> None:
    """Forget every entry (tests)."""
    with _lock:
        _cache.clear()
