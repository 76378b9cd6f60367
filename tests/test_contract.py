"""The JSON report and the CLI are public: every field has the documented type, and the README
documents every field and every command (a field or command added without docs fails here)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from diagnose.api import analyze
from diagnose.model import CATEGORIES, CONFIDENCE
from diagnose.render.json_report import SCHEMA_VERSION, render_json

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SAMPLES = sorted(p.parent for p in (ROOT / "sample_logs").glob("*/expected.toml"))

OPTIONAL_STR = (str, type(None))
OPTIONAL_INT = (int, type(None))
VERDICT_TYPES = {
    "category": str,
    "subcategory": OPTIONAL_STR,
    "title": str,
    "rank": OPTIONAL_INT,
    "ranks": list,
    "host": OPTIONAL_STR,
    "exception": OPTIONAL_STR,
    "location": (dict, type(None)),
    "time": OPTIONAL_STR,
    "confidence": str,
    "pattern": OPTIONAL_STR,
    "rank_inferred": bool,
}
TOP_TYPES = {
    "schema_version": int,
    "tool": dict,
    "inputs": dict,
    "job": dict,
    "verdict": dict,
    "explanation": str,
    "evidence": list,
    "symptoms": list,
    "details": dict,
    "fixes": list,
    "ranks": dict,
}


@pytest.mark.parametrize("case", SAMPLES[::4], ids=lambda p: p.name)
def test_report_matches_the_documented_types(case):
    report = json.loads(render_json(analyze([str(case)])))
    assert {k: type(v) for k, v in report.items()}.keys() == TOP_TYPES.keys()
    for key, kind in TOP_TYPES.items():
        assert isinstance(report[key], kind), key
    assert report["schema_version"] == SCHEMA_VERSION == 1
    verdict = report["verdict"]
    assert verdict.keys() == VERDICT_TYPES.keys()
    for key, kind in VERDICT_TYPES.items():
        assert isinstance(verdict[key], kind), key
    assert verdict["category"] in CATEGORIES and verdict["confidence"] in CONFIDENCE
    assert all(isinstance(r, int) for r in verdict["ranks"])
    for item in report["evidence"]:
        assert item.keys() == {"file", "line", "rank", "text"}
    for item in report["symptoms"]:
        assert item.keys() == {"kind", "ranks", "count", "example"}
    for item in report["fixes"]:
        assert item.keys() == {"title", "detail", "command"}
    assert report["ranks"].keys() == {"expected", "seen", "failed", "victims", "silent"}
    assert set(report["job"]) == {"id", "state", "exit_code", "nodes", "elapsed"}


def test_readme_documents_every_field():
    documented = set(re.findall(r"^\| `([\w.]+)`", README, flags=re.M))
    expected = set(TOP_TYPES) | {f"verdict.{k}" for k in VERDICT_TYPES}
    assert expected - documented == set()


def test_readme_documents_every_command_and_option():
    for text in (
        "diagnose explain ID",
        "diagnose patterns list",
        "diagnose patterns check DIR",
        "--job",
        "--format",
        "--output",
        "--patterns",
        "DIAGNOSE_PATTERNS",
        "bash tests/run.sh",
    ):
        assert text in README, text


@pytest.mark.parametrize(
    "name",
    ["public-detectron2-multigpu-thcudacheck-illegal-memory", "public-deepspeed-qwen-state-dict-size-mismatch-rank1"],
)
def test_root_cause_line_carries_no_log_indentation(name):
    """Tools compare `verdict.exception` verbatim, so the log's indentation must not leak into it."""
    exception = json.loads(render_json(analyze([str(ROOT / "sample_logs" / name)])))["verdict"]["exception"]
    assert exception and exception == exception.strip()
