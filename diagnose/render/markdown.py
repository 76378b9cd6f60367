"""Markdown view for tickets. Placeholder until the full renderer lands."""

from __future__ import annotations

from diagnose.model import Diagnosis


def render_markdown(diagnosis: Diagnosis) -> str:
    return f"**{diagnosis.verdict.category}**: {diagnosis.verdict.title}\n"
