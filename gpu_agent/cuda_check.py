"""`python -m gpu_agent.cuda_check`: exit 0 only if torch can run on this machine's NVIDIA GPU."""

import subprocess
import sys


def driver_version() -> str:
    """The NVIDIA driver version nvidia-smi reports, or why there is none."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"no nvidia-smi ({exc})"
    return out.stdout.strip() or out.stderr.strip() or f"nvidia-smi exited {out.returncode}"


def main() -> int:
    """Print what torch sees; a one-line reason and exit 1 when CUDA is not usable."""
    import torch

    built = torch.version.cuda or "none (a CPU build)"
    if not torch.cuda.is_available():
        print(
            f"cuda_check: torch {torch.__version__} (CUDA {built}) cannot use a GPU; driver: {driver_version()}. "
            "Use an AMI whose driver supports that CUDA version, or list an older build in FLEET_TORCH_VARIANTS.",
            file=sys.stderr,
        )
        return 1
    # A tiny kernel: is_available() can be true while kernels fail (no image for this GPU's architecture).
    x = torch.ones(8, device="cuda")
    torch.cuda.synchronize()
    name = torch.cuda.get_device_name(0)
    print(f"cuda_check: torch {torch.__version__} (CUDA {built}) on {name}: a kernel ran ({x.sum().item():.0f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
