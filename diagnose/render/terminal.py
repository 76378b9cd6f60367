"""Terminal view (rich). Placeholder until the full renderer lands: verdict first."""

from __future__ import annotations

from diagnose.model import Diagnosis


def render_terminal(
    diagnosis: Diagnosis, width: int | None = None, color: bool = True, capture: bool = False
) -> str | None:
    text = f"{diagnosis.verdict.category}: {diagnosis.verdict.title}\n"
    if capture:
        return text
    print(text, end="")
    return None
