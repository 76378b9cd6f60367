"""Exit statuses a shell or a wrapper reports, read as the signal that ended the process (or none)."""

from __future__ import annotations

import pytest

from diagnose.tracebacks import status_signal


@pytest.mark.parametrize(
    ("status", "signal"),
    [
        (137, 9),  # bash: 128 + SIGKILL (srun, mpirun and horovodrun report it the same way)
        (139, 11),  # 128 + SIGSEGV
        (247, 9),  # DeepSpeed-Chat's "Step 2 exited with non-zero status 247": sys.exit(-9) of a killed step
        (245, 11),  # sys.exit(-11)
        (255, None),  # exit(-1), ssh's and mpirun's own failure: not SIGHUP
        (1, None),
        (0, None),
        (200, None),  # neither 128 + N for a signal nor 256 - N for a kill
    ],
)
def test_status_names_the_signal_it_stands_for(status: int, signal: int | None) -> None:
    assert status_signal(status) == signal
