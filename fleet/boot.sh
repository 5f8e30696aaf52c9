# Traincast agent boot: the body of the user data (fleet/boot.py puts the settings above).
# From a stock AWS Deep Learning Base AMI (NVIDIA driver present) it installs Python 3.11, a
# CUDA build of torch matching the driver and the Traincast wheel published to S3, refuses to go
# on when CUDA is not usable, and starts the agent as its own systemd unit. Everything goes to the
# serial console too, so `aws ec2 get-console-output` shows why a boot failed after the instance
# is gone. Any failure powers the instance off (it terminates): an instance without an agent only
# costs money.
#
# The TRAINCAST_* and AWS_EC2_METADATA_SERVICE_ENDPOINT variables below default to an instance's
# real paths; tests/integration/test_fleet_boot.py sets them to run this script off EC2.
set -Eeuo pipefail
ROOT=${TRAINCAST_ROOT:-/opt/traincast}
UNIT_DIR=${TRAINCAST_UNIT_DIR:-/etc/systemd/system}
LOG_DIR=${TRAINCAST_LOG_DIR:-/var/log/traincast}
CONSOLE=${TRAINCAST_CONSOLE:-/dev/console}
IMDS=${AWS_EC2_METADATA_SERVICE_ENDPOINT:-http://169.254.169.254}
IMDS=${IMDS%/}
UNIT=traincast-agent.service

mkdir -p "$ROOT" "$LOG_DIR"
exec > >(tee -a "$LOG_DIR/boot.log" >"$CONSOLE") 2>&1
say() { echo "traincast-boot: $*"; }
die() {
  say "FATAL: $*"
  say "powering off: this instance will terminate (shutdown behaviour 'terminate')"
  shutdown -h now "traincast: boot failed" || true
  exit 1
}
trap 'die "step failed at line $LINENO: $BASH_COMMAND"' ERR

say "agent for $MACHINE_TYPE, fleet $FLEET, traincast $TRAINCAST_VERSION"
# Dead-man switch: whatever happens to the controller or the database, spending stops here.
shutdown -h "+$LIFETIME_MIN" "traincast: maximum lifetime reached" \
  || say "could not schedule the lifetime shutdown"

TOKEN=$(curl -sf --retry 5 -X PUT "$IMDS/latest/api/token" -H "X-aws-ec2-metadata-token-ttl-seconds: 300")
md() { curl -sf --retry 3 -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/latest/meta-data/$1"; }
INSTANCE_ID=$(md instance-id)
REGION=$(md placement/region)
say "instance $INSTANCE_ID in $REGION"

install_agent() {
  PY=$(command -v python3.11 || true)
  if [ -z "$PY" ]; then
    say "installing Python 3.11"
    if command -v dnf >/dev/null; then
      dnf install -y -q python3.11 python3.11-pip
    elif command -v apt-get >/dev/null; then
      apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3.11 python3.11-venv
    fi
    PY=$(command -v python3.11) || die "Python 3.11 is not available on this AMI"
  fi

  "$PY" -m venv "$ROOT/venv"
  PIP=("$ROOT/venv/bin/pip" install --disable-pip-version-check --no-input -q)
  if [ -n "$PIP_INDEX_URL" ]; then PIP+=(--index-url "$PIP_INDEX_URL"); fi
  "${PIP[@]}" "boto3==$BOTO3_VERSION"

  say "fetching the agent from $ARTIFACT"
  mkdir -p "$ROOT/dist"
  WHEEL=$(AWS_REGION=$REGION "$ROOT/venv/bin/python" - "$ARTIFACT" "$ROOT/dist" <<'PYEOF'
# Reads current.json (written by `traincast fleet publish`), fetches its wheel, checks its digest.
import hashlib, json, sys
from pathlib import Path
import boto3
uri, dest = sys.argv[1], Path(sys.argv[2])
bucket, _, prefix = uri.removeprefix("s3://").partition("/")
s3 = boto3.client("s3")
pointer = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "current.json")["Body"].read())
path = dest / pointer["wheel"].rsplit("/", 1)[-1]
s3.download_file(bucket, pointer["wheel"], str(path))
digest = hashlib.sha256(path.read_bytes()).hexdigest()
if digest != pointer["sha256"]:
    sys.exit(f"{pointer['wheel']}: sha256 {digest} is not the published {pointer['sha256']}")
print(path)
PYEOF
  )

  # The CUDA build of torch: the newest variant whose CUDA version the driver supports.
  DRIVER_CUDA=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -1 || true)
  [ -n "$DRIVER_CUDA" ] || die "nvidia-smi shows no NVIDIA driver: use a Deep Learning Base AMI with the NVIDIA driver"
  VARIANT=""
  for pair in $TORCH_VARIANTS; do
    if [ "$(printf '%s\n%s\n' "${pair%%=*}" "$DRIVER_CUDA" | sort -V | head -1)" = "${pair%%=*}" ]; then
      VARIANT=${pair#*=}
      break
    fi
  done
  [ -n "$VARIANT" ] || die "the driver supports CUDA $DRIVER_CUDA, older than every torch build we know ($TORCH_VARIANTS)"
  say "driver supports CUDA $DRIVER_CUDA: torch $TORCH_VERSION+$VARIANT"
  # Its own index, as PyTorch documents: the index holds the CUDA build and its nvidia-* wheels.
  "${PIP[@]}" "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION" --index-url "$TORCH_INDEX_URL/$VARIANT"
  "${PIP[@]}" --find-links "$ROOT/dist" "$WHEEL"
}

if [ -n "$ARTIFACT" ]; then
  install_agent
elif [ -x "$ROOT/venv/bin/python" ]; then
  say "no artifact configured: using the agent baked into this AMI at $ROOT/venv"
else
  die "no FLEET_ARTIFACT and no agent baked into this AMI at $ROOT/venv: run traincast fleet publish"
fi

CUDA_CHECK=${TRAINCAST_CUDA_CHECK:-"$ROOT/venv/bin/python -m gpu_agent.cuda_check"}
$CUDA_CHECK || die "CUDA is not usable by torch here (see above); nothing will be measured on the CPU under $MACHINE_TYPE"

umask 077
cat >"$ROOT/agent.env" <<ENVEOF
AGENT_MACHINE_TYPE=$MACHINE_TYPE
AGENT_INSTANCE_ID=$INSTANCE_ID
AGENT_REQUIRE_GPU=${TRAINCAST_REQUIRE_GPU:-true}
AGENT_WATCH_INSTANCE=true
AGENT_IDLE_EXIT_S=$IDLE_EXIT_S
TRAINCAST_SSM_PATH=$SSM_PATH
AWS_REGION=$REGION
AWS_DEFAULT_REGION=$REGION
AWS_EC2_METADATA_SERVICE_ENDPOINT=$IMDS
ENVEOF
umask 022

# Its own unit, not a child of cloud-final: at shutdown systemd stops it while the network is still
# up (After=network-online.target), and gives it TimeoutStopSec to store the window it is timing.
cat >"$UNIT_DIR/$UNIT" <<UNITEOF
[Unit]
Description=Traincast benchmark agent ($MACHINE_TYPE)
Wants=network-online.target
After=network-online.target

[Service]
Type=simple
EnvironmentFile=$ROOT/agent.env
WorkingDirectory=$ROOT
ExecStart=$ROOT/venv/bin/python -m gpu_agent
# The agent left (idle, drained, interrupted, failed): power off, which terminates the instance.
ExecStopPost=/bin/sh -c 'shutdown -h now "traincast agent exited: \$\$SERVICE_RESULT \$\$EXIT_STATUS"'
KillSignal=SIGTERM
KillMode=mixed
TimeoutStopSec=100
StandardOutput=journal+console
StandardError=journal+console
SyslogIdentifier=traincast-agent

[Install]
WantedBy=multi-user.target
UNITEOF

if [ -n "$LOG_GROUP" ]; then
  say "shipping logs to CloudWatch Logs group $LOG_GROUP"
  {
    if ! command -v /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl >/dev/null; then
      if command -v dnf >/dev/null; then dnf install -y -q amazon-cloudwatch-agent
      else curl -sfo /tmp/cwa.deb https://s3.amazonaws.com/amazoncloudwatch-agent/ubuntu/amd64/latest/amazon-cloudwatch-agent.deb \
        && dpkg -i /tmp/cwa.deb; fi
    fi
    printf '{"logs":{"logs_collected":{"files":{"collect_list":[%s,%s]}}}}\n' \
      "{\"file_path\":\"$LOG_DIR/boot.log\",\"log_group_name\":\"$LOG_GROUP\",\"log_stream_name\":\"$INSTANCE_ID/boot\"}" \
      "{\"file_path\":\"$LOG_DIR/agent.log\",\"log_group_name\":\"$LOG_GROUP\",\"log_stream_name\":\"$INSTANCE_ID/agent\"}" \
      >"$ROOT/cloudwatch.json"
    /opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c "file:$ROOT/cloudwatch.json"
  } || say "CloudWatch Logs not set up (the agent still logs to the console)"
  echo "AGENT_LOG_FILE=$LOG_DIR/agent.log" >>"$ROOT/agent.env"
fi

systemctl daemon-reload
# --no-block: this script runs inside cloud-final; waiting here for another unit could deadlock.
systemctl enable --now --no-block "$UNIT"
say "started $UNIT"
