#!/usr/bin/env bash
# RESULTS=/tmp/cpu14-results bash run_all.sh [scenario...]
set -u
export RESULTS=${RESULTS:-/tmp/cpu14-results}
VENV=${VENV:-/tmp/cpu14-venv}
[ -x "$VENV/bin/python" ] || { python3 -m venv "$VENV" && "$VENV/bin/pip" install torch==2.13.0; }
exec "$VENV/bin/python" "$(dirname "$0")/harness.py" "$@"
