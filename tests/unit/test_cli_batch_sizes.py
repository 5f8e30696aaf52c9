"""The CLI's one batch-size parser, used by `predict` and `calibrate` alike."""

import pytest

from cli.admin import calibration_plan
from cli.client import CliError
from cli.jobs import batch_size_list, parse_batch_sizes
from cli.main import build_parser


def test_list_and_range_forms() -> None:
    """A comma list stays a list; a range is {min, max, step} for the API and spelt out for calibration."""
    assert parse_batch_sizes("8, 16,32") == [8, 16, 32]
    assert parse_batch_sizes("1-256:8") == {"min": 1, "max": 256, "step": 8}
    assert batch_size_list("2-10:4") == [2, 6, 10] and batch_size_list(None) == []
    with pytest.raises(CliError, match="--batch-sizes 'x8'"):
        parse_batch_sizes("x8")


def test_calibrate_takes_a_range_too() -> None:
    """`calibrate --batch-sizes 2-6:2` measures 2, 4 and 6 at each image size."""
    flags = ["calibrate", "--machine", "local", "--image-size", "32", "--batch-sizes", "2-6:2"]
    args = build_parser().parse_args(flags)
    assert calibration_plan(args).grid() == ((32, (2, 4, 6)),)
