"""Read one log file whatever state it is in, never failing the whole analysis.

Real inputs are compressed by log rotation, truncated by a dying node, padded with NUL blocks after a
crash, still being written, unreadable for permission reasons, or not logs at all. Each case becomes a
warning the report shows, plus whatever text could be recovered.
"""

from __future__ import annotations

import bz2
import lzma
import re
import zlib
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

MAX_DECOMPRESSED = 4 << 30  # refuse decompression bombs; a real rank log is far smaller
_BINARY_SAMPLE = 1 << 16
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
)


@dataclass(frozen=True)
class FileData:
    path: str
    data: bytes
    size: int
    warnings: tuple[str, ...] = ()


def encodable(text: str) -> str:
    """Text that encodes to UTF-8 again. A path that is not UTF-8 on disk reaches Python as surrogate escapes, and so
    does a lone `\\ud83d` escape in a JSON file; neither the frame nor UTF-8 output can carry them, so each
    becomes `?`."""
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _compression(head: bytes) -> str | None:
    return next((name for magic, name in _MAGIC if head.startswith(magic)), None)


def _decompress(raw: bytes, kind: str) -> tuple[bytes, bool]:
    """Decompressed bytes and whether the stream ended early (a log rotated or copied mid-write)."""
    if kind == "gzip":
        inflater = zlib.decompressobj(wbits=47)  # gzip header; concatenated members handled below
        out = inflater.decompress(raw, MAX_DECOMPRESSED)
        if inflater.unconsumed_tail:
            raise ValueError("decompressed size exceeds the 4 GiB limit")
        if inflater.eof and inflater.unused_data:
            rest, truncated = _decompress(inflater.unused_data, kind)
            return out + rest, truncated
        return out, not inflater.eof
    if kind in ("bzip2", "xz"):
        decompressor = bz2.BZ2Decompressor() if kind == "bzip2" else lzma.LZMADecompressor()
        out = decompressor.decompress(raw, MAX_DECOMPRESSED)
        return out, not decompressor.eof
    raise ValueError(f"{kind} compression is not supported; decompress it first (e.g. `zstd -d`)")


def _looks_binary(data: bytes) -> bool:
    sample = data[:_BINARY_SAMPLE]
    if not sample:
        return False
    # Crash-truncated logs carry NUL runs, so only a file mostly made of control bytes is binary.
    control = sum(sample.count(bytes([b])) for b in range(32) if b not in (9, 10, 13, 27))
    return control > len(sample) * 0.3


def read_log(path: Path, stdin_data: bytes | None = None) -> FileData:
    """Bytes ready to scan (decompressed, NUL runs kept) plus what went wrong, as warnings."""
    name = str(path)
    warnings: list[str] = []
    if stdin_data is not None:
        raw = stdin_data
    else:
        try:
            raw = path.read_bytes()  # size at open time: a file still being written is read as it stands
        except OSError as exc:
            return FileData(name, b"", 0, (f"{name}: cannot read ({exc.strerror or exc})",))
    size = len(raw)
    kind = _compression(raw[:8])
    if kind is not None:
        try:
            raw, truncated = _decompress(raw, kind)
        except (OSError, EOFError, ValueError, zlib.error, lzma.LZMAError) as exc:
            return FileData(name, b"", size, (f"{name}: {kind} data could not be decompressed ({exc})",))
        if truncated and not raw:  # garbage after a valid header, or cut before its first block
            return FileData(name, b"", size, (f"{name}: {kind} data could not be decompressed (cut or corrupt)",))
        if truncated:
            warnings.append(f"{name}: {kind} data is truncated; read what could be decompressed")
    if not raw:
        return FileData(name, b"", size, (f"{name}: empty file",) if stdin_data is None else ())
    if _looks_binary(raw):
        return FileData(name, b"", size, (f"{name}: looks binary, not a text log; skipped",))
    if b"\x00" in raw:
        warnings.append(f"{name}: contains NUL bytes (a crash or truncation); read around them")
        raw = raw.replace(b"\x00", b"")
    if not raw.endswith(b"\n"):
        raw += b"\n"  # last line cut mid-write still counts as a line
    return FileData(name, _without_common_indent(_without_editor_numbers(raw)), size, tuple(warnings))


# ` 13 Traceback ...`: a line number an editor or viewer put in front (not a backtrace's `13 0x7f.. frame`)
_EDITOR_NUMBER = re.compile(rb"^ *(\d{1,6})(?: (?!0x)|\r?$)")
_PASTE_MAX = 1 << 20  # pastes are small; a job's own log is never numbered or indented as a whole
_EDITOR_NUMBERED_SHARE = 0.8
_EDITOR_NUMBERED_MIN = 5


def _without_editor_numbers(raw: bytes) -> bytes:
    """A paste copied out of an editor that numbers its lines carries those numbers in front of every line,
    hiding every prefix and traceback; read (in memory only) without them. Numbers must run consecutively
    over nearly every line, which a log's own leading numbers (iteration counts) never do."""
    if len(raw) > _PASTE_MAX:
        return raw
    lines = raw.split(b"\n")
    found = [(i, m) for i, line in enumerate(lines) if (m := _EDITOR_NUMBER.match(line)) is not None]
    filled = sum(1 for line in lines if line.strip())
    if len(found) < _EDITOR_NUMBERED_MIN or len(found) < _EDITOR_NUMBERED_SHARE * filled:
        return raw
    values = [int(m.group(1)) for _, m in found]
    if any(b - a != 1 for a, b in pairwise(values)):
        return raw
    for i, m in found:
        lines[i] = lines[i][m.end() :] if lines[i][m.end() - 1 : m.end()] == b" " else lines[i][m.end(1) :]
    return b"\n".join(lines)


_COMMON_INDENT_MIN = 4  # a traceback's own frames sit 2 and 4 deep; a paste shifted as a whole, at least this


def _without_common_indent(raw: bytes) -> bytes:
    """A paste indented as a whole (a Markdown list item, a quote in an e-mail reply) shifts every prefix,
    traceback header and exception line off the start of its line; read (in memory only) without that shift. A
    job's own log always has lines at column 0, and a paste of frames alone (its shallowest lines `File "..."`)
    keeps its indentation."""
    if len(raw) > _PASTE_MAX:
        return raw
    lines = raw.split(b"\n")
    depths = {len(line) - len(line.lstrip(b" ")) for line in lines if line.strip()}
    indent = min(depths, default=0)
    if indent < _COMMON_INDENT_MIN:
        return raw
    shallowest = [line[indent:] for line in lines if line.strip() and not line[indent:].startswith(b" ")]
    if all(line.startswith(b'File "') for line in shallowest):
        return raw
    return b"\n".join(line[indent:] for line in lines)
