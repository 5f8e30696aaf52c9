"""A stand-in for `kubectl`, enough to run deploy/k8s's scripts without a cluster.

Every call is appended to FAKE_KUBECTL_LOG as a JSON line: its arguments, and for `apply -f -` the objects read
from standard input. `create secret generic NAME --from-env-file=F` and `create configmap NAME --from-file=K=F`
print the object as `--dry-run=client -o yaml` would; `get job` prints FAKE_KUBECTL_JOB_CONDITIONS (the
conditions whose status is True, as apply.sh's jsonpath selects them).
"""

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import yaml

LOG = Path(os.environ["FAKE_KUBECTL_LOG"])


def option(argv: list[str], name: str) -> list[str]:
    """Every value of --name=value in argv."""
    return [a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")]


def created(argv: list[str]) -> dict[str, Any]:
    """The object `kubectl create secret generic|configmap NAME …` makes."""
    if argv[1] == "secret":
        name = argv[3]
        data: dict[str, str] = {}
        for path in option(argv, "from-env-file"):
            for line in Path(path).read_text().splitlines():
                if line.strip() and not line.startswith("#"):
                    key, _, value = line.partition("=")
                    data[key] = base64.b64encode(value.encode()).decode()
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": data}
    files = dict(f.split("=", 1) for f in option(argv, "from-file"))
    contents = {key: Path(path).read_text() for key, path in files.items()}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": argv[2]}, "data": contents}


def main(argv: list[str]) -> int:
    """Record the call and answer it."""
    if argv[:2] == ["-n", "traincast"]:
        argv = argv[2:]
    record: dict[str, Any] = {"argv": argv}
    if argv[0] == "create":
        print(yaml.safe_dump(created(argv)))
    elif argv[0] == "apply" and "-" in argv:
        record["objects"] = [o for o in yaml.safe_load_all(sys.stdin.read()) if o]
    elif argv[0] == "get":
        print(os.environ.get("FAKE_KUBECTL_JOB_CONDITIONS", ""), end="")
    with LOG.open("a") as log:
        log.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
