"""Shared helpers for the launcher tests: a throwaway worktree that passes every preflight check."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]


@pytest.fixture
def worktree(tmp_path: Path) -> Path:
    """A worktree with the test entry point and a `.venv` pointing at this interpreter's environment."""
    (tmp_path / "train_fail.py").write_text((HERE / "train_fail.py").read_text())
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path
