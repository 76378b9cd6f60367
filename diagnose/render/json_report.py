"""The JSON report: a public contract (schema_version 1, documented in README.md "JSON report").

Fields are only ever added within a schema version; renaming or removing one bumps SCHEMA_VERSION.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from diagnose import __version__
from diagnose.model import Diagnosis

SCHEMA_VERSION = 1


def to_dict(diagnosis: Diagnosis) -> dict[str, Any]:
    verdict = asdict(diagnosis.verdict)
    verdict["ranks"] = list(verdict["ranks"])
    explanation = verdict.pop("explanation")
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "diagnose", "version": __version__},
        "inputs": {
            "paths": list(diagnosis.inputs.paths),
            "files": diagnosis.inputs.files,
            "bytes": diagnosis.inputs.bytes,
            "warnings": list(diagnosis.inputs.warnings),
        },
        "job": {
            "id": diagnosis.job.id,
            "state": diagnosis.job.state,
            "exit_code": diagnosis.job.exit_code,
            "nodes": list(diagnosis.job.nodes),
            "elapsed": diagnosis.job.elapsed,
        },
        "verdict": verdict,
        "explanation": explanation,
        "evidence": [asdict(e) for e in diagnosis.evidence],
        "symptoms": [{**asdict(s), "ranks": list(s.ranks)} for s in diagnosis.symptoms],
        "details": diagnosis.details,
        "fixes": [asdict(f) for f in diagnosis.fixes],
        "ranks": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(diagnosis.ranks).items()},
    }


def render_json(diagnosis: Diagnosis) -> str:
    return json.dumps(to_dict(diagnosis), indent=2, ensure_ascii=False, default=str) + "\n"
