#!/usr/bin/env bash
# Build a wheelhouse on a connected machine: a folder of every wheel the project needs (its dependencies with the
# dev and embedded extras, and the build backend that `pip install -e .` needs), for a host without internet, where
# `TRAINCAST_WHEELHOUSE=DIR scripts/venv.sh` (or make run) installs from it alone (docs/AGENT.md, "Installing on a
# GPU host").
#
# Usage: scripts/wheelhouse.sh [options] [DIR] [-- pip download options]
#   DIR                    where the wheels go (default: wheelhouse)
#   --python-version X.Y   the target's Python (default 3.11, which pyproject.toml requires)
#   --platform TAG         the target's platform, e.g. manylinux_2_28_x86_64 or manylinux_2_28_aarch64 (default:
#                          this machine's); wheels for older glibc tags of that architecture are taken too
#   --no-torch             leave torch and torchvision (and the CUDA libraries they pull) out: for a host whose
#                          Python has its own (TRAINCAST_SYSTEM_TORCH=1)
#   --dry-run              print the pip command and the requirements instead of downloading
#   -- …                   passed on to pip download, e.g. --extra-index-url https://download.pytorch.org/whl/cu128
# Wheels only (--only-binary=:all:): a dependency with no wheel for the target fails here, by name, not offline later.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
dir=wheelhouse python_version=3.11 platform="" without="" dry_run=0
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --python-version) python_version=${2:?--python-version needs a version, e.g. 3.11}; shift 2 ;;
    --platform) platform=${2:?--platform needs a tag, e.g. manylinux_2_28_x86_64}; shift 2 ;;
    --no-torch) without=torch,torchvision; shift ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "error: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done

# pip takes a --platform literally: a manylinux_2_28 host also runs the many wheels tagged for older glibc
# (manylinux_2_17 alias manylinux2014, …), so each of those is named too.
platforms=()
if [ -n "$platform" ]; then
  if [[ $platform =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
    glibc=${BASH_REMATCH[1]} arch=${BASH_REMATCH[2]}
    for ((minor = glibc; minor >= 5; minor--)); do platforms+=("manylinux_2_${minor}_${arch}"); done
    [ "$glibc" -ge 17 ] && platforms+=("manylinux2014_$arch")
    [ "$glibc" -ge 12 ] && platforms+=("manylinux2010_$arch")
    platforms+=("manylinux1_$arch")
  else
    platforms=("$platform")
  fi
fi

requirements=$(mktemp)
trap 'rm -f "$requirements"' EXIT
"$python" scripts/requirements.py --build --without "$without" dev embedded >"$requirements"
cmd=("$python" -m pip download --disable-pip-version-check --only-binary=:all: --dest "$dir"
  --python-version "$python_version" -r "$requirements")
for p in "${platforms[@]}"; do cmd+=(--platform "$p"); done
cmd+=("${extra[@]}")
if [ "$dry_run" = 1 ]; then
  printf '%q ' "${cmd[@]}"
  echo
  cat "$requirements"
  exit 0
fi
mkdir -p "$dir"
"${cmd[@]}"
echo "$(find "$dir" -name '*.whl' | wc -l) wheels in $dir ($(du -sh "$dir" | cut -f1)); on the offline host:" \
  "TRAINCAST_WHEELHOUSE=$dir${without:+ TRAINCAST_SYSTEM_TORCH=1} scripts/venv.sh" >&2
