"""The fitted reference model: conv layers on any GPU from its specs, and whole training steps."""

import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import lightgbm as lgb
import numpy as np

from prediction.reference import convs, depthwise, grouped
from prediction.reference.specs import GpuSpecs, family_of, gpu_family
from prediction.reference.steps import (
    StepArrays,
    StepEstimate,
    StepParts,
    combine,
    kernel_precision,
    step_parts,
)
from shared.cnn.workload import WorkloadJson
from shared.training import TrainConfig

MODEL_JSON = Path(__file__).resolve().parents[2] / "data" / "reference" / "model.json"
# Layer predictions a model keeps, counted in (layer, batch size) slots of ~28 bytes: the 63,488-point job
# (851 distinct convs x 8 GPUs x batch sizes 1-256) needs 1.75 M.
LAYER_CACHE_SLOTS = 4_000_000
# More work never takes less time: a conv's phase time at a batch size is capped by its times at these fixed sizes
# above it. The learnt correction of log(time / roofline) can overshoot where public layers are few (an H100 CUDA-core
# fp16 conv answered 7x slower at batch 1 than at 8); fixed sizes keep each batch size's answer independent of the
# others a job asks for.
MONOTONE_ANCHORS = np.array([2, 4, 8, 16, 32, 64, 128, 256])
# What a stored layer prediction means besides the model's version: raised when the code computing it changes
# (2: capped by MONOTONE_ANCHORS).
PREDICTION_REVISION = 2


@dataclass
class _Layer:
    """One conv's predicted phase times on one GPU in one precision, indexed by batch size (grown on demand)."""

    times: np.ndarray  # (n, 3) ms
    tensor: np.ndarray  # (n, 3) bool: on tensor cores
    known: np.ndarray  # (n,) bool

    def grow(self, size: int) -> None:
        """Room for batch sizes below `size`."""
        extra = size - len(self.known)
        if extra > 0:
            self.times = np.concatenate([self.times, np.zeros((extra, 3))])
            self.tensor = np.concatenate([self.tensor, np.zeros((extra, 3), dtype=bool)])
            self.known = np.concatenate([self.known, np.zeros(extra, dtype=bool)])


@lru_cache(maxsize=256)
def _gpu_json(gpu: GpuSpecs) -> str:
    return json.dumps(dataclasses.asdict(gpu), sort_keys=True, default=str)


_json_of = json.JSONEncoder().encode  # a str's JSON text, as json.dumps writes it


def _spec_key(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


# A stored layer: times (n, 3) ms, on tensor cores (n, 3), known (n,), indexed by batch size.
Stored = tuple[np.ndarray, np.ndarray, np.ndarray]


class LayerStore(Protocol):
    """Where layer predictions outlive a process (worker/reference_store.py: PostgreSQL); keys name model and inputs."""

    def load(self, keys: list[str]) -> dict[str, Stored]:
        """The stored layers among these keys."""
        ...

    def save(self, version: str, layers: dict[str, Stored]) -> None:
        """Keep these layers (each holding at least what was loaded for its key)."""
        ...


class ReferenceModel:
    """Predicts conv phases and whole steps from a GPU's spec sheet (fitted on public measurements only)."""

    def __init__(self, params: Mapping[str, Any], version: str = "unversioned") -> None:
        self.params = dict(params)
        self.version = version
        self.accuracy: dict[str, Any] = dict(params.get("accuracy", {}))
        conv = params["conv"]
        if tuple(params.get("features", convs.FEATURES)) != convs.FEATURES:
            raise ValueError("model.json was fitted with other conv features: run python -m prediction.reference.fit")
        self._forward = lgb.Booster(model_str=conv["forward"])
        self._ratios = {p: lgb.Booster(model_str=conv[p]) for p in convs.PHASES[1:]}
        self._clip = {p: tuple(v) for p, v in conv["clip"].items()}
        # GPU families our agent timed layers of: log(measured / the public model) per phase (layerfit).
        self._residual = {
            family: ({p: lgb.Booster(model_str=entry[p]) for p in convs.PHASES}, entry["clip"])
            for family, entry in conv.get("families", {}).items()
        }
        self._step: dict[str, float] = dict(params["step"])
        # GPU families with whole steps of our own have constants fitted on them at full weight; every other GPU
        # gets the shared ones, fitted with each family weighing at most the median family (fit.fit_params).
        self._families: dict[str, dict[str, float]] = {k: dict(v) for k, v in params.get("step_families", {}).items()}
        # (GPU, precision, conv spec) -> its predictions by batch size; belongs to this model (its version).
        self._layers: OrderedDict[tuple[GpuSpecs, str, str], _Layer] = OrderedDict()
        self._slots = 0
        self._lock = threading.Lock()
        # Set by the worker: layers predicted by any process are read from it before LightGBM runs.
        self.store: LayerStore | None = None

    def _log_ratio(self, phase: str, x: np.ndarray) -> np.ndarray:
        booster = self._forward if phase == "forward" else self._ratios[phase]
        lo, hi = self._clip[phase]
        return np.clip(booster.predict(x, num_threads=1), lo, hi)

    def log_multipliers(self, feats: np.ndarray, family: str | None = None) -> np.ndarray:
        """log(time / roofline) per phase (3, ...) from convs.features output (3, ..., F), on a GPU of this family
        (specs.family_of: its own layers' correction where our agent measured some)."""
        flat = [feats[p].reshape(-1, feats.shape[-1]) for p in range(3)]
        fwd = self._log_ratio("forward", flat[0])
        # backward = predicted forward x (its roofline / forward's) x learned relative efficiency
        out = np.stack([fwd, *(fwd + self._log_ratio(phase, flat[p]) for p, phase in enumerate(convs.PHASES[1:], 1))])
        residual = self._residual.get(family or "")
        if residual is not None:
            boosters, clips = residual
            out += np.stack([
                np.clip(boosters[phase].predict(flat[p], num_threads=1), *clips[phase])
                for p, phase in enumerate(convs.PHASES)
            ])  # fmt: skip
        return out.reshape(3, *feats.shape[1:-1])

    def conv_from_features(self, feats: np.ndarray, roof: np.ndarray, family: str | None = None) -> np.ndarray:
        """Phase times (..., 3) ms from convs.features output (3, ..., F) and rooflines (3, ...)."""
        return np.moveaxis(roof * np.exp(self.log_multipliers(feats, family)), 0, -1)

    def _times(
        self, specs: Sequence[Mapping[str, Any]], batch: np.ndarray, gpu: GpuSpecs, precision: str, tensor: np.ndarray
    ) -> np.ndarray:
        # Every batch size is predicted on its own (never interpolated between others), so a point's answer
        # does not depend on which other batch sizes a job asks for.
        feats, roof, _ = convs.features(specs, batch.astype(int).tolist(), gpu, precision, tensor)
        return self.conv_from_features(feats, roof, family_of(gpu.name))

    def _convs(
        self, specs: Sequence[Mapping[str, Any]], batch_sizes: Sequence[int], gpu: GpuSpecs, precision: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Times (L, B, 3) and whether each runs on tensor cores (L, B, 3), from the layer cache.

        A conv's prediction at a batch size depends on nothing else (every phase, layer and batch size is
        predicted on its own), so each (GPU, precision, conv, batch size) is computed once per model.
        """
        batch = np.asarray(batch_sizes, dtype=float)
        if len(batch) and batch.min() < 1:
            raise ValueError("batch sizes must be at least 1")
        gpu = gpu.filled()
        sizes = np.asarray(batch, dtype=int)
        keys = [(gpu, precision, _spec_key(s)) for s in specs]
        with self._lock:
            entries = {k: self._layers.get(k) for k in keys}
            for k, entry in entries.items():
                if entry is not None:
                    self._layers.move_to_end(k)
        todo = {k: i for i, k in enumerate(keys) if len(_lacking(entries[k], sizes))}
        if todo and self.store is not None:
            self._load_stored(entries, todo)
            todo = {k: i for k, i in todo.items() if len(_lacking(entries[k], sizes))}
        if todo:
            self._fill(entries, todo, specs, sizes, gpu, precision)
            if self.store is not None:
                with self._lock:
                    computed = {self.store_key(k): _arrays(entries[k]) for k in todo}
                self.store.save(stored_version(self.version), computed)
        out = np.empty((len(keys), len(sizes), 3))
        on_tensor = np.empty((len(keys), len(sizes), 3), dtype=bool)
        for i, k in enumerate(keys):
            entry = entries[k]
            assert entry is not None
            out[i] = entry.times[sizes]
            on_tensor[i] = entry.tensor[sizes]
        return out, on_tensor

    def _fill(
        self,
        entries: dict[tuple[GpuSpecs, str, str], _Layer | None],
        todo: dict[tuple[GpuSpecs, str, str], int],
        specs: Sequence[Mapping[str, Any]],
        sizes: np.ndarray,
        gpu: GpuSpecs,
        precision: str,
    ) -> None:
        """Predict the convs in `todo` (key -> index in specs) at the batch sizes they lack, and cache them."""
        wanted = np.unique(sizes)
        missing = np.unique(np.concatenate([_lacking(entries[k], wanted) for k in todo]))
        times, tensor = self._predict([specs[i] for i in todo.values()], missing.astype(float), gpu, precision)
        with self._lock:
            for j, k in enumerate(todo):
                self._put(k, entries, missing, times[j], tensor[j])
            self._evict(keep=len(todo))

    def _put(
        self,
        key: tuple[GpuSpecs, str, str],
        entries: dict[tuple[GpuSpecs, str, str], _Layer | None],
        at: np.ndarray,
        times: np.ndarray,
        tensor: np.ndarray,
    ) -> None:
        """Under the lock: a layer's predictions at batch sizes `at`, into its cached entry (made if need be)."""
        held = self._layers.get(key)
        entry = held or entries[key] or _Layer(np.zeros((0, 3)), np.zeros((0, 3), dtype=bool), np.zeros(0, dtype=bool))
        before = len(entry.known) if held is not None else 0
        if len(at):
            entry.grow(int(at.max()) + 1)
        entry.times[at] = times
        entry.tensor[at] = tensor
        entry.known[at] = True
        if held is None:
            self._layers[key] = entry
        self._slots += len(entry.known) - before
        entries[key] = entry

    def _evict(self, keep: int) -> None:
        """Under the lock: drop the least recently used layers while over LAYER_CACHE_SLOTS, keeping `keep`."""
        while self._slots > LAYER_CACHE_SLOTS and len(self._layers) > keep:
            _key, dropped = self._layers.popitem(last=False)
            self._slots -= len(dropped.known)

    def store_key(self, key: tuple[GpuSpecs, str, str]) -> str:
        """A layer's name in the store: this model's version, the GPU's figures, the precision and the conv."""
        gpu, precision, spec = key
        # json.dumps([version, asdict(gpu), precision, spec], sort_keys=True) spelt out, the GPU's part made once per
        # GPU: asdict per key was a third of a new process's first large job (4,864 keys).
        text = f"[{_json_of(stored_version(self.version))}, {_gpu_json(gpu)}, {_json_of(precision)}, {_json_of(spec)}]"
        return hashlib.sha256(text.encode()).hexdigest()

    def stored_name(self, spec: Mapping[str, Any], gpu: GpuSpecs, precision: str) -> str:
        """The store's name for one conv's predictions on this GPU in this kernel precision (what _convs saves)."""
        return self.store_key((gpu.filled(), precision, _spec_key(spec)))

    def _load_stored(
        self, entries: dict[tuple[GpuSpecs, str, str], _Layer | None], todo: dict[tuple[GpuSpecs, str, str], int]
    ) -> None:
        """Merge what the store holds for the layers in `todo` into the cache (and `entries`)."""
        assert self.store is not None
        names = {self.store_key(k): k for k in todo}
        found = self.store.load(list(names))
        with self._lock:
            for name, (times, tensor, known) in found.items():
                at = np.flatnonzero(known)  # a stored value equals what this model would compute: overwritten alike
                self._put(names[name], entries, at, times[at], tensor[at])
            self._evict(keep=len(todo))

    def cached_slots(self) -> int:
        """(layer, batch size) slots the layer cache holds."""
        with self._lock:
            return self._slots

    def _predict(
        self, specs: Sequence[Mapping[str, Any]], batch: np.ndarray, gpu: GpuSpecs, precision: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Times (L, B, 3) and tensor-core use (L, B, 3), computed (gpu filled, batch sizes at least 1), each phase's
        time at most its time at any of MONOTONE_ANCHORS above its batch size."""
        anchors = MONOTONE_ANCHORS[batch.min() < MONOTONE_ANCHORS] if len(batch) else MONOTONE_ANCHORS[:0]
        sizes = np.concatenate([batch, anchors.astype(float)])
        times, on_tensor = self._uncapped(specs, sizes, gpu, precision)
        n = len(batch)
        if len(anchors):
            # the least time at each anchor or any above it
            floor = np.minimum.accumulate(times[:, n:][:, ::-1], axis=1)[:, ::-1]
            above = np.searchsorted(anchors, batch, side="right")  # the first anchor above each batch size
            capped = above < len(anchors)
            times[:, :n][:, capped] = np.minimum(times[:, :n][:, capped], floor[:, above[capped]])
        return times[:, :n], on_tensor[:, :n]

    def _uncapped(
        self, specs: Sequence[Mapping[str, Any]], batch: np.ndarray, gpu: GpuSpecs, precision: str
    ) -> tuple[np.ndarray, np.ndarray]:
        """Times (L, B, 3) and tensor-core use (L, B, 3), each batch size predicted on its own."""
        geo = convs.geometry(specs)
        tensor = convs.uses_tensor_cores(geo, gpu, precision)
        simt = self._times(specs, batch, gpu, precision, np.zeros_like(tensor))
        if tensor.any():
            # cuDNN picks the fastest algorithm per phase: where tensor cores are barely faster than the
            # CUDA cores (GeForce TF32 runs at the FP32 rate), a CUDA-core kernel (e.g. Winograd) can win.
            # A conv that cannot use them has the CUDA-core time on both paths: only the others are predicted.
            fast = simt.copy()
            fast[tensor] = self._times([s for s, t in zip(specs, tensor, strict=True) if t], batch, gpu, precision,
                                       tensor[tensor])  # fmt: skip
            on_tensor = tensor[:, None, None] & (fast < simt)
            out = np.where(on_tensor, fast, simt)
        else:
            on_tensor, out = np.zeros(simt.shape, dtype=bool), simt
        coef = self.params.get("depthwise", {}).get(precision)
        dw = depthwise.is_depthwise(geo)
        if coef is not None and dw.any():
            # their cost is the cycles their kernels issue, learnt from measured layers (depthwise.py)
            out[dw] = depthwise.times(convs.geometry([s for s, d in zip(specs, dw, strict=True) if d]), batch, gpu,
                                      precision, coef)  # fmt: skip
            on_tensor[dw] = False
        # a transposed conv's forward is its direct twin's data gradient and vice versa
        out[geo.transposed] = out[geo.transposed][..., [1, 0, 2]]
        on_tensor[geo.transposed] = on_tensor[geo.transposed][..., [1, 0, 2]]
        return out, on_tensor

    def predict_convs(
        self,
        *,
        specs: Sequence[Mapping[str, Any]],
        batch_sizes: Sequence[int],
        gpu: GpuSpecs,
        precision: str = "fp32",
    ) -> np.ndarray:
        """Times (len(specs), len(batch_sizes), 3) in ms: forward, backward-data, backward-weight."""
        if not specs:
            return np.zeros((0, len(batch_sizes), 3))
        return self._convs(specs, batch_sizes, gpu, precision)[0]

    def conv_paths(
        self, convs: Sequence[tuple[Mapping[str, Any], int]], batch_sizes: Sequence[int], gpu: GpuSpecs, precision: str,
        channels_last: bool = False,
    ) -> np.ndarray:  # fmt: skip
        """Uncalibrated conv time of one step (B, 3 phases, 3 paths: on tensor cores, on CUDA cores, depthwise), ms;
        precision: the training's (fp32, tf32, amp_fp16, amp_bf16).

        Grouped convs that are not depthwise (ResNeXt's, RegNet's) take the path their channels per group allow: the
        depthwise path's multipliers are learnt on depthwise convs only (MobileNet-like nets), whose cost per FLOP
        is of another kind. Under channels_last they keep their NCHW time and pay the layout copies (grouped.py)."""
        out = np.zeros((len(batch_sizes), 3, 3))
        if not convs:
            return out
        specs = [s for s, _ in convs]
        per_layer, tensor = self._convs(specs, batch_sizes, gpu, kernel_precision(precision))
        depthwise_ = np.array([1 < int(s.get("groups", 1)) == int(s["in_channels"]) for s in specs])
        cudnn = self.params.get("depthwise", {}).get(depthwise.CUDNN_FP16)
        if precision == "amp_fp16" and cudnn is not None and depthwise_.any():
            per_layer = self._cudnn_depthwise(
                per_layer, specs, np.flatnonzero(depthwise_), np.asarray(batch_sizes, dtype=float), gpu, cudnn
            )
        if channels_last:
            batch = np.asarray(batch_sizes, dtype=float)
            per_layer = grouped.nhwc_times(per_layer, tensor, specs, batch, gpu, precision, self.constants(gpu))
        weighted = per_layer * np.array([float(n) for _, n in convs])[:, None, None]
        # the first conv reads the images, which need no gradient: autograd skips its data gradient
        weighted[0, :, 1] -= per_layer[0, :, 1]
        dw = depthwise_[:, None, None]
        out[..., 0] = np.where(tensor & ~dw, weighted, 0.0).sum(axis=0)
        out[..., 1] = np.where(~tensor & ~dw, weighted, 0.0).sum(axis=0)
        out[..., 2] = np.where(dw, weighted, 0.0).sum(axis=0)
        return out

    @staticmethod
    def _cudnn_depthwise(
        per_layer: np.ndarray, specs: Sequence[Mapping[str, Any]], candidates: np.ndarray, batch: np.ndarray,
        gpu: GpuSpecs, coef: Sequence[Sequence[float]],
    ) -> np.ndarray:  # fmt: skip
        """per_layer (L, B, 3) with the fp16 depthwise convs (among specs[candidates]) PyTorch runs on cuDNN at stride
        1 costed as cuDNN's kernels (depthwise.cudnn_costed)."""
        on = {int(i): m for i in candidates if (m := depthwise.cudnn_costed(specs[int(i)], batch)).any()}
        if not on:
            return per_layer
        rows = np.array(list(on))
        times = depthwise.times(convs.geometry([specs[i] for i in on]), batch, gpu.filled(), "amp_fp16", coef)
        out = per_layer.copy()
        out[rows] = np.where(np.array(list(on.values()))[..., None], times, per_layer[rows])
        return out

    def predict_steps(
        self,
        *,
        convs: Sequence[tuple[Mapping[str, Any], int]],
        workload: WorkloadJson,
        batch_sizes: Sequence[int],
        gpu: GpuSpecs,
        training: TrainConfig | None = None,
        autotuned: bool = False,
    ) -> list[StepEstimate]:
        """One estimate per batch size of a whole training step (forward, backward, optimizer).

        training: optimizer, precision, layout and cudnn.benchmark (default SGD without momentum, fp32, NCHW, off).
        """
        return self.step_arrays(
            convs=convs, workload=workload, batch_sizes=batch_sizes, gpu=gpu, training=training, autotuned=autotuned
        ).estimates()

    def step_parts(
        self,
        *,
        convs: Sequence[tuple[Mapping[str, Any], int]],
        workload: WorkloadJson,
        batch_sizes: Sequence[int],
        gpu: GpuSpecs,
        training: TrainConfig,
        autotuned: bool = False,
    ) -> StepParts:
        """A step's uncalibrated parts (what the fit calibrates; step_arrays combines them).

        autotuned: cudnn.benchmark on where the training configuration does not say so itself (the public sets
        time with it on); training.cudnn_benchmark and training.channels_last are the job's settings.
        """
        autotuned = autotuned or training.cudnn_benchmark
        gpu = gpu.filled()
        paths = self.conv_paths(convs, batch_sizes, gpu, training.precision, training.channels_last)
        batch = np.asarray(batch_sizes, dtype=float)
        return step_parts(paths, workload, batch, gpu, training, self.constants(gpu), autotuned)

    def step_arrays(
        self,
        *,
        convs: Sequence[tuple[Mapping[str, Any], int]],
        workload: WorkloadJson,
        batch_sizes: Sequence[int],
        gpu: GpuSpecs,
        training: TrainConfig | None = None,
        autotuned: bool = False,
    ) -> StepArrays:
        """predict_steps as arrays over the batch sizes (what a large job's assembly reads)."""
        training = training or TrainConfig()
        parts = self.step_parts(
            convs=convs, workload=workload, batch_sizes=batch_sizes, gpu=gpu, training=training, autotuned=autotuned
        )
        return combine(parts, np.asarray(batch_sizes, dtype=float), self.constants(gpu))

    def constants(self, gpu: GpuSpecs) -> dict[str, float]:
        """The whole-step constants of a GPU: its own where our steps of that GPU model were fitted."""
        return self._families.get(gpu_family(gpu.name), self._step)


def _arrays(entry: _Layer | None) -> Stored:
    assert entry is not None
    return entry.times.copy(), entry.tensor.copy(), entry.known.copy()


def _lacking(entry: _Layer | None, sizes: np.ndarray) -> np.ndarray:
    """The batch sizes among `sizes` an entry (None: no entry) holds no prediction for."""
    if entry is None:
        return sizes
    inside = sizes < len(entry.known)
    known = np.zeros(len(sizes), dtype=bool)
    known[inside] = entry.known[sizes[inside]]
    return sizes[~known]


def from_json_text(text: str) -> ReferenceModel:
    """A model from model.json text; its version is the text's sha256."""
    return ReferenceModel(json.loads(text), _version(text))


def stored_version(version: str) -> str:
    """What stored layer predictions of a model version are filed under: the version and PREDICTION_REVISION."""
    return f"{version}-r{PREDICTION_REVISION}"


def file_version() -> str:
    """The version of data/reference/model.json's model, without loading it."""
    return _version(MODEL_JSON.read_text())


def _version(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def load() -> ReferenceModel:
    """The fitted model of data/reference/model.json (cached)."""
    return from_json_text(MODEL_JSON.read_text())
