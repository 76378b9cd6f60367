"""The benchmark scripts still run: a small generated tree is diagnosed right (timing is not tested)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def test_generated_tree_is_diagnosed_at_the_culprit(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "gen_tree.py"),
            str(tmp_path),
            "--ranks",
            "16",
            "--mb-per-rank",
            "0.05",
            "--culprit",
            "11",
        ],
        check=True,
        capture_output=True,
    )
    report = subprocess.run(
        [sys.executable, "-m", "diagnose.cli", str(tmp_path), "--format", "json"], check=True, capture_output=True
    )
    verdict = json.loads(report.stdout)["verdict"]
    assert (verdict["category"], verdict["rank"]) == ("oom", 11)


@pytest.mark.skipif(
    shutil.which("rg") is None and not (Path(sys.executable).parent / "rg").exists(),
    reason="ripgrep not installed (pip install '.[bench]')",
)
def test_runner_compares_with_ripgrep(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(BENCH / "gen_tree.py"),
            str(tmp_path),
            "--ranks",
            "8",
            "--mb-per-rank",
            "0.05",
            "--culprit",
            "3",
        ],
        check=True,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), str(tmp_path), "--runs", "1"], check=True, capture_output=True
    )
    result = json.loads(done.stdout)
    assert result["ratio"] > 0 and result["verdict"][0] == "oom"
