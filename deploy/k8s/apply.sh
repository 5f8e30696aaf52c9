#!/usr/bin/env bash
# Install or upgrade Traincast on Kubernetes (docs/DEPLOY.md): the migrate + db-logins Job runs to completion
# first, as compose's one-shots do before its services; only then are the apps applied. Run create-secrets.sh
# once before the first run. MIGRATE_TIMEOUT_S (default 900) bounds the wait.
set -euo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
NS=traincast
JOB=traincast-migrate
TIMEOUT_S=${MIGRATE_TIMEOUT_S:-900}

# A Job's pod template cannot change, and a finished Job would not run again: the old one goes, a new one
# applies this version's migrations and sets the logins' passwords again (a changed password is rotated).
kubectl -n "$NS" delete job "$JOB" --ignore-not-found --wait=true
kubectl apply -k "$DIR" -l traincast.dev/stage=setup

waited=0
while true; do
  conditions=$(kubectl -n "$NS" get job "$JOB" -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
  case " $conditions " in
    *" Complete "*) break ;;
    *" Failed "*) reason="failed" ;;
    *) reason="" ;;
  esac
  if [ -z "$reason" ] && [ "$waited" -ge "$TIMEOUT_S" ]; then
    reason="did not finish within ${TIMEOUT_S} s"
  fi
  if [ -n "$reason" ]; then
    kubectl -n "$NS" logs "job/$JOB" --all-containers --tail=50 >&2 || true
    echo "error: the migrate Job $reason; the apps were left as they were" >&2
    exit 1
  fi
  sleep 5
  waited=$((waited + 5))
done
echo "migrations and logins done; applying the apps"
kubectl apply -k "$DIR"
