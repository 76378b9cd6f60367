#!/usr/bin/env bash
# The whole test suite on a fresh machine: installs what it needs, then runs ruff and pytest.
# Used by README ("Run the tests") and by .ci/run. Safe to run again: every step is idempotent.
# As root on Debian it also installs shellcheck and starts the real local SLURM cluster
# (tests/slurm/local-slurm.sh) with the launcher's failure hook as EpilogSlurmctld, and stops the
# cluster afterwards if it started it. Set LAUNCHER_TESTS_NO_SLURM=1 to skip the cluster.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,bench]'
# The launcher's end-to-end job is a real CPU torch/gloo run (torch is in the `gen` extra).
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  .venv/bin/python -m pip install -q 'torch==2.13.0'
fi
# sample_logs/_make/gpu2 writes its synthetic data with numpy (also in the `gen` extra); one scenario is re-run on CPU.
if ! .venv/bin/python -c 'import numpy' 2>/dev/null; then
  .venv/bin/python -m pip install -q numpy
fi

can_admin() { [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; }
if ! command -v shellcheck >/dev/null 2>&1 && can_admin; then  # rendered sbatch scripts are shellchecked
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck >/dev/null
fi

SLURM=tests/slurm/local-slurm.sh
export LOCAL_SLURM_DIR=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
STARTED_SLURM=0
if can_admin && [ -z "${LAUNCHER_TESTS_NO_SLURM:-}" ]; then
  # Every `up` during the run (ours, sample generators') keeps the launcher hook configured.
  export LOCAL_SLURM_EPILOG_SLURMCTLD=$LOCAL_SLURM_DIR/hooks/launcher_hook.sh
  .venv/bin/python -m launcher hook-script --out "$LOCAL_SLURM_EPILOG_SLURMCTLD" \
    --log "$LOCAL_SLURM_DIR/log/launcher-hook.log" --timeout 60 >/dev/null
  if ! bash "$SLURM" status >/dev/null 2>&1; then
    STARTED_SLURM=1
  fi
  trap 'if [ "$STARTED_SLURM" = 1 ]; then bash "$SLURM" down >/dev/null 2>&1 || true; fi' EXIT
  bash "$SLURM" up || echo "warning: local SLURM cluster not (re)configured; the end-to-end tests will say why" >&2
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .

set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then  # pytest: no tests collected is not a failure of the code under test
  echo "pytest collected no tests"
  rc=0
fi
exit "$rc"
