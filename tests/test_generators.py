"""The sample generators still run and still produce what their expected.toml says.

The GPU generator needs the 2x H200 machine and is only checked for syntax here; one SLURM scenario
is re-run for real on the local cluster and analysed like the shipped copy.
"""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from diagnose.api import analyze

ROOT = Path(__file__).resolve().parent.parent
MAKE = ROOT / "sample_logs" / "_make"


@pytest.mark.parametrize("script", sorted(MAKE.glob("*/*.sh")), ids=lambda p: str(p.relative_to(MAKE)))
def test_shell_generators_parse(script):
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize("source", sorted(MAKE.glob("*/*.py")), ids=lambda p: str(p.relative_to(MAKE)))
def test_python_generators_compile(source, tmp_path):
    py_compile.compile(str(source), cfile=str(tmp_path / "x.pyc"), doraise=True)


def _has_torch() -> bool:
    return subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0


@pytest.mark.skipif(
    shutil.which("sbatch") is None or not _has_torch(), reason="needs the local SLURM cluster and torch"
)
def test_slurm_scenario_runs_again(tmp_path):
    scenario = "shape-second-node"
    env = {**os.environ, "SAMPLES_OUT": str(tmp_path), "SAMPLES_WORK": str(tmp_path / "work"), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(MAKE / "slurm" / "run_all.sh"), scenario], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = tomllib.loads((ROOT / "sample_logs" / f"slurm-{scenario}" / "expected.toml").read_text())["expected"]
    verdict = analyze([str(tmp_path / f"slurm-{scenario}")]).verdict
    assert (verdict.category, verdict.rank, verdict.exception) == (
        expected["category"],
        expected["rank"],
        expected["exception"],
    )


@pytest.mark.skipif(not _has_torch(), reason="needs torch")
def test_independent_generator_runs_again_on_cpu(tmp_path):
    """The second generator (written without reading the analyzer) still fails as its shipped CPU run did: two
    simulated nodes, rank 0 with a stale model config."""
    scenario = "stale-node-config"
    env = {
        **os.environ,
        "RESULTS": str(tmp_path),
        "PROFILE": "cpu",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", str(MAKE / "gpu2" / "run_all.sh"), scenario], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    expected = tomllib.loads((ROOT / "sample_logs" / f"cpu2-{scenario}" / "expected.toml").read_text())["expected"]
    verdict = analyze([str(tmp_path / f"gpu2-{scenario}")]).verdict
    assert (verdict.category, verdict.rank) == (expected["category"], expected["rank"])
    assert verdict.exception is not None and verdict.exception.startswith("RuntimeError: shape '[4, ")
