#!/bin/bash
# learning-rate sweep submitted from a login node. The login nodes cap CPU time per process
# (/etc/security/limits.conf: cpu), and sbatch propagates the submit shell's limits to the job.
set -euo pipefail
ulimit -t 15
sbatch job.sbatch
