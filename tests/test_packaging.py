"""`pip install .` (not editable) must ship the pattern library inside the wheel."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_contains_every_pattern_file(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {p.relative_to(ROOT).as_posix() for p in (ROOT / "patterns").rglob("*.toml")}
    assert shipped and shipped <= names
    assert {"patterns/README.md", "diagnose/cli.py", "launcher/__main__.py"} <= names
