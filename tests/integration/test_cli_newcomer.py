"""A newcomer's CLI: "did you mean", `traincast cnns`, providers as the page names them, defaults in
--help, the machine type said when none is given, a quiet closed pipe, one-line human errors, honest progress."""

import argparse
import subprocess
import uuid
from pathlib import Path
from typing import Any

from cli import jobs as cli_jobs
from cli import main as cli_main
from tests.integration.test_end_to_end import TRAINCAST, cli
from tests.support.onnx_models import tutorial_export
from tests.support.stack import Stack, http


def test_typos_get_a_suggestion_in_one_line(no_agent: Stack) -> None:
    """resnet5O and P5.48XLARGE: 'did you mean' with the right names, one line on stderr, exit 1."""
    out = cli(no_agent, "predict", "resnet5O", "--machine", "p5.48xlarge")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "did you mean 'resnet50'?" in out.stderr and "see `traincast cnns`" in out.stderr, out.stderr
    out = cli(no_agent, "predict", "resnet50", "--machine", "P5.48XLARGE")
    assert out.returncode == 1 and "did you mean 'p5.48xlarge'?" in out.stderr, out.stderr
    body = {"cnns": ["resnet50"], "machines": ["zzzz-nothing"], "batch_sizes": [8]}
    r = http.post(f"{no_agent.url}/v1/jobs", json=body)
    assert r.status_code == 422 and "did you mean" not in r.json()["detail"]  # nothing near: no guess


def test_a_bad_range_step_is_one_human_line(no_agent: Stack) -> None:
    """--batch-sizes 16-256:0: the range's step named by the flag, no pydantic branch names or 'valid list' noise;
    the door's refusals of other flags name the flags too, not the request's JSON fields."""
    out = cli(no_agent, "predict", "resnet50", "--machine", "p5.48xlarge", "--batch-sizes", "16-256:0")
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert "--batch-sizes (the range's step): Input should be greater than or equal to 1" in out.stderr, out.stderr
    for flag, value in (("--nodes", "1,0"), ("--image-size", "7"), ("--weight-decay", "-1")):
        bad = cli(no_agent, "predict", "resnet50", "--machine", "p5.48xlarge", flag, value)
        assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
        assert f"{flag}: Input should be greater than" in bad.stderr, bad.stderr
    for noise in ("function-after", "list[int]", "valid list", "BatchRange"):
        assert noise not in out.stderr, out.stderr


def test_cnns_and_providers_as_the_page_names_them(no_agent: Stack) -> None:
    """`traincast cnns` lists resnet50; `machines list --provider google` lists GCP types; an unknown provider
    fails loudly; `| head` closes the pipe without a traceback."""
    out = cli(no_agent, "cnns")
    assert out.returncode == 0 and any(
        line.split()[:2] == ["resnet50", "torchvision"] for line in out.stdout.splitlines()
    )
    google = cli(no_agent, "machines", "list", "--provider", "Google")
    rows = google.stdout.splitlines()[2:]
    assert google.returncode == 0 and rows and all(row.split()[1] == "gcp" for row in rows), google.stdout
    bad = cli(no_agent, "machines", "list", "--provider", "ibm")
    assert bad.returncode == 1 and "no machine type has that provider" in bad.stderr and "gcp" in bad.stderr
    env = {**no_agent.env, "TRAINCAST_API_URL": no_agent.url}
    piped = subprocess.run(f"{TRAINCAST} machines list | head -n 2", shell=True, env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
    assert piped.stdout.count("\n") == 2 and "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


def test_cnns_add_registers_the_tutorials_export_and_says_its_warning(no_agent: Stack, tmp_path: Path) -> None:
    """`traincast cnns add NAME FILE`: the tutorial's ONNX export (batch 1, eval mode) registered, its eval-mode
    warning on stderr, listed, then deleted; a missing file is one line."""
    path = tmp_path / "model.onnx"
    path.write_bytes(tutorial_export("resnet18"))
    name = f"cli-tutorial-{uuid.uuid4().hex[:6]}"
    out = cli(no_agent, "cnns", "add", name, str(path))
    assert out.returncode == 0, out.stderr
    assert f"registered {name} (onnx, 11.7 M parameters), usable at 224 px only" in out.stdout
    assert out.stderr.startswith("warning: looks like an eval-mode export")
    assert any(line.split()[:2] == [name, "onnx"] for line in cli(no_agent, "cnns").stdout.splitlines())
    assert cli(no_agent, "cnns", "delete", name).stdout.strip() == f"deleted {name}"
    missing = cli(no_agent, "cnns", "add", "x", str(tmp_path / "nope.onnx"))
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "cannot read" in missing.stderr


def test_predict_says_its_machine_and_help_shows_defaults(no_agent: Stack) -> None:
    """No --machine: a line on stderr says local was used (before it is sent: here to an API that is not there, so the
    job does not wait for an agent); --help shows each default."""
    out = cli(no_agent, "--api-url", "http://127.0.0.1:9", "predict", "resnet18", "--batch-sizes", "1")
    assert out.returncode == 1 and "no --machine given: predicting for local" in out.stderr, out.stderr
    subparsers = cli_main.build_parser()._subparsers
    assert subparsers is not None
    commands = subparsers._group_actions[0]
    assert isinstance(commands, argparse._SubParsersAction)
    text = commands.choices["predict"].format_help()
    text = " ".join(text.split())  # argparse wraps lines where it likes
    for default in (
        "(default: 8,16,32,64)",
        "(default: 90)",
        "(default: 1281167)",
        "(default: 224)",
        "(default: memory)",
    ):
        assert default in text, text


def test_a_reference_answer_says_its_benchmarks_are_queued_not_stuck() -> None:
    """A job answered at once with its layer benchmarks still to come: no '0/736' bar, and no "queued" where no agent
    will take them."""
    job: dict[str, Any] = {"status": "succeeded", "progress": {"layer_benchmarks": {"needed": 736, "done": 0}}}
    line = cli_jobs.progress_bar(job)
    assert line == "succeeded: answered from reference; 736 layer benchmarks queued for their agents"
    machines = {"g4dn.xlarge": {"needed": 400, "done": 0, "pending": 400, "agent_alive": True},
                "p5.48xlarge": {"needed": 336, "done": 0, "pending": 336, "agent_alive": False}}  # fmt: skip
    job["progress"]["machines"] = machines
    assert cli_jobs.progress_bar(job) == (
        "succeeded: answered from reference; 400 layer benchmarks queued for their agents; no agent serves "
        "p5.48xlarge: not measured until one does (traincast agents)"
    )
    running = {"status": "running", "progress": {"layer_benchmarks": {"needed": 10, "done": 5}}}
    assert "5/10 layer benchmarks" in cli_jobs.progress_bar(running)
