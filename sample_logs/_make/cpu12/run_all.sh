#!/bin/bash
# Re-runnable driver: RESULTS=/tmp/cpu12-results bash run_all.sh [scenario...]
# Needs the venv described in README.md (default /tmp/cpu12-venv; override with VENV=...).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export RESULTS="${RESULTS:-/tmp/cpu12-results}"
export VENV="${VENV:-/tmp/cpu12-venv}"
export JOB_TIMEOUT="${JOB_TIMEOUT:-150}"
export PARALLEL="${PARALLEL:-2}"
export JOBS_ROOT="${JOBS_ROOT:-/tmp/c12runs}"

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating venv $VENV" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q transformers accelerate pyyaml
fi

mkdir -p "$RESULTS/_meta"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -srm), $(nproc) cpus"
  echo "python: $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
  "$VENV/bin/pip" list 2>/dev/null | grep -iE '^(torch|transformers|accelerate|tokenizers|safetensors|numpy|pyyaml|huggingface[-_]hub) '
} > "$RESULTS/_meta/versions.txt"

exec python3 "$HERE/harness.py" "$@"
