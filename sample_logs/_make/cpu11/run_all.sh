#!/usr/bin/env bash
# usage: RESULTS=/tmp/cpu11-results bash run_all.sh [scenario ...]
set -u
HERE="$(cd "$(dirname "$0")" && pwd)"
export PATH=/work/main/.venv/bin:$PATH
export RESULTS="${RESULTS:-/tmp/cpu11-results}"
exec python "$HERE/run_all.py" "$@"
