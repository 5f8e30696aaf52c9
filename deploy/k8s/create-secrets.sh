#!/usr/bin/env bash
# The Secrets and the CA ConfigMap deploy/k8s's pods read (docs/DEPLOY.md "Secrets"), made from the
# environment and applied to the cluster; nothing is written to disk. Required: POSTGRES_HOST, REDIS_HOST (the
# names the servers' certificates carry), POSTGRES_PASSWORD (the owner's), REDIS_PASSWORD (Redis's default
# user's), the four database logins' passwords {API,WORKER,FLEET,AGENT}_DB_PASSWORD and the four Redis users'
# REDIS_{API,WORKER,FLEET,AGENT}_PASSWORD (the same variables as docker-compose.yml's .env), and the CA files
# DATABASE_CA_FILE, REDIS_CA_FILE (PEM). Optional: POSTGRES_USER (postgres), POSTGRES_PORT (5432),
# POSTGRES_DB (traincast), REDIS_PORT (6379), REDIS_DB (0). Run it again to change any of them, then
# deploy/k8s/apply.sh (which sets the logins' passwords again) and `kubectl -n traincast rollout restart deploy`.
set -euo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
NS=traincast

for v in POSTGRES_HOST REDIS_HOST DATABASE_CA_FILE REDIS_CA_FILE; do
  [ -n "${!v:-}" ] || { echo "error: set $v" >&2; exit 2; }
done
for v in POSTGRES_PASSWORD REDIS_PASSWORD {API,WORKER,FLEET,AGENT}_DB_PASSWORD REDIS_{API,WORKER,FLEET,AGENT}_PASSWORD; do
  [ -n "${!v:-}" ] || { echo "error: set $v (openssl rand -hex 24)" >&2; exit 2; }
  # They go into URLs unescaped.
  [[ ${!v} =~ ^[A-Za-z0-9._~-]+$ ]] || { echo "error: $v is not URL-safe; use openssl rand -hex 24" >&2; exit 2; }
done
for v in DATABASE_CA_FILE REDIS_CA_FILE; do
  [ -r "${!v}" ] || { echo "error: $v: cannot read ${!v}" >&2; exit 2; }
done

PG="${POSTGRES_HOST}:${POSTGRES_PORT:-5432}/${POSTGRES_DB:-traincast}?sslmode=verify-full"
RD="${REDIS_HOST}:${REDIS_PORT:-6379}/${REDIS_DB:-0}?ssl_cert_reqs=required"

secret() {  # name, then KEY=VALUE lines on stdin (not in argv, where `ps` would show them)
  kubectl -n "$NS" create secret generic "$1" --from-env-file=/dev/stdin --dry-run=client -o yaml \
    | kubectl apply --server-side --force-conflicts -f -
}

kubectl apply -f "$DIR/namespace.yaml"
# The owner: only the migrate Job's pod, and operator commands (`traincast keys`, `calibrate`, …).
secret traincast-owner <<END
DATABASE_URL=postgresql://${POSTGRES_USER:-postgres}:${POSTGRES_PASSWORD}@${PG}
REDIS_URL=rediss://default:${REDIS_PASSWORD}@${RD}
END
# The logins' passwords, which the migrate Job's db-logins sets (shared/core/logins.py).
secret traincast-logins <<END
API_DB_PASSWORD=${API_DB_PASSWORD}
WORKER_DB_PASSWORD=${WORKER_DB_PASSWORD}
FLEET_DB_PASSWORD=${FLEET_DB_PASSWORD}
AGENT_DB_PASSWORD=${AGENT_DB_PASSWORD}
END
# Each process kind's login (shared/core/logins.py LOGINS) and Redis user (shared/core/redis_acl.py USERS).
secret traincast-api <<END
DATABASE_URL=postgresql://traincast_api_login:${API_DB_PASSWORD}@${PG}
REDIS_URL=rediss://traincast-api:${REDIS_API_PASSWORD}@${RD}
END
secret traincast-worker <<END
DATABASE_URL=postgresql://traincast_worker_login:${WORKER_DB_PASSWORD}@${PG}
REDIS_URL=rediss://traincast-worker:${REDIS_WORKER_PASSWORD}@${RD}
END
secret traincast-fleet <<END
DATABASE_URL=postgresql://traincast_fleet_login:${FLEET_DB_PASSWORD}@${PG}
REDIS_URL=rediss://traincast-fleet:${REDIS_FLEET_PASSWORD}@${RD}
END
secret traincast-agent <<END
DATABASE_URL=postgresql://traincast_agent_login:${AGENT_DB_PASSWORD}@${PG}
REDIS_URL=rediss://traincast-agent:${REDIS_AGENT_PASSWORD}@${RD}
END
# Public certificates, not secrets: mounted at /etc/traincast/ca as DATABASE_CA_FILE and REDIS_CA_FILE.
kubectl -n "$NS" create configmap traincast-ca --from-file=database-ca.pem="$DATABASE_CA_FILE" \
  --from-file=redis-ca.pem="$REDIS_CA_FILE" --dry-run=client -o yaml \
  | kubectl apply --server-side --force-conflicts -f -
echo "secrets traincast-{owner,logins,api,worker,fleet,agent} and configmap traincast-ca applied in namespace $NS"
