"""A request's JSON fields spelt as the `traincast predict` flags that set them, so a refusal names what was typed."""

import re

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
