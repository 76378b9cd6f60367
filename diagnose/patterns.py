"""Load and validate the failure-signature library (patterns/<category>/<id>.toml).

The pattern file format is a public contract (README "Pattern files"): users keep their own
directories next to ours, so every problem is reported with the file and the field at fault instead
of failing somewhere deep in the scanner.
"""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from diagnose.cache import cache_file, write_atomically
from diagnose.model import CATEGORIES, ROLES

PATTERN_FORMAT = 1
SEVERITIES = ("critical", "error", "warning", "info")
_ID_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")
_REQUIRED = ("id", "title", "category", "role", "regex")
_KNOWN = {
    "format",
    "id",
    "aliases",
    "title",
    "category",
    "subcategory",
    "severity",
    "role",
    "regex",
    "priority",
    "extracts",
    "explanation",
    "fixes",
    "docs",
    "examples",
}


class PatternError(ValueError):
    """A pattern file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class Example:
    text: str
    should_match: bool
    expect: dict[str, str] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Pattern:
    id: str
    title: str
    category: str
    role: str
    regex: str
    path: str
    subcategory: str | None = None
    severity: str = "error"
    priority: int = 50
    aliases: tuple[str, ...] = ()
    extracts: tuple[str, ...] = ()
    explanation: str = ""
    fixes: tuple[str, ...] = ()
    docs: tuple[str, ...] = ()
    examples: tuple[Example, ...] = ()

    @functools.cached_property
    def compiled(self) -> Any:
        """Compiled on first use: a run matches lines against the few signatures the prefilter names, and
        compiling all of them up front was a large part of a small run."""
        return regex.compile(self.regex, regex.VERSION0)

    def fields(self, text: str) -> dict[str, str] | None:
        """Named groups of the first match in a prefix-stripped line, or None when it does not match."""
        found = self.compiled.search(text)
        if found is None:
            return None
        return {k: v for k, v in found.groupdict().items() if v is not None}


def builtin_dir() -> Path:
    """The shipped library: patterns/ is a package so it travels inside the wheel."""
    import patterns

    return Path(patterns.__file__).parent


def pattern_dirs(extra: Iterable[str | os.PathLike[str]] = ()) -> list[Path]:
    """Built-in library first, then DIAGNOSE_PATTERNS (os.pathsep-separated), then --patterns DIRs."""
    dirs = [builtin_dir()]
    env = os.environ.get("DIAGNOSE_PATTERNS", "")
    dirs += [Path(p) for p in env.split(os.pathsep) if p]
    dirs += [Path(p) for p in extra]
    return dirs


def load_patterns(dirs: Iterable[Path]) -> list[Pattern]:
    """Every pattern under the given directories; a later directory's id overrides an earlier one.

    Every regex is compiled once to validate it, unless these exact files were validated by an earlier run
    (a cache entry named by their digest); then each compiles when first used."""
    files: list[tuple[Path, str]] = []
    for directory in dirs:
        if not directory.is_dir():
            raise PatternError(f"{directory}: pattern directory not found")
        files += [(path, _read(path)) for path in sorted(directory.rglob("*.toml"))]
    marker = cache_file("patterns", [regex.__version__, *(f"{path}\0{text}" for path, text in files)], ".ok")
    validated = marker is not None and marker.exists()
    by_id: dict[str, Pattern] = {}
    for path, text in files:
        pattern = _parse_text(path, text, validated)
        by_id[pattern.id] = pattern
    if marker is not None and not validated:
        write_atomically(marker, b"")
    return sorted(by_id.values(), key=lambda p: p.id)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PatternError(f"{path}: cannot read pattern file: {exc}") from exc


def _parse_text(path: Path, text: str, validated: bool) -> Pattern:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PatternError(f"{path}: cannot read pattern file: {exc}") from exc
    return parse_pattern(data, str(path), validated)


def parse_pattern(data: dict[str, Any], path: str, validated: bool = False) -> Pattern:
    """`validated`: this exact regex compiled before (load_patterns' cache), so compiling waits for first use."""

    def fail(message: str) -> PatternError:
        return PatternError(f"{path}: {message}")

    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise fail(f"missing required field(s): {', '.join(missing)}")
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise fail(f"unknown field(s): {', '.join(unknown)} (known: {', '.join(sorted(_KNOWN))})")
    if data.get("format", PATTERN_FORMAT) != PATTERN_FORMAT:
        raise fail(f"format {data['format']!r} is not supported (this version reads format {PATTERN_FORMAT})")
    pattern_id = data["id"]
    if not isinstance(pattern_id, str) or not pattern_id or not set(pattern_id) <= _ID_CHARS:
        raise fail(f"id {pattern_id!r} must be kebab-case (a-z, 0-9, -)")
    if Path(path).suffix == ".toml" and Path(path).stem != pattern_id:
        raise fail(f"id {pattern_id!r} must equal the file name stem {Path(path).stem!r}")
    if data["category"] not in CATEGORIES:
        raise fail(f"category {data['category']!r} is not one of {', '.join(CATEGORIES)}")
    if data["role"] not in ROLES:
        raise fail(f"role {data['role']!r} is not one of {', '.join(ROLES)}")
    severity = data.get("severity", "error")
    if severity not in SEVERITIES:
        raise fail(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    check_portable(data["regex"], fail)
    compiled = None if validated else compile_checked(data["regex"], fail)
    extracts = tuple(data.get("extracts", ()))
    groups = set(GROUP_NAME.findall(data["regex"]))
    unknown_groups = [name for name in extracts if name not in groups]
    if unknown_groups:
        raise fail(f"extracts name(s) with no named group in regex: {', '.join(unknown_groups)}")
    pattern = Pattern(
        id=pattern_id,
        title=str(data["title"]),
        category=data["category"],
        role=data["role"],
        regex=data["regex"],
        path=path,
        subcategory=data.get("subcategory"),
        severity=severity,
        priority=int(data.get("priority", 50)),
        aliases=tuple(data.get("aliases", ())),
        extracts=extracts,
        explanation=str(data.get("explanation", "")).strip(),
        fixes=tuple(str(f) for f in data.get("fixes", ())),
        docs=tuple(str(d) for d in data.get("docs", ())),
        examples=tuple(_parse_examples(data.get("examples", []), fail)),
    )
    if compiled is not None:
        pattern.__dict__["compiled"] = compiled  # already built to validate it: the cached property's value
    return pattern


# a named group, `(?P<name>`: the prefilter strips them, the extracts check reads their names
GROUP_NAME = regex.compile(r"\(\?P<([A-Za-z_]\w*)>")
_SPELLINGS = 9  # `rank`, `rank2` ... `rank9`


def group_value(fields: Mapping[str, str], name: str) -> str | None:
    """A named group's value, or that of its numbered spellings (`rank2`, `rank3`): group names are unique in a
    regex, so a pattern that captures the same thing in several alternatives numbers them."""
    return next(
        (fields[key] for key in (name, *(f"{name}{n}" for n in range(2, _SPELLINGS + 1))) if fields.get(key)), None
    )


_FORBIDDEN = ("(?=", "(?!", "(?<=", "(?<!", "\\1", "\\2", "(?>", "*+", "++", "?+", "|^", "(^", "(?:^", "$")


def check_portable(expression: Any, fail: Any) -> None:
    """Refuse what the byte-level prefilter and polars' Rust engine cannot run."""
    if not isinstance(expression, str) or not expression:
        raise fail("regex must be a non-empty string")
    for token in _FORBIDDEN:
        if token in expression:
            raise fail(
                f"regex uses {token!r}: look-around, back-references, possessive forms, and ^ or $ anywhere but a "
                "leading ^ are not allowed (the byte-level prefilter sees whole files)"
            )


def compile_checked(expression: str, fail: Any) -> Any:
    try:
        return regex.compile(expression, regex.VERSION0)
    except regex.error as exc:
        raise fail(f"regex does not compile: {exc}") from exc


def _parse_examples(raw: Any, fail: Any) -> list[Example]:
    if not isinstance(raw, list):
        raise fail("examples must be an array of tables ([[examples]])")
    examples = []
    for index, item in enumerate(raw):
        has_match, has_not = "must_match" in item, "must_not_match" in item
        if has_match == has_not:
            raise fail(f"examples[{index}] needs exactly one of must_match / must_not_match")
        text = item["must_match"] if has_match else item["must_not_match"]
        expect = item.get("expect", {})
        if not isinstance(text, str) or not isinstance(expect, dict):
            raise fail(f"examples[{index}] must hold a string and an optional expect table")
        examples.append(Example(text, has_match, {k: str(v) for k, v in expect.items()}, item.get("source", "")))
    return examples
