#!/usr/bin/env bash
# Lint, format check and type check.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" api worker prediction gpu_agent shared cli fleet calibration bench tests
# The fleet's CloudFormation template (deploy/aws/); tests/unit/test_fleet_template.py checks its policies.
"$VENV/bin/cfn-lint" deploy/aws/*.yaml
# The fleet's boot script as an instance receives it (fleet/boot.sh under its settings).
"$VENV/bin/python" -c 'from fleet import boot; print(boot.example())' | shellcheck -S warning -
# The Kubernetes manifests (deploy/k8s/), strictly, against the API of the oldest Kubernetes docs/DEPLOY.md
# supports (tests/unit/test_k8s_schema.py holds the same version); tests/unit/test_k8s.py checks them against the code.
mapfile -t manifests < <(find deploy/k8s -name '*.yaml' ! -name kustomization.yaml | sort)
"$VENV/bin/kubernetes-validate" --strict --quiet --kubernetes-version 1.30.0 "${manifests[@]}"
shellcheck -S warning deploy/k8s/*.sh
