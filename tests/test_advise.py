"""Fixes: a backticked span is offered as a command only when it reads like one a user would run."""

from __future__ import annotations

import pytest

from diagnose.advise import fixes_from_pattern


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("Check on a compute node: `srun -N1 which torchrun python`.", "srun -N1 which torchrun python"),
        ("Re-run with `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET` set.", "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"),
        ("Re-run with NCCL_DEBUG=INFO and look for the first `NCCL WARN` line.", None),
        ("Return a sample from `__getitem__` for every index, then `uv sync`.", "uv sync"),
    ],
)
def test_only_shell_like_spans_become_commands(text: str, command: str | None) -> None:
    assert fixes_from_pattern((text,))[0].command == command
