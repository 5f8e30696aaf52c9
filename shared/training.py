"""How a CNN is trained: optimizer, its hyper-parameters that change the work, precision and memory layout.

One model crosses processes (request → worker → agent task → stored rows) so that every measurement and
every fitted model is keyed by the configuration it was made with. Values of momentum and weight decay do
not change the work of a step (the same kernels run for 0.9 and 0.95), only whether they are zero does:
`cost_key` is what predictor models are keyed by.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Optimizer = Literal["sgd", "adam", "adamw"]
Precision = Literal["fp32", "tf32", "amp_fp16", "amp_bf16"]
OPTIMIZERS: tuple[str, ...] = ("sgd", "adam", "adamw")
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "amp_fp16", "amp_bf16")
# PyTorch's own default weight decay per optimizer (torch.optim.SGD, Adam: 0; AdamW: 0.01).
DEFAULT_WEIGHT_DECAY = {"sgd": 0.0, "adam": 0.0, "adamw": 0.01}
# Layer benchmarks time convs in the dtype autocast runs them in. TF32 changes only matmuls: PyTorch
# already lets cuDNN use TF32 for convs in fp32 (torch.backends.cudnn.allow_tf32 defaults to True).
LAYER_PRECISION = {"fp32": "fp32", "tf32": "fp32", "amp_fp16": "fp16", "amp_bf16": "bf16"}
# Whole steps stored before optimizers were configurable were all SGD(momentum=0.9) in fp32 (migration 0018).
LEGACY_SGD_MOMENTUM = 0.9


class TrainConfig(BaseModel):
    """Optimizer (PyTorch defaults, foreach), momentum (SGD only), weight decay, precision, channels_last and
    cudnn.benchmark."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimizer: Optimizer = "sgd"
    momentum: float = Field(default=0.0, ge=0, lt=1)
    weight_decay: float = Field(default=0.0, ge=0, le=1)
    precision: Precision = "fp32"
    channels_last: bool = False
    # torch.backends.cudnn.benchmark: cuDNN times its algorithms once per shape and keeps the fastest (torchvision's
    # reference train.py, timm and DeepLearningExamples turn it on); off is PyTorch's default. No effect on a CPU.
    cudnn_benchmark: bool = False

    @model_validator(mode="after")
    def _momentum_is_sgd_only(self) -> "TrainConfig":
        if self.momentum and self.optimizer != "sgd":
            raise ValueError(f"momentum applies to sgd only; {self.optimizer} has its own betas (leave momentum out)")
        return self

    @property
    def layer_precision(self) -> str:
        """The precision key of this configuration's conv layer benchmarks."""
        return LAYER_PRECISION[self.precision]

    @property
    def op_variant(self) -> str:
        """The key of this configuration's non-conv op benchmarks: the dtype they run in, and the layout."""
        return self.layer_precision + ("/channels_last" if self.channels_last else "")

    @property
    def optimizer_variant(self) -> str:
        """The key of its optimizer-step benchmarks: what changes the step's kernels (fp32 master weights always;
        amp_fp16's GradScaler unscales and checks the gradients first)."""
        name = self.optimizer + ("+momentum" if self.momentum else "") + ("+wd" if self.weight_decay else "")
        return name + ("/grad_scaler" if self.precision == "amp_fp16" else "")

    def wire(self) -> dict[str, object]:
        """The configuration as an agent task carries it: cudnn_benchmark only when on, so an agent that predates
        it takes every other task as before and refuses (rather than mis-measures) a step asked with it on."""
        return self.model_dump(exclude=set() if self.cudnn_benchmark else {"cudnn_benchmark"})

    def cost_key(self) -> str:
        """The work a step does, e.g. 'sgd+momentum/fp32', 'adamw+wd/amp_fp16/channels_last/cudnn_benchmark'."""
        parts = [self.optimizer + ("+momentum" if self.momentum else "") + ("+wd" if self.weight_decay else "")]
        parts.append(self.precision)
        if self.channels_last:
            parts.append("channels_last")
        if self.cudnn_benchmark:
            parts.append("cudnn_benchmark")
        return "/".join(parts)

    def calibrate_command(self, machine_type: str) -> str:
        """The `traincast calibrate` command that measures this configuration on a machine type."""
        flags = [f"--machine {machine_type}", f"--optimizer {self.optimizer}"]
        if self.momentum:
            flags.append(f"--momentum {self.momentum:g}")
        if self.weight_decay:
            flags.append(f"--weight-decay {self.weight_decay:g}")
        flags.append(f"--precision {self.precision}")
        if self.channels_last:
            flags.append("--channels-last")
        if self.cudnn_benchmark:
            flags.append("--cudnn-benchmark")
        return "traincast calibrate " + " ".join(flags)


def config_of(
    *, optimizer: str, precision: str, momentum: float | None = None, weight_decay: float | None = None,
    channels_last: bool = False, cudnn_benchmark: bool = False,
) -> TrainConfig:  # fmt: skip
    """A configuration with PyTorch's default weight decay for the optimizer when none is given."""
    wd = DEFAULT_WEIGHT_DECAY.get(optimizer, 0.0) if weight_decay is None else weight_decay
    return TrainConfig.model_validate(
        {"optimizer": optimizer, "momentum": momentum or 0.0, "weight_decay": wd, "precision": precision}
        | {"channels_last": channels_last, "cudnn_benchmark": cudnn_benchmark}
    )
