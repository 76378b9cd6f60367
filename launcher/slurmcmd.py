"""Run one SLURM client command (squeue, sacct, scontrol, scancel) without ever hanging or raising.

A hook or a watch loop must survive a slow or absent controller, so every failure reads as "no output".
"""

from __future__ import annotations

import subprocess

TIMEOUT_S = 15


def output(cmd: list[str], timeout_s: float = TIMEOUT_S) -> str:
    """stdout of `cmd`, or "" when it is missing, fails or takes longer than `timeout_s`."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""
