"""A request's JSON fields spelt as the `traincast predict` flags that set them, so a refusal names what was typed;
the training flags that predict, calibrate and train share."""

import argparse
import re

from pydantic import ValidationError

from shared.core.errors import InvalidRequest
from shared.training import OPTIMIZERS, PRECISIONS, TrainConfig, config_of

# Each field of a prediction request (shared/jobs/request.py) and the flag of `traincast predict` that sets it.
PREDICT = {
    "cnns": "the CNN names", "machines": "--machine", "batch_sizes": "--batch-sizes",
    "batch_sizes.min": "--batch-sizes (the range's first)", "batch_sizes.max": "--batch-sizes (the range's last)",
    "batch_sizes.step": "--batch-sizes (the range's step)", "epochs": "--epochs", "dataset_size": "--dataset-size",
    "image_size": "--image-size", "optimizer": "--optimizer", "momentum": "--momentum",
    "weight_decay": "--weight-decay", "precision": "--precision", "gpus": "--gpus", "nodes": "--nodes",
    "internode_gbps": "--internode-gbps", "allreduce": "--allreduce", "torus_x": "--torus-x", "schedule": "--schedule",
    "input": "--input", "input.dataloader_workers": "--dataloader-workers", "input.network_gbps": "--network-gbps",
    "deadline_hours": "--deadline-hours", "budget_usd": "--budget-usd",
}  # fmt: skip
# Where a refusal says what is wrong: a field's path before ": " (`nodes.0: `, `schedule.1.epochs: `). List indexes
# are dropped (the flag takes the whole list); words elsewhere in the message are left alone.
_WHERE = re.compile(r"(?<![\w.-])([a-z_]+(?:\.(?:\d+|[a-z_]+))*)(?=: )")
# The API's pointers to its own listings, as the commands that list the same.
COMMANDS = {"see GET /v1/cnns": "see `traincast cnns`", "see GET /v1/machines": "see `traincast machines list`"}


def named(message: str, fields: dict[str, str] = PREDICT) -> str:
    """The message with each field path it is about spelt as the flag of its longest known prefix (others unchanged),
    and the listings it points to as the commands that print them."""

    def flag(m: re.Match[str]) -> str:
        parts = [p for p in m.group(1).split(".") if not p.isdigit()]
        known = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
        return next((fields[k] for k in known if k in fields), m.group(1))

    for api, command in COMMANDS.items():
        message = message.replace(api, command)
    return _WHERE.sub(flag, message)


def add_training_flags(p: argparse.ArgumentParser) -> None:
    """--optimizer, --momentum, --weight-decay, --precision, --channels-last, --cudnn-benchmark (shared/training.py)."""
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="sgd", help="torch.optim's (default: sgd)")
    p.add_argument("--momentum", type=float, default=0.0, help="SGD only (default 0, as PyTorch)")
    p.add_argument("--weight-decay", type=float, default=None, help="default PyTorch's: 0, or 0.01 for adamw")
    p.add_argument("--precision", choices=list(PRECISIONS), default="fp32", help="fp32 (PyTorch's defaults), tf32, or "
                   "autocast amp_fp16 / amp_bf16 (default: fp32)")  # fmt: skip
    p.add_argument("--channels-last", action="store_true", help="model and images in channels_last memory format "
                   "(default: NCHW, PyTorch's)")  # fmt: skip
    p.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark = True, as "
                   "torchvision's train.py, timm and DeepLearningExamples set it "
                   "(default: off, PyTorch's)")  # fmt: skip


def training_of(args: argparse.Namespace) -> TrainConfig:
    """The training configuration the flags name; a bad combination is a one-line error."""
    try:
        return config_of(
            optimizer=args.optimizer, precision=args.precision, momentum=args.momentum,
            weight_decay=args.weight_decay, channels_last=args.channels_last, cudnn_benchmark=args.cudnn_benchmark,
        )  # fmt: skip
    except ValidationError as exc:
        reasons = (
            f"{'.'.join(map(str, e['loc'])) + ': ' if e['loc'] else ''}{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        )
        raise InvalidRequest(named("; ".join(reasons))) from None
