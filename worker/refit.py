"""Models fitted from whole steps that arrived without a calibration (an imported bundle)."""

from typing import Any

from shared.core.errors import InvalidRequest
from shared.measurements import layers
from shared.measurements import steps as whole_steps
from shared.training import TrainConfig
from worker import predictor


def refit(*, machine_types: list[str]) -> list[dict[str, Any]]:
    """A new model version per machine type and training configuration that has whole steps; what each got."""
    out: list[dict[str, Any]] = []
    for machine_type in sorted(set(machine_types)):
        configs: dict[str, tuple[TrainConfig, set[tuple[str, int]]]] = {}
        for step in whole_steps.measured(machine_type=machine_type):
            config = predictor.step_config(step)
            configs.setdefault(config.cost_key(), (config, set()))[1].add((step["cnn_name"], step["image_size"]))
        for key, (config, variants) in sorted(configs.items()):
            # A step's CNN counts only with its conv layers and ops stored here (an import brings timings only).
            for cnn, image_size in sorted(variants):
                layers.register(name=cnn, image_size=image_size)
            try:
                model = predictor.train(machine_type=machine_type, config=config)
            except InvalidRequest as exc:
                out.append({"machine_type": machine_type, "training": key, "version": None, "note": exc.detail})
                continue
            ev = model["evaluation"]
            out.append({"machine_type": machine_type, "training": key, "version": model["version"],
                        "loco_mape": ev["loco_mape"], "pooled_from": ev["pooled_from"]})  # fmt: skip
    return out
