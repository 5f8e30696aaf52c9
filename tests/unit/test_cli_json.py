"""`--json` output of the CLI (cli/client.py dumps): the answer as the API sent it, indented for people and pipes."""

import json

from cli.client import dumps, parse


def test_json_output_is_the_answer_indented() -> None:
    """Values (floats to 6 digits, nulls, nested lists, non-ASCII names) survive; two-space indentation."""
    job = {
        "id": "5f0c",
        "status": "succeeded",
        "result": {
            "predictions": [
                {"cnn": "réseau", "batch_size": 32, "iteration_seconds": 0.0123457, "energy_kwh": None},
                {"cnn": "resnet18", "batch_size": 64, "iteration_seconds": 1e-05, "layer_environments": [3, 4]},
            ],
            "best": [],
        },
    }
    text = dumps(job)
    assert json.loads(text) == job == parse(text.encode())
    assert text.splitlines()[1] == '  "id": "5f0c",' and "réseau" in text
